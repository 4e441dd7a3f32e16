package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	"image/png"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/internal/sessions"
	"github.com/sandboxd/sandboxd/runner"
)

// The fake engine runs sessions too: a fakeSession answers a call with its
// code as stdout and repr, a figure when the code says "plot", and blocks
// on "block" until the call's context ends. The real sessions are tested
// against the engine in tests/sessions_test.go.

func (f *fakeEngine) OpenSession(ctx context.Context, spec *runner.Spec, opts runner.SessionOptions) (sessions.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs := &fakeSession{id: spec.ID, files: map[string][]byte{}, done: make(chan struct{})}
	fakeSessions[f] = append(fakeSessions[f], fs)
	return fs, nil
}

// fakeSessions are the sessions each fake engine opened (f.mu held).
var fakeSessions = map[*fakeEngine][]*fakeSession{}

type fakeSession struct {
	id    string
	mu    sync.Mutex
	files map[string][]byte
	calls int
	done  chan struct{}
	// closed is the reason Close was given.
	closed string
}

func tinyPNG() []byte {
	var b bytes.Buffer
	_ = png.Encode(&b, image.NewGray(image.Rect(0, 0, 3, 2)))
	return b.Bytes()
}

func (s *fakeSession) ID() string      { return s.id }
func (s *fakeSession) ImageID() string { return "sha256:fake" }
func (s *fakeSession) Exec(ctx context.Context, call *runner.SessionCall) (*runner.SessionResult, error) {
	s.mu.Lock()
	if s.closed != "" {
		s.mu.Unlock()
		return nil, runner.ErrSessionEnded
	}
	s.calls++
	s.mu.Unlock()
	code := string(call.Code)
	res := &runner.SessionResult{Result: runner.Result{Status: runner.StatusOK, Stdout: call.Code, ImageID: "sha256:fake", Duration: time.Millisecond},
		ChargeCPU: 3 * time.Millisecond, MemoryBytes: 5 << 20}
	switch {
	case code == "block":
		select {
		case <-ctx.Done():
			res.Status, res.Message = runner.StatusKilled, "the call was stopped before it finished: "+context.Cause(ctx).Error()
		case <-s.done:
			res.Status, res.Ended = runner.StatusKilled, true
		}
		return res, nil
	case code == "raise":
		res.Status, res.ExitCode = runner.StatusError, 1
		res.Exception = &jobproto.Exception{Type: "ValueError", Message: "boom", Traceback: "Traceback ...\nValueError: boom\n"}
		return res, nil
	}
	res.Results = []jobproto.RichResult{{Kind: jobproto.ResultRepr, Text: "'" + code + "'"}}
	if strings.Contains(code, "plot") {
		res.Results = append(res.Results, jobproto.RichResult{Kind: jobproto.ResultPNG, Data: tinyPNG()}, jobproto.RichResult{Kind: jobproto.ResultPNG, Data: []byte("not a png")})
	}
	return res, nil
}

func (s *fakeSession) PutFiles(ctx context.Context, files []jobproto.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range files {
		s.files[f.Path] = f.Content
	}
	return nil
}

func (s *fakeSession) GetFile(ctx context.Context, path string, maxBytes int64) (*runner.OutFile, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.files[path]
	switch {
	case !ok:
		return nil, "", runner.ErrNoFile
	case int64(len(b)) > maxBytes:
		return nil, "larger than the cap", nil
	}
	return &runner.OutFile{Path: path, Mode: 0o644, Content: b}, "", nil
}

func (s *fakeSession) Close(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed == "" {
		s.closed = reason
		close(s.done)
	}
}

func (s *fakeSession) Done() <-chan struct{} { return s.done }

// Uncharged: the fake's threads stop with its calls.
func (s *fakeSession) Uncharged() time.Duration { return 0 }

func (s *fakeSession) EndReason() (string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "", s.closed
}

func (s *fakeSession) closedWith() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (r *reply) errAttr(name string) any {
	if e, ok := r.body["error"].(map[string]any); ok {
		return e[name]
	}
	return nil
}

func (f *ctlFixture) newSession(key, body string) string {
	f.t.Helper()
	r := f.req(http.MethodPost, "/sessions", key, body)
	if r.code != http.StatusCreated {
		f.t.Fatalf("POST /sessions: %d %s", r.code, r.raw)
	}
	id, _ := r.body["id"].(string)
	if !strings.HasPrefix(id, "ses_") || r.header.Get("Location") != "/sessions/"+id || r.body["state"] != "ready" {
		f.t.Fatalf("POST /sessions: %s %v", r.raw, r.header)
	}
	return id
}

