package tests

// End-to-end tests of sessions (POST /sessions: one Python interpreter kept
// alive across calls) against the real sandboxd and the real engine: state
// across calls, rich results (a figure decoded as PNG, a DataFrame as a
// table), timeouts (interrupt; restart with state_lost), output that
// imitates the launcher's frames, tenant and key isolation, idle expiry,
// OOM, the kill switch, the tenant cap, orphans after a crash, the audit
// trail, and the memory of 20 open sessions. The escape suite runs its
// attacks inside sessions too (tests/security/sessions_test.go).

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/internal/logbuf"
)

type sessionInfo struct {
	ID           string         `json:"id"`
	State        string         `json:"state"`
	SandboxID    string         `json:"sandbox_id"`
	IdleTimeoutS int64          `json:"idle_timeout_s"`
	MaxLifetimeS int64          `json:"max_lifetime_s"`
	EndReason    string         `json:"end_reason"`
	Limits       e2e.ExecLimits `json:"limits"`
	Profile      struct {
		Name string `json:"name"`
	} `json:"profile"`
	ExpiresAt time.Time `json:"expires_at"`
	Usage     struct {
		Calls       int64 `json:"calls"`
		CPUMS       int64 `json:"cpu_ms"`
		WallMS      int64 `json:"wall_ms"`
		MemoryBytes int64 `json:"memory_bytes"`
		Restarts    int64 `json:"restarts"`
	} `json:"usage"`
}

type richResult struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	Data      string `json:"data"`
	Width     int    `json:"width"`
	Height    int    `json:"height"`
	Truncated bool   `json:"truncated"`
	Omitted   string `json:"omitted"`
}

type sessionExecResponse struct {
	e2e.ExecResponse
	Results   []richResult `json:"results"`
	Exception *struct {
		Type      string `json:"type"`
		Message   string `json:"message"`
		Traceback string `json:"traceback"`
	} `json:"exception"`
	StateLost    bool   `json:"state_lost"`
	SessionID    string `json:"session_id"`
	SessionState string `json:"session_state"`
}

// sessClient talks to one sandboxd with one key.
type sessClient struct {
	t    testing.TB
	base func() string // the server's URL, which a restart changes
	key  string
	log  *logbuf.Buffer
}

var sessReqs atomic.Int64

func newSessClient(t *testing.T) *sessClient {
	return &sessClient{t: t, base: func() string { return srv.URL }, key: agentKey, log: srv.Log}
}

func (c *sessClient) with(key string) *sessClient {
	d := *c
	d.key = key
	return &d
}

// do sends one request; body is marshalled unless it is a string.
func (c *sessClient) do(method, path string, body any) (int, []byte) {
	c.t.Helper()
	code, raw, err := c.try(method, path, body)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	return code, raw
}

func (c *sessClient) try(method, path string, body any) (int, []byte, error) {
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	default:
		raw, _ = json.Marshal(b)
	}
	reqID := fmt.Sprintf("e2e-sess-%d", sessReqs.Add(1))
	res, err := e2e.Client{URL: c.base(), Key: c.key}.Do(context.Background(), e2e.Request{Method: method, Path: path, Body: raw, ID: reqID})
	if res == nil || res.Status == 0 {
		return 0, nil, err
	}
	if c.t.Failed() {
		c.t.Logf("sandboxd log of %s:\n%s", reqID, e2e.Grep(c.log.String(), 10, reqID))
	}
	return res.Status, res.Body, err
}

func (c *sessClient) create(body string) *sessionInfo {
	c.t.Helper()
	code, raw := c.do("POST", "/sessions", body)
	if code != http.StatusCreated {
		c.t.Fatalf("POST /sessions %s: %d %s", body, code, raw)
	}
	var s sessionInfo
	if err := json.Unmarshal(raw, &s); err != nil || s.ID == "" || s.State != "ready" || s.SandboxID == "" {
		c.t.Fatalf("POST /sessions: %v %s", err, raw)
	}
	// Ended anyway, or the server gone: nothing to check.
	c.t.Cleanup(func() { _, _, _ = c.try("DELETE", "/sessions/"+s.ID, nil) })
	return &s
}

