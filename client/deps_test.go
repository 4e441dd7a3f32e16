package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestClientIsLight fails when the client (or the api package it speaks)
// pulls in a package that is not the standard library's or its own: a
// program that only wants the Go client must not compile the server.
func TestClientIsLight(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is not on PATH: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/sandboxd/sandboxd/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{"github.com/sandboxd/sandboxd/client": true, "github.com/sandboxd/sandboxd/api": true}
	for _, p := range strings.Fields(string(out)) {
		if !allowed[p] {
			t.Errorf("the client depends on %s; it may import only the standard library and api/", p)
		}
	}
}
