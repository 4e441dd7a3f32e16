package profiles

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/redact"
	"go.yaml.in/yaml/v3"
)

// minimalSeccomp is the smallest seccomp file the loader accepts.
const minimalSeccomp = `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": []}`

// minimal is an exec profile with only the required keys.
const minimal = "name: default\nimage: img:1\nseccomp: default.json\n"

// parseFile reads and parses a YAML file, which must parse, and returns
// its document's root.
func parseFile(t *testing.T, file string) *yaml.Node {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	root, err := parseDocument(file, data)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// loadShipped loads the repository's profiles, which must load.
func loadShipped(t *testing.T) *Set {
	t.Helper()
	set, err := Load(".")
	if err != nil {
		t.Fatalf("shipped profiles do not load: %v", err)
	}
	return set
}

// writeTree creates a profiles dir from relative path -> content and returns
// its path. seccomp/default.json is added unless files names it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if _, ok := files["seccomp/default.json"]; !ok {
		files["seccomp/default.json"] = minimalSeccomp
	}
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// loadOne loads a tree holding exec/default.yaml = profile.
func loadOne(t *testing.T, profile string) (*Exec, error) {
	t.Helper()
	set, err := Load(writeTree(t, map[string]string{"exec/default.yaml": profile}))
	if err != nil {
		return nil, err
	}
	return set.Exec["default"], nil
}

// builtinDefaults are the values the brief fixes for omitted fields; they
// are spelt out here rather than taken from defaultExec.
var builtinDefaults = Exec{
	Runtime:   "runc",
	User:      "65534:65534",
	Egress:    "none",
	Isolation: "container",
	Cell:      CellLimits{MaxRuns: 500, MaxAgeS: 1800, IdleS: 300, Hosts: 8},
	Limits: Limits{
		TimeoutMS: 10000, MemoryMB: 256, CPUs: 1, Pids: 64, OutputBytes: 1048576, TmpfsMB: 64,
	},
	Files: FileLimits{
		MaxInputBytes: 16 << 20, MaxInputCount: 100, MaxOutputFileBytes: 8 << 20, MaxOutputTotalBytes: 16 << 20, MaxOutputCount: 100,
	},
	MaxCodeBytes: 1048576, MaxStdinBytes: 1048576, Nofile: 256, FileSizeMB: 64, ShmMB: 16, CaptureRetentionDays: 30,
	SessionIdleTimeoutS: 600, SessionMaxLifetimeS: 3600,
}

// withoutLoaderFields returns e with the fields the loader sets cleared.
func withoutLoaderFields(e Exec) Exec {
	e.Version, e.SeccompJSON, e.Source = "", nil, ""
	return e
}

func TestLoadShippedProfiles(t *testing.T) {
	set := loadShipped(t)
	if got := set.Names(); !reflect.DeepEqual(got, []string{"data", "default", "strict"}) {
		t.Fatalf("Names() = %v, want [default strict]", got)
	}
	e := set.Exec["default"]
	want := builtinDefaults
	want.Name = "default"
	want.Image = "sandboxd/python:3.11"
	want.Seccomp = "default.json"
	want.Isolation = "cell" // the shipped default runs each exec in a cell
	want.Description = e.Description
	if got := withoutLoaderFields(*e); !reflect.DeepEqual(got, want) {
		t.Errorf("shipped default profile =\n%+v\nwant\n%+v", got, want)
	}
	if e.Description == "" {
		t.Error("shipped default profile has no description")
	}
	sc, err := os.ReadFile("seccomp/default.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(e.SeccompJSON) != string(sc) {
		t.Error("SeccompJSON is not the content of seccomp/default.json")
	}
	if e.Source != filepath.Join("exec", "default.yaml") {
		t.Errorf("Source = %q, want exec/default.yaml", e.Source)
	}
	if b, err := hex.DecodeString(e.Version); err != nil || len(b) != 32 {
		t.Errorf("Version = %q, want 64 hex digits", e.Version)
	}
	if r := Check("."); len(r.Errors) > 0 || r.Set == nil {
		t.Errorf("Check(.) = %v", r.Errors)
	}
}

// TestShippedStrictProfile checks that strict.yaml runs under gVisor and is
// at least as tight as default.yaml everywhere.
func TestShippedStrictProfile(t *testing.T) {
	set := loadShipped(t)
	s, d := set.Exec["strict"], set.Exec["default"]
	if s == nil {
		t.Fatal("no strict profile")
	}
	if s.Runtime != RuntimeRunsc {
		t.Errorf("strict runtime = %q, want runsc", s.Runtime)
	}
	if s.Limits.MemoryMB != 128 || s.Limits.CPUs != 0.5 || s.Limits.TimeoutMS != 5000 {
		t.Errorf("strict limits = %+v, want 128 MiB, 0.5 CPU, 5000 ms", s.Limits)
	}
	if s.User != d.User || s.Egress != "none" || s.Image != d.Image {
		t.Errorf("strict user/egress/image = %s/%s/%s, want those of default", s.User, s.Egress, s.Image)
	}
	if s.Seccomp != "gvisor.json" {
		t.Errorf("strict seccomp = %s, want gvisor.json (default.json's clone3 rule stops threads under runsc)", s.Seccomp)
	}
	if s.Limits.CPUs > d.Limits.CPUs {
		t.Errorf("strict limits.cpus %g is above default's %g", s.Limits.CPUs, d.Limits.CPUs)
	}
	for _, r := range intRules {
		if sv, dv := r.get(s), r.get(d); sv > dv {
			t.Errorf("strict %s = %d is above default's %d", r.path, sv, dv)
		}
	}
}

