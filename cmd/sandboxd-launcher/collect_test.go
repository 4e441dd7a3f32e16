package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

// entries makes the entries of a collect test under dir: "name=content" is
// a 0644 file (a "/" in name makes its directories), "name->target" a
// symbolic link, "name|" a fifo, "name=" an empty file, "name/" a
// directory, "name@" a unix socket.
func entries(t *testing.T, dir string, specs ...string) {
	t.Helper()
	for _, spec := range specs {
		var err error
		switch {
		case strings.Contains(spec, "->"):
			name, target, _ := strings.Cut(spec, "->")
			err = os.Symlink(target, mkparent(t, dir, name))
		case strings.Contains(spec, "="):
			name, text, _ := strings.Cut(spec, "=")
			err = os.WriteFile(mkparent(t, dir, name), []byte(text), 0o644)
		case strings.HasSuffix(spec, "|"):
			err = unix.Mkfifo(mkparent(t, dir, strings.TrimSuffix(spec, "|")), 0o644)
		case strings.HasSuffix(spec, "@"):
			err = unix.Mknod(mkparent(t, dir, strings.TrimSuffix(spec, "@")), unix.S_IFSOCK|0o644, 0)
		case strings.HasSuffix(spec, "/"):
			err = os.MkdirAll(filepath.Join(dir, spec), 0o755)
		default:
			t.Fatalf("bad entry spec %q", spec)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// mkparent makes name's directories under dir and returns its path.
func mkparent(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCollect(t *testing.T) {
	roomy := outCaps{count: 100, file: 1 << 20, total: 1 << 20}
	for _, tc := range []struct {
		name    string
		entries []string
		caps    outCaps
		want    []string
	}{
		{
			name:    "lexical order, nested directories",
			entries: []string{"b.txt=b", "sub/z=z", "a.txt=a", "sub/a=sa", "c=c", "sub/deeper/x=x"},
			caps:    roomy,
			want:    []string{`file a.txt 644 "a"`, `file b.txt 644 "b"`, `file c 644 "c"`, `file sub/a 644 "sa"`, `file sub/deeper/x 644 "x"`, `file sub/z 644 "z"`},
		},
		{
			name:    "empty file and empty directory",
			entries: []string{"empty=", "nothing/"},
			caps:    roomy,
			want:    []string{`file empty 644 ""`},
		},
		{
			name:    "links are skipped, not followed",
			entries: []string{"d/x=x", "l->d/x", "ld->d", "dangling->nowhere", "up->/etc"},
			caps:    roomy,
			want:    []string{`file d/x 644 "x"`, "skipped dangling: symbolic link, not followed", "skipped l: symbolic link, not followed", "skipped ld: symbolic link, not followed", "skipped up: symbolic link, not followed"},
		},
		{
			name:    "special files are skipped",
			entries: []string{"fifo|", "sock@", "z=z"},
			caps:    roomy,
			want:    []string{"skipped fifo: special file, not read", "skipped sock: special file, not read", `file z 644 "z"`},
		},
		{
			name:    "per-file cap",
			entries: []string{"big=12345678901", "fit=1234567890"},
			caps:    outCaps{count: 100, file: 10, total: 100},
			want:    []string{"skipped big: larger than the 10-byte per-file cap", `file fit 644 "1234567890"`},
		},
		{
			name:    "total cap: a later file that fits is still returned",
			entries: []string{"a=aaaa", "b=bbbb", "c=cccc", "d=d"},
			caps:    outCaps{count: 100, file: 100, total: 10},
			want:    []string{`file a 644 "aaaa"`, `file b 644 "bbbb"`, "skipped c: over the 10-byte cap on all returned files", `file d 644 "d"`},
		},
		{
			name:    "a file over the per-file cap takes nothing of the total",
			entries: []string{"a=aaaaaaaaaaaa", "b=bbbbbbbbbb"},
			caps:    outCaps{count: 100, file: 10, total: 10},
			want:    []string{"skipped a: larger than the 10-byte per-file cap", `file b 644 "bbbbbbbbbb"`},
		},
		{
			name:    "count cap: skipped entries do not count",
			entries: []string{"a=a", "b->a", "c=c", "d=d", "e|"},
			caps:    outCaps{count: 2, file: 100, total: 100},
			want:    []string{`file a 644 "a"`, "skipped b: symbolic link, not followed", `file c 644 "c"`, "skipped d: more than 2 files in /sandbox/out", "skipped e: special file, not read"},
		},
		{
			name:    "no files allowed",
			entries: []string{"a=a"},
			caps:    outCaps{},
			want:    []string{"skipped a: more than 0 files in /sandbox/out"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			entries(t, dir, tc.entries...)
			rec := newRecorder()
			collect(dir, tc.caps, nil, rec.frameWriter)
			if got := rec.frames(t); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestCollectModes(t *testing.T) {
	dir := t.TempDir()
	entries(t, dir, "run.sh=#!", "secret=s")
	for name, mode := range map[string]os.FileMode{"run.sh": 0o755, "secret": 0o600} {
		if err := os.Chmod(filepath.Join(dir, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	rec := newRecorder()
	collect(dir, outCaps{count: 10, file: 10, total: 10}, nil, rec.frameWriter)
	want := `file run.sh 755 "#!"` + "\n" + `file secret 600 "s"`
	if got := strings.Join(rec.frames(t), "\n"); got != want {
		t.Errorf("frames:\n%s\nwant:\n%s", got, want)
	}
}

func TestCollectMissingDirectory(t *testing.T) {
	rec := newRecorder()
	collect(filepath.Join(t.TempDir(), "out"), outCaps{count: 10, file: 10, total: 10}, nil, rec.frameWriter)
	if got := rec.frames(t); len(got) != 0 {
		t.Errorf("frames for a missing directory: %q", got)
	}
}

// TestCollectChanged: a session call returns what it created or changed
// under OutDir, and the caps count only that.
func TestCollectChanged(t *testing.T) {
	dir := t.TempDir()
	entries(t, dir, "same=same", "grown=old", "touched=same", "replaced=same", "deleted=x", "d/kept=k", "link->same")
	then := time.Unix(1_700_000_000, 0)
	for _, name := range []string{"same", "grown", "touched", "replaced", "deleted", "d/kept"} {
		if err := os.Chtimes(filepath.Join(dir, name), then, then); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(dir)

	// The call: grows a file, rewrites one with the same size (a new
	// mtime), replaces one with a new file of the same size and mtime (a
	// new inode), deletes one, and makes new entries.
	write(t, filepath.Join(dir, "grown"), "new and longer")
	write(t, filepath.Join(dir, "touched"), "SAME")
	if err := os.Chtimes(filepath.Join(dir, "touched"), then, then.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "replaced.tmp"), "SAME")
	if err := os.Chtimes(filepath.Join(dir, "replaced.tmp"), then, then); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "replaced.tmp"), filepath.Join(dir, "replaced")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "deleted")); err != nil {
		t.Fatal(err)
	}
	entries(t, dir, "d/new=n", "new=n", "newlink->same")

	rec := newRecorder()
	collectChanged(dir, before, &jobproto.SessionInit{MaxOutCount: 4, MaxOutFileBytes: 100, MaxOutTotalBytes: 100}, rec.frameWriter)
	want := []string{
		`file d/new 644 "n"`,
		`file grown 644 "new and longer"`,
		`file new 644 "n"`,
		"skipped newlink: symbolic link, not followed",
		`file replaced 644 "SAME"`,
		"skipped touched: more than 4 files in /sandbox/out",
	}
	if got := rec.frames(t); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
