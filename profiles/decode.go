package profiles

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/internal/yamlfile"
)

// parseDocument parses data as exactly one YAML document whose root is a
// mapping and returns that mapping node.
func parseDocument(file string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: file, Msg: "file has no YAML content; write the profile as a mapping of keys (see profiles/exec/default.yaml)"}
		}
		return nil, yamlfile.SyntaxError(file, data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, yamlfile.SyntaxError(file, data, err)
		}
		return nil, &Error{File: file, Line: extra.Line, Msg: "file holds more than one YAML document (---); keep exactly one profile per file"}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, &Error{File: file, Line: doc.Line, Msg: "file must hold exactly one YAML document"}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: file, Line: root.Line, Column: root.Column, Msg: "top level must be a mapping of keys (name: ..., image: ...), got " + describe(root)}
	}
	return root, nil
}

// pos is a place in a file: 1-based line and column (0 when unknown).
type pos struct{ line, col int }

func at(n *yaml.Node) pos { return pos{n.Line, n.Column} }

// decoder decodes yaml.Node trees into structs by their yaml tags, strictly:
// unknown keys, repeated keys, aliases and values of the wrong type are
// problems that carry their line and column. It does not stop at the first
// problem: it records each one, leaves the refused value at its default
// and goes on, so that one run reports every mistake in a file.
type decoder struct {
	file string
	// at maps the path of every key that was set ("limits.cpus",
	// "allow[0].hosts[1]") to the position of its value.
	at map[string]pos
	// bad holds the paths whose value was refused while decoding (and the
	// keys a misspelt key was taken for): checks of what they hold are
	// skipped, so that one mistake is reported once.
	bad map[string]bool
	// rangeOf returns the allowed range of a number or duration, in words,
	// by its path without list indices ("allow.ports"), or "".
	rangeOf func(path string) string
	errs    Errors
}

func newDecoder(file string, rangeOf func(string) string) *decoder {
	if rangeOf == nil {
		rangeOf = func(string) string { return "" }
	}
	return &decoder{file: file, at: make(map[string]pos), bad: make(map[string]bool), rangeOf: rangeOf}
}

// fail records a problem at p.
func (d *decoder) fail(p pos, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: p.line, Column: p.col, Msg: fmt.Sprintf(format, args...)})
}

// refuse records a problem with the value at path (at p) and marks path bad.
func (d *decoder) refuse(path string, p pos, format string, args ...any) {
	d.bad[path] = true
	d.fail(p, format, args...)
}

// problem records a problem found by a check of the decoded values, at the
// position of path (or of the nearest enclosing path that has one; none
// for a key that was not set). It is dropped when path, or a path that
// encloses it, was refused while decoding: its value is then a default
// standing in for the refused one.
func (d *decoder) problem(path, format string, args ...any) {
	if d.covered(path) {
		return
	}
	d.fail(posOf(d.at, path), format, args...)
}

// covered reports whether path or a path enclosing it was refused.
func (d *decoder) covered(path string) bool {
	for p := path; p != ""; {
		if d.bad[p] {
			return true
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return false
}

// posOf returns the position of path, or of the nearest enclosing path
// that has one ("allow[1].hosts" for "allow[1].hosts[3]" when the list is
// written on one line).
func posOf(at map[string]pos, path string) pos {
	for path != "" {
		if p, ok := at[path]; ok {
			return p
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return pos{}
}

// structKeys returns the yaml keys of t's fields in declaration order, with
// the index of the field each names. Fields tagged "-" are not decodable.
func structKeys(t reflect.Type) (keys []string, index map[string]int) {
	index = make(map[string]int)
	for i := 0; i < t.NumField(); i++ {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" {
			continue
		}
		keys = append(keys, tag)
		index[tag] = i
	}
	return keys, index
}

// join appends key to the path of its mapping.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// decodeStruct decodes the mapping n into the struct rv. Keys absent from n
// leave their field as it was, so callers pre-fill rv with defaults.
func (d *decoder) decodeStruct(n *yaml.Node, rv reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.typeErr(n, path, "a mapping of keys")
		return
	}
	keys, index := structKeys(rv.Type())
	seen := make(map[string]int)
	var guessed []string
	where := ""
	if path != "" {
		where = " in " + path
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.fail(at(k), "keys%s must be plain words, got %s; allowed keys: %s", where, describe(k), strings.Join(keys, ", "))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.fail(at(k), "key %q%s is repeated (first set on line %d); keep only one", k.Value, where, first)
			continue
		}
		seen[k.Value] = k.Line
		fi, ok := index[k.Value]
		if !ok || k.ShortTag() != "!!str" {
			hint, guess := unknownKeyHint(k.Value, rv.Type(), keys)
			if guess != "" {
				guessed = append(guessed, guess)
			}
			d.fail(at(k), "unknown key %q%s%s (allowed keys: %s)", k.Value, where, hint, strings.Join(keys, ", "))
			continue
		}
		full := join(path, k.Value)
		d.at[full] = at(v)
		d.decodeValue(v, rv.Field(fi), full)
	}
	// A misspelt key stands for the key it was taken for: "image is
	// required" would repeat the problem already reported.
	for _, g := range guessed {
		if _, set := seen[g]; !set {
			d.bad[join(path, g)] = true
		}
	}
}

// unknownKeyHint says what an unknown key was likely meant to be: a key of
// this mapping it is a misspelling of ("; did you mean allow_cidrs?",
// returned as guess too), or a key of a nested mapping it belongs under
// ("; memory_mb belongs under limits:").
func unknownKeyHint(key string, t reflect.Type, keys []string) (hint, guess string) {
	if g := yamlfile.Suggest(key, keys); g != "" {
		return fmt.Sprintf("; did you mean %s?", g), g
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" || f.Type.Kind() != reflect.Struct || f.Type == durationType {
			continue
		}
		if nested, _ := structKeys(f.Type); slices.Contains(nested, key) {
			return fmt.Sprintf("; %s belongs under %s: (%s.%s)", key, tag, tag, key), ""
		}
	}
	return "", ""
}

