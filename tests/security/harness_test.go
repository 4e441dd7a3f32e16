// Package security is sandboxd's escape suite: a table of attacks, each a
// Python program sent to a real `sandboxd serve` through POST /exec, with the
// exact status it must end with and what the code could and could not do.
//
// TestMain builds ./cmd/sandboxd, writes a keys file, starts the server on a
// free loopback port with a data directory of its own and the repository's
// profiles, waits for /readyz, and at the end sends SIGTERM and checks that no
// container of this server (label sandboxd.managed=true and its
// sandboxd.instance) remains. The Docker Engine API is used only to look.
// The harness (server, client, wire types, host inspection) is internal/e2e.
//
// Needs: a Docker engine and the sandbox image (`make image`). A missing
// piece fails the suite with a message saying what to do.
package security

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/internal/logbuf"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/runner"
)

// readyTimeout bounds the wait for /readyz; the suite's other budgets are
// internal/e2e's.
const readyTimeout = 30 * time.Second

var (
	srv        *e2e.Server
	moduleRoot string
	instance   string // sandboxd.instance label of this server's containers
	dockerCli  *client.Client
	// api sends the suite's requests with its agent key; execs is api
	// through the suite's cap on runs in flight (execGate).
	api, execs e2e.Client
	execGate   = e2e.NewGate(e2e.MaxConcurrentExecs)
	// suiteNonce is part of every name an attack tries to create outside the
	// sandbox (host files, host processes), so the suite can look for them.
	suiteNonce = "sbxesc" + e2e.RandHex(6)
	// hostSecrets are put into sandboxd's environment only; no sandbox may
	// see their values.
	hostSecrets = map[string]string{
		"SBXSEC_HOST_CANARY":    "canary-" + e2e.RandHex(10),
		"AWS_SECRET_ACCESS_KEY": "canary-aws-" + e2e.RandHex(10),
		"GITHUB_TOKEN":          "canary-gh-" + e2e.RandHex(10),
	}
	readyBody []byte // the last /readyz answer
	// profSet is the repository's profiles, as the server loads them: the
	// checks use each profile's caps.
	profSet *profiles.Set
	// seenExecIDs are the exec ids of the suite's runs.
	seenExecIDs e2e.IDSet
)

func TestMain(m *testing.M) {
	e2e.Main("sandboxd escape suite", "sandboxd-escape-", func(s *e2e.Suite) int { return runMain(m, s) })
}

func runMain(m *testing.M, suite *e2e.Suite) (code int) {
	fatalf := suite.Fatalf
	moduleRoot, dockerCli = suite.Root, suite.Docker
	bin, tmp := suite.Bin, suite.Tmp
	var err error
	if profSet, err = profiles.Load(filepath.Join(moduleRoot, "profiles")); err != nil {
		return fatalf("loading %s/profiles: %v", moduleRoot, err)
	}

	agentKey := e2e.NewSecret("sbxsec_")
	keysFile := filepath.Join(tmp, "keys.yaml")
	if err := e2e.WriteKeys(keysFile, e2e.Key{ID: "escape-agent", Tenant: "escape", Roles: []string{"agent"}, Secret: agentKey}); err != nil {
		return fatalf("%v", err)
	}
	dataDir, err := filepath.Abs(filepath.Join(tmp, "data"))
	if err != nil {
		return fatalf("%v", err)
	}
	instance = runner.InstanceID(dataDir)

	env := os.Environ()
	for k, v := range hostSecrets {
		env = append(env, k+"="+v)
	}
	log := &logbuf.Buffer{}
	cfg := e2e.ServerConfig{Bin: bin, DataDir: dataDir, ProfilesDir: filepath.Join(moduleRoot, "profiles"), KeysFile: keysFile, Env: env, Log: log,
		// A short body timeout, so that the slow-body attacks take seconds.
		Flags: []string{"--body-timeout", slowBodyTimeout.String(), "--max-open-requests", fmt.Sprint(maxOpenRequests)}}
	if srv, err = e2e.Start(cfg); err != nil {
		return fatalf("%v\n--- sandboxd output ---\n%s", err, log.Tail(80))
	}
	defer func() { _ = srv.Stop(e2e.ShutdownTimeout) }()
	api = e2e.Client{URL: srv.URL, Key: agentKey, Retries429: e2e.Max429Retries}
	execs = api
	execs.Gate = execGate

	if err := waitReady(); err != nil {
		return fatalf("%v\n--- sandboxd output ---\n%s", err, srv.Log.Tail(80))
	}
	r, res, err := execs.ExecOK(context.Background(), e2e.Py("print('warm')"), "escape-warmup", "warm\n")
	if r != nil {
		seenExecIDs.Add(r.ID)
	}
	if err != nil {
		return fatalf("warm-up run failed: %v\n--- sandboxd output ---\n%s", err, srv.Log.Tail(80))
	}
	fmt.Fprintf(os.Stderr, "sandboxd escape suite: server on %s (instance %s), warm-up run %v\n", srv.URL, instance, res.Wall.Round(time.Millisecond))

	return suite.Finish(m.Run(), srv, ourContainers)
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
func waitReady() error {
	status, body, err := srv.WaitReady(readyTimeout)
	readyBody = body
	if err == nil {
		return nil
	}
	var ra e2e.Readiness
	onlyRuntime := !srv.Exited() && json.Unmarshal(body, &ra) == nil && len(ra.Checks) > 0
	for _, c := range ra.Checks {
		if !c.OK && !runtimeCheck(c.Name) {
			onlyRuntime = false
		}
	}
	if onlyRuntime {
		fmt.Fprintf(os.Stderr, "sandboxd escape suite: /readyz is 503 only for runtime checks (%d %s); going on with the default profile\n", status, body)
		return nil
	}
	return fmt.Errorf("%v (a missing image: run `make image` in %s)", err, moduleRoot)
}

// getOK requires GET path to answer 200 and returns the body.
func getOK(t *testing.T, path string) []byte {
	t.Helper()
	res, err := api.Get(context.Background(), path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if res.Status != http.StatusOK {
		t.Fatalf("GET %s: %d %s, want 200", path, res.Status, res.Body)
	}
	return res.Body
}

// logLines returns sandboxd's log lines that mention reqID (the last 20).
func logLines(reqID string) string { return e2e.Grep(srv.Log.String(), 20, reqID) }

// ourContainers lists the containers (running or not) of this server.
func ourContainers(ctx context.Context) ([]container.Summary, error) {
	return e2e.ListContainers(ctx, dockerCli, e2e.Managed, e2e.Instance(instance))
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
