package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/redact"
)

// Sessions: a sandbox that keeps one Python interpreter alive across calls
// (see jobproto/session.go for the protocol). The container is made exactly
// as for a run (createOptions, or a box of the warm pool), and handed a
// session instead of a job. sandboxd alone times each call: at its limit
// the interpreter is interrupted (SIGINT, KeyboardInterrupt); when no
// report follows within a second it is killed with everything it started
// and replaced by a new one (the call says the state is lost); when even
// that does not come back the container is killed and the session ends.

// Waits of a session.
const (
	// sessionStartTimeout bounds the wait for the first interpreter of a
	// session (container start and the profile's preload imports).
	sessionStartTimeout = 60 * time.Second
	// interruptGrace is how long an interrupted call may take to report.
	interruptGrace = time.Second
	// restartGrace is how long the launcher may take to kill the
	// interpreter and report the call after a restart request.
	restartGrace = 10 * time.Second
	// readyTimeout bounds the wait for a restarted interpreter.
	readyTimeout = 90 * time.Second
	// transferTimeout bounds a file transfer.
	transferTimeout = 60 * time.Second
)

// ErrSessionEnded is returned for operations on a session that has ended;
// Session.EndReason says why.
var ErrSessionEnded = errors.New("the session has ended")

// SessionOptions caps what one call of a session returns besides output
// and files.
type SessionOptions struct {
	// MaxTextBytes caps the text of a repr or table result.
	MaxTextBytes int64
	// MaxFigureBytes caps one PNG figure; MaxFigures their number per call.
	MaxFigureBytes int64
	MaxFigures     int
}

// SessionCall is one call of a session.
type SessionCall struct {
	// ID names the call in logs.
	ID    string
	Code  []byte
	Stdin []byte
	Files []jobproto.File
	// TimeoutMS is the call's wall-time limit; OutputBytes caps each of
	// stdout and stderr.
	TimeoutMS   int64
	OutputBytes int64
	// Redact, when set, removes secrets from the output, returned text
	// files, result texts and the exception.
	Redact *redact.Redactor
}

// SessionResult is what a call produced: a Result as a run's, and more.
type SessionResult struct {
	Result
	// Results are the call's rich results (final expression, figures).
	Results []jobproto.RichResult
	// Exception describes an uncaught exception.
	Exception *jobproto.Exception
	// StateLost: the interpreter was replaced during or before this call;
	// what earlier calls defined is gone.
	StateLost bool
	// Ended: the session ended with this call (its container is removed);
	// EndReason of the session says why.
	Ended bool
	// ChargeCPU is the CPU the session used since the last charge, this
	// call's included (threads left running between calls count); zero
	// when the sandbox could not say.
	ChargeCPU time.Duration
	// MemoryBytes is the container's memory use after the call.
	MemoryBytes int64
}

// Session is a started session sandbox. Its methods are safe for
// concurrent use; operations run one at a time.
type Session struct {
	r       *Runner
	spec    *Spec
	cid     string
	imageID string
	hj      types.HijackedResponse
	init    jobproto.SessionInit
	frames  chan sframe
	diag    *capped

	wmu sync.Mutex // writes to the container's stdin

	mu        sync.Mutex // one operation at a time
	needReady bool
	// cpuCharged is the container's CPU total (ms) charged so far;
	// cpuFinal its total when the session ended (-1: not known), read
	// before the container was killed, so that what ran after the last
	// call (threads left spinning) is charged too.
	cpuCharged atomic.Int64
	cpuFinal   int64

	done      chan struct{}
	ending    atomic.Bool
	endOnce   sync.Once
	endMu     sync.Mutex
	endStatus string // StatusOOM, or "" for other ends
	endReason string
}

type sframe struct {
	typ byte
	p   []byte
}

// StartSession starts a session sandbox for spec (Profile, Limits, ID; a
// pooled sandbox runs it under its own ID, which spec.ID is set to).
func (r *Runner) StartSession(ctx context.Context, spec *Spec, opts SessionOptions) (*Session, error) {
	if Networked(spec.Profile) && r.EgressNetwork() == nil {
		return nil, egressUnavailable(spec.Profile)
	}
	imageID, err := r.ImageID(ctx, spec.Profile.Image)
	if err != nil {
		return nil, err
	}
	if b := r.takePooled(ctx, spec, imageID); b != nil {
		id := spec.ID
		spec.ID = b.execID
		s, err := r.openSession(ctx, b, spec, opts)
		if !errors.Is(err, errStaleBox) {
			return s, err
		}
		r.log.Warn("a pooled sandbox was gone; using a cold one for the session", "container", b.id[:12])
		spec.ID = id
	}
	b, err := r.startBox(ctx, spec, imageID)
	if err != nil {
		return nil, err
	}
	return r.openSession(ctx, b, spec, opts)
}

