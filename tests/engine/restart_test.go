package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/e2e"
)

// sandboxImage is the image of the default profile, the only one the
// private engine gets (the data image is large and not needed: its
// profile is not warmed without it, and strict needs gVisor).
const sandboxImage = "sandboxd/python:3.11"

// poolSize is sandboxd's --pool-size (and --pool-max) here.
const poolSize = 2

// Bounds of the requirement.
const (
	// downExecTimeout bounds an exec while the engine is down: it must be
	// refused with a typed 503, not hang.
	downExecTimeout = 20 * time.Second
	// recoverTimeout bounds, from the engine answering again, both the
	// first successful exec and the pool back at its target with fresh
	// containers.
	recoverTimeout = 30 * time.Second
	// downFor is how long the engine stays down at least after it stopped,
	// while execs are sent: a real restart is rarely shorter (a graceful
	// one with idle sandboxes spends their 10 s stop timeout with its API
	// closed before it even exits), and removals of dead sandboxes must
	// outlast it.
	downFor = 5 * time.Second
	// poolStable is how long the pool's running containers must stay the
	// same to count as ready: a container that just ran a job is still
	// running for a moment, and a filler may be starting one.
	poolStable = time.Second
	// poolFillTimeout bounds the first filling of the pool.
	poolFillTimeout = 60 * time.Second
	// leftoverTimeout: after sandboxd exits, no container of it may remain
	// (polled, as removal is asynchronous).
	leftoverTimeout = 15 * time.Second
)

// The issue: "the pool recovers when the engine restarts". sandboxd runs
// with a warm pool against a private engine, which is restarted three
// ways: a graceful stop (SIGTERM, as `systemctl restart docker`), a crash
// (SIGKILL of dockerd and its containerd), and a graceful restart while no
// request comes. Each time: execs while the engine is down are refused
// with 503 UNAVAILABLE within a bound; once it is back, execs succeed
// within a bound and never answer "ok" without their output; the pool is
// back at its target with containers started after the restart, without
// waiting for a request to notice the dead ones; and the next exec gets a
// warm sandbox. At the end, sandboxd stops and leaves no container in the
// engine.
func TestPoolRecoversWhenTheEngineRestarts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatalf("this test starts a private Docker Engine and must run as root (uid %d)", os.Geteuid())
	}
	if _, err := os.Stat(dockerdBin); err != nil {
		t.Fatalf("the private engine is the machine's own dockerd, and %s is missing: %v", dockerdBin, err)
	}
	began := time.Now()
	machine, err := e2e.Docker()
	if err != nil {
		t.Fatalf("the machine's engine, which the sandbox image is copied from: %v", err)
	}
	defer machine.Close()
	root, err := e2e.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	// Everything lives under the engine's directory, sandboxd's data too,
	// so that one sweep finds all an interrupted run left.
	eng := newPrivateEngine(t) // its clean-up runs after sandboxd's
	work := filepath.Join(eng.dir, "sbx")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	bin, err := e2e.Binary("./cmd/sandboxd")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built sandboxd in %v", time.Since(began).Round(time.Millisecond))
	took := eng.start(t)
	t.Logf("private engine up in %v (%s)", took.Round(time.Millisecond), eng.dir)
	step := time.Now()
	loadImage(t, machine, eng.cli, sandboxImage)
	t.Logf("loaded %s into it in %v", sandboxImage, time.Since(step).Round(time.Millisecond))

	srv := startSandboxd(t, bin, root, work, "unix://"+eng.sock, poolSize)
	pool := waitPool(t, eng, nil, poolFillTimeout)
	if pool == nil {
		t.FailNow()
	}
	checkWarm(t, srv, eng, "before any restart")
	t.Logf("set-up done in %v", time.Since(began).Round(time.Millisecond))

	// seen are the containers of the pool before each restart: none may be
	// left in the engine at the end.
	seen := map[string]string{}
	ok := t.Run("graceful stop", func(t *testing.T) {
		restartCycle(t, srv, eng, seen, "sigterm")
	})
	ok = ok && t.Run("crash", func(t *testing.T) {
		restartCycle(t, srv, eng, seen, "sigkill")
	})
	if ok {
		t.Run("restart while idle", func(t *testing.T) {
			restartCycle(t, srv, eng, seen, "idle")
		})
	}

	// Whatever happened, the engine must run to check for leftovers.
	if !eng.running() {
		eng.start(t)
	}
	if err := srv.Stop(serverStopTimeout); err != nil {
		t.Error(err)
	}
	checkNoContainers(t, eng, seen)
	t.Logf("total %v", time.Since(began).Round(time.Millisecond))
}

