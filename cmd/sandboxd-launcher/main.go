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
//
// The files of the command, by job:
//
//	main.go     the entry point, the first frame, the sealed frame writer
//	job.go      a one-shot job: its files, its run, its exit report
//	interp.go   the waiting interpreter and its output pumps
//	session.go  the session host: serve, call, restart, adopt
//	kernel.go   the channel to a session's kernel (kernel.py)
//	stream.go   a session call's output, cut at its end marker
//	results.go  the caps on a call's rich results
//	transfer.go a session's file put and get
//	reaper.go   reaping and killing the container's processes
//	files.go    file access under a root: openBeneath, writeBeneath, collect
//	procfs.go   CPU, memory and OOM counters from /proc and the cgroup
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

const python = "/usr/bin/python3"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "cell-init" {
		os.Exit(cellInit(os.Args[2:])) // cellinit.go: pid 1 of a cell
	}
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
	if err := setCodeUser(); err != nil {
		_ = out.json(jobproto.TypeExit, jobproto.Exit{ExitCode: -1, Error: err.Error()})
		os.Exit(1)
	}
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

// run starts the waiting interpreter, reads the first frame from sandboxd
// and runs the job or hosts the session it asks for.
func run(out *frameWriter) jobproto.Exit {
	if slices.Contains(os.Args[1:], "--cell") {
		return runCellHost(preloadArgs(os.Args[1:]), out) // cell.go
	}
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
	switch typ {
	case jobproto.TypeSession:
		return runSession(in, payload, out) // session.go
	case jobproto.TypeJob:
		return runJob(in, payload, out) // job.go
	}
	return jobproto.Exit{ExitCode: -1, Error: fmt.Sprintf("expected a job frame, got %q", typ)}
}
