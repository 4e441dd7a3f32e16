//go:build !cgo

package seccompbpf

import "errors"

// ErrNoCgo: compiling a filter needs libseccomp, so cgo.
var ErrNoCgo = errors.New("seccomp filters are compiled with libseccomp, which needs a build with cgo (make build)")

// Compile needs cgo; this build has none.
func Compile(string, []byte, string) (*Report, error) { return nil, ErrNoCgo }

// KernelRelease needs cgo in this package; this build has none.
func KernelRelease() string { return "" }
