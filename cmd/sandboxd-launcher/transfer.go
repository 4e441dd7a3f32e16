package main

// A session's file transfers: put writes files under /sandbox, get reads
// one back.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
		if err := writeFileBeneath(jobproto.WorkDir, f.Path, f.Content); err != nil {
			done.Error = fmt.Sprintf("file %q: %v", f.Path, err)
			break
		}
	}
	_ = h.out.json(jobproto.TypeDone, done)
}

// get reads one file under WorkDir: a file frame, or a skipped frame that
// says why not.
func (h *session) get(p []byte) {
	var req jobproto.Get
	done := jobproto.Done{}
	defer func() { _ = h.out.json(jobproto.TypeDone, done) }()
	if err := json.Unmarshal(p, &req); err != nil {
		done.Error = "decoding the request: " + err.Error()
		return
	}
	if err := jobproto.CheckPath(req.Path); err != nil {
		done.Error = err.Error()
		return
	}
	skip := func(reason string) {
		_ = h.out.json(jobproto.TypeSkipped, jobproto.Skipped{Path: req.Path, Reason: reason})
	}
	f, err := openBeneath(jobproto.WorkDir, req.Path, unix.O_RDONLY, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		done.NotFound = true
		return
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
		skip("symbolic link, not followed")
		return
	case err != nil:
		skip("unreadable: " + err.Error())
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		skip("unreadable: " + err.Error())
		return
	case fi.IsDir():
		skip("a directory, not a file")
		return
	case !fi.Mode().IsRegular():
		skip("special file, not read")
		return
	case fi.Size() > req.MaxBytes:
		skip(fmt.Sprintf("larger than the %d-byte per-file cap", req.MaxBytes))
		return
	}
	b, err := io.ReadAll(io.LimitReader(f, req.MaxBytes+1))
	switch {
	case err != nil:
		skip("unreadable: " + err.Error())
		return
	case int64(len(b)) > req.MaxBytes:
		skip(fmt.Sprintf("larger than the %d-byte per-file cap", req.MaxBytes))
		return
	}
	payload, err := jobproto.EncodeFile(jobproto.FileHeader{Path: req.Path, Mode: uint32(fi.Mode().Perm()), Size: int64(len(b))}, b)
	if err != nil {
		done.Error = err.Error()
		return
	}
	_ = h.out.frame(jobproto.TypeFile, payload)
}
