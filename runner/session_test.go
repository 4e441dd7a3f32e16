package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/profiles"
)

var testSessionOpts = SessionOptions{MaxTextBytes: 4096, MaxFigureBytes: 1 << 20, MaxFigures: 4}

func sessionCall(code string, timeoutMS int64) *SessionCall {
	return &SessionCall{Code: []byte(code), TimeoutMS: timeoutMS, OutputBytes: 1 << 20}
}

func mustExec(t *testing.T, s *Session, code string) *SessionResult {
	t.Helper()
	res, err := s.Exec(context.Background(), sessionCall(code, 5000))
	if err != nil {
		t.Fatalf("%q: %v", code, err)
	}
	return res
}

func repr(res *SessionResult) string {
	for _, r := range res.Results {
		if r.Kind == jobproto.ResultRepr {
			return r.Text
		}
	}
	return ""
}

// A session on a pooled box: state across calls, files in and out, a
// caller that goes away, the reaper leaving the live session alone, and
// its container removed at Close.
func TestSessionOnAPooledBox(t *testing.T) {
	instance := "test-" + t.Name()
	r := newTestRunner(t, instance)
	p := defaultProfile(t)
	r.EnablePool(1, 1)
	r.pool.fill(p, mustImage(t, r, p.Image))
	waitPoolReady(t, r, p.Name, 1)
	ctx := context.Background()
	spec := &Spec{ID: "ses_pooled", Profile: p, Limits: p.Limits}
	s, err := r.StartSession(ctx, spec, testSessionOpts)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID() == "ses_pooled" || !strings.HasPrefix(s.ID(), "ex_") {
		t.Fatalf("a pooled session runs under the box's id, got %q", s.ID())
	}
	if res := mustExec(t, s, "x = 20\nx * 2"); res.Status != StatusOK || repr(res) != "40" {
		t.Fatalf("first call: %+v", res)
	}
	// The reaper removes containers no run owns; a live session is owned.
	// The pool's refill is waited out first: between its create and its
	// registration a box is young, which only a grace of 0 ignores.
	waitPoolReady(t, r, p.Name, 1)
	if n, err := r.reap(ctx, 0); err != nil || n != 0 {
		t.Fatalf("reap removed %d containers (%v) while the session lived", n, err)
	}
	if res := mustExec(t, s, "x + 2"); repr(res) != "22" {
		t.Fatalf("state after reap: %+v", res)
	}
	if err := s.PutFiles(ctx, []jobproto.File{{Path: "d/in.txt", Content: []byte("hello")}}); err != nil {
		t.Fatal(err)
	}
	if res := mustExec(t, s, "import os\nos.symlink('/etc/hostname', 'd/link')\nopen('d/in.txt').read().upper()"); repr(res) != "'HELLO'" {
		t.Fatalf("uploaded file: %+v", res)
	}
	if f, reason, err := s.GetFile(ctx, "d/in.txt", 100); err != nil || reason != "" || string(f.Content) != "hello" {
		t.Fatalf("GetFile: %+v %q %v", f, reason, err)
	}
	if _, reason, err := s.GetFile(ctx, "d/link", 100); err != nil || !strings.Contains(reason, "link") {
		t.Fatalf("GetFile of a link: %q %v", reason, err)
	}
	if _, reason, err := s.GetFile(ctx, "d/in.txt", 2); err != nil || !strings.Contains(reason, "cap") {
		t.Fatalf("GetFile over the cap: %q %v", reason, err)
	}
	if _, _, err := s.GetFile(ctx, "nope", 100); !errors.Is(err, ErrNoFile) {
		t.Fatalf("GetFile of a missing file: %v", err)
	}
	if err := s.PutFiles(ctx, []jobproto.File{{Path: "d/link", Content: []byte("x")}}); err == nil {
		t.Fatal("PutFiles wrote through a symbolic link")
	}
	// The caller goes away: the call is interrupted, the state stays.
	cctx, cancel := context.WithCancelCause(ctx)
	time.AfterFunc(300*time.Millisecond, func() { cancel(errors.New("client went away")) })
	res, err := s.Exec(cctx, sessionCall("import time\ntime.sleep(30)", 10000))
	if err != nil || res.Status != StatusKilled || !strings.Contains(res.Message, "client went away") || res.StateLost {
		t.Fatalf("cancelled call: %+v %v", res, err)
	}
	if res := mustExec(t, s, "x"); repr(res) != "20" {
		t.Fatalf("state after the cancelled call: %+v", res)
	}
	s.Close("test over")
	if _, err := s.Exec(ctx, sessionCall("1", 1000)); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("Exec after Close: %v", err)
	}
	cctx2, cancel2 := context.WithTimeout(ctx, time.Minute)
	defer cancel2()
	if err := r.Close(cctx2); err != nil {
		t.Fatal(err)
	}
	if left := managedContainers(t, instance); len(left) != 0 {
		t.Fatalf("%d containers left after the session and the pool closed", len(left))
	}
}

