package main

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

// tree makes a root directory holding what the tests open, and next to it
// outside/secret, which no path under the root may reach:
//
//	f      regular file "data"
//	d/g    regular file "gdata" in a directory
//	lf     symbolic link to f
//	ld     symbolic link to d
//	dang   symbolic link to nowhere
//	up     symbolic link to ../outside
//	abs    symbolic link to outside's absolute path
//	p      fifo
//	s      unix socket (no one listening)
func tree(t *testing.T) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, dir := range []string{root, outside, filepath.Join(root, "d")} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(outside, "secret"), "secret")
	write(t, filepath.Join(root, "f"), "data")
	write(t, filepath.Join(root, "d", "g"), "gdata")
	for name, target := range map[string]string{"lf": "f", "ld": "d", "dang": "nowhere", "up": "../outside", "abs": outside} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(root, "p"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(root, "s"), unix.S_IFSOCK|0o644, 0); err != nil {
		t.Fatal(err)
	}
	return root, outside
}

// errText is err's text with root written ROOT, or "" for no error.
func errText(err error, root string) string {
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(err.Error(), root, "ROOT")
}

// content is the file at path's content, or "<missing>".
func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "<missing>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// exists reports whether path names an entry (a dangling link included).
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// perm is the permission bits a new file or directory made with mode gets
// under the process's umask.
func perm(mode fs.FileMode) fs.FileMode {
	old := syscall.Umask(0)
	syscall.Umask(old)
	return mode &^ fs.FileMode(old)
}

