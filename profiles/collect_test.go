package profiles

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// problems loads dir and returns its problems as "FILE:LINE:COL: msg" with
// FILE relative to dir.
func problems(t *testing.T, dir string) []string {
	t.Helper()
	_, err := Load(dir)
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Load = %v (%T), want Errors", err, err)
	}
	var out []string
	for _, e := range errs {
		out = append(out, strings.TrimPrefix(e.Error(), dir+string(filepath.Separator)))
	}
	return out
}

// sameLines fails unless got and want are equal, line by line.
func sameLines(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("problem %d:\n got %s\nwant %s", i+1, got[i], want[i])
		}
	}
}

// Every mistake in an exec profile is reported in one load, at its line
// and column, in file order; missing keys (no line) come first.
func TestEveryProblemOfAnExecProfile(t *testing.T) {
	profile := "name: default\n" +
		"seccomp: default.json\n" +
		"runtime: kata\n" +
		"limits:\n" +
		"  memroy_mb: 64\n" +
		"  pids: lots\n" +
		"  timeout_ms: 50\n" +
		"nofile: 1\n" +
		"preload: [numpy, 'os;x']\n" +
		"user: \"0:0\"\n"
	dir := writeTree(t, map[string]string{"exec/default.yaml": profile})
	sameLines(t, problems(t, dir), []string{
		"exec/default.yaml: image is required; set it to the sandbox image reference, e.g. image: sandboxd/python:3.11",
		`exec/default.yaml:3:10: runtime "kata" is not supported; allowed: runc (Linux namespaces and cgroups) or runsc (gVisor: a user-space kernel in front of the host's; install it with ` + "`make gvisor`)",
		`exec/default.yaml:5:3: unknown key "memroy_mb" in limits; did you mean memory_mb? (allowed keys: timeout_ms, memory_mb, cpus, pids, output_bytes, tmpfs_mb)`,
		`exec/default.yaml:6:9: limits.pids must be a whole number, got the string "lots"; allowed is 8 to 4096`,
		"exec/default.yaml:7:15: limits.timeout_ms is 50; allowed is 100 to 3600000 ms",
		"exec/default.yaml:8:9: nofile is 1; allowed is 16 to 65536",
		`exec/default.yaml:9:18: preload[1] "os;x" is not a Python module name; write dotted identifiers such as numpy or matplotlib.pyplot`,
		`exec/default.yaml:10:7: user "0:0" is not allowed: uid must be between 1 and 4294967294 (0 is root, which sandboxes never run as)`,
	})
}

// Every mistake in an egress profile, decoding and Compile alike.
func TestEveryProblemOfAnEgressProfile(t *testing.T) {
	profile := "name: web\n" +
		"mode: audit\n" +
		"allow:\n" +
		"  - hosts: [\"*\", a.example]\n" +
		"    methods: [get]\n" +
		"    port: [443]\n" +
		"  - hosts: 5\n" +
		"deny:\n" +
		"  - hosts: [b.example]\n" +
		"    ports: []\n" +
		"allow_cidrs: [10.0.0.1, 10.0.0.0/8, 10.0.0.0/8]\n" +
		"max_response_bytes: 10MiB\n" +
		"total_timeout: 2h\n" +
		"requests_per_minute: 0\n"
	dir := writeTree(t, map[string]string{"exec/default.yaml": minimal, "egress/web.yaml": profile})
	sameLines(t, problems(t, dir), []string{
		`egress/web.yaml:2:7: mode "audit" is not allowed; use enforce (deny what the rules do not allow), report (allow, but log what enforce would deny) or approve (hosts that match no rule need a person's approval)`,
		`egress/web.yaml:4:13: allow[0].hosts[0]: host pattern "*" matches every host; name the hosts or domains to allow, e.g. "*.example.com"`,
		`egress/web.yaml:5:15: allow[0].methods[0]: method "get" is not allowed (methods are upper case: GET); use GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, CONNECT`,
		`egress/web.yaml:6:5: unknown key "port" in allow[0]; did you mean ports? (allowed keys: name, hosts, ports, methods)`,
		"egress/web.yaml:7:12: allow[1].hosts must be a list of strings, such as [numpy, pandas], got the number 5",
		"egress/web.yaml:10:12: deny[0].ports is an empty list; remove the key to use the default, or list values (a rule that should match nothing should be removed)",
		`egress/web.yaml:11:15: allow_cidrs[0]: "10.0.0.1" is an address, not a CIDR; write 10.0.0.1/32`,
		"egress/web.yaml:11:37: allow_cidrs[2]: 10.0.0.0/8 is listed twice (also allow_cidrs[1])",
		`egress/web.yaml:12:21: max_response_bytes must be a whole number, got the string "10MiB"; allowed is 1 to 1073741824 bytes (1 GiB); write the number of bytes: 10000000 for 10 MB, 10485760 for 10 MiB`,
		"egress/web.yaml:13:16: total_timeout is 2h; allowed is 1s to 1h",
		"egress/web.yaml:14:22: requests_per_minute is 0; allowed is 1 to 100000",
	})
}

