package profiles

import (
	"github.com/sandboxd/sandboxd/internal/yamlfile"
	"regexp"
	"strconv"
	"strings"
)

// Error is a problem in a profile file, as "file:line: problem". Load and
// Check return the first one they find as *Error.
type Error = yamlfile.Error

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
