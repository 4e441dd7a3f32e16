//go:build cgo

package main

// sandboxd seccomp check [FILE]: compiles a seccomp profile in Docker's JSON
// format with libseccomp for this host's architecture, the way Docker and
// runc would for a sandbox (no capabilities), and reports what it became.

import (
	"fmt"
	"io"
	"strings"

	"github.com/sandboxd/sandboxd/internal/seccompbpf"
)

// defaultSeccompFile is what `sandboxd seccomp check` checks without FILE.
const defaultSeccompFile = "profiles/seccomp/default.json"

const seccompUsage = "usage: sandboxd seccomp check [FILE]   (default " + defaultSeccompFile + ")\n"

func seccompCmd(args []string, stdout, stderr io.Writer) int {
	if groupHelp(args) || asksHelp(args) {
		fmt.Fprint(stdout, seccompUsage)
		return 0
	}
	if len(args) > 1 && args[1] == "--" {
		args = append(args[:1], args[2:]...)
	}
	if len(args) == 0 || args[0] != "check" || len(args) > 2 {
		fmt.Fprint(stderr, seccompUsage)
		return 2
	}
	file := defaultSeccompFile
	if len(args) == 2 {
		file = args[1]
	}
	rep, err := seccompbpf.CheckFile(file)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	printReport(stdout, rep)
	return 0
}

func printReport(w io.Writer, r *seccompbpf.Report) {
	fmt.Fprintf(w, "%s: ok for %s with libseccomp %s\n", r.File, strings.Join(r.Arches, ", "), r.Libseccomp)
	fmt.Fprintf(w, "  rules: %d in the file, %d applied", r.Rules, r.Applied)
	var skipped []string
	for _, s := range []struct {
		n    int
		what string
	}{
		{r.OtherArch, "for other architectures"},
		{r.NeedsCap, "needing a capability (sandboxes have none)"},
		{r.KernelTooOld, "for newer kernels"},
		{r.SameAsDefault, "with the default action (no-ops)"},
	} {
		if s.n > 0 {
			skipped = append(skipped, fmt.Sprintf("%d %s", s.n, s.what))
		}
	}
	if len(skipped) > 0 {
		fmt.Fprintf(w, "; skipped: %s", strings.Join(skipped, ", "))
	}
	fmt.Fprintf(w, "\n  syscalls: %d added to the filter\n", r.Syscalls)
	if len(r.NewerThanLib) > 0 {
		fmt.Fprintf(w, "  note: %d names are newer than libseccomp %s and left out, as runc leaves them out: %s\n",
			len(r.NewerThanLib), r.Libseccomp, strings.Join(r.NewerThanLib, ", "))
	}
	fmt.Fprintf(w, "  BPF: %d instructions (%d bytes)\n", r.BPFInstructions, r.BPFInstructions*8)
}
