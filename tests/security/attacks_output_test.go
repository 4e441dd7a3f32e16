package security

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func unb64(s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return []byte(fmt.Sprintf("<bad base64: %v>", err))
	}
	return b
}

// b64Variants returns s base64-encoded at the three byte alignments, minus
// the edge characters that depend on neighbours.
func b64Variants(s string) []string {
	var out []string
	for pad := 0; pad < 3; pad++ {
		enc := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\x00", pad) + s))
		skip := (pad*4 + 2) / 3
		if end := len(enc) - 4; end > skip {
			out = append(out, enc[skip:end])
		}
	}
	return out
}

// noPasswd requires that no passwd content (the image's or the host's)
// appears in the response, plainly or base64-encoded.
func noPasswd(t *testing.T, x *run) {
	t.Helper()
	needles := []string{"root:x:0:0", "nobody:x:65534", "daemon:x:1:1"}
	if host, err := os.ReadFile("/etc/passwd"); err == nil {
		if first, _, _ := strings.Cut(string(host), "\n"); len(first) > 8 {
			needles = append(needles, first)
		}
	}
	body := string(x.res.Body)
	all := body + x.r.Decoded()
	for _, n := range needles {
		if strings.Contains(all, n) {
			t.Errorf("HOLE: the response carries passwd content %q", n)
		}
		for _, enc := range b64Variants(n) {
			if strings.Contains(body, enc) {
				t.Errorf("HOLE: the response carries passwd content %q, base64-encoded", n)
			}
		}
	}
}

func (x *run) wantSkipped(t *testing.T, path, reasonPart string) {
	t.Helper()
	s := x.r.Skipped(path)
	if s == nil {
		t.Errorf("skipped_files lacks %q", path)
		return
	}
	if reasonPart != "" && !strings.Contains(strings.ToLower(s.Reason), reasonPart) {
		t.Errorf("skipped %q: reason %q does not mention %q", path, s.Reason, reasonPart)
	}
}

