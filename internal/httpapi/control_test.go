package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/auth/authtest"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/control/admit"
	"github.com/sandboxd/sandboxd/internal/control/budget"
	"github.com/sandboxd/sandboxd/internal/execflow"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/logbuf"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/redact"
	"github.com/sandboxd/sandboxd/runner"
)

// ctlFixture is a server with a file store, agent keys of two tenants and an
// admin key, for the control plane's tests and those built on them.
type ctlFixture struct {
	t      *testing.T
	srv    *Server
	eng    *fakeEngine
	st     *store.SQLite
	dir    string
	tenant string // tenants file content
	wait   time.Duration
	logs   *logbuf.Buffer
	// set is the profile set in force; nil is the shipped profiles.
	set *profiles.Set
	// redactLogs sends every log line through the redactor, as sandboxd
	// serve does.
	redactLogs bool
	// configure, when set, changes the server's configuration at each
	// start.
	configure func(*Config)
	// audit is the server's audit log (each start opens a new one); set
	// failing to refuse every append.
	audit *switchLog
}

// switchLog is an audit log that refuses every append while failing is
// set.
type switchLog struct {
	audit.Log
	failing atomic.Bool
}

func (l *switchLog) Append(ctx context.Context, r *audit.Record) error {
	if l.failing.Load() {
		return errors.New("disk full")
	}
	return l.Log.Append(ctx, r)
}

const (
	keyAgent = "sbx_agent_acme_0123456789"
	keyOther = "sbx_agent_other_012345678"
	keyAdmin = "sbx_admin_ops_01234567890"
	keyRev   = "sbx_reviewer_acme_0123456"
	keySec   = "sbx_security_other_01234"
)

var ctlSet = sync.OnceValues(func() (*profiles.Set, error) { return profiles.Load("../../profiles") })

// ring is the control tests' keys: agents of acme and other, an admin, a
// reviewer of acme and a security key of other.
func ring(t testing.TB) *auth.Keyring {
	return authtest.Keyring(t, fmt.Sprintf(`keys:
  - {id: agent-1, tenant: acme, key: %s, roles: [agent]}
  - {id: other-1, tenant: other, key: %s, roles: [agent]}
  - {id: ops-1, tenant: ops, key: %s, roles: [admin]}
  - {id: rev-1, tenant: acme, key: %s, roles: [reviewer]}
  - {id: sec-1, tenant: other, key: %s, roles: [security]}
`, keyAgent, keyOther, keyAdmin, keyRev, keySec))
}

// causeEngine says why a run was stopped, as the real runner does.
type causeEngine struct{ *fakeEngine }

func (e causeEngine) Run(ctx context.Context, spec *runner.Spec) (*runner.Result, error) {
	res, err := e.fakeEngine.Run(ctx, spec)
	if err == nil && res.Status == runner.StatusKilled && ctx.Err() != nil {
		res.Message = "the run was stopped before it finished: " + context.Cause(ctx).Error()
	}
	return res, err
}

func newCtl(t *testing.T, tenants string, wait time.Duration) *ctlFixture {
	t.Helper()
	f := &ctlFixture{t: t, dir: t.TempDir(), tenant: tenants, wait: wait, logs: &logbuf.Buffer{},
		eng: &fakeEngine{result: runner.Result{Status: runner.StatusOK, Stdout: []byte("1\n"), ImageID: "sha256:fake"}}}
	f.start()
	return f
}

