package profiles

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/yamlfile"
)

// DefaultName is the exec profile used when a request names none. Every
// profiles dir must have it (exec/default.yaml).
const DefaultName = "default"

// Set is a loaded, fully validated profiles dir.
type Set struct {
	// Dir is the profiles root the set was loaded from, as given to Load.
	Dir string
	// Exec maps profile name to exec profile. Every entry has its defaults
	// applied and Version, SeccompJSON and Source set. It always holds
	// DefaultName. Treat the set as read-only: it is shared by all requests.
	Exec map[string]*Exec
	// Egress maps name to compiled egress profile (egress/*.yaml). It
	// always holds "none" (deny everything), built in when no file
	// defines it.
	Egress map[string]*egress.Profile
	// Datasets maps name to dataset (datasets/*.yaml): host directories
	// execs may mount read-only.
	Datasets map[string]*Dataset
	// Warnings are values that load but deserve a second look (an
	// allow_cidrs entry that opens an always-denied range), by file. The
	// service logs them at every load.
	Warnings []Warning
}

// Names returns the exec profile names, sorted.
func (s *Set) Names() []string {
	return sortedNames(s.Exec)
}

// ProfilesByImage returns the images the exec profiles name, sorted, and
// for each the names of the profiles that use it, sorted.
func (s *Set) ProfilesByImage() (images []string, users map[string][]string) {
	users = map[string][]string{}
	for _, name := range s.Names() {
		img := s.Exec[name].Image
		if users[img] == nil {
			images = append(images, img)
		}
		users[img] = append(users[img], name)
	}
	slices.Sort(images)
	return images, users
}

// Report is what Check finds in a profiles dir: every problem of every
// file, and every warning.
type Report struct {
	// Set is the loaded set, or nil when there are Errors.
	Set *Set
	// Errors are the problems, by file (exec/, then egress/, then
	// datasets/, each in name order) and position.
	Errors Errors
	// Warnings are the values that load but deserve a second look.
	Warnings []Warning
}

// Load reads and validates the profiles dir: every exec/*.yaml file and the
// seccomp/*.json files they name, egress/*.yaml (see loadEgress) and
// datasets/*.yaml. Files in exec/ that do not end in .yaml, dot files and
// sub-directories are skipped; a .yml file is an error, so that a profile
// is never skipped silently.
//
// Any problem makes Load fail; the error is Errors, every problem of every
// file (see Check), and errors.As finds the first as *Error.
func Load(dir string) (*Set, error) {
	r := Check(dir)
	if len(r.Errors) > 0 {
		return nil, r.Errors
	}
	return r.Set, nil
}

// Check validates the profiles dir the way the service loads it, for
// `sandboxd profiles check DIR`. It does not stop at the first problem:
// each file is checked whole, and every file is checked, so that one run
// reports every mistake. A check that needs another file (the egress
// profile an exec profile names, the seccomp file) is skipped when that
// file has problems of its own.
func Check(dir string) *Report {
	set := &Set{Dir: dir}
	var errs Errors
	var execFiles []string
	set.Exec, execFiles, errs = loadExec(dir)
	var egressFiles []string
	var more Errors
	set.Egress, egressFiles, set.Warnings, more = loadEgress(dir)
	errs = append(errs, more...)
	errs = append(errs, checkExecEgress(set.Exec, set.Egress, egressFiles)...)
	set.Datasets, more = loadDatasets(dir)
	errs = append(errs, more...)
	execDir := filepath.Join(dir, "exec")
	switch {
	case len(execFiles) == 0 && !slices.ContainsFunc(errs, func(e *Error) bool { return e.File == execDir }):
		errs = append(Errors{{File: execDir, Msg: "no exec profiles (*.yaml) found; add exec/default.yaml"}}, errs...)
	case len(execFiles) > 0 && !slices.Contains(execFiles, DefaultName):
		errs = append(Errors{{File: execDir, Msg: fmt.Sprintf("no profile named %q; add exec/%s.yaml (requests that name no profile use it)", DefaultName, DefaultName)}}, errs...)
	}
	if errs = dedupe(errs); len(errs) > 0 {
		return &Report{Errors: errs, Warnings: set.Warnings}
	}
	return &Report{Set: set, Warnings: set.Warnings}
}

