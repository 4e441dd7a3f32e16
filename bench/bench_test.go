package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestContainerProfilesTurnsCellsIntoContainers(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "profiles")
	if err := containerProfiles("../profiles", dst); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"default": "container", "data": "container", "strict": "container"} {
		if got := isolationOf(dst, p); got != want {
			t.Errorf("profile %s: isolation %q, want %q", p, got, want)
		}
	}
	if isolationOf("../profiles", "default") != "cell" {
		t.Error("the shipped default profile changed too")
	}
	src, _ := os.ReadFile("../profiles/seccomp/default.json")
	cp, err := os.ReadFile(filepath.Join(dst, "seccomp", "default.json"))
	if err != nil || !bytes.Equal(src, cp) {
		t.Errorf("seccomp/default.json not copied as it is (err %v)", err)
	}
	def, _ := os.ReadFile(filepath.Join(dst, "exec", "default.yaml"))
	orig, _ := os.ReadFile("../profiles/exec/default.yaml")
	if want := bytes.Replace(orig, []byte("\nisolation: cell\n"), []byte("\nisolation: container\n"), 1); !bytes.Equal(def, want) {
		t.Error("default.yaml differs from the shipped one by more than its isolation line")
	}
}

func TestLoggedCountsWarningsAndErrorsOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	s := &server{log: path}
	write := func(text string) {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(text); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"level":"INFO","msg":"listening"}
{"level":"ERROR","msg":"run failed","err":"engine: gone"}
{"level":"ERROR","msg":"run failed","err":"engine: gone"}
not json
{"level":"WARN","msg":"host replaced"}
{"level":"WARN","msg":"half`)
	got := s.logged()
	if len(got) != 2 || got["ERROR run failed: engine: gone"] != 2 || got["WARN host replaced"] != 1 {
		t.Fatalf("logged = %v", got)
	}
	write(` a line"}
`)
	if got := s.logged(); len(got) != 1 || got["WARN half a line"] != 1 {
		t.Fatalf("second logged = %v, want only the line finished since", got)
	}
}

func TestRetryingWaitsOutBusyAnswers(t *testing.T) {
	n := 0
	fn := func() attempt {
		n++
		if n < 3 {
			return attempt{busy: true, retryAfter: time.Millisecond}
		}
		return attempt{timing: "total;dur=1"}
	}
	a, n429, done := retrying(fn, time.Now().Add(time.Minute), true)
	if !done || n429 != 2 || a.timing != "total;dur=1" {
		t.Fatalf("retrying = %+v, %d 429s, done %v", a, n429, done)
	}
	busy := func() attempt { return attempt{busy: true, retryAfter: time.Hour} }
	if _, n429, done := retrying(busy, time.Now().Add(time.Second), true); done || n429 != 1 {
		t.Fatalf("a wait past the deadline: %d 429s, done %v; want 1, false", n429, done)
	}
}

func TestMeasureCountsWarmErrorsAndBusy(t *testing.T) {
	n := 0
	fn := func() attempt {
		n++
		switch {
		case n%4 == 0:
			return attempt{busy: true, retryAfter: time.Millisecond}
		case n%3 == 0:
			return attempt{err: os.ErrClosed}
		}
		return attempt{timing: `queue;dur=0.10, sandbox;desc="warm";dur=0.02, total;dur=5.00`}
	}
	r := measure("s", "l", line{conc: 1, runs: 9}, fn)
	if r.ok+r.errs != 9 || r.busy == 0 || r.errors[os.ErrClosed.Error()] != r.errs || r.warm != r.ok || r.phases["total"] != 5 {
		t.Fatalf("row = %+v", r)
	}
}

func TestRetryAfter(t *testing.T) {
	for h, want := range map[string]time.Duration{"3": 3 * time.Second, "": time.Second, "soon": time.Second, "0": time.Second} {
		if got := retryAfter(h); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", h, got, want)
		}
	}
}

func TestKeepTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "RESULTS.md")
	if got := keepTail(path, "# new\n"); got != "# new\n\n"+tailMarker+"\n" {
		t.Fatalf("no file: %q", got)
	}
	if err := os.WriteFile(path, []byte("# old\n\n"+tailMarker+"\n\n## By hand\nfigures\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := keepTail(path, "# new\n"), "# new\n\n"+tailMarker+"\n## By hand\nfigures\n"; got != want {
		t.Fatalf("keepTail = %q, want %q", got, want)
	}
}