// openSession hands the session to the waiting box b and waits for its
// interpreter.
func (r *Runner) openSession(ctx context.Context, b *box, spec *Spec, opts SessionOptions) (*Session, error) {
	p := spec.Profile
	s := &Session{r: r, spec: spec, cid: b.id, imageID: b.imageID, hj: b.hj, frames: make(chan sframe), diag: &capped{max: 8 << 10}, done: make(chan struct{})}
	s.init = jobproto.SessionInit{
		Key:             jobproto.NewKey(),
		MaxOutFileBytes: p.Files.MaxOutputFileBytes, MaxOutTotalBytes: p.Files.MaxOutputTotalBytes, MaxOutCount: p.Files.MaxOutputCount,
		MaxTextBytes: opts.MaxTextBytes, MaxFigureBytes: opts.MaxFigureBytes, MaxFigures: opts.MaxFigures,
	}
	maxFrame := max(int64(jobproto.ChunkSize), s.init.MaxOutFileBytes, s.init.MaxFigureBytes*4/3+s.init.MaxTextBytes*6) + 64<<10
	pr, pw := io.Pipe()
	go func() {
		if b.peeked != nil {
			<-b.peeked // a pooled box's watcher peeks first (it does not consume)
		}
		_, err := stdcopy.StdCopy(pw, s.diag, s.hj.Reader)
		pw.CloseWithError(err)
	}()
	go s.read(pr, int(min(maxFrame, jobproto.MaxFrame)))

	if err := s.send(jobproto.TypeSession, s.init); err != nil {
		s.end("", "the sandbox could not take the session")
		if b.execID != "" {
			return nil, errStaleBox
		}
		return nil, fmt.Errorf("%w: handing the session to the sandbox: %v", ErrEngine, err)
	}
	ready, err := s.awaitReady(ctx, sessionStartTimeout)
	if err != nil {
		s.end("", "the session did not start")
		if b.execID != "" && errors.Is(err, ErrSessionEnded) && s.noFrames() {
			return nil, errStaleBox
		}
		return nil, err
	}
	s.cpuCharged.Store(ready.CPUTotalMS)
	return s, nil
}

// ID is the sandbox's id: the container's sandboxd.exec-id label.
func (s *Session) ID() string { return s.spec.ID }

// ImageID is the image the session runs.
func (s *Session) ImageID() string { return s.imageID }

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// EndReason says why the session ended ("" while it runs), and StatusOOM
// when it was the memory limit.
func (s *Session) EndReason() (status, reason string) {
	s.endMu.Lock()
	defer s.endMu.Unlock()
	return s.endStatus, s.endReason
}

// Close ends the session: its container is killed and removed.
func (s *Session) Close(reason string) { s.end("", reason) }

func (s *Session) end(status, reason string) {
	s.endOnce.Do(func() {
		s.ending.Store(true)
		final := s.r.containerCPU(s.cid)
		s.endMu.Lock()
		s.endStatus, s.endReason = status, reason
		s.cpuFinal = final
		s.endMu.Unlock()
		s.r.kill(s.cid)
		s.hj.Close()
		s.r.removeLater(s.cid)
		close(s.done)
		s.r.log.Info("session sandbox ended", "sandbox_id", s.spec.ID, "container", s.cid[:12], "reason", reason)
	})
}

func (s *Session) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *Session) endedErr() error {
	_, reason := s.EndReason()
	return fmt.Errorf("%w: %s", ErrSessionEnded, reason)
}

// noFrames reports whether the sandbox never sent a frame (a pooled box
// that died while it waited).
func (s *Session) noFrames() bool { return strings.TrimSpace(s.diag.String()) == "" }

