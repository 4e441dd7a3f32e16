// Command sandboxd-launcher runs inside every sandbox container. It reads one
// job frame (see package jobproto) from stdin, writes the job's files under
// /sandbox, runs Python with the job's stdin, streams its output back in
// frames, kills everything the code left running when it ends, returns the
// files under /sandbox/out and reports the exit status in a final frame.
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
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/jobproto"
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
	// Handled, not ignored: ignored dispositions would pass on to Python.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM, syscall.SIGTSTP,
		syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGVTALRM, syscall.SIGPROF)
	go func() {
		for range sigs {
		}
	}()
	reserveThreads(8)

	out := &frameWriter{w: os.Stdout}
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

type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *frameWriter) frame(typ byte, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return jobproto.WriteFrame(f.w, typ, p)
}

func (f *frameWriter) json(typ byte, v any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return jobproto.WriteJSON(f.w, typ, v)
}

func run(out *frameWriter) jobproto.Exit {
	typ, payload, err := jobproto.ReadFrame(os.Stdin, jobproto.MaxFrame)
	if err != nil {
		return jobproto.Exit{ExitCode: -1, Error: "reading job: " + err.Error()}
	}
	if typ != jobproto.TypeJob {
		return jobproto.Exit{ExitCode: -1, Error: fmt.Sprintf("expected a job frame, got %q", typ)}
	}
	var job jobproto.Job
	if err := json.Unmarshal(payload, &job); err != nil {
		return jobproto.Exit{ExitCode: -1, Error: "decoding job: " + err.Error()}
	}
	payload = nil
	if err := prepare(&job); err != nil {
		return jobproto.Exit{ExitCode: -1, Error: err.Error()}
	}
	exit := execute(&job, out)
	collect(&job, out)
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

func execute(job *jobproto.Job, out *frameWriter) jobproto.Exit {
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return jobproto.Exit{ExitCode: -1, Error: err.Error()}
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return jobproto.Exit{ExitCode: -1, Error: err.Error()}
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		return jobproto.Exit{ExitCode: -1, Error: err.Error()}
	}

	env := os.Environ()
	env = append(env, "PYTHONPATH="+jobproto.WorkDir)
	for k, v := range job.Env {
		env = append(env, k+"="+v)
	}
	oomBefore := oomKills()
	start := time.Now()
	// The child gets only the three pipes: nothing else of the launcher's
	// (the report stream above all) is inherited.
	proc, err := os.StartProcess(python, []string{"python3", jobproto.CodePath}, &os.ProcAttr{
		Dir:   jobproto.WorkDir,
		Env:   env,
		Files: []*os.File{stdinR, stdoutW, stderrW},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return jobproto.Exit{ExitCode: -1, Error: "starting python: " + err.Error()}
	}
	pid := proc.Pid
	stdinR.Close()
	stdoutW.Close()
	stderrW.Close()
	// The code, not the launcher, should be the OOM killer's choice.
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("1000"), 0)
	_ = out.frame(jobproto.TypeStarted, nil)

	go func() {
		_, _ = stdinW.Write(job.Stdin)
		stdinW.Close()
	}()
	var pumps sync.WaitGroup
	var outTrunc, errTrunc bool
	pumps.Add(2)
	go func() { defer pumps.Done(); outTrunc = pump(stdoutR, out, jobproto.TypeStdout, job.OutputBytes) }()
	go func() { defer pumps.Done(); errTrunc = pump(stderrR, out, jobproto.TypeStderr, job.OutputBytes) }()

	var timedOut atomic.Bool
	timer := time.AfterFunc(time.Duration(job.TimeoutMS)*time.Millisecond, func() {
		timedOut.Store(true)
		killAll(pid)
	})
	ws, ru, err := reapUntil(pid)
	timer.Stop()
	dur := time.Since(start)
	// Whatever the code left behind (daemons, children holding the output
	// pipes) dies now, so the pipes reach EOF and /sandbox/out is stable.
	killAll(pid)
	reapAll()
	pumps.Wait()

	exit := jobproto.Exit{
		DurationMS:      dur.Milliseconds(),
		StdoutTruncated: outTrunc,
		StderrTruncated: errTrunc,
		TimedOut:        timedOut.Load(),
	}
	if err != nil {
		exit.ExitCode = -1
		exit.Error = "waiting for python: " + err.Error()
		return exit
	}
	exit.UserCPUMS = ru.Utime.Sec*1000 + int64(ru.Utime.Usec)/1000
	exit.SysCPUMS = ru.Stime.Sec*1000 + int64(ru.Stime.Usec)/1000
	exit.MaxRSSKB = ru.Maxrss
	switch {
	case ws.Signaled():
		exit.ExitCode = 128 + int(ws.Signal())
		exit.Signal = unix.SignalName(ws.Signal())
		if ws.Signal() == syscall.SIGKILL && !exit.TimedOut && oomKills() > oomBefore {
			exit.OOM = true
		}
	default:
		exit.ExitCode = ws.ExitStatus()
	}
	return exit
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

// pump forwards r as frames of type typ, up to limit bytes; the rest is read
// and dropped so the writer never blocks. It reports whether it dropped any.
func pump(r *os.File, out *frameWriter, typ byte, limit int64) bool {
	defer r.Close()
	buf := make([]byte, jobproto.ChunkSize)
	var sent int64
	truncated := false
	for {
		n, err := r.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if room := limit - sent; int64(len(chunk)) > room {
				chunk = chunk[:max(room, 0)]
				truncated = true
			}
			if len(chunk) > 0 {
				if out.frame(typ, chunk) != nil {
					// sandboxd went away; keep draining so the code is not blocked.
					limit = sent
				}
				sent += int64(len(chunk))
			}
		}
		if err != nil {
			return truncated
		}
	}
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

// collect returns the entries under OutDir: regular files within the caps as
// file frames; links, special files and files over a cap as skipped frames.
// Links are never followed.
func collect(job *jobproto.Job, out *frameWriter) {
	var total int64
	count := 0
	_ = filepath.WalkDir(jobproto.OutDir, func(path string, d fs.DirEntry, err error) error {
		if path == jobproto.OutDir {
			return err
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
		if count >= job.MaxOutCount {
			return skip(fmt.Sprintf("more than %d files in /sandbox/out", job.MaxOutCount))
		}
		content, mode, err := readRegular(path, job.MaxOutFileBytes)
		switch {
		case errors.Is(err, errTooLarge):
			return skip(fmt.Sprintf("larger than the %d-byte per-file cap", job.MaxOutFileBytes))
		case err != nil:
			return skip("unreadable: " + err.Error())
		case total+int64(len(content)) > job.MaxOutTotalBytes:
			return skip(fmt.Sprintf("over the %d-byte cap on all returned files", job.MaxOutTotalBytes))
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
