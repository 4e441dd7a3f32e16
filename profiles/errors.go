package profiles

import (
	"cmp"
	"errors"
	"slices"

	"github.com/sandboxd/sandboxd/internal/yamlfile"
)

// Error is a problem in a profile file, as "file:line:column: problem".
type Error = yamlfile.Error

// Errors is every problem Load found in a profiles dir, by file and then
// by position. Load returns it as its error; errors.As finds its first
// *Error.
type Errors = yamlfile.Errors

// Warning is a value that loads but deserves a second look, such as an
// allow_cidrs entry that opens the cloud metadata service. Check returns
// warnings; Load puts them in Set.Warnings.
type Warning = yamlfile.Warning

// asErrors returns err as a list of problems.
func asErrors(err error) Errors {
	var list Errors
	if errors.As(err, &list) {
		return list
	}
	var one *Error
	if errors.As(err, &one) {
		return Errors{one}
	}
	return Errors{{Msg: err.Error()}}
}

// sortByPosition orders the problems of one file by line and column; those
// without a line (a missing key) come first.
func sortByPosition(errs Errors) {
	slices.SortStableFunc(errs, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
}

// dedupe drops repeated problems (a seccomp file two profiles name is
// reported once), keeping the first of each.
func dedupe(errs Errors) Errors {
	seen := make(map[string]bool, len(errs))
	out := errs[:0]
	for _, e := range errs {
		if s := e.Error(); !seen[s] {
			seen[s] = true
			out = append(out, e)
		}
	}
	return out
}
