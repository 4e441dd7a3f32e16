// Package cells is the end-to-end suite of isolation: cell, against a real
// `sandboxd serve` with the shipped profiles (default and data run in
// cells) and the real engine: the lockdown of a cell host, nothing of a
// run reaching the next one in the same host, tenants never sharing a
// host, hosts replaced after a run that did not end by itself, and a
// shutdown after many runs leaving no container, process or mount.
//
// Each test has a tenant of its own (a host serves one tenant), and the
// tests run one after another: a test that needs two runs in one host
// waits for the host to be idle, which another test's runs would change.
//
// Needs: a Docker engine and the sandbox image (`make image`).
package cells

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/internal/logbuf"
	"github.com/sandboxd/sandboxd/runner"
)

var (
	srv       *e2e.Server
	dockerCli *client.Client
	instance  string
	// keys are the agent keys by tenant.
	keys = map[string]string{}
	// hostsSeen are the cell host containers the suite's runs had.
	hostsSeen e2e.IDSet
)

// tenants are the suite's tenants, one per test or role.
var tenants = []string{"lockdown", "xrun", "red", "blue", "retire", "soak", "data"}

func TestMain(m *testing.M) {
	e2e.Main("sandboxd cells suite", "sandboxd-cells-", func(s *e2e.Suite) int { return runMain(m, s) })
}

func runMain(m *testing.M, suite *e2e.Suite) (code int) {
	fatalf := suite.Fatalf
	dockerCli = suite.Docker
	var ks []e2e.Key
	for _, t := range tenants {
		keys[t] = e2e.NewSecret("sbxcell_")
		ks = append(ks, e2e.Key{ID: t + "-agent", Tenant: t, Roles: []string{"agent"}, Secret: keys[t]})
	}
	keysFile := filepath.Join(suite.Tmp, "keys.yaml")
	if err := e2e.WriteKeys(keysFile, ks...); err != nil {
		return fatalf("%v", err)
	}
	dataDir, err := filepath.Abs(filepath.Join(suite.Tmp, "data"))
	if err != nil {
		return fatalf("%v", err)
	}
	instance = runner.InstanceID(dataDir)
	log := &logbuf.Buffer{}
	srv, err = e2e.Start(e2e.ServerConfig{Bin: suite.Bin, DataDir: dataDir, ProfilesDir: filepath.Join(suite.Root, "profiles"),
		KeysFile: keysFile, Log: log, Flags: []string{"--max-runs", "8", "--queue", "64"}})
	if err != nil {
		return fatalf("%v\n--- sandboxd output ---\n%s", err, log.Tail(80))
	}
	defer func() { _ = srv.Stop(e2e.ShutdownTimeout) }()
	if _, body, err := srv.WaitReady(30 * time.Second); err != nil && !strings.Contains(string(body), `"cells","ok":true`) {
		return fatalf("%v: %s\n--- sandboxd output ---\n%s", err, body, srv.Log.Tail(80))
	}

	return suite.Finish(m.Run(), srv, ourContainers, func() error {
		if left := leftOf(hostsSeen.Snapshot()); len(left) > 0 {
			return fmt.Errorf("after shutdown the host still has processes or mounts of cell hosts: %s", strings.Join(left, "; "))
		}
		return nil
	})
}

// ourContainers lists the containers (running or not) of this server.
func ourContainers(ctx context.Context) ([]container.Summary, error) {
	return e2e.ListContainers(ctx, dockerCli, e2e.Managed, e2e.Instance(instance))
}

// clientOf is tenant's client.
func clientOf(tenant string) e2e.Client {
	return e2e.Client{URL: srv.URL, Key: keys[tenant], Retries429: e2e.Max429Retries}
}

// run is one exec and the cell host it had.
type run struct {
	r    *e2e.ExecResponse
	host string // the host container's short id, from sandboxd's log
}

// runAs runs req for tenant and requires a 200.
func runAs(t *testing.T, tenant string, req e2e.ExecRequest) run {
	t.Helper()
	id := fmt.Sprintf("%s-%s", tenant, e2e.RandHex(6))
	res, err := clientOf(tenant).Exec(context.Background(), req, id)
	if err != nil {
		t.Fatalf("POST /exec: %v", err)
	}
	if res.Status != 200 {
		t.Fatalf("POST /exec: %s", res)
	}
	var r e2e.ExecResponse
	if err := json.Unmarshal(res.Body, &r); err != nil {
		t.Fatalf("%v: %s", err, res)
	}
	h := hostOf(t, id)
	hostsSeen.Add(h)
	return run{r: &r, host: h}
}

// hostOf is the container of request id's run, from its "run finished"
// line in sandboxd's log.
func hostOf(t *testing.T, id string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sc := bufio.NewScanner(strings.NewReader(srv.Log.String()))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var rec struct {
				Msg       string `json:"msg"`
				RequestID string `json:"request_id"`
				Container string `json:"container"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "run finished" && rec.RequestID == id && rec.Container != "" {
				return rec.Container
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no \"run finished\" line with a container for request %s", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitIdle waits until no cell host of profile is busy (building its next
// cell after a run, say).
func waitIdle(t *testing.T, profile string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	want := fmt.Sprintf("sandboxd_cell_hosts_busy{profile=%q} 0", profile)
	for {
		res, err := (e2e.Client{URL: srv.URL}).Get(context.Background(), "/metrics")
		if err == nil && strings.Contains(string(res.Body), want+"\n") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %s cell hosts are still busy 30 s after the last run", profile)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// inspect returns the container with (short) id, or fails.
func inspect(t *testing.T, id string) container.InspectResponse {
	t.Helper()
	info, err := dockerCli.ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatalf("inspecting cell host %s: %v", id, err)
	}
	return info
}

// waitGone waits until container id no longer exists.
func waitGone(t *testing.T, id, why string) {
	t.Helper()
	left := e2e.WaitGone(e2e.RemovalTimeout, ourContainers, func(c container.Summary) bool { return strings.HasPrefix(c.ID, id) })
	if len(left) > 0 {
		t.Errorf("the cell host %s is still there %v after %s: %s", id, e2e.RemovalTimeout, why, strings.Join(left, ", "))
	}
}

// leftOf lists what the host still holds of the given containers: a
// process in one of their cgroups, or a mount naming one.
func leftOf(ids map[string]bool) []string {
	if len(ids) == 0 {
		return nil
	}
	var left []string
	match := func(s string) string {
		for id := range ids {
			if strings.Contains(s, id) {
				return id
			}
		}
		return ""
	}
	for _, pid := range e2e.HostPids() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			continue
		}
		if id := match(string(b)); id != "" {
			left = append(left, fmt.Sprintf("process %d in the cgroup of %s", pid, id))
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if id := match(l); id != "" {
				left = append(left, fmt.Sprintf("mount of %s: %s", id, l))
			}
		}
	}
	return left
}
