package profiles

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/egress"
)

// EgressNames returns the egress profile names, sorted.
func (s *Set) EgressNames() []string {
	names := make([]string, 0, len(s.Egress))
	for n := range s.Egress {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// loadEgress reads and validates every egress/*.yaml file under dir (see
// profiles/egress/web-research.yaml for the format) and checks that every
// exec profile names a loaded egress profile. The profile "none" (no rules:
// deny everything) always exists: when egress/none.yaml is absent, or the
// egress/ dir is, it is built in. Files are read in name order, like exec/;
// the first problem is returned as an *Error.
func loadEgress(dir string, execs map[string]*Exec) (map[string]*egress.Profile, error) {
	egressDir := filepath.Join(dir, "egress")
	out := make(map[string]*egress.Profile)
	entries, err := os.ReadDir(egressDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, &Error{File: egressDir, Msg: fmt.Sprintf("cannot read the egress profiles dir: %v", unwrapPath(err))}
	}
	files, err := readYAMLFiles(egressDir, entries, "egress profiles", "profile")
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		file, data := f.path, f.data
		p, err := parseEgress(file, data)
		if err != nil {
			return nil, err
		}
		out[p.Name] = p
	}
	if _, ok := out[egress.NoneName]; !ok {
		out[egress.NoneName] = egress.None()
	}
	for _, name := range slices.Sorted(maps.Keys(execs)) {
		e := execs[name]
		if _, ok := out[e.Egress]; !ok {
			return nil, &Error{File: e.Source, Line: topKeyLine(e.Source, "egress"), Msg: fmt.Sprintf("egress %q names no egress profile; add egress/%s.yaml or use one of: %s", e.Egress, e.Egress, strings.Join(slices.Sorted(maps.Keys(out)), ", "))}
		}
	}
	return out, nil
}

// topKeyLine returns the line of a top-level key in a YAML file, or 0.
func topKeyLine(file, key string) int {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	root, err := parseDocument(file, data)
	if err != nil {
		return 0
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == key {
			return root.Content[i+1].Line
		}
	}
	return 0
}

// unquotedWildcard matches a list item or flow entry that starts with an
// unquoted '*', which YAML reads as an alias.
var unquotedWildcard = regexp.MustCompile(`(?m)(^\s*-\s*|[\[,]\s*)\*`)

// parseEgress decodes, defaults, validates and versions one egress
// profile. file is used in errors and must end in NAME.yaml.
func parseEgress(file string, data []byte) (*egress.Profile, error) {
	root, err := parseDocument(file, data)
	if err != nil {
		var perr *Error
		if errors.As(err, &perr) && strings.HasPrefix(perr.Msg, "invalid YAML") && unquotedWildcard.Match(data) {
			perr.Msg += `; host wildcards must be quoted, as in - "*.example.com" (an unquoted * starts a YAML alias)`
		}
		return nil, err
	}
	if err := refuseEmptyRuleLists(file, root); err != nil {
		return nil, err
	}
	d := &decoder{file: file, lines: make(map[string]int)}
	p := egress.Defaults()
	if err := d.decodeStruct(root, reflect.ValueOf(&p).Elem(), ""); err != nil {
		return nil, err
	}
	base := strings.TrimSuffix(filepath.Base(file), ".yaml")
	switch {
	case p.Name == "":
		return nil, d.errf(0, "name is required; set name: %s (the file name without .yaml)", base)
	case p.Name != base:
		return nil, d.errf(d.lines["name"], "name %q does not match the file name %q; rename the file to %s.yaml or set name: %s", p.Name, filepath.Base(file), p.Name, base)
	}
	if err := p.Compile(); err != nil {
		var fe *egress.FieldError
		if !errors.As(err, &fe) {
			return nil, d.errf(0, "%v", err)
		}
		msg := fe.Msg
		if strings.Contains(fe.Path, "[") {
			msg = fe.Path + ": " + msg
		}
		return nil, d.errf(lineOf(d.lines, fe.Path), "%s", msg)
	}
	p.Source = file
	return &p, nil
}

// lineOf returns the line of path, or of the nearest enclosing path that
// has one ("allow[1].hosts" for "allow[1].hosts[3]" when the list is
// written on one line).
func lineOf(lines map[string]int, path string) int {
	for path != "" {
		if l, ok := lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

// refuseEmptyRuleLists rejects "hosts: []", "ports: []" and "methods: []"
// in a rule. The decoder reads an empty list as an omitted key, which for
// ports and methods means the defaults: an author who wrote [] to mean
// "none" would get 80, 443 and GET, HEAD instead.
func refuseEmptyRuleLists(file string, root *yaml.Node) error {
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if (k.Value != "allow" && k.Value != "deny") || v.Kind != yaml.SequenceNode {
			continue
		}
		for j, item := range v.Content {
			if item.Kind != yaml.MappingNode {
				continue
			}
			for m := 0; m+1 < len(item.Content); m += 2 {
				key, val := item.Content[m], item.Content[m+1]
				if val.Kind == yaml.SequenceNode && len(val.Content) == 0 {
					return &Error{File: file, Line: val.Line, Msg: fmt.Sprintf("%s[%d].%s is an empty list; remove the key to use the default, or list values (a rule that should match nothing should be removed)", k.Value, j, key.Value)}
				}
			}
		}
	}
	return nil
}
