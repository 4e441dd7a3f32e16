package tests

// End-to-end tests of the control plane against a real sandboxd and the
// real engine: idempotency (client drop, SIGKILL mid-run), async runs and
// cancel, the kill switch under load, rate limits, a session's CPU budget,
// the loop guard, metrics and trace ids.
//
// How the tests count executions. The sandbox has no network and no host
// mount, so the code cannot reach anything of the test's. It can, however,
// rename its own process: the code writes a marker unique to the test into
// /proc/self/comm and then keeps running for a while. Sandbox processes are
// ordinary processes of the host kernel, so the test sees that name in the
// host's /proc/<pid>/comm; a scanner polls /proc every 10 ms and records
// every distinct process that carried the marker. Each execution of the
// code is one such process (the code runs once per exec, as the launcher's
// only Python child), so the number of distinct pids is the number of times
// the code ran. The tests first require the marker to be seen (so a
// broken channel fails instead of passing), then that it was seen in
// exactly one process. This needs the engine on the same host as the tests,
// which make test does.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/internal/logbuf"
	"github.com/sandboxd/sandboxd/runner"
)

// ctlServer is a sandboxd of a test's own with an agent and an admin key,
// an optional tenants file and extra flags; restart keeps the data dir.
type ctlServer struct {
	t       *testing.T
	dataDir string
	keysDir string
	tenants string
	extra   []string
	agent   string // tenant acme
	admin   string // tenant ops
	url     string
	srv     *e2e.Server    // nil while it is not running
	log     *logbuf.Buffer // its output, over restarts
}

func newCtlServer(t *testing.T, tenants string, extra ...string) *ctlServer {
	t.Helper()
	s := &ctlServer{t: t, dataDir: t.TempDir(), keysDir: t.TempDir(), tenants: tenants, extra: extra,
		agent: newKey(), admin: newKey(), log: &logbuf.Buffer{}}
	s.launch(e2e.KeysYAML(
		e2e.Key{ID: "agent-c", Tenant: "acme", Roles: []string{"agent"}, Secret: s.agent},
		e2e.Key{ID: "admin-c", Tenant: "ops", Roles: []string{"admin"}, Secret: s.admin}))
	return s
}

