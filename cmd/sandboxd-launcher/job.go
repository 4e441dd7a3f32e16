package main

// A one-shot job: the job frame's files and code are written, the waiting
// interpreter runs the code once, everything left is killed and reaped, and
// the files under /sandbox/out are returned before the exit report.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

// runJob runs the job of the TypeJob frame payload on the waiting
// interpreter in and returns its exit report.
func runJob(in *interp, payload []byte, out *frameWriter) jobproto.Exit {
	var job jobproto.Job
	if err := json.Unmarshal(payload, &job); err != nil {
		return jobproto.Exit{ExitCode: -1, Error: "decoding job: " + err.Error()}
	}
	payload = nil
	out.setKey(os.Stdout, job.Key)
	if err := asCode(func() error { return prepare(&job) }); err != nil {
		return jobproto.Exit{ExitCode: -1, Error: err.Error()}
	}
	exit := in.run(&job)
	_ = asCode(func() error {
		collect(jobproto.OutDir, outCaps{count: job.MaxOutCount, file: job.MaxOutFileBytes, total: job.MaxOutTotalBytes}, nil, out)
		return nil
	})
	return exit
}

// prepare writes the input files and the code, as new files: nothing of
// the job's may already be there, and no symbolic link is followed.
func prepare(job *jobproto.Job) error {
	if err := os.MkdirAll(jobproto.OutDir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", jobproto.OutDir, err)
	}
	if err := prepareIn(jobproto.WorkDir, job); err != nil {
		return err
	}
	if err := writeBeneath(filepath.Dir(jobproto.CodePath), filepath.Base(jobproto.CodePath), job.Code, refuseExisting); err != nil {
		return fmt.Errorf("writing code: %w", err)
	}
	return nil
}

// prepareIn writes the input files under root (the /sandbox the code sees).
func prepareIn(root string, job *jobproto.Job) error {
	for _, f := range job.Files {
		if err := writeBeneath(root, f.Path, f.Content, refuseExisting); err != nil {
			return fmt.Errorf("file %q: %w", f.Path, err)
		}
	}
	return nil
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