// restartCycle restarts the engine under a running sandboxd (how: sigterm,
// sigkill, or idle: sigterm with no request until the pool is back) and
// checks the recovery.
func restartCycle(t *testing.T, srv *sandboxd, eng *privateEngine, seen map[string]string, how string) {
	old := waitPool(t, eng, nil, recoverTimeout)
	if old == nil {
		t.FailNow()
	}
	oldSet := map[string]bool{}
	for _, id := range old {
		oldSet[id], seen[id] = true, t.Name()
	}

	// Down.
	stopBegan := time.Now()
	switch how {
	case "sigterm", "idle":
		eng.terminate(t)
		var during *execAnswer
		var wg sync.WaitGroup
		if how == "sigterm" {
			// A request while dockerd shuts down: its API is closed, the
			// pooled containers still run until their stop timeout.
			wg.Add(1)
			go func() { defer wg.Done(); during = srv.exec(`print("stopping")`, downExecTimeout) }()
		}
		eng.waitStopped(t, engineStopTimeout)
		wg.Wait()
		if during != nil {
			switch {
			case during.HTTP == http.StatusOK && during.Result.Status == "ok" && during.Result.Stdout == "stopping\n":
				t.Logf("exec while dockerd stopped: ran (%v, sandbox %q)", during.Wall.Round(time.Millisecond), sandboxKind(during.Header))
			case during.HTTP == http.StatusOK && during.Result.Status == "killed":
				t.Logf("exec while dockerd stopped: killed by the stop (%v): %s", during.Wall.Round(time.Millisecond), during.Result.Message)
			case during.HTTP == http.StatusServiceUnavailable && during.Problem.Code == "UNAVAILABLE":
				t.Logf("exec while dockerd stopped: refused (%v): %s", during.Wall.Round(time.Millisecond), during.Problem.Message)
			default:
				t.Errorf("exec while dockerd stopped: want a run with its output, or 503 UNAVAILABLE; got %s", during)
			}
		}
	case "sigkill":
		eng.kill(t)
	}
	t.Logf("engine down %v after the %s", time.Since(stopBegan).Round(time.Millisecond), map[string]string{"sigterm": "SIGTERM", "idle": "SIGTERM", "sigkill": "SIGKILL of dockerd and containerd"}[how])

	downSince := time.Now()
	if how != "idle" {
		for i := 1; i == 1 || time.Since(downSince) < downFor; i++ {
			a := srv.exec(`print("down")`, downExecTimeout)
			if a.HTTP != http.StatusServiceUnavailable || a.Problem.Code != "UNAVAILABLE" {
				t.Errorf("exec %d while the engine is down: want 503 UNAVAILABLE within %v, got %s", i, downExecTimeout, a)
			} else {
				t.Logf("exec %d while the engine is down: 503 %s in %v: %s", i, a.Problem.Code, a.Wall.Round(time.Millisecond), a.Problem.Message)
			}
			time.Sleep(min(2*time.Second, max(0, downFor-time.Since(downSince))))
		}
		code, engineOK, err := srv.readyz()
		if err != nil || code != http.StatusServiceUnavailable || engineOK {
			t.Errorf("/readyz while the engine is down: want 503 with the engine check failing; got %d, engine ok %v, %v", code, engineOK, err)
		}
		time.Sleep(max(0, downFor-time.Since(downSince)))
	}

	// Back.
	took := eng.start(t)
	up := time.Now()
	t.Logf("engine back after %v", took.Round(time.Millisecond))

	if how != "idle" {
		// Execs succeed again within the bound; before the first success
		// only a typed 503 is acceptable, and no run may answer "ok"
		// without its output.
		n := 0
		for {
			n++
			want := token()
			a := srv.exec(fmt.Sprintf("print(%q)", want), requestTimeout)
			if a.HTTP == http.StatusOK {
				checkRun(t, a, want, "first exec to succeed after the restart")
				t.Logf("exec succeeded %v after the engine was back (attempt %d, sandbox %q, %v)", time.Since(up).Round(time.Millisecond), n, sandboxKind(a.Header), a.Wall.Round(time.Millisecond))
				break
			}
			if a.HTTP != http.StatusServiceUnavailable || a.Problem.Code != "UNAVAILABLE" {
				t.Fatalf("exec %v after the engine was back: want success, or 503 UNAVAILABLE while recovering; got %s", time.Since(up).Round(time.Millisecond), a)
			}
			if time.Since(up) > recoverTimeout {
				t.Fatalf("execs still fail %v after the engine was back: %s", recoverTimeout, a)
			}
			t.Logf("exec %v after the engine was back: %s", time.Since(up).Round(time.Millisecond), a)
			time.Sleep(500 * time.Millisecond)
		}
	}

	// The pool is back at its target with containers started after the
	// restart, without waiting for requests to find the dead ones.
	fresh := waitPool(t, eng, oldSet, recoverTimeout-time.Since(up))
	if fresh == nil {
		if how == "idle" {
			t.Errorf("no request was sent since the engine came back: the pool must refill on its own, without a request to find the dead containers")
			// How does the first request fare?
			a := srv.exec(`print("after")`, requestTimeout)
			checkRun(t, a, "after", "first exec after the idle restart")
			t.Logf("first exec after the idle restart: sandbox %q, %v", sandboxKind(a.Header), a.Wall.Round(time.Millisecond))
		}
		t.FailNow()
	}
	t.Logf("pool back at %d fresh containers %v after the engine was back", len(fresh), time.Since(up).Round(time.Millisecond))
	logOld(t, eng, oldSet)

	// The next exec is warm, and a burst of execs all run correctly.
	checkWarm(t, srv, eng, "after the restart")
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2; i++ {
				want := token()
				checkRun(t, srv.exec(fmt.Sprintf("print(%q)", want), requestTimeout), want, "exec after recovery")
			}
		}()
	}
	wg.Wait()
}