// start (re)starts the server over the fixture's data dir, as a new
// process would: the store is reopened and recovered.
func (f *ctlFixture) start() {
	t := f.t
	set, err := f.set, error(nil)
	if set == nil {
		if set, err = ctlSet(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := store.OpenSQLite(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	owner := control.NewOwnerID()
	if _, err := st.Recover(context.Background(), owner); err != nil {
		t.Fatal(err)
	}
	var cfg *budget.Config
	if f.tenant != "" {
		if cfg, err = budget.Parse("tenants.yaml", []byte(f.tenant)); err != nil {
			t.Fatal(err)
		}
	}
	var h slog.Handler = slog.NewJSONHandler(f.logs, nil)
	if f.redactLogs {
		h = redact.NewHandler(h, redact.Default())
	}
	log := slog.New(h)
	f.st = st
	al, err := audit.Open("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	f.audit = &switchLog{Log: al}
	sc := Config{Audit: f.audit,
		DataDir: f.dir, Profiles: set, Keys: ring(t), Engine: causeEngine{f.eng}, Gate: admit.New(2, 4, time.Minute), Log: log, MaxBodyBytes: 1 << 20,
		Control: Control{Store: st, Owner: owner, Limits: budget.New(cfg, st, log), IdempotencyWait: f.wait, Queue: 4},
	}
	if f.configure != nil {
		f.configure(&sc)
	}
	f.srv = newServer(t, sc)
	t.Cleanup(f.stop)
}

func (f *ctlFixture) stop() {
	if f.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f.srv.KillRuns(ctx, execflow.ErrShutdown)
	f.srv.Close()
	f.st.Close()
	f.srv = nil
}

// crash drops the server without letting it finish anything, like SIGKILL:
// the store is closed under its feet, and the runs it had never end.
func (f *ctlFixture) crash() {
	f.st.Close()
	f.srv = nil
}

type reply struct {
	code   int
	header http.Header
	raw    []byte
	body   map[string]any
}

func (r *reply) errCode() string {
	if e, ok := r.body["error"].(map[string]any); ok {
		return e["code"].(string)
	}
	return ""
}

func (f *ctlFixture) req(method, path, key, body string, headers ...string) *reply {
	f.t.Helper()
	rec := serve(f.srv, method, path, key, body, headers...)
	out := &reply{code: rec.Code, header: rec.Header(), raw: rec.Body.Bytes()}
	_ = json.Unmarshal(rec.Body.Bytes(), &out.body)
	return out
}

func (f *ctlFixture) exec(body string, headers ...string) *reply {
	f.t.Helper()
	return f.req(http.MethodPost, "/exec", keyAgent, body, headers...)
}

func (f *ctlFixture) runs() int {
	f.eng.mu.Lock()
	defer f.eng.mu.Unlock()
	return len(f.eng.specs)
}

// waitRunning waits until n runs hold a slot.
func (f *ctlFixture) waitRunning(n int) {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if running, _, _ := f.srv.cfg.Gate.Stats(); running >= n && f.runs() >= n {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%d runs never started", n)
		}
		time.Sleep(time.Millisecond)
	}
}

const code1 = `{"language":"python","code":"print(1)"}`

func TestIdempotentReplay(t *testing.T) {
	f := newCtl(t, "", time.Second)
	first := f.exec(code1, "Idempotency-Key", "k-1")
	if first.code != 200 || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %s", first.code, first.raw)
	}
	second := f.exec(code1, "Idempotency-Key", "k-1")
	if second.code != 200 || second.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(first.raw, second.raw) {
		t.Fatalf("replay: %d %q\n%s\n%s", second.code, second.header.Get("Idempotent-Replayed"), first.raw, second.raw)
	}
	// Same JSON with another key order and spacing is the same request.
	third := f.exec(`{ "code":"print(1)", "language":"python" }`, "Idempotency-Key", "k-1")
	if third.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("reordered body not replayed: %d %s", third.code, third.raw)
	}
	if n := f.runs(); n != 1 {
		t.Fatalf("the code ran %d times, want 1", n)
	}
	// Another tenant's same key is its own.
	if r := f.req(http.MethodPost, "/exec", keyOther, code1, "Idempotency-Key", "k-1"); r.code != 200 || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("other tenant: %d %s", r.code, r.raw)
	}
	// Survives a restart.
	f.stop()
	f.start()
	if r := f.exec(code1, "Idempotency-Key", "k-1"); r.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(first.raw, r.raw) {
		t.Fatalf("after restart: %d %s", r.code, r.raw)
	}
	if n := f.runs(); n != 2 {
		t.Fatalf("%d runs, want 2 (one per tenant)", n)
	}
}

