package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/control/admit"
	"github.com/sandboxd/sandboxd/internal/execflow"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/runner"
)

// fakeEngine records the specs it is given; the real engine is exercised in
// runner's and tests/' suites.
type fakeEngine struct {
	mu     sync.Mutex
	specs  []*runner.Spec
	block  chan struct{} // when set, Run waits for it or ctx
	result runner.Result
}

func (f *fakeEngine) Run(ctx context.Context, spec *runner.Spec) (*runner.Result, error) {
	f.mu.Lock()
	f.specs = append(f.specs, spec)
	block := f.block
	f.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return &runner.Result{Status: runner.StatusKilled}, nil
		}
	}
	r := f.result
	return &r, nil
}
func (f *fakeEngine) Ping(context.Context) error                      { return nil }
func (f *fakeEngine) ImageID(context.Context, string) (string, error) { return "sha256:fake", nil }

type fixture struct {
	srv   *Server
	eng   *fakeEngine
	agent string
}

func newFixture(t *testing.T, slots, queue int) *fixture {
	t.Helper()
	set, err := profiles.Load("../../profiles")
	if err != nil {
		t.Fatal(err)
	}
	agent, ring := auth.Generate("agent-1", "acme", auth.RoleAgent)
	eng := &fakeEngine{result: runner.Result{Status: runner.StatusOK, Stdout: []byte("1\n"), ImageID: "sha256:fake"}}
	srv := newServer(t, Config{
		DataDir:      t.TempDir(),
		Profiles:     set,
		Keys:         ring,
		Engine:       eng,
		Gate:         admit.New(slots, queue, time.Minute),
		Log:          slog.New(slog.NewJSONHandler(io.Discard, nil)),
		MaxBodyBytes: 1 << 20,
	})
	return &fixture{srv: srv, eng: eng, agent: agent}
}

func (f *fixture) do(t *testing.T, key, body string) (*http.Response, map[string]any) {
	t.Helper()
	rec := serve(f.srv, http.MethodPost, "/exec", key, body, "Content-Type", "application/json")
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("response is not JSON: %v: %q", err, rec.Body.String())
	}
	return rec.Result(), out
}

func errorOf(t *testing.T, body map[string]any) (code, field, msg string) {
	t.Helper()
	e, ok := body["error"].(map[string]any)
	if !ok {
		t.Fatalf("no error object in %v", body)
	}
	field, _ = e["field"].(string)
	return e["code"].(string), field, e["message"].(string)
}

