// Package yamlfile holds what the YAML files security teams edit (profiles,
// keys) share: an error that points at a file and line, and plain words for
// what a YAML node holds, for messages that say what was found.
package yamlfile

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Error is a problem in a YAML file, rendered as "file:line: problem".
type Error struct {
	// File is the path of the offending file, as the caller named it.
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
