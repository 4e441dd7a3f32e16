package main

// File access under a root directory without following symbolic links
// (openBeneath, writeBeneath), and the collection of /sandbox/out.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

// stepError is a failed step of openBeneath's walk: the system call's
// error, the step (open or mkdir) and the full path of the element it
// failed on. Its text is that of os.OpenFile's and os.MkdirAll's errors;
// bare gives the system call's error alone.
type stepError struct {
	op, path string
	err      error
}

func (e *stepError) Error() string { return e.op + " " + e.path + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// bare is err without the step and path a stepError adds: how session
// transfers report a failed walk (they name the file themselves).
func bare(err error) error {
	var se *stepError
	if errors.As(err, &se) {
		return se.err
	}
	return err
}

// openBeneath opens rel (checked with jobproto.CheckPath) under root
// without following a symbolic link anywhere on the way: a link in the
// path is ELOOP or ENOTDIR. With O_CREAT in flags, missing directories are
// made. The final element is opened O_NONBLOCK, so a fifo does not block
// the open. Errors of the walk are *stepError.
func openBeneath(root, rel string, flags int, mode uint32) (*os.File, error) {
	if err := jobproto.CheckPath(rel); err != nil {
		return nil, err
	}
	dir, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &stepError{"open", root, err}
	}
	create := flags&unix.O_CREAT != 0
	// A directory that cannot be entered fails the step that makes sure
	// it exists: mkdir when creating (as os.MkdirAll says), open otherwise.
	dirOp := "open"
	if create {
		dirOp = "mkdir"
	}
	parts := strings.Split(rel, "/")
	walked := root
	for _, p := range parts[:len(parts)-1] {
		walked = filepath.Join(walked, p)
		if create {
			if err := unix.Mkdirat(dir, p, 0o755); err != nil && err != unix.EEXIST {
				unix.Close(dir)
				return nil, &stepError{"mkdir", walked, err}
			}
		}
		next, err := unix.Openat(dir, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(dir)
		if err != nil {
			return nil, &stepError{dirOp, walked, err}
		}
		dir = next
	}
	full := filepath.Join(root, rel)
	fd, err := unix.Openat(dir, parts[len(parts)-1], flags|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, mode)
	unix.Close(dir)
	if err != nil {
		return nil, &stepError{"open", full, err}
	}
	return os.NewFile(uintptr(fd), full), nil
}

// existing is what writeBeneath does with an entry already at its path.
type existing int

const (
	// refuseExisting fails with EEXIST whatever the entry is: a job's
	// files are new files in an empty /sandbox.
	refuseExisting existing = iota
	// replaceRegular truncates and rewrites a regular file (a session's
	// put, or a call's files); any other entry is refused.
	replaceRegular
)

// writeBeneath writes content to the regular file rel (checked with
// jobproto.CheckPath) under root, making missing directories (0755) and
// the file (0644, less the umask) on the way. It never follows a symbolic
// link, on the way or at the end, and never writes into a directory or a
// special file (fifo, socket, device); an existing file is refused or
// replaced as how says. Errors of the walk are *stepError, the others
// those of *os.File, named by the file's full path.
func writeBeneath(root, rel string, content []byte, how existing) error {
	flags := unix.O_WRONLY | unix.O_CREAT
	if how == refuseExisting {
		flags |= unix.O_EXCL
	}
	f, err := openBeneath(root, rel, flags, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return errors.New("not a regular file")
	}
	if how == replaceRegular {
		if err := f.Truncate(0); err != nil {
			return err
		}
	}
	if _, err := f.Write(content); err != nil {
		return err
	}
	return f.Close()
}

// outCaps bound what is returned from OutDir: files, bytes per file, bytes
// in all.
type outCaps struct {
	count       int
	file, total int64
}

// collect returns the entries under dir (OutDir): regular files within the
// caps as file frames; links, special files and files over a cap as skipped
// frames, in lexical order. Links are never followed. skipEntry, when set,
// leaves out the entries it names (a session call returns only what it
// created or changed).
func collect(dir string, caps outCaps, skipEntry func(path string) bool, out *frameWriter) {
	var total int64
	count := 0
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if path == dir {
			return err
		}
		if skipEntry != nil && skipEntry(path) {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		skip := func(reason string) error {
			return out.json(jobproto.TypeSkipped, jobproto.Skipped{Path: rel, Reason: reason})
		}
		if err != nil {
			return skip("unreadable: " + err.Error())
		}
		t := d.Type()
		switch {
		case t.IsDir():
			return nil
		case t&fs.ModeSymlink != 0:
			return skip("symbolic link, not followed")
		case !t.IsRegular():
			return skip("special file, not read")
		}
		if count >= caps.count {
			return skip(fmt.Sprintf("more than %d files in /sandbox/out", caps.count))
		}
		content, mode, err := readRegular(path, caps.file)
		switch {
		case errors.Is(err, errTooLarge):
			return skip(fmt.Sprintf("larger than the %d-byte per-file cap", caps.file))
		case err != nil:
			return skip("unreadable: " + err.Error())
		case total+int64(len(content)) > caps.total:
			return skip(fmt.Sprintf("over the %d-byte cap on all returned files", caps.total))
		}
		total += int64(len(content))
		count++
		p, err := jobproto.EncodeFile(jobproto.FileHeader{Path: rel, Mode: mode, Size: int64(len(content))}, content)
		if err != nil {
			return err
		}
		return out.frame(jobproto.TypeFile, p)
	})
}

var (
	errTooLarge   = errors.New("too large")
	errNotRegular = errors.New("not a regular file")
)

// readRegular reads the regular file at path, the last element not
// followed if it is a link, as readLimited does.
func readRegular(path string, limit int64) ([]byte, uint32, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	b, fi, err := readLimited(f, limit)
	if err != nil {
		return nil, 0, err
	}
	return b, uint32(fi.Mode().Perm()), nil
}

// readLimited reads f whole if it is a regular file of at most limit
// bytes: errNotRegular for anything else, errTooLarge over the limit. fi is
// f's stat once it succeeded, for the caller's finer reasons.
func readLimited(f *os.File, limit int64) (b []byte, fi fs.FileInfo, err error) {
	fi, err = f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fi, errNotRegular
	}
	if fi.Size() > limit {
		return nil, fi, errTooLarge
	}
	b, err = io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fi, err
	}
	if int64(len(b)) > limit {
		return nil, fi, errTooLarge
	}
	return b, fi, nil
}

// sig identifies a version of a directory entry.
type sig struct {
	size, mtime int64
	ino         uint64
	mode        fs.FileMode
}

// snapshot records the entries under dir, links not followed.
func snapshot(dir string) map[string]sig {
	out := map[string]sig{}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			s := sig{size: fi.Size(), mtime: fi.ModTime().UnixNano(), mode: fi.Mode()}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				s.ino = st.Ino
			}
			out[path] = s
		}
		return nil
	})
	return out
}

// collectChanged returns the entries under dir (OutDir) that are new or
// changed since before, as collect does for a job.
func collectChanged(dir string, before map[string]sig, caps *jobproto.SessionInit, out *frameWriter) {
	after := snapshot(dir)
	unchanged := func(path string) bool {
		s, ok := before[path]
		return ok && s == after[path]
	}
	collect(dir, outCaps{count: caps.MaxOutCount, file: caps.MaxOutFileBytes, total: caps.MaxOutTotalBytes}, unchanged, out)
}