// TestShippedProfilesStateEveryValue checks that the shipped profiles set
// every key explicitly and explain each one with a comment.
func TestShippedProfilesStateEveryValue(t *testing.T) {
	for _, f := range []string{"exec/default.yaml", "exec/strict.yaml"} {
		t.Run(f, func(t *testing.T) { statesEveryValue(t, f) })
	}
}

func statesEveryValue(t *testing.T, file string) {
	root := parseFile(t, file)
	seen := make(map[string]bool)
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			path := prefix + k.Value
			seen[path] = true
			if v.Kind == yaml.MappingNode {
				walk(v, path+".")
				continue
			}
			if strings.TrimSpace(k.HeadComment+k.LineComment+v.LineComment) == "" {
				t.Errorf("%s:%d: %s has no comment explaining it", file, k.Line, path)
			}
		}
	}
	walk(root, "")
	for _, path := range yamlLeafPaths(reflect.TypeFor[Exec](), "") {
		if !seen[path] {
			t.Errorf("%s does not state %s", file, path)
		}
	}
}

// yamlLeafPaths lists the dotted YAML paths of t's decodable leaf fields.
func yamlLeafPaths(t reflect.Type, prefix string) []string {
	var out []string
	keys, index := structKeys(t)
	for _, k := range keys {
		f := t.Field(index[k])
		if f.Type.Kind() == reflect.Struct {
			out = append(out, yamlLeafPaths(f.Type, prefix+k+".")...)
			continue
		}
		out = append(out, prefix+k)
	}
	return out
}

// TestEveryNumberHasARange fails when an integer or float field is added
// to Exec without a rule bounding it.
func TestEveryNumberHasARange(t *testing.T) {
	ruled := map[string]bool{"limits.cpus": true}
	for _, r := range intRules {
		ruled[r.path] = true
	}
	paths := yamlLeafPaths(reflect.TypeFor[Exec](), "")
	for _, p := range paths {
		f := fieldByPath(reflect.TypeFor[Exec](), p)
		switch f.Type.Kind() {
		case reflect.Int, reflect.Int64, reflect.Float64:
			if !ruled[p] {
				t.Errorf("%s has no allowed range in intRules", p)
			}
		}
	}
	for p := range ruled {
		if fieldByPath(reflect.TypeFor[Exec](), p).Name == "" {
			t.Errorf("intRules names %s, which is not a YAML key of Exec", p)
		}
	}
}

func fieldByPath(t reflect.Type, path string) reflect.StructField {
	head, rest, nested := strings.Cut(path, ".")
	_, index := structKeys(t)
	i, ok := index[head]
	if !ok {
		return reflect.StructField{}
	}
	f := t.Field(i)
	if nested {
		return fieldByPath(f.Type, rest)
	}
	return f
}

func TestDefaultsForOmittedFields(t *testing.T) {
	e, err := loadOne(t, minimal)
	if err != nil {
		t.Fatal(err)
	}
	want := builtinDefaults
	want.Name, want.Image, want.Seccomp = "default", "img:1", "default.json"
	if got := withoutLoaderFields(*e); !reflect.DeepEqual(got, want) {
		t.Errorf("profile with only required keys =\n%+v\nwant\n%+v", got, want)
	}
}

