package main

// File access under a root directory without following symbolic links,
// and the collection of /sandbox/out.

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

// outCaps bound what is returned from OutDir: files, bytes per file, bytes
// in all.
type outCaps struct {
	count       int
	file, total int64
}

// collect returns the entries under OutDir: regular files within the caps as
// file frames; links, special files and files over a cap as skipped frames.
// Links are never followed. skipEntry, when set, leaves out the entries it
// names (a session call returns only what it created or changed).
func collect(caps outCaps, skipEntry func(path string) bool, out *frameWriter) {
	var total int64
	count := 0
	_ = filepath.WalkDir(jobproto.OutDir, func(path string, d fs.DirEntry, err error) error {
		if path == jobproto.OutDir {
			return err
		}
		if skipEntry != nil && skipEntry(path) {
			return nil
		}
		rel, _ := filepath.Rel(jobproto.OutDir, path)
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

var errTooLarge = errors.New("too large")

func readRegular(path string, limit int64) ([]byte, uint32, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, errors.New("not a regular file")
	}
	if fi.Size() > limit {
		return nil, 0, errTooLarge
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, 0, err
	}
	if int64(len(b)) > limit {
		return nil, 0, errTooLarge
	}
	return b, uint32(fi.Mode().Perm()), nil
}

// openBeneath opens rel (checked with jobproto.CheckPath) under root
// without following a symbolic link anywhere on the way: a link in the
// path is ELOOP or ENOTDIR. With O_CREAT in flags, missing directories are
// made.
func openBeneath(root, rel string, flags int, mode uint32) (*os.File, error) {
	if err := jobproto.CheckPath(rel); err != nil {
		return nil, err
	}
	dir, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(rel, "/")
	for _, p := range parts[:len(parts)-1] {
		if flags&unix.O_CREAT != 0 {
			if err := unix.Mkdirat(dir, p, 0o755); err != nil && err != unix.EEXIST {
				unix.Close(dir)
				return nil, err
			}
		}
		next, err := unix.Openat(dir, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(dir)
		if err != nil {
			return nil, err
		}
		dir = next
	}
	fd, err := unix.Openat(dir, parts[len(parts)-1], flags|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, mode)
	unix.Close(dir)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(root, rel)), nil
}

// writeFileBeneath writes content to rel under root, replacing a regular
// file there; it never writes through a link or into a special file.
func writeFileBeneath(root, rel string, content []byte) error {
	f, err := openBeneath(root, rel, unix.O_WRONLY|unix.O_CREAT, 0o644)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return errors.New("a symbolic link or a file is in the way")
		}
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
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.Write(content); err != nil {
		return err
	}
	return f.Close()
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

// collectChanged returns the entries under OutDir that are new or changed
// since before, as collect does for a job.
func collectChanged(before map[string]sig, caps *jobproto.SessionInit, out *frameWriter) {
	after := snapshot(jobproto.OutDir)
	unchanged := func(path string) bool {
		s, ok := before[path]
		return ok && s == after[path]
	}
	collect(outCaps{count: caps.MaxOutCount, file: caps.MaxOutFileBytes, total: caps.MaxOutTotalBytes}, unchanged, out)
}
