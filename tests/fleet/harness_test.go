// Package fleet is the end-to-end suite of a fleet: three `sandboxd
// serve` replicas sharing one PostgreSQL database (Debian's server,
// started by the suite), each with its own data directory and the real
// engine, behind HAProxy (Debian's), as an operator would run them. The
// tests spread work over the replicas, kill one under load, stop the
// database under load, and check what the fleet promises: one audit
// chain, idempotency keys that run once, exact tenant limits, a kill
// switch that reaches every replica, sessions that follow their replica,
// nothing answered lost.
//
// Needs: a Docker engine, the sandbox image (`make image`), PostgreSQL and
// HAProxy (`apt-get install postgresql haproxy`: .ci/run installs them),
// and an S3-compatible server (SeaweedFS, built from its Go module by
// internal/s3test and cached; .ci/run builds it first).
package fleet

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/internal/logbuf"
	"github.com/sandboxd/sandboxd/internal/pgtest"
	"github.com/sandboxd/sandboxd/internal/s3test"
	"github.com/sandboxd/sandboxd/runner"
)

// replica is one sandboxd of the fleet.
type replica struct {
	name    string
	dataDir string
	cfg     e2e.ServerConfig
	mu      sync.Mutex
	srv     *e2e.Server
}

func (r *replica) server() *e2e.Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.srv
}

func (r *replica) url() string { return r.server().URL }

// start (re)starts the replica on the port it had, if any.
func (r *replica) start() error {
	s, err := e2e.Start(r.cfg)
	if err != nil {
		return fmt.Errorf("starting %s: %w\n--- its output ---\n%s", r.name, err, r.cfg.Log.Tail(60))
	}
	r.mu.Lock()
	r.srv = s
	r.mu.Unlock()
	return nil
}

var (
	suite    *e2e.Suite
	pg       *pgtest.Server
	s3       *s3test.Server
	bucket   string
	stateDSN string
	replicas []*replica
	lb       *haproxy
	// Keys: an admin, an agent of tenant acme, another agent of acme, and
	// an agent of tenant limited (20 execs a minute).
	adminKey, agentKey, otherKey, limitedKey string
)

func TestMain(m *testing.M) {
	e2e.Main("sandboxd fleet suite", "sandboxd-fleet-", func(s *e2e.Suite) int { return runMain(m, s) })
}