func TestExplicitValuesAreKept(t *testing.T) {
	e, err := loadOne(t, minimal+`
runtime: ""
egress: ""
user: "1000:1001"
max_stdin_bytes: 0
files:
  max_input_count: 0
  max_input_bytes: 0
limits:
  cpus: 0.5
  memory_mb: 1_024
  pids: 0x10
`)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"runtime (empty means runc)", e.Runtime, "runc"},
		{"egress (empty means none)", e.Egress, "none"},
		{"user", e.User, "1000:1001"},
		{"max_stdin_bytes (explicit 0)", e.MaxStdinBytes, int64(0)},
		{"files.max_input_count (explicit 0)", e.Files.MaxInputCount, 0},
		{"files.max_input_bytes (explicit 0)", e.Files.MaxInputBytes, int64(0)},
		{"files.max_output_count (default)", e.Files.MaxOutputCount, 100},
		{"limits.cpus", e.Limits.CPUs, 0.5},
		{"limits.memory_mb (1_024)", e.Limits.MemoryMB, int64(1024)},
		{"limits.pids (0x10)", e.Limits.Pids, int64(16)},
		{"limits.timeout_ms (default)", e.Limits.TimeoutMS, int64(10000)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

func TestErrorString(t *testing.T) {
	for _, tc := range []struct {
		err  Error
		want string
	}{
		{Error{File: "exec/a.yaml", Line: 7, Msg: "bad"}, "exec/a.yaml:7: bad"},
		{Error{File: "exec/a.yaml", Msg: "bad"}, "exec/a.yaml: bad"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

// wantErr checks that err is an *Error at file:line whose message holds
// every part of want.
func wantErr(t *testing.T, err error, file string, line int, want ...string) {
	t.Helper()
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("error = %v (%T), want *Error", err, err)
	}
	if perr.File != file || perr.Line != line {
		t.Errorf("error at %s:%d, want %s:%d (%v)", perr.File, perr.Line, file, line, err)
	}
	for _, w := range want {
		if !strings.Contains(perr.Msg, w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

func TestProfileErrors(t *testing.T) {
	const f = "exec/default.yaml"
	tests := []struct {
		name    string
		profile string
		line    int
		want    []string
	}{
		{"preload not a list", minimal + "preload: numpy\n", 4, []string{"preload must be a list of strings, such as [numpy, pandas], got the string \"numpy\""}},
		{"secrets without egress", minimal + "secrets: [stripe]\n", 4, []string{"secrets need network egress"}},
		{"secrets bad name", minimal + "egress: mirror\nsecrets: [stripe, Bad-Name]\n", 5, []string{`secrets[1] "Bad-Name" is not a secret name`}},
		{"secrets twice", minimal + "egress: mirror\nsecrets: [stripe, stripe]\n", 5, []string{`secret "stripe" is listed twice`}},
		{"preload bad name", minimal + "preload:\n  - numpy\n  - os;import x\n", 6, []string{`preload[1] "os;import x" is not a Python module name`}},
		{"preload number", minimal + "preload: [numpy, 3]\n", 4, []string{"preload[1] must be a string, got the number 3"}},
		{"unknown top key", minimal + "imgae: x\n", 4, []string{`unknown key "imgae"`, "allowed keys: name, description, image"}},
		{"unknown nested key", minimal + "limits:\n  memroy_mb: 5\n", 5, []string{`unknown key "memroy_mb" in limits`, "memory_mb"}},
		{"unknown files key", minimal + "files:\n  max_files: 5\n", 5, []string{`unknown key "max_files" in files`, "max_input_count"}},
		{"repeated key", minimal + "image: other\n", 4, []string{`key "image" is repeated (first set on line 2)`}},
		{"merge key", minimal + "<<: {image: x}\n", 4, []string{`unknown key "<<"`}},
		{"non-scalar key", minimal + "? [a]\n: 1\n", 4, []string{"keys must be plain words"}},
		{"string for int", minimal + "limits:\n  memory_mb: lots\n", 5, []string{`limits.memory_mb must be a whole number, got the string "lots"; allowed is 16 to 65536 MiB`}},
		{"quoted int", minimal + "nofile: \"256\"\n", 4, []string{`nofile must be a whole number, got the string "256"; allowed is 16 to 65536`}},
		{"float for int nested", minimal + "limits:\n  pids: 1.5\n", 5, []string{"limits.pids must be a whole number, got the number 1.5; allowed is 8 to 4096"}},
		{"huge int", minimal + "nofile: 99999999999999999999\n", 4, []string{"nofile must be a whole number"}},
		{"string for float", minimal + "limits:\n  cpus: one\n", 5, []string{`limits.cpus must be a number, got the string "one"; allowed is more than 0 and at most 64, fractions such as 0.5 included`}},
		{"nan cpus", minimal + "limits:\n  cpus: .nan\n", 5, []string{"limits.cpus is .nan; it must be a finite number"}},
		{"number for string", "name: default\nimage: 3.11\nseccomp: default.json\n", 2, []string{"image must be a string, got the number 3.11; put it in quotes"}},
		{"bool for string", minimal + "description: true\n", 4, []string{"description must be a string, got the boolean true"}},
		{"null value", minimal + "runtime:\n", 4, []string{"runtime has no value", "remove the key to use the default"}},
		{"scalar for mapping", minimal + "limits: 5\n", 4, []string{"limits must be a mapping of keys, got the number 5"}},
		{"list for mapping", minimal + "files: [1]\n", 4, []string{"files must be a mapping of keys, got a list"}},
		{"list for string", minimal + "user: [1, 2]\n", 4, []string{"user must be a string, got a list"}},
		{"alias", "name: &n default\nimage: *n\nseccomp: default.json\n", 2, []string{"image uses a YAML alias (*n)"}},
		{"syntax error", minimal + "limits: a: b\n", 4, []string{"invalid YAML: mapping values are not allowed in this context"}},
		{"bad indentation", "name: default\n  image: x\n", 2, []string{"invalid YAML"}},
		{"two documents", minimal + "---\nname: x\n", 4, []string{"more than one YAML document"}},
		{"top-level list", "- name: default\n", 1, []string{"top level must be a mapping", "got a list"}},
		{"top-level scalar", "just text\n", 1, []string{"top level must be a mapping", `got the string "just text"`}},

		{"missing name", "image: x\nseccomp: default.json\n", 0, []string{"name is required; set name: default"}},
		{"bad name", "name: Default_1\nimage: x\nseccomp: default.json\n", 1, []string{`name "Default_1" is not allowed`, "lowercase letters, digits and '-'"}},
		{"name starts with dash", "name: -x\nimage: x\nseccomp: default.json\n", 1, []string{`name "-x" is not allowed`}},
		{"name too long", "name: " + strings.Repeat("a", 64) + "\nimage: x\nseccomp: default.json\n", 1, []string{"is not allowed", "1 to 63"}},
		{"name differs from file", "name: other\nimage: x\nseccomp: default.json\n", 1, []string{`name "other" does not match the file name "default.yaml"`, "rename the file to other.yaml or set name: default"}},
		{"missing image", "name: default\nseccomp: default.json\n", 0, []string{"image is required"}},
		{"blank image", "name: default\nimage: \" \"\nseccomp: default.json\n", 2, []string{"image is required"}},
		{"image with space", "name: default\nimage: a b\nseccomp: default.json\n", 2, []string{`image "a b" contains spaces`}},
		{"runtime kata", minimal + "runtime: kata\n", 4, []string{`runtime "kata" is not supported`, "allowed: runc", "or runsc (gVisor", "make gvisor"}},
		{"runtime default", minimal + "runtime: default\n", 4, []string{`runtime "default" is not supported`}},
		{"runtime upper case", minimal + "runtime: RUNSC\n", 4, []string{`runtime "RUNSC" is not supported`}},
		{"user root", minimal + "user: \"0:0\"\n", 4, []string{`user "0:0" is not allowed`, "uid must be between 1 and 4294967294"}},
		{"user gid 0", minimal + "user: \"65534:0\"\n", 4, []string{"gid must be between 1"}},
		{"user uid -1", minimal + "user: \"4294967295:1\"\n", 4, []string{"uid must be between 1 and 4294967294"}},
		{"user too big", minimal + "user: \"4294967296:1\"\n", 4, []string{"uid must be between"}},
		{"user name", minimal + "user: nobody\n", 4, []string{`user "nobody" is not allowed`, `"uid:gid" with numeric ids`}},
		{"user uid only", minimal + "user: \"1000\"\n", 4, []string{`"uid:gid"`}},
		{"missing seccomp", "name: default\nimage: x\n", 0, []string{"seccomp is required", "seccomp: default.json"}},
		{"seccomp parent dir", "name: default\nimage: x\nseccomp: ../default.json\n", 3, []string{"plain file name under seccomp/"}},
		{"seccomp dots", "name: default\nimage: x\nseccomp: a..json\n", 3, []string{"plain file name under seccomp/"}},
		{"seccomp subdir", "name: default\nimage: x\nseccomp: sub/default.json\n", 3, []string{"plain file name"}},
		{"seccomp absolute", "name: default\nimage: x\nseccomp: /etc/default.json\n", 3, []string{"plain file name"}},
		{"seccomp not json", "name: default\nimage: x\nseccomp: default.txt\n", 3, []string{"ending in .json"}},
		{"seccomp missing file", "name: default\nimage: x\nseccomp: strict.json\n", 3, []string{`seccomp file "strict.json" does not exist in the seccomp/ dir`}},
		{"egress unknown", minimal + "egress: internet\n", 4, []string{`egress "internet" names no egress profile`, "add egress/internet.yaml", "none"}},
		{"egress not a name", minimal + "egress: ../x\n", 4, []string{`egress "../x" is not an egress profile name`}},
		{"cpus zero", minimal + "limits:\n  cpus: 0\n", 5, []string{"limits.cpus is 0; allowed is more than 0 and at most 64"}},
		{"cpus negative", minimal + "limits:\n  cpus: -1\n", 5, []string{"limits.cpus is -1"}},
		{"cpus too many", minimal + "limits:\n  cpus: 64.5\n", 5, []string{"limits.cpus is 64.5"}},
		{"cpus infinite", minimal + "limits:\n  cpus: .inf\n", 5, []string{"finite number"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadOne(t, tc.profile)
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			var perr *Error
			if errors.As(err, &perr) {
				// File is built from the temp dir; compare its tail.
				if !strings.HasSuffix(filepath.ToSlash(perr.File), f) {
					t.Errorf("error in %s, want %s", perr.File, f)
				}
				perr.File = f
			}
			wantErr(t, err, f, tc.line, tc.want...)
		})
	}
}

// TestRanges checks every bound of every numeric field: the bound itself is
// accepted, one past it is refused with the line of the value and the
// allowed range. The bounds are those of the brief, not read from intRules.
func TestRanges(t *testing.T) {
	const mi = 1 << 20
	ranges := []struct {
		path     string
		min, max int64
		inRange  string // how the message states the range
	}{
		{"limits.timeout_ms", 100, 3_600_000, "100 to 3600000 ms"},
		{"limits.memory_mb", 16, 65536, "16 to 65536 MiB"},
		{"limits.pids", 8, 4096, "8 to 4096"},
		{"limits.output_bytes", 1, 64 * mi, "1 to 67108864 bytes (64 MiB)"},
		{"limits.tmpfs_mb", 1, 4096, "1 to 4096 MiB"},
		{"nofile", 16, 65536, "16 to 65536"},
		{"file_size_mb", 1, 4096, "1 to 4096 MiB"},
		{"shm_mb", 1, 1024, "1 to 1024 MiB"},
		{"max_code_bytes", 1, 16 * mi, "1 to 16777216 bytes (16 MiB)"},
		{"max_stdin_bytes", 0, 16 * mi, "0 to 16777216 bytes (16 MiB)"},
		{"files.max_input_bytes", 0, 64 * mi, "0 to 67108864 bytes (64 MiB)"},
		{"files.max_input_count", 0, 1000, "0 to 1000"},
		{"files.max_output_file_bytes", 0, 64 * mi, "0 to 67108864 bytes (64 MiB)"},
		{"files.max_output_total_bytes", 0, 128 * mi, "0 to 134217728 bytes (128 MiB)"},
		{"files.max_output_count", 0, 10000, "0 to 10000"},
	}
	set := func(path string, v int64) (string, int) {
		section, key, nested := strings.Cut(path, ".")
		if nested {
			return fmt.Sprintf("%s%s:\n  %s: %d\n", minimal, section, key, v), 5
		}
		return fmt.Sprintf("%s%s: %d\n", minimal, path, v), 4
	}
	for _, r := range ranges {
		for _, v := range []int64{r.min, r.max} {
			t.Run(fmt.Sprintf("%s=%d ok", r.path, v), func(t *testing.T) {
				y, _ := set(r.path, v)
				if _, err := loadOne(t, y); err != nil {
					t.Errorf("%s: %d refused: %v", r.path, v, err)
				}
			})
		}
		for _, v := range []int64{r.min - 1, r.max + 1} {
			t.Run(fmt.Sprintf("%s=%d refused", r.path, v), func(t *testing.T) {
				y, line := set(r.path, v)
				_, err := loadOne(t, y)
				var perr *Error
				if !errors.As(err, &perr) {
					t.Fatalf("%s: %d: error = %v, want *Error", r.path, v, err)
				}
				want := fmt.Sprintf("%s is %d; allowed is %s", r.path, v, r.inRange)
				if perr.Line != line || perr.Msg != want {
					t.Errorf("error = line %d %q, want line %d %q", perr.Line, perr.Msg, line, want)
				}
			})
		}
	}
	for _, cpus := range []string{"0.01", "64", "1.5"} {
		if _, err := loadOne(t, minimal+"limits:\n  cpus: "+cpus+"\n"); err != nil {
			t.Errorf("cpus %s refused: %v", cpus, err)
		}
	}
}

func TestSeccompFileErrors(t *testing.T) {
	tests := []struct {
		name    string
		content string
		line    int
		want    []string
	}{
		{"empty", "", 0, []string{"file is empty"}},
		{"syntax", "{\n  \"defaultAction\": \"SCMP_ACT_ERRNO\",\n}\n", 3, []string{"invalid JSON"}},
		{"truncated", "{\n  \"defaultAction\": \"SCMP_ACT_ERRNO\",\n", 3, []string{"invalid JSON"}},
		{"not an object", "[1]", 1, []string{"must be a JSON object"}},
		{"no defaultAction", `{"syscalls": []}`, 0, []string{"defaultAction is missing"}},
		{"allow by default", `{"defaultAction": "SCMP_ACT_ALLOW"}`, 0, []string{`defaultAction "SCMP_ACT_ALLOW" is not allowed`, "SCMP_ACT_ERRNO"}},
		{"log by default", `{"defaultAction": "SCMP_ACT_LOG"}`, 0, []string{"is not allowed"}},
		{"unknown field", "{\n\"defaultAction\": \"SCMP_ACT_ERRNO\",\n\"flags\": [\"SECCOMP_FILTER_FLAG_LOG\"]\n}", 3, []string{`unknown field "flags"`, "Docker Engine 20.10"}},
		{"misspelt syscalls", "{\"defaultAction\": \"SCMP_ACT_ERRNO\",\n \"syscals\": []}", 2, []string{`unknown field "syscals"; did you mean syscalls?`}},
		{"unknown rule field", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "arg": []}]}`, 1, []string{`unknown field "arg"`}},
		{"wrong type", "{\"defaultAction\": \"SCMP_ACT_ERRNO\",\n\"syscalls\": {}}", 2, []string{"syscalls has the wrong type", "want an array"}},
		{"errno not EPERM", "{\"defaultAction\": \"SCMP_ACT_ERRNO\",\n\"defaultErrnoRet\": 38}", 2, []string{"defaultErrnoRet 38 would be ignored", "EPERM"}},
		{"rule without names", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"action": "SCMP_ACT_ALLOW"}]}`, 0, []string{"syscalls[0] names no syscall"}},
		{"empty name", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read", ""], "action": "SCMP_ACT_ALLOW"}]}`, 0, []string{`syscalls[0] has the syscall name ""`}},
		{"bad action", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "ALLOW"}]}`, 0, []string{`syscalls[0] (read) has action "ALLOW"`, "SCMP_ACT_ALLOW"}},
		{"notify action", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_NOTIFY"}]}`, 0, []string{`has action "SCMP_ACT_NOTIFY"`}},
		{"bad op", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 1, "op": "EQ"}]}]}`, 0, []string{`argument op "EQ"`}},
		{"bad arg index", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 6, "value": 1, "op": "SCMP_CMP_EQ"}]}]}`, 0, []string{"argument index 6"}},
		{"trailing content", `{"defaultAction": "SCMP_ACT_ERRNO"} {}`, 1, []string{"unexpected content after the JSON object"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeTree(t, map[string]string{"exec/default.yaml": minimal, "seccomp/default.json": tc.content})
			_, err := Load(dir)
			wantErr(t, err, filepath.Join(dir, "seccomp", "default.json"), tc.line, tc.want...)
		})
	}
	t.Run("valid with every field", func(t *testing.T) {
		content := `{"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 1,
			"architectures": ["SCMP_ARCH_X86_64"],
			"archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]}],
			"syscalls": [{"name": "read", "names": ["write"], "action": "SCMP_ACT_ALLOW", "errnoRet": 1, "comment": "c",
				"args": [{"index": 0, "value": 1, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
				"includes": {"arches": ["amd64"], "minKernel": "4.8"}, "excludes": {"caps": ["CAP_SYS_ADMIN"]}}]}`
		dir := writeTree(t, map[string]string{"exec/default.yaml": minimal, "seccomp/default.json": content})
		if _, err := Load(dir); err != nil {
			t.Errorf("Load = %v, want success", err)
		}
	})
}