// send writes one frame to the launcher.
func (s *Session) send(typ byte, v any) error {
	var p []byte
	if v != nil {
		var err error
		if p, err = json.Marshal(v); err != nil {
			return err
		}
	}
	// One write per frame.
	var buf bytes.Buffer
	if err := jobproto.WriteFrame(&buf, typ, p); err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.hj.Conn.Write(buf.Bytes())
	return err
}

// read passes the launcher's frames to the operation that waits for them,
// until the stream ends; a stream that ends while the session runs ends it.
func (s *Session) read(pr *io.PipeReader, maxFrame int) {
	frames := jobproto.NewSealedReader(pr, s.init.Key)
	defer close(s.frames)
	for {
		typ, p, err := frames.Next(maxFrame)
		if err != nil {
			pr.CloseWithError(io.ErrClosedPipe) // unblock StdCopy
			s.lost(err)
			return
		}
		switch typ {
		case jobproto.TypeNotice:
			var n jobproto.Notice
			_ = json.Unmarshal(p, &n)
			if n.OOM {
				s.end(StatusOOM, fmt.Sprintf("the interpreter was killed at the %d MiB memory limit between calls", s.spec.Limits.MemoryMB))
			} else {
				s.end("", "the sandbox reported: "+n.Message)
			}
			continue
		case jobproto.TypeExit:
			var e jobproto.Exit
			_ = json.Unmarshal(p, &e)
			msg := "the sandbox's launcher ended the session"
			if e.Error != "" {
				msg += ": " + e.Error
			}
			s.end("", msg)
			continue
		}
		select {
		case s.frames <- sframe{typ, p}:
		case <-s.done:
			// Nobody waits any more; read on until the stream ends.
		}
	}
}

// lost ends the session whose stream ended with err.
func (s *Session) lost(err error) {
	if s.ending.Load() {
		return
	}
	switch {
	case errors.Is(err, jobproto.ErrBadMAC):
		s.r.log.Warn("session report stream tampered with", "container", s.cid[:12], "security", true)
		s.end(StatusKilled, "the code wrote into the session's report stream; the session was ended and its output discarded")
	case s.r.oomKilled(context.Background(), s.cid):
		s.end(StatusOOM, fmt.Sprintf("the sandbox was killed at its %d MiB memory limit", s.spec.Limits.MemoryMB))
	default:
		msg := "the sandbox ended unexpectedly"
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			msg += ": " + err.Error()
		}
		s.r.log.Warn("session sandbox ended without being closed", "container", s.cid[:12], "err", err, "launcher_stderr", s.diag.String())
		s.end("", msg)
	}
}

// awaitReady waits for the launcher's Ready frame; a failed start ends the
// session.
func (s *Session) awaitReady(ctx context.Context, timeout time.Duration) (*jobproto.Ready, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case f, ok := <-s.frames:
			if !ok {
				<-s.done
				return nil, s.endedErr()
			}
			if f.typ != jobproto.TypeReady {
				continue // a leftover of an abandoned operation
			}
			var r jobproto.Ready
			if err := json.Unmarshal(f.p, &r); err != nil {
				s.end("", "the sandbox sent a malformed ready report")
				return nil, s.endedErr()
			}
			if r.Error != "" {
				s.end("", "the session's interpreter could not be started: "+r.Error)
				return nil, s.endedErr()
			}
			s.needReady = false
			return &r, nil
		case <-t.C:
			s.end("", fmt.Sprintf("the session's interpreter did not start within %v", timeout))
			return nil, s.endedErr()
		case <-ctx.Done():
			if !s.needReady {
				// The first start: nothing else will wait for it.
				s.end("", "the request ended while the session started")
			}
			return nil, context.Cause(ctx)
		case <-s.done:
			return nil, s.endedErr()
		}
	}
}

// prepare makes the session ready for the next operation.
func (s *Session) prepare(ctx context.Context) error {
	if s.ended() {
		return s.endedErr()
	}
	if s.needReady {
		if _, err := s.awaitReady(ctx, readyTimeout); err != nil {
			return err
		}
	}
	return nil
}