func TestExecValidation(t *testing.T) {
	f := newFixture(t, 2, 2)
	b64 := base64.StdEncoding.EncodeToString([]byte("x"))
	cases := []struct {
		name, body, field, inMsg string
	}{
		{"malformed JSON", `{"language":"python","code":`, "", "ends too early"},
		{"syntax error", `{"language":"python" "code":"x"}`, "", "malformed JSON"},
		{"not an object", `[1,2]`, "", "JSON object"},
		{"empty body", ``, "", "empty"},
		{"trailing data", `{"language":"python","code":"x"} {}`, "", "after the JSON object"},
		{"unknown field", `{"language":"python","code":"x","cmd":"ls"}`, "cmd", "unknown field"},
		{"wrong type", `{"language":"python","code":42}`, "code", "must be a string"},
		{"wrong limit type", `{"language":"python","code":"x","limits":{"memory_mb":"lots"}}`, "limits.memory_mb", "must be an integer"},
		{"missing language", `{"code":"x"}`, "language", "required"},
		{"unknown language", `{"language":"ruby","code":"x"}`, "language", `"python"`},
		{"missing code", `{"language":"python"}`, "code", "required"},
		{"unknown profile", `{"language":"python","code":"x","profile":"nope"}`, "profile", "default"},
		{"bad env name", `{"language":"python","code":"x","env":{"lower":"1"}}`, "env", "[A-Z_][A-Z0-9_]*"},
		{"env PATH", `{"language":"python","code":"x","env":{"PATH":"/evil"}}`, "env.PATH", "may not be overridden"},
		{"env PYTHONPATH", `{"language":"python","code":"x","env":{"PYTHONSTARTUP":"/x"}}`, "env.PYTHONSTARTUP", "reserved"},
		{"env LD_PRELOAD", `{"language":"python","code":"x","env":{"LD_PRELOAD":"/x"}}`, "env.LD_PRELOAD", "reserved"},
		{"path traversal", `{"language":"python","code":"x","files":[{"path":"../etc/passwd","content":"` + b64 + `"}]}`, "files[0].path", ".."},
		{"absolute path", `{"language":"python","code":"x","files":[{"path":"/etc/passwd","content":"` + b64 + `"}]}`, "files[0].path", "absolute"},
		{"inner traversal", `{"language":"python","code":"x","files":[{"path":"a/../../b","content":"` + b64 + `"}]}`, "files[0].path", ".."},
		{"duplicate path", `{"language":"python","code":"x","files":[{"path":"a","content":""},{"path":"a","content":""}]}`, "files[1].path", "twice"},
		{"file and dir", `{"language":"python","code":"x","files":[{"path":"a","content":""},{"path":"a/b","content":""}]}`, "files", "directory"},
		{"link entry", `{"language":"python","code":"x","files":[{"path":"a","content":"","link":"/etc/passwd"}]}`, "link", "unknown field"},
		{"bad base64", `{"language":"python","code":"x","files":[{"path":"a","content":"!!"}]}`, "files[0].content", "base64"},
		{"raised memory", `{"language":"python","code":"x","limits":{"memory_mb":100000}}`, "limits.memory_mb", "ceiling of 256"},
		{"raised timeout", `{"language":"python","code":"x","limits":{"timeout_ms":600000}}`, "limits.timeout_ms", "ceiling of 10000"},
		{"raised cpus", `{"language":"python","code":"x","limits":{"cpus":8}}`, "limits.cpus", "ceiling of 1"},
		{"zero memory", `{"language":"python","code":"x","limits":{"memory_mb":0}}`, "limits.memory_mb", "minimum"},
		{"unknown limit", `{"language":"python","code":"x","limits":{"disk_mb":1}}`, "disk_mb", "unknown field"},
		{"oversized body", `{"language":"python","code":"` + strings.Repeat("a", 2<<20) + `"}`, "", "limit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := f.do(t, f.agent, tc.body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400; body %v", resp.StatusCode, body)
			}
			code, field, msg := errorOf(t, body)
			if code != api.CodeValidation || field != tc.field || !strings.Contains(msg, tc.inMsg) {
				t.Fatalf("got code %q field %q message %q; want VALIDATION, field %q, message containing %q", code, field, msg, tc.field, tc.inMsg)
			}
		})
	}
	if len(f.eng.specs) != 0 {
		t.Fatalf("%d invalid requests reached the engine", len(f.eng.specs))
	}
}