func TestDirErrors(t *testing.T) {
	t.Run("no exec dir", func(t *testing.T) {
		dir := t.TempDir()
		_, err := Load(dir)
		wantErr(t, err, filepath.Join(dir, "exec"), 0, "cannot read the exec profiles dir", "no such file or directory", "exec/default.yaml")
	})
	t.Run("no profiles", func(t *testing.T) {
		dir := writeTree(t, map[string]string{"exec/README.md": "hi"})
		_, err := Load(dir)
		wantErr(t, err, filepath.Join(dir, "exec"), 0, "no exec profiles (*.yaml) found; add exec/default.yaml")
	})
	t.Run("no default", func(t *testing.T) {
		dir := writeTree(t, map[string]string{"exec/big.yaml": "name: big\nimage: x\nseccomp: default.json\n"})
		_, err := Load(dir)
		wantErr(t, err, filepath.Join(dir, "exec"), 0, `no profile named "default"; add exec/default.yaml`)
	})
	t.Run("yml extension", func(t *testing.T) {
		dir := writeTree(t, map[string]string{"exec/default.yaml": minimal, "exec/big.yml": "name: big\n"})
		_, err := Load(dir)
		wantErr(t, err, filepath.Join(dir, "exec", "big.yml"), 0, "must end in .yaml; rename it to big.yaml")
	})
	t.Run("empty profile file", func(t *testing.T) {
		dir := writeTree(t, map[string]string{"exec/default.yaml": "# nothing yet\n"})
		_, err := Load(dir)
		wantErr(t, err, filepath.Join(dir, "exec", "default.yaml"), 0, "file has no YAML content")
	})
	t.Run("seccomp is a dir", func(t *testing.T) {
		dir := writeTree(t, map[string]string{"exec/default.yaml": "name: default\nimage: x\nseccomp: d.json\n", "seccomp/d.json/x": ""})
		_, err := Load(dir)
		wantErr(t, err, filepath.Join(dir, "exec", "default.yaml"), 3, `cannot read seccomp file "d.json"`)
	})
	t.Run("first error wins in name order", func(t *testing.T) {
		dir := writeTree(t, map[string]string{
			"exec/default.yaml": minimal,
			"exec/a.yaml":       "name: a\nimage: x\nseccomp: default.json\nnofile: 1\n",
			"exec/b.yaml":       "name: b\nbogus: 1\n",
		})
		_, err := Load(dir)
		wantErr(t, err, filepath.Join(dir, "exec", "a.yaml"), 4, "nofile is 1")
	})
}