// Exec runs one call. It returns a result for every call that was handed
// to the sandbox, whatever the code did; ErrSessionEnded when the session
// had ended before. When ctx ends first the call is interrupted (and the
// interpreter restarted when it does not stop) and its status is killed.
func (s *Session) Exec(ctx context.Context, call *SessionCall) (*SessionResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.prepare(ctx); err != nil {
		return nil, err
	}
	wire := jobproto.Call{Code: call.Code, Stdin: call.Stdin, Files: call.Files, OutputBytes: call.OutputBytes, TimeoutMS: call.TimeoutMS}
	if err := s.send(jobproto.TypeCall, &wire); err != nil {
		s.end("", "writing to the sandbox failed: "+err.Error())
		return nil, s.endedErr()
	}
	col := newCollector(&Spec{Redact: call.Redact, Job: jobproto.Job{
		OutputBytes: call.OutputBytes, MaxOutFileBytes: s.init.MaxOutFileBytes, MaxOutTotalBytes: s.init.MaxOutTotalBytes, MaxOutCount: s.init.MaxOutCount}})
	budget := 2*call.OutputBytes + s.init.MaxOutTotalBytes + int64(s.init.MaxOutCount+1)*frameOverhead +
		int64(s.init.MaxFigures+4)*(s.init.MaxFigureBytes*4/3+s.init.MaxTextBytes*6+frameOverhead) + 1<<20
	var received int64
	var results []jobproto.RichResult
	var end *jobproto.CallEnd
	startup := time.NewTimer(startTimeout)
	defer startup.Stop()
	var timer *time.Timer
	var deadline <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	arm := func(d time.Duration) {
		if timer != nil {
			timer.Stop()
		}
		timer = time.NewTimer(d)
		deadline = timer.C
	}
	ctxDone := ctx.Done()
	var ranFrom time.Time
	// stopped says why sandboxd interrupted the call: StatusTimeout or
	// StatusKilled; restarted that it asked for a new interpreter.
	stopped, stopMsg := "", ""
	restarted, lost := false, false
	interrupt := func(why, msg string) {
		stopped, stopMsg = why, msg
		_ = s.send(jobproto.TypeInterrupt, nil)
		arm(interruptGrace)
	}
wait:
	for {
		select {
		case f, ok := <-s.frames:
			if !ok {
				lost = true
				break wait
			}
			received += int64(len(f.p)) + 5 + jobproto.MACSize
			if received > budget {
				s.end("", "the sandbox sent more than a call's caps allow")
				lost = true
				break wait
			}
			switch f.typ {
			case jobproto.TypeStarted:
				if !ranFrom.IsZero() {
					s.end("", "the sandbox reported a call's start twice")
					lost = true
					break wait
				}
				startup.Stop()
				ranFrom = time.Now()
				arm(time.Duration(call.TimeoutMS) * time.Millisecond)
			case jobproto.TypeResult:
				var r jobproto.RichResult
				if err := json.Unmarshal(f.p, &r); err == nil && len(results) < s.init.MaxFigures+4 {
					results = append(results, r)
				}
			case jobproto.TypeCallEnd:
				end = &jobproto.CallEnd{}
				if err := json.Unmarshal(f.p, end); err != nil {
					s.end("", "the sandbox sent a malformed call report")
					lost = true
				}
				break wait
			default:
				if err := col.sessionFrame(f.typ, f.p); err != nil {
					s.end("", "the sandbox broke the protocol: "+err.Error())
					lost = true
					break wait
				}
			}
		case <-startup.C:
			s.end("", fmt.Sprintf("the sandbox did not start the call within %v", startTimeout))
			return nil, fmt.Errorf("%w: the session's sandbox did not start the call within %v", ErrEngine, startTimeout)
		case <-deadline:
			switch {
			case stopped == "":
				interrupt(StatusTimeout, fmt.Sprintf("the code ran past the %d ms wall-time limit and was interrupted", call.TimeoutMS))
			case !restarted:
				// The interpreter did not recover: a new one replaces it.
				restarted = true
				_ = s.send(jobproto.TypeRestart, nil)
				arm(restartGrace)
			default:
				s.end("", "the sandbox did not stop a call that ran past its limit; the session was ended")
				lost = true
				break wait
			}
		case <-ctxDone:
			ctxDone = nil
			if stopped == "" {
				interrupt(StatusKilled, "the call was stopped before it finished: "+context.Cause(ctx).Error())
			}
		case <-s.done:
			lost = true
			break wait
		}
	}
	dur := time.Duration(0)
	if !ranFrom.IsZero() {
		dur = time.Since(ranFrom)
	}
	if end != nil {
		col.exit = jobproto.Exit{ExitCode: end.ExitCode, Signal: end.Signal, StdoutTruncated: end.StdoutTruncated, StderrTruncated: end.StderrTruncated,
			DurationMS: end.DurationMS, UserCPUMS: end.UserCPUMS, SysCPUMS: end.SysCPUMS, MaxRSSKB: end.MaxRSSKB}
	}
	res := &SessionResult{Result: *col.result(s.imageID)}
	if res.Duration == 0 {
		res.Duration = dur
	}
	res.Results, res.Exception = results, nil
	if end != nil {
		res.Exception = end.Exception
		res.StateLost = end.StateLost
		res.MemoryBytes = end.MemoryBytes
		res.ChargeCPU = s.charge(end)
	}
	s.classifyCall(res, end, stopped, stopMsg, restarted, lost, call)
	return res, nil
}