// waitEnded polls session id until it has ended, for up to timeout, and
// returns it; a session still going then fails the test with notEnded.
func (c *sessClient) waitEnded(id string, timeout time.Duration, notEnded string) *sessionInfo {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if s := c.get(id); s.State == "ended" {
			return s
		}
		if time.Now().After(deadline) {
			c.t.Fatal(notEnded)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *sessClient) get(id string) *sessionInfo {
	c.t.Helper()
	code, raw := c.do("GET", "/sessions/"+id, nil)
	if code != http.StatusOK {
		c.t.Fatalf("GET /sessions/%s: %d %s", id, code, raw)
	}
	var s sessionInfo
	if err := json.Unmarshal(raw, &s); err != nil {
		c.t.Fatal(err)
	}
	return &s
}

// exec runs code in session id and requires a 200.
func (c *sessClient) exec(id, code string, extra ...any) *sessionExecResponse {
	c.t.Helper()
	body := map[string]any{"code": code}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i].(string)] = extra[i+1]
	}
	status, raw := c.do("POST", "/sessions/"+id+"/exec", body)
	if status != http.StatusOK {
		c.t.Fatalf("POST /sessions/%s/exec %q: %d %s", id, code, status, e2e.Clip(raw, 2000))
	}
	var r sessionExecResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		c.t.Fatalf("exec response: %v %s", err, e2e.Clip(raw, 2000))
	}
	if r.SessionID != id || r.ID == "" || !strings.HasPrefix(r.ID, "ex_") {
		c.t.Fatalf("exec response names session %q, call %q: %s", r.SessionID, r.ID, e2e.Clip(raw, 1000))
	}
	return &r
}

func (r *sessionExecResponse) repr() string {
	for _, x := range r.Results {
		if x.Type == "repr" {
			return x.Text
		}
	}
	return ""
}

// sandboxContainer finds the running container of a session sandbox.
func sandboxContainer(t *testing.T, sandboxID string) (container.InspectResponse, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := dockerCli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range list {
		if ct.Labels["sandboxd.exec-id"] == sandboxID {
			info, err := dockerCli.ContainerInspect(ctx, ct.ID)
			if err == nil {
				return info, true
			}
		}
	}
	return container.InspectResponse{}, false
}

