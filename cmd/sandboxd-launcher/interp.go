package main

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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
}

func startInterp(preload []string, out *frameWriter) (*interp, error) {
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
	proc, err := os.StartProcess(python, append([]string{"python3", "-c", zygote}, preload...), &os.ProcAttr{
		Dir:   jobproto.WorkDir,
		Env:   os.Environ(),
		Files: []*os.File{stdinR, stdoutW, stderrW, ctlR, kreqR, krespW, readyW},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return nil, fmt.Errorf("starting python: %w", err)
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
func (in *interp) waitReady() {
	var b [1]byte
	_, _ = in.readyR.Read(b[:])
	in.readyR.Close()
}

// run hands the job to the waiting interpreter and waits for it. The
// job's clock starts once the preload is done: in a cold sandbox the
// import of the profile's modules (seconds for pandas on a busy machine)
// is the sandbox's start-up, not the code's time.
func (in *interp) run(job *jobproto.Job) jobproto.Exit {
	outputLimit.Store(job.OutputBytes)
	in.waitReady()
	base := cpuTicks(in.pid) // the preload's CPU is not the job's
	ctl, err := json.Marshal(struct {
		Path string            `json:"path"`
		Env  map[string]string `json:"env"`
	}{jobproto.CodePath, job.Env})
	if err != nil {
		return jobproto.Exit{ExitCode: -1, Error: err.Error()}
	}
	in.forward.Store(true)
	start := time.Now()
	// A failed write means the interpreter is gone already; its status
	// below says why.
	_, _ = in.ctlW.Write(ctl)
	in.ctlW.Close()
	in.kreqW.Close()
	in.krespR.Close()
	_ = in.out.frame(jobproto.TypeStarted, nil)
	go func() {
		_, _ = in.stdinW.Write(job.Stdin)
		in.stdinW.Close()
	}()

	var timedOut atomic.Bool
	timer := time.AfterFunc(time.Duration(job.TimeoutMS)*time.Millisecond, func() {
		timedOut.Store(true)
		killAll(in.pid)
	})
	ws, ru, err := reapUntil(in.pid)
	timer.Stop()
	dur := time.Since(start)
	// Whatever the code left behind (daemons, children holding the output
	// pipes) dies now, so the pipes reach EOF and /sandbox/out is stable.
	killAll(in.pid)
	reapAll()
	in.pumps.Wait()

	exit := jobproto.Exit{
		DurationMS:      dur.Milliseconds(),
		StdoutTruncated: in.outTrunc,
		StderrTruncated: in.errTrunc,
		TimedOut:        timedOut.Load(),
	}
	if err != nil {
		exit.ExitCode = -1
		exit.Error = "waiting for python: " + err.Error()
		return exit
	}
	tick := int64(1000 / clockTicks)
	exit.UserCPUMS = max(ru.Utime.Sec*1000+int64(ru.Utime.Usec)/1000-base.user*tick, 0)
	exit.SysCPUMS = max(ru.Stime.Sec*1000+int64(ru.Stime.Usec)/1000-base.sys*tick, 0)
	exit.MaxRSSKB = ru.Maxrss
	switch {
	case ws.Signaled():
		exit.ExitCode = 128 + int(ws.Signal())
		exit.Signal = unix.SignalName(ws.Signal())
		if ws.Signal() == syscall.SIGKILL && !exit.TimedOut && oomKills() > in.oomBefore {
			exit.OOM = true
		}
	default:
		exit.ExitCode = ws.ExitStatus()
	}
	return exit
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times; 100 on
// every Linux architecture Go supports.
const clockTicks = 100

type ticks struct{ user, sys int64 }

// cpuTicks reads a process's user and system CPU time from /proc.
func cpuTicks(pid int) ticks {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ticks{}
	}
	// The command name (field 2) may hold spaces; fields after it start
	// behind the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ticks{}
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return ticks{}
	}
	u, _ := strconv.ParseInt(f[11], 10, 64) // field 14, utime
	k, _ := strconv.ParseInt(f[12], 10, 64) // field 15, stime
	return ticks{u, k}
}