func TestSkipsOtherFiles(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"exec/default.yaml":       minimal,
		"exec/small.yaml":         "name: small\nimage: x\nseccomp: default.json\nlimits:\n  memory_mb: 64\n",
		"exec/README.md":          "not yaml: [",
		"exec/.default.yaml.swp":  "junk",
		"exec/.#small.yaml":       "junk: [",
		"exec/old/ignored.yaml":   "junk: [",
		"egress/notes.txt":        "junk: [",
		"egress/old/x.yaml":       "junk: [",
		"seccomp/unused.json":     "not even json",
		"seccomp/default.json":    minimalSeccomp,
		"exec/zzz-notes.txt":      "x",
		"exec/another-dir/x.yaml": "junk: [",
	})
	set, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Names(); !reflect.DeepEqual(got, []string{"default", "small"}) {
		t.Errorf("Names() = %v, want [default small]", got)
	}
	if got := set.Exec["small"].Limits.MemoryMB; got != 64 {
		t.Errorf("small memory_mb = %d, want 64", got)
	}
	if set.Dir != dir {
		t.Errorf("Dir = %q, want %q", set.Dir, dir)
	}
}

func TestVersion(t *testing.T) {
	base, err := loadOne(t, minimal)
	if err != nil {
		t.Fatal(err)
	}
	same := []struct{ name, profile string }{
		{"comments and layout", "# comment\nseccomp:   default.json   # trailing\n\nimage: 'img:1'\nname: \"default\"\n"},
		{"defaults stated", minimal + "runtime: runc\negress: none\nuser: \"65534:65534\"\nlimits:\n  memory_mb: 256\n  cpus: 1.0\nfiles: {max_input_count: 100}\nshm_mb: 16\n"},
		{"empty runtime and egress", minimal + "runtime: ''\negress: ''\n"},
		{"other number spelling", minimal + "limits:\n  timeout_ms: 10_000\n"},
	}
	for _, tc := range same {
		e, err := loadOne(t, tc.profile)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if e.Version != base.Version {
			t.Errorf("%s: version changed (%s -> %s); it must depend on values only", tc.name, base.Version, e.Version)
		}
	}
	different := []struct{ name, profile, seccomp string }{
		{"description", minimal + "description: x\n", minimalSeccomp},
		{"image", "name: default\nimage: img:2\nseccomp: default.json\n", minimalSeccomp},
		{"memory", minimal + "limits:\n  memory_mb: 257\n", minimalSeccomp},
		{"cpus", minimal + "limits:\n  cpus: 1.5\n", minimalSeccomp},
		{"files", minimal + "files:\n  max_output_count: 99\n", minimalSeccomp},
		{"user", minimal + "user: \"1000:1000\"\n", minimalSeccomp},
		{"seccomp content", minimal, `{"defaultAction": "SCMP_ACT_KILL_PROCESS"}`},
		{"seccomp whitespace", minimal, minimalSeccomp + "\n"},
	}
	for _, tc := range different {
		set, err := Load(writeTree(t, map[string]string{"exec/default.yaml": tc.profile, "seccomp/default.json": tc.seccomp}))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if set.Exec["default"].Version == base.Version {
			t.Errorf("%s: version did not change", tc.name)
		}
	}
}

