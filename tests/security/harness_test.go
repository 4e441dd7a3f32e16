// Package security is sandboxd's escape suite: a table of attacks, each a
// Python program sent to a real `sandboxd serve` through POST /exec, with the
// exact status it must end with and what the code could and could not do.
//
// TestMain builds ./cmd/sandboxd, writes a keys file, starts the server on a
// free loopback port with a data directory of its own and the repository's
// profiles, waits for /readyz, and at the end sends SIGTERM and checks that no
// container of this server (label sandboxd.managed=true and its
// sandboxd.instance) remains. The Docker Engine API is used only to look.
//
// Needs: a Docker engine and the sandbox image (`make image`). A missing
// piece fails the suite with a message saying what to do.
package security

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/internal/logbuf"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/runner"
)

const (
	serverStartTimeout = 30 * time.Second
	readyTimeout       = 30 * time.Second
	shutdownTimeout    = 60 * time.Second
	// finalCleanupTimeout: how long after sandboxd exits the suite waits for
	// the last of its containers to disappear.
	finalCleanupTimeout = 15 * time.Second
	// removalTimeout: how long a finished run's container may linger (it is
	// removed off the request path).
	removalTimeout = 10 * time.Second
	// requestTimeout bounds one HTTP request: the longest run is the
	// profile's 10 s limit plus container start and teardown under load.
	requestTimeout = 90 * time.Second
	// maxConcurrentExecs caps the suite's /exec requests in flight. The
	// server admits 2 runs per core and queues a few more; 3 keeps a 2-core
	// machine busy without making the timing-bound cases wait for CPU.
	maxConcurrentExecs = 3
	max429Retries      = 30
)

var (
	baseURL    string
	serverPort int
	agentKey   string
	moduleRoot string
	dataDir    string
	instance   string // sandboxd.instance label of this server's containers
	serverLog  = &logBuffer{}
	dockerCli  *client.Client
	// suiteNonce is part of every name an attack tries to create outside the
	// sandbox (host files, host processes), so the suite can look for them.
	suiteNonce = "sbxesc" + randHex(6)
	// hostSecrets are put into sandboxd's environment only; no sandbox may
	// see their values.
	hostSecrets = map[string]string{
		"SBXSEC_HOST_CANARY":    "canary-" + randHex(10),
		"AWS_SECRET_ACCESS_KEY": "canary-aws-" + randHex(10),
		"GITHUB_TOKEN":          "canary-gh-" + randHex(10),
	}
	readyBody []byte // the last /readyz answer
	// profSet is the repository's profiles, as the server loads them: the
	// checks use each profile's caps.
	profSet *profiles.Set
	execSem = make(chan struct{}, maxConcurrentExecs)

	seenMu      sync.Mutex
	seenExecIDs = map[string]bool{}
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func fatalf(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "\nsandboxd escape suite: FATAL: "+format+"\n", args...)
	return 1
}

