// Package tests is sandboxd's black-box end-to-end suite. TestMain builds the
// real binary, starts `sandboxd serve` on a loopback port with a keys file of
// its own, and every test talks to it over HTTP only; the Docker Engine API is
// used to look at the containers sandboxd makes. Nothing here imports the
// service's packages.
//
// Needs: a Docker engine and the sandbox image (`make image`). A missing
// piece fails the suite with a message saying what to do; nothing is skipped.
package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/internal/logbuf"
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

// Timing budgets. They are deliberately generous for a 2-core machine that
// runs up to three sandboxes at once; only the spec's own bounds are asserted.
const (
	// serverStartTimeout bounds building nothing and waiting for /healthz
	// after the child process starts.
	serverStartTimeout = 30 * time.Second
	// readyTimeout bounds the wait for /readyz to say ready (engine reachable,
	// image present).
	readyTimeout = 20 * time.Second
	// shutdownTimeout bounds the wait for the process to exit after SIGTERM:
	// sandboxd's default 15 s grace plus its kill-and-remove phase.
	shutdownTimeout = 60 * time.Second
	// removalTimeout is how long a finished run's container may linger: it is
	// removed asynchronously just after the response (spec: poll ~10 s).
	removalTimeout = 10 * time.Second
	// finalCleanupTimeout is how long after SIGTERM the suite waits for the
	// last of its containers to disappear (spec: ~15 s).
	finalCleanupTimeout = 15 * time.Second
	// requestTimeout bounds any one HTTP request of the suite; the longest run
	// is the default profile's 10 s limit plus container start and teardown.
	requestTimeout = 90 * time.Second
	// maxConcurrentExecs is how many /exec requests the suite's client sends
	// at once (the concurrency test bypasses it on purpose). The server admits
	// 2 runs per core; 3 keeps a 2-core machine busy without queueing for
	// long, and the timing-sensitive tests run alone anyway.
	maxConcurrentExecs = 3
	// max429Retries bounds how often a request turned away with 429 BUSY is
	// sent again after the Retry-After delay.
	max429Retries = 30
)

// Environment shared by the tests, set up by TestMain.
var (
	baseURL      string // http://127.0.0.1:PORT
	serverPort   int
	agentKey     string // roles [agent], tenant acme
	adminKey     string // roles [admin], tenant ops
	noRoleKey    string // roles [] -- empty when the keys loader refused it
	noRoleRefuse string // why the loader refused a key without roles, if it did
	moduleRoot   string
	dataDir      string
	serverLog    = &logBuffer{}
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
	serverStart   time.Time
	// sandboxdBin is the binary TestMain built, for tests that start their
	// own server (lifecycle_test.go).
	sandboxdBin string

	execSem = make(chan struct{}, maxConcurrentExecs)

	seenMu      sync.Mutex
	seenExecIDs = map[string]bool{}
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func fatalf(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "\nsandboxd e2e: FATAL: "+format+"\n", args...)
	return 1
}