// waitSandboxGone requires the session's container to disappear.
func waitSandboxGone(t *testing.T, sandboxID string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if _, ok := sandboxContainer(t, sandboxID); !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container of session sandbox %s still exists %v later", sandboxID, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestSessionStatePersists(t *testing.T) {
	c := newSessClient(t)
	s := c.create(`{"limits":{"memory_mb":128}}`)
	// The session's container has the lockdown of an exec of its profile.
	info, ok := sandboxContainer(t, s.SandboxID)
	if !ok {
		t.Fatalf("no container labelled sandboxd.exec-id=%s", s.SandboxID)
	}
	hc := info.HostConfig
	switch {
	case !hc.ReadonlyRootfs, hc.NetworkMode != "none", !info.Config.NetworkDisabled, len(hc.CapDrop) != 1 || hc.CapDrop[0] != "ALL",
		info.Config.User != "65534:65534", hc.Memory != 128<<20, hc.PidsLimit == nil || *hc.PidsLimit != defPids+pidsOverhead,
		!strings.Contains(strings.Join(hc.SecurityOpt, " "), "no-new-privileges"), info.Config.Labels["sandboxd.managed"] != "true",
		instanceLabel != "" && info.Config.Labels["sandboxd.instance"] != instanceLabel:
		t.Errorf("session container lockdown: user %q readonly %v network %q caps %v memory %d pids %v security %v labels %v",
			info.Config.User, hc.ReadonlyRootfs, hc.NetworkMode, hc.CapDrop, hc.Memory, hc.PidsLimit, hc.SecurityOpt, info.Config.Labels)
	}

	r := c.exec(s.ID, "import math\nx = 41\nopen('out/first.txt', 'w').write('one')\nprint('hello')\nx + 1")
	if r.Status != "ok" || r.Stdout != "hello\n" || r.repr() != "42" || r.StateLost || r.SessionState != "ready" {
		t.Fatalf("first call: %+v", r)
	}
	if f := r.File("first.txt"); f == nil || string(unb64(t, f.Content)) != "one" {
		t.Fatalf("first call's file in out/: %+v", r.Files)
	}
	// Globals, imports and files persist; only new or changed out/ files
	// come back.
	r = c.exec(s.ID, "import sys\nprint(open('out/first.txt').read(), file=sys.stderr)\n(x, math.sqrt(16), sys.stdin.read())", "stdin", "some input")
	if r.Status != "ok" || r.Stderr != "one\n" || r.repr() != "(41, 4.0, 'some input')" || len(r.Files) != 0 {
		t.Fatalf("second call: %+v", r)
	}
	// An exception is status error with the traceback; the session stays.
	r = c.exec(s.ID, "def f():\n    raise ValueError('boom')\nf()")
	if r.Status != "error" || r.Exception == nil || r.Exception.Type != "ValueError" || r.Exception.Message != "boom" ||
		!strings.Contains(r.Stderr, "ValueError: boom") || !strings.Contains(r.Stderr, "line 2, in f") || strings.Contains(r.Stderr, "kernel") {
		t.Fatalf("exception: %+v %+v", r, r.Exception)
	}
	// Files in and out.
	code, raw := c.do("POST", "/sessions/"+s.ID+"/files", map[string]any{"files": []map[string]string{{"path": "data/in.csv", "content": b64("a,b\n1,2\n")}}})
	if code != 200 || !strings.Contains(string(raw), `"size":8`) {
		t.Fatalf("POST files: %d %s", code, raw)
	}
	r = c.exec(s.ID, "import csv\nrows = list(csv.reader(open('data/in.csv')))\nopen('out/sum.txt','w').write(str(sum(int(v) for v in rows[1])))\nrows")
	if r.Status != "ok" || r.repr() != "[['a', 'b'], ['1', '2']]" {
		t.Fatalf("uploaded file: %+v", r)
	}
	code, raw = c.do("GET", "/sessions/"+s.ID+"/files/out%2Fsum.txt", nil)
	var f e2e.OutFile
	if code != 200 || json.Unmarshal(raw, &f) != nil || string(unb64(t, f.Content)) != "3" {
		t.Fatalf("GET file: %d %s", code, raw)
	}
	if code, raw := c.do("GET", "/sessions/"+s.ID+"/files/data/nope.csv", nil); code != 404 {
		t.Fatalf("GET missing file: %d %s", code, raw)
	}
	c.exec(s.ID, "import os\nos.symlink('/etc/passwd', 'link')")
	if code, raw := c.do("GET", "/sessions/"+s.ID+"/files/link", nil); code != 422 || !strings.Contains(string(raw), "FILE_UNAVAILABLE") {
		t.Fatalf("GET a symbolic link: %d %s", code, raw)
	}
	if code, raw := c.do("POST", "/sessions/"+s.ID+"/files", map[string]any{"files": []map[string]string{{"path": "link", "content": b64("x")}}}); code != 422 {
		t.Fatalf("upload through a symbolic link: %d %s", code, raw)
	}

	g := c.get(s.ID)
	if g.State != "ready" || g.Usage.Calls != 5 || g.Usage.MemoryBytes <= 0 || g.Usage.MemoryBytes > 128<<20 || g.IdleTimeoutS != 600 || g.MaxLifetimeS != 3600 || time.Until(g.ExpiresAt) < 9*time.Minute {
		t.Fatalf("GET: %+v", g)
	}
	// The forensics trail: one exec record per call, under the session.
	ac := c.with(adminKey)
	code, raw = ac.do("GET", "/audit?kind=exec&session="+s.ID, nil)
	var recs struct {
		Records []struct {
			Kind    string            `json:"kind"`
			Session string            `json:"session"`
			Subject string            `json:"subject"`
			Detail  map[string]string `json:"detail"`
			Status  string            `json:"status"`
		} `json:"records"`
	}
	if code != 200 || json.Unmarshal(raw, &recs) != nil {
		t.Fatalf("GET /audit: %d %s", code, raw)
	}
	n := 0
	for _, rec := range recs.Records {
		if rec.Kind == "exec" && rec.Detail["session_id"] == s.ID && rec.Detail["sandbox_id"] == s.SandboxID && strings.HasPrefix(rec.Subject, "ex_") {
			n++
		}
	}
	if n != 5 {
		t.Fatalf("%d audit records for the session's 5 calls: %s", n, e2e.Clip(raw, 3000))
	}

	code, raw = c.do("DELETE", "/sessions/"+s.ID, nil)
	if code != 200 || !strings.Contains(string(raw), `"state":"ended"`) {
		t.Fatalf("DELETE: %d %s", code, raw)
	}
	waitSandboxGone(t, s.SandboxID, e2e.RemovalTimeout)
	if code, raw := c.do("POST", "/sessions/"+s.ID+"/exec", map[string]any{"code": "x"}); code != 409 || !strings.Contains(string(raw), "SESSION_ENDED") {
		t.Fatalf("a call after DELETE: %d %s", code, raw)
	}
}

