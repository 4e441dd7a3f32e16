package main

// Session mode: when the first frame is jobproto.TypeSession instead of a
// job, the launcher hosts a session. The waiting interpreter becomes the
// session's kernel (kernel.py, run by zygote.py in its own process), and the
// launcher serves sandboxd's requests one at a time until its stdin ends:
// calls (code for the kernel), file transfers under /sandbox, interrupts and
// restarts. See jobproto/session.go for the frames.
//
// The launcher stays what it is for a job: pid 1, the only holder of the
// sealed report stream, the reaper of every process. The kernel is code of
// the sandbox like any other: everything it says is capped here, and only
// sandboxd decides when a call has run too long.

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

// Waits of the session host.
const (
	// kernelStartTimeout bounds a kernel's start (the preload imports of
	// a restarted interpreter included).
	kernelStartTimeout = 60 * time.Second
	// streamDrain bounds the wait for the end markers of a call's output
	// once the kernel has reported the call's end.
	streamDrain = 250 * time.Millisecond
	// exitWait bounds the wait for a killed kernel to be reaped.
	exitWait = 5 * time.Second
)

// inFrame is a frame from sandboxd.
type inFrame struct {
	typ byte
	p   []byte
}

// session is the launcher's side of a session.
type session struct {
	init    jobproto.SessionInit
	out     *frameWriter
	preload []string
	reaper  *reaper
	in      <-chan inFrame
	k       *kernel
	calls   int
	// lost: the kernel was replaced since the last call ended, without
	// sandboxd asking; the next call reports the state as lost.
	lost bool
	// oomMark is the container's OOM-kill count when the kernel last
	// started or finished a call: a higher count when it dies between
	// calls means the OOM killer ended it.
	oomMark int64
}

var errStdinClosed = errors.New("sandboxd closed the session")

// runSession hosts a session on the waiting interpreter in, after the
// TypeSession frame p. It returns when sandboxd closes stdin.
func runSession(in *interp, p []byte, out *frameWriter) jobproto.Exit {
	h := &session{out: out, preload: preloadArgs(os.Args[1:])}
	if err := json.Unmarshal(p, &h.init); err != nil {
		killAll(in.pid)
		return jobproto.Exit{ExitCode: -1, Error: "decoding the session: " + err.Error()}
	}
	out.setKey(os.Stdout, h.init.Key)
	_ = os.MkdirAll(jobproto.OutDir, 0o755)
	h.reaper = startReaper()
	frames := make(chan inFrame)
	go func() {
		defer close(frames)
		for {
			typ, payload, err := jobproto.ReadFrame(os.Stdin, jobproto.MaxFrame)
			if err != nil {
				return
			}
			frames <- inFrame{typ, payload}
		}
	}()
	h.in = frames
	ready := jobproto.Ready{}
	if err := h.adopt(in); err != nil {
		ready.Error = err.Error()
	}
	h.measureInto(&ready)
	_ = out.json(jobproto.TypeReady, ready)
	err := h.serve()
	killAll(1)
	return jobproto.Exit{ExitCode: 0, Error: errString(err)}
}

func errString(err error) string {
	if err == nil || errors.Is(err, errStdinClosed) {
		return ""
	}
	return err.Error()
}

// serve answers sandboxd's frames until stdin ends.
func (h *session) serve() error {
	for {
		var exited <-chan struct{}
		var msgs <-chan kmsg
		if h.k != nil {
			exited, msgs = h.k.exited, h.k.msgs
		}
		select {
		case f, ok := <-h.in:
			if !ok {
				return errStdinClosed
			}
			var err error
			switch f.typ {
			case jobproto.TypeCall:
				err = h.call(f.p)
			case jobproto.TypeInterrupt:
				// No call is running: nothing to interrupt.
			case jobproto.TypeRestart:
				err = h.restart(true)
			case jobproto.TypePut:
				h.put(f.p)
			case jobproto.TypeGet:
				h.get(f.p)
			default:
				err = fmt.Errorf("unexpected frame %q from sandboxd", f.typ)
			}
			if err != nil {
				return err
			}
		case <-exited:
			if err := h.lostBetweenCalls(); err != nil {
				return err
			}
		case _, ok := <-msgs:
			// Between calls the kernel has nothing to say; a broken channel
			// means a broken (or dying) kernel.
			if !ok {
				select {
				case <-h.k.exited:
				case <-time.After(streamDrain):
				}
				if err := h.lostBetweenCalls(); err != nil {
					return err
				}
			}
		}
	}
}

