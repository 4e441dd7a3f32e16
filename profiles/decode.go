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
		return nil, yamlError(file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, yamlError(file, err)
		}
		return nil, &Error{File: file, Line: extra.Line, Msg: "file holds more than one YAML document (---); keep exactly one profile per file"}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, &Error{File: file, Line: doc.Line, Msg: "file must hold exactly one YAML document"}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: file, Line: root.Line, Msg: "top level must be a mapping of keys (name: ..., image: ...), got " + describe(root)}
	}
	return root, nil
}

// decoder decodes yaml.Node trees into structs by their yaml tags, strictly:
// unknown keys, repeated keys, aliases and values of the wrong type are errors
// that carry the line they are on.
type decoder struct {
	file string
	// lines maps the dotted path of every key that was set ("limits.cpus")
	// to the line of its value, for validation errors.
	lines map[string]int
}

func (d *decoder) errf(line int, format string, args ...any) *Error {
	return &Error{File: d.file, Line: line, Msg: fmt.Sprintf(format, args...)}
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

// decodeStruct decodes the mapping n into the struct rv. Keys absent from n
// leave their field as it was, so callers pre-fill rv with defaults.
func (d *decoder) decodeStruct(n *yaml.Node, rv reflect.Value, path string) error {
	if n.Kind != yaml.MappingNode {
		return d.typeErr(n, path, "a mapping of keys")
	}
	keys, index := structKeys(rv.Type())
	seen := make(map[string]int)
	where := ""
	if path != "" {
		where = " in " + path
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return d.errf(k.Line, "keys%s must be plain words, got %s; allowed keys: %s", where, describe(k), strings.Join(keys, ", "))
		}
		if first, dup := seen[k.Value]; dup {
			return d.errf(k.Line, "key %q%s is repeated (first set on line %d); keep only one", k.Value, where, first)
		}
		seen[k.Value] = k.Line
		fi, ok := index[k.Value]
		if !ok || k.ShortTag() != "!!str" {
			return d.errf(k.Line, "unknown key %q%s; allowed keys: %s", k.Value, where, strings.Join(keys, ", "))
		}
		full := k.Value
		if path != "" {
			full = path + "." + k.Value
		}
		d.lines[full] = v.Line
		if err := d.decodeValue(v, rv.Field(fi), full); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) decodeValue(v *yaml.Node, fv reflect.Value, path string) error {
	if v.Kind == yaml.AliasNode {
		return d.errf(v.Line, "%s uses a YAML alias (*%s); aliases are not supported, write the value out", path, v.Value)
	}
	if fv.Type() == durationType {
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
			return d.typeErr(v, path, "a duration such as 5s, 500ms or 2m")
		}
		x, err := time.ParseDuration(v.Value)
		if err != nil {
			return d.errf(v.Line, "%s is %q, which is not a duration; write it like 5s, 500ms or 2m", path, v.Value)
		}
		fv.SetInt(int64(x))
		return nil
	}
	switch fv.Kind() {
	case reflect.Struct:
		return d.decodeStruct(v, fv, path)
	case reflect.String:
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
			return d.typeErr(v, path, "a string")
		}
		fv.SetString(v.Value)
	case reflect.Int, reflect.Int64:
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" {
			return d.typeErr(v, path, "a whole number")
		}
		var x int64
		if err := v.Decode(&x); err != nil || fv.OverflowInt(x) {
			return d.errf(v.Line, "%s is %s, which does not fit in a 64-bit integer", path, v.Value)
		}
		fv.SetInt(x)
	case reflect.Float64:
		if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!int" && v.ShortTag() != "!!float") {
			return d.typeErr(v, path, "a number")
		}
		var x float64
		if err := v.Decode(&x); err != nil {
			return d.errf(v.Line, "%s is %s, which is not a usable number", path, v.Value)
		}
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return d.errf(v.Line, "%s is %s; it must be a finite number", path, v.Value)
		}
		fv.SetFloat(x)
	case reflect.Slice:
		if v.Kind != yaml.SequenceNode {
			return d.typeErr(v, path, listOf(fv.Type().Elem()))
		}
		out := reflect.MakeSlice(fv.Type(), 0, len(v.Content))
		for i, item := range v.Content {
			el := reflect.New(fv.Type().Elem()).Elem()
			itemPath := fmt.Sprintf("%s[%d]", path, i)
			d.lines[itemPath] = item.Line
			if err := d.decodeValue(item, el, itemPath); err != nil {
				return err
			}
			out = reflect.Append(out, el)
		}
		if out.Len() > 0 { // an empty list stays nil, like an omitted one
			fv.Set(out)
		}
	default:
		// Only reachable if a field of an unsupported kind gets a yaml tag.
		return d.errf(v.Line, "%s: internal error: cannot decode into %s", path, fv.Type())
	}
	return nil
}

var durationType = reflect.TypeFor[time.Duration]()

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

func (d *decoder) typeErr(v *yaml.Node, path, want string) *Error {
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
		return d.errf(v.Line, "%s has no value; it must be %s (remove the key to use the default)", path, want)
	}
	hint := ""
	if want == "a string" && v.Kind == yaml.ScalarNode {
		hint = "; put it in quotes"
	}
	return d.errf(v.Line, "%s must be %s, got %s%s", path, want, describe(v), hint)
}

// describe names what a node holds, for error messages.
func describe(n *yaml.Node) string { return yamlfile.Describe(n) }

// yamlFile is one file of a profiles subdirectory.
type yamlFile struct {
	path string
	data []byte
}

// readYAMLFiles reads the *.yaml files among entries (a listing of dir, in
// name order), skipping directories and dot files. A *.yml file is refused
// rather than silently ignored. kind names the files in errors ("exec
// profiles"), item one of them ("profile").
func readYAMLFiles(dir string, entries []os.DirEntry, kind, item string) ([]yamlFile, error) {
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
			return nil, &Error{File: file, Msg: fmt.Sprintf("%s must end in .yaml; rename it to %s.yaml", kind, strings.TrimSuffix(name, ".yml"))}
		default:
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, &Error{File: file, Msg: fmt.Sprintf("cannot read %s: %v", item, unwrapPath(err))}
		}
		out = append(out, yamlFile{path: file, data: data})
	}
	return out, nil
}