func runMain(m *testing.M) (code int) {
	wd, err := os.Getwd()
	if err != nil {
		return fatalf("%v", err)
	}
	moduleRoot = filepath.Dir(filepath.Dir(wd))
	if _, err := os.Stat(filepath.Join(moduleRoot, "go.mod")); err != nil {
		return fatalf("module root %s has no go.mod: %v", moduleRoot, err)
	}
	tmp, err := os.MkdirTemp("", "sandboxd-escape-")
	if err != nil {
		return fatalf("%v", err)
	}
	defer os.RemoveAll(tmp)

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
			return fatalf("the Docker engine does not answer (%v); the escape suite needs it", err)
		}
	}

	if profSet, err = profiles.Load(filepath.Join(moduleRoot, "profiles")); err != nil {
		return fatalf("loading %s/profiles: %v", moduleRoot, err)
	}

	bin := filepath.Join(tmp, "sandboxd")
	build := exec.Command(goTool(), "build", "-o", bin, "./cmd/sandboxd")
	build.Dir = moduleRoot
	if out, err := build.CombinedOutput(); err != nil {
		return fatalf("go build ./cmd/sandboxd failed: %v\n%s", err, out)
	}

	agentKey = "sbxsec_" + randHex(24)
	keysFile := filepath.Join(tmp, "keys.yaml")
	keys := fmt.Sprintf("keys:\n  - id: escape-agent\n    tenant: escape\n    key_sha256: %s\n    roles: [agent]\n", sha256Hex(agentKey))
	if err := os.WriteFile(keysFile, []byte(keys), 0o600); err != nil {
		return fatalf("%v", err)
	}
	dataDir = filepath.Join(tmp, "data")
	absData, err := filepath.Abs(dataDir)
	if err != nil {
		return fatalf("%v", err)
	}
	instance = runner.InstanceID(absData)

	proc, exitc, err := startServer(bin, keysFile)
	if err != nil {
		return fatalf("%v\n--- sandboxd output ---\n%s", err, serverLog.Tail(80))
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

	if err := stop(); err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd escape suite: FAIL: %v\n", err)
		code = 1
	}
	if left := waitContainers(finalCleanupTimeout, func(container.Summary) bool { return true }); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "sandboxd escape suite: FAIL: %d container(s) of this server (instance %s) remain after it exited on SIGTERM: %s\n",
			len(left), instance, strings.Join(left, ", "))
		code = 1
	} else {
		fmt.Fprintf(os.Stderr, "sandboxd escape suite: no container of this server (instance %s) remains after shutdown\n", instance)
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "\n--- last lines of sandboxd's output ---\n%s\n", serverLog.Tail(60))
	}
	return code
}

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

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func startServer(bin, keysFile string) (*os.Process, <-chan error, error) {
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
		env := os.Environ()
		for k, v := range hostSecrets {
			env = append(env, k+"="+v)
		}
		cmd.Env = env
		cmd.Stdout = serverLog
		cmd.Stderr = serverLog
		if err := cmd.Start(); err != nil {
			return nil, nil, fmt.Errorf("starting sandboxd: %w", err)
		}
		exitc := make(chan error, 1)
		go func() { exitc <- cmd.Wait() }()
		baseURL = fmt.Sprintf("http://127.0.0.1:%d", port)
		serverPort = port
		if err = waitHealthy(exitc); err == nil {
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
		if resp, err := http.Get(baseURL + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("GET /healthz did not answer 200 within %v", serverStartTimeout)
}

// readyCheck is one entry of /readyz's "checks".
type readyCheck struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

type readyAnswer struct {
	Status string       `json:"status"`
	Checks []readyCheck `json:"checks"`
}

// runtimeCheck reports whether a /readyz check is about the gVisor runtime
// or the strict profile, which the default profile does not need.
func runtimeCheck(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "runsc") || strings.Contains(n, "gvisor") || strings.Contains(n, "runtime") || strings.Contains(n, "strict")
}

// waitReady waits for /readyz to answer 200. A 503 whose only failing
// checks concern the gVisor runtime is accepted after the wait: the default
// profile still works and the strict profile is then left out (and logged).
func waitReady(exitc <-chan error) error {
	deadline := time.Now().Add(readyTimeout)
	var last string
	onlyRuntime := false
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
			readyBody = body
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, body)
			var ra readyAnswer
			onlyRuntime = false
			if json.Unmarshal(body, &ra) == nil && len(ra.Checks) > 0 {
				onlyRuntime = true
				for _, c := range ra.Checks {
					if !c.OK && !runtimeCheck(c.Name) {
						onlyRuntime = false
					}
				}
			}
		} else {
			last = err.Error()
		}
		time.Sleep(250 * time.Millisecond)
	}
	if onlyRuntime {
		fmt.Fprintf(os.Stderr, "sandboxd escape suite: /readyz is 503 only for runtime checks (%s); going on with the default profile\n", last)
		return nil
	}
	return fmt.Errorf("GET /readyz did not answer 200 within %v; last answer: %s (a missing image: run `make image` in %s)", readyTimeout, last, moduleRoot)
}