// lostBetweenCalls handles a kernel that died, or broke its channel,
// between calls (a thread the code left, the OOM killer): whatever is left
// of it goes. At the memory limit the session ends (sandboxd is told);
// otherwise a new kernel waits and the next call says the state is lost.
func (h *session) lostBetweenCalls() error {
	k := h.k
	h.kill(k)
	h.k = nil
	if oomKills() > h.oomMark {
		return h.out.json(jobproto.TypeNotice, jobproto.Notice{OOM: true, Message: "the interpreter was killed at the memory limit between calls"})
	}
	return h.restart(false)
}

// adopt turns the waiting interpreter in into the session's kernel.
func (h *session) adopt(in *interp) error {
	k := &kernel{in: in, msgs: make(chan kmsg, 16), exited: make(chan struct{})}
	k.streams = [2]*stream{newStream(jobproto.TypeStdout, h.out), newStream(jobproto.TypeStderr, h.out)}
	h.oomMark = oomKills()
	h.reaper.watch(k)
	sink := func(typ byte, p []byte) {
		if typ == jobproto.TypeStdout {
			k.streams[0].feed(p)
		} else {
			k.streams[1].feed(p)
		}
	}
	in.sink.Store(&sink)
	in.forward.Store(false)
	// The kernel says it is ready on its own channel, after the preload.
	in.readyR.Close()
	ctl, err := json.Marshal(map[string]string{"kernel": kernelSource})
	if err != nil {
		return err
	}
	// The kernel's stdin is empty: each call gets its own stdin text.
	in.stdinW.Close()
	_, _ = in.ctlW.Write(ctl)
	in.ctlW.Close()
	go k.read()
	h.k = k
	t := time.NewTimer(kernelStartTimeout)
	defer t.Stop()
	for {
		select {
		case m, ok := <-k.msgs:
			if !ok {
				return errors.New("the session's interpreter did not start")
			}
			if m.T == "ready" {
				return nil
			}
		case <-k.exited:
			return fmt.Errorf("the session's interpreter exited at start-up (%s)", describeExit(k.exit.ws))
		case <-t.C:
			return fmt.Errorf("the session's interpreter did not start within %v", kernelStartTimeout)
		}
	}
}

// kill kills the kernel, everything else in the container but the
// launcher, and waits for the kernel to be reaped.
func (h *session) kill(k *kernel) {
	killAll(k.in.pid)
	select {
	case <-k.exited:
	case <-time.After(exitWait):
	}
	k.in.kreqW.Close()
	k.in.krespR.Close()
}

// restart replaces the kernel with a new interpreter. asked: sandboxd
// asked for it (TypeRestart), and gets a Ready frame; otherwise the next
// call reports the state as lost.
func (h *session) restart(asked bool) error {
	if h.k != nil {
		h.kill(h.k)
		h.k = nil
	}
	ready := jobproto.Ready{Restarted: true}
	in, err := startInterp(h.preload, h.out)
	if err == nil {
		err = h.adopt(in)
	}
	if err != nil {
		ready.Error = err.Error()
		if h.k != nil {
			h.kill(h.k)
			h.k = nil
		}
	}
	if asked {
		h.measureInto(&ready)
		return h.out.json(jobproto.TypeReady, ready)
	}
	h.lost = true
	return nil
}