func TestOpenBeneath(t *testing.T) {
	const (
		rd     = unix.O_RDONLY
		create = unix.O_WRONLY | unix.O_CREAT
	)
	long := strings.Repeat("a/", 127) + "a" // 255 bytes, 128 elements
	for _, tc := range []struct {
		name  string
		rel   string
		flags int
		// wantErr is the errno (checked with errors.Is) or nil; wantText,
		// when set, the error's text with the root written ROOT.
		wantErr  error
		wantText string
		// want is the opened file's content, "<dir>", "<fifo>", or ""
		// not to read it.
		want string
		// made are paths under the root that must exist afterwards,
		// notMade paths (under the root's parent) that must not.
		made, notMade []string
	}{
		{name: "regular file", rel: "f", flags: rd, want: "data"},
		{name: "nested file", rel: "d/g", flags: rd, want: "gdata"},
		{name: "directory at the end", rel: "d", flags: rd, want: "<dir>"},
		{name: "fifo opens without blocking", rel: "p", flags: rd, want: "<fifo>"},
		{name: "missing file", rel: "nope", flags: rd, wantErr: unix.ENOENT, wantText: "open ROOT/nope: no such file or directory"},
		{name: "missing directory is not made without O_CREAT", rel: "x/y", flags: rd, wantErr: unix.ENOENT, wantText: "open ROOT/x: no such file or directory", notMade: []string{"root/x"}},
		{name: "link at the end", rel: "lf", flags: rd, wantErr: unix.ELOOP, wantText: "open ROOT/lf: too many levels of symbolic links"},
		{name: "link to a directory at the end", rel: "ld", flags: rd, wantErr: unix.ELOOP},
		{name: "link in the middle", rel: "ld/g", flags: rd, wantErr: unix.ENOTDIR, wantText: "open ROOT/ld: not a directory"},
		{name: "link out of the root in the middle", rel: "up/secret", flags: rd, wantErr: unix.ENOTDIR},
		{name: "absolute link in the middle", rel: "abs/secret", flags: rd, wantErr: unix.ENOTDIR},
		{name: "file in the middle", rel: "f/x", flags: rd, wantErr: unix.ENOTDIR, wantText: "open ROOT/f: not a directory"},
		{name: "dangling link at the end, creating", rel: "dang", flags: create, wantErr: unix.ELOOP, notMade: []string{"root/nowhere"}},
		{name: "dangling link in the middle, creating", rel: "dang/x", flags: create, wantErr: unix.ENOTDIR, wantText: "mkdir ROOT/dang: not a directory", notMade: []string{"root/nowhere"}},
		{name: "link out of the root, creating", rel: "up/new", flags: create, wantErr: unix.ENOTDIR, notMade: []string{"outside/new"}},
		{name: "link at the end, creating", rel: "lf", flags: create, wantErr: unix.ELOOP},
		{name: "file in the way of a directory, creating", rel: "f/x", flags: create, wantErr: unix.ENOTDIR, wantText: "mkdir ROOT/f: not a directory"},
		{name: "O_CREAT opens an existing file", rel: "f", flags: unix.O_RDWR | unix.O_CREAT, want: "data"},
		{name: "O_CREAT|O_EXCL refuses an existing file", rel: "f", flags: create | unix.O_EXCL, wantErr: unix.EEXIST, wantText: "open ROOT/f: file exists"},
		{name: "O_CREAT|O_EXCL refuses a dangling link", rel: "dang", flags: create | unix.O_EXCL, wantErr: unix.EEXIST, notMade: []string{"root/nowhere"}},
		{name: "O_CREAT makes missing directories", rel: "a/b/c", flags: create, made: []string{"a", "a/b", "a/b/c"}},
		{name: "O_CREAT in an existing directory", rel: "d/new", flags: create, made: []string{"d/new"}},
		{name: "writing a directory", rel: "d", flags: create, wantErr: unix.EISDIR},
		{name: "writing a fifo no one reads", rel: "p", flags: unix.O_WRONLY, wantErr: unix.ENXIO},
		{name: "socket", rel: "s", flags: rd, wantErr: unix.ENXIO},
		{name: "longest path", rel: long, flags: create, made: []string{long}},
		{name: "longest element", rel: strings.Repeat("b", 255), flags: create, made: []string{strings.Repeat("b", 255)}},
		{name: "path over the length limit", rel: long + "a", flags: create, wantText: "path is longer than 255 bytes"},
		{name: "dot dot", rel: "../outside/secret", flags: rd, wantText: "path has a '..' element; files must stay under /sandbox"},
		{name: "dot dot in the middle", rel: "d/../f", flags: rd, wantText: "path has a '..' element; files must stay under /sandbox"},
		{name: "dot", rel: "./f", flags: rd, wantText: "path has a '.' element"},
		{name: "absolute", rel: "/etc/passwd", flags: rd, wantText: "path is absolute; give a path relative to /sandbox, such as data/input.csv"},
		{name: "empty", rel: "", flags: rd, wantText: "path is empty"},
		{name: "trailing slash", rel: "d/", flags: rd, wantText: "path has an empty element (a doubled or trailing slash)"},
		{name: "backslash", rel: `d\g`, flags: rd, wantText: "path contains a control character or backslash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := tree(t)
			f, err := openBeneath(root, tc.rel, tc.flags, 0o644)
			if f != nil {
				defer f.Close()
			}
			switch {
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("openBeneath(%q) = %v, want %v", tc.rel, err, tc.wantErr)
			case tc.wantErr == nil && tc.wantText == "" && err != nil:
				t.Fatalf("openBeneath(%q) = %v, want success", tc.rel, err)
			case tc.wantText != "" && errText(err, root) != tc.wantText:
				t.Fatalf("openBeneath(%q) = %q, want %q", tc.rel, errText(err, root), tc.wantText)
			}
			if err != nil && f != nil {
				t.Fatal("openBeneath returned a file with its error")
			}
			if err == nil {
				if f.Name() != filepath.Join(root, tc.rel) {
					t.Errorf("file name %q, want %q", f.Name(), filepath.Join(root, tc.rel))
				}
				if tc.want != "" {
					if got := describeOpened(t, f); got != tc.want {
						t.Errorf("opened %q, want %q", got, tc.want)
					}
				}
			}
			for _, p := range tc.made {
				if !exists(filepath.Join(root, p)) {
					t.Errorf("%s was not made", p)
				}
			}
			for _, p := range tc.notMade {
				if exists(filepath.Join(filepath.Dir(root), p)) {
					t.Errorf("%s was made", p)
				}
			}
		})
	}
}

// describeOpened is an opened file's content, or "<dir>" or "<fifo>".
func describeOpened(t *testing.T, f *os.File) string {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case fi.IsDir():
		return "<dir>"
	case fi.Mode()&fs.ModeNamedPipe != 0:
		return "<fifo>"
	}
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestOpenBeneathMakesDirectories0755(t *testing.T) {
	root := t.TempDir()
	f, err := openBeneath(root, "a/b/c", unix.O_WRONLY|unix.O_CREAT, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	for p, want := range map[string]fs.FileMode{"a": fs.ModeDir | perm(0o755), "a/b": fs.ModeDir | perm(0o755), "a/b/c": perm(0o600)} {
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
		}
	}
}

func TestOpenBeneathRootIsALink(t *testing.T) {
	base := t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(base, "root")); err != nil {
		t.Fatal(err)
	}
	_, err := openBeneath(filepath.Join(base, "root"), "f", unix.O_WRONLY|unix.O_CREAT, 0o644)
	if want := "open ROOT/root: not a directory"; !errors.Is(err, unix.ENOTDIR) || errText(err, base) != want {
		t.Errorf("openBeneath under a linked root = %q, want %q", errText(err, base), want)
	}
}

