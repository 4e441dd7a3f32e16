package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// profiles check validates and lists egress profiles too.
func TestProfilesCheckEgress(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"profiles", "check", "../../profiles"}, &out, &errb); code != 0 {
		t.Fatalf("shipped profiles: exit %d: %s", code, errb.String())
	}
	for _, name := range []string{"none", "package-mirror", "web-research"} {
		if !strings.Contains(out.String(), `egress profile "`+name+`" ok (mode enforce, version `) {
			t.Errorf("output does not list egress profile %s:\n%s", name, out.String())
		}
	}

	dir := t.TempDir()
	for _, d := range []string{"exec", "seccomp", "egress"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	seccomp, err := os.ReadFile("../../profiles/seccomp/default.json")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"seccomp/default.json": string(seccomp),
		"exec/default.yaml":    "name: default\nimage: sandboxd/python:3.11\nseccomp: default.json\n",
		"egress/web.yaml":      "name: web\nallow:\n  - hosts:\n      - example.com\n      - \"*\"\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out.Reset()
	errb.Reset()
	code := run([]string{"profiles", "check", dir}, &out, &errb)
	want := filepath.Join(dir, "egress", "web.yaml") + ":5:9: "
	if code == 0 || !strings.HasPrefix(errb.String(), want) || !strings.Contains(errb.String(), "matches every host") {
		t.Fatalf("exit %d stderr %q; want non-zero and %q...matches every host", code, errb.String(), want)
	}
}