// fakeLauncher is the launcher's end of a session whose box is a pipe:
// it speaks the protocol as the test says, to check what the runner does
// with a launcher that breaks it.
type fakeLauncher struct {
	t    *testing.T
	conn net.Conn
	out  *jobproto.SealedWriter
	key  []byte
}

func fakeSession(t *testing.T) (*Session, *fakeLauncher) {
	t.Helper()
	r := newTestRunner(t, "test-"+t.Name())
	p := defaultProfile(t)
	sbx, launcher := net.Pipe()
	b := &box{id: "fake0000000000000000", imageID: "sha256:fake", hj: types.HijackedResponse{Conn: sbx, Reader: bufio.NewReader(sbx)}}
	fl := &fakeLauncher{t: t, conn: launcher}
	started := make(chan error, 1)
	go func() {
		typ, p, err := jobproto.ReadFrame(launcher, jobproto.MaxFrame)
		if err != nil || typ != jobproto.TypeSession {
			started <- errors.New("no session frame")
			return
		}
		var init jobproto.SessionInit
		_ = json.Unmarshal(p, &init)
		fl.key = init.Key
		fl.out = jobproto.NewSealedWriter(stdcopy.NewStdWriter(launcher, stdcopy.Stdout), init.Key)
		started <- fl.json(jobproto.TypeReady, jobproto.Ready{CPUTotalMS: 5})
	}()
	s, err := r.openSession(context.Background(), b, &Spec{ID: "ses_fake", Profile: p, Limits: p.Limits}, testSessionOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close("test over"); launcher.Close() })
	return s, fl
}

func (f *fakeLauncher) json(typ byte, v any) error {
	b, _ := json.Marshal(v)
	return f.out.Frame(typ, b)
}

// expect reads the next request frame from the runner.
func (f *fakeLauncher) expect(want byte) []byte {
	f.t.Helper()
	typ, p, err := jobproto.ReadFrame(f.conn, jobproto.MaxFrame)
	if err != nil || typ != want {
		f.t.Errorf("the runner sent %q (%v), want %q", typ, err, want)
	}
	return p
}