// charge returns the CPU to charge for a call that reported end.
func (s *Session) charge(end *jobproto.CallEnd) time.Duration {
	own := end.UserCPUMS + end.SysCPUMS
	ms := own
	if charged := s.cpuCharged.Load(); end.CPUTotalMS >= charged {
		ms = max(end.CPUTotalMS-charged, own)
	}
	s.cpuCharged.Store(end.CPUTotalMS)
	return time.Duration(ms) * time.Millisecond
}

// Uncharged returns the CPU the session's container used that no call
// was charged for, once it has ended (threads a call left running, up to
// the end); it is taken: a second call returns 0. Before the end, or when
// the engine could not say, it is 0.
func (s *Session) Uncharged() time.Duration {
	if !s.ended() {
		return 0
	}
	s.endMu.Lock()
	defer s.endMu.Unlock()
	if s.cpuFinal < 0 {
		return 0
	}
	d := s.cpuFinal - s.cpuCharged.Load()
	s.cpuCharged.Store(s.cpuFinal)
	return time.Duration(max(d, 0)) * time.Millisecond
}

// classifyCall sets the status and message of a call, and what the
// session does next: a new interpreter after a death or a restart, the
// end after an OOM kill.
func (s *Session) classifyCall(res *SessionResult, end *jobproto.CallEnd, stopped, stopMsg string, restarted, lost bool, call *SessionCall) {
	lostMsg := "; the interpreter was restarted and the session's state (variables, imports) is lost"
	switch {
	case lost || end == nil:
		<-s.done
		status, reason := s.EndReason()
		res.Ended, res.ExitCode = true, -1
		res.ChargeCPU = s.Uncharged()
		switch {
		case status == StatusOOM:
			res.Status = StatusOOM
			res.Message = fmt.Sprintf("the code was killed at the %d MiB memory limit; the session has ended", s.spec.Limits.MemoryMB)
		case stopped != "":
			res.Status, res.Message = stopped, stopMsg+"; "+reason
		default:
			res.Status, res.Message = StatusKilled, "the session ended during the call: "+reason
		}
		return
	case end.Error != "":
		res.Status, res.ExitCode, res.Message = StatusError, -1, "the call could not run: "+end.Error
		if end.Status == jobproto.CallDied {
			s.restart(res)
		}
		return
	case end.Status == jobproto.CallDied && end.OOM:
		res.Status = StatusOOM
		res.Message = fmt.Sprintf("the code was killed at the %d MiB memory limit; the session has ended", s.spec.Limits.MemoryMB)
		res.Ended = true
		s.end(StatusOOM, fmt.Sprintf("the interpreter was killed at the %d MiB memory limit", s.spec.Limits.MemoryMB))
		return
	}
	switch {
	case stopped != "":
		res.Status, res.Message = stopped, stopMsg
		if restarted || end.Status == jobproto.CallRestarted || end.Status == jobproto.CallDied {
			res.Message += " and did not stop within " + interruptGrace.String() + lostMsg
			res.StateLost = true
			s.needReady = true
			if !restarted {
				s.restart(res)
			}
		}
	case end.Status == jobproto.CallDied:
		if end.Signal != "" {
			res.Status, res.Message = StatusKilled, "the interpreter was ended by "+end.Signal+lostMsg
		} else {
			res.Status, res.Message = StatusError, fmt.Sprintf("the interpreter exited with status %d", end.ExitCode)+lostMsg
		}
		s.restart(res)
	case end.Status == jobproto.CallOK:
		res.Status = StatusOK
	default:
		res.Status = StatusError
	}
	if res.StateLost && res.Message == "" {
		res.Message = "the interpreter had exited since the previous call" + lostMsg
	}
}

