// Package tests is sandboxd's black-box end-to-end suite. TestMain builds the
// real binary, starts `sandboxd serve` on a loopback port with a keys file of
// its own, and every test talks to it over HTTP only; the Docker Engine API is
// used to look at the containers sandboxd makes. Nothing here imports the
// service's packages; the harness (server, client, wire types) is
// internal/e2e.
//
// Needs: a Docker engine and the sandbox image (`make image`). A missing
// piece fails the suite with a message saying what to do; nothing is skipped.
package tests

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/internal/logbuf"
	"github.com/sandboxd/sandboxd/runner"
)

// sandboxImage is the image the default profile names.
const sandboxImage = "sandboxd/python:3.11"

// Values of profiles/exec/default.yaml that the tests rely on.
const (
	defTimeoutMS   = 10000
	defMemoryMB    = 256
	defCPUs        = 1.0
	defPids        = 64
	defOutputBytes = 1048576
	defTmpfsMB     = 64
	// pidsOverhead is what sandboxd adds to the profile's pids for the
	// container's init and its launcher (part of the contract).
	pidsOverhead = 16
)

// readyTimeout bounds the wait for /readyz to say ready (engine reachable,
// image present). The suite's other budgets are internal/e2e's.
const readyTimeout = 20 * time.Second

// Environment shared by the tests, set up by TestMain.
var (
	srv          *e2e.Server // the suite's server
	agentKey     string      // roles [agent], tenant acme
	adminKey     string      // roles [admin], tenant ops
	noRoleKey    string      // roles [] -- empty when the keys loader refused it
	noRoleRefuse string      // why the loader refused a key without roles, if it did
	moduleRoot   string
	dockerCli    *client.Client
	// canaryName/canaryValue are set in the sandboxd process's environment
	// only; no sandbox may see them.
	canaryName  = "SBXTEST_HOST_CANARY"
	canaryValue string
	// serverEnv is the environment sandboxd was started with.
	serverEnv []string
	// instanceLabel is the value of the sandboxd.instance label on this
	// server's containers, learned from the warm-up run ("" if sandboxd sets
	// none). It tells this suite's containers from those of any other
	// sandboxd sharing the Docker engine.
	instanceLabel string
	// sandboxdBin is the binary TestMain built, for tests that start their
	// own server (lifecycle_test.go).
	sandboxdBin string

	// api sends the suite's requests to srv (keys go in the headers, so
	// that tests can send any Authorization); execs is api through the
	// suite's cap on /exec requests in flight.
	api, execs e2e.Client

	// seenExecIDs are the exec ids of the suite's runs.
	seenExecIDs e2e.IDSet
	// suiteTmp is the suite's temporary directory.
	suiteTmp string
)

func TestMain(m *testing.M) {
	e2e.Main("sandboxd e2e", "sandboxd-e2e-", func(s *e2e.Suite) int { return runMain(m, s) })
}

func runMain(m *testing.M, suite *e2e.Suite) (code int) {
	fatalf := suite.Fatalf
	moduleRoot, dockerCli, sandboxdBin = suite.Root, suite.Docker, suite.Bin
	tmp := suite.Tmp
	suiteTmp = tmp
	var err error

	// Keys.
	agentKey, adminKey, noRoleKey = newKey(), newKey(), newKey()
	canaryValue = "canary-" + e2e.RandHex(12)
	serverEnv = append(os.Environ(), canaryName+"="+canaryValue)

	var firstOut *logbuf.Buffer
	srv, firstOut, err = startServer(tmp, true)
	if err != nil {
		// Perhaps the keys loader refuses a key without roles: try without
		// it (the 403 test then reports that it cannot be tested).
		firstErr := err
		if srv, _, err = startServer(tmp, false); err != nil {
			return fatalf("%v\n--- sandboxd output ---\n%s", firstErr, firstOut.Tail(80))
		}
		noRoleRefuse = fmt.Sprintf("%v: %s", firstErr, firstOut.Tail(5))
	}
	defer func() { _ = srv.Stop(e2e.ShutdownTimeout) }()
	api = e2e.Client{URL: srv.URL, Retries429: e2e.Max429Retries}
	execs = api
	execs.Gate = e2e.NewGate(e2e.MaxConcurrentExecs)

	if _, body, err := srv.WaitReady(readyTimeout); err != nil {
		if strings.Contains(string(body), "image") {
			err = fmt.Errorf("%w\nthe sandbox image %s is missing or unusable: run `make image` in %s", err, sandboxImage, moduleRoot)
		}
		return fatalf("%v\n--- sandboxd output ---\n%s", err, srv.Log.Tail(80))
	}
	if err := warmUp(); err != nil {
		return fatalf("warm-up run failed: %v\n--- sandboxd output ---\n%s", err, srv.Log.Tail(80))
	}

	// After the whole suite: shut down, then no container of ours may remain.
	return suite.Finish(m.Run(), srv, ourContainers)
}