func (d *decoder) decodeValue(v *yaml.Node, fv reflect.Value, path string) {
	if v.Kind == yaml.AliasNode {
		d.refuse(path, at(v), "%s uses a YAML alias (*%s); aliases are not supported, write the value out", path, v.Value)
		return
	}
	if fv.Type() == durationType {
		d.decodeDuration(v, fv, path)
		return
	}
	switch fv.Kind() {
	case reflect.Struct:
		d.decodeStruct(v, fv, path)
	case reflect.String:
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
			d.typeErr(v, path, "a string")
			return
		}
		fv.SetString(v.Value)
	case reflect.Int, reflect.Int64:
		d.decodeInt(v, fv, path)
	case reflect.Float64:
		d.decodeFloat(v, fv, path)
	case reflect.Slice:
		d.decodeSlice(v, fv, path)
	default:
		// Only reachable if a field of an unsupported kind gets a yaml tag.
		d.refuse(path, at(v), "%s: internal error: cannot decode into %s", path, fv.Type())
	}
}

func (d *decoder) decodeDuration(v *yaml.Node, fv reflect.Value, path string) {
	const want = "a duration such as 5s, 500ms or 2m"
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		d.typeErr(v, path, want)
		return
	}
	x, err := time.ParseDuration(v.Value)
	if err != nil {
		d.refuse(path, at(v), "%s is %q, which is not a duration; write it like 5s, 500ms or 2m%s", path, v.Value, d.allowed(path))
		return
	}
	fv.SetInt(int64(x))
}

func (d *decoder) decodeInt(v *yaml.Node, fv reflect.Value, path string) {
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" {
		d.typeErr(v, path, "a whole number")
		return
	}
	var x int64
	if err := v.Decode(&x); err != nil || fv.OverflowInt(x) {
		d.refuse(path, at(v), "%s is %s, which does not fit in a 64-bit integer%s", path, v.Value, d.allowed(path))
		return
	}
	fv.SetInt(x)
}

func (d *decoder) decodeFloat(v *yaml.Node, fv reflect.Value, path string) {
	if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!int" && v.ShortTag() != "!!float") {
		d.typeErr(v, path, "a number")
		return
	}
	var x float64
	if err := v.Decode(&x); err != nil {
		d.refuse(path, at(v), "%s is %s, which is not a usable number%s", path, v.Value, d.allowed(path))
		return
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		d.refuse(path, at(v), "%s is %s; it must be a finite number%s", path, v.Value, d.allowed(path))
		return
	}
	fv.SetFloat(x)
}

// decodeSlice decodes a list item by item. A refused item is kept as the
// zero value, so that the list keeps its length and later items their
// indices, and checks of it are skipped.
func (d *decoder) decodeSlice(v *yaml.Node, fv reflect.Value, path string) {
	if v.Kind != yaml.SequenceNode {
		d.typeErr(v, path, listOf(fv.Type().Elem()))
		return
	}
	out := reflect.MakeSlice(fv.Type(), 0, len(v.Content))
	for i, item := range v.Content {
		el := reflect.New(fv.Type().Elem()).Elem()
		itemPath := fmt.Sprintf("%s[%d]", path, i)
		d.at[itemPath] = at(item)
		d.decodeValue(item, el, itemPath)
		out = reflect.Append(out, el)
	}
	if out.Len() > 0 { // an empty list stays nil, like an omitted one
		fv.Set(out)
	}
}

// allowed returns "; allowed is RANGE" for a path that has a range, or "".
func (d *decoder) allowed(path string) string {
	if r := d.rangeOf(stripIndices(path)); r != "" {
		return "; allowed is " + r
	}
	return ""
}

var durationType = reflect.TypeFor[time.Duration]()

// indices matches the list indices of a path.
var indices = regexp.MustCompile(`\[\d+\]`)

// stripIndices turns "allow[0].ports[1]" into "allow.ports".
func stripIndices(path string) string { return indices.ReplaceAllString(path, "") }

