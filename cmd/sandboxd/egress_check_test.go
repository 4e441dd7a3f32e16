package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// profiles check validates and lists egress profiles too.
func TestProfilesCheckEgress(t *testing.T) {
	code, out, errb := checkProfilesDir("../../profiles")
	if code != 0 {
		t.Fatalf("shipped profiles: exit %d: %s", code, errb)
	}
	for _, name := range []string{"none", "package-mirror", "web-research"} {
		if !strings.Contains(out, `egress profile "`+name+`" ok (mode enforce, version `) {
			t.Errorf("output does not list egress profile %s:\n%s", name, out)
		}
	}

	dir := scratchDir(t, map[string]string{"egress/web.yaml": "name: web\nallow:\n  - hosts:\n      - example.com\n      - \"*\"\n"})
	code, _, errb = checkProfilesDir(dir)
	want := filepath.Join(dir, "egress", "web.yaml") + ":5:9: "
	if code == 0 || !strings.HasPrefix(errb, want) || !strings.Contains(errb, "matches every host") {
		t.Fatalf("exit %d stderr %q; want non-zero and %q...matches every host", code, errb, want)
	}
}