func runMain(m *testing.M) (code int) {
	wd, err := os.Getwd()
	if err != nil {
		return fatalf("%v", err)
	}
	moduleRoot = filepath.Dir(wd)
	if _, err := os.Stat(filepath.Join(moduleRoot, "go.mod")); err != nil {
		return fatalf("module root %s (parent of the tests dir) has no go.mod: %v", moduleRoot, err)
	}
	tmp, err := os.MkdirTemp("", "sandboxd-e2e-")
	if err != nil {
		return fatalf("%v", err)
	}
	defer os.RemoveAll(tmp)

	// Docker first: without it nothing below can work.
	dockerCli, err = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return fatalf("docker client: %v", err)
	}
	defer dockerCli.Close()
	{
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := dockerCli.Ping(ctx)
		cancel()
		if err != nil {
			return fatalf("the Docker engine does not answer (%v); the e2e suite needs it", err)
		}
	}

	// Build the real binary.
	bin := filepath.Join(tmp, "sandboxd")
	sandboxdBin = bin
	build := exec.Command(goTool(), "build", "-o", bin, "./cmd/sandboxd")
	build.Dir = moduleRoot
	if out, err := build.CombinedOutput(); err != nil {
		return fatalf("go build ./cmd/sandboxd failed: %v\n%s", err, out)
	}

	// Keys.
	agentKey, adminKey, noRoleKey = newKey(), newKey(), newKey()
	canaryValue = "canary-" + randHex(12)
	dataDir = filepath.Join(tmp, "data")

	proc, exitc, err := startServer(bin, tmp, true)
	if err != nil {
		// Perhaps the keys loader refuses a key without roles: try without
		// it (the 403 test then reports that it cannot be tested).
		firstErr, firstOut := err, serverLog.String()
		proc, exitc, err = startServer(bin, tmp, false)
		if err != nil {
			return fatalf("%v\n--- sandboxd output ---\n%s", firstErr, lastLines(firstOut, 80))
		}
		noRoleRefuse = fmt.Sprintf("%v: %s", firstErr, lastLines(firstOut, 5))
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = proc.Signal(syscall.SIGTERM)
		select {
		case err := <-exitc:
			if err != nil {
				return fmt.Errorf("sandboxd exited with %v after SIGTERM", err)
			}
			return nil
		case <-time.After(shutdownTimeout):
			_ = proc.Kill()
			<-exitc
			return fmt.Errorf("sandboxd did not exit within %v of SIGTERM; killed", shutdownTimeout)
		}
	}
	defer func() { _ = stop() }()

	if err := waitReady(exitc); err != nil {
		return fatalf("%v\n--- sandboxd output ---\n%s", err, serverLog.Tail(80))
	}
	if err := warmUp(); err != nil {
		return fatalf("warm-up run failed: %v\n--- sandboxd output ---\n%s", err, serverLog.Tail(80))
	}

	code = m.Run()

	// After the whole suite: shut down, then no container of ours may remain.
	if err := stop(); err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd e2e: FAIL: %v\n", err)
		code = 1
	}
	if left := waitNoContainers(finalCleanupTimeout); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "sandboxd e2e: FAIL: %d sandbox container(s) still exist after sandboxd exited on SIGTERM and %v of polling: %s\n",
			len(left), finalCleanupTimeout, strings.Join(left, ", "))
		code = 1
	} else {
		fmt.Fprintf(os.Stderr, "sandboxd e2e: no sandboxd.managed=true container of this suite's server remains after shutdown\n")
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "\n--- last lines of sandboxd's output ---\n%s\n", serverLog.Tail(80))
	}
	return code
}