// launch writes keysYAML and the tenants file, starts sandboxd and shuts it
// down when the test ends (with its log's tail when the test failed).
func (s *ctlServer) launch(keysYAML string) {
	t := s.t
	t.Helper()
	if err := os.WriteFile(filepath.Join(s.keysDir, "keys.yaml"), []byte(keysYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	if s.tenants != "" {
		if err := os.WriteFile(filepath.Join(s.keysDir, "tenants.yaml"), []byte(s.tenants), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s.start()
	t.Cleanup(func() {
		s.shutdown()
		if t.Failed() {
			t.Logf("sandboxd log:\n%s", s.log.Tail(40))
		}
	})
}

// start starts sandboxd (on a new port) and waits until /readyz answers
// 200.
func (s *ctlServer) start() {
	t := s.t
	t.Helper()
	var flags []string
	if s.tenants != "" {
		flags = append(flags, "--tenants-file", filepath.Join(s.keysDir, "tenants.yaml"))
	}
	began := time.Now()
	srv, err := e2e.Start(e2e.ServerConfig{Bin: sandboxdBin, DataDir: s.dataDir, ProfilesDir: filepath.Join(moduleRoot, "profiles"),
		KeysFile: filepath.Join(s.keysDir, "keys.yaml"), Flags: append(flags, s.extra...), Log: s.log})
	if err != nil {
		t.Fatalf("sandboxd did not start: %v\n%s", err, s.log.Tail(20))
	}
	s.srv, s.url = srv, srv.URL
	if _, _, err := srv.WaitReady(e2e.DefaultStartTimeout - time.Since(began)); err != nil {
		t.Fatalf("sandboxd did not become ready: %v\n%s", err, s.log.Tail(20))
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *ctlServer) kill() {
	if s.srv == nil {
		return
	}
	s.srv.Kill()
	s.srv = nil
}

// shutdown stops the server at the end of a test: SIGTERM, so that it
// removes its warm pool, then SIGKILL if it does not exit; it never fails
// the test by itself.
func (s *ctlServer) shutdown() {
	if s.srv == nil {
		return
	}
	_ = s.srv.Stop(e2e.ShutdownTimeout)
	s.srv = nil
}

// stop sends SIGTERM and requires a clean exit.
func (s *ctlServer) stop() {
	s.t.Helper()
	err := s.srv.Stop(e2e.ShutdownTimeout)
	s.srv = nil
	if err != nil {
		s.t.Fatalf("%v\n%s", err, s.log.Tail(20))
	}
}

type ctlReply struct {
	code   int
	header http.Header
	raw    []byte
	body   map[string]any
}

func (r *ctlReply) String() string { return fmt.Sprintf("%d %s", r.code, e2e.Clip(r.raw, 1500)) }

func (r *ctlReply) errCode() string {
	if e, ok := r.body["error"].(map[string]any); ok {
		s, _ := e["code"].(string)
		return s
	}
	return ""
}

func (r *ctlReply) errField(name string) any {
	if e, ok := r.body["error"].(map[string]any); ok {
		return e[name]
	}
	return nil
}

func (r *ctlReply) str(name string) string { s, _ := r.body[name].(string); return s }

// do sends one request with key ("" for none); body is marshalled unless
// it is []byte; headers are name, value pairs.
func (s *ctlServer) do(method, path, key string, body any, headers ...string) *ctlReply {
	s.t.Helper()
	var raw []byte
	if body != nil {
		b, ok := body.([]byte)
		if !ok {
			b, _ = json.Marshal(body)
		}
		raw = b
	}
	h := map[string]string{}
	for i := 0; i+1 < len(headers); i += 2 {
		h[headers[i]] = headers[i+1]
	}
	res, err := e2e.Client{URL: s.url, Key: key}.Do(context.Background(), e2e.Request{Method: method, Path: path, Body: raw, Header: h})
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	r := &ctlReply{code: res.Status, header: res.Header, raw: res.Body}
	_ = json.Unmarshal(r.raw, &r.body)
	return r
}

func (s *ctlServer) exec(req any, headers ...string) *ctlReply {
	s.t.Helper()
	return s.do(http.MethodPost, "/exec", s.agent, req, headers...)
}

// ---------------------------------------------------------------------------
// The side channel: processes of the host named with a marker.

// markerCode renames its process to marker, then sleeps for sleep seconds
// and prints "done".
func markerCode(marker string, sleep float64) string {
	return fmt.Sprintf("open('/proc/self/comm', 'w').write(%q)\nimport time\ntime.sleep(%g)\nprint('done')\n", marker, sleep)
}

func newMarker() string { return "sbx" + e2e.RandHex(6) } // 15 characters: the most comm holds

// procScan records the host processes that carried a marker.
type procScan struct {
	marker string
	mu     sync.Mutex
	pids   map[string]time.Time // pid/starttime -> first seen
	stop   func()               // ends the scan; idempotent
}

func scanFor(t *testing.T, marker string) *procScan {
	p := &procScan{marker: marker, pids: map[string]time.Time{}}
	p.stop = e2e.Repeat(10*time.Millisecond, p.scan)
	t.Cleanup(p.stop)
	return p
}

func (p *procScan) scan() {
	for _, pid := range e2e.HostPids() {
		id := strconv.Itoa(pid)
		b, err := os.ReadFile("/proc/" + id + "/comm")
		if err != nil || strings.TrimSpace(string(b)) != p.marker {
			continue
		}
		// Field 22 of stat, starttime, after the ")" that ends the name,
		// tells one process from a later one with the same pid. A process
		// whose stat cannot be read has just ended (it was counted while
		// it ran).
		st, err := os.ReadFile("/proc/" + id + "/stat")
		i := bytes.LastIndexByte(st, ')')
		if err != nil || i < 0 {
			continue
		}
		f := strings.Fields(string(st[i+1:]))
		if len(f) <= 19 {
			continue
		}
		id += "/" + f[19]
		p.mu.Lock()
		if _, ok := p.pids[id]; !ok {
			p.pids[id] = time.Now()
		}
		p.mu.Unlock()
	}
}

// count returns how many distinct processes carried the marker so far.
func (p *procScan) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pids)
}

// waitSeen waits until the marker has been seen in a process.
func (p *procScan) waitSeen(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for p.count() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no host process was named %s within %v: the code did not run, or the engine's processes are not visible in this host's /proc (the tests need the engine on this host)", p.marker, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ranOnce requires that exactly one process carried the marker.
func (p *procScan) ranOnce(t *testing.T) {
	t.Helper()
	if n := p.count(); n != 1 {
		p.mu.Lock()
		defer p.mu.Unlock()
		t.Fatalf("the code ran in %d processes (%v), want exactly 1", n, p.pids)
	}
}

// sendAndDrop writes a POST /exec with an Idempotency-Key on a raw TCP
// connection and returns the connection, unread; closing it drops the
// client without reading any answer.
func sendAndDrop(t *testing.T, s *ctlServer, key, idem string, body []byte) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(conn)
	fmt.Fprintf(w, "POST /exec HTTP/1.1\r\nHost: sandboxd\r\nAuthorization: Bearer %s\r\nIdempotency-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", key, idem, len(body))
	w.Write(body)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return conn
}

// ---------------------------------------------------------------------------

// A client sends a keyed exec and drops the connection while the code
// runs; its retry with the same key waits for and gets the real result,
// and the code ran exactly once.
func TestIdempotencyClientDropsConnection(t *testing.T) {
	t.Parallel()
	s := newCtlServer(t, "")
	marker := newMarker()
	scan := scanFor(t, marker)
	body, _ := json.Marshal(e2e.Py(markerCode(marker, 3)))
	conn := sendAndDrop(t, s, s.agent, "drop-1", body)
	scan.waitSeen(t, 30*time.Second)
	conn.Close() // the client goes away mid-run
	start := time.Now()
	r := s.exec(json.RawMessage(body), "Idempotency-Key", "drop-1")
	if r.code != 200 || r.str("status") != "ok" || r.str("stdout") != "done\n" || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %s (replayed %q)", r, r.header.Get("Idempotent-Replayed"))
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("the retry waited %v", waited)
	}
	// Once more, after it is done: the same answer, byte for byte.
	r2 := s.exec(json.RawMessage(body), "Idempotency-Key", "drop-1")
	if r2.code != 200 || !bytes.Equal(r.raw, r2.raw) {
		t.Fatalf("second retry differs:\n%s\n%s", r, r2)
	}
	time.Sleep(500 * time.Millisecond)
	scan.ranOnce(t)
}

// sandboxd is killed with SIGKILL while a keyed exec runs, restarted over
// the same data dir, and the client retries: the retry is told INTERRUPTED,
// the code does not run again, and the killed run's container is gone.
func TestIdempotencySIGKILLMidRun(t *testing.T) {
	t.Parallel()
	s := newCtlServer(t, "")
	marker := newMarker()
	scan := scanFor(t, marker)
	body, _ := json.Marshal(e2e.Py(markerCode(marker, 30)))
	conn := sendAndDrop(t, s, s.agent, "kill-1", body)
	defer conn.Close()
	// And an async exec, in flight at the same time.
	marker2 := newMarker()
	scan2 := scanFor(t, marker2)
	a := s.exec(map[string]any{"language": "python", "code": markerCode(marker2, 30), "async": true})
	if a.code != 202 {
		t.Fatalf("async exec: %s", a)
	}
	scan.waitSeen(t, 30*time.Second)
	scan2.waitSeen(t, 30*time.Second)
	instance := runner.InstanceID(s.dataDir)
	before := managedByInstance(t, instance)
	s.kill()
	s.start() // removes the killed run's container before serving
	for _, now := range managedByInstance(t, instance) {
		for _, old := range before {
			if now.ID == old.ID {
				t.Errorf("container %s of the killed process survived the restart", old.ID[:12])
			}
		}
	}
	for i := 0; i < 2; i++ {
		r := s.exec(json.RawMessage(body), "Idempotency-Key", "kill-1")
		if r.code != 409 || r.errCode() != "INTERRUPTED" || !strings.Contains(string(r.raw), "not run again") {
			t.Fatalf("retry %d after the restart: %s", i+1, r)
		}
	}
	// The same key with another body is still a mismatch.
	other, _ := json.Marshal(e2e.Py("print(2)"))
	if r := s.exec(json.RawMessage(other), "Idempotency-Key", "kill-1"); r.code != 422 || r.errCode() != "IDEMPOTENCY_MISMATCH" {
		t.Fatalf("other body: %s", r)
	}
	if g := s.do(http.MethodGet, "/exec/"+a.str("id"), s.agent, nil); g.code != 200 || g.str("status") != "interrupted" {
		t.Fatalf("async exec after the restart: %s", g)
	}
	time.Sleep(time.Second)
	scan.ranOnce(t)
	scan2.ranOnce(t)
	// No process of the killed run is left: the restart removed its
	// container, and with it the code.
	if alive := scan.alive(); alive > 0 {
		t.Fatalf("%d processes named %s still run after the restart", alive, marker)
	}
	// A new key runs normally.
	if r := s.exec(e2e.Py("print(3)"), "Idempotency-Key", "kill-2"); r.code != 200 || r.str("stdout") != "3\n" {
		t.Fatalf("new key: %s", r)
	}
}

// alive counts the processes that carry the marker, waiting up to 5 s for
// them to go.
func (p *procScan) alive() int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := 0
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if b, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && strings.TrimSpace(string(b)) == p.marker {
				n++
			}
		}
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Ten concurrent requests with one key against the real engine: the code
// runs once and all ten get its answer.
func TestIdempotencyConcurrentRetries(t *testing.T) {
	t.Parallel()
	s := newCtlServer(t, "")
	marker := newMarker()
	scan := scanFor(t, marker)
	req := e2e.Py(markerCode(marker, 2))
	var wg sync.WaitGroup
	replies := make([]*ctlReply, 10)
	for i := range replies {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			replies[i] = s.exec(req, "Idempotency-Key", "conc-1")
		}(i)
	}
	wg.Wait()
	replayed := 0
	for _, r := range replies {
		if r.code != 200 || r.str("stdout") != "done\n" || !bytes.Equal(r.raw, replies[0].raw) {
			t.Fatalf("reply %s differs from %s", r, replies[0])
		}
		if r.header.Get("Idempotent-Replayed") == "true" {
			replayed++
		}
	}
	if replayed != 9 {
		t.Errorf("%d replies replayed, want 9", replayed)
	}
	scan.ranOnce(t)
	// The same key with a changed body is refused and runs nothing.
	changed := req
	changed.Stdin = "x"
	if r := s.exec(changed, "Idempotency-Key", "conc-1"); r.code != 422 || r.errCode() != "IDEMPOTENCY_MISMATCH" {
		t.Fatalf("changed body: %s", r)
	}
	scan.ranOnce(t)
}