func TestIdempotencyMismatch(t *testing.T) {
	f := newCtl(t, "", time.Second)
	f.exec(code1, "Idempotency-Key", "k-2")
	for _, tc := range []struct {
		body    string
		headers []string
	}{
		{`{"language":"python","code":"print(2)"}`, nil},
		{`{"language":"python","code":"print(1)","stdin":"x"}`, nil},
		{`{"language":"python","code":"print(1)","async":true}`, nil},
		{code1, []string{"X-Session-Id", "s1"}},
	} {
		r := f.exec(tc.body, append([]string{"Idempotency-Key", "k-2"}, tc.headers...)...)
		if r.code != 422 || r.errCode() != api.CodeIdempotencyMismatch {
			t.Errorf("%s %v: %d %s, want 422 IDEMPOTENCY_MISMATCH", tc.body, tc.headers, r.code, r.raw)
		}
	}
	if n := f.runs(); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
	for _, bad := range []string{"has space", strings.Repeat("x", 256)} {
		if r := f.exec(code1, "Idempotency-Key", bad); r.code != 400 || r.errCode() != api.CodeValidation {
			t.Errorf("key %q: %d %s", bad, r.code, r.raw)
		}
	}
}

// Ten concurrent requests with one key: one runs, the others wait for it
// and get its answer.
func TestIdempotentConcurrentRetries(t *testing.T) {
	f := newCtl(t, "", 10*time.Second)
	f.eng.block = make(chan struct{})
	var wg sync.WaitGroup
	replies := make([]*reply, 10)
	for i := range replies {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			replies[i] = f.exec(code1, "Idempotency-Key", "k-c")
		}(i)
	}
	f.waitRunning(1)
	time.Sleep(100 * time.Millisecond)
	close(f.eng.block)
	wg.Wait()
	replayed := 0
	for _, r := range replies {
		if r.code != 200 || !bytes.Equal(r.raw, replies[0].raw) {
			t.Fatalf("reply %d %s differs from %s", r.code, r.raw, replies[0].raw)
		}
		if r.header.Get("Idempotent-Replayed") == "true" {
			replayed++
		}
	}
	if n := f.runs(); n != 1 || replayed != 9 {
		t.Fatalf("%d runs and %d replays, want 1 and 9", n, replayed)
	}
}

// A retry that cannot wait long enough gets 409 IN_PROGRESS, then the
// answer once the first request is done.
func TestIdempotentInProgress(t *testing.T) {
	f := newCtl(t, "", 100*time.Millisecond)
	f.eng.block = make(chan struct{})
	done := make(chan *reply)
	go func() { done <- f.exec(code1, "Idempotency-Key", "k-p") }()
	f.waitRunning(1)
	r := f.exec(code1, "Idempotency-Key", "k-p")
	if r.code != 409 || r.errCode() != api.CodeInProgress || r.header.Get("Retry-After") == "" {
		t.Fatalf("while running: %d %s", r.code, r.raw)
	}
	close(f.eng.block)
	first := <-done
	r = f.exec(code1, "Idempotency-Key", "k-p")
	if r.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.raw, first.raw) {
		t.Fatalf("after: %d %s", r.code, r.raw)
	}
}

// A keyed run outlives its client: the retry gets the real result.
func TestIdempotentClientGoesAway(t *testing.T) {
	f := newCtl(t, "", 10*time.Second)
	f.eng.block = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		r := httptest.NewRequest(http.MethodPost, "/exec", strings.NewReader(code1)).WithContext(ctx)
		r.Header.Set("Authorization", "Bearer "+keyAgent)
		r.Header.Set("Idempotency-Key", "k-gone")
		f.srv.Handler().ServeHTTP(httptest.NewRecorder(), r)
	}()
	f.waitRunning(1)
	cancel() // the client drops the connection
	time.Sleep(50 * time.Millisecond)
	go func() { time.Sleep(100 * time.Millisecond); close(f.eng.block) }()
	r := f.exec(code1, "Idempotency-Key", "k-gone")
	if r.code != 200 || r.body["status"] != "ok" || r.header.Get("Idempotent-Replayed") != "true" || f.runs() != 1 {
		t.Fatalf("retry after the client left: %d %s (%d runs)", r.code, r.raw, f.runs())
	}
}