// cellMode tells whether the suite serves the shipped profiles (cells)
// rather than a container per run (SANDBOXD_TEST_ISOLATION=cell).
func cellMode() bool { return os.Getenv("SANDBOXD_TEST_ISOLATION") == "cell" }

// newKey returns a fresh key secret.
func newKey() string { return e2e.NewSecret("sbxtest_") }

// startServer starts the suite's sandboxd and waits for /healthz. With
// withNoRole the keys file carries a key without roles; without, noRoleKey
// is cleared. It returns sandboxd's output too, for a failure message.
func startServer(tmp string, withNoRole bool) (*e2e.Server, *logbuf.Buffer, error) {
	keys := []e2e.Key{
		{ID: "agent-1", Tenant: "acme", Roles: []string{"agent"}, Secret: agentKey},
		{ID: "admin-1", Tenant: "ops", Roles: []string{"admin"}, Secret: adminKey},
	}
	if withNoRole {
		keys = append(keys, e2e.Key{ID: "norole-1", Tenant: "acme", Secret: noRoleKey})
	} else {
		noRoleKey = ""
	}
	keysFile := filepath.Join(tmp, "keys.yaml")
	log := &logbuf.Buffer{}
	if err := e2e.WriteKeys(keysFile, keys...); err != nil {
		return nil, log, err
	}
	// This suite inspects the engine container of each run: the shipped
	// profiles, one container per run (tests/cells is about cells).
	// SANDBOXD_TEST_ISOLATION=cell serves them as shipped, for the tests
	// that hold in both (make test runs those again so).
	profilesDir := filepath.Join(tmp, "profiles")
	if cellMode() {
		profilesDir = filepath.Join(moduleRoot, "profiles")
	} else if _, err := os.Stat(profilesDir); err != nil {
		if err := e2e.ContainerProfiles(filepath.Join(moduleRoot, "profiles"), profilesDir); err != nil {
			return nil, log, err
		}
	}
	s, err := e2e.Start(e2e.ServerConfig{
		Bin: sandboxdBin, DataDir: filepath.Join(tmp, "data"), ProfilesDir: profilesDir,
		KeysFile: keysFile, Env: serverEnv, Log: log,
	})
	return s, log, err
}

// warmUp runs one short job while watching the engine, to learn the
// instance label of this server's containers and to load the image into the
// page cache before the timing-sensitive tests.
func warmUp() error {
	agent := execs
	agent.Key = agentKey
	w := startWatch()
	r, res, err := agent.ExecOK(context.Background(), e2e.Py("import time\ntime.sleep(1)\nprint('warm')"), "warmup", "warm\n")
	seen := w.stop()
	if r != nil {
		seenExecIDs.Add(r.ID)
	}
	if err != nil {
		return err
	}
	info, ok := seen[r.ID]
	switch {
	case ok:
		instanceLabel = info.Config.Labels["sandboxd.instance"]
	case cellMode():
		// A cell's host is labelled with no exec's id: the instance is
		// derived from the data directory.
		dir, err := filepath.Abs(filepath.Join(suiteTmp, "data"))
		if err != nil {
			return err
		}
		instanceLabel = runner.InstanceID(dir)
	default:
		return fmt.Errorf("no container labelled sandboxd.exec-id=%s was seen while the 1 s warm-up run went on", r.ID)
	}
	fmt.Fprintf(os.Stderr, "sandboxd e2e: server on %s, warm-up run %v (instance label %q)\n", srv.URL, res.Wall.Round(time.Millisecond), instanceLabel)
	return nil
}