func TestSessionInterruptThenRestartThenReady(t *testing.T) {
	s, fl := fakeSession(t)
	done := make(chan *SessionResult)
	go func() {
		res, err := s.Exec(context.Background(), sessionCall("while True: pass", 200))
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	fl.expect(jobproto.TypeCall)
	start := time.Now()
	_ = fl.out.Frame(jobproto.TypeStarted, nil)
	fl.expect(jobproto.TypeInterrupt) // at the call's limit
	if d := time.Since(start); d < 150*time.Millisecond || d > 2*time.Second {
		t.Errorf("interrupt after %v for a 200 ms limit", d)
	}
	fl.expect(jobproto.TypeRestart) // the interpreter did not stop within a second
	if d := time.Since(start); d < 1100*time.Millisecond {
		t.Errorf("restart after %v, before the second of grace", d)
	}
	_ = fl.json(jobproto.TypeCallEnd, jobproto.CallEnd{Status: jobproto.CallRestarted, ExitCode: -1, CPUTotalMS: 1205, UserCPUMS: 1200})
	res := <-done
	if res.Status != StatusTimeout || !res.StateLost || res.Ended || res.ChargeCPU != 1200*time.Millisecond {
		t.Fatalf("result %+v", res)
	}
	// The next call waits for the new interpreter first.
	go func() {
		res, err := s.Exec(context.Background(), sessionCall("1", 1000))
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	_ = fl.json(jobproto.TypeReady, jobproto.Ready{Restarted: true})
	fl.expect(jobproto.TypeCall)
	_ = fl.out.Frame(jobproto.TypeStarted, nil)
	_ = fl.json(jobproto.TypeResult, jobproto.RichResult{Kind: jobproto.ResultRepr, Text: "1"})
	_ = fl.json(jobproto.TypeCallEnd, jobproto.CallEnd{Status: jobproto.CallOK, CPUTotalMS: 1210})
	if res := <-done; res.Status != StatusOK || repr(res) != "1" || res.StateLost || res.ChargeCPU != 5*time.Millisecond {
		t.Fatalf("call after the restart: %+v", res)
	}
}

func TestSessionEndsOnAForgedFrame(t *testing.T) {
	s, fl := fakeSession(t)
	done := make(chan *SessionResult)
	go func() {
		res, _ := s.Exec(context.Background(), sessionCall("print(1)", 5000))
		done <- res
	}()
	fl.expect(jobproto.TypeCall)
	_ = fl.out.Frame(jobproto.TypeStarted, nil)
	// A frame sealed with another key: what code writing into the report
	// stream would produce.
	forged := jobproto.NewSealedWriter(stdcopy.NewStdWriter(fl.conn, stdcopy.Stdout), jobproto.NewKey())
	_ = forged.Frame(jobproto.TypeCallEnd, []byte(`{"status":"ok"}`))
	res := <-done
	if res == nil || !res.Ended || res.Status != StatusKilled || !strings.Contains(res.Message, "report stream") {
		t.Fatalf("result %+v", res)
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the session did not end")
	}
}

func TestSessionEndsWhenTheLauncherSendsTooMuch(t *testing.T) {
	s, fl := fakeSession(t)
	done := make(chan *SessionResult)
	go func() {
		call := sessionCall("x", 5000)
		call.OutputBytes = 10
		res, _ := s.Exec(context.Background(), call)
		done <- res
	}()
	fl.expect(jobproto.TypeCall)
	_ = fl.out.Frame(jobproto.TypeStarted, nil)
	go func() {
		chunk := make([]byte, jobproto.ChunkSize)
		for i := 0; i < 2000; i++ {
			if fl.out.Frame(jobproto.TypeStdout, chunk) != nil {
				return
			}
		}
	}()
	res := <-done
	if res == nil || !res.Ended || len(res.Stdout) > 10 {
		t.Fatalf("result %+v", res)
	}
	if _, reason := s.EndReason(); !strings.Contains(reason, "caps") {
		t.Fatalf("end reason %q", reason)
	}
}

// BenchmarkSessionExec: a trivial call in a warm session, the runner and
// the launcher only (no HTTP, budgets or audit).
func BenchmarkSessionExec(b *testing.B) {
	r, err := New(slog.New(slog.DiscardHandler), "bench-session")
	if err != nil {
		b.Fatal(err)
	}
	set, err := profiles.Load("../profiles")
	if err != nil {
		b.Fatal(err)
	}
	p := set.Exec["default"]
	ctx := context.Background()
	s, err := r.StartSession(ctx, &Spec{ID: NewExecID(), Profile: p, Limits: p.Limits}, testSessionOpts)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		s.Close("bench over")
		_ = r.Close(ctx)
	}()
	call := sessionCall("1 + 1", 5000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := s.Exec(ctx, call)
		if err != nil || res.Status != StatusOK {
			b.Fatalf("%+v %v", res, err)
		}
	}
}