func runMain(m *testing.M, s *e2e.Suite) int {
	suite = s
	var err error
	if pg, err = pgtest.Start(); err != nil {
		return s.Fatalf("%v", err)
	}
	defer pg.Close()
	if stateDSN, err = pg.NewDatabase(context.Background(), "fleet"); err != nil {
		return s.Fatalf("%v", err)
	}
	if s3, err = s3test.Start(); err != nil {
		return s.Fatalf("%v", err)
	}
	defer s3.Close()
	if bucket, err = s3.NewBucket(context.Background()); err != nil {
		return s.Fatalf("%v", err)
	}
	adminKey, agentKey, otherKey, limitedKey = e2e.NewSecret("sbxfleet_"), e2e.NewSecret("sbxfleet_"), e2e.NewSecret("sbxfleet_"), e2e.NewSecret("sbxfleet_")
	keysFile := filepath.Join(s.Tmp, "keys.yaml")
	if err := e2e.WriteKeys(keysFile,
		e2e.Key{ID: "ops", Tenant: "ops", Roles: []string{"admin"}, Secret: adminKey},
		e2e.Key{ID: "acme-agent", Tenant: "acme", Roles: []string{"agent"}, Secret: agentKey},
		e2e.Key{ID: "acme-other", Tenant: "acme", Roles: []string{"agent"}, Secret: otherKey},
		e2e.Key{ID: "limited-agent", Tenant: "limited", Roles: []string{"agent"}, Secret: limitedKey},
	); err != nil {
		return s.Fatalf("%v", err)
	}
	tenantsFile := filepath.Join(s.Tmp, "tenants.yaml")
	if err := os.WriteFile(tenantsFile, []byte("tenants:\n  limited:\n    exec_per_minute: 20\n    burst: 20\n"), 0o600); err != nil {
		return s.Fatalf("%v", err)
	}
	fleetKey := filepath.Join(s.Tmp, "fleet.key")
	if err := os.WriteFile(fleetKey, []byte(e2e.RandHex(32)), 0o600); err != nil {
		return s.Fatalf("%v", err)
	}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("r%d", i)
		dir, _ := filepath.Abs(filepath.Join(s.Tmp, name))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return s.Fatalf("%v", err)
		}
		r := &replica{name: name, dataDir: dir}
		r.cfg = e2e.ServerConfig{Bin: s.Bin, DataDir: dir, ProfilesDir: filepath.Join(s.Root, "profiles"), KeysFile: keysFile,
			Log: &logbuf.Buffer{}, StartTimeout: 60 * time.Second,
			Env: append(os.Environ(), "SANDBOXD_CAPTURE_S3_ACCESS_KEY="+s3.AccessKey, "SANDBOXD_CAPTURE_S3_SECRET_KEY="+s3.SecretKey),
			Flags: []string{"--state", stateDSN, "--replica", name, "--fleet-key-file", fleetKey, "--tenants-file", tenantsFile,
				"--capture-s3-endpoint", s3.Endpoint, "--capture-s3-bucket", bucket, "--capture-s3-tls=false", "--capture-s3-path-style",
				"--max-runs", "4", "--queue", "64", "--cell-hosts", "12", "--shutdown-grace", "5s"}}
		if err := r.start(); err != nil {
			return s.Fatalf("%v", err)
		}
		replicas = append(replicas, r)
	}
	defer func() {
		for _, r := range replicas {
			if srv := r.server(); srv != nil && !srv.Exited() {
				_ = srv.Stop(e2e.ShutdownTimeout)
			}
		}
	}()
	for _, r := range replicas {
		if code, body, err := r.server().WaitReady(60 * time.Second); err != nil {
			return s.Fatalf("%s not ready (%d): %v: %s\n--- its output ---\n%s", r.name, code, err, body, r.cfg.Log.Tail(60))
		}
	}
	if lb, err = startHAProxy(s.Tmp, replicas); err != nil {
		return s.Fatalf("%v", err)
	}
	defer lb.stop()
	code := m.Run()
	// Every replica stops cleanly and leaves no container behind.
	for _, r := range replicas {
		if err := r.server().Stop(e2e.ShutdownTimeout); err != nil {
			fmt.Fprintf(os.Stderr, "fleet: FAIL: %s: %v\n--- its output ---\n%s\n", r.name, err, r.cfg.Log.Tail(60))
			code = 1
		}
		inst := runner.InstanceID(r.dataDir)
		list := func(ctx context.Context) ([]container.Summary, error) {
			return e2e.ListContainers(ctx, s.Docker, e2e.Instance(inst))
		}
		if left := e2e.WaitGone(e2e.FinalCleanupTimeout, list, e2e.Any); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "fleet: FAIL: %s left %d container(s): %s\n", r.name, len(left), strings.Join(left, ", "))
			code = 1
		}
	}
	if code != 0 {
		b, _ := exec.Command("sh", "-c", "tail -n 40 "+filepath.Join(s.Tmp, "haproxy.log")).CombinedOutput()
		fmt.Fprintf(os.Stderr, "--- haproxy ---\n%s\n", b)
	}
	return code
}

// client is a client of url with key, which waits out 429 BUSY.
func client(url, key string) e2e.Client {
	return e2e.Client{URL: url, Key: key, HTTP: &http.Client{Timeout: 120 * time.Second}}
}

// haproxy is Debian's HAProxy in front of the replicas, on loopback.
type haproxy struct {
	url string
	cmd *exec.Cmd
	log *os.File
}

func startHAProxy(dir string, rs []*replica) (*haproxy, error) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		return nil, fmt.Errorf("HAProxy is not installed: run `apt-get install -y haproxy` (.ci/run does): %w", err)
	}
	port, err := e2e.FreePort()
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, `global
  maxconn 2000
defaults
  mode http
  timeout connect 2s
  timeout client 180s
  timeout server 180s
  option redispatch
  retries 2
frontend api
  bind 127.0.0.1:%d
  default_backend replicas
backend replicas
  balance roundrobin
  option httpchk GET /healthz
`, port)
	for _, r := range rs {
		fmt.Fprintf(&b, "  server %s %s check inter 500ms fall 2 rise 2\n", r.name, strings.TrimPrefix(r.url(), "http://"))
	}
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o600); err != nil {
		return nil, err
	}
	out, err := exec.Command(bin, "-c", "-f", cfg).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("haproxy -c: %v: %s", err, out)
	}
	logf, err := os.Create(filepath.Join(dir, "haproxy.log"))
	if err != nil {
		return nil, err
	}
	h := &haproxy{url: fmt.Sprintf("http://127.0.0.1:%d", port), log: logf}
	h.cmd = exec.Command(bin, "-db", "-f", cfg)
	h.cmd.Stdout, h.cmd.Stderr = logf, logf
	if err := h.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(h.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return h, nil
			}
		}
		if time.Now().After(deadline) {
			h.stop()
			return nil, fmt.Errorf("haproxy did not serve /healthz within 15 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (h *haproxy) stop() {
	if h == nil || h.cmd.Process == nil {
		return
	}
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
	h.log.Close()
}