func TestSessionFigureAndTable(t *testing.T) {
	c := newSessClient(t)
	s := c.create(`{"profile":"data"}`)
	r := c.exec(s.ID, "import matplotlib.pyplot as plt\nimport pandas as pd\nplt.plot([1, 4, 9])\nplt.title('squares')\n"+
		"fig2, ax = plt.subplots(figsize=(2, 1))\nax.bar(['a', 'b'], [1, 2])\npd.DataFrame({'n': [1, 2, 3], 'sq': [1, 4, 9]})")
	if r.Status != "ok" {
		t.Fatalf("figure call: %+v", r)
	}
	var table string
	var pngs [][]byte
	for _, x := range r.Results {
		switch x.Type {
		case "table":
			table = x.Text
		case "image/png":
			if x.Omitted != "" {
				t.Fatalf("figure omitted: %s", x.Omitted)
			}
			pngs = append(pngs, unb64(t, x.Data))
			img, err := png.Decode(bytes.NewReader(pngs[len(pngs)-1]))
			if err != nil {
				t.Fatalf("the figure does not decode as PNG: %v", err)
			}
			if b := img.Bounds(); b.Dx() != x.Width || b.Dy() != x.Height || b.Dx() < 100 || b.Dy() < 50 {
				t.Errorf("figure of %dx%d, the response says %dx%d", b.Dx(), b.Dy(), x.Width, x.Height)
			}
		}
	}
	if len(pngs) != 2 {
		t.Fatalf("%d figures, want the 2 the call made: %+v", len(pngs), r.Results)
	}
	if !strings.Contains(table, "sq") || !strings.Contains(table, "[3 rows x 2 columns]") {
		t.Fatalf("DataFrame table: %q", table)
	}
	// Figures are reported once: the next call made none.
	r = c.exec(s.ID, "len(plt.get_fignums())")
	if r.repr() != "0" || len(r.Results) != 1 {
		t.Fatalf("the figures came back again: %+v", r.Results)
	}
}

