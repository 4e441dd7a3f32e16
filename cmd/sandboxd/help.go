package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
)

// helpArgs are the arguments that ask a command for its usage.
var helpArgs = []string{"-h", "-help", "--help"}

// asksHelp reports whether args ask for help before any "--" (after it,
// "--help" is a name, such as a directory).
func asksHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if slices.Contains(helpArgs, a) {
			return true
		}
	}
	return false
}

// groupHelp reports whether the first argument of a command group
// ("sandboxd profiles --help") asks for its usage.
func groupHelp(args []string) bool {
	return len(args) > 0 && (args[0] == "help" || slices.Contains(helpArgs, args[0]))
}

// parseFlags parses args with fs, whose name is the command's ("profiles
// check"). -h or --help anywhere before "--" (after the other arguments
// too) prints usage and the flags to stdout; a flag that does not parse
// prints the problem and usage to stderr. done is true when the command
// should stop, with the exit code: 0 for help, 2 for a usage error.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stdout, stderr io.Writer) (done bool, code int) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if asksHelp(args) {
		printUsage(fs, usage, stdout)
		return true, 0
	}
	err := fs.Parse(args)
	switch {
	case err == nil:
		return false, 0
	case errors.Is(err, flag.ErrHelp):
		printUsage(fs, usage, stdout)
		return true, 0
	}
	fmt.Fprintf(stderr, "sandboxd %s: %v\n", fs.Name(), err)
	printUsage(fs, usage, stderr)
	return true, 2
}

// printUsage writes usage and, when fs has any, its flags.
func printUsage(fs *flag.FlagSet, usage string, w io.Writer) {
	fmt.Fprint(w, usage)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintln(w, "flags:")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}