// A crash while a keyed run is in flight: after the restart the retry is
// told INTERRUPTED and nothing runs again.
func TestIdempotentInterruptedByCrash(t *testing.T) {
	f := newCtl(t, "", time.Second)
	f.eng.block = make(chan struct{})
	first := make(chan struct{})
	go func() { f.exec(code1, "Idempotency-Key", "k-crash"); close(first) }()
	f.waitRunning(1)
	crashed := f.srv
	f.crash()
	f.start()
	r := f.exec(code1, "Idempotency-Key", "k-crash")
	if r.code != 409 || r.errCode() != api.CodeInterrupted || !strings.Contains(r.raw2(), "not run again") {
		t.Fatalf("retry after crash: %d %s", r.code, r.raw)
	}
	if n := f.runs(); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
	// The crashed server's run ends (and writes into the data dir) before
	// the test's cleanup removes it.
	close(f.eng.block)
	<-first
	crashed.Close()
}

func (r *reply) raw2() string { return string(r.raw) }

// A refused keyed request leaves no record: the same key runs later.
func TestIdempotencyKeyReleasedOnRefusal(t *testing.T) {
	f := newCtl(t, "", time.Second)
	f.req(http.MethodPost, "/admin/freeze", keyAdmin, "")
	if r := f.exec(code1, "Idempotency-Key", "k-r"); r.code != 503 || r.errCode() != api.CodeFrozen {
		t.Fatalf("frozen: %d %s", r.code, r.raw)
	}
	f.req(http.MethodPost, "/admin/unfreeze", keyAdmin, "")
	if r := f.exec(code1, "Idempotency-Key", "k-r"); r.code != 200 || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("after unfreeze: %d %s", r.code, r.raw)
	}
}

func (f *ctlFixture) getExec(id, key string) *reply {
	return f.req(http.MethodGet, "/exec/"+id, key, "")
}

func TestAsyncRunGetAndCancel(t *testing.T) {
	f := newCtl(t, "", time.Second)
	f.eng.block = make(chan struct{})
	r := f.exec(`{"language":"python","code":"import time; time.sleep(60)","async":true}`)
	id, _ := r.body["id"].(string)
	if r.code != 202 || r.body["status"] != "queued" || r.header.Get("Location") != "/exec/"+id {
		t.Fatalf("async: %d %s %v", r.code, r.raw, r.header)
	}
	f.waitRunning(1)
	if g := f.getExec(id, keyAgent); g.code != 200 || g.body["status"] != "running" || g.body["started_at"] == nil {
		t.Fatalf("GET while running: %d %s", g.code, g.raw)
	}
	if g := f.getExec(id, keyOther); g.code != 404 {
		t.Fatalf("another tenant sees it: %d %s", g.code, g.raw)
	}
	if d := f.req(http.MethodDelete, "/exec/"+id, keyOther, ""); d.code != 404 || f.runs() != 1 {
		t.Fatalf("another tenant's DELETE: %d %s", d.code, d.raw)
	}
	d := f.req(http.MethodDelete, "/exec/"+id, keyAgent, "")
	res, _ := d.body["result"].(map[string]any)
	if d.code != 200 || d.body["status"] != "killed" || res == nil || res["id"] != id || !strings.Contains(res["message"].(string), "DELETE /exec/") {
		t.Fatalf("DELETE: %d %s", d.code, d.raw)
	}
	if d2 := f.req(http.MethodDelete, "/exec/"+id, keyAgent, ""); d2.code != 200 || d2.body["status"] != "killed" {
		t.Fatalf("second DELETE: %d %s", d2.code, d2.raw)
	}
	// The admin sees every tenant's.
	if g := f.getExec(id, keyAdmin); g.code != 200 || g.body["status"] != "killed" {
		t.Fatalf("GET as admin: %d %s", g.code, g.raw)
	}
	if g := f.getExec("ex_nope", keyAgent); g.code != 404 || g.errCode() != api.CodeNotFound {
		t.Fatalf("unknown id: %d %s", g.code, g.raw)
	}
}