func TestSessionTimeoutInterruptsAndRestarts(t *testing.T) {
	c := newSessClient(t)
	s := c.create(`{"limits":{"timeout_ms":5000}}`)
	c.exec(s.ID, "x = 'kept'")
	start := time.Now()
	r := c.exec(s.ID, "import time\nwhile True:\n    time.sleep(0.01)", "timeout_ms", 1000)
	took := time.Since(start)
	if r.Status != "timeout" || r.StateLost || !strings.Contains(r.Stderr, "KeyboardInterrupt") || took > 4*time.Second {
		t.Fatalf("interrupted call (%v): %+v", took, r)
	}
	if r := c.exec(s.ID, "x"); r.repr() != "'kept'" {
		t.Fatalf("state after an interrupted call: %+v", r)
	}
	// Code that ignores the interrupt: the interpreter is replaced.
	start = time.Now()
	r = c.exec(s.ID, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass", "timeout_ms", 1000)
	took = time.Since(start)
	if r.Status != "timeout" || !r.StateLost || !strings.Contains(r.Message, "state") || took > 6*time.Second {
		t.Fatalf("uninterruptible call (%v): %+v", took, r)
	}
	r = c.exec(s.ID, "x")
	if r.Status != "error" || r.Exception == nil || r.Exception.Type != "NameError" {
		t.Fatalf("state after a restart: %+v", r)
	}
	if r := c.exec(s.ID, "y = 2\ny * 21"); r.Status != "ok" || r.repr() != "42" {
		t.Fatalf("a call after the restart: %+v", r)
	}
	// The interpreter exiting is a restart too.
	if r := c.exec(s.ID, "import os\nos._exit(3)"); r.Status != "error" || r.ExitCode != 3 || !r.StateLost {
		t.Fatalf("os._exit: %+v", r)
	}
	if r := c.exec(s.ID, "'alive'"); r.Status != "ok" || r.repr() != "'alive'" {
		t.Fatalf("after os._exit: %+v", r)
	}
	if g := c.get(s.ID); g.Usage.Restarts != 2 || g.State != "ready" {
		t.Fatalf("usage after two restarts: %+v", g)
	}
}

func TestSessionOutputCannotForgeFrames(t *testing.T) {
	c := newSessClient(t)
	s := c.create(`{}`)
	c.exec(s.ID, "secret_state = 7")
	// Bytes shaped like a sealed result frame, a call-end frame and the
	// kernel's end marker, printed and written straight to fd 1 and 2, and
	// into the launcher's stdout through /proc.
	fake := func(typ byte, payload string) []byte {
		b := []byte{typ, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
		return append(append(b, payload...), bytes.Repeat([]byte{0xAB}, 16)...)
	}
	var forged []byte
	forged = append(forged, fake('V', `{"kind":"repr","text":"FORGED"}`)...)
	forged = append(forged, fake('D', `{"status":"ok","exit_code":0}`)...)
	forged = append(forged, "\x1esandboxd-end-00000000000000000000000000000000\x1e"...)
	code := fmt.Sprintf(`import os, sys
forged = bytes.fromhex(%q)
sys.stdout.buffer.write(forged); sys.stdout.flush()
os.write(1, forged); os.write(2, forged)
print("after")
try:
    open('/proc/1/fd/1', 'wb').write(forged)
    print("WROTE-PID1")
except OSError as e:
    print("denied", e.errno)
secret_state + 1`, fmt.Sprintf("%x", forged))
	r := c.exec(s.ID, code)
	out := []byte(r.Stdout)
	if r.StdoutBase64 != nil {
		out = unb64(t, *r.StdoutBase64)
	}
	if r.Status != "ok" || r.repr() != "8" || len(r.Results) != 1 || strings.Contains(r.Stdout, "WROTE-PID1") || !strings.Contains(r.Stdout, "denied") {
		t.Fatalf("forging call: %+v", r)
	}
	if bytes.Count(out, forged) != 2 || !bytes.Contains(out, []byte("after\n")) {
		t.Fatalf("the forged bytes are not in stdout as the code wrote them: %q", out)
	}
	errOut := []byte(r.Stderr)
	if r.StderrBase64 != nil {
		errOut = unb64(t, *r.StderrBase64)
	}
	if !bytes.Contains(errOut, forged) {
		t.Fatalf("stderr lost the forged bytes: %q", errOut)
	}
	if r := c.exec(s.ID, "secret_state"); r.Status != "ok" || r.repr() != "7" || r.StateLost {
		t.Fatalf("the session after the forged output: %+v", r)
	}
}

func TestSessionOOMEndsTheSession(t *testing.T) {
	c := newSessClient(t)
	s := c.create(`{"limits":{"memory_mb":64}}`)
	r := c.exec(s.ID, "blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))")
	if r.Status != "oom" || r.SessionState != "ended" || !strings.Contains(r.Message, "64 MiB") {
		t.Fatalf("OOM call: %+v", r)
	}
	if g := c.get(s.ID); g.State != "ended" || !strings.Contains(g.EndReason, "memory") {
		t.Fatalf("after the OOM kill: %+v", g)
	}
	waitSandboxGone(t, s.SandboxID, e2e.RemovalTimeout)

	// A thread the code left running hits the limit between calls: the
	// session ends all the same.
	s = c.create(`{"limits":{"memory_mb":64}}`)
	r = c.exec(s.ID, "import threading, time\ndef hog():\n    time.sleep(0.3)\n    blocks = []\n    while True:\n        blocks.append(bytearray(16 << 20))\n"+
		"threading.Thread(target=hog, daemon=True).start()\n'left running'")
	if r.Status != "ok" || r.SessionState != "ready" {
		t.Fatalf("call that leaves a thread: %+v", r)
	}
	if g := c.waitEnded(s.ID, 10*time.Second, "the session did not end when its interpreter was killed at the memory limit between calls"); !strings.Contains(g.EndReason, "memory limit between calls") {
		t.Fatalf("end reason %q", g.EndReason)
	}
	waitSandboxGone(t, s.SandboxID, e2e.RemovalTimeout)
}

func TestSessionIdleTimeoutRemovesTheContainer(t *testing.T) {
	c := newSessClient(t)
	s := c.create(`{"idle_timeout_s":2}`)
	if s.IdleTimeoutS != 2 {
		t.Fatalf("idle timeout %d", s.IdleTimeoutS)
	}
	c.exec(s.ID, "1")
	if g := c.waitEnded(s.ID, 10*time.Second, "the idle session did not end"); !strings.Contains(g.EndReason, "idle") {
		t.Fatalf("end reason: %q", g.EndReason)
	}
	waitSandboxGone(t, s.SandboxID, e2e.RemovalTimeout)
	if code, raw := c.do("POST", "/sessions", `{"idle_timeout_s":100000}`); code != 400 || !strings.Contains(string(raw), "idle_timeout_s") {
		t.Fatalf("idle timeout over the profile's: %d %s", code, raw)
	}
}

// sessionServer starts a sandboxd of the test's own with keys of two
// tenants (acme has two keys) and a tenants file.
func sessionServer(t *testing.T, tenants string) (*ctlServer, map[string]string) {
	t.Helper()
	s := &ctlServer{t: t, dataDir: t.TempDir(), keysDir: t.TempDir(), tenants: tenants, agent: newKey(), admin: newKey(), log: &logbuf.Buffer{}}
	keys := map[string]string{"acme-1": s.agent, "acme-2": newKey(), "globex-1": newKey(), "ops": s.admin}
	var entries []e2e.Key
	for _, id := range []string{"acme-1", "acme-2", "globex-1", "ops"} {
		tenant, roles := strings.Split(id, "-")[0], []string{"agent"}
		if id == "ops" {
			roles = []string{"admin"}
		}
		entries = append(entries, e2e.Key{ID: id, Tenant: tenant, Roles: roles, Secret: keys[id]})
	}
	s.launch(e2e.KeysYAML(entries...))
	return s, keys
}

func (s *ctlServer) sessions(key string) *sessClient {
	return &sessClient{t: s.t, base: func() string { return s.url }, key: key, log: s.log}
}

func TestSessionIsolationCapFreezeAndOrphans(t *testing.T) {
	srv, keys := sessionServer(t, "defaults:\n  max_sessions: 2\n")
	owner := srv.sessions(keys["acme-1"])
	s := owner.create(`{}`)
	owner.exec(s.ID, "x = 1")
	// Another tenant, and another key of the same tenant, see nothing.
	for _, id := range []string{"globex-1", "acme-2", "ops"} {
		other := owner.with(keys[id])
		for _, rq := range []struct {
			method, path string
			body         any
		}{
			{"GET", "/sessions/" + s.ID, nil},
			{"POST", "/sessions/" + s.ID + "/exec", map[string]any{"code": "x"}},
			{"POST", "/sessions/" + s.ID + "/files", map[string]any{"files": []map[string]string{{"path": "a", "content": ""}}}},
			{"GET", "/sessions/" + s.ID + "/files/a", nil},
			{"DELETE", "/sessions/" + s.ID, nil},
		} {
			if code, raw := other.do(rq.method, rq.path, rq.body); code != 404 || !strings.Contains(string(raw), "NOT_FOUND") {
				t.Errorf("%s %s with key %s: %d %s", rq.method, rq.path, id, code, raw)
			}
		}
	}
	if r := owner.exec(s.ID, "x"); r.repr() != "1" {
		t.Fatalf("the session after the others' tries: %+v", r)
	}
	// The tenant's cap: two open sessions.
	s2 := owner.with(keys["acme-2"]).create(`{}`)
	if code, raw := owner.do("POST", "/sessions", `{}`); code != 429 || !strings.Contains(string(raw), "tenant.max_sessions") {
		t.Fatalf("a third session of acme: %d %s", code, raw)
	}
	globex := owner.with(keys["globex-1"]).create(`{}`)

	// The kill switch ends every session, a running call included.
	done := make(chan *sessionExecResponse)
	go func() { done <- owner.exec(s.ID, "import time\ntime.sleep(30)") }()
	deadline := time.Now().Add(10 * time.Second)
	for owner.get(s.ID).State != "busy" {
		if time.Now().After(deadline) {
			t.Fatal("the call did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	admin := owner.with(keys["ops"])
	if code, raw := admin.do("POST", "/admin/freeze", map[string]any{"kill_running": true, "reason": "drill"}); code != 200 {
		t.Fatalf("freeze: %d %s", code, raw)
	}
	r := <-done
	if r.Status != "killed" || r.SessionState != "ended" {
		t.Fatalf("the running call at the freeze: %+v", r)
	}
	for _, x := range []struct {
		c  *sessClient
		si *sessionInfo
	}{{owner, s}, {owner.with(keys["acme-2"]), s2}, {owner.with(keys["globex-1"]), globex}} {
		if g := x.c.waitEnded(x.si.ID, 5*time.Second, "session "+x.si.ID+" did not end at the freeze"); !strings.Contains(g.EndReason, "frozen") {
			t.Errorf("end reason at the freeze: %q", g.EndReason)
		}
		waitSandboxGone(t, x.si.SandboxID, e2e.RemovalTimeout)
	}
	if code, raw := owner.do("POST", "/sessions", `{}`); code != 503 || !strings.Contains(string(raw), "FROZEN") {
		t.Fatalf("a session while frozen: %d %s", code, raw)
	}
	admin.do("POST", "/admin/unfreeze", nil)

	// A crash leaves the session's container; the next start removes it.
	s3 := owner.create(`{}`)
	srv.kill()
	if _, ok := sandboxContainer(t, s3.SandboxID); !ok {
		t.Fatal("the session's container is gone before the restart (the test proves nothing)")
	}
	srv.start()
	waitSandboxGone(t, s3.SandboxID, 30*time.Second)

	// At shutdown every open session ends and its container goes.
	s4 := owner.create(`{}`)
	owner.exec(s4.ID, "x = 4")
	srv.stop()
	waitSandboxGone(t, s4.SandboxID, e2e.RemovalTimeout)
}

// TestSessionsMemory opens 20 sessions of the default profile at once and
// measures each container's memory as the engine counts it (the cgroup's
// usage less inactive file cache, as `docker stats` shows it).
//
// The bound: an idle session is the launcher (a static Go binary, a few
// MiB) and one Python 3.11 interpreter with our kernel loop (about 10 MiB
// resident), plus the small files Python wrote in /tmp. 40 MiB a session
// leaves room for the kernel's own accounting (page tables, slab) while
// still failing if a session held anything like its 256 MiB limit, or if
// the interpreter were duplicated (a forgotten zygote): 20 sessions must
// fit in 800 MiB.
func TestSessionsMemory(t *testing.T) {
	c := newSessClient(t)
	const n = 20
	const perSession = 40 << 20
	ids := make([]*sessionInfo, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ids[i] = c.create(`{}`)
			c.exec(ids[i].ID, fmt.Sprintf("data = list(range(1000))\nn = %d", i))
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// The engine takes about a second per stats call: ask for all at once.
	each := make([]int64, n)
	errs := make([]error, n)
	for i, s := range ids {
		info, ok := sandboxContainer(t, s.SandboxID)
		if !ok {
			t.Fatalf("no container for session %s", s.ID)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			each[i], errs[i] = containerMemory(info.ID)
		}()
	}
	wg.Wait()
	var total int64
	for i, used := range each {
		if errs[i] != nil {
			t.Fatalf("memory of session %s: %v", ids[i].ID, errs[i])
		}
		total += used
		if used > perSession {
			t.Errorf("session %s uses %.1f MiB, over the %d MiB bound", ids[i].ID, float64(used)/(1<<20), perSession>>20)
		}
	}
	sort.Slice(each, func(i, j int) bool { return each[i] < each[j] })
	t.Logf("%d open sessions: %.1f MiB in all; per session min %.1f, median %.1f, max %.1f MiB", n, float64(total)/(1<<20),
		float64(each[0])/(1<<20), float64(each[n/2])/(1<<20), float64(each[n-1])/(1<<20))
	if total > n*perSession {
		t.Errorf("%d sessions use %.1f MiB, over %d MiB", n, float64(total)/(1<<20), n*perSession>>20)
	}
	// All of them still answer, each with its own state.
	for i, s := range ids {
		if r := c.exec(s.ID, "n"); r.repr() != fmt.Sprint(i) {
			t.Fatalf("session %d answered %+v", i, r)
		}
	}
}

// containerMemory is a container's memory use as the engine reports it,
// less inactive file cache (what `docker stats` shows).
func containerMemory(id string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := dockerCli.ContainerStatsOneShot(ctx, id)
	if err != nil {
		return 0, err
	}
	defer st.Body.Close()
	var stats container.StatsResponse
	if err := json.NewDecoder(st.Body).Decode(&stats); err != nil {
		return 0, err
	}
	used := int64(stats.MemoryStats.Usage)
	for _, k := range []string{"total_inactive_file", "inactive_file"} {
		if v, ok := stats.MemoryStats.Stats[k]; ok && int64(v) < used {
			used -= int64(v)
			break
		}
	}
	if used <= 0 {
		return 0, fmt.Errorf("the engine reports no memory use: %+v", stats.MemoryStats)
	}
	return used, nil
}

// TestSessionLatency measures a trivial call in a warm session and the
// start of a session, through the API (auth, budgets, the audit record
// written before the answer, the run slot), and logs the distribution.
// The target is a median under 10 ms for the call; the assertion is
// looser, for a loaded CI machine.
func TestSessionLatency(t *testing.T) {
	c := newSessClient(t)
	var creates []time.Duration
	var s *sessionInfo
	for i := 0; i < 5; i++ {
		start := time.Now()
		s = c.create(`{}`)
		creates = append(creates, time.Since(start))
	}
	c.exec(s.ID, "1")
	var calls []time.Duration
	for i := 0; i < 100; i++ {
		start := time.Now()
		if r := c.exec(s.ID, "1 + 1"); r.repr() != "2" {
			t.Fatalf("call: %+v", r)
		}
		calls = append(calls, time.Since(start))
	}
	pct := func(d []time.Duration, p float64) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[min(len(s)-1, int(float64(len(s))*p))]
	}
	t.Logf("trivial call in a warm session: median %v, p90 %v, max %v (%d calls)", pct(calls, 0.5), pct(calls, 0.9), pct(calls, 1), len(calls))
	t.Logf("session start: median %v, max %v (%d starts)", pct(creates, 0.5), pct(creates, 1), len(creates))
	if m := pct(calls, 0.5); m > 50*time.Millisecond {
		t.Errorf("median call latency %v, far over the 10 ms target", m)
	}
}

// BenchmarkSessionCall: a trivial call in a warm session through the API
// (go test -bench SessionCall ./tests/).
func BenchmarkSessionCall(b *testing.B) {
	c := &sessClient{t: b, base: func() string { return srv.URL }, key: agentKey, log: srv.Log}
	code, raw := c.do("POST", "/sessions", `{}`)
	var s sessionInfo
	if code != http.StatusCreated || json.Unmarshal(raw, &s) != nil {
		b.Fatalf("POST /sessions: %d %s", code, raw)
	}
	defer c.do("DELETE", "/sessions/"+s.ID, nil)
	body := map[string]any{"code": "1 + 1"}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if code, raw := c.do("POST", "/sessions/"+s.ID+"/exec", body); code != http.StatusOK {
			b.Fatalf("call: %d %s", code, raw)
		}
	}
}

// BenchmarkSessionStart: starting a session (and ending it, off the clock).
func BenchmarkSessionStart(b *testing.B) {
	c := &sessClient{t: b, base: func() string { return srv.URL }, key: agentKey, log: srv.Log}
	var ids []string
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		code, raw := c.do("POST", "/sessions", `{}`)
		var s sessionInfo
		if code != http.StatusCreated || json.Unmarshal(raw, &s) != nil {
			b.Fatalf("POST /sessions: %d %s", code, raw)
		}
		ids = append(ids, s.ID)
		if len(ids) == 4 {
			b.StopTimer()
			for _, id := range ids {
				c.do("DELETE", "/sessions/"+id, nil)
			}
			ids = ids[:0]
			b.StartTimer()
		}
	}
	b.StopTimer()
	for _, id := range ids {
		c.do("DELETE", "/sessions/"+id, nil)
	}
}