func TestWriteBeneath(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rel     string
		how     existing
		fifoEnd bool // a reader holds the fifo p open
		// wantText is the error's text with the root written ROOT ("":
		// none); then the contents the paths (under the root's parent)
		// must have afterwards.
		wantText string
		want     map[string]string
	}{
		{name: "new file", rel: "new", how: refuseExisting, want: map[string]string{"root/new": "content"}},
		{name: "new file in new directories", rel: "a/b/new", how: refuseExisting, want: map[string]string{"root/a/b/new": "content"}},
		{name: "new file in a directory", rel: "d/new", how: refuseExisting, want: map[string]string{"root/d/new": "content", "root/d/g": "gdata"}},
		{name: "job: existing file", rel: "f", how: refuseExisting, wantText: "open ROOT/f: file exists", want: map[string]string{"root/f": "data"}},
		{name: "job: existing directory", rel: "d", how: refuseExisting, wantText: "open ROOT/d: file exists"},
		{name: "job: link at the end", rel: "lf", how: refuseExisting, wantText: "open ROOT/lf: file exists", want: map[string]string{"root/f": "data"}},
		{name: "job: dangling link at the end", rel: "dang", how: refuseExisting, wantText: "open ROOT/dang: file exists", want: map[string]string{"root/nowhere": "<missing>"}},
		{name: "job: link in the middle", rel: "ld/g", how: refuseExisting, wantText: "mkdir ROOT/ld: not a directory", want: map[string]string{"root/d/g": "gdata"}},
		{name: "job: link out of the root", rel: "up/secret", how: refuseExisting, wantText: "mkdir ROOT/up: not a directory", want: map[string]string{"outside/secret": "secret"}},
		{name: "job: file in the way", rel: "f/x", how: refuseExisting, wantText: "mkdir ROOT/f: not a directory"},
		{name: "job: fifo", rel: "p", how: refuseExisting, wantText: "open ROOT/p: file exists"},
		{name: "job: socket", rel: "s", how: refuseExisting, wantText: "open ROOT/s: file exists"},
		{name: "job: bad path", rel: "../x", how: refuseExisting, wantText: "path has a '..' element; files must stay under /sandbox"},
		{name: "session: existing file replaced", rel: "f", how: replaceRegular, want: map[string]string{"root/f": "content"}},
		{name: "session: link at the end", rel: "lf", how: replaceRegular, wantText: "open ROOT/lf: too many levels of symbolic links", want: map[string]string{"root/f": "data"}},
		{name: "session: link out of the root", rel: "abs/secret", how: replaceRegular, wantText: "mkdir ROOT/abs: not a directory", want: map[string]string{"outside/secret": "secret"}},
		{name: "session: directory", rel: "d", how: replaceRegular, wantText: "open ROOT/d: is a directory"},
		{name: "session: fifo no one reads", rel: "p", how: replaceRegular, wantText: "open ROOT/p: no such device or address"},
		{name: "session: fifo someone reads", rel: "p", how: replaceRegular, fifoEnd: true, wantText: "not a regular file"},
		{name: "session: socket", rel: "s", how: replaceRegular, wantText: "open ROOT/s: no such device or address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := tree(t)
			if tc.fifoEnd {
				r, err := os.OpenFile(filepath.Join(root, "p"), os.O_RDONLY|syscall.O_NONBLOCK, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					b, _ := io.ReadAll(r)
					if len(b) > 0 {
						t.Errorf("the fifo's reader got %q", b)
					}
					r.Close()
				}()
			}
			err := writeBeneath(root, tc.rel, []byte("content"), tc.how)
			if got := errText(err, root); got != tc.wantText {
				t.Errorf("writeBeneath(%q) = %q, want %q", tc.rel, got, tc.wantText)
			}
			for p, want := range tc.want {
				if got := content(t, filepath.Join(filepath.Dir(root), p)); got != want {
					t.Errorf("%s holds %q, want %q", p, got, want)
				}
			}
		})
	}
}

