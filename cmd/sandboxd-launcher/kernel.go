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
	"bytes"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

//go:embed kernel.py
var kernelSource string

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
	// maxKernelMessage bounds one message of the kernel (a base64 PNG in
	// JSON is the largest).
	maxKernelMessage = 96 << 20
)

// inFrame is a frame from sandboxd.
type inFrame struct {
	typ byte
	p   []byte
}

// kexit is how a reaped process ended.
type kexit struct {
	ws syscall.WaitStatus
	ru syscall.Rusage
}

// reaper reaps every child (the launcher is the container's init) and
// tells the kernel it watches when its process has ended.
type reaper struct {
	mu      sync.Mutex
	watched map[int]*kernel
	// early keeps exits of processes not watched yet (a kernel that died
	// before its pid was registered), a bounded number.
	early map[int]kexit
	order []int
}

func startReaper() *reaper {
	r := &reaper{watched: map[int]*kernel{}, early: map[int]kexit{}}
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			r.reap()
			select {
			case <-chld:
			case <-t.C:
			}
		}
	}()
	return r
}

func (r *reaper) reap() {
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, &ru)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if !ws.Exited() && !ws.Signaled() {
			continue
		}
		r.mu.Lock()
		if k := r.watched[pid]; k != nil {
			delete(r.watched, pid)
			k.exit = kexit{ws, ru}
			close(k.exited)
		} else {
			if len(r.order) >= 256 {
				delete(r.early, r.order[0])
				r.order = r.order[1:]
			}
			r.early[pid] = kexit{ws, ru}
			r.order = append(r.order, pid)
		}
		r.mu.Unlock()
	}
}

// watch makes k.exited close when k's process has been reaped.
func (r *reaper) watch(k *kernel) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.early[k.in.pid]; ok {
		delete(r.early, k.in.pid)
		k.exit = e
		close(k.exited)
		return
	}
	r.watched[k.in.pid] = k
}

// kmsg is a message of the kernel (see kernel.py).
type kmsg struct {
	T         string              `json:"t"`
	Kind      string              `json:"kind"`
	Text      string              `json:"text"`
	Data      []byte              `json:"data"`
	Truncated bool                `json:"truncated"`
	Omitted   string              `json:"omitted"`
	Status    string              `json:"status"`
	ExitCode  int                 `json:"exit_code"`
	Exception *jobproto.Exception `json:"exception"`
}

// kernel is one session interpreter: a waiting interpreter running
// kernel.py.
type kernel struct {
	in      *interp
	msgs    chan kmsg // closed at the end of the channel or on a message that breaks it
	streams [2]*stream
	exited  chan struct{} // closed once the process is reaped
	exit    kexit
}

// stream is the session's view of one output pipe of the kernel: between
// calls everything is dropped; during a call it is forwarded, capped, up to
// the call's end marker.
type stream struct {
	typ byte
	out *frameWriter

	mu        sync.Mutex
	active    bool
	marker    []byte
	carry     []byte // a tail that may be the start of the marker
	sent      int64
	limit     int64
	truncated bool
	eof       bool
	done      chan struct{} // closed when the call's output has ended
}

func newStream(typ byte, out *frameWriter) *stream {
	done := make(chan struct{})
	close(done)
	return &stream{typ: typ, out: out, done: done}
}

// begin starts forwarding for a call whose output ends with marker.
func (s *stream) begin(marker []byte, limit int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active, s.marker, s.carry, s.sent, s.limit, s.truncated = true, marker, nil, 0, limit, false
	s.done = make(chan struct{})
	if s.eof {
		s.active = false
		close(s.done)
	}
}

// feed takes a chunk of the pipe (nil: the pipe ended).
func (s *stream) feed(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p == nil {
		s.eof = true
		s.stopLocked()
		return
	}
	if !s.active {
		return
	}
	data := append(s.carry, p...)
	if i := bytes.Index(data, s.marker); i >= 0 {
		s.emit(data[:i])
		s.carry = nil
		s.active = false
		close(s.done)
		return
	}
	keep := 0
	for k := min(len(data), len(s.marker)-1); k > 0; k-- {
		if bytes.HasSuffix(data, s.marker[:k]) {
			keep = k
			break
		}
	}
	s.emit(data[:len(data)-keep])
	s.carry = append([]byte(nil), data[len(data)-keep:]...)
}

// stopLocked ends the call's output: a held tail is forwarded.
func (s *stream) stopLocked() {
	if !s.active {
		return
	}
	s.emit(s.carry)
	s.carry = nil
	s.active = false
	close(s.done)
}

// end ends the call's output and reports whether any was cut at the cap.
func (s *stream) end() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	return s.truncated
}

func (s *stream) doneChan() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

func (s *stream) emit(b []byte) {
	for len(b) > 0 {
		n := min(len(b), jobproto.ChunkSize)
		chunk := b[:n]
		b = b[n:]
		if room := s.limit - s.sent; int64(len(chunk)) > room {
			chunk = chunk[:max(room, 0)]
			s.truncated = true
		}
		if len(chunk) > 0 {
			// A write error means sandboxd went away; stdin ends next.
			_ = s.out.frame(s.typ, chunk)
			s.sent += int64(len(chunk))
		}
	}
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

// read decodes the kernel's messages until its channel ends or breaks.
func (k *kernel) read() {
	defer close(k.msgs)
	r := k.in.krespR
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > maxKernelMessage {
			return
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			return
		}
		var m kmsg
		if err := json.Unmarshal(buf, &m); err != nil {
			return
		}
		k.msgs <- m
	}
}