// call runs one call and reports it.
func (h *session) call(p []byte) error {
	var c jobproto.Call
	end := jobproto.CallEnd{}
	if err := json.Unmarshal(p, &c); err != nil {
		end.Error = "decoding the call: " + err.Error()
		_ = h.out.frame(jobproto.TypeStarted, nil)
		return h.out.json(jobproto.TypeCallEnd, end)
	}
	h.calls++
	for _, f := range c.Files {
		if err := asCode(func() error { return putFile(jobproto.WorkDir, f) }); err != nil {
			end.Error = fmt.Sprintf("file %q: %v", f.Path, err)
			_ = h.out.frame(jobproto.TypeStarted, nil)
			return h.out.json(jobproto.TypeCallEnd, end)
		}
	}
	if h.k == nil {
		// The kernel is gone (OOM between calls, reported): sandboxd ends
		// the session; answer the call without running it.
		end.Status, end.ExitCode, end.Error = jobproto.CallDied, -1, "the session has no interpreter"
		_ = h.out.frame(jobproto.TypeStarted, nil)
		return h.out.json(jobproto.TypeCallEnd, end)
	}
	k := h.k
	var before map[string]sig
	_ = asCode(func() error { before = snapshot(jobproto.OutDir); return nil })
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	marker := []byte("\x1esandboxd-end-" + hex.EncodeToString(nonce[:]) + "\x1e")
	for _, s := range k.streams {
		s.begin(marker, c.OutputBytes)
	}
	end.StateLost, h.lost = h.lost, false
	cpu0 := readCPU(k.in.pid)
	oom0 := oomKills()
	start := time.Now()
	req := map[string]any{
		"n": h.calls, "code": string(c.Code), "stdin": base64.StdEncoding.EncodeToString(c.Stdin), "marker": string(marker),
		"max_text": h.init.MaxTextBytes, "max_figure": h.init.MaxFigureBytes, "max_figures": h.init.MaxFigures,
	}
	go func() { _ = k.send(req) }() // a kernel that does not read must not block the launcher
	if err := h.out.frame(jobproto.TypeStarted, nil); err != nil {
		return err
	}
	res := &resultCaps{init: &h.init}
	var kend *kmsg
	restart := false
wait:
	for {
		select {
		case m, ok := <-k.msgs:
			if !ok {
				break wait // the kernel died, or broke its channel
			}
			switch m.T {
			case "result":
				if r, ok := res.admit(m); ok {
					if err := h.out.json(jobproto.TypeResult, r); err != nil {
						return err
					}
				}
			case "end":
				kend = &m
				break wait
			}
		case <-k.exited:
			break wait
		case f, ok := <-h.in:
			if !ok {
				return errStdinClosed
			}
			switch f.typ {
			case jobproto.TypeInterrupt:
				_ = syscall.Kill(k.in.pid, syscall.SIGINT)
			case jobproto.TypeRestart:
				restart = true
				break wait
			default:
				return fmt.Errorf("unexpected frame %q from sandboxd during a call", f.typ)
			}
		}
	}
	end.DurationMS = time.Since(start).Milliseconds()
	switch {
	case kend != nil:
		end.Status, end.ExitCode, end.Exception = kend.Status, kend.ExitCode, kend.Exception
		switch end.Status {
		case jobproto.CallOK, jobproto.CallError, jobproto.CallInterrupted:
		default:
			end.Status = jobproto.CallError
		}
		// The output of the call ends with its marker on each pipe.
		t := time.NewTimer(streamDrain)
		for _, s := range k.streams {
			select {
			case <-s.doneChan():
			case <-t.C:
			}
		}
		t.Stop()
	case restart:
		h.kill(k)
		end.Status, end.ExitCode = jobproto.CallRestarted, -1
	default:
		// The kernel died, or closed or garbled its channel (then it
		// cannot serve calls any more): whatever is left goes with it.
		h.kill(k)
		end.Status = jobproto.CallDied
		select {
		case <-k.exited:
			ws := k.exit.ws
			if ws.Signaled() {
				end.ExitCode, end.Signal = 128+int(ws.Signal()), unix.SignalName(ws.Signal())
			} else {
				end.ExitCode = ws.ExitStatus()
			}
		default:
			end.ExitCode = -1
		}
		h.k = nil // sandboxd restarts it, or ends the session
	}
	h.oomMark = oomKills()
	if h.oomMark > oom0 {
		end.OOM = true
	}
	end.StdoutTruncated = k.streams[0].end()
	end.StderrTruncated = k.streams[1].end()
	cpu1 := readCPU(k.in.pid)
	end.UserCPUMS = max(cpu1.user-cpu0.user, 0)
	end.SysCPUMS = max(cpu1.sys-cpu0.sys, 0)
	end.CPUTotalMS = cpu1.total
	end.MaxRSSKB = peakRSSKB(k.in.pid)
	if end.MaxRSSKB == 0 && end.Status == jobproto.CallDied {
		end.MaxRSSKB = k.exit.ru.Maxrss
	}
	end.MemoryBytes = memoryBytes()
	_ = asCode(func() error { collectChanged(jobproto.OutDir, before, &h.init, h.out); return nil })
	if err := h.out.json(jobproto.TypeCallEnd, end); err != nil {
		return err
	}
	if restart {
		h.k = nil
		return h.restart(true)
	}
	return nil
}

func describeExit(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + unix.SignalName(ws.Signal())
	}
	return "exit status " + strconv.Itoa(ws.ExitStatus())
}

func (h *session) measureInto(r *jobproto.Ready) {
	pid := 0
	if h.k != nil {
		pid = h.k.in.pid
	}
	r.CPUTotalMS = readCPU(pid).total
	r.MemoryBytes = memoryBytes()
}