func TestWriteBeneathNewFileMode(t *testing.T) {
	root := t.TempDir()
	if err := writeBeneath(root, "x/new", []byte("content"), refuseExisting); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(filepath.Join(root, "x/new"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != perm(0o644) {
		t.Errorf("mode %v, want %v", fi.Mode(), perm(0o644))
	}
}

// TestWriteBeneathKeepsMode: replacing a file keeps its mode (a script the
// code made executable stays so).
func TestWriteBeneathKeepsMode(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "run.sh")
	if err := os.WriteFile(path, []byte("a longer old content"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeBeneath(root, "run.sh", []byte("new"), replaceRegular); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := content(t, path); got != "new" || fi.Mode() != 0o700 {
		t.Errorf("replaced file holds %q with mode %v, want \"new\" with -rwx------", got, fi.Mode())
	}
}

// TestPutFile: a session's put and a call's files say what went wrong in
// the words sandboxd has always passed on (it names the file itself).
func TestPutFile(t *testing.T) {
	for _, tc := range []struct {
		name, rel, want string
	}{
		{"new file", "a/new", ""},
		{"existing file", "f", ""},
		{"link at the end", "lf", "a symbolic link or a file is in the way"},
		{"dangling link at the end", "dang", "a symbolic link or a file is in the way"},
		{"link in the middle", "ld/g", "a symbolic link or a file is in the way"},
		{"file in the middle", "f/x", "a symbolic link or a file is in the way"},
		{"directory", "d", "is a directory"},
		{"fifo", "p", "no such device or address"},
		{"bad path", "/etc/passwd", "path is absolute; give a path relative to /sandbox, such as data/input.csv"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := tree(t)
			err := putFile(root, jobproto.File{Path: tc.rel, Content: []byte("content")})
			if got := errText(err, root); got != tc.want {
				t.Errorf("putFile(%q) = %q, want %q", tc.rel, got, tc.want)
			}
			if tc.want == "" {
				if got := content(t, filepath.Join(root, tc.rel)); got != "content" {
					t.Errorf("%s holds %q", tc.rel, got)
				}
			}
		})
	}
}

func TestGetFile(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rel      string
		maxBytes int64
		want     []string // the frames sent
		wantDone jobproto.Done
	}{
		{name: "regular file", rel: "d/g", maxBytes: 5, want: []string{`file d/g 644 "gdata"`}},
		{name: "over the cap", rel: "d/g", maxBytes: 4, want: []string{"skipped d/g: larger than the 4-byte per-file cap"}},
		{name: "missing", rel: "nope", maxBytes: 10, wantDone: jobproto.Done{NotFound: true}},
		{name: "missing directory", rel: "x/y", maxBytes: 10, wantDone: jobproto.Done{NotFound: true}},
		{name: "link at the end", rel: "lf", maxBytes: 10, want: []string{"skipped lf: symbolic link, not followed"}},
		{name: "dangling link", rel: "dang", maxBytes: 10, want: []string{"skipped dang: symbolic link, not followed"}},
		{name: "link out of the root", rel: "up/secret", maxBytes: 10, want: []string{"skipped up/secret: symbolic link, not followed"}},
		{name: "directory", rel: "d", maxBytes: 10, want: []string{"skipped d: a directory, not a file"}},
		{name: "fifo", rel: "p", maxBytes: 10, want: []string{"skipped p: special file, not read"}},
		{name: "socket", rel: "s", maxBytes: 10, want: []string{"skipped s: unreadable: no such device or address"}},
		{name: "bad path", rel: "../outside/secret", maxBytes: 10, wantDone: jobproto.Done{Error: "path has a '..' element; files must stay under /sandbox"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := tree(t)
			if err := os.Chmod(filepath.Join(root, "d", "g"), 0o644); err != nil {
				t.Fatal(err)
			}
			rec := newRecorder()
			done := getFile(root, jobproto.Get{Path: tc.rel, MaxBytes: tc.maxBytes}, rec.frameWriter)
			if got := rec.frames(t); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if done != tc.wantDone {
				t.Errorf("done = %+v, want %+v", done, tc.wantDone)
			}
		})
	}
}

// FuzzOpenBeneath: whatever the path, what openBeneath opens or makes is
// under the root, and nothing outside it changes.
func FuzzOpenBeneath(f *testing.F) {
	for _, seed := range []string{"f", "d/g", "../outside/secret", "up/secret", "up/new", "abs/secret", "abs/new", "ld/g", "dang/x", "dang", "a/b/c", "d/../../outside/secret", "/etc/passwd", "lf", "f/x", "d//g", "./f", strings.Repeat("a/", 127) + "a"} {
		f.Add(seed, true)
		f.Add(seed, false)
	}
	f.Fuzz(func(t *testing.T, rel string, create bool) {
		root, outside := tree(t)
		flags := unix.O_RDONLY
		if create {
			flags = unix.O_RDWR | unix.O_CREAT
		}
		file, err := openBeneath(root, rel, flags, 0o644)
		if err == nil {
			defer file.Close()
			got, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(file.Fd())))
			if err != nil {
				t.Fatal(err)
			}
			if got != root && !strings.HasPrefix(got, root+"/") {
				t.Fatalf("openBeneath(%q) opened %s, outside the root %s", rel, got, root)
			}
		}
		entries, err := os.ReadDir(outside)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || content(t, filepath.Join(outside, "secret")) != "secret" {
			t.Fatalf("openBeneath(%q) changed the directory outside the root: %v", rel, entries)
		}
		siblings, err := os.ReadDir(filepath.Dir(root))
		if err != nil {
			t.Fatal(err)
		}
		if len(siblings) != 2 {
			t.Fatalf("openBeneath(%q) made an entry next to the root: %v", rel, siblings)
		}
	})
}