// listOf says what a list of t holds, for type errors.
func listOf(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a list of durations"
	case t.Kind() == reflect.String:
		return "a list of strings, such as [numpy, pandas]"
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		return "a list of whole numbers, such as [80, 443]"
	case t.Kind() == reflect.Struct:
		return "a list of mappings (each item starts with \"- key: value\")"
	}
	return "a list"
}

// typeErr refuses the value at path, which is not what the field holds
// (want). For a number or duration the message gives the allowed range,
// and for a string that reads as a size or a duration ("10MB", "10s") the
// number to write instead.
func (d *decoder) typeErr(v *yaml.Node, path, want string) {
	allowed := d.allowed(path)
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
		d.refuse(path, at(v), "%s has no value; it must be %s (remove the key to use the default)%s", path, want, allowed)
		return
	}
	hint := ""
	switch tag := v.ShortTag(); {
	case v.Kind != yaml.ScalarNode:
	case want == "a string":
		hint = "; put it in quotes"
	case tag == "!!str":
		hint = numberHint(path, v.Value)
	case strings.HasPrefix(want, "a duration") && (tag == "!!int" || tag == "!!float"):
		hint = fmt.Sprintf("; durations need a unit, as in %ss or %sms", v.Value, v.Value)
	}
	d.refuse(path, at(v), "%s must be %s, got %s%s%s", path, want, describe(v), allowed, hint)
}

// sizeRe matches a size with a unit: 10MB, 1.5 GiB, 64k.
var sizeRe = regexp.MustCompile(`(?i)^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt])(i?)b?\s*$`)

// numberHint returns what to write instead of s in a number field named by
// path: the bytes of a size in a *_bytes field ("10MB"), the MiB of a size
// in a *_mb field, the milliseconds or seconds of a duration in a *_ms or
// *_s field. It returns "" when s is none of these.
func numberHint(path, s string) string {
	switch {
	case strings.HasSuffix(path, "_bytes"):
		if m := sizeRe.FindStringSubmatch(s); m != nil {
			n, _ := strconv.ParseFloat(m[1], 64)
			exp := float64(strings.Index("kmgt", strings.ToLower(m[2])) + 1)
			dec, bin := int64(n*math.Pow(1000, exp)), int64(n*math.Pow(1024, exp))
			unit := strings.ToUpper(m[2])
			return fmt.Sprintf("; write the number of bytes: %d for %s %sB, %d for %s %siB", dec, m[1], unit, bin, m[1], unit)
		}
	case strings.HasSuffix(path, "_mb"):
		if m := sizeRe.FindStringSubmatch(s); m != nil {
			n, _ := strconv.ParseFloat(m[1], 64)
			exp := float64(strings.Index("kmgt", strings.ToLower(m[2])) - 1)
			return fmt.Sprintf("; write the number of MiB: %s for %s %siB", strconv.FormatFloat(n*math.Pow(1024, exp), 'f', -1, 64), m[1], strings.ToUpper(m[2]))
		}
	case strings.HasSuffix(path, "_ms"), strings.HasSuffix(path, "_s"):
		if x, err := time.ParseDuration(strings.TrimSpace(s)); err == nil {
			if strings.HasSuffix(path, "_ms") {
				return fmt.Sprintf("; write the number of milliseconds: %d for %s", x.Milliseconds(), s)
			}
			return fmt.Sprintf("; write the number of seconds: %s for %s", strconv.FormatFloat(x.Seconds(), 'f', -1, 64), s)
		}
	}
	return ""
}

// describe names what a node holds, for error messages.
func describe(n *yaml.Node) string { return yamlfile.Describe(n) }

// yamlFile is one file of a profiles subdirectory: its content, or the
// problem that keeps it from being read.
type yamlFile struct {
	path string
	data []byte
	err  *Error
}

// readYAMLFiles reads the *.yaml files among entries (a listing of dir, in
// name order), skipping directories and dot files. A *.yml file is refused
// rather than silently ignored, as is a file that cannot be read: they are
// returned in their place with err set. kind names the files in errors
// ("exec profiles"), item one of them ("profile").
func readYAMLFiles(dir string, entries []os.DirEntry, kind, item string) []yamlFile {
	var out []yamlFile
	for _, ent := range entries {
		name := ent.Name()
		if ent.IsDir() || strings.HasPrefix(name, ".") {
			continue
		}
		file := filepath.Join(dir, name)
		switch filepath.Ext(name) {
		case ".yaml":
		case ".yml":
			out = append(out, yamlFile{path: file, err: &Error{File: file, Msg: fmt.Sprintf("%s must end in .yaml; rename it to %s.yaml", kind, strings.TrimSuffix(name, ".yml"))}})
			continue
		default:
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil {
			out = append(out, yamlFile{path: file, err: &Error{File: file, Msg: fmt.Sprintf("cannot read %s: %v", item, yamlfile.StripPath(err))}})
			continue
		}
		out = append(out, yamlFile{path: file, data: data})
	}
	return out
}