func outputAttacks() []attack {
	return []attack{
		{
			name: "stdout-100mib",
			code: `
chunk = b"x" * (1 << 20)
for _ in range(8):
    sys.stderr.buffer.write(chunk)
sys.stderr.buffer.flush()
for _ in range(100):
    sys.stdout.buffer.write(chunk)
sys.stdout.buffer.flush()
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				limit := x.r.Limits.OutputBytes
				if int64(len(x.r.Stdout)) != limit || !x.r.StdoutTruncated {
					t.Errorf("stdout %d bytes truncated %v, want exactly output_bytes %d and truncated", len(x.r.Stdout), x.r.StdoutTruncated, limit)
				}
				if strings.Trim(x.r.Stdout, "x") != "" {
					t.Errorf("stdout holds something other than the code's x's")
				}
				if int64(len(x.r.Stderr)) != limit || !x.r.StderrTruncated {
					t.Errorf("stderr %d bytes truncated %v, want %d and truncated", len(x.r.Stderr), x.r.StderrTruncated, limit)
				}
				if x.r.DurationMS > 5000 {
					t.Errorf("duration_ms %d: dropping output past the cap should be quick", x.r.DurationMS)
				}
				if len(x.res.Body) > int(3*limit)+(64<<10) {
					t.Errorf("response of %d bytes for two capped %d-byte streams", len(x.res.Body), limit)
				}
			},
		},
		{
			name: "stdout-invalid-utf8",
			code: `
sys.stdout.buffer.write(b"ok \xff\xfe bad \xc3( surrogate \xed\xa0\x80 too-big \xf4\x90\x80\x80 end\n")
sys.stdout.buffer.flush()
sys.stderr.buffer.write(b"\x80err\xc0\xaf\n")
sys.stderr.buffer.flush()
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				wantOut := []byte("ok \xff\xfe bad \xc3( surrogate \xed\xa0\x80 too-big \xf4\x90\x80\x80 end\n")
				wantErr := []byte("\x80err\xc0\xaf\n")
				for _, c := range []struct {
					name string
					text string
					b64  *string
					want []byte
				}{{"stdout", x.r.Stdout, x.r.StdoutBase64, wantOut}, {"stderr", x.r.Stderr, x.r.StderrBase64, wantErr}} {
					if c.b64 == nil {
						t.Errorf("%s_base64 is absent for invalid UTF-8 output", c.name)
					} else if got := unb64(*c.b64); !bytes.Equal(got, c.want) {
						t.Errorf("%s_base64 decodes to %q, want the exact bytes %q", c.name, got, c.want)
					}
					if !utf8.ValidString(c.text) || !strings.ContainsRune(c.text, utf8.RuneError) {
						t.Errorf("%s text %q: want valid UTF-8 with U+FFFD in place of the bad bytes", c.name, c.text)
					}
				}
				if !strings.HasPrefix(x.r.Stdout, "ok ") || !strings.HasSuffix(x.r.Stdout, " end\n") {
					t.Errorf("stdout text %q lost the valid parts", x.r.Stdout)
				}
			},
		},
		{
			// Terminal escapes come back as text, JSON-escaped: no raw ESC,
			// BEL, BS, CR or NUL byte in the HTTP body.
			name: "stdout-terminal-escapes",
			code: `
sys.stdout.write("\x1b[2J\x1b[H\x1b]0;pwned-title\x07\x1b[31mred\x1b[0m\r\nbell\x07 bs\x08 nul\x00 del\x7f c1\x9b31m osc52\x1b]52;c;cHduZWQ=\x07 end\n")
sys.stdout.flush()
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				want := "\x1b[2J\x1b[H\x1b]0;pwned-title\x07\x1b[31mred\x1b[0m\r\nbell\x07 bs\x08 nul\x00 del\x7f c1\u009b31m osc52\x1b]52;c;cHduZWQ=\x07 end\n"
				if x.r.Stdout != want {
					t.Errorf("stdout %q, want exactly %q", x.r.Stdout, want)
				}
				if x.r.StdoutBase64 != nil {
					t.Errorf("stdout_base64 present for valid UTF-8 output")
				}
				for _, b := range []byte{0x1b, 0x07, 0x08, 0x00, '\r'} {
					if i := bytes.IndexByte(x.res.Body, b); i >= 0 {
						t.Errorf("raw control byte %#x in the HTTP body at %d: escapes must come back JSON-escaped", b, i)
					}
				}
			},
		},
		{
			// Two million tiny writes (PYTHONUNBUFFERED: one write per
			// print). Run alone: it needs the whole CPU quota.
			name: "stdout-two-million-lines",
			solo: true,
			code: `
for _ in range(2000000):
    print("x")
`,
			status: "ok",
			// Each print is a write(2) through the seccomp filter and a
			// read by the launcher, all under one CPU: about 5 s on an idle
			// 2-core machine, and past the 10 s limit on a loaded one.
			otherStatus: []string{"timeout"},
			strict:      &override{status: "timeout", otherStatus: []string{"ok"}, why: "under gVisor every write is a sentry round trip: far slower, and the limit is 5 s"},
			check: func(t *testing.T, x *run) {
				limit := x.r.Limits.OutputBytes
				if x.r.Status == "ok" && (int64(len(x.r.Stdout)) != limit || !x.r.StdoutTruncated) {
					t.Errorf("stdout %d bytes truncated %v, want %d and truncated", len(x.r.Stdout), x.r.StdoutTruncated, limit)
				}
				if int64(len(x.r.Stdout)) > limit || len(x.r.Stdout) == 0 {
					t.Errorf("stdout %d bytes, want some and at most %d", len(x.r.Stdout), limit)
				}
				if rest := strings.ReplaceAll(x.r.Stdout, "x\n", ""); rest != "" && !(x.r.Status == "timeout" && rest == "x") {
					t.Errorf("stdout is not made of the code's lines")
				}
				if x.r.Status == "timeout" && x.r.DurationMS >= x.r.Limits.TimeoutMS+1000 {
					t.Errorf("duration_ms %d past the limit + 1 s", x.r.DurationMS)
				}
				t.Logf("2 million lines: %s, duration_ms %d (timeout %d), %d bytes of stdout kept, request %v", x.r.Status, x.r.DurationMS, x.r.Limits.TimeoutMS, len(x.r.Stdout), x.res.Wall.Round(time.Millisecond))
			},
		},
		{
			name: "out-links-and-special-files",
			code: `
import socket, stat
os.chdir("/sandbox/out")
os.symlink("/etc/passwd", "passwd_link")
os.symlink("/proc/self/environ", "environ_link")
os.symlink("/proc/1/fd/1", "launcher_stdout_link")
os.symlink("/", "root_link")
os.symlink("../../etc/shadow", "relative_link")
os.symlink("loop", "loop")
os.mkfifo("fifo")
s = socket.socket(socket.AF_UNIX)
s.bind("/sandbox/out/sock")
s.listen(1)
attempt("mknod-char-in-out", os.mknod, "/sandbox/out/null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
attempt("mknod-block-in-out", os.mknod, "/sandbox/out/vda", stat.S_IFBLK | 0o666, os.makedev(254, 0))
os.mkdir("d")
os.symlink("/etc", "d/etc_link")
os.symlink("/etc/passwd", "d/passwd")
with open("ok.txt", "w") as f:
    f.write("ok")
os.mkdir("closed")
with open("closed/secret.txt", "w") as f:
    f.write("inside")
os.chmod("closed", 0)
with open("unreadable.txt", "w") as f:
    f.write("no read bit")
os.chmod("unreadable.txt", 0)
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				for _, p := range []string{"passwd_link", "environ_link", "launcher_stdout_link", "root_link", "relative_link", "loop", "d/etc_link", "d/passwd"} {
					x.wantSkipped(t, p, "link")
				}
				for _, p := range []string{"fifo", "sock"} {
					x.wantSkipped(t, p, "special")
				}
				x.allDenied(t, []string{"mknod-char-in-out", "mknod-block-in-out"}, eperm)
				if f := x.r.File("ok.txt"); f == nil || string(unb64(f.Content)) != "ok" {
					t.Errorf("ok.txt not returned with its content")
				}
				if f := x.r.File("unreadable.txt"); f != nil {
					t.Logf("NOTE: a mode-000 file was returned (%q): the collector reads as the same uid", unb64(f.Content))
				}
				for _, f := range x.r.Files {
					switch f.Path {
					case "ok.txt", "unreadable.txt", "closed/secret.txt":
					default:
						t.Errorf("unexpected file returned: %q", f.Path)
					}
				}
				noPasswd(t, x)
				if strings.Contains(string(x.res.Body), "PYTHONPATH=") {
					t.Errorf("the response carries an environ block")
				}
			},
			strict: &override{check: func(t *testing.T, x *run) {
				for _, p := range []string{"passwd_link", "environ_link", "launcher_stdout_link", "root_link", "relative_link", "loop", "d/etc_link", "d/passwd"} {
					x.wantSkipped(t, p, "link")
				}
				for _, p := range []string{"fifo", "sock"} {
					x.wantSkipped(t, p, "special")
				}
				// gVisor lets the code make device nodes in its own
				// tmpfs (they are the sentry's, not the host's); they
				// must come back as special files, unread.
				for _, p := range []string{"null", "vda"} {
					if v, _, _ := x.marker("mknod-" + map[string]string{"null": "char", "vda": "block"}[p] + "-in-out"); v == "ALLOWED" {
						x.wantSkipped(t, p, "special")
						t.Logf("NOTE (gVisor): mknod of a device node in /sandbox/out succeeded inside the sentry")
					}
				}
				if x.r.File("null") != nil || x.r.File("vda") != nil {
					t.Errorf("a device node was returned as a file")
				}
				noPasswd(t, x)
			}, why: "gVisor allows mknod inside its own tmpfs"},
		},
		{
			// Hard links to files outside the scratch tmpfs cross devices
			// and fail (EXDEV); one to the code's own file works.
			name: "out-hard-links",
			code: `
with open("/sandbox/mine.txt", "w") as f:
    f.write("mine")
attempt("link-etc-passwd", os.link, "/etc/passwd", "/sandbox/out/p")
attempt("link-etc-shadow", os.link, "/etc/shadow", "/sandbox/out/s")
attempt("link-launcher", os.link, "/usr/local/bin/sandboxd-launcher", "/sandbox/out/l")
attempt("link-tmp-code", os.link, "/tmp/main.py", "/sandbox/out/code")
attempt("link-own-file", os.link, "/sandbox/mine.txt", "/sandbox/out/mine")
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				x.allDenied(t, []string{"link-etc-passwd", "link-launcher", "link-tmp-code"}, []string{"EXDEV"}, "link-own-file")
				x.wantDenied(t, "link-etc-shadow", "EXDEV", "ENOENT") // the image may have no /etc/shadow
				x.wantAllowed(t, "link-own-file")
				if len(x.r.Files) != 1 || x.r.File("mine") == nil || string(unb64(x.r.File("mine").Content)) != "mine" {
					t.Errorf("files %+v, want only mine", x.r.Files)
				}
				noPasswd(t, x)
			},
		},
		{
			name: "out-huge-files",
			code: `
import resource
maxfile, maxtotal = {{MAXFILE}}, {{MAXTOTAL}}
fsize = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
with open("/sandbox/out/big.bin", "wb") as f:
    f.write(b"b" * (maxfile + 4096))
with open("/sandbox/out/sparse.bin", "wb") as f:
    f.truncate(min(4 * maxfile, fsize - 1))
part = maxtotal * 2 // 5   # three of them: the third is over the total cap
for n in ("a.bin", "c.bin", "d.bin"):
    with open("/sandbox/out/" + n, "wb") as f:
        f.write(n[0].encode() * part)
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				maxFile, maxTotal := x.prof.Files.MaxOutputFileBytes, x.prof.Files.MaxOutputTotalBytes
				x.wantSkipped(t, "big.bin", "")
				x.wantSkipped(t, "sparse.bin", "")
				var total int64
				for _, f := range x.r.Files {
					total += f.Size
					if f.Size > maxFile {
						t.Errorf("%s of %d bytes returned, over the per-file cap %d", f.Path, f.Size, maxFile)
					}
					if int64(len(unb64(f.Content))) != f.Size {
						t.Errorf("%s: content length differs from size %d", f.Path, f.Size)
					}
				}
				if total > maxTotal {
					t.Errorf("%d bytes of files returned, over the total cap %d", total, maxTotal)
				}
				if len(x.r.Files) != 2 || len(x.r.SkippedFiles) != 3 {
					t.Errorf("%d files returned and %d skipped, want 2 of a/c/d returned and big, sparse and one of a/c/d skipped", len(x.r.Files), len(x.r.SkippedFiles))
				}
			},
		},
		{
			name: "out-many-files",
			code: `
for i in range(3 * {{MAXCOUNT}}):
    with open("/sandbox/out/f%04d" % i, "w") as f:
        f.write(str(i))
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				n := x.prof.Files.MaxOutputCount
				if len(x.r.Files) != n {
					t.Errorf("%d files returned, want max_output_count %d", len(x.r.Files), n)
				}
				if len(x.r.Files)+len(x.r.SkippedFiles) != 3*n {
					t.Errorf("%d returned + %d skipped, want all %d accounted for", len(x.r.Files), len(x.r.SkippedFiles), 3*n)
				}
			},
		},
		{
			// Odd names: the valid ones come back as they are; names with
			// control characters or backslashes are never returned as files;
			// no returned name is absolute or climbs out.
			name: "out-odd-names",
			code: `
names = ["a\nb", "..x", "...", "x..", " ", "-rf", "a\\b", "\x1b[31mred", "tab\tname", "\u00e9t\u00e9",
         "semi;colon", 'quote"d', "$(touch {{NONCE}})", "long" + "x" * 200]
for n in names:
    with open("/sandbox/out/" + n, "w") as f:
        f.write("content")
deep = "/sandbox/out/" + "/".join(["d" * 50] * 6)
os.makedirs(deep)
with open(deep + "/deep.txt", "w") as f:
    f.write("deep")
with open(b"/sandbox/out/bad\xffname", "wb") as f:
    f.write(b"x")
say("CREATED", len(names) + 2)
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				for _, n := range []string{"..x", "...", "x..", " ", "-rf", "\u00e9t\u00e9", "semi;colon", "quote\"d", "long" + strings.Repeat("x", 200)} {
					f := x.r.File(n)
					if f == nil {
						t.Errorf("%q (a valid name) was not returned", n)
					} else if string(unb64(f.Content)) != "content" {
						t.Errorf("%q: content %q", n, unb64(f.Content))
					}
				}
				for _, n := range []string{"a\nb", "a\\b", "\x1b[31mred", "tab\tname"} {
					if x.r.File(n) != nil {
						t.Errorf("%q was returned as a file", n)
					}
				}
				if n := len(x.r.Files) + len(x.r.SkippedFiles); n != 16 {
					t.Errorf("%d entries reported, want all 16 (returned or skipped with a reason)", n)
				}
				for _, s := range x.r.SkippedFiles {
					if strings.ContainsAny(s.Path, "\n\x1b\t") {
						t.Logf("NOTE: skipped_files names %q (with a control character) as written", s.Path)
					}
				}
			},
		},
	}
}
