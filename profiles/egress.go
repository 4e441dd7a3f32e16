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
	"github.com/sandboxd/sandboxd/internal/yamlfile"
)

// EgressNames returns the egress profile names, sorted.
func (s *Set) EgressNames() []string {
	return sortedNames(s.Egress)
}

// loadEgress reads and validates every egress/*.yaml file under dir (see
// profiles/egress/web-research.yaml for the format). The profile "none"
// (no rules: deny everything) always exists: when egress/none.yaml is
// absent, or the egress/ dir is, it is built in. Files are read in name
// order, like exec/. It returns the profiles that loaded, the names of
// every profile file found (loaded or not), the warnings of the loaded
// ones and every problem.
func loadEgress(dir string) (map[string]*egress.Profile, []string, []Warning, Errors) {
	egressDir := filepath.Join(dir, "egress")
	out := make(map[string]*egress.Profile)
	var errs Errors
	entries, err := os.ReadDir(egressDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, &Error{File: egressDir, Msg: fmt.Sprintf("cannot read the egress profiles dir: %v", yamlfile.StripPath(err))})
	}
	var names []string
	var warnings []Warning
	for _, f := range readYAMLFiles(egressDir, entries, "egress profiles", "profile") {
		if f.err != nil {
			errs = append(errs, f.err)
			continue
		}
		names = append(names, strings.TrimSuffix(filepath.Base(f.path), ".yaml"))
		p, w, ferrs := parseEgress(f.path, f.data)
		if len(ferrs) > 0 {
			errs = append(errs, ferrs...)
			continue
		}
		out[p.Name] = p
		warnings = append(warnings, w...)
	}
	if _, ok := out[egress.NoneName]; !ok && !slices.Contains(names, egress.NoneName) {
		out[egress.NoneName] = egress.None()
	}
	return out, names, warnings, errs
}

// LoadEgressFile reads and validates one egress profile file on its own,
// for trying a draft before it ships (`sandboxd profiles evaluate`): the
// rest of its profiles dir is not read. The file must be NAME.yaml and
// say name: NAME. It returns the compiled profile and its warnings, or
// every problem as Errors.
func LoadEgressFile(file string) (*egress.Profile, []Warning, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, Errors{{File: file, Msg: fmt.Sprintf("cannot read the egress profile: %v", yamlfile.StripPath(err))}}
	}
	if filepath.Ext(file) != ".yaml" {
		return nil, nil, Errors{{File: file, Msg: "egress profiles must end in .yaml"}}
	}
	p, warnings, errs := parseEgress(file, data)
	if len(errs) > 0 {
		return nil, nil, errs
	}
	return p, warnings, nil
}

// checkExecEgress checks that every exec profile names a loaded egress
// profile. One that names an egress file with problems of its own is not
// reported again.
func checkExecEgress(execs map[string]*Exec, egs map[string]*egress.Profile, egressFiles []string) Errors {
	var errs Errors
	for _, name := range slices.Sorted(maps.Keys(execs)) {
		e := execs[name]
		if _, ok := egs[e.Egress]; ok || slices.Contains(egressFiles, e.Egress) {
			continue
		}
		known := slices.Sorted(maps.Keys(egs))
		p := topKeyPos(e.Source, "egress")
		errs = append(errs, &Error{File: e.Source, Line: p.line, Column: p.col, Msg: fmt.Sprintf("egress %q names no egress profile; add egress/%s.yaml or use one of: %s", e.Egress, e.Egress, strings.Join(known, ", "))})
	}
	return errs
}

// topKeyPos returns the position of a top-level key's value in a YAML
// file, or no position.
func topKeyPos(file, key string) pos {
	data, err := os.ReadFile(file)
	if err != nil {
		return pos{}
	}
	root, err := parseDocument(file, data)
	if err != nil {
		return pos{}
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == key {
			return at(root.Content[i+1])
		}
	}
	return pos{}
}

// unquotedWildcard matches a list item or flow entry that starts with an
// unquoted '*', which YAML reads as an alias.
var unquotedWildcard = regexp.MustCompile(`(?m)(^\s*-\s*|[\[,]\s*)\*`)

// parseEgress decodes, defaults, validates and versions one egress
// profile, and returns its warnings and every problem it has. file is
// used in errors and must end in NAME.yaml.
func parseEgress(file string, data []byte) (*egress.Profile, []Warning, Errors) {
	root, err := parseDocument(file, data)
	if err != nil {
		errs := asErrors(err)
		if strings.HasPrefix(errs[0].Msg, "invalid YAML") && unquotedWildcard.Match(data) {
			errs[0].Msg += `; host wildcards must be quoted, as in - "*.example.com" (an unquoted * starts a YAML alias)`
		}
		return nil, nil, errs
	}
	d := newDecoder(file, egress.FieldRange)
	refuseEmptyRuleLists(d, root)
	p := egress.Defaults()
	d.decodeStruct(root, reflect.ValueOf(&p).Elem(), "")
	base := strings.TrimSuffix(filepath.Base(file), ".yaml")
	switch {
	case p.Name == "":
		d.problem("name", "name is required; set name: %s (the file name without .yaml)", base)
		d.bad["name"] = true // Compile would say it again
	case p.Name != base:
		d.problem("name", "name %q does not match the file name %q; rename the file to %s.yaml or set name: %s", p.Name, filepath.Base(file), p.Name, base)
		d.bad["name"] = true
	}
	var fes egress.FieldErrors
	if err := p.Compile(); errors.As(err, &fes) {
		for _, fe := range fes {
			msg := fe.Msg
			if strings.Contains(fe.Path, "[") {
				msg = fe.Path + ": " + msg
			}
			d.problem(fe.Path, "%s", msg)
		}
	} else if err != nil {
		d.problem("", "%v", err)
	}
	if len(d.errs) > 0 {
		sortByPosition(d.errs)
		return nil, nil, d.errs
	}
	p.Source = file
	var warnings []Warning
	for _, w := range p.Warnings() {
		wp := posOf(d.at, w.Path)
		warnings = append(warnings, Warning{File: file, Line: wp.line, Column: wp.col, Msg: w.Msg})
	}
	return &p, warnings, nil
}

// refuseEmptyRuleLists rejects "hosts: []", "ports: []" and "methods: []"
// in a rule. The decoder reads an empty list as an omitted key, which for
// ports and methods means the defaults: an author who wrote [] to mean
// "none" would get 80, 443 and GET, HEAD instead.
func refuseEmptyRuleLists(d *decoder, root *yaml.Node) {
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
					path := fmt.Sprintf("%s[%d].%s", k.Value, j, key.Value)
					d.refuse(path, at(val), "%s is an empty list; remove the key to use the default, or list values (a rule that should match nothing should be removed)", path)
				}
			}
		}
	}
}