// restart asks for a new interpreter after the call res; the next
// operation waits for it.
func (s *Session) restart(res *SessionResult) {
	res.StateLost = true
	if err := s.send(jobproto.TypeRestart, nil); err != nil {
		s.end("", "writing to the sandbox failed: "+err.Error())
		res.Ended = true
		return
	}
	s.needReady = true
}

// sessionFrame takes one output frame of a session call: stdout, stderr,
// a returned file or a skipped one.
func (c *collector) sessionFrame(typ byte, p []byte) error {
	switch typ {
	case jobproto.TypeStdout:
		_, _ = c.stdout.Write(p)
	case jobproto.TypeStderr:
		_, _ = c.stderr.Write(p)
	case jobproto.TypeFile:
		return c.fileFrame(p)
	case jobproto.TypeSkipped:
		return c.skippedFrame(p)
	default:
		return fmt.Errorf("unexpected frame %q during a call", typ)
	}
	return nil
}

// ErrNoFile is returned by GetFile for a path that does not exist.
var ErrNoFile = errors.New("no such file")

// PutFiles writes files under /sandbox, replacing existing ones.
func (s *Session) PutFiles(ctx context.Context, files []jobproto.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.prepare(ctx); err != nil {
		return err
	}
	if err := s.send(jobproto.TypePut, &jobproto.Put{Files: files}); err != nil {
		s.end("", "writing to the sandbox failed: "+err.Error())
		return s.endedErr()
	}
	done, _, _, err := s.awaitDone()
	if err != nil {
		return err
	}
	if done.Error != "" {
		return errors.New(done.Error)
	}
	return nil
}

// GetFile reads one regular file under /sandbox, at most maxBytes. A file
// that cannot be returned (a link, a special file, over the cap) gives a
// reason instead; a missing one ErrNoFile.
func (s *Session) GetFile(ctx context.Context, path string, maxBytes int64) (*OutFile, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.prepare(ctx); err != nil {
		return nil, "", err
	}
	if err := s.send(jobproto.TypeGet, &jobproto.Get{Path: path, MaxBytes: maxBytes}); err != nil {
		s.end("", "writing to the sandbox failed: "+err.Error())
		return nil, "", s.endedErr()
	}
	done, file, reason, err := s.awaitDone()
	switch {
	case err != nil:
		return nil, "", err
	case done.NotFound:
		return nil, "", ErrNoFile
	case done.Error != "":
		return nil, "", errors.New(done.Error)
	case file == nil && reason == "":
		return nil, "", fmt.Errorf("%w: the sandbox returned neither the file nor a reason", ErrLauncher)
	}
	return file, reason, nil
}

// awaitDone reads the answer of a Put or a Get.
func (s *Session) awaitDone() (*jobproto.Done, *OutFile, string, error) {
	t := time.NewTimer(transferTimeout)
	defer t.Stop()
	var file *OutFile
	reason := ""
	for {
		select {
		case f, ok := <-s.frames:
			if !ok {
				<-s.done
				return nil, nil, "", s.endedErr()
			}
			switch f.typ {
			case jobproto.TypeFile:
				h, content, err := jobproto.DecodeFile(f.p)
				if err != nil {
					s.end("", "the sandbox sent a malformed file")
					return nil, nil, "", s.endedErr()
				}
				file = &OutFile{Path: h.Path, Mode: h.Mode, Content: content}
			case jobproto.TypeSkipped:
				var sk jobproto.Skipped
				_ = json.Unmarshal(f.p, &sk)
				reason = sk.Reason
			case jobproto.TypeDone:
				var d jobproto.Done
				if err := json.Unmarshal(f.p, &d); err != nil {
					s.end("", "the sandbox sent a malformed answer")
					return nil, nil, "", s.endedErr()
				}
				return &d, file, reason, nil
			default:
				s.end("", fmt.Sprintf("the sandbox sent an unexpected frame %q during a file transfer", f.typ))
				return nil, nil, "", s.endedErr()
			}
		case <-t.C:
			s.end("", "the sandbox did not answer a file transfer within "+transferTimeout.String())
			return nil, nil, "", s.endedErr()
		case <-s.done:
			return nil, nil, "", s.endedErr()
		}
	}
}
