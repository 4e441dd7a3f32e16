package profiles

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/redact"
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
}

// Names returns the exec profile names, sorted.
func (s *Set) Names() []string {
	names := make([]string, 0, len(s.Exec))
	for n := range s.Exec {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Load reads and validates the profiles dir: every exec/*.yaml file and the
// seccomp/*.json files they name, and egress/*.yaml (see loadEgress). Files in exec/
// that do not end in .yaml, dot files and sub-directories are skipped;
// a .yml file is an error, so that a profile is never skipped silently.
//
// Any problem makes Load fail; the error is an *Error pointing at the file
// and line of the first problem found (files are read in name order).
func Load(dir string) (*Set, error) {
	execDir := filepath.Join(dir, "exec")
	entries, err := os.ReadDir(execDir)
	if err != nil {
		return nil, &Error{File: execDir, Msg: fmt.Sprintf("cannot read the exec profiles dir: %v; the profiles dir must hold exec/default.yaml", unwrapPath(err))}
	}
	set := &Set{Dir: dir, Exec: make(map[string]*Exec)}
	sources := make(map[string]string)
	seccomp := seccompLoader(filepath.Join(dir, "seccomp"))
	files, err := readYAMLFiles(execDir, entries, "exec profiles", "profile")
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		file, data := f.path, f.data
		e, err := parseExec(file, data, seccomp)
		if err != nil {
			return nil, err
		}
		// Unreachable while the file name must equal the profile name, but
		// kept so that relaxing that rule cannot shadow a profile silently.
		if prev, dup := sources[e.Name]; dup {
			return nil, &Error{File: file, Msg: fmt.Sprintf("profile name %q is already defined in %s; profile names must be unique", e.Name, prev)}
		}
		sources[e.Name] = file
		set.Exec[e.Name] = e
	}
	if len(set.Exec) == 0 {
		return nil, &Error{File: execDir, Msg: "no exec profiles (*.yaml) found; add exec/default.yaml"}
	}
	if _, ok := set.Exec[DefaultName]; !ok {
		return nil, &Error{File: execDir, Msg: fmt.Sprintf("no profile named %q; add exec/%s.yaml (requests that name no profile use it)", DefaultName, DefaultName)}
	}
	if set.Egress, err = loadEgress(dir, set.Exec); err != nil {
		return nil, err
	}
	if set.Datasets, err = loadDatasets(dir); err != nil {
		return nil, err
	}
	return set, nil
}

// Check validates the profiles dir the way the service would load it, for
// `sandboxd profiles check DIR`. It returns nil or the first problem as an
// *Error.
func Check(dir string) error {
	_, err := Load(dir)
	return err
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

// parseExec decodes, defaults, validates and versions one exec profile.
// file is used in errors and must end in NAME.yaml.
func parseExec(file string, data []byte, seccomp seccompSource) (*Exec, error) {
	root, err := parseDocument(file, data)
	if err != nil {
		return nil, err
	}
	d := &decoder{file: file, lines: make(map[string]int)}
	e := defaultExec()
	if err := d.decodeStruct(root, reflect.ValueOf(&e).Elem(), ""); err != nil {
		return nil, err
	}
	if e.Runtime == "" {
		e.Runtime = DefaultRuntime
	}
	if e.Egress == "" {
		e.Egress = DefaultEgress
	}
	if err := validate(&e, d, filepath.Base(file)); err != nil {
		return nil, err
	}
	sc, err := seccomp(e.Seccomp)
	if err != nil {
		var perr *Error
		switch {
		case errors.As(err, &perr):
			return nil, perr
		case errors.Is(err, fs.ErrNotExist):
			return nil, d.errf(d.lines["seccomp"], "seccomp file %q does not exist in the seccomp/ dir; add it or name an existing one", e.Seccomp)
		default:
			return nil, d.errf(d.lines["seccomp"], "cannot read seccomp file %q: %v", e.Seccomp, unwrapPath(err))
		}
	}
	if e.Runtime == RuntimeRunc && seccompAllowsClone3(sc) {
		return nil, d.errf(d.lines["seccomp"], "seccomp file %q allows clone3, whose flags seccomp cannot check; under runtime runc that lets the code create namespaces. Use it only with runtime: runsc (gVisor), or deny clone3 with \"errnoRet\": 38 as default.json does", e.Seccomp)
	}
	e.SeccompJSON = sc
	e.Source = file
	e.Version = version(&e)
	return &e, nil
}

// unwrapPath drops the path from *fs.PathError, which Error already names.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// execCanon has exactly the fields of Exec (the conversion in version does
// not compile otherwise, so a new field cannot be left out of the version)
// with JSON names fixed here, independent of any tags Exec may grow.
type execCanon struct {
	Name                 string        `json:"name"`
	Description          string        `json:"description"`
	Image                string        `json:"image"`
	Runtime              string        `json:"runtime"`
	User                 string        `json:"user"`
	Seccomp              string        `json:"seccomp"`
	Egress               string        `json:"egress"`
	Limits               Limits        `json:"limits"`
	Files                FileLimits    `json:"files"`
	MaxCodeBytes         int64         `json:"max_code_bytes"`
	MaxStdinBytes        int64         `json:"max_stdin_bytes"`
	Nofile               int64         `json:"nofile"`
	FileSizeMB           int64         `json:"file_size_mb"`
	ShmMB                int64         `json:"shm_mb"`
	Preload              []string      `json:"preload,omitempty"`
	Redact               []redact.Rule `json:"redact,omitempty"`
	CaptureRetentionDays int64         `json:"capture_retention_days"`
	SessionIdleTimeoutS  int64         `json:"session_idle_timeout_s"`
	SessionMaxLifetimeS  int64         `json:"session_max_lifetime_s"`
	Version              string        `json:"-"`
	SeccompJSON          []byte        `json:"-"`
	Source               string        `json:"-"`
}

// version is the sha256 (hex) of the profile's values after defaults,
// marshalled as JSON, together with the sha256 of its seccomp file. YAML
// comments, layout and key order do not change it; any value does.
func version(e *Exec) string {
	sc := sha256.Sum256(e.SeccompJSON)
	canon := struct {
		Profile       execCanon `json:"profile"`
		SeccompSHA256 string    `json:"seccomp_sha256"`
	}{execCanon(*e), hex.EncodeToString(sc[:])}
	b, err := json.Marshal(canon)
	if err != nil {
		// Only strings, integers and finite floats (validate rejects
		// NaN and Inf) are marshalled, which cannot fail.
		panic("profiles: marshalling profile for its version: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
