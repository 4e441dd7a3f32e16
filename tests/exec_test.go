package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/internal/e2e"
)

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

func TestHelloWorld(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	imageBefore := ""
	if img, err := dockerCli.ImageInspect(context.Background(), sandboxImage); err == nil {
		imageBefore = img.ID
	}
	r, res := c.execStatus(e2e.Py("print(1)"), "ok")
	if r.Stdout != "1\n" || r.Stderr != "" || r.ExitCode != 0 || r.Signal != "" {
		t.Errorf("stdout %q stderr %q exit_code %d signal %q; want \"1\\n\", \"\", 0, \"\"\n%s", r.Stdout, r.Stderr, r.ExitCode, r.Signal, res)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	if !strings.HasPrefix(r.Image, "sha256:") {
		t.Errorf("image %q does not start with sha256:", r.Image)
	}
	if r.Profile.Name != "default" || !hex64.MatchString(r.Profile.Version) {
		t.Errorf("profile %+v, want name default and a 64-hex version", r.Profile)
	}
	if r.StdoutTruncated || r.StderrTruncated || r.StdoutBase64 != nil || r.StderrBase64 != nil {
		t.Errorf("plain ASCII output is flagged truncated or given as base64\n%s", res)
	}
	if r.DurationMS < 0 || r.DurationMS > defTimeoutMS {
		t.Errorf("duration_ms %d out of range", r.DurationMS)
	}
	want := e2e.ExecLimits{TimeoutMS: defTimeoutMS, MemoryMB: defMemoryMB, CPUs: defCPUs, Pids: defPids, OutputBytes: defOutputBytes, TmpfsMB: defTmpfsMB}
	if r.Limits != want {
		t.Errorf("effective limits %+v, want the default profile's %+v", r.Limits, want)
	}
	if len(r.Files) != 0 || len(r.SkippedFiles) != 0 {
		t.Errorf("files %v skipped %v, want none", r.Files, r.SkippedFiles)
	}
	// Every documented field is present (not just zero after decoding).
	var m map[string]json.RawMessage
	if err := json.Unmarshal(res.Body, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "status", "exit_code", "signal", "stdout", "stderr", "stdout_truncated", "stderr_truncated",
		"duration_ms", "usage", "files", "skipped_files", "limits", "profile", "image"} {
		if _, ok := m[k]; !ok {
			t.Errorf("response lacks the field %q\n%s", k, res)
		}
	}
	for _, k := range []string{"files", "skipped_files"} {
		if string(m[k]) == "null" {
			t.Errorf("%s is null, want an array", k)
		}
	}
	// The image is the one tagged sandboxd/python:3.11 (before or after the
	// run, in case it is being rebuilt meanwhile).
	img, err := dockerCli.ImageInspect(context.Background(), sandboxImage)
	if err != nil {
		t.Fatalf("inspecting %s: %v", sandboxImage, err)
	}
	if r.Image != img.ID && r.Image != imageBefore {
		t.Errorf("image %q, want %s's id %q", r.Image, sandboxImage, img.ID)
	}
	waitExecGone(t, r.ID)
}

func TestStdinEcho(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	in := "hello\nwörld ✓\n\tlast line without newline"
	req := e2e.Py("import sys\nsys.stdout.write(sys.stdin.read())")
	req.Stdin = in
	r, res := c.execStatus(req, "ok")
	if r.Stdout != in {
		t.Errorf("stdout %q, want stdin %q back\n%s", r.Stdout, in, res)
	}
}

func TestFilesInAndOut(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	csv := "a,b\n1,2\n3,4\n"
	req := e2e.Py(`
import os
rows = open("data.csv").read().splitlines()[1:]
total = sum(int(x) for r in rows for x in r.split(","))
nested = open("/sandbox/in/sub/x.txt").read()
with open("/sandbox/out/result.txt", "w") as f:
    f.write("sum=%d\n" % total)
os.chmod("/sandbox/out/result.txt", 0o640)
os.makedirs("/sandbox/out/sub/dir")
with open("/sandbox/out/sub/dir/deep.txt", "w") as f:
    f.write(nested.upper())
with open("/sandbox/out/bin.dat", "wb") as f:
    f.write(bytes(range(256)))
print(os.getcwd())
`)
	req.Files = []e2e.InFile{{Path: "data.csv", Content: b64(csv)}, {Path: "in/sub/x.txt", Content: b64("nested input")}}
	r, res := c.execStatus(req, "ok")
	if r.Stdout != "/sandbox\n" {
		t.Errorf("working directory %q, want /sandbox", r.Stdout)
	}
	want := map[string]string{
		"result.txt":       "sum=10\n",
		"sub/dir/deep.txt": "NESTED INPUT",
		"bin.dat":          string(bytesRange256()),
	}
	if len(r.Files) != len(want) {
		t.Errorf("got %d files, want %d: %+v", len(r.Files), len(want), r.Files)
	}
	for path, content := range want {
		f := r.File(path)
		if f == nil {
			t.Errorf("file %q not returned\n%s", path, res)
			continue
		}
		got := unb64(t, f.Content)
		if string(got) != content {
			t.Errorf("file %q: content %q, want %q", path, got, content)
		}
		if f.Size != int64(len(content)) {
			t.Errorf("file %q: size %d, want %d", path, f.Size, len(content))
		}
	}
	if f := r.File("result.txt"); f != nil {
		if mode, err := strconv.ParseUint(f.Mode, 8, 32); err != nil || mode&0o777 != 0o640 {
			t.Errorf("result.txt mode %q, want 0640 (set by the code)", f.Mode)
		}
	}
	if len(r.SkippedFiles) != 0 {
		t.Errorf("skipped_files %+v, want none", r.SkippedFiles)
	}
}

func bytesRange256() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func TestNonZeroExit(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	r, res := c.execStatus(e2e.Py(`raise ValueError("boom")`), "error")
	if r.ExitCode != 1 {
		t.Errorf("exit_code %d, want 1\n%s", r.ExitCode, res)
	}
	if !strings.Contains(r.Stderr, "Traceback") || !strings.Contains(r.Stderr, "ValueError: boom") {
		t.Errorf("stderr %q lacks the traceback", r.Stderr)
	}
	if r.Signal != "" {
		t.Errorf("signal %q for a plain exit", r.Signal)
	}

	r, res = c.execStatus(e2e.Py("import sys\nprint('partial')\nsys.exit(3)"), "error")
	if r.ExitCode != 3 || r.Stdout != "partial\n" {
		t.Errorf("exit_code %d stdout %q, want 3 and the output before the exit\n%s", r.ExitCode, r.Stdout, res)
	}
}

func TestNonUTF8Output(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	r, res := c.execStatus(e2e.Py(`import sys
sys.stdout.buffer.write(b"\xff\xfe")
sys.stderr.buffer.write(b"ok\xc3(end")`), "ok")
	if !json.Valid(res.Body) || !utf8.Valid(res.Body) {
		t.Fatalf("response is not valid UTF-8 JSON\n%s", res)
	}
	if r.StdoutBase64 == nil {
		t.Fatalf("stdout_base64 missing for non-UTF-8 stdout\n%s", res)
	}
	if got := unb64(t, *r.StdoutBase64); !bytes.Equal(got, []byte{0xff, 0xfe}) {
		t.Errorf("stdout_base64 decodes to %x, want fffe", got)
	}
	if !utf8.ValidString(r.Stdout) || !strings.Contains(r.Stdout, "\uFFFD") {
		t.Errorf("stdout %q: want valid UTF-8 with U+FFFD replacement characters", r.Stdout)
	}
	if r.StderrBase64 == nil {
		t.Fatalf("stderr_base64 missing for non-UTF-8 stderr\n%s", res)
	}
	if got := unb64(t, *r.StderrBase64); string(got) != "ok\xc3(end" {
		t.Errorf("stderr_base64 decodes to %q, want %q", got, "ok\xc3(end")
	}
	if !strings.HasPrefix(r.Stderr, "ok\uFFFD") || !strings.HasSuffix(r.Stderr, "(end") {
		t.Errorf("stderr %q, want ok\\uFFFD(end", r.Stderr)
	}
}

func TestOutputTruncation(t *testing.T) {
	t.Parallel()
	t.Run("default cap", func(t *testing.T) {
		c := newTC(t)
		r, res := c.execStatus(e2e.Py(`import sys
sys.stdout.write("x" * (10 << 20))
sys.stderr.write("small")`), "ok")
		if len(r.Stdout) != defOutputBytes || !r.StdoutTruncated {
			t.Errorf("stdout: %d bytes, truncated %v; want exactly %d and true", len(r.Stdout), r.StdoutTruncated, defOutputBytes)
		}
		if strings.Trim(r.Stdout, "x") != "" {
			t.Errorf("stdout holds something other than the printed x's")
		}
		if r.Stderr != "small" || r.StderrTruncated {
			t.Errorf("stderr %q truncated %v; want \"small\", false (the cap is per stream)\n%s", r.Stderr, r.StderrTruncated, e2e.Clip(res.Body, 300))
		}
	})
	t.Run("lowered output_bytes", func(t *testing.T) {
		c := newTC(t)
		req := e2e.Py(`import sys
sys.stdout.write("y" * 5000)
sys.stderr.write("z" * 5000)`)
		req.Limits = map[string]any{"output_bytes": 1000}
		r, _ := c.execStatus(req, "ok")
		if r.Stdout != strings.Repeat("y", 1000) || !r.StdoutTruncated {
			t.Errorf("stdout: %d bytes, truncated %v; want 1000 and true", len(r.Stdout), r.StdoutTruncated)
		}
		if r.Stderr != strings.Repeat("z", 1000) || !r.StderrTruncated {
			t.Errorf("stderr: %d bytes, truncated %v; want 1000 and true", len(r.Stderr), r.StderrTruncated)
		}
		if r.Limits.OutputBytes != 1000 {
			t.Errorf("effective limits.output_bytes %d, want 1000", r.Limits.OutputBytes)
		}
	})
	t.Run("exactly at the cap is not truncated", func(t *testing.T) {
		c := newTC(t)
		req := e2e.Py(`import sys
sys.stdout.write("w" * 1000)`)
		req.Limits = map[string]any{"output_bytes": 1000}
		r, _ := c.execStatus(req, "ok")
		if len(r.Stdout) != 1000 || r.StdoutTruncated {
			t.Errorf("stdout: %d bytes, truncated %v; want 1000 and false", len(r.Stdout), r.StdoutTruncated)
		}
	})
}

// TestConcurrentExecs sends 6 runs at once, past the suite's own limit: each
// must succeed or be turned away with 429 BUSY, never fail otherwise.
func TestConcurrentExecs(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	const n = 6
	bodies := make([][]byte, n)
	for i := range n {
		bodies[i] = e2e.JSON(e2e.Py(fmt.Sprintf("print(%d)", i)))
	}
	results := c.burst("run", bodies)
	ok, busy := 0, 0
	for i, res := range results {
		if res == nil {
			continue
		}
		switch res.Status {
		case http.StatusOK:
			var r e2e.ExecResponse
			if err := json.Unmarshal(res.Body, &r); err != nil {
				t.Errorf("run %d: %v", i, err)
				continue
			}
			seenExecIDs.Add(r.ID)
			c.note(r.ID)
			if r.Status != "ok" || r.Stdout != fmt.Sprintf("%d\n", i) {
				t.Errorf("run %d: status %q stdout %q\n%s", i, r.Status, r.Stdout, res)
			}
			ok++
		case http.StatusTooManyRequests:
			wantError(t, res, http.StatusTooManyRequests, "BUSY", "*")
			if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || s < 1 {
				t.Errorf("run %d: 429 without a positive Retry-After header (%q)", i, res.Header.Get("Retry-After"))
			}
			busy++
		default:
			t.Errorf("run %d: want 200 or 429\n%s", i, res)
		}
	}
	t.Logf("%d ok, %d busy", ok, busy)
	if ok == 0 {
		t.Errorf("none of %d concurrent runs was served", n)
	}
	wantHealthy(t)
	c.execStatus(e2e.Py("print('after')"), "ok")
}

func TestHealthAndNotFound(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	wantHealthy(t)
	res, err := c.do(context.Background(), http.MethodGet, "/no-such-endpoint", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, res, http.StatusNotFound, "NOT_FOUND", "")
}

func TestEnvPassedToCode(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	env := map[string]string{"GREETING": "héllo wörld", "_UNDER": "a=b c", "A1": ""}
	req := e2e.Py(`import os, json
print(json.dumps({k: os.environ.get(k) for k in ("GREETING", "_UNDER", "A1")}, sort_keys=True))`)
	req.Env = env
	r, res := c.execStatus(req, "ok")
	var got map[string]*string
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
		t.Fatalf("stdout %q: %v\n%s", r.Stdout, err, res)
	}
	for k, v := range env {
		if got[k] == nil || *got[k] != v {
			t.Errorf("the code sees %s=%v, want %q", k, got[k], v)
		}
	}
}