// Every file of every subdirectory is checked: one run for a dir.
func TestEveryProblemOfEveryFile(t *testing.T) {
	data := t.TempDir()
	dir := writeTree(t, map[string]string{
		"exec/default.yaml":      minimal + "nofile: 1\n",
		"exec/big.yaml":          "name: big\nimage: x\nseccomp: default.json\nshm_mb: 0\n",
		"exec/old.yml":           "name: old\n",
		"egress/a.yaml":          "name: a\nmode: audit\n",
		"egress/b.yaml":          "name: b\nallow:\n\t- hosts: [x.example]\n",
		"datasets/sales.yaml":    "name: sales\npath: " + data + "\n",
		"datasets/reports.yaml":  "name: reports\npath: /etc/reports\ntenants: [acme]\n",
		"datasets/archive.yaml":  "name: archiv\npath: " + data + "\ntenants: [acme]\n",
		"seccomp/unused.json":    "not looked at",
		"egress/notes.txt":       "not looked at",
		"exec/.default.yaml.swp": "not looked at",
	})
	sameLines(t, problems(t, dir), []string{
		"exec/big.yaml:4:9: shm_mb is 0; allowed is 1 to 1024 MiB",
		"exec/default.yaml:4:9: nofile is 1; allowed is 16 to 65536",
		"exec/old.yml: exec profiles must end in .yaml; rename it to old.yaml",
		`egress/a.yaml:2:7: mode "audit" is not allowed; use enforce (deny what the rules do not allow), report (allow, but log what enforce would deny) or approve (hosts that match no rule need a person's approval)`,
		"egress/b.yaml:3:1: tabs are not allowed for indentation in YAML; use spaces",
		`datasets/archive.yaml:1:7: name "archiv" does not match the file name "archive.yaml"; rename the file to archiv.yaml or set name: archive`,
		"datasets/reports.yaml:2:7: path /etc/reports is (under) the system directory /etc; put datasets in a directory of their own",
		"datasets/sales.yaml: tenants is required: list the tenants that may mount the dataset",
	})
}