func warmUp() error {
	res, err := rawExec(context.Background(), execRequest{Language: "python", Code: "print('warm')"}, "escape-warmup")
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
	fmt.Fprintf(os.Stderr, "sandboxd escape suite: server on %s (instance %s), warm-up run %v\n", baseURL, instance, res.Wall.Round(time.Millisecond))
	return nil
}

// ---------------------------------------------------------------------------
// Server output.

// logBuffer keeps everything sandboxd wrote, for failure diagnostics.
type logBuffer struct{ logbuf.Buffer }

// Grep returns the log lines that mention needle (at most max, the last).
func (l *logBuffer) Grep(needle string, max int) string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if needle != "" && strings.Contains(line, needle) {
			out = append(out, line)
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
	Language string            `json:"language"`
	Code     string            `json:"code"`
	Stdin    string            `json:"stdin,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Profile  string            `json:"profile,omitempty"`
	Limits   map[string]any    `json:"limits,omitempty"`
}

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
	Mode    any    `json:"mode"`
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

// httpResult is one HTTP exchange.
type httpResult struct {
	Status int
	Header http.Header
	Body   []byte
	Wall   time.Duration // of the last attempt
	Tries  int
}

func clip(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return fmt.Sprintf("%s…[%d bytes in all]", b[:n], len(b))
}

var httpClient = &http.Client{Timeout: requestTimeout}

// rawExec posts an exec request through the suite's concurrency cap and
// retries a 429 BUSY after its Retry-After.
func rawExec(ctx context.Context, req execRequest, reqID string) (*httpResult, error) {
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
	res := &httpResult{}
	for attempt := 0; ; attempt++ {
		hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/exec", bytes.NewReader(raw))
		if err != nil {
			return nil, err
		}
		hreq.Header.Set("Content-Type", "application/json")
		hreq.Header.Set("Authorization", "Bearer "+agentKey)
		hreq.Header.Set("X-Request-Id", reqID)
		start := time.Now()
		resp, err := httpClient.Do(hreq)
		if err != nil {
			return res, err
		}
		res.Body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		res.Wall = time.Since(start)
		res.Status, res.Header, res.Tries = resp.StatusCode, resp.Header, attempt+1
		if err != nil {
			return res, err
		}
		if res.Status != http.StatusTooManyRequests || attempt >= max429Retries {
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

func noteExecID(id string) {
	if id == "" {
		return
	}
	seenMu.Lock()
	seenExecIDs[id] = true
	seenMu.Unlock()
}

// getOK requires GET path to answer 200 and returns the body.
func getOK(t *testing.T, path string) []byte {
	t.Helper()
	resp, err := httpClient.Get(baseURL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s, want 200", path, resp.StatusCode, body)
	}
	return body
}

// ---------------------------------------------------------------------------
// Docker helpers.

// ourContainers lists the containers (running or not) of this server.
func ourContainers(ctx context.Context) ([]container.Summary, error) {
	args := filters.NewArgs(
		filters.Arg("label", runner.LabelManaged+"=true"),
		filters.Arg("label", runner.LabelInstance+"="+instance))
	return dockerCli.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
}

func describeContainer(c container.Summary) string {
	name := ""
	if len(c.Names) > 0 {
		name = c.Names[0]
	}
	return fmt.Sprintf("%s %s (%s, exec-id %s)", c.ID[:12], name, c.State, c.Labels[runner.LabelExecID])
}

// waitContainers polls until no container of ours matching sel exists and
// returns those left at the deadline.
func waitContainers(timeout time.Duration, sel func(container.Summary) bool) []string {
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
			if sel(c) {
				left = append(left, describeContainer(c))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------
// Host inspection.

// hostProcsMatching lists host processes whose command line contains s.
func hostProcsMatching(s string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(b, []byte(s)) {
			continue
		}
		out = append(out, e.Name()+": "+strings.ReplaceAll(string(bytes.TrimRight(b, "\x00")), "\x00", " "))
	}
	return out
}

// hostFilesMatching lists files in the host's usual writable places whose
// name contains s.
func hostFilesMatching(s string) []string {
	var out []string
	for _, dir := range []string{"/", "/tmp", "/var/tmp", "/dev/shm", "/run", "/root"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.Contains(e.Name(), s) {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	return out
}

// hostAddrs lists the host's own addresses, loopback excluded.
func hostAddrs() []string {
	var out []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() {
			continue
		}
		out = append(out, ipn.IP.String())
	}
	return out
}

// hostAbstractSockets lists the abstract unix socket names bound on the
// host (from /proc/net/unix of the host's network namespace).
func hostAbstractSockets() []string {
	b, _ := os.ReadFile("/proc/net/unix")
	seen := map[string]bool{}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 8 || !strings.HasPrefix(f[7], "@") || seen[f[7]] {
			continue
		}
		seen[f[7]] = true
		out = append(out, f[7][1:])
	}
	return out
}

// cpuWatch samples, from the engine, the CPU time of this server's running
// containers while a run goes on: the host's own measure of the quota, the
// same under runc and gVisor (whose in-sandbox accounting is virtual).
type cpuWatch struct {
	done        chan struct{}
	wg          sync.WaitGroup
	mu          sync.Mutex
	first, last map[string]cpuSample
}

type cpuSample struct {
	at        time.Time
	ns        uint64
	throttled uint64
}

func startCPUWatch() *cpuWatch {
	w := &cpuWatch{done: make(chan struct{}), first: map[string]cpuSample{}, last: map[string]cpuSample{}}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		seen := map[string]bool{}
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			list, err := ourContainers(ctx)
			cancel()
			if err == nil {
				for _, c := range list {
					if c.State == "running" && !seen[c.ID] {
						seen[c.ID] = true
						w.wg.Add(1)
						go w.sample(c.ID)
					}
				}
			}
			select {
			case <-w.done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return w
}

// sample reads one container's CPU counters until the watch stops or the
// container is gone. A one-shot stats call takes a good part of a second
// on a loaded engine, so every container has its own sampler.
func (w *cpuWatch) sample(id string) {
	defer w.wg.Done()
	for {
		select {
		case <-w.done:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rd, err := dockerCli.ContainerStatsOneShot(ctx, id)
		if err != nil {
			cancel()
			return
		}
		var st container.StatsResponse
		err = json.NewDecoder(rd.Body).Decode(&st)
		rd.Body.Close()
		cancel()
		if err != nil {
			return
		}
		if st.Read.IsZero() || st.CPUStats.CPUUsage.TotalUsage == 0 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		s := cpuSample{at: st.Read, ns: st.CPUStats.CPUUsage.TotalUsage, throttled: st.CPUStats.ThrottlingData.ThrottledPeriods}
		w.mu.Lock()
		if _, ok := w.first[id]; !ok {
			w.first[id] = s
		}
		w.last[id] = s
		w.mu.Unlock()
	}
}

// stop returns the highest CPU rate (CPUs) any container showed over a
// sampled window of at least minWindow, with that window and the CFS
// periods it was throttled in.
func (w *cpuWatch) stop(minWindow time.Duration) (rate float64, window time.Duration, throttled uint64) {
	close(w.done)
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, f := range w.first {
		l := w.last[id]
		d := l.at.Sub(f.at)
		if d < minWindow || l.ns < f.ns {
			continue
		}
		if r := float64(l.ns-f.ns) / float64(d.Nanoseconds()); r > rate {
			rate, window, throttled = r, d, l.throttled-f.throttled
		}
	}
	return rate, window, throttled
}