// goTool returns the go command: `go test` puts its own GOROOT/bin first
// on the test's PATH.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func newKey() string { return "sbxtest_" + randHex(24) }

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// writeKeys writes the keys file; withNoRole adds a key that has no roles.
func writeKeys(path string, withNoRole bool) error {
	var b strings.Builder
	b.WriteString("keys:\n")
	fmt.Fprintf(&b, "  - id: agent-1\n    tenant: acme\n    key_sha256: %s\n    roles: [agent]\n", sha256Hex(agentKey))
	fmt.Fprintf(&b, "  - id: admin-1\n    tenant: ops\n    key_sha256: %s\n    roles: [admin]\n", sha256Hex(adminKey))
	if withNoRole {
		fmt.Fprintf(&b, "  - id: norole-1\n    tenant: acme\n    key_sha256: %s\n    roles: []\n", sha256Hex(noRoleKey))
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

// startServer starts sandboxd on a free loopback port and waits for
// /healthz. With withNoRole the keys file carries a key without roles.
func startServer(bin, tmp string, withNoRole bool) (*os.Process, <-chan error, error) {
	keysFile := filepath.Join(tmp, "keys.yaml")
	if err := writeKeys(keysFile, withNoRole); err != nil {
		return nil, nil, err
	}
	if !withNoRole {
		noRoleKey = ""
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		serverLog.Reset()
		cmd := exec.Command(bin, "serve",
			"--addr", fmt.Sprintf("127.0.0.1:%d", port),
			"--data-dir", dataDir,
			"--profiles-dir", filepath.Join(moduleRoot, "profiles"),
			"--keys-file", keysFile)
		serverEnv = append(os.Environ(), canaryName+"="+canaryValue)
		cmd.Env = serverEnv
		cmd.Stdout = serverLog
		cmd.Stderr = serverLog
		serverStart = time.Now()
		if err := cmd.Start(); err != nil {
			return nil, nil, fmt.Errorf("starting sandboxd: %w", err)
		}
		exitc := make(chan error, 1)
		go func() { exitc <- cmd.Wait() }()
		baseURL = fmt.Sprintf("http://127.0.0.1:%d", port)
		serverPort = port
		err = waitHealthy(exitc)
		if err == nil {
			return cmd.Process, exitc, nil
		}
		_ = cmd.Process.Kill()
		lastErr = err
		if !strings.Contains(serverLog.String(), "address already in use") {
			break
		}
	}
	return nil, nil, lastErr
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func waitHealthy(exitc <-chan error) error {
	deadline := time.Now().Add(serverStartTimeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-exitc:
			return fmt.Errorf("sandboxd exited before it was healthy: %v", err)
		default:
		}
		resp, err := http.Get(baseURL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("GET /healthz did not answer 200 within %v", serverStartTimeout)
}

func waitReady(exitc <-chan error) error {
	deadline := time.Now().Add(readyTimeout)
	var last string
	for time.Now().Before(deadline) {
		select {
		case err := <-exitc:
			return fmt.Errorf("sandboxd exited while waiting for /readyz: %v", err)
		default:
		}
		resp, err := http.Get(baseURL + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		time.Sleep(250 * time.Millisecond)
	}
	hint := ""
	if strings.Contains(last, "image") {
		hint = fmt.Sprintf("\nthe sandbox image %s is missing or unusable: run `make image` in %s", sandboxImage, moduleRoot)
	}
	return fmt.Errorf("GET /readyz did not answer 200 within %v; last answer: %s%s", readyTimeout, last, hint)
}

// warmUp runs one short job while watching the engine, to learn the
// instance label of this server's containers and to load the image into the
// page cache before the timing-sensitive tests.
func warmUp() error {
	req := execRequest{Language: "python", Code: "import time\ntime.sleep(1)\nprint('warm')"}
	w := startWatch()
	res, err := rawExec(context.Background(), agentKey, req, "warmup")
	seen := w.stop()
	if err != nil {
		return err
	}
	if res.Status != http.StatusOK {
		return fmt.Errorf("POST /exec answered %d: %s", res.Status, res.Body)
	}
	var r execResponse
	if err := json.Unmarshal(res.Body, &r); err != nil {
		return err
	}
	noteExecID(r.ID)
	if r.Status != "ok" || r.Stdout != "warm\n" {
		return fmt.Errorf("warm-up run: status %q stdout %q stderr %q message %q", r.Status, r.Stdout, r.Stderr, r.Message)
	}
	info, ok := seen[r.ID]
	if !ok {
		return fmt.Errorf("no container labelled sandboxd.exec-id=%s was seen while the 1 s warm-up run went on", r.ID)
	}
	instanceLabel = info.Config.Labels["sandboxd.instance"]
	fmt.Fprintf(os.Stderr, "sandboxd e2e: server on %s, warm-up run %v (instance label %q)\n", baseURL, res.Wall.Round(time.Millisecond), instanceLabel)
	return nil
}

// ---------------------------------------------------------------------------
// Server output capture.

// logBuffer keeps everything sandboxd wrote, for failure diagnostics.
type logBuffer struct{ logbuf.Buffer }

// Grep returns the lines that contain any of needles (at most max).
func (l *logBuffer) Grep(needles []string, max int) string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		for _, n := range needles {
			if n != "" && strings.Contains(line, n) {
				out = append(out, line)
				break
			}
		}
	}
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return strings.Join(out, "\n")
}

// ---------------------------------------------------------------------------
// HTTP client.

type execRequest struct {
	Language string            `json:"language,omitempty"`
	Code     string            `json:"code"`
	Stdin    string            `json:"stdin,omitempty"`
	Files    []inFile          `json:"files,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Profile  string            `json:"profile,omitempty"`
	Limits   map[string]any    `json:"limits,omitempty"`
}

type inFile struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

func py(code string) execRequest { return execRequest{Language: "python", Code: code} }

type execLimits struct {
	TimeoutMS   int64   `json:"timeout_ms"`
	MemoryMB    int64   `json:"memory_mb"`
	CPUs        float64 `json:"cpus"`
	Pids        int64   `json:"pids"`
	OutputBytes int64   `json:"output_bytes"`
	TmpfsMB     int64   `json:"tmpfs_mb"`
}

type outFile struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Mode    string `json:"mode"`
	Content string `json:"content"`
}

type skippedFile struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

type execResponse struct {
	ID              string        `json:"id"`
	Status          string        `json:"status"`
	ExitCode        int           `json:"exit_code"`
	Signal          string        `json:"signal"`
	Message         string        `json:"message"`
	Stdout          string        `json:"stdout"`
	Stderr          string        `json:"stderr"`
	StdoutBase64    *string       `json:"stdout_base64"`
	StderrBase64    *string       `json:"stderr_base64"`
	StdoutTruncated bool          `json:"stdout_truncated"`
	StderrTruncated bool          `json:"stderr_truncated"`
	DurationMS      int64         `json:"duration_ms"`
	Usage           execUsage     `json:"usage"`
	Files           []outFile     `json:"files"`
	SkippedFiles    []skippedFile `json:"skipped_files"`
	Limits          execLimits    `json:"limits"`
	Profile         struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"profile"`
	Image string `json:"image"`
}

type execUsage struct {
	UserCPUMS int64 `json:"user_cpu_ms"`
	SysCPUMS  int64 `json:"sys_cpu_ms"`
	MaxRSSKB  int64 `json:"max_rss_kb"`
}

func (r *execResponse) file(path string) *outFile {
	for i := range r.Files {
		if r.Files[i].Path == path {
			return &r.Files[i]
		}
	}
	return nil
}

func (r *execResponse) skipped(path string) *skippedFile {
	for i := range r.SkippedFiles {
		if r.SkippedFiles[i].Path == path {
			return &r.SkippedFiles[i]
		}
	}
	return nil
}

type apiError struct {
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	} `json:"error"`
}

// httpResult is one HTTP exchange.
type httpResult struct {
	Method, Path string
	ReqBody      []byte
	Status       int
	Header       http.Header
	Body         []byte
	Wall         time.Duration // of the last attempt
}

// String describes the exchange for failure messages.
func (h *httpResult) String() string {
	return fmt.Sprintf("request: %s %s %s\nresponse: %d %s", h.Method, h.Path, clip(h.ReqBody, 1500), h.Status, clip(h.Body, 3000))
}

func clip(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return fmt.Sprintf("%s…[%d bytes in all]", b[:n], len(b))
}

var httpClient = &http.Client{Timeout: requestTimeout}

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
		// sandboxd's output reaches serverLog through a pipe and a copying
		// goroutine; give lines written just before the response a moment.
		time.Sleep(300 * time.Millisecond)
		c.mu.Lock()
		ids := append([]string(nil), c.ids...)
		c.mu.Unlock()
		if lines := serverLog.Grep(ids, 60); lines != "" {
			t.Logf("sandboxd log lines of this test's requests:\n%s", lines)
		} else {
			t.Logf("last lines of sandboxd's log:\n%s", serverLog.Tail(30))
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

func noteExecID(id string) {
	if id == "" {
		return
	}
	seenMu.Lock()
	seenExecIDs[id] = true
	seenMu.Unlock()
}

// do sends one request. body is marshalled to JSON unless it is []byte or
// string, which are sent as they are. headers may set Content-Type and
// Authorization ("" removes a header).
func (c *tc) do(ctx context.Context, method, path string, body any, headers map[string]string) (*httpResult, error) {
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

func sendRaw(ctx context.Context, method, path string, raw []byte, hasBody bool, headers map[string]string, reqID string) (*httpResult, error) {
	res := &httpResult{Method: method, Path: path, ReqBody: raw}
	for attempt := 0; ; attempt++ {
		var rd io.Reader
		if hasBody {
			rd = bytes.NewReader(raw)
		}
		req, err := http.NewRequestWithContext(ctx, method, baseURL+path, rd)
		if err != nil {
			return nil, err
		}
		if hasBody {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("X-Request-Id", reqID)
		for k, v := range headers {
			if v == "" {
				req.Header.Del(k)
			} else {
				req.Header.Set(k, v)
			}
		}
		start := time.Now()
		resp, err := httpClient.Do(req)
		if err != nil {
			return res, err
		}
		res.Body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		res.Wall = time.Since(start)
		res.Status, res.Header = resp.StatusCode, resp.Header
		if err != nil {
			return res, err
		}
		if res.Status != http.StatusTooManyRequests || headers["X-No-Retry"] != "" || attempt >= max429Retries {
			return res, nil
		}
		wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		wait = min(max(wait, 1), 5)
		select {
		case <-time.After(time.Duration(wait) * time.Second):
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
}

// rawExec posts an exec request with key, through the suite's concurrency
// limit, retrying on 429.
func rawExec(ctx context.Context, key string, req any, reqID string) (*httpResult, error) {
	raw, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	select {
	case execSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-execSem }()
	return sendRaw(ctx, http.MethodPost, "/exec", raw, true, map[string]string{"Authorization": "Bearer " + key}, reqID)
}

// post sends an exec request with the agent key and returns the exchange.
func (c *tc) post(req any) *httpResult {
	c.t.Helper()
	return c.postCtx(context.Background(), agentKey, req)
}

func (c *tc) postCtx(ctx context.Context, key string, req any) *httpResult {
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
func (c *tc) exec(req any) (*execResponse, *httpResult) {
	c.t.Helper()
	res := c.post(req)
	return c.decodeExec(res), res
}

func (c *tc) decodeExec(res *httpResult) *execResponse {
	c.t.Helper()
	if res.Status != http.StatusOK {
		c.t.Fatalf("want 200 for a run that started\n%s", res)
	}
	var r execResponse
	if err := json.Unmarshal(res.Body, &r); err != nil {
		c.t.Fatalf("200 body is not a JSON exec response: %v\n%s", err, res)
	}
	c.note(r.ID)
	noteExecID(r.ID)
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
		if !cleanRelPath(p) {
			c.t.Errorf("the response names %q, which is not a clean path inside /sandbox/out\n%s", p, clip(res.Body, 2000))
		}
	}
	return &r
}

func filePaths(fs []outFile) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Path)
	}
	return out
}

func skippedPaths(fs []skippedFile) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Path)
	}
	return out
}

// cleanRelPath reports whether p is relative, without empty, "." or ".."
// elements.
func cleanRelPath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") {
		return false
	}
	for _, e := range strings.Split(p, "/") {
		if e == "" || e == "." || e == ".." {
			return false
		}
	}
	return true
}