// One mistake is reported once: what follows from it (a default standing
// in for a refused value, a file that names a broken file) is not.
func TestOneMistakeIsReportedOnce(t *testing.T) {
	bad := `{"defaultAction": "SCMP_ACT_ALLOW"}`
	cases := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"misspelt required key", map[string]string{"exec/default.yaml": "name: default\nimgae: x\nseccomp: default.json\n"},
			[]string{`exec/default.yaml:2:1: unknown key "imgae"; did you mean image?`}},
		{"misspelt key next to the right one", map[string]string{"exec/default.yaml": "name: default\nimage: \" \"\nimgae: x\nseccomp: default.json\n"},
			[]string{"exec/default.yaml:2:8: image is required", `exec/default.yaml:3:1: unknown key "imgae"; did you mean image?`}},
		{"name of the wrong type", map[string]string{"exec/default.yaml": "name: [default]\nimage: x\nseccomp: default.json\n"},
			[]string{"exec/default.yaml:1:7: name must be a string, got a list"}},
		{"seccomp of the wrong type", map[string]string{"exec/default.yaml": "name: default\nimage: x\nseccomp: 5\n"},
			[]string{"exec/default.yaml:3:10: seccomp must be a string, got the number 5; put it in quotes"}},
		{"host of the wrong type", map[string]string{"exec/default.yaml": minimal, "egress/web.yaml": "name: web\nallow:\n  - hosts: [a.example, [b]]\n"},
			[]string{"egress/web.yaml:3:24: allow[0].hosts[1] must be a string, got a list"}},
		{"rule that is not a mapping", map[string]string{"exec/default.yaml": minimal, "egress/web.yaml": "name: web\nallow:\n  - a.example\n"},
			[]string{"egress/web.yaml:3:5: allow[0] must be a mapping of keys, got the string \"a.example\""}},
		{"egress name of the wrong type", map[string]string{"exec/default.yaml": minimal, "egress/web.yaml": "name: 5\n"},
			[]string{"egress/web.yaml:1:7: name must be a string, got the number 5; put it in quotes"}},
		{"exec names a broken egress profile", map[string]string{"exec/default.yaml": minimal + "egress: web\n", "egress/web.yaml": "name: web\nmode: x\n"},
			[]string{`egress/web.yaml:2:7: mode "x" is not allowed`}},
		{"broken default profile", map[string]string{"exec/default.yaml": minimal + "nofile: 1\n"},
			[]string{"exec/default.yaml:4:9: nofile is 1"}},
		{"broken none profile", map[string]string{"exec/default.yaml": minimal, "egress/none.yaml": "name: none\nmode: report\n"},
			[]string{`egress/none.yaml:2:7: profile "none" must deny everything: mode enforce`}},
		{"seccomp file two profiles name", map[string]string{"exec/default.yaml": minimal, "exec/b.yaml": "name: b\nimage: x\nseccomp: default.json\n", "seccomp/default.json": bad},
			[]string{`seccomp/default.json: defaultAction "SCMP_ACT_ALLOW" is not allowed`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := problems(t, writeTree(t, tc.files))
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("problem %d:\n got %s\nwant %s...", i+1, got[i], w)
				}
			}
		})
	}
}

func TestUnknownKeyHints(t *testing.T) {
	cases := []struct{ profile, want string }{
		{minimal + "egres: none\n", `unknown key "egres"; did you mean egress? (allowed keys: `},
		{minimal + "Image: x\n", `unknown key "Image"; did you mean image?`},
		{minimal + "memory_mb: 64\n", `unknown key "memory_mb"; memory_mb belongs under limits: (limits.memory_mb) (allowed keys: `},
		{minimal + "max_input_count: 3\n", `unknown key "max_input_count"; max_input_count belongs under files: (files.max_input_count)`},
		{minimal + "files:\n  max_input_bytez: 3\n", `unknown key "max_input_bytez" in files; did you mean max_input_bytes?`},
		{minimal + "bogus: 1\n", `unknown key "bogus" (allowed keys: name, description, image`},
	}
	for _, tc := range cases {
		_, err := loadOne(t, tc.profile)
		var perr *Error
		if !errors.As(err, &perr) || !strings.HasPrefix(perr.Msg, tc.want) {
			t.Errorf("%q: error %v, want it to start with %q", tc.profile, err, tc.want)
		}
	}
}

func TestNumberHint(t *testing.T) {
	for _, tc := range []struct{ path, value, want string }{
		{"max_response_bytes", "10MB", "; write the number of bytes: 10000000 for 10 MB, 10485760 for 10 MiB"},
		{"max_request_bytes", "64 KiB", "; write the number of bytes: 64000 for 64 KB, 65536 for 64 KiB"},
		{"files.max_input_bytes", "1.5g", "; write the number of bytes: 1500000000 for 1.5 GB, 1610612736 for 1.5 GiB"},
		{"limits.memory_mb", "2GiB", "; write the number of MiB: 2048 for 2 GiB"},
		{"shm_mb", "512M", "; write the number of MiB: 512 for 512 MiB"},
		{"limits.timeout_ms", "10s", "; write the number of milliseconds: 10000 for 10s"},
		{"session_idle_timeout_s", "10m", "; write the number of seconds: 600 for 10m"},
		{"max_response_bytes", "lots", ""},
		{"nofile", "10k", ""},
		{"limits.memory_mb", "10s", ""},
	} {
		if got := numberHint(tc.path, tc.value); got != tc.want {
			t.Errorf("numberHint(%s, %q) = %q, want %q", tc.path, tc.value, got, tc.want)
		}
	}
}