// waitPool waits until at least poolSize containers run in the engine,
// none of them in old, the same ones for poolStable, and returns their ids;
// on time-out it reports what it saw and returns nil.
func waitPool(t *testing.T, eng *privateEngine, old map[string]bool, within time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(within)
	var last, candidate string
	var since time.Time
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		list, err := eng.managed(ctx)
		cancel()
		if err != nil {
			last, candidate = err.Error(), ""
		} else {
			var fresh, states []string
			for _, c := range list {
				mark := ""
				if old[c.ID] {
					mark = " (from before the restart)"
				}
				states = append(states, fmt.Sprintf("%s %s%s", c.ID[:12], c.State, mark))
				if c.State == "running" && !old[c.ID] {
					fresh = append(fresh, c.ID)
				}
			}
			sort.Strings(fresh)
			if key := strings.Join(fresh, ","); len(fresh) < poolSize {
				candidate = ""
			} else if key != candidate {
				candidate, since = key, time.Now()
			} else if time.Since(since) >= poolStable {
				return fresh
			}
			last = fmt.Sprintf("%d fresh running; containers: [%s]", len(fresh), strings.Join(states, ", "))
		}
		if time.Now().After(deadline) {
			t.Errorf("the pool did not reach %d running containers started after the restart within %v; last seen: %s", poolSize, within, last)
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkWarm runs one exec with the pool full and checks a pooled sandbox
// ran it. The answer's Server-Timing says so ("sandbox;desc=warm"); without
// that header, a container that was waiting in the pool before the request
// must have been used up by it.
func checkWarm(t *testing.T, srv *sandboxd, eng *privateEngine, when string) {
	t.Helper()
	before := waitPool(t, eng, nil, recoverTimeout)
	if before == nil {
		t.FailNow()
	}
	want := token()
	a := srv.exec(fmt.Sprintf("print(%q)", want), requestTimeout)
	checkRun(t, a, want, "warm exec "+when)
	if kind := sandboxKind(a.Header); kind != "" {
		if kind != "warm" {
			t.Errorf("exec %s with %d sandboxes ready: Server-Timing says sandbox %q, want warm (%s)", when, len(before), kind, a.Header.Get("Server-Timing"))
		}
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		list, err := eng.managed(ctx)
		cancel()
		running := map[string]bool{}
		for _, c := range list {
			if c.State == "running" {
				running[c.ID] = true
			}
		}
		for _, id := range before {
			if err == nil && !running[id] {
				return // used up by the exec
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("exec %s: no Server-Timing sandbox entry, and none of the %d ready pool containers was used (%v)", when, len(before), err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkRun requires a run that printed want and exited 0.
func checkRun(t *testing.T, a *execAnswer, want, what string) {
	t.Helper()
	if a.HTTP != http.StatusOK {
		t.Errorf("%s: want 200, got %s", what, a)
		return
	}
	if a.Result.Status != "ok" || a.Result.ExitCode != 0 || a.Result.Stdout != want+"\n" {
		t.Errorf("%s: want status ok with stdout %q, got status %q exit %d stdout %q stderr %q message %q", what, want+"\n", a.Result.Status, a.Result.ExitCode, a.Result.Stdout, a.Result.Stderr, a.Result.Message)
	}
}

// logOld reports what became of the pool's containers from before the
// restart (removed, or still in the engine) at the time the pool is back.
func logOld(t *testing.T, eng *privateEngine, old map[string]bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := eng.managed(ctx)
	if err != nil {
		t.Logf("listing containers: %v", err)
		return
	}
	var left []string
	for _, c := range list {
		if old[c.ID] {
			left = append(left, c.ID[:12]+" "+c.Status)
		}
	}
	t.Logf("of the %d pool containers from before the restart, %d are still in the engine: %v", len(old), len(left), left)
}

// checkNoContainers requires the engine to hold no sandboxd container once
// sandboxd has exited.
func checkNoContainers(t *testing.T, eng *privateEngine, seen map[string]string) {
	t.Helper()
	deadline := time.Now().Add(leftoverTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		list, err := eng.managed(ctx)
		cancel()
		if err == nil && len(list) == 0 {
			return
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Errorf("listing the private engine's containers after sandboxd exited: %v", err)
				return
			}
			var left []string
			for _, c := range list {
				what := "not in the pool before a restart"
				if cycle := seen[c.ID]; cycle != "" {
					what = "in the pool before the restart of " + cycle
				}
				left = append(left, fmt.Sprintf("%s (%s, %s, exec id %s)", c.ID[:12], c.Status, what, c.Labels["sandboxd.exec-id"]))
			}
			t.Errorf("%d sandboxd.managed=true container(s) remain in the private engine %v after sandboxd exited: %s", len(list), leftoverTimeout, strings.Join(left, "; "))
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// token is a fresh value for a run to print, so that an answer cannot
// pass with another run's output.
func token() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "t-" + hex.EncodeToString(b[:])
}