func TestExecLoweredLimitsReachTheRun(t *testing.T) {
	f := newFixture(t, 2, 2)
	resp, body := f.do(t, f.agent, `{"language":"python","code":"print(1)","stdin":"in","env":{"MY_VAR":"v"},
		"files":[{"path":"data/x.csv","content":"YSxi"}],
		"limits":{"timeout_ms":2000,"memory_mb":64,"cpus":0.5,"pids":16,"output_bytes":100,"tmpfs_mb":8}}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %v", resp.StatusCode, body)
	}
	spec := f.eng.specs[0]
	want := profiles.Limits{TimeoutMS: 2000, MemoryMB: 64, CPUs: 0.5, Pids: 16, OutputBytes: 100, TmpfsMB: 8}
	if spec.Limits != want {
		t.Fatalf("limits %+v, want %+v", spec.Limits, want)
	}
	if spec.Job.TimeoutMS != 2000 || spec.Job.OutputBytes != 100 || string(spec.Job.Stdin) != "in" || spec.Job.Env["MY_VAR"] != "v" {
		t.Fatalf("job %+v does not carry the request", spec.Job)
	}
	if len(spec.Job.Files) != 1 || spec.Job.Files[0].Path != "data/x.csv" || string(spec.Job.Files[0].Content) != "a,b" {
		t.Fatalf("files %+v", spec.Job.Files)
	}
	lim := body["limits"].(map[string]any)
	if lim["memory_mb"].(float64) != 64 {
		t.Fatalf("response limits %v", lim)
	}
	prof := body["profile"].(map[string]any)
	if prof["name"] != "default" || len(prof["version"].(string)) != 64 {
		t.Fatalf("profile %v", prof)
	}
	eg, _ := body["egress"].(map[string]any)
	if eg["name"] != "none" || len(eg["version"].(string)) != 64 {
		t.Fatalf("egress %v, want the none profile with its version", body["egress"])
	}
	if body["stdout"] != "1\n" || body["status"] != "ok" || body["image"] != "sha256:fake" {
		t.Fatalf("body %v", body)
	}
}

func TestExecAuth(t *testing.T) {
	f := newFixture(t, 2, 2)
	ok := `{"language":"python","code":"x"}`
	resp, body := f.do(t, "", ok)
	if code, _, _ := errorOf(t, body); resp.StatusCode != 401 || code != api.CodeAuth {
		t.Fatalf("no key: %d %s", resp.StatusCode, code)
	}
	if resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatal("401 without WWW-Authenticate")
	}
	resp, body = f.do(t, f.agent+"x", ok)
	if code, _, _ := errorOf(t, body); resp.StatusCode != 401 || code != api.CodeAuth {
		t.Fatalf("wrong key: %d %s", resp.StatusCode, code)
	}
	// A key without the role a route needs gets 403.
	f.srv.echo.GET("/admin-only", func(c echo.Context) error { return c.NoContent(204) }, f.srv.authenticate(auth.RoleAdmin))
	rec := serve(f.srv, http.MethodGet, "/admin-only", f.agent, "")
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), api.CodeForbidden) {
		t.Fatalf("agent key on an admin route: %d %s", rec.Code, rec.Body.String())
	}
}

func TestExecBusy(t *testing.T) {
	f := newFixture(t, 1, 0)
	f.eng.block = make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.do(t, f.agent, `{"language":"python","code":"x"}`)
	}()
	for i := 0; ; i++ {
		if run, _, _ := f.srv.cfg.Gate.Stats(); run == 1 {
			break
		}
		if i > 1000 {
			t.Fatal("first run never started")
		}
		time.Sleep(time.Millisecond)
	}
	resp, body := f.do(t, f.agent, `{"language":"python","code":"x"}`)
	if code, _, _ := errorOf(t, body); resp.StatusCode != 429 || code != api.CodeBusy {
		t.Fatalf("got %d %s, want 429 BUSY", resp.StatusCode, code)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	close(f.eng.block)
	<-done
}

func TestKillRunsStopsRunningJobs(t *testing.T) {
	f := newFixture(t, 1, 0)
	f.eng.block = make(chan struct{})
	got := make(chan map[string]any, 1)
	go func() {
		_, body := f.do(t, f.agent, `{"language":"python","code":"x"}`)
		got <- body
	}()
	for run, _, _ := f.srv.cfg.Gate.Stats(); run == 0; run, _, _ = f.srv.cfg.Gate.Stats() {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.srv.KillRuns(ctx, execflow.ErrShutdown); err != nil {
		t.Fatal(err)
	}
	if body := <-got; body["status"] != runner.StatusKilled {
		t.Fatalf("status %v, want killed", body["status"])
	}
}

func TestHealthAndUnknownRoute(t *testing.T) {
	f := newFixture(t, 1, 1)
	rec := httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != 200 {
		t.Fatalf("healthz %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/nope", nil))
	var body map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	if code, _, _ := errorOf(t, body); rec.Code != 404 || code != api.CodeNotFound {
		t.Fatalf("unknown route: %d %s", rec.Code, code)
	}
	rec = httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"ready"`) {
		t.Fatalf("readyz %d %s", rec.Code, rec.Body.String())
	}
}
