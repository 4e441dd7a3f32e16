package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// checkProfilesDir runs `sandboxd profiles check dir` and returns its exit
// code and output.
func checkProfilesDir(dir string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run([]string{"profiles", "check", dir}, &out, &errb)
	return code, out.String(), errb.String()
}

func TestProfilesCheck(t *testing.T) {
	code, out, errb := checkProfilesDir("../../profiles")
	if code != 0 {
		t.Fatalf("shipped profiles: exit %d: %s", code, errb)
	}
	if !strings.Contains(out, `exec profile "default" ok`) {
		t.Fatalf("output %q", out)
	}

	// A bad value is reported as file:line:column: problem, with a non-zero exit.
	dir := scratchDir(t, map[string]string{"exec/default.yaml": "name: default\nimage: sandboxd/python:3.11\nseccomp: default.json\nlimits:\n  memory_mb: 999999\n"})
	code, _, errb = checkProfilesDir(dir)
	want := filepath.Join(dir, "exec", "default.yaml") + ":5:14: "
	if code == 0 || !strings.HasPrefix(errb, want) || !strings.Contains(errb, "memory_mb") {
		t.Fatalf("exit %d stderr %q; want non-zero and %q...memory_mb", code, errb, want)
	}
}

func TestVersionAndUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "sandboxd ") {
		t.Fatalf("version: %d %q", code, out.String())
	}
	if code := run([]string{"frobnicate"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unknown command") {
		t.Fatalf("unknown command: %d %q", code, errb.String())
	}
}

func TestServeFlagsFromEnvironment(t *testing.T) {
	t.Setenv("SANDBOXD_ADDR", "127.0.0.1:9999")
	t.Setenv("SANDBOXD_DATA_DIR", "/tmp/x")
	t.Setenv("SANDBOXD_MAX_RUNS", "7")
	var errb bytes.Buffer
	c, err := parseServe([]string{"--data-dir", "/tmp/flag-wins"}, &errb)
	if err != nil {
		t.Fatal(err)
	}
	if c.addr != "127.0.0.1:9999" || c.dataDir != "/tmp/flag-wins" || c.maxRuns != 7 || c.profilesDir != "./profiles" {
		t.Fatalf("config %+v", c)
	}
	if _, err := parseServe([]string{"stray"}, &errb); err == nil {
		t.Fatal("stray argument accepted")
	}
	t.Setenv("SANDBOXD_MAX_RUNS", "lots")
	if _, err := parseServe(nil, &errb); err == nil || !strings.Contains(err.Error(), "SANDBOXD_MAX_RUNS") {
		t.Fatalf("bad env value: %v", err)
	}
	t.Setenv("SANDBOXD_MAX_RUNS", "0")
	if _, err := parseServe(nil, &errb); err == nil {
		t.Fatal("zero run slots accepted")
	}
}