// execStatus runs req and requires the given run status.
func (c *tc) execStatus(req any, status string) (*execResponse, *httpResult) {
	c.t.Helper()
	r, res := c.exec(req)
	if r.Status != status {
		c.t.Fatalf("status %q, want %q\n%s", r.Status, status, res)
	}
	return r, res
}

// wantError requires an error response with status, code and (if field is
// not "*") field, and returns the message.
func wantError(t *testing.T, res *httpResult, status int, code, field string) string {
	t.Helper()
	if res.Status != status {
		t.Errorf("HTTP status %d, want %d\n%s", res.Status, status, res)
		return ""
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error Content-Type %q, want application/json\n%s", ct, res)
	}
	var e apiError
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
		t.Fatalf("not standard base64: %v: %q", err, clip([]byte(s), 200))
	}
	return b
}

// getHealth requires GET path to answer 200.
func wantHealthy(t *testing.T) {
	t.Helper()
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := httpClient.Get(baseURL + p)
		if err != nil {
			t.Fatalf("GET %s: %v", p, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s, want 200", p, resp.StatusCode, body)
		}
	}
}

// ---------------------------------------------------------------------------
// Docker helpers.

// ourContainers lists the sandboxd.managed=true containers (running or not)
// that belong to this suite's server.
func ourContainers(ctx context.Context) ([]container.Summary, error) {
	args := filters.NewArgs(filters.Arg("label", "sandboxd.managed=true"))
	if instanceLabel != "" {
		args.Add("label", "sandboxd.instance="+instanceLabel)
	}
	list, err := dockerCli.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return nil, err
	}
	if instanceLabel != "" {
		return list, nil
	}
	// No instance label: keep those whose exec id this suite saw or that
	// were made after this server started.
	seenMu.Lock()
	defer seenMu.Unlock()
	var out []container.Summary
	for _, c := range list {
		if seenExecIDs[c.Labels["sandboxd.exec-id"]] || c.Created >= serverStart.Unix() {
			out = append(out, c)
		}
	}
	return out, nil
}

