// Package yamlfile holds what the YAML files security teams edit (profiles,
// keys) share: an error and a warning that point at a file, line and
// column, reading a file into such an error, a list of errors reported
// together, "did you mean" suggestions for misspelt keys, plain words for
// what a YAML node holds, and the YAML parser's errors in words that say
// what to change.
package yamlfile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error is a problem in a YAML file, rendered as "file:line:column: problem".
type Error struct {
	// File is the path of the offending file, as the caller named it.
	File string
	// Line is the 1-based line of the offending key or value, or 0 when the
	// problem has no single line (a missing key, an unreadable file).
	Line int
	// Column is the 1-based column on Line, or 0 when unknown.
	Column int
	// Msg says what is wrong and what is allowed.
	Msg string
}

// Error returns "file:line:column: problem", leaving out the column or
// the line when they are 0.
func (e *Error) Error() string { return location(e.File, e.Line, e.Column) + e.Msg }

// ReadFile reads file. A failure is an *Error that names the file once
// and says what could not be read ("the keys file").
func ReadFile(file, what string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, &Error{File: file, Msg: fmt.Sprintf("cannot read %s: %v", what, StripPath(err))}
	}
	return data, nil
}

// StripPath drops the path from an *fs.PathError, for a message in an
// Error, which names the file already.
func StripPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Warning is a value that is allowed but deserves a second look (an
// allow_cidrs entry that opens an always-denied range). It never stops a
// load.
type Warning struct {
	File   string
	Line   int
	Column int
	Msg    string
}

// String returns "file:line:column: warning: message".
func (w Warning) String() string { return location(w.File, w.Line, w.Column) + "warning: " + w.Msg }

// location renders "file:line:column: " without the parts that are 0.
func location(file string, line, col int) string {
	switch {
	case line > 0 && col > 0:
		return fmt.Sprintf("%s:%d:%d: ", file, line, col)
	case line > 0:
		return fmt.Sprintf("%s:%d: ", file, line)
	}
	return file + ": "
}

// Errors is every problem found in one or more files, in the order found
// (by file, then by position). errors.As finds its first *Error.
type Errors []*Error

// Error returns one problem per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems, for errors.As and errors.Is.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Kind names what a node holds without its value ("a string"), for values
// that must never be echoed, such as keys.
func Kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias (aliases are not supported)"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return "a string"
		case "!!int", "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		case "!!null":
			return "no value"
		}
		return "a scalar"
	}
	return "an empty node"
}

// Describe names what a node holds, with the value of a scalar
// (`the string "x"`, `the number 3`).
func Describe(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return Kind(n)
	}
	switch n.ShortTag() {
	case "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	case "!!int", "!!float":
		return "the number " + n.Value
	case "!!bool":
		return "the boolean " + n.Value
	case "!!null":
		return "no value"
	}
	return fmt.Sprintf("%q", n.Value)
}

// parserLine matches the position prefix yaml.v3 puts on syntax errors.
var parserLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// SyntaxError turns an error from the YAML parser on data into errors
// at their lines. A tab in a line's indentation, which YAML forbids and the
// parser reports in its own words ("found character that cannot start any
// token", at times a line off), is named as such with its line and column,
// every one of them at once.
func SyntaxError(file string, data []byte, err error) Errors {
	if tabs := tabErrors(file, data); len(tabs) > 0 {
		return tabs
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := parserLine.FindStringSubmatch(err.Error()); m != nil {
		if n, convErr := strconv.Atoi(m[1]); convErr == nil {
			line, msg = n, m[2]
		}
	}
	return Errors{{File: file, Line: line, Msg: "invalid YAML: " + msg}}
}

// tabMessage is the problem of a tab in a line's indentation.
const tabMessage = "tabs are not allowed for indentation in YAML; use spaces"

// tabErrors returns an *Error for every line of data whose indentation
// (the spaces and "- " list markers before its first other character)
// holds a tab. Lines of a block scalar (after "key: |" or "key: >") that
// are indented further than its key are content, where tabs are allowed.
func tabErrors(file string, data []byte) Errors {
	var out Errors
	blockIndent := -1 // indentation of the key that opened a block scalar
	for i, text := range bytes.Split(data, []byte("\n")) {
		spaces := len(text) - len(bytes.TrimLeft(text, " "))
		if blockIndent >= 0 {
			rest := bytes.TrimLeft(text, " \t\r")
			if len(rest) == 0 || spaces > blockIndent {
				continue
			}
			blockIndent = -1
		}
		if col := tabInIndent(text); col > 0 {
			out = append(out, &Error{File: file, Line: i + 1, Column: col, Msg: tabMessage})
			continue
		}
		if opensBlockScalar(text) {
			blockIndent = spaces
		}
	}
	return out
}

// tabInIndent returns the 1-based column of the first tab before the
// first character of text that is not a space, a tab or a list marker
// ("- "), or 0.
func tabInIndent(text []byte) int {
	indent := len(text) - len(bytes.TrimLeft(text, " \t-"))
	if i := bytes.IndexByte(text[:indent], '\t'); i >= 0 {
		return i + 1
	}
	return 0
}

// blockScalar matches a line that ends in a block scalar indicator
// ("description: |", "- >-", "text: |2+"), comments aside.
var blockScalar = regexp.MustCompile(`(^|[:\-]\s+)[|>][0-9+\-]*\s*(#.*)?$`)

func opensBlockScalar(line []byte) bool {
	return blockScalar.Match(bytes.TrimRight(line, " \t\r"))
}
