package tests

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/internal/logbuf"
	"github.com/sandboxd/sandboxd/runner"
)

// ownServer is a sandboxd of a test's own, for killing and restarting.
type ownServer struct {
	*e2e.Server
	dataDir string
	key     string
}

func startOwnServer(t *testing.T, dataDir string, extra ...string) *ownServer {
	t.Helper()
	keys := filepath.Join(t.TempDir(), "keys.yaml")
	key := newKey()
	if err := e2e.WriteKeys(keys, e2e.Key{ID: "own", Tenant: "own", Roles: []string{"agent"}, Secret: key}); err != nil {
		t.Fatal(err)
	}
	log := &logbuf.Buffer{}
	srv, err := e2e.Start(e2e.ServerConfig{Bin: sandboxdBin, DataDir: dataDir, ProfilesDir: filepath.Join(moduleRoot, "profiles"),
		KeysFile: keys, Flags: extra, Log: log})
	if err != nil {
		t.Fatalf("own sandboxd did not come up: %v\n%s", err, log.Tail(20))
	}
	s := &ownServer{Server: srv, dataDir: dataDir, key: key}
	t.Cleanup(func() {
		// SIGTERM, so that the server removes its warm pool; SIGKILL only
		// if it does not stop.
		if err := s.Stop(30 * time.Second); errors.Is(err, e2e.ErrNotStopped) {
			t.Errorf("own sandboxd did not stop within 30 s of SIGTERM")
		}
		if left := managedByInstance(t, runner.InstanceID(s.dataDir)); len(left) != 0 {
			t.Errorf("%d containers of the test's own server remain after it stopped", len(left))
		}
	})
	return s
}

// execAsync posts code and returns a channel with the decoded response.
func (s *ownServer) execAsync(code string) <-chan *e2e.ExecResponse {
	ch := make(chan *e2e.ExecResponse, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := e2e.Client{URL: s.URL, Key: s.key}.Exec(ctx, e2e.Py(code), "")
		var r e2e.ExecResponse
		if err != nil || res.Status != 200 || json.Unmarshal(res.Body, &r) != nil {
			ch <- nil
			return
		}
		ch <- &r
	}()
	return ch
}

// managedByInstance lists the managed containers of a server's instance
// (the instance id of its data dir).
func managedByInstance(t *testing.T, instance string) []container.Summary {
	t.Helper()
	list, err := e2e.ListContainers(context.Background(), dockerCli, e2e.Managed, e2e.Instance(instance))
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
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r == nil || r.Status != "killed" || !strings.Contains(r.Message, "shutting down") {
		t.Fatalf("in-flight run at shutdown: %+v\n%s", r, s.Log.Tail(20))
	}
	select {
	case <-s.Done():
		if err := s.Err(); err != nil {
			t.Fatalf("sandboxd exited with %v after SIGTERM\n%s", err, s.Log.Tail(20))
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("sandboxd still running 30 s after SIGTERM\n%s", s.Log.Tail(20))
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
	s.Kill()
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
				t.Fatalf("after restart, leftover %s %v remains\n%s", old.ID[:12], old.Names, s2.Log.Tail(20))
			}
		}
	}
	if !strings.Contains(s2.Log.String(), "removed containers left by an earlier process") {
		t.Errorf("restart did not log the clean-up:\n%s", s2.Log.Tail(20))
	}
	if r := <-s2.execAsync("print(1)"); r == nil || r.Status != "ok" {
		t.Fatalf("restarted server does not run code: %+v", r)
	}
}