func describeContainer(c container.Summary) string {
	name := ""
	if len(c.Names) > 0 {
		name = c.Names[0]
	}
	return fmt.Sprintf("%s %s (%s, exec-id %s)", c.ID[:12], name, c.State, c.Labels["sandboxd.exec-id"])
}

// waitNoContainers polls until none of this suite's containers exist and
// returns those left at the deadline.
func waitNoContainers(timeout time.Duration) []string {
	return waitGone(timeout, func(c container.Summary) bool { return true })
}

// waitGone polls until no container of ours matching keep exists.
func waitGone(timeout time.Duration, keep func(container.Summary) bool) []string {
	deadline := time.Now().Add(timeout)
	var left []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		list, err := ourContainers(ctx)
		cancel()
		left = left[:0]
		if err != nil {
			left = append(left, "listing containers: "+err.Error())
		}
		for _, c := range list {
			if keep(c) {
				left = append(left, describeContainer(c))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitExecGone requires the container of exec id to disappear within
// removalTimeout.
func waitExecGone(t *testing.T, id string) {
	t.Helper()
	left := waitGone(removalTimeout, func(c container.Summary) bool { return c.Labels["sandboxd.exec-id"] == id })
	if len(left) > 0 {
		t.Errorf("container of exec %s still exists %v after its response: %s", id, removalTimeout, strings.Join(left, ", "))
	}
}

// watch records, while it runs, the inspection of every container of ours
// that appears, keyed by its sandboxd.exec-id label.
type watch struct {
	done chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	seen map[string]container.InspectResponse
	byID map[string]string // container id -> exec id
	errs []string
}

func startWatch() *watch {
	w := &watch{done: make(chan struct{}), seen: map[string]container.InspectResponse{}, byID: map[string]string{}}
	// Containers that exist already are watched too: with the warm pool on,
	// the run takes a container started before the request. Callers look
	// containers up by their exec id, so others do no harm.
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			w.poll()
			select {
			case <-w.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
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
		w.byID[c.ID] = c.Labels["sandboxd.exec-id"]
		w.seen[c.Labels["sandboxd.exec-id"]] = info
		w.mu.Unlock()
	}
}

func (w *watch) stop() map[string]container.InspectResponse {
	close(w.done)
	w.wg.Wait()
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
