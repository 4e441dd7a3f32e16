// Command sandboxd-launcher runs inside every sandbox container, as its init
// (pid 1). It starts a Python interpreter that imports the profile's preload
// modules and waits; then it reads one job frame (see package jobproto) from
// stdin, writes the job's files under /sandbox, hands the code to the
// waiting interpreter with the job's stdin and environment, streams its
// output back in frames, kills everything the code left running when it
// ends, returns the files under /sandbox/out and reports the exit status in
// a final frame.
//
//	sandboxd-launcher [--preload module,module...]
//
// It is built static (CGO_ENABLED=0) and copied into the sandbox image.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

const python = "/usr/bin/python3"

func main() {
	// Make /proc/<pid> of the launcher unreadable to the code it runs (same
	// uid), so the code cannot open the launcher's stdout and forge frames.
	// execve of Python resets the flag for the child.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	// The launcher is the container's init (pid 1): no other process holds
	// the report stream, signals the code sends it are dropped, and when it
	// exits the kernel kills everything left in the container.
	// Every signal is caught, not ignored (ignored dispositions would pass
	// on to Python): with a handler for all of them, none the code sends —
	// SIGSEGV or SIGABRT included, which Go would otherwise crash on — can
	// end the launcher; the kernel keeps SIGKILL and SIGSTOP from the
	// container's init.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs)
	go func() {
		for range sigs {
		}
	}()
	reserveThreads(8)

	out := newFrameWriter(os.Stdout)
	exit := run(out)
	if err := out.json(jobproto.TypeExit, exit); err != nil {
		fmt.Fprintln(os.Stderr, "sandboxd-launcher: writing exit frame:", err)
		os.Exit(1)
	}
}

// reserveThreads makes the Go runtime start n OS threads now and keep them
// idle, so that a fork bomb that exhausts the container's pids limit cannot
// stop the launcher from getting a thread when it needs one.
func reserveThreads(n int) {
	var ready, release sync.WaitGroup
	ready.Add(n)
	release.Add(1)
	for i := 0; i < n; i++ {
		go func() {
			runtime.LockOSThread()
			ready.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	release.Done()
}

// frameWriter writes the launcher's sealed frames to its stdout. Until the
// job (and its key) arrives it seals with an empty key, which sandboxd
// rejects: only an error report can be sent then anyway.
type frameWriter struct {
	mu sync.Mutex
	w  *jobproto.SealedWriter
}

func newFrameWriter(w io.Writer) *frameWriter {
	return &frameWriter{w: jobproto.NewSealedWriter(w, nil)}
}

// setKey seals every later frame with the run's key.
func (f *frameWriter) setKey(w io.Writer, key []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.w = jobproto.NewSealedWriter(w, key)
}

func (f *frameWriter) frame(typ byte, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.w.Frame(typ, p)
}

func (f *frameWriter) json(typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return f.frame(typ, b)
}

func run(out *frameWriter) jobproto.Exit {
	// The interpreter starts (and imports the preload modules) before the
	// job arrives: in a pooled sandbox that happens while it waits.
	in, err := startInterp(preloadArgs(os.Args[1:]), out)
	if err != nil {
		return jobproto.Exit{ExitCode: -1, Error: err.Error()}
	}
	typ, payload, err := jobproto.ReadFrame(os.Stdin, jobproto.MaxFrame)
	if err != nil {
		return jobproto.Exit{ExitCode: -1, Error: "reading job: " + err.Error()}
	}
	if typ == jobproto.TypeSession {
		return runSession(in, payload, out) // kernel.go
	}
	if typ != jobproto.TypeJob {
		return jobproto.Exit{ExitCode: -1, Error: fmt.Sprintf("expected a job frame, got %q", typ)}
	}
	var job jobproto.Job
	if err := json.Unmarshal(payload, &job); err != nil {
		return jobproto.Exit{ExitCode: -1, Error: "decoding job: " + err.Error()}
	}
	payload = nil
	out.setKey(os.Stdout, job.Key)
	if err := prepare(&job); err != nil {
		return jobproto.Exit{ExitCode: -1, Error: err.Error()}
	}
	exit := in.run(&job)
	collect(outCaps{count: job.MaxOutCount, file: job.MaxOutFileBytes, total: job.MaxOutTotalBytes}, nil, out)
	return exit
}

// prepare writes the input files and the code.
func prepare(job *jobproto.Job) error {
	if err := os.MkdirAll(jobproto.OutDir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", jobproto.OutDir, err)
	}
	for _, f := range job.Files {
		if err := jobproto.CheckPath(f.Path); err != nil {
			return fmt.Errorf("file %q: %w", f.Path, err)
		}
		full := filepath.Join(jobproto.WorkDir, f.Path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("file %q: %w", f.Path, err)
		}
		if err := writeNew(full, f.Content); err != nil {
			return fmt.Errorf("file %q: %w", f.Path, err)
		}
	}
	if err := writeNew(jobproto.CodePath, job.Code); err != nil {
		return fmt.Errorf("writing code: %w", err)
	}
	return nil
}

func writeNew(path string, content []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(content); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// reapUntil reaps children, adopted orphans included (the launcher is the
// container's init), until pid exits, and returns pid's status and usage.
func reapUntil(pid int) (syscall.WaitStatus, syscall.Rusage, error) {
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		got, err := syscall.Wait4(-1, &ws, 0, &ru)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return ws, ru, err
		}
		if got == pid && (ws.Exited() || ws.Signaled()) {
			return ws, ru, nil
		}
	}
}

// reapAll reaps every remaining child until none is left.
func reapAll() {
	for {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return
		}
	}
}

// killAll kills the code's process group and then every other process in
// the container but the launcher itself, which is the container's init.
func killAll(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	_ = syscall.Kill(-1, syscall.SIGKILL)
}

// oomKills reads the container's memory cgroup OOM-kill counter (cgroup v2
// memory.events or v1 memory.oom_control), or 0 when neither is readable.
func oomKills() int64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
	}
	return 0
}

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
