// Package e2e is the harness of sandboxd's end-to-end suites (tests/,
// tests/security, tests/engine and the e2e tests of cmd/sandboxd): it
// builds the real binaries once per test process, writes keys files,
// starts `sandboxd serve` on a free loopback port and waits for it, sends
// raw HTTP requests, decodes exec answers into the suites' own view of the
// wire, and looks at the containers sandboxd makes and at the host.
//
// The types of exec requests and answers here are deliberately the tests'
// own copy of the wire format, not the service's: a change of the service's
// types that changes the wire must break the suites. Nothing here imports
// the service's HTTP layer.
//
// It is a normal (non-test) package so that every suite can import it; only
// tests use it.
package e2e