// The version is the hash of the profile's JSON encoding; audit records
// carry it, so the encoding (field names included) must not change by
// accident. Every field is set here.
func TestVersionEncodingIsStable(t *testing.T) {
	e := Exec{Name: "pin", Description: "pinned", Image: "img:1", Runtime: RuntimeRunc, User: "1000:1000", Seccomp: "default.json", Egress: "none",
		Isolation: IsolationCell, Cell: CellLimits{MaxRuns: 19, MaxAgeS: 20, IdleS: 21, Hosts: 22},
		Limits:       Limits{TimeoutMS: 1, MemoryMB: 2, CPUs: 0.5, Pids: 3, OutputBytes: 4, TmpfsMB: 5},
		Files:        FileLimits{MaxInputBytes: 6, MaxInputCount: 7, MaxOutputFileBytes: 8, MaxOutputTotalBytes: 9, MaxOutputCount: 10},
		MaxCodeBytes: 11, MaxStdinBytes: 12, Nofile: 13, FileSizeMB: 14, ShmMB: 15, Preload: []string{"json"},
		Redact:               []redact.Rule{{Type: "ticket", Keywords: []string{"tkt-"}, Regex: `TKT-[0-9]{6}`}},
		CaptureRetentionDays: 16, SessionIdleTimeoutS: 17, SessionMaxLifetimeS: 18,
		SeccompJSON: []byte(minimalSeccomp), Version: "ignored", Source: "ignored"}
	if got, want := version(&e), "62bbb047bdb30989914d60201563bfb5ccef8aff5b701a58fc4978bbf13a16e8"; got != want {
		t.Errorf("version %s, want %s", got, want)
	}
}