func (f *ctlFixture) fakeSession(i int) *fakeSession {
	f.eng.mu.Lock()
	defer f.eng.mu.Unlock()
	return fakeSessions[f.eng][i]
}

func TestSessionCallAndResults(t *testing.T) {
	f := newCtl(t, "", time.Second)
	id := f.newSession(keyAgent, `{"profile":"default","idle_timeout_s":60}`)
	r := f.req(http.MethodPost, "/sessions/"+id+"/exec", keyAgent, `{"code":"plot()"}`)
	if r.code != 200 || r.body["status"] != "ok" || r.body["session_id"] != id || r.body["session_state"] != "ready" || r.body["state_lost"] != false {
		t.Fatalf("exec: %d %s", r.code, r.raw)
	}
	results, _ := r.body["results"].([]any)
	if len(results) != 3 {
		t.Fatalf("results: %s", r.raw)
	}
	if first := results[0].(map[string]any); first["type"] != "repr" || first["text"] != "'plot()'" {
		t.Errorf("repr result: %v", first)
	}
	fig := results[1].(map[string]any)
	data, _ := base64.StdEncoding.DecodeString(fig["data"].(string))
	if fig["type"] != "image/png" || fig["width"] != 3.0 || fig["height"] != 2.0 || !bytes.Equal(data, tinyPNG()) {
		t.Errorf("figure: %v", fig)
	}
	if bad := results[2].(map[string]any); bad["data"] != nil || !strings.Contains(bad["omitted"].(string), "not a valid PNG") {
		t.Errorf("a figure that is not a PNG is omitted: %v", bad)
	}
	r = f.req(http.MethodPost, "/sessions/"+id+"/exec", keyAgent, `{"code":"raise"}`)
	if r.code != 200 || r.body["status"] != "error" || r.body["exception"].(map[string]any)["type"] != "ValueError" {
		t.Fatalf("exception: %s", r.raw)
	}
	g := f.req(http.MethodGet, "/sessions/"+id, keyAgent, "")
	usage, _ := g.body["usage"].(map[string]any)
	if g.code != 200 || g.body["state"] != "ready" || usage["calls"] != 2.0 || usage["cpu_ms"] != 6.0 || usage["memory_bytes"] != float64(5<<20) || g.body["idle_timeout_s"] != 60.0 {
		t.Fatalf("GET: %s", g.raw)
	}
	// Every call is an exec audit record carrying the session.
	recs, _, err := f.srv.audit.Query(context.Background(), audit.Filter{Kind: audit.KindExec, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, rec := range recs {
		if rec.Detail["session_id"] == id && rec.Session == id {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d audit records of the session's calls, want 2: %+v", n, recs)
	}
	d := f.req(http.MethodDelete, "/sessions/"+id, keyAgent, "")
	if d.code != 200 || d.body["state"] != "ended" || !strings.Contains(d.body["end_reason"].(string), "DELETE") || !strings.Contains(f.fakeSession(0).closedWith(), "DELETE") {
		t.Fatalf("DELETE: %s", d.raw)
	}
	if r := f.req(http.MethodPost, "/sessions/"+id+"/exec", keyAgent, `{"code":"1"}`); r.code != 409 || r.errCode() != api.CodeSessionEnded {
		t.Fatalf("exec after the end: %d %s", r.code, r.raw)
	}
}

func TestSessionsBelongToTheirKey(t *testing.T) {
	f := newCtl(t, "", time.Second)
	id := f.newSession(keyAgent, `{}`)
	for _, key := range []string{keyOther, keyAdmin} {
		for _, rq := range [][2]string{{"GET", "/sessions/" + id}, {"DELETE", "/sessions/" + id}, {"POST", "/sessions/" + id + "/exec"}, {"POST", "/sessions/" + id + "/files"}, {"GET", "/sessions/" + id + "/files/a.txt"}} {
			body := ""
			if rq[0] == "POST" {
				body = `{"code":"1","files":[{"path":"a","content":""}]}`
				if strings.HasSuffix(rq[1], "/files") {
					body = `{"files":[{"path":"a","content":""}]}`
				}
			}
			r := f.req(rq[0], rq[1], key, body)
			if r.code != 404 || r.errCode() != api.CodeNotFound || strings.Contains(string(r.raw), "acme") {
				t.Errorf("%s %s with another tenant's key: %d %s", rq[0], rq[1], r.code, r.raw)
			}
		}
	}
	if f.fakeSession(0).closedWith() != "" {
		t.Fatal("another tenant ended the session")
	}
	if r := f.req("GET", "/sessions/ses_nope", keyAgent, ""); r.code != 404 {
		t.Fatalf("unknown session: %d", r.code)
	}
}

func TestSessionValidationAndCaps(t *testing.T) {
	f := newCtl(t, "defaults:\n  max_sessions: 1\n", time.Second)
	for _, c := range []struct{ body, field string }{
		{`{"idle_timeout_s":601}`, "idle_timeout_s"},
		{`{"max_lifetime_s":0}`, "max_lifetime_s"},
		{`{"profile":"nope"}`, "profile"},
		{`{"limits":{"memory_mb":99999}}`, "limits.memory_mb"},
		{`{"color":"red"}`, "color"},
	} {
		if r := f.req("POST", "/sessions", keyAgent, c.body); r.code != 400 || r.errAttr("field") != c.field {
			t.Errorf("%s: %d %s", c.body, r.code, r.raw)
		}
	}
	id := f.newSession(keyAgent, `{"limits":{"timeout_ms":2000}}`)
	r := f.req("POST", "/sessions", keyAgent, `{}`)
	if r.code != 429 || r.errCode() != api.CodeBudgetExceeded || r.errAttr("budget") != "tenant.max_sessions" {
		t.Fatalf("second session over max_sessions 1: %d %s", r.code, r.raw)
	}
	for _, c := range []struct{ body, field string }{
		{`{"code":"1","timeout_ms":2001}`, "timeout_ms"},
		{`{}`, "code"},
		{`{"code":"1","files":[{"path":"../x","content":""}]}`, "files[0].path"},
	} {
		if r := f.req("POST", "/sessions/"+id+"/exec", keyAgent, c.body); r.code != 400 || r.errAttr("field") != c.field {
			t.Errorf("%s: %d %s", c.body, r.code, r.raw)
		}
	}
	if r := f.req("POST", "/sessions/"+id+"/exec", keyAgent, `{"code":"1"}`, "Idempotency-Key", "k1"); r.code != 400 {
		t.Errorf("Idempotency-Key on a session call: %d %s", r.code, r.raw)
	}
	// Ended, it no longer counts.
	f.req("DELETE", "/sessions/"+id, keyAgent, "")
	f.newSession(keyAgent, `{}`)
}

func TestSessionBusyFilesAndCancel(t *testing.T) {
	f := newCtl(t, "", time.Second)
	id := f.newSession(keyAgent, `{}`)
	if r := f.req("POST", "/sessions/"+id+"/files", keyAgent, `{"files":[{"path":"d/a.txt","content":"`+base64.StdEncoding.EncodeToString([]byte("hi"))+`"}]}`); r.code != 200 || !strings.Contains(string(r.raw), `"size":2`) {
		t.Fatalf("put: %d %s", r.code, r.raw)
	}
	g := f.req("GET", "/sessions/"+id+"/files/d/a.txt", keyAgent, "")
	if g.code != 200 || g.body["content"] != base64.StdEncoding.EncodeToString([]byte("hi")) || g.body["path"] != "d/a.txt" {
		t.Fatalf("get: %d %s", g.code, g.raw)
	}
	if g := f.req("GET", "/sessions/"+id+"/files/d%2Fa.txt", keyAgent, ""); g.code != 200 {
		t.Fatalf("get with an escaped slash: %d %s", g.code, g.raw)
	}
	if g := f.req("GET", "/sessions/"+id+"/files/nope", keyAgent, ""); g.code != 404 {
		t.Fatalf("get missing: %d %s", g.code, g.raw)
	}
	done := make(chan *reply)
	go func() { done <- f.req("POST", "/sessions/"+id+"/exec", keyAgent, `{"code":"block"}`) }()
	deadline := time.Now().Add(5 * time.Second)
	for f.req("GET", "/sessions/"+id, keyAgent, "").body["state"] != "busy" {
		if time.Now().After(deadline) {
			t.Fatal("the session never became busy")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r := f.req("POST", "/sessions/"+id+"/exec", keyAgent, `{"code":"1"}`); r.code != 409 || r.errCode() != api.CodeSessionBusy {
		t.Fatalf("second call while busy: %d %s", r.code, r.raw)
	}
	// The running call is an exec: DELETE /exec/{id} stops it.
	var callID string
	for _, id := range f.srv.flow.Running() {
		callID = id
	}
	// (A synchronous exec's id is known only while it runs: the answer
	// after the kill may be 404, as for /exec.)
	if d := f.req("DELETE", "/exec/"+callID, keyAgent, ""); d.code != 200 && d.code != 404 {
		t.Fatalf("DELETE /exec/%s: %d %s", callID, d.code, d.raw)
	}
	r := <-done
	if r.code != 200 || r.body["status"] != "killed" || r.body["id"] != callID || r.body["session_state"] != "ready" {
		t.Fatalf("cancelled call: %d %s", r.code, r.raw)
	}
}

func TestSessionsEndIdleFrozenAndAtClose(t *testing.T) {
	f := newCtl(t, "", time.Second)
	idle := f.newSession(keyAgent, `{"idle_timeout_s":1}`)
	f.newSession(keyAgent, `{}`)
	deadline := time.Now().Add(5 * time.Second)
	for f.req("GET", "/sessions/"+idle, keyAgent, "").body["state"] != "ended" {
		if time.Now().After(deadline) {
			t.Fatal("the idle session did not end")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := f.fakeSession(0).closedWith(); !strings.Contains(r, "idle") {
		t.Fatalf("idle session closed with %q", r)
	}
	if f.fakeSession(1).closedWith() != "" {
		t.Fatal("the other session ended too")
	}
	if r := f.req("POST", "/admin/freeze", keyAdmin, `{"reason":"drill"}`); r.code != 200 {
		t.Fatalf("freeze: %d %s", r.code, r.raw)
	}
	deadline = time.Now().Add(5 * time.Second)
	for !strings.Contains(f.fakeSession(1).closedWith(), "frozen") {
		if time.Now().After(deadline) {
			t.Fatalf("a freeze did not end the session: %q", f.fakeSession(1).closedWith())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := f.req("POST", "/sessions", keyAgent, `{}`); r.code != 503 || r.errCode() != api.CodeFrozen {
		t.Fatalf("a session while frozen: %d %s", r.code, r.raw)
	}
	f.req("POST", "/admin/unfreeze", keyAdmin, "")
	f.newSession(keyAgent, `{}`)
	f.stop()
	if r := f.fakeSession(2).closedWith(); !strings.Contains(r, "shutting down") {
		t.Fatalf("closing the server: the session was closed with %q", r)
	}
}

// Session calls are execs to the budgets: the session budget is the
// call's X-Session-Id, else the session's own id.
func TestSessionCallsCountAsExecs(t *testing.T) {
	f := newCtl(t, "defaults:\n  session: {max_execs: 2}\n", time.Second)
	id := f.newSession(keyAgent, `{}`)
	for i := 0; i < 2; i++ {
		if r := f.req("POST", "/sessions/"+id+"/exec", keyAgent, `{"code":"1"}`); r.code != 200 {
			t.Fatalf("call %d: %d %s", i, r.code, r.raw)
		}
	}
	r := f.req("POST", "/sessions/"+id+"/exec", keyAgent, `{"code":"1"}`)
	if r.code != 429 || r.errCode() != api.CodeBudgetExceeded || r.errAttr("budget") != "session.max_execs" || !strings.Contains(r.raw2(), id) {
		t.Fatalf("third call of the session: %d %s", r.code, r.raw)
	}
	// Under an agent session of its own, the call counts there.
	if r := f.req("POST", "/sessions/"+id+"/exec", keyAgent, `{"code":"1"}`, "X-Session-Id", "conv-1"); r.code != 200 {
		t.Fatalf("call under X-Session-Id: %d %s", r.code, r.raw)
	}
	u := f.req("GET", "/usage?session=conv-1", keyAgent, "")
	if u.code != 200 || !strings.Contains(u.raw2(), `"execs":1`) {
		t.Fatalf("usage of conv-1: %d %s", u.code, u.raw)
	}
}

// A session's start, its calls and its end are audit records that share
// the session, so the timeline groups them.
func TestSessionAuditTimeline(t *testing.T) {
	f := newCtl(t, "", time.Second)
	id := f.newSession(keyAgent, `{"profile":"default"}`)
	if r := f.req(http.MethodPost, "/sessions/"+id+"/exec", keyAgent, `{"code":"x = 1"}`); r.code != 200 {
		t.Fatalf("call: %d %s", r.code, r.raw)
	}
	// File transfers are data the code sees and the agent reads: each is
	// a record and a capture, written before the answer.
	data := []byte("region,total\nnorth,7\n")
	if r := f.req(http.MethodPost, "/sessions/"+id+"/files", keyAgent, `{"files":[{"path":"in/sales.csv","content":"`+base64.StdEncoding.EncodeToString(data)+`"}]}`); r.code != 200 {
		t.Fatalf("put: %d %s", r.code, r.raw)
	}
	if r := f.req(http.MethodGet, "/sessions/"+id+"/files/in/sales.csv", keyAgent, ""); r.code != 200 {
		t.Fatalf("get: %d %s", r.code, r.raw)
	}
	if r := f.req(http.MethodDelete, "/sessions/"+id, keyAgent, ""); r.code != 200 {
		t.Fatalf("delete: %d %s", r.code, r.raw)
	}
	p := auditPage(t, f.req(http.MethodGet, "/audit?session="+id, keyRev, ""))
	var got []string
	for _, rec := range p.Records {
		got = append(got, rec.Kind+"/"+rec.Action)
	}
	if strings.Join(got, ",") != "session/end,session/file_get,session/files_put,exec/,session/start" {
		t.Fatalf("the session's records, newest first: %v", got)
	}
	if p.Records[4].Subject != id || p.Records[4].ExecProfile == nil || p.Records[0].Message == "" {
		t.Fatalf("session records: %+v", p.Records)
	}
	want := audit.Output{Name: "files/in/sales.csv", Size: int64(len(data)), SHA256: audit.SHA256(data)}
	put, get := p.Records[2], p.Records[1]
	if put.Subject != id || put.Status != "ok" || len(put.Inputs) != 1 || put.Inputs[0] != want || len(put.Outputs) != 0 || len(put.CaptureIDs) != 1 {
		t.Fatalf("files_put record: %+v", put)
	}
	if get.Subject != id || get.Status != "ok" || len(get.Outputs) != 1 || get.Outputs[0] != want || len(get.Inputs) != 0 || len(get.CaptureIDs) != 1 {
		t.Fatalf("file_get record: %+v", get)
	}
	for _, c := range []struct {
		rec  audit.Record
		part string
	}{{put, "input.0"}, {get, "output.0"}} {
		capt, err := f.srv.captures.Get(context.Background(), c.rec.CaptureIDs[0])
		if err != nil || capt.Kind != "session_files" || !bytes.Equal(capt.Part(c.part).Data, data) || capt.Meta[c.part] != "in/sales.csv" || capt.Meta["session_id"] != id {
			t.Fatalf("%s capture: %v %+v", c.rec.Action, err, capt)
		}
	}
	if rep, err := f.srv.audit.Verify(context.Background()); err != nil || !rep.OK {
		t.Fatalf("verify: %v %+v", err, rep)
	}
}

// A call sent with an agent's X-Session-Id is found under that id and
// under the session's own (issue 16, item 11: it dropped out of the
// session's timeline).
func TestSessionCallWithXSessionIdStaysOnTheTimeline(t *testing.T) {
	f := newCtl(t, "", time.Second)
	id := f.newSession(keyAgent, `{"profile":"default"}`)
	if r := f.req(http.MethodPost, "/sessions/"+id+"/exec", keyAgent, `{"code":"x = 1"}`, "X-Session-Id", "agent-run-9"); r.code != 200 {
		t.Fatalf("call: %d %s", r.code, r.raw)
	}
	for _, q := range []string{id, "agent-run-9"} {
		p := auditPage(t, f.req(http.MethodGet, "/audit?session="+q+"&kind=exec", keyRev, ""))
		if len(p.Records) != 1 || p.Records[0].Session != "agent-run-9" || p.Records[0].SandboxSession != id {
			t.Fatalf("the call under session %s: %+v", q, p.Records)
		}
	}
	if rep, err := f.srv.audit.Verify(context.Background()); err != nil || !rep.OK {
		t.Fatalf("verify: %v %+v", err, rep)
	}
}
