package imagebuild

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func write(t *testing.T, dir, ref, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, FileName(ref)), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFileName(t *testing.T) {
	for ref, want := range map[string]string{
		"sandboxd/python-data:3.11":  "sandboxd_python-data_3.11.json",
		"sandboxd/browser:bookworm":  "sandboxd_browser_bookworm.json",
		"../../etc/passwd":           ".._.._etc_passwd.json",
		"reg.example:5000/a/b@sha:x": "reg.example_5000_a_b_sha_x.json",
	} {
		if got := FileName(ref); got != want {
			t.Errorf("FileName(%q) = %q, want %q", ref, got, want)
		}
		if strings.Contains(FileName(ref), "/") {
			t.Errorf("FileName(%q) leaves the directory", ref)
		}
	}
}

func TestReadAndDescribe(t *testing.T) {
	dir := t.TempDir()
	ref := "sandboxd/python-data:3.11"
	now := time.Date(2026, 12, 7, 14, 0, 0, 0, time.UTC)

	if s, err := Read(dir, ref); s != nil || err != nil {
		t.Fatalf("no file: %+v %v", s, err)
	}
	if s, err := Read(filepath.Join(dir, "absent"), ref); s != nil || err != nil {
		t.Fatalf("no directory: %+v %v", s, err)
	}
	if s, err := Read("", ref); s != nil || err != nil {
		t.Fatalf("no directory configured: %+v %v", s, err)
	}

	write(t, dir, ref, `{"image":"sandboxd/python-data:3.11","state":"building","step":"building the Debian root file system","step_number":1,"steps":3,"started":"2026-12-07T13:57:00Z","updated":"2026-12-07T13:57:05Z","log":"data/image-builds/x.log"}`)
	s, err := Read(dir, ref)
	if err != nil {
		t.Fatal(err)
	}
	got := s.Describe(now)
	for _, want := range []string{"being built", "step 1 of 3", "Debian root file system", "3m0s so far", "data/image-builds/x.log"} {
		if !strings.Contains(got, want) {
			t.Errorf("Describe = %q, lacks %q", got, want)
		}
	}
	if got := s.Describe(now.Add(2 * StaleAfter)); got != "" {
		t.Errorf("a build silent for longer than StaleAfter is described as %q", got)
	}

	write(t, dir, ref, `{"image":"sandboxd/python-data:3.11","state":"failed","step":"smoke-testing","started":"2026-12-07T13:57:00Z","updated":"2026-12-07T13:59:00Z"}`)
	if s, err = Read(dir, ref); err != nil {
		t.Fatal(err)
	}
	if got := s.Describe(now); !strings.Contains(got, "failed while smoke-testing at 13:59:00 UTC") {
		t.Errorf("failed build: %q", got)
	}
	write(t, dir, ref, `{"image":"sandboxd/python-data:3.11","state":"done","started":"2026-12-07T13:57:00Z","updated":"2026-12-07T13:59:00Z"}`)
	if s, err = Read(dir, ref); err != nil || s.Describe(now) != "" {
		t.Errorf("a finished build has nothing to add: %q %v", s.Describe(now), err)
	}

	for name, body := range map[string]string{
		"not JSON":      `building`,
		"another image": `{"image":"sandboxd/python:3.11","state":"building"}`,
		"unknown state": `{"image":"sandboxd/python-data:3.11","state":"paused"}`,
	} {
		write(t, dir, ref, body)
		if s, err := Read(dir, ref); err == nil {
			t.Errorf("%s: read as %+v, want an error", name, s)
		}
	}
}

// images/status.sh, which the build scripts source, writes what Read
// reads, under the name FileName gives.
func TestStatusScriptWritesWhatReadReads(t *testing.T) {
	dir := t.TempDir()
	const ref = "sandboxd/python-data:3.11"
	script := `source ../../images/status.sh
STATUS_IMAGE="$1" STATUS_LOG="$2/x.log" STATUS_FILE="$2/$(status_file_name "$1")"
build_status building 2 3 'building "the" image'
echo "$(status_file_name "$1")"`
	out, err := exec.Command("bash", "-c", script, "bash", ref, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("status.sh: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != FileName(ref) {
		t.Errorf("status_file_name %q, FileName %q", got, FileName(ref))
	}
	s, err := Read(dir, ref)
	if err != nil || s == nil {
		t.Fatalf("Read: %+v %v", s, err)
	}
	if s.State != Building || s.StepNumber != 2 || s.Steps != 3 || s.Step != `building "the" image` || s.Log != dir+"/x.log" || s.Started.IsZero() {
		t.Errorf("read back %+v", s)
	}
}