// TestVersionCoversEveryField changes each field of a loaded profile in
// turn and requires the version to change, so that no field (including one
// added later) is left out of the hash.
func TestVersionCoversEveryField(t *testing.T) {
	base, err := loadOne(t, minimal)
	if err != nil {
		t.Fatal(err)
	}
	var visit func(v reflect.Value, path string)
	visit = func(v reflect.Value, path string) {
		for i := 0; i < v.NumField(); i++ {
			f, name := v.Field(i), path+v.Type().Field(i).Name
			switch name {
			case "Version", "Source":
				continue
			}
			if f.Kind() == reflect.Struct {
				visit(f, name+".")
				continue
			}
			e := *base
			fv := reflect.ValueOf(&e).Elem().FieldByIndex(fieldIndex(reflect.TypeFor[Exec](), name))
			switch fv.Kind() {
			case reflect.String:
				fv.SetString(fv.String() + "x")
			case reflect.Int, reflect.Int64:
				fv.SetInt(fv.Int() + 1)
			case reflect.Float64:
				fv.SetFloat(fv.Float() + 0.5)
			case reflect.Slice:
				switch fv.Type().Elem().Kind() {
				case reflect.String:
					fv.Set(reflect.Append(reflect.MakeSlice(fv.Type(), 0, fv.Len()+1), reflect.ValueOf("x")))
				case reflect.Struct:
					fv.Set(reflect.Append(reflect.MakeSlice(fv.Type(), 0, fv.Len()+1), reflect.New(fv.Type().Elem()).Elem()))
				default:
					fv.SetBytes(append([]byte(nil), append(fv.Bytes(), ' ')...))
				}
			default:
				t.Fatalf("%s: test does not know how to change a %s", name, fv.Kind())
			}
			if version(&e) == version(base) {
				t.Errorf("changing %s does not change the version", name)
			}
		}
	}
	visit(reflect.ValueOf(*base), "")
}