// An async exec is cancelled while it runs: DELETE answers killed at once,
// the container goes, the process is gone, and a second DELETE changes
// nothing.
func TestAsyncCancelDuringRun(t *testing.T) {
	t.Parallel()
	s := newCtlServer(t, "", "--pool-size", "0") // the exec id is then the container's label
	marker := newMarker()
	scan := scanFor(t, marker)
	r := s.exec(map[string]any{"language": "python", "code": markerCode(marker, 60), "async": true})
	id := r.str("id")
	if r.code != 202 || r.str("status") != "queued" || r.header.Get("Location") != "/exec/"+id {
		t.Fatalf("async exec: %s", r)
	}
	scan.waitSeen(t, 30*time.Second)
	if g := s.do(http.MethodGet, "/exec/"+id, s.agent, nil); g.code != 200 || g.str("status") != "running" {
		t.Fatalf("GET while running: %s", g)
	}
	start := time.Now()
	d := s.do(http.MethodDelete, "/exec/"+id, s.agent, nil)
	res, _ := d.body["result"].(map[string]any)
	if d.code != 200 || d.str("status") != "killed" || res == nil || !strings.Contains(fmt.Sprint(res["message"]), "DELETE /exec/") {
		t.Fatalf("DELETE: %s", d)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("DELETE took %v", took)
	}
	if n := scan.alive(); n != 0 {
		t.Errorf("the cancelled code still runs (%d processes)", n)
	}
	waitExecGoneIn(t, runner.InstanceID(s.dataDir), id)
	if d2 := s.do(http.MethodDelete, "/exec/"+id, s.agent, nil); d2.code != 200 || d2.str("status") != "killed" {
		t.Fatalf("second DELETE: %s", d2)
	}
	if g := s.do(http.MethodGet, "/exec/"+id, s.agent, nil); g.code != 200 || g.str("status") != "killed" || g.body["finished_at"] == nil {
		t.Fatalf("GET after: %s", g)
	}
	// An async exec that finishes: its result is there for GET.
	r = s.exec(map[string]any{"language": "python", "code": "print(6*7)", "async": true})
	id2 := r.str("id")
	deadline := time.Now().Add(30 * time.Second)
	for {
		g := s.do(http.MethodGet, "/exec/"+id2, s.agent, nil)
		if res, ok := g.body["result"].(map[string]any); ok {
			if g.str("status") != "ok" || res["stdout"] != "42\n" {
				t.Fatalf("finished async exec: %s", g)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("async exec did not finish: %s", g)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitExecGoneIn(t *testing.T, instance, id string) {
	t.Helper()
	deadline := time.Now().Add(e2e.RemovalTimeout)
	for {
		list, err := dockerCli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(
			filters.Arg("label", "sandboxd.instance="+instance), filters.Arg("label", "sandboxd.exec-id="+id))})
		if err == nil && len(list) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container of exec %s still exists %v later", id, e2e.RemovalTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Freeze during load: every queued and running exec is killed, new ones
// answer 503 FROZEN, the freeze survives a restart, and unfreeze lifts it.
func TestFreezeDuringLoad(t *testing.T) {
	t.Parallel()
	s := newCtlServer(t, "", "--max-runs", "2", "--queue", "8")
	marker := newMarker()
	scan := scanFor(t, marker)
	replies := make(chan *ctlReply, 5)
	for i := 0; i < 4; i++ {
		go func() { replies <- s.exec(e2e.Py(markerCode(marker, 60))) }()
	}
	a := s.exec(map[string]any{"language": "python", "code": markerCode(marker, 60), "async": true})
	scan.waitSeen(t, 30*time.Second)
	time.Sleep(300 * time.Millisecond) // let the other requests queue
	if r := s.do(http.MethodPost, "/admin/freeze", s.agent, map[string]any{"kill_running": true}); r.code != 403 {
		t.Fatalf("freeze with an agent key: %s", r)
	}
	start := time.Now()
	fr := s.do(http.MethodPost, "/admin/freeze", s.admin, map[string]any{"kill_running": true, "reason": "e2e drill"})
	if fr.code != 200 || fr.body["frozen"] != true || fr.body["killed"] != float64(5) {
		t.Fatalf("freeze: %s", fr)
	}
	for i := 0; i < 4; i++ {
		select {
		case r := <-replies:
			if r.code != 200 || r.str("status") != "killed" || !strings.Contains(r.str("message"), "e2e drill") {
				t.Errorf("exec under freeze: %s", r)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("an exec did not end after the freeze")
		}
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("freeze with kill_running took %v", took)
	}
	if g := s.do(http.MethodGet, "/exec/"+a.str("id"), s.agent, nil); g.str("status") != "killed" {
		t.Errorf("async exec after freeze: %s", g)
	}
	if n := scan.alive(); n != 0 {
		t.Errorf("%d killed processes still run", n)
	}
	for _, req := range []any{e2e.Py("print(1)"), map[string]any{"language": "python", "code": "print(1)", "async": true}} {
		if r := s.exec(req); r.code != 503 || r.errCode() != "FROZEN" || !strings.Contains(string(r.raw), "e2e drill") {
			t.Fatalf("exec while frozen: %s", r)
		}
	}
	s.stop()
	s.start()
	if r := s.exec(e2e.Py("print(1)")); r.code != 503 || r.errCode() != "FROZEN" {
		t.Fatalf("after restart: %s", r)
	}
	if r := s.do(http.MethodPost, "/admin/unfreeze", s.admin, nil); r.code != 200 || r.body["frozen"] != false {
		t.Fatalf("unfreeze: %s", r)
	}
	if r := s.exec(e2e.Py("print(1)")); r.code != 200 || r.str("stdout") != "1\n" {
		t.Fatalf("after unfreeze: %s", r)
	}
}

// A burst over the tenant's rate: exactly the bucket's worth passes.
func TestRateLimitBurst(t *testing.T) {
	t.Parallel()
	s := newCtlServer(t, "tenants:\n  acme: {exec_per_minute: 5}\n")
	var wg sync.WaitGroup
	replies := make([]*ctlReply, 8)
	for i := range replies {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			replies[i] = s.exec(e2e.Py("print(1)"))
		}(i)
	}
	wg.Wait()
	ok, limited := 0, 0
	for _, r := range replies {
		switch {
		case r.code == 200:
			ok++
		case r.code == 429 && r.errCode() == "RATE_LIMITED":
			limited++
			if r.errField("budget") != "tenant.exec_per_minute" || r.errField("limit") != float64(5) || r.header.Get("Retry-After") == "" {
				t.Errorf("refusal does not name the budget, limit and Retry-After: %s %v", r, r.header)
			}
		default:
			t.Errorf("unexpected: %s", r)
		}
	}
	if ok != 5 || limited != 3 {
		t.Fatalf("%d passed and %d were rate limited, want 5 and 3", ok, limited)
	}
	u := s.do(http.MethodGet, "/usage?tenant=acme", s.agent, nil)
	if u.code != 200 || !strings.Contains(string(u.raw), `"tenant.exec_per_minute"`) {
		t.Fatalf("usage: %s", u)
	}
}

// A session runs past its CPU budget: each run is cut to what the budget
// has left, and once it is spent the next call is refused naming it.
func TestSessionCPUBudget(t *testing.T) {
	t.Parallel()
	s := newCtlServer(t, "defaults:\n  session: {cpu_seconds: 1.5}\n")
	h := []string{"X-Session-Id", "budget-1"}
	r := s.exec(e2e.Py("while True:\n    pass\n"), h...)
	if r.code != 200 || r.str("status") != "timeout" || !strings.Contains(r.str("message"), "session.cpu_seconds") {
		t.Fatalf("spinning run: %s", r)
	}
	// The run's own time (the request's also holds a cold sandbox's start,
	// seconds on a loaded engine).
	if ms, _ := r.body["duration_ms"].(float64); ms > 1500+1000 {
		t.Errorf("the run lasted %v ms; the budget allows 1.5 s", ms)
	}
	lim, _ := r.body["limits"].(map[string]any)
	if lim["timeout_ms"] != float64(1500) {
		t.Errorf("effective timeout %v, want 1500", lim["timeout_ms"])
	}
	// Keep spinning. On a loaded machine the code gets less than its CPU,
	// so more runs fit; each differs (a comment), or the loop guard would
	// stop the third. Every run's limit is what the budget has left.
	cpuMS := func(r *ctlReply) float64 {
		u, _ := r.body["usage"].(map[string]any)
		return u["user_cpu_ms"].(float64) + u["sys_cpu_ms"].(float64)
	}
	used := cpuMS(r)
	runs := 1
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r = s.exec(e2e.Py(fmt.Sprintf("while True:\n    pass\n# run %d\n", runs+1)), h...)
		if r.code != 200 {
			break
		}
		runs++
		lim, _ := r.body["limits"].(map[string]any)
		if left := 1500 - used; lim["timeout_ms"].(float64) > left+1 {
			t.Fatalf("run %d got %v ms with %v ms of the budget left", runs, lim["timeout_ms"], left)
		}
		used += cpuMS(r)
		if time.Now().After(deadline) {
			t.Fatalf("still running after %d runs using %.0f ms of a 1500 ms budget: %s", runs, used, r)
		}
	}
	if r.code != 429 || r.errCode() != "BUDGET_EXCEEDED" || r.errField("budget") != "session.cpu_seconds" || r.errField("limit") != float64(1.5) || r.header.Get("Retry-After") != "" {
		t.Fatalf("after %d runs: %s", runs, r)
	}
	if used < 1500-100 || used > 1500+600 {
		t.Errorf("the session's runs used %.0f ms of CPU against a 1500 ms budget", used)
	}
	u := s.do(http.MethodGet, "/usage?session=budget-1", s.agent, nil)
	usage, _ := u.body["used"].(map[string]any)
	if u.code != 200 || usage["execs"] != float64(runs) || int(usage["cpu_seconds"].(float64)*1000+0.5) != int(used) {
		t.Fatalf("usage after %d runs using %.0f ms: %s", runs, used, u)
	}
	// Another session of the tenant is unaffected.
	if r := s.exec(e2e.Py("print(1)"), "X-Session-Id", "budget-2"); r.code != 200 {
		t.Fatalf("another session: %s", r)
	}
}

// Three identical calls in a row with the same outcome: the third is
// refused.
func TestLoopGuard(t *testing.T) {
	t.Parallel()
	s := newCtlServer(t, "")
	h := []string{"X-Session-Id", "loop-e2e"}
	req := e2e.Py("import sys\nprint('no such file', file=sys.stderr)\nsys.exit(1)")
	for i := 0; i < 2; i++ {
		if r := s.exec(req, h...); r.code != 200 || r.str("status") != "error" {
			t.Fatalf("call %d: %s", i+1, r)
		}
	}
	r := s.exec(req, h...)
	if r.code != 409 || r.errCode() != "LOOP_DETECTED" {
		t.Fatalf("third identical call: %s", r)
	}
	if r := s.exec(e2e.Py("print('a new approach')"), h...); r.code != 200 {
		t.Fatalf("a changed call: %s", r)
	}
}

// GET /metrics carries the sandboxd_ metrics; a traceparent's trace id is
// in the request's log lines.
func TestMetricsAndTraceparent(t *testing.T) {
	t.Parallel()
	s := newCtlServer(t, "")
	trace := e2e.RandHex(16)
	s.exec(e2e.Py("print(1)"), "traceparent", "00-"+trace+"-00f067aa0ba902b7-01", "Idempotency-Key", "m-1")
	s.exec(e2e.Py("print(1)"), "Idempotency-Key", "m-1")
	r := s.do(http.MethodGet, "/metrics", "", nil)
	for _, want := range []string{
		`sandboxd_execs_total{profile="default",status="ok"} 1`,
		`sandboxd_idempotent_replays_total 1`,
		`sandboxd_exec_queue_seconds_bucket{profile="default"`,
		`sandboxd_exec_start_seconds_bucket{profile="default"`,
		`sandboxd_exec_run_seconds_bucket{profile="default"`,
		`sandboxd_execs_running `, `sandboxd_execs_queued `,
		`sandboxd_cell_hosts_busy{profile="default"} `, `sandboxd_cell_hosts_idle{profile="default"} `,
	} {
		if !strings.Contains(string(r.raw), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if !strings.Contains(s.log.String(), `"trace_id":"`+trace+`"`) {
		t.Errorf("the trace id is not in the log:\n%s", s.log.Tail(10))
	}
}