func TestAsyncResultAndRestart(t *testing.T) {
	f := newCtl(t, "", time.Second)
	r := f.exec(`{"language":"python","code":"print(1)","async":true}`)
	id := r.body["id"].(string)
	var g *reply
	for i := 0; i < 500; i++ {
		if g = f.getExec(id, keyAgent); g.body["status"] == "ok" {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	res, _ := g.body["result"].(map[string]any)
	if g.body["status"] != "ok" || res["stdout"] != "1\n" || g.body["finished_at"] == nil {
		t.Fatalf("GET: %s", g.raw)
	}
	// A run in flight at a crash is interrupted after the restart.
	f.eng.block = make(chan struct{})
	r = f.exec(`{"language":"python","code":"print(2)","async":true}`)
	id2 := r.body["id"].(string)
	f.waitRunning(1)
	crashed := f.srv
	f.crash()
	f.start()
	if g := f.getExec(id2, keyAgent); g.body["status"] != "interrupted" || !strings.Contains(g.raw2(), "not run again") {
		t.Fatalf("after crash: %s", g.raw)
	}
	if g := f.getExec(id, keyAgent); g.body["status"] != "ok" {
		t.Fatalf("finished one after crash: %s", g.raw)
	}
	// The crashed server's run ends before cleanup removes the data dir.
	close(f.eng.block)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	crashed.WaitRuns(ctx)
	crashed.Close()
}

// A keyed async exec: the retry gets the same 202 and id.
func TestAsyncIdempotent(t *testing.T) {
	f := newCtl(t, "", time.Second)
	body := `{"language":"python","code":"print(1)","async":true}`
	a := f.exec(body, "Idempotency-Key", "k-a")
	b := f.exec(body, "Idempotency-Key", "k-a")
	if a.code != 202 || b.code != 202 || a.body["id"] != b.body["id"] || b.header.Get("Idempotent-Replayed") != "true" || b.header.Get("Location") == "" {
		t.Fatalf("%d %s / %d %s %v", a.code, a.raw, b.code, b.raw, b.header)
	}
}

// Freeze during load: running and queued execs are killed, new ones are
// refused, and the freeze survives a restart.
func TestFreezeDuringLoad(t *testing.T) {
	f := newCtl(t, "", time.Second)
	f.eng.block = make(chan struct{})
	var wg sync.WaitGroup
	replies := make(chan *reply, 5)
	for i := 0; i < 5; i++ { // 2 slots: 2 run, 3 wait
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			replies <- f.exec(fmt.Sprintf(`{"language":"python","code":"print(%d)"}`, i))
		}(i)
	}
	f.waitRunning(2)
	for _, _, _ = f.srv.cfg.Gate.Stats(); ; time.Sleep(time.Millisecond) {
		if _, waiting, _ := f.srv.cfg.Gate.Stats(); waiting == 3 {
			break
		}
	}
	for _, k := range []string{keyAgent, ""} {
		if r := f.req(http.MethodPost, "/admin/freeze", k, ""); r.code != 403 && r.code != 401 {
			t.Fatalf("freeze without admin: %d", r.code)
		}
	}
	fr := f.req(http.MethodPost, "/admin/freeze", keyAdmin, `{"kill_running":true,"reason":"incident 42"}`)
	if fr.code != 200 || fr.body["frozen"] != true || fr.body["killed"].(float64) != 5 {
		t.Fatalf("freeze: %d %s", fr.code, fr.raw)
	}
	wg.Wait()
	close(replies)
	for r := range replies {
		if r.code != 200 || r.body["status"] != "killed" || !strings.Contains(r.body["message"].(string), "incident 42") {
			t.Errorf("killed exec: %d %s", r.code, r.raw)
		}
	}
	if r := f.exec(code1); r.code != 503 || r.errCode() != api.CodeFrozen || !strings.Contains(r.raw2(), "incident 42") {
		t.Fatalf("new exec while frozen: %d %s", r.code, r.raw)
	}
	f.stop()
	f.start()
	if r := f.exec(code1); r.code != 503 || r.errCode() != api.CodeFrozen {
		t.Fatalf("after restart: %d %s", r.code, r.raw)
	}
	if g := f.req(http.MethodGet, "/admin/freeze", keyAdmin, ""); g.body["frozen"] != true || g.body["by"] != "ops-1" {
		t.Fatalf("state: %s", g.raw)
	}
	f.req(http.MethodPost, "/admin/unfreeze", keyAdmin, "")
	f.stop()
	f.start()
	close(f.eng.block)
	if r := f.exec(code1); r.code != 200 {
		t.Fatalf("after unfreeze and restart: %d %s", r.code, r.raw)
	}
}

func TestRateLimitBurst(t *testing.T) {
	f := newCtl(t, "tenants:\n  acme: {exec_per_minute: 3}\n", time.Second)
	for i := 0; i < 3; i++ {
		if r := f.exec(code1); r.code != 200 {
			t.Fatalf("request %d: %d %s", i, r.code, r.raw)
		}
	}
	r := f.exec(code1)
	e, _ := r.body["error"].(map[string]any)
	if r.code != 429 || r.errCode() != api.CodeRateLimited || e["budget"] != budget.TenantExecRate || e["limit"].(float64) != 3 || r.header.Get("Retry-After") != "20" {
		t.Fatalf("4th: %d %s Retry-After %q", r.code, r.raw, r.header.Get("Retry-After"))
	}
	// Another tenant is not affected.
	if r := f.req(http.MethodPost, "/exec", keyOther, code1); r.code != 200 {
		t.Fatalf("other tenant: %d", r.code)
	}
}

func TestSessionCPUBudget(t *testing.T) {
	f := newCtl(t, "defaults:\n  session: {cpu_seconds: 1.5}\n", time.Second)
	f.eng.result.UserCPU = 1200 * time.Millisecond
	f.eng.result.Duration = 1200 * time.Millisecond
	r := f.exec(`{"language":"python","code":"while True: pass"}`, "X-Session-Id", "s-cpu")
	if r.code != 200 {
		t.Fatalf("%d %s", r.code, r.raw)
	}
	if got := f.eng.specs[0].Limits.TimeoutMS; got != 1500 {
		t.Fatalf("the run's timeout is %d ms; want it lowered to the 1500 ms the budget allows", got)
	}
	r = f.exec(`{"language":"python","code":"while True: pass"}`, "X-Session-Id", "s-cpu")
	if got := f.eng.specs[1].Limits.TimeoutMS; r.code != 200 || got != 300 {
		t.Fatalf("second run: %d, timeout %d ms, want 300", r.code, got)
	}
	r = f.exec(`{"language":"python","code":"print(3)"}`, "X-Session-Id", "s-cpu")
	e, _ := r.body["error"].(map[string]any)
	if r.code != 429 || r.errCode() != api.CodeBudgetExceeded || e["budget"] != budget.SessionCPU || e["used"].(float64) != 2.4 || r.header.Get("Retry-After") != "" {
		t.Fatalf("past the budget: %d %s", r.code, r.raw)
	}
	if f.runs() != 2 {
		t.Fatalf("%d runs", f.runs())
	}
	// Another session, and the usage report.
	if r := f.exec(code1, "X-Session-Id", "s-2"); r.code != 200 {
		t.Fatalf("another session: %d", r.code)
	}
	u := f.req(http.MethodGet, "/usage?session=s-cpu", keyAgent, "")
	used, _ := u.body["used"].(map[string]any)
	if u.code != 200 || used["execs"].(float64) != 2 || used["cpu_seconds"].(float64) != 2.4 {
		t.Fatalf("usage: %d %s", u.code, u.raw)
	}
	if u := f.req(http.MethodGet, "/usage?tenant=acme", keyAgent, ""); u.code != 200 || u.body["used"].(map[string]any)["execs"].(float64) != 3 {
		t.Fatalf("tenant usage: %d %s", u.code, u.raw)
	}
	if u := f.req(http.MethodGet, "/usage?tenant=acme", keyOther, ""); u.code != 403 {
		t.Fatalf("other tenant's usage: %d", u.code)
	}
	if u := f.req(http.MethodGet, "/usage?tenant=acme", keyAdmin, ""); u.code != 200 {
		t.Fatalf("admin: %d", u.code)
	}
	// Session usage survives a restart.
	f.stop()
	f.start()
	if r := f.exec(code1, "X-Session-Id", "s-cpu"); r.code != 429 {
		t.Fatalf("after restart: %d %s", r.code, r.raw)
	}
}

func TestLoopGuard(t *testing.T) {
	f := newCtl(t, "", time.Second)
	h := []string{"X-Session-Id", "loop-1"}
	for i := 0; i < 2; i++ {
		if r := f.exec(code1, h...); r.code != 200 {
			t.Fatalf("call %d: %d", i+1, r.code)
		}
	}
	r := f.exec(code1, h...)
	if r.code != 409 || r.errCode() != api.CodeLoopDetected || !strings.Contains(r.raw2(), "different approach") {
		t.Fatalf("third identical call: %d %s", r.code, r.raw)
	}
	if f.runs() != 2 {
		t.Fatalf("%d runs", f.runs())
	}
	// A changed call runs; without a session there is no guard.
	if r := f.exec(`{"language":"python","code":"print(2)"}`, h...); r.code != 200 {
		t.Fatalf("changed call: %d", r.code)
	}
	for i := 0; i < 3; i++ {
		if r := f.exec(code1); r.code != 200 {
			t.Fatalf("no session: %d", r.code)
		}
	}
	// A tenant with the guard off.
	f2 := newCtl(t, "tenants:\n  acme: {loop_repeats: 0}\n", time.Second)
	for i := 0; i < 4; i++ {
		if r := f2.exec(code1, h...); r.code != 200 {
			t.Fatalf("guard off, call %d: %d", i+1, r.code)
		}
	}
}

func TestMetricsAndTrace(t *testing.T) {
	f := newCtl(t, "", time.Second)
	f.exec(code1, "Idempotency-Key", "m", "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.exec(code1, "Idempotency-Key", "m")
	r := f.req(http.MethodGet, "/metrics", "", "")
	for _, want := range []string{
		`sandboxd_execs_total{profile="default",status="ok"} 1`,
		`sandboxd_idempotent_replays_total 1`,
		`sandboxd_exec_queue_seconds_count{profile="default"} 1`,
		`sandboxd_exec_run_seconds_bucket`,
		`sandboxd_exec_start_seconds_bucket`,
		`sandboxd_execs_running 0`,
		`sandboxd_execs_queued 0`,
		`sandboxd_http_requests_total{code="200",route="/exec"} 2`,
	} {
		if !strings.Contains(r.raw2(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	logs := f.logs.String()
	if !strings.Contains(logs, `"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"`) {
		t.Errorf("no trace id in the logs:\n%s", logs)
	}
	for _, h := range []string{"", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"} {
		if traceID(h) != "" {
			t.Errorf("traceparent %q accepted", h)
		}
	}
}

// An async exec's times are one: created_at is the same in the 202, while
// it runs and after it ended, and started_at stays once it ended (issue
// 16, item 11).
func TestAsyncTimesAreKept(t *testing.T) {
	f := newCtl(t, "", time.Second)
	f.eng.block = make(chan struct{})
	r := f.exec(`{"language":"python","code":"print(1)","async":true}`)
	id, _ := r.body["id"].(string)
	created := r.body["created_at"]
	f.waitRunning(1)
	g := f.getExec(id, keyAgent)
	started := g.body["started_at"]
	if g.body["created_at"] != created || started == nil {
		t.Fatalf("while running: %s (202: %v)", g.raw, created)
	}
	close(f.eng.block)
	for i := 0; i < 500; i++ {
		if g = f.getExec(id, keyAgent); g.body["status"] == "ok" {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if g.body["status"] != "ok" || g.body["created_at"] != created || g.body["started_at"] != started || g.body["finished_at"] == nil {
		t.Fatalf("after the end: %s (202 created_at %v, started_at %v)", g.raw, created, started)
	}
}
