package profiles

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Error is a problem in a profile file. Load and Check return the first one
// they find as *Error.
type Error struct {
	// File is the path of the offending file, built from the dir given to
	// Load, so it is relative when that dir was relative.
	File string
	// Line is the 1-based line of the offending key or value, or 0 when the
	// problem has no single line (a missing key, an unreadable file).
	Line int
	// Msg says what is wrong and what is allowed.
	Msg string
}

// Error returns "file:line: problem", or "file: problem" when Line is 0.
func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// yamlLine matches the position prefix yaml.v3 puts on syntax errors.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError turns an error from the YAML parser into an *Error, lifting the
// line number out of the message when the parser gave one.
func yamlError(file string, err error) *Error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		if line, convErr := strconv.Atoi(m[1]); convErr == nil {
			return &Error{File: file, Line: line, Msg: "invalid YAML: " + m[2]}
		}
	}
	return &Error{File: file, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}
