package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandboxd/sandboxd/runner"
)

// ownServer is a sandboxd of a test's own, for killing and restarting.
type ownServer struct {
	t       *testing.T
	cmd     *exec.Cmd
	url     string
	dataDir string
	keys    string
	log     *logBuffer
	exited  chan error
}

func startOwnServer(t *testing.T, dataDir string, extra ...string) *ownServer {
	t.Helper()
	keys := filepath.Join(t.TempDir(), "keys.yaml")
	key := newKey()
	if err := os.WriteFile(keys, []byte(fmt.Sprintf("keys:\n  - id: own\n    tenant: own\n    key_sha256: %s\n    roles: [agent]\n", sha256Hex(key))), 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &ownServer{t: t, url: fmt.Sprintf("http://127.0.0.1:%d", port), dataDir: dataDir, keys: key, log: &logBuffer{}, exited: make(chan error, 1)}
	args := append([]string{"serve", "--addr", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", dataDir,
		"--profiles-dir", filepath.Join(moduleRoot, "profiles"), "--keys-file", keys}, extra...)
	s.cmd = exec.Command(sandboxdBin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.exited <- s.cmd.Wait() }()
	deadline := time.Now().Add(serverStartTimeout)
	for {
		resp, err := http.Get(s.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("own sandboxd did not come up:\n%s", s.log.Tail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() {
		// SIGTERM, so that the server removes its warm pool; SIGKILL only
		// if it does not stop.
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-s.exited:
			s.exited <- err
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
			t.Errorf("own sandboxd did not stop within 30 s of SIGTERM")
		}
		if left := managedByInstance(t, runner.InstanceID(s.dataDir)); len(left) != 0 {
			t.Errorf("%d containers of the test's own server remain after it stopped", len(left))
		}
	})
	return s
}

// execAsync posts code and returns a channel with the decoded response.
func (s *ownServer) execAsync(code string) <-chan *execResponse {
	ch := make(chan *execResponse, 1)
	go func() {
		body, _ := json.Marshal(py(code))
		req, _ := http.NewRequest(http.MethodPost, s.url+"/exec", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+s.keys)
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
		if err != nil {
			ch <- nil
			return
		}
		defer resp.Body.Close()
		var r execResponse
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&r) != nil {
			ch <- nil
			return
		}
		ch <- &r
	}()
	return ch
}

// containersOf lists the managed containers whose name carries the exec ids
// of this server's data dir (by instance label, learned from a running one).
func managedByInstance(t *testing.T, instance string) []container.Summary {
	t.Helper()
	list, err := dockerCli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", "sandboxd.managed=true"), filters.Arg("label", "sandboxd.instance="+instance))})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// waitOneRunning waits until the server of dataDir has a running sandbox and
// returns the instance label its containers carry.
func waitOneRunning(t *testing.T, dataDir string) string {
	t.Helper()
	instance := runner.InstanceID(dataDir)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, c := range managedByInstance(t, instance) {
			if c.State == "running" {
				return instance
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the run's container never showed up")
	return ""
}

// SIGTERM while a run is in flight: the server stops accepting, lets the run
// finish within the grace period, kills it past that, removes every
// container and exits 0.
func TestShutdownKillsRunsAndRemovesContainers(t *testing.T) {
	s := startOwnServer(t, t.TempDir(), "--shutdown-grace", "1s")
	done := s.execAsync("import time\nprint('started', flush=True)\ntime.sleep(60)")
	instance := waitOneRunning(t, s.dataDir)
	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r == nil || r.Status != "killed" || !strings.Contains(r.Message, "shutting down") {
		t.Fatalf("in-flight run at shutdown: %+v\n%s", r, s.log.Tail(20))
	}
	select {
	case err := <-s.exited:
		s.exited <- err // for Cleanup
		if err != nil {
			t.Fatalf("sandboxd exited with %v after SIGTERM\n%s", err, s.log.Tail(20))
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("sandboxd still running 30 s after SIGTERM\n%s", s.log.Tail(20))
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("shutdown took %v with a 1 s grace period", took)
	}
	if left := managedByInstance(t, instance); len(left) != 0 {
		t.Fatalf("%d containers left after shutdown", len(left))
	}
}

// SIGKILL mid-run leaves a container; the next start with the same data dir
// removes it before serving.
func TestRestartRemovesLeftovers(t *testing.T) {
	dir := t.TempDir()
	s := startOwnServer(t, dir)
	_ = s.execAsync("import time\ntime.sleep(60)")
	instance := waitOneRunning(t, dir)
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err := <-s.exited
	s.exited <- err
	// The killed run's container is left behind, and the warm pool's.
	before := managedByInstance(t, instance)
	if len(before) < 1 {
		t.Fatalf("after SIGKILL, %d containers of the instance, want at least the run's", len(before))
	}
	s2 := startOwnServer(t, dir)
	// The new process may already be warming its own pool; none of the old
	// containers may remain.
	for _, now := range managedByInstance(t, instance) {
		for _, old := range before {
			if now.ID == old.ID {
				t.Fatalf("after restart, leftover %s %v remains\n%s", old.ID[:12], old.Names, s2.log.Tail(20))
			}
		}
	}
	if !strings.Contains(s2.log.String(), "removed containers left by an earlier process") {
		t.Errorf("restart did not log the clean-up:\n%s", s2.log.Tail(20))
	}
	if r := <-s2.execAsync("print(1)"); r == nil || r.Status != "ok" {
		t.Fatalf("restarted server does not run code: %+v", r)
	}
}
