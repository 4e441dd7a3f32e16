package engine

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
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/logbuf"
)

// Server timing budgets.
const (
	buildTimeout       = 5 * time.Minute
	serverStartTimeout = 30 * time.Second
	// serverStopTimeout: sandboxd's shutdown grace (set to 5 s below) plus
	// its kill-and-remove phase.
	serverStopTimeout = 60 * time.Second
	requestTimeout    = 60 * time.Second
)

// sandboxd is a `sandboxd serve` of the test's own, talking to the private
// engine.
type sandboxd struct {
	t    *testing.T
	url  string
	key  string
	log  *logbuf.Buffer
	cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's, once done is closed
}

// moduleRoot is the module's directory: the test runs in tests/engine.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("%s (two levels above the test's directory) has no go.mod: %v", root, err)
	}
	return root
}

// buildSandboxd builds ./cmd/sandboxd into dir.
func buildSandboxd(t *testing.T, root, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "sandboxd")
	goCmd := "go"
	if p, err := exec.LookPath("go"); err == nil { // go test puts its own first on PATH
		goCmd = p
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	build := exec.CommandContext(ctx, goCmd, "build", "-o", bin, "./cmd/sandboxd")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/sandboxd failed: %v\n%s", err, out)
	}
	return bin
}

// startSandboxd starts sandboxd on a free loopback port with the module's
// profiles, a keys file with one agent key and the warm pool on, against
// the engine at dockerHost, and waits for /healthz. Its clean-up stops it.
func startSandboxd(t *testing.T, bin, root, dir, dockerHost string, poolSize int) *sandboxd {
	t.Helper()
	var k [24]byte
	_, _ = rand.Read(k[:])
	key := "sbxtest_" + hex.EncodeToString(k[:])
	sum := sha256.Sum256([]byte(key))
	keys := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(keys, []byte(fmt.Sprintf("keys:\n  - id: engine-test\n    tenant: engine-test\n    key_sha256: %x\n    roles: [agent]\n", sum)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &sandboxd{t: t, key: key, log: &logbuf.Buffer{}}
	for attempt := 0; attempt < 3; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		s.log.Reset()
		s.url = "http://" + addr
		s.cmd = exec.Command(bin, "serve",
			"--addr", addr,
			"--data-dir", filepath.Join(dir, "data"),
			"--profiles-dir", filepath.Join(root, "profiles"),
			"--keys-file", keys,
			"--pool-size", fmt.Sprint(poolSize),
			// The most equal to the least: the target stays poolSize
			// whatever the request rate, so "back to the target" is exact.
			"--pool-max", fmt.Sprint(poolSize),
			"--egress-port", "0",
			"--shutdown-grace", "5s",
			"--log-level", "info")
		s.cmd.Env = cleanEnv([]string{"DOCKER_HOST=" + dockerHost})
		s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
		s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := s.cmd.Start(); err != nil {
			t.Fatalf("starting sandboxd: %v", err)
		}
		s.done = make(chan struct{})
		cmd, done := s.cmd, s.done
		go func() { s.err = cmd.Wait(); close(done) }()
		err = s.waitHealthy()
		if err == nil {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("--- last lines of sandboxd's output ---\n%s", lastLines(s.log.String(), 60))
				}
				keepLog(t, "sandboxd.log", s.log.String())
				if err := s.stop(); err != nil {
					t.Error(err)
				}
			})
			return s
		}
		_ = s.cmd.Process.Kill()
		<-s.done
		if !strings.Contains(s.log.String(), "address already in use") {
			t.Fatalf("%v\n--- sandboxd output ---\n%s", err, lastLines(s.log.String(), 60))
		}
	}
	t.Fatalf("sandboxd found no free port in 3 attempts")
	return nil
}

func (s *sandboxd) waitHealthy() error {
	deadline := time.Now().Add(serverStartTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("sandboxd exited before it was healthy: %v", s.err)
		default:
		}
		resp, err := http.Get(s.url + "/healthz")
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

// stop sends SIGTERM and waits for the exit; it is idempotent.
func (s *sandboxd) stop() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		if s.err != nil {
			return fmt.Errorf("sandboxd exited with %v after SIGTERM", s.err)
		}
		return nil
	case <-time.After(serverStopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("sandboxd did not exit within %v of SIGTERM; killed", serverStopTimeout)
	}
}

// execAnswer is one POST /exec as the client saw it.
type execAnswer struct {
	HTTP    int // 0: no answer (transport error in Err)
	Header  http.Header
	Body    []byte
	Wall    time.Duration
	Err     error
	Result  execResult
	Problem struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
}

type execResult struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	ExitCode int    `json:"exit_code"`
	Message  string `json:"message"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

func (a *execAnswer) String() string {
	if a.HTTP == 0 {
		return fmt.Sprintf("no answer after %v: %v", a.Wall.Round(time.Millisecond), a.Err)
	}
	return fmt.Sprintf("HTTP %d after %v: %s", a.HTTP, a.Wall.Round(time.Millisecond), strings.TrimSpace(string(a.Body)))
}

// exec runs code with the default profile, bounded by within.
func (s *sandboxd) exec(code string, within time.Duration) *execAnswer {
	body, _ := json.Marshal(map[string]any{"language": "python", "code": code})
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/exec", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.key)
	req.Header.Set("Content-Type", "application/json")
	a := &execAnswer{}
	began := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		a.Body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		a.HTTP, a.Header = resp.StatusCode, resp.Header
	}
	a.Wall, a.Err = time.Since(began), err
	if a.HTTP == http.StatusOK {
		_ = json.Unmarshal(a.Body, &a.Result)
	} else if a.HTTP != 0 {
		var e struct {
			Error *json.RawMessage `json:"error"`
		}
		if json.Unmarshal(a.Body, &e) == nil && e.Error != nil {
			_ = json.Unmarshal(*e.Error, &a.Problem)
		}
	}
	return a
}

// readyz returns /readyz's status and whether its "engine" check passed.
func (s *sandboxd) readyz() (int, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	var body struct {
		Checks []struct {
			Name string `json:"name"`
			OK   bool   `json:"ok"`
		} `json:"checks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return resp.StatusCode, false, err
	}
	for _, c := range body.Checks {
		if c.Name == "engine" {
			return resp.StatusCode, c.OK, nil
		}
	}
	return resp.StatusCode, false, fmt.Errorf("/readyz has no engine check")
}

// sandboxKind returns the desc of the "sandbox" entry of the answer's
// Server-Timing header ("warm" or "cold"), or "" without one.
func sandboxKind(h http.Header) string {
	for _, v := range h.Values("Server-Timing") {
		for _, entry := range strings.Split(v, ",") {
			parts := strings.Split(strings.TrimSpace(entry), ";")
			if strings.TrimSpace(parts[0]) != "sandbox" {
				continue
			}
			for _, p := range parts[1:] {
				if name, val, ok := strings.Cut(strings.TrimSpace(p), "="); ok && name == "desc" {
					return strings.Trim(val, `"`)
				}
			}
		}
	}
	return ""
}

// keepLog copies a whole log into $ENGINE_TEST_LOG_DIR when that is set
// (for a look at a run beyond the lines a failure prints).
func keepLog(t *testing.T, name, content string) {
	dir := os.Getenv("ENGINE_TEST_LOG_DIR")
	if dir == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Logf("keeping %s: %v", name, err)
	}
}
