package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/logbuf"
	"github.com/sandboxd/sandboxd/profiles"
)

// A changed file is picked up by the poll; a bad edit keeps the last good
// set and is reported once with its file and line; an unchanged dir is not
// reloaded by the poll, but is by a forced reload (SIGHUP).
func TestReloader(t *testing.T) {
	dir := t.TempDir()
	seccomp, err := os.ReadFile("../../profiles/seccomp/default.json")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "seccomp/default.json"), string(seccomp))
	good := "name: default\nimage: sandboxd/python:3.11\nseccomp: default.json\nlimits:\n  timeout_ms: 5000\n"
	file := filepath.Join(dir, "exec/default.yaml")
	writeFile(t, file, good)
	applied := 0
	r, cur, logs := testReloader(t, dir, func(old, set *profiles.Set) { applied++ })
	set := cur.Load()

	if r.reload("file change", false) {
		t.Fatal("reloaded an unchanged dir")
	}
	v1 := set.Exec["default"].Version

	// Edit: a new version is in force and the reload is logged with it.
	writeFile(t, file, strings.Replace(good, "5000", "4000", 1))
	bump(t, file)
	if !r.reload("file change", false) {
		t.Fatal("a changed file was not reloaded")
	}
	v2 := cur.Load().Exec["default"].Version
	if v2 == v1 || applied != 1 {
		t.Fatalf("version %s (was %s), applied %d", v2, v1, applied)
	}
	l := logs.Records("profiles reloaded")
	if len(l) != 1 || !strings.Contains(strings.Join(toStrings(l[0]["changed"]), ","), "exec/default") ||
		l[0]["exec_versions"].(map[string]any)["default"] != v2[:12] {
		t.Errorf("reload line %v", l)
	}

	// Bad edit: refused with file:line, the last good set stays, reported once.
	writeFile(t, file, strings.Replace(good, "5000", "99", 1))
	bump(t, file)
	first, again := r.reload("file change", false), r.reload("file change", false)
	if first || again {
		t.Fatal("a bad edit was put in force")
	}
	if got := cur.Load().Exec["default"].Version; got != v2 {
		t.Fatalf("version after a bad edit %s, want the last good %s", got, v2)
	}
	failed := logs.Records("profile reload failed")
	if len(failed) != 1 || failed[0]["file"] != file || failed[0]["line"] != float64(5) || !strings.Contains(failed[0]["err"].(string), "timeout_ms") {
		t.Fatalf("failure lines %v", failed)
	}
	// SIGHUP forces a reload: the bad file is reported again.
	r.reload("SIGHUP", true)
	if n := len(logs.Records("profile reload failed")); n != 2 {
		t.Fatalf("%d failure lines after SIGHUP, want 2", n)
	}
	if applied != 1 {
		t.Fatalf("apply ran %d times", applied)
	}
}

// bump moves a file's modification time forward, so that an edit within
// the file system's timestamp granularity is still seen.
func bump(t *testing.T, file string) {
	t.Helper()
	later := time.Now().Add(time.Duration(time.Now().UnixNano()%1000+1) * time.Millisecond)
	if err := os.Chtimes(file, later, later); err != nil {
		t.Fatal(err)
	}
}

func toStrings(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, x := range l {
			out = append(out, x.(string))
		}
	}
	return out
}

// The warnings of a set that loads are logged at every reload, with the
// entry's file, line and column; a reload that fails counts its problems.
func TestReloadLogsWarningsAndProblems(t *testing.T) {
	dir := scratchDir(t, nil) // profiles_test.go
	r, _, logs := testReloader(t, dir, nil)

	file := filepath.Join(dir, "egress/lan.yaml")
	writeFile(t, file, "name: lan\nallow:\n  - hosts: [a.example]\nallow_cidrs: [169.254.169.254/32]\n")
	if !r.reload("SIGHUP", true) {
		t.Fatal("a good set was not put in force")
	}
	w := logs.Records("profile warning")
	if len(w) != 1 || w[0]["file"] != file || w[0]["line"] != float64(4) || w[0]["column"] != float64(15) ||
		!strings.Contains(w[0]["warning"].(string), "opens the cloud metadata service") {
		t.Fatalf("warning lines %v", w)
	}

	writeFile(t, file, "name: lan\nmode: x\nallow: 5\n")
	if r.reload("SIGHUP", true) {
		t.Fatal("a bad set was put in force")
	}
	f := logs.Records("profile reload failed")
	if len(f) != 1 || f[0]["problems"] != float64(2) || f[0]["line"] != float64(2) || f[0]["column"] != float64(7) {
		t.Fatalf("failure lines %v", f)
	}
}

// testReloader loads dir, puts it in force and returns a reloader of it
// that logs as JSON to the returned buffer.
func testReloader(t *testing.T, dir string, apply func(old, set *profiles.Set)) (*reloader, *atomic.Pointer[profiles.Set], *logbuf.Buffer) {
	t.Helper()
	set, err := profiles.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cur := &atomic.Pointer[profiles.Set]{}
	cur.Store(set)
	logs := &logbuf.Buffer{}
	return newReloader(dir, cur, slog.New(slog.NewJSONHandler(logs, nil)), apply), cur, logs
}
