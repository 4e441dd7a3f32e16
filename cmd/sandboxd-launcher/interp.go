package main

// The waiting interpreter: a Python process (zygote.py) started before the
// job arrives, which imports the profile's preload modules and then runs a
// job's code, or a session's kernel, in itself.

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

//go:embed zygote.py
var zygote string

// preloadArgs reads "--preload a,b" from the launcher's arguments.
func preloadArgs(args []string) []string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--preload" {
			var mods []string
			for _, m := range strings.Split(args[i+1], ",") {
				if m = strings.TrimSpace(m); m != "" {
					mods = append(mods, m)
				}
			}
			return mods
		}
	}
	return nil
}

// interp is the waiting interpreter: a Python process started before the
// job, which runs the job's code in itself once the launcher hands it over.
type interp struct {
	pid       int
	out       *frameWriter
	stdinW    *os.File
	ctlW      *os.File
	forward   atomic.Bool // output before the handover (import noise) is dropped
	pumps     sync.WaitGroup
	outTrunc  bool
	errTrunc  bool
	oomBefore int64
	// kreqW and krespR are the launcher's ends of a session kernel's
	// channel (the child's fds 4 and 5; see kernel.go). A job closes them.
	kreqW, krespR *os.File
	// readyR is the read end of the child's fd 6, on which the waiting
	// interpreter writes one byte once its preload is done (EOF without
	// it: the interpreter died first).
	readyR *os.File
	// sink, when set (session mode), receives every chunk of output
	// instead of the job's forwarding, and nil at the end of a stream.
	sink atomic.Pointer[func(typ byte, p []byte)]
	// early keeps the start of stderr before the handover, for a report
	// of a cell that failed to build (bubblewrap's own message).
	earlyMu sync.Mutex
	early   []byte
}

// earlyLimit bounds early.
const earlyLimit = 2 << 10

// earlyStderr is what the interpreter (or bubblewrap) wrote to stderr
// before the handover, at most earlyLimit bytes.
func (in *interp) earlyStderr() string {
	in.earlyMu.Lock()
	defer in.earlyMu.Unlock()
	return string(in.early)
}

func startInterp(preload []string, out *frameWriter) (*interp, error) {
	return startProcessInterp(python, append([]string{"python3", "-c", zygote}, preload...), out, nil, codeCred, 0)
}

// startProcessInterp starts the waiting interpreter through program (python
// itself, bubblewrap building a cell around it, or a native cell's init)
// with args; extra are passed as fds 7, 8, ...; cred, when set, is the
// child's user and cloneflags its new namespaces.
func startProcessInterp(program string, args []string, out *frameWriter, extra []*os.File, cred *syscall.Credential, cloneflags uintptr) (*interp, error) {
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	kreqR, kreqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	krespR, krespW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	in := &interp{out: out, stdinW: stdinW, ctlW: ctlW, kreqW: kreqW, krespR: krespR, readyR: readyR, oomBefore: oomKills()}
	// The child gets the three standard pipes, the control pipe (fd 3),
	// a session kernel's channel (fds 4 and 5) and the ready pipe (fd 6),
	// which it closes before running a job's code; nothing else of the
	// launcher's, the report stream above all, is inherited.
	proc, err := os.StartProcess(program, args, &os.ProcAttr{
		Dir:   jobproto.WorkDir,
		Env:   os.Environ(),
		Files: append([]*os.File{stdinR, stdoutW, stderrW, ctlR, kreqR, krespW, readyW}, extra...),
		Sys:   &syscall.SysProcAttr{Setpgid: true, Credential: cred, Cloneflags: cloneflags},
	})
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", filepath.Base(program), err)
	}
	in.pid = proc.Pid
	stdinR.Close()
	stdoutW.Close()
	stderrW.Close()
	ctlR.Close()
	kreqR.Close()
	krespW.Close()
	readyW.Close()
	// The code, not the launcher, should be the OOM killer's choice.
	_ = os.WriteFile("/proc/"+strconv.Itoa(in.pid)+"/oom_score_adj", []byte("1000"), 0)
	in.pumps.Add(2)
	go func() { defer in.pumps.Done(); in.outTrunc = in.pump(stdoutR, jobproto.TypeStdout) }()
	go func() { defer in.pumps.Done(); in.errTrunc = in.pump(stderrR, jobproto.TypeStderr) }()
	return in, nil
}

// limit is set at the handover; pump reads it after forward is true.
var outputLimit atomic.Int64

// pump forwards r as frames of type typ once the job runs, up to the output
// limit; the rest is read and dropped so the writer never blocks. It
// reports whether it dropped any of the job's output.
func (in *interp) pump(r *os.File, typ byte) bool {
	defer r.Close()
	buf := make([]byte, jobproto.ChunkSize)
	var sent int64
	truncated, broken := false, false
	for {
		n, err := r.Read(buf)
		if s := in.sink.Load(); s != nil {
			if n > 0 {
				(*s)(typ, buf[:n])
			}
			if err != nil {
				(*s)(typ, nil)
				return false
			}
			continue
		}
		if n > 0 && typ == jobproto.TypeStderr && !in.forward.Load() {
			in.earlyMu.Lock()
			in.early = append(in.early, buf[:min(n, earlyLimit-len(in.early))]...)
			in.earlyMu.Unlock()
		}
		if n > 0 && in.forward.Load() && !broken {
			chunk := buf[:n]
			if room := outputLimit.Load() - sent; int64(len(chunk)) > room {
				chunk = chunk[:max(room, 0)]
				truncated = true
			}
			if len(chunk) > 0 {
				// On a write error sandboxd went away; keep draining so the
				// code is not blocked.
				broken = in.out.frame(typ, chunk) != nil
				sent += int64(len(chunk))
			}
		}
		if err != nil {
			return truncated
		}
	}
}

// waitReady waits until the interpreter has imported its preload modules
// (or died). sandboxd's start-up clock bounds the wait from outside.
func (in *interp) waitReady() bool {
	var b [1]byte
	n, _ := in.readyR.Read(b[:])
	in.readyR.Close()
	return n == 1
}
