//go:build !cgo

package main

import (
	"fmt"
	"io"
)

// seccompCmd needs libseccomp, which needs cgo: this binary was built
// without it.
func seccompCmd(args []string, stdout, stderr io.Writer) int {
	if groupHelp(args) || asksHelp(args) {
		fmt.Fprint(stdout, "usage: sandboxd seccomp check [FILE] (needs a build with cgo and libseccomp)\n")
		return 0
	}
	fmt.Fprintln(stderr, "sandboxd seccomp: this binary was built without cgo, so without libseccomp; build it with `make build` (CGO_ENABLED=1 and libseccomp-dev)")
	return 1
}