// loadExec reads and validates every exec/*.yaml file under dir and the
// seccomp files they name. It returns the profiles that loaded, the names
// (file names without .yaml) of every profile file found, loaded or not,
// and the problems.
func loadExec(dir string) (map[string]*Exec, []string, Errors) {
	execDir := filepath.Join(dir, "exec")
	out := make(map[string]*Exec)
	entries, err := os.ReadDir(execDir)
	if err != nil {
		return out, nil, Errors{{File: execDir, Msg: fmt.Sprintf("cannot read the exec profiles dir: %v; the profiles dir must hold exec/default.yaml", yamlfile.StripPath(err))}}
	}
	seccomp := seccompLoader(filepath.Join(dir, "seccomp"))
	var errs Errors
	var names []string
	for _, f := range readYAMLFiles(execDir, entries, "exec profiles", "profile") {
		if f.err != nil {
			errs = append(errs, f.err)
			continue
		}
		names = append(names, strings.TrimSuffix(filepath.Base(f.path), ".yaml"))
		e, ferrs := parseExec(f.path, f.data, seccomp)
		if len(ferrs) > 0 {
			errs = append(errs, ferrs...)
			continue
		}
		// The file name is the profile name, so two files cannot hold
		// the same profile.
		out[e.Name] = e
	}
	return out, names, errs
}

// seccompSource returns the content of a seccomp file by name, or an error
// wrapping fs.ErrNotExist when there is no such file.
type seccompSource func(name string) ([]byte, error)

// seccompLoader reads and checks seccomp files from dir, once per name.
func seccompLoader(dir string) seccompSource {
	type result struct {
		data []byte
		err  error
	}
	cache := make(map[string]result)
	return func(name string) ([]byte, error) {
		if r, ok := cache[name]; ok {
			return r.data, r.err
		}
		file := filepath.Join(dir, name)
		data, err := os.ReadFile(file)
		if err == nil {
			err = checkSeccomp(file, data)
		}
		cache[name] = result{data, err}
		return data, err
	}
}

// parseExec decodes, defaults, validates and versions one exec profile,
// and returns every problem it has. file is used in errors and must end in
// NAME.yaml.
func parseExec(file string, data []byte, seccomp seccompSource) (*Exec, Errors) {
	root, err := parseDocument(file, data)
	if err != nil {
		return nil, asErrors(err)
	}
	d := newDecoder(file, execRange)
	e := defaultExec()
	d.decodeStruct(root, reflect.ValueOf(&e).Elem(), "")
	if e.Runtime == "" {
		e.Runtime = DefaultRuntime
	}
	if e.Egress == "" {
		e.Egress = DefaultEgress
	}
	validate(&e, d, filepath.Base(file))
	var other Errors // problems of the seccomp file itself
	if validSeccompName(e.Seccomp) && !d.covered("seccomp") {
		sc, err := seccomp(e.Seccomp)
		var perr *Error
		switch {
		case err == nil:
			if e.Runtime == RuntimeRunc && seccompAllowsClone3(sc) {
				d.problem("seccomp", "seccomp file %q allows clone3, whose flags seccomp cannot check; under runtime runc that lets the code create namespaces. Use it only with runtime: runsc (gVisor), or deny clone3 with \"errnoRet\": 38 as default.json does", e.Seccomp)
			}
			e.SeccompJSON = sc
		case errors.As(err, &perr):
			other = append(other, perr)
		case errors.Is(err, fs.ErrNotExist):
			d.problem("seccomp", "seccomp file %q does not exist in the seccomp/ dir; add it or name an existing one", e.Seccomp)
		default:
			d.problem("seccomp", "cannot read seccomp file %q: %v", e.Seccomp, yamlfile.StripPath(err))
		}
	}
	if len(d.errs) > 0 || len(other) > 0 {
		sortByPosition(d.errs)
		return nil, append(d.errs, other...)
	}
	e.Source = file
	e.Version = version(&e)
	return &e, nil
}

// sortedNames returns the keys of m in order, an empty list for none.
func sortedNames[V any](m map[string]V) []string {
	names := slices.AppendSeq(make([]string, 0, len(m)), maps.Keys(m))
	slices.Sort(names)
	return names
}

// version is the sha256 (hex) of the profile's values after defaults,
// marshalled as JSON, together with the sha256 of its seccomp file. YAML
// comments, layout and key order do not change it; any value does.
func version(e *Exec) string {
	sc := sha256.Sum256(e.SeccompJSON)
	canon := struct {
		Profile       *Exec  `json:"profile"`
		SeccompSHA256 string `json:"seccomp_sha256"`
	}{e, hex.EncodeToString(sc[:])}
	b, err := json.Marshal(canon)
	if err != nil {
		// Only strings, integers and finite floats (validate rejects
		// NaN and Inf) are marshalled, which cannot fail.
		panic("profiles: marshalling profile for its version: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
