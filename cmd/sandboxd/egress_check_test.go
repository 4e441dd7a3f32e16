package main

import (
	"bytes"
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

	dir := scratchDir(t, map[string]string{"egress/web.yaml": "name: web\nallow:\n  - hosts:\n      - example.com\n      - \"*\"\n"})
	out.Reset()
	errb.Reset()
	code := run([]string{"profiles", "check", dir}, &out, &errb)
	want := filepath.Join(dir, "egress", "web.yaml") + ":5:9: "
	if code == 0 || !strings.HasPrefix(errb.String(), want) || !strings.Contains(errb.String(), "matches every host") {
		t.Fatalf("exit %d stderr %q; want non-zero and %q...matches every host", code, errb.String(), want)
	}
}