func fieldIndex(t reflect.Type, dotted string) []int {
	var index []int
	for _, name := range strings.Split(dotted, ".") {
		f, ok := t.FieldByName(name)
		if !ok {
			panic("no field " + dotted)
		}
		index = append(index, f.Index...)
		t = f.Type
	}
	return index
}

// FuzzLoadExec feeds arbitrary bytes to the profile parser. It must never
// panic, must report failures as *Error naming the file, and whatever it
// accepts must be a valid, versioned profile.
func FuzzLoadExec(f *testing.F) {
	shipped, err := os.ReadFile("exec/default.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(shipped),
		minimal,
		minimal + "limits: {cpus: 0.5, memory_mb: 64}\nfiles: {max_input_count: 0}\n",
		minimal + "limits:\n  cpus: .nan\n",
		"name: &a default\nimage: *a\n",
		"a: [1\n",
		"---\n---\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	const file = "exec/default.yaml"
	seccomp := func(name string) ([]byte, error) {
		if name == "default.json" {
			return []byte(minimalSeccomp), nil
		}
		return nil, os.ErrNotExist
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, errs := parseExec(file, data, seccomp)
		if len(errs) > 0 {
			for _, perr := range errs {
				if perr.File != file || perr.Line < 0 || perr.Column < 0 || perr.Msg == "" {
					t.Fatalf("error %v is not a well-formed *Error for %s", perr, file)
				}
			}
			return
		}
		if e.Name != "default" || e.Source != file || len(e.Version) != 64 || string(e.SeccompJSON) != minimalSeccomp {
			t.Fatalf("accepted profile is incomplete: %+v", e)
		}
		d := newDecoder(file, execRange)
		if validate(e, d, "default.yaml"); len(d.errs) > 0 {
			t.Fatalf("accepted profile fails validation: %v", d.errs)
		}
	})
}

func TestRuntimes(t *testing.T) {
	for _, rt := range []string{"runc", "runsc"} {
		e, err := loadOne(t, minimal+"runtime: "+rt+"\n")
		if err != nil {
			t.Fatalf("runtime %s: %v", rt, err)
		}
		if e.Runtime != rt {
			t.Errorf("runtime %s loaded as %q", rt, e.Runtime)
		}
	}
	a, _ := loadOne(t, minimal+"runtime: runc\n")
	b, _ := loadOne(t, minimal+"runtime: runsc\n")
	if a.Version == b.Version {
		t.Error("the runtime does not change the profile version")
	}
}

// A filter that allows clone3 (gvisor.json) is refused under runc, where the
// code could create namespaces with it, and accepted under runsc.
func TestClone3OnlyUnderRunsc(t *testing.T) {
	gv, err := os.ReadFile("seccomp/gvisor.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range []string{"runc", "runsc"} {
		dir := writeTree(t, map[string]string{
			"exec/default.yaml":   "name: default\nimage: x\nruntime: " + rt + "\nseccomp: gvisor.json\n",
			"seccomp/gvisor.json": string(gv),
		})
		_, err := Load(dir)
		if rt == "runsc" {
			if err != nil {
				t.Errorf("gvisor.json under runsc: %v", err)
			}
			continue
		}
		wantErr(t, err, filepath.Join(dir, "exec", "default.yaml"), 4, `seccomp file "gvisor.json" allows clone3`, "runtime: runsc", "errnoRet")
	}
}

func TestProfilesByImage(t *testing.T) {
	set, err := Load(".")
	if err != nil {
		t.Fatal(err)
	}
	images, users := set.ProfilesByImage()
	if want := []string{"sandboxd/python-data:3.11", "sandboxd/python:3.11"}; !slices.Equal(images, want) {
		t.Fatalf("images %v, want %v", images, want)
	}
	if got := users["sandboxd/python:3.11"]; !slices.Equal(got, []string{"default", "strict"}) {
		t.Errorf("users of the default image: %v", got)
	}
	if got := users["sandboxd/python-data:3.11"]; !slices.Equal(got, []string{"data"}) {
		t.Errorf("users of the data image: %v", got)
	}
}