// ---------------------------------------------------------------------------
// HTTP client.

var reqCounter atomic.Int64

var reqIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9._:-]+`)

// tc is a per-test client: it tags requests with X-Request-Id and, when the
// test fails, prints sandboxd's log lines about them.
type tc struct {
	t   *testing.T
	mu  sync.Mutex
	ids []string
}

func newTC(t *testing.T) *tc {
	c := &tc{t: t}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// sandboxd's output reaches its log through a pipe and a copying
		// goroutine; give lines written just before the response a moment.
		time.Sleep(300 * time.Millisecond)
		c.mu.Lock()
		ids := append([]string(nil), c.ids...)
		c.mu.Unlock()
		if lines := e2e.Grep(srv.Log.String(), 60, ids...); lines != "" {
			t.Logf("sandboxd log lines of this test's requests:\n%s", lines)
		} else {
			t.Logf("last lines of sandboxd's log:\n%s", srv.Log.Tail(30))
		}
	})
	return c
}

func (c *tc) note(ids ...string) {
	c.mu.Lock()
	c.ids = append(c.ids, ids...)
	c.mu.Unlock()
}

func (c *tc) requestID() string {
	name := reqIDUnsafe.ReplaceAllString(c.t.Name(), ".")
	id := fmt.Sprintf("e2e-%d-%s", reqCounter.Add(1), name)
	if len(id) > 64 {
		id = id[:64]
	}
	c.note(id)
	return id
}

// do sends one request. body is marshalled to JSON unless it is []byte or
// string, which are sent as they are. headers may set Content-Type and
// Authorization ("" removes a header).
func (c *tc) do(ctx context.Context, method, path string, body any, headers map[string]string) (*e2e.Result, error) {
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			return nil, err
		}
	}
	return sendRaw(ctx, method, path, raw, body != nil, headers, c.requestID())
}

// sendRaw sends one request outside the suite's cap on runs in flight;
// with hasBody, raw is sent as JSON. A 429 is sent again after its
// Retry-After unless headers has X-No-Retry.
func sendRaw(ctx context.Context, method, path string, raw []byte, hasBody bool, headers map[string]string, reqID string) (*e2e.Result, error) {
	return send(ctx, api, method, path, raw, hasBody, headers, reqID)
}

func send(ctx context.Context, cl e2e.Client, method, path string, raw []byte, hasBody bool, headers map[string]string, reqID string) (*e2e.Result, error) {
	h := map[string]string{}
	if hasBody {
		h["Content-Type"] = "application/json"
		if raw == nil {
			raw = []byte{}
		}
	}
	for k, v := range headers {
		h[k] = v
	}
	if headers["X-No-Retry"] != "" {
		cl.Retries429 = 0
	}
	return cl.Do(ctx, e2e.Request{Method: method, Path: path, Body: raw, Header: h, ID: reqID})
}

// rawExec posts an exec request with key, through the suite's concurrency
// limit, retrying on 429.
func rawExec(ctx context.Context, key string, req any, reqID string) (*e2e.Result, error) {
	raw, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return send(ctx, execs, http.MethodPost, "/exec", raw, true, map[string]string{"Authorization": "Bearer " + key}, reqID)
}

// burst posts every body to /exec at once with the agent key, outside the
// suite's cap on runs in flight and without sending a 429 again, and
// returns the answers in the order of bodies. A request that got no answer
// fails the test (named what and its index) and is nil.
func (c *tc) burst(what string, bodies [][]byte) []*e2e.Result {
	c.t.Helper()
	results, errs := make([]*e2e.Result, len(bodies)), make([]error, len(bodies))
	var wg sync.WaitGroup
	for i, body := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = sendRaw(context.Background(), http.MethodPost, "/exec", body, true,
				map[string]string{"Authorization": "Bearer " + agentKey, "X-No-Retry": "1"}, c.requestID())
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			c.t.Errorf("%s %d: %v", what, i, err)
			results[i] = nil
		}
	}
	return results
}

// post sends an exec request with the agent key and returns the exchange.
func (c *tc) post(req any) *e2e.Result {
	c.t.Helper()
	return c.postCtx(context.Background(), agentKey, req)
}

func (c *tc) postCtx(ctx context.Context, key string, req any) *e2e.Result {
	c.t.Helper()
	res, err := rawExec(ctx, key, req, c.requestID())
	if err != nil {
		if res != nil && res.Status != 0 {
			c.t.Fatalf("POST /exec: %v\n%s", err, res)
		}
		c.t.Fatalf("POST /exec: %v", err)
	}
	return res
}

// exec runs req and requires a 200 with a well-formed body.
func (c *tc) exec(req any) (*e2e.ExecResponse, *e2e.Result) {
	c.t.Helper()
	res := c.post(req)
	return c.decodeExec(res), res
}

func (c *tc) decodeExec(res *e2e.Result) *e2e.ExecResponse {
	c.t.Helper()
	if res.Status != http.StatusOK {
		c.t.Fatalf("want 200 for a run that started\n%s", res)
	}
	var r e2e.ExecResponse
	if err := json.Unmarshal(res.Body, &r); err != nil {
		c.t.Fatalf("200 body is not a JSON exec response: %v\n%s", err, res)
	}
	c.note(r.ID)
	seenExecIDs.Add(r.ID)
	if r.ID == "" {
		c.t.Errorf("response has no id\n%s", res)
	}
	switch r.Status {
	case "ok", "error", "timeout", "oom", "killed":
	default:
		c.t.Errorf("status %q is not one of ok, error, timeout, oom, killed\n%s", r.Status, res)
	}
	// Returned paths are relative to /sandbox/out and stay inside it.
	for _, p := range append(filePaths(r.Files), skippedPaths(r.SkippedFiles)...) {
		if !e2e.CleanRelPath(p) {
			c.t.Errorf("the response names %q, which is not a clean path inside /sandbox/out\n%s", p, e2e.Clip(res.Body, 2000))
		}
	}
	return &r
}

func filePaths(fs []e2e.OutFile) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Path)
	}
	return out
}

func skippedPaths(fs []e2e.SkippedFile) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Path)
	}
	return out
}

// execStatus runs req and requires the given run status.
func (c *tc) execStatus(req any, status string) (*e2e.ExecResponse, *e2e.Result) {
	c.t.Helper()
	r, res := c.exec(req)
	if r.Status != status {
		c.t.Fatalf("status %q, want %q\n%s", r.Status, status, res)
	}
	return r, res
}

// wantError requires an error response with status, code and (if field is
// not "*") field, and returns the message.
func wantError(t *testing.T, res *e2e.Result, status int, code, field string) string {
	t.Helper()
	if res.Status != status {
		t.Errorf("HTTP status %d, want %d\n%s", res.Status, status, res)
		return ""
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error Content-Type %q, want application/json\n%s", ct, res)
	}
	var e e2e.ErrorBody
	if err := json.Unmarshal(res.Body, &e); err != nil || e.Error == nil {
		t.Errorf("error body is not {\"error\":{...}}: %v\n%s", err, res)
		return ""
	}
	if e.Error.Code != code {
		t.Errorf("error code %q, want %q\n%s", e.Error.Code, code, res)
	}
	if field != "*" && e.Error.Field != field {
		t.Errorf("error field %q, want %q\n%s", e.Error.Field, field, res)
	}
	if strings.TrimSpace(e.Error.Message) == "" {
		t.Errorf("error message is empty\n%s", res)
	}
	return e.Error.Message
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func unb64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("not standard base64: %v: %q", err, e2e.Clip([]byte(s), 200))
	}
	return b
}

// wantHealthy requires GET /healthz and /readyz to answer 200.
func wantHealthy(t *testing.T) {
	t.Helper()
	for _, p := range []string{"/healthz", "/readyz"} {
		res, err := api.Get(context.Background(), p)
		if err != nil {
			t.Fatalf("GET %s: %v", p, err)
		}
		if res.Status != http.StatusOK {
			t.Fatalf("GET %s: %d %s, want 200", p, res.Status, res.Body)
		}
	}
}

// ---------------------------------------------------------------------------
// Docker helpers.

// ourContainers lists the sandboxd.managed=true containers (running or not)
// that belong to this suite's server.
func ourContainers(ctx context.Context) ([]container.Summary, error) {
	if instanceLabel != "" {
		return e2e.ListContainers(ctx, dockerCli, e2e.Managed, e2e.Instance(instanceLabel))
	}
	list, err := e2e.ListContainers(ctx, dockerCli, e2e.Managed)
	if err != nil {
		return nil, err
	}
	// No instance label: keep those whose exec id this suite saw or that
	// were made after this server started.
	var out []container.Summary
	for _, c := range list {
		if seenExecIDs.Has(c.Labels[e2e.LabelExecID]) || c.Created >= srv.Started.Unix() {
			out = append(out, c)
		}
	}
	return out, nil
}

// waitExecGone requires the container of exec id to disappear within
// e2e.RemovalTimeout.
func waitExecGone(t *testing.T, id string) {
	t.Helper()
	left := e2e.WaitGone(e2e.RemovalTimeout, ourContainers, func(c container.Summary) bool { return c.Labels[e2e.LabelExecID] == id })
	if len(left) > 0 {
		t.Errorf("container of exec %s still exists %v after its response: %s", id, e2e.RemovalTimeout, strings.Join(left, ", "))
	}
}

// watch records, while it runs, the inspection of every container of ours
// that appears, keyed by its sandboxd.exec-id label.
type watch struct {
	end  func()
	mu   sync.Mutex
	seen map[string]container.InspectResponse
	byID map[string]string // container id -> exec id
	errs []string
}

func startWatch() *watch {
	w := &watch{seen: map[string]container.InspectResponse{}, byID: map[string]string{}}
	// Containers that exist already are watched too: with the warm pool on,
	// the run takes a container started before the request. Callers look
	// containers up by their exec id, so others do no harm.
	w.end = e2e.Repeat(50*time.Millisecond, w.poll)
	return w
}

func (w *watch) poll() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := ourContainers(ctx)
	if err != nil {
		w.mu.Lock()
		w.errs = append(w.errs, err.Error())
		w.mu.Unlock()
		return
	}
	for _, c := range list {
		w.mu.Lock()
		_, known := w.byID[c.ID]
		w.mu.Unlock()
		if known || c.State != "running" {
			continue
		}
		info, err := dockerCli.ContainerInspect(ctx, c.ID)
		if err != nil {
			continue // gone already
		}
		w.mu.Lock()
		w.byID[c.ID] = c.Labels[e2e.LabelExecID]
		w.seen[c.Labels[e2e.LabelExecID]] = info
		w.mu.Unlock()
	}
}

func (w *watch) stop() map[string]container.InspectResponse {
	w.end()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen
}

// imageEnv returns the sandbox image's configured environment.
func imageEnv(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	img, err := dockerCli.ImageInspect(ctx, sandboxImage)
	if err != nil {
		t.Fatalf("inspecting %s: %v", sandboxImage, err)
	}
	if img.Config == nil {
		return nil
	}
	return img.Config.Env
}

func envNames(env []string) map[string]bool {
	m := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		m[k] = true
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
