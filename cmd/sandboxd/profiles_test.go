package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/egress/egresstest"
)

// scratchDir writes files (relative path -> content) under a new temp dir,
// with the shipped seccomp filter and a valid exec/default.yaml unless
// files say otherwise, and returns the dir.
func scratchDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	seccomp, err := os.ReadFile("../../profiles/seccomp/default.json")
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]string{
		"seccomp/default.json": string(seccomp),
		"exec/default.yaml":    "name: default\nimage: sandboxd/python:3.11\nseccomp: default.json\n",
	}
	for k, v := range files {
		all[k] = v
	}
	for name, content := range all {
		if content != "" { // "" removes a default file
			writeFile(t, filepath.Join(dir, filepath.FromSlash(name)), content) // egress_e2e_test.go
		}
	}
	return dir
}

// The draft: a misspelt key, a size with a unit, a tab in another
// file, and a range that opens link-local in a third. One run reports all
// of them, each at file:line:column, and says what to write instead.
func TestProfilesCheckReportsEveryProblem(t *testing.T) {
	dir := scratchDir(t, map[string]string{
		"egress/draft.yaml":  "name: draft\nallow:\n  - hosts: [\"*.python.org\"]\n    port: [443]\nalow_cidrs: [10.0.0.0/8]\nmax_response_bytes: \"10MB\"\nconnect_timeout: 5\n",
		"egress/tabbed.yaml": "name: tabbed\nallow:\n  - hosts:\n\t- a.example\n",
		"egress/lan.yaml":    "name: lan\nallow:\n  - hosts: [a.example]\nallow_cidrs:\n  - 169.254.0.0/16\n",
		"exec/small.yaml":    "name: small\nimgae: sandboxd/python:3.11\nseccomp: default.json\nlimits:\n  memory_mb: 1GB\n",
	})
	var out, errb bytes.Buffer
	code := run([]string{"profiles", "check", dir}, &out, &errb)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, errb.String())
	}
	f := func(name string) string { return filepath.Join(dir, filepath.FromSlash(name)) }
	want := []string{
		f("exec/small.yaml") + `:2:1: unknown key "imgae"; did you mean image? (allowed keys: name, description, image, runtime, user, seccomp, egress, isolation, cell, limits, files, max_code_bytes, max_stdin_bytes, nofile, file_size_mb, shm_mb, preload, redact, secrets, capture_retention_days, session_idle_timeout_s, session_max_lifetime_s)`,
		f("exec/small.yaml") + `:5:14: limits.memory_mb must be a whole number, got the string "1GB"; allowed is 16 to 65536 MiB; write the number of MiB: 1024 for 1 GiB`,
		f("egress/draft.yaml") + `:4:5: unknown key "port" in allow[0]; did you mean ports? (allowed keys: name, hosts, ports, methods)`,
		f("egress/draft.yaml") + `:5:1: unknown key "alow_cidrs"; did you mean allow_cidrs? (allowed keys: name, description, mode, allow, deny, allow_cidrs, max_response_bytes, max_request_bytes, connect_timeout, total_timeout, requests_per_minute, redact, capture_retention_days, render)`,
		f("egress/draft.yaml") + `:6:21: max_response_bytes must be a whole number, got the string "10MB"; allowed is 1 to 1073741824 bytes (1 GiB); write the number of bytes: 10000000 for 10 MB, 10485760 for 10 MiB`,
		f("egress/draft.yaml") + `:7:18: connect_timeout must be a duration such as 5s, 500ms or 2m, got the number 5; allowed is 100ms to 1m; durations need a unit, as in 5s or 5ms`,
		f("egress/tabbed.yaml") + `:4:1: tabs are not allowed for indentation in YAML; use spaces`,
		f("egress/lan.yaml") + `:5:5: warning: allow_cidrs[0] 169.254.0.0/16 opens link-local 169.254.0.0/16 (services on the host's own network links); the cloud metadata addresses in it (169.254.169.254, 169.254.170.2, 169.254.169.253, 169.254.169.123) stay denied: each opens only when named exactly, as 169.254.169.254/32`,
		"sandboxd profiles check: 7 problems in 3 files, 1 warning; nothing in " + dir + " loads until all are fixed",
	}
	got := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("stderr has %d lines, want %d:\n%s", len(got), len(want), errb.String())
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, got[i], want[i])
		}
	}
	if out.Len() != 0 {
		t.Errorf("stdout %q, want nothing when nothing loads", out.String())
	}
}