// Warnings do not stop a load; the set carries them at the entry's
// position.
func TestWarningsAtLoad(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"exec/default.yaml": minimal,
		"egress/lan.yaml":   "name: lan\nallow:\n  - hosts: [a.example]\nallow_cidrs:\n  - 10.20.0.0/16\n  - 169.254.169.254/32\n",
	})
	set, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "egress", "lan.yaml")
	var got []string
	for _, w := range set.Warnings {
		got = append(got, w.String())
	}
	want := []string{
		file + ":5:5: warning: allow_cidrs[0] 10.20.0.0/16 opens 10.20.0.0/16 of private network 10.0.0.0/8 (hosts on internal networks)",
		file + ":6:5: warning: allow_cidrs[1] 169.254.169.254/32 opens the cloud metadata service (AWS, GCP, Azure, OpenStack and others) at 169.254.169.254",
	}
	if len(got) != 2 || got[0] != want[0] || !strings.HasPrefix(got[1], want[1]) {
		t.Errorf("warnings\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r := Check(dir); r.Set == nil || len(r.Warnings) != 2 {
		t.Errorf("Check: set %v, %d warnings", r.Set, len(r.Warnings))
	}
	if shipped, err := Load("."); err != nil || len(shipped.Warnings) != 0 {
		t.Errorf("shipped profiles: %v, warnings %v; want none", err, shipped.Warnings)
	}
}

func TestLoadEgressFile(t *testing.T) {
	scratch := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(scratch, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p, w, err := LoadEgressFile(write("draft.yaml", "name: draft\nallow:\n  - hosts: [a.example]\nallow_cidrs: [127.0.0.0/8]\n"))
	if err != nil || p.Name != "draft" || !p.Compiled() || len(w) != 1 {
		t.Fatalf("LoadEgressFile = %v %v %v", p, w, err)
	}
	for name, content := range map[string]string{
		"other.yaml": "name: draft\n",
		"bad.yaml":   "name: bad\nmode: x\nallow: 5\n",
		"list.yml":   "name: list\n",
	} {
		_, _, err := LoadEgressFile(write(name, content))
		if err == nil {
			t.Errorf("%s loads", name)
		}
	}
	_, _, err = LoadEgressFile(write("bad.yaml", "name: bad\nmode: x\nallow: 5\n"))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 2 {
		t.Errorf("bad.yaml: %v, want its two problems", err)
	}
	if _, _, err := LoadEgressFile(filepath.Join(scratch, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "cannot read the egress profile") {
		t.Errorf("missing file: %v", err)
	}
}

// FuzzLoadEgress checks that any egress profile file either loads into a
// compiled profile or fails with well-formed problems, never both.
func FuzzLoadEgress(f *testing.F) {
	shipped, err := os.ReadFile("egress/web-research.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(shipped),
		"name: web\n",
		"name: web\nallow:\n\t- hosts: [a.example]\n",
		"name: web\nalow_cidrs: [169.254.0.0/16]\nmax_response_bytes: 10MB\n",
		"name: web\nallow_cidrs: [169.254.169.254/32, fd00:ec2::/64]\n",
		"name: web\nallow:\n  - hosts: [*.x]\n",
	} {
		f.Add([]byte(seed))
	}
	const file = "egress/web.yaml"
	f.Fuzz(func(t *testing.T, data []byte) {
		p, warnings, errs := parseEgress(file, data)
		if len(errs) > 0 {
			if p != nil || warnings != nil {
				t.Fatalf("problems %v and a profile %v", errs, p)
			}
			for _, e := range errs {
				if e.File != file || e.Line < 0 || e.Column < 0 || e.Msg == "" {
					t.Fatalf("problem %#v is not well formed", e)
				}
			}
			return
		}
		if p == nil || !p.Compiled() || p.Name != "web" || p.Source != file {
			t.Fatalf("accepted profile is incomplete: %+v", p)
		}
		for _, w := range warnings {
			if w.File != file || w.Msg == "" {
				t.Fatalf("warning %#v is not well formed", w)
			}
		}
	})
}