// send writes one request to the kernel; it fails when the kernel is gone.
func (k *kernel) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	msg := make([]byte, 4, 4+len(b))
	binary.BigEndian.PutUint32(msg, uint32(len(b)))
	_, err = k.in.kreqW.Write(append(msg, b...))
	return err
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
		if err := writeFileBeneath(jobproto.WorkDir, f.Path, f.Content); err != nil {
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
	before := snapshot(jobproto.OutDir)
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
	collectChanged(before, &h.init, h.out)
	if err := h.out.json(jobproto.TypeCallEnd, end); err != nil {
		return err
	}
	if restart {
		h.k = nil
		return h.restart(true)
	}
	return nil
}

// resultCaps applies the session's caps to a call's results.
type resultCaps struct {
	init    *jobproto.SessionInit
	figures int
	count   int
}

var pngMagic = []byte("\x89PNG\r\n\x1a\n")

func (c *resultCaps) admit(m kmsg) (jobproto.RichResult, bool) {
	c.count++
	if c.count > c.init.MaxFigures+4 {
		return jobproto.RichResult{}, false
	}
	r := jobproto.RichResult{Kind: m.Kind, Omitted: capString(m.Omitted, 1024)}
	switch m.Kind {
	case jobproto.ResultRepr, jobproto.ResultTable:
		text := strings.ToValidUTF8(m.Text, "\uFFFD")
		r.Truncated = m.Truncated
		if int64(len(text)) > c.init.MaxTextBytes {
			text = capString(text, int(c.init.MaxTextBytes))
			r.Truncated = true
		}
		r.Text = text
	case jobproto.ResultPNG:
		c.figures++
		switch {
		case r.Omitted != "":
		case c.figures > c.init.MaxFigures:
			r.Omitted = fmt.Sprintf("the call made more than %d figures", c.init.MaxFigures)
		case int64(len(m.Data)) > c.init.MaxFigureBytes:
			r.Omitted = fmt.Sprintf("the figure is %d bytes as PNG, over the %d-byte cap", len(m.Data), c.init.MaxFigureBytes)
		case !bytes.HasPrefix(m.Data, pngMagic):
			r.Omitted = "the figure is not a PNG image"
		default:
			r.Data = m.Data
		}
	default:
		return jobproto.RichResult{}, false
	}
	return r, true
}

// capString cuts s to at most n bytes without splitting a UTF-8 sequence.
func capString(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
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

// cpuUse is CPU time in milliseconds.
type cpuUse struct{ user, sys, total int64 }

// readCPU reads the container's CPU use from its cgroup (v2 cpu.stat, or
// v1 cpuacct), or the process pid's when neither is readable.
func readCPU(pid int) cpuUse {
	if b, err := os.ReadFile("/sys/fs/cgroup/cpu.stat"); err == nil {
		var u cpuUse
		for _, line := range strings.Split(string(b), "\n") {
			name, v, _ := strings.Cut(line, " ")
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			switch name {
			case "usage_usec":
				u.total = n / 1000
			case "user_usec":
				u.user = n / 1000
			case "system_usec":
				u.sys = n / 1000
			}
		}
		return u
	}
	for _, dir := range []string{"/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpu,cpuacct"} {
		b, err := os.ReadFile(dir + "/cpuacct.stat")
		if err != nil {
			continue
		}
		var u cpuUse
		tick := int64(1000 / clockTicks)
		for _, line := range strings.Split(string(b), "\n") {
			name, v, _ := strings.Cut(line, " ")
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			switch name {
			case "user":
				u.user = n * tick
			case "system":
				u.sys = n * tick
			}
		}
		u.total = u.user + u.sys
		if b, err := os.ReadFile(dir + "/cpuacct.usage"); err == nil {
			if ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
				u.total = ns / 1e6
			}
		}
		return u
	}
	t := cpuTicks(pid)
	tick := int64(1000 / clockTicks)
	return cpuUse{user: t.user * tick, sys: t.sys * tick, total: (t.user + t.sys) * tick}
}

// memoryBytes is the container's memory use without reclaimable file cache
// (as `docker stats` counts it), or 0 when the cgroup is not readable.
func memoryBytes() int64 {
	read := func(path string) (int64, bool) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil
	}
	statValue := func(path, key string) int64 {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, key+" "); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
		return 0
	}
	if n, ok := read("/sys/fs/cgroup/memory.current"); ok {
		return max(n-statValue("/sys/fs/cgroup/memory.stat", "inactive_file"), 0)
	}
	if n, ok := read("/sys/fs/cgroup/memory/memory.usage_in_bytes"); ok {
		return max(n-statValue("/sys/fs/cgroup/memory/memory.stat", "total_inactive_file"), 0)
	}
	return 0
}

// peakRSSKB is a process's peak resident set (VmHWM), or 0.
func peakRSSKB(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}