// Warnings do not fail the check; the metadata address itself is named.
func TestProfilesCheckWarnings(t *testing.T) {
	dir := scratchDir(t, map[string]string{
		"egress/imds.yaml": "name: imds\nallow:\n  - hosts: [\"*.internal.example\"]\nallow_cidrs: [169.254.169.254/32, 8.8.8.0/24]\n",
	})
	var out, errb bytes.Buffer
	if code := run([]string{"profiles", "check", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, want 0: %s", code, errb.String())
	}
	file := filepath.Join(dir, "egress", "imds.yaml")
	for _, w := range []string{
		file + ":4:15: warning: allow_cidrs[0] 169.254.169.254/32 opens the cloud metadata service (AWS, GCP, Azure, OpenStack and others) at 169.254.169.254",
		file + ":4:35: warning: allow_cidrs[1] 8.8.8.0/24 opens nothing",
	} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("stderr does not say %q:\n%s", w, errb.String())
		}
	}
	if !strings.Contains(out.String(), `egress profile "imds" ok`) || !strings.Contains(out.String(), "loads, with 2 warnings (above)") {
		t.Errorf("stdout %q", out.String())
	}
}

// Every command answers -h and --help with its usage on stdout and exit 0;
// after "--", --help is a name.
func TestHelpForEveryCommand(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"help"}, {"-h"},
		{"profiles", "--help"}, {"profiles", "-h"}, {"profiles", "help"},
		{"profiles", "check", "--help"}, {"profiles", "check", "-h"},
		{"profiles", "evaluate", "--help"}, {"profiles", "evaluate", "-h"}, {"profiles", "evaluate", "dir", "-h"},
		{"seccomp", "--help"}, {"seccomp", "check", "--help"}, {"seccomp", "check", "-h"},
		{"audit", "--help"}, {"audit", "verify", "--help"}, {"audit", "verify", "-h"},
		{"mcp", "--help"}, {"mcp", "-h"},
	} {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		if code != 0 || !strings.HasPrefix(out.String(), "usage:") {
			t.Errorf("sandboxd %s: exit %d, stdout %q, stderr %q; want 0 and the usage on stdout", strings.Join(args, " "), code, out.String(), errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"profiles", "check", "--", "--help"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), filepath.Join("--help", "exec")+": cannot read the exec profiles dir") {
		t.Errorf("profiles check -- --help: exit %d %q, want 1 and --help read as a dir", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"profiles", "check", "--bogus", "x"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "flag provided but not defined: -bogus") {
		t.Errorf("profiles check --bogus: exit %d %q, want 2", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"profiles", "frob"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown subcommand "frob"`) {
		t.Errorf("profiles frob: exit %d %q, want 2", code, errb.String())
	}
}

// evaluate runs `sandboxd profiles evaluate ARGS` in-process with a table
// resolver, and returns the exit status, stdout and stderr.
func evaluate(t *testing.T, res *egresstest.Resolver, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := profilesCmd(append([]string{"evaluate"}, args...), &out, &errb, res)
	return code, out.String(), errb.String()
}

// A draft in a scratch folder can be tried before it ships, and a name
// that cannot be resolved here does not hide what the rules say.
func TestProfilesEvaluate(t *testing.T) {
	scratch := t.TempDir()
	draft := "name: draft\nallow:\n  - name: docs\n    hosts: [\"*.python.org\"]\n    ports: [443]\n"
	if err := os.WriteFile(filepath.Join(scratch, "draft.yaml"), []byte(draft), 0o644); err != nil {
		t.Fatal(err)
	}
	res := egresstest.NewResolver(map[string][]string{"docs.python.org": {"151.101.0.223"}, "evil.python.org": {"10.0.0.7"}})
	cases := []struct {
		name   string
		args   []string
		code   int
		stdout []string
	}{
		{"allowed", []string{scratch, "draft", "https://docs.python.org/3/"}, 0, []string{
			"profile:       draft (mode enforce, version ",
			"request:       GET https://docs.python.org/3/ (host docs.python.org, port 443)",
			"rules:         allow: GET docs.python.org port 443 matches allow rule allow[0]:docs (pattern *.python.org)",
			"address check: passed: docs.python.org resolved to 151.101.0.223: address 151.101.0.223 is public",
			"overall:       allow",
		}},
		{"lower-case method", []string{scratch, "draft", "https://docs.python.org/3/", "get"}, 0, []string{"request:       GET https://docs.python.org/3/", "overall:       allow"}},
		{"cannot resolve", []string{scratch, "draft", "https://peps.python.org/"}, 3, []string{
			"rules:         allow: GET peps.python.org port 443 matches allow rule allow[0]:docs (pattern *.python.org)",
			"address check: unresolved: looking up peps.python.org failed: lookup peps.python.org: no such host; the proxy checks every address when it connects",
			"overall:       decided at connect time: allowed if every address peps.python.org then resolves to is outside the always-denied ranges",
		}},
		{"no resolve", []string{"--no-resolve", scratch, "draft", "https://docs.python.org/3/"}, 3, []string{
			"rules:         allow: GET docs.python.org port 443 matches allow rule allow[0]:docs (pattern *.python.org)",
			"address check: unresolved: looking up docs.python.org failed: lookup docs.python.org: not looked up (--no-resolve)",
		}},
		{"method the rule lacks", []string{scratch, "draft", "https://docs.python.org/", "post"}, 1, []string{
			"rules:         deny: method POST is not allowed to docs.python.org port 443: rule allow[0]:docs allows GET, HEAD",
			"address check: not checked: the rules deny the request",
			"overall:       deny",
		}},
		{"private answer", []string{scratch, "draft", "https://evil.python.org/"}, 1, []string{
			"rules:         allow: ",
			"address check: denied: evil.python.org resolved to 10.0.0.7; address 10.0.0.7 is in the always-denied range private network 10.0.0.0/8",
		}},
		{"built-in none", []string{scratch, "none", "https://docs.python.org/"}, 1, []string{"profile:       none (mode enforce, version ", "from built in", "rules:         deny: host docs.python.org matches no allow rule"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res.Reset()
			code, stdout, stderr := evaluate(t, res, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout does not say %q:\n%s", w, stdout)
				}
			}
		})
	}
	res.Reset()
	evaluate(t, res, "--no-resolve", scratch, "draft", "https://docs.python.org/3/")
	if calls := res.Calls(); len(calls) != 0 {
		t.Errorf("--no-resolve looked up %v", calls)
	}
}

// --json prints what the API answers, rules apart from the address check.
func TestProfilesEvaluateJSON(t *testing.T) {
	res := egresstest.NewResolver(nil)
	code, stdout, stderr := evaluate(t, res, "--json", "../../profiles", "web-research", "https://de.wikipedia.org/wiki/Go", "get")
	if code != 3 {
		t.Fatalf("exit %d, want 3: %s", code, stderr)
	}
	var body api.EvaluateResponse
	if err := json.Unmarshal([]byte(stdout), &body); err != nil {
		t.Fatalf("stdout is not an EvaluateResponse: %v\n%s", err, stdout)
	}
	if body.Decision != "deny" || body.Code != "resolve_failed" || body.Method != "GET" || body.Overall != "at_connect" ||
		body.Rules == nil || body.Rules.Verdict != "allow" || body.Rules.Pattern != "*.wikipedia.org" || body.Rules.Rule != "allow[0]:reference" ||
		body.AddressCheck.Status != "unresolved" || body.Profile.Name != "web-research" {
		t.Errorf("answer %+v (rules %+v)", body, body.Rules)
	}
}

func TestProfilesEvaluateRefuses(t *testing.T) {
	scratch := t.TempDir()
	bad := "name: bad\nallow:\n  - hosts: [a.example]\n    methods: [get]\nmax_request_bytes: 1KB\n"
	if err := os.WriteFile(filepath.Join(scratch, "bad.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(scratch, "bad.yaml")
	cases := []struct {
		name   string
		args   []string
		stderr []string
	}{
		{"usage", []string{scratch, "bad"}, []string{"usage: sandboxd profiles evaluate"}},
		{"no such profile", []string{scratch, "nope", "https://a.example/"}, []string{`no egress profile "nope": neither ` + filepath.Join(scratch, "egress", "nope.yaml") + " nor " + filepath.Join(scratch, "nope.yaml") + " exists"}},
		{"path as name", []string{scratch, "../x", "https://a.example/"}, []string{`"../x" is not a profile name`}},
		{"every problem of the draft", []string{scratch, "bad", "https://a.example/"}, []string{
			file + `:4:15: allow[0].methods[0]: method "get" is not allowed (methods are upper case: GET)`,
			file + `:5:20: max_request_bytes must be a whole number, got the string "1KB"; allowed is 0 (no request bodies) to 1073741824 bytes (1 GiB); write the number of bytes: 1000 for 1 KB, 1024 for 1 KiB`,
		}},
		{"bad URL", []string{"../../profiles", "web-research", "http://a b/"}, []string{"the request cannot be evaluated: "}},
		{"non-token method", []string{"../../profiles", "web-research", "https://en.wikipedia.org/", "G T"}, []string{`the request cannot be evaluated: method "G T" is not an HTTP method token`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := evaluate(t, egresstest.NewResolver(nil), tc.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2: %s", code, stderr)
			}
			for _, w := range tc.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, stderr)
				}
			}
		})
	}
}

// DIR/egress/NAME.yaml, the profiles dir layout, comes before DIR/NAME.yaml.
func TestProfilesEvaluatePrefersEgressDir(t *testing.T) {
	dir := scratchDir(t, map[string]string{
		"egress/web.yaml": "name: web\nallow:\n  - hosts: [a.example]\n",
		"web.yaml":        "name: web\nallow:\n  - hosts: [b.example]\n",
	})
	res := egresstest.NewResolver(map[string][]string{"a.example": {"93.184.216.34"}, "b.example": {"93.184.216.35"}})
	if code, out, errb := evaluate(t, res, dir, "web", "https://a.example/"); code != 0 || !strings.Contains(out, filepath.Join(dir, "egress", "web.yaml")) {
		t.Errorf("exit %d\n%s%s", code, out, errb)
	}
}
