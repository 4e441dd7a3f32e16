package main

// A session's file transfers: put writes files under /sandbox, get reads
// one back.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

// put writes files under WorkDir.
func (h *session) put(p []byte) {
	var req jobproto.Put
	done := jobproto.Done{}
	if err := json.Unmarshal(p, &req); err != nil {
		done.Error = "decoding the request: " + err.Error()
	}
	for _, f := range req.Files {
		if err := asCode(func() error { return putFile(jobproto.WorkDir, f) }); err != nil {
			done.Error = fmt.Sprintf("file %q: %v", f.Path, err)
			break
		}
	}
	_ = h.out.json(jobproto.TypeDone, done)
}

// get reads one file under WorkDir: a file frame, or a skipped frame that
// says why not, then the Done frame.
func (h *session) get(p []byte) {
	var req jobproto.Get
	done := jobproto.Done{}
	if err := json.Unmarshal(p, &req); err != nil {
		done.Error = "decoding the request: " + err.Error()
	} else {
		_ = asCode(func() error { done = getFile(jobproto.WorkDir, req, h.out); return nil })
	}
	_ = h.out.json(jobproto.TypeDone, done)
}

// getFile sends the file req names under root (WorkDir) as a file frame,
// or a skipped frame that says why not, and returns the answer to req.
func getFile(root string, req jobproto.Get, out *frameWriter) (done jobproto.Done) {
	if err := jobproto.CheckPath(req.Path); err != nil {
		done.Error = err.Error()
		return done
	}
	skip := func(reason string) {
		_ = out.json(jobproto.TypeSkipped, jobproto.Skipped{Path: req.Path, Reason: reason})
	}
	f, err := openBeneath(root, req.Path, unix.O_RDONLY, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		done.NotFound = true
		return done
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
		skip("symbolic link, not followed")
		return done
	case err != nil:
		skip("unreadable: " + bare(err).Error())
		return done
	}
	defer f.Close()
	b, fi, err := readLimited(f, req.MaxBytes)
	switch {
	case errors.Is(err, errNotRegular) && fi.IsDir():
		skip("a directory, not a file")
		return done
	case errors.Is(err, errNotRegular):
		skip("special file, not read")
		return done
	case errors.Is(err, errTooLarge):
		skip(fmt.Sprintf("larger than the %d-byte per-file cap", req.MaxBytes))
		return done
	case err != nil:
		skip("unreadable: " + err.Error())
		return done
	}
	payload, err := jobproto.EncodeFile(jobproto.FileHeader{Path: req.Path, Mode: uint32(fi.Mode().Perm()), Size: int64(len(b))}, b)
	if err != nil {
		done.Error = err.Error()
		return done
	}
	_ = out.frame(jobproto.TypeFile, payload)
	return done
}

// putFile writes a file sandboxd sent into a session under root (WorkDir),
// replacing a regular file there. Its errors are in the words session
// transfers have always used: a link or a file in the way of the path, or
// the system call's error alone (the caller names the file).
func putFile(root string, f jobproto.File) error {
	err := writeBeneath(root, f.Path, f.Content, replaceRegular)
	var se *stepError
	if !errors.As(err, &se) {
		return err
	}
	if errors.Is(se.err, unix.ELOOP) || errors.Is(se.err, unix.ENOTDIR) {
		return errors.New("a symbolic link or a file is in the way")
	}
	return se.err
}
