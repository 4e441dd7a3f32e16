package tests

import (
	"context"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/runner"
)

// The "strict" profile runs under gVisor (runtime runsc). With runsc
// registered in the engine (`make gvisor`) these tests run code under it and
// check that it really is gVisor; without it they check that strict execs are
// refused with 503 UNAVAILABLE and that /readyz stays 200 and says why. CI
// sets SANDBOXD_REQUIRE_GVISOR=1 after `make gvisor`, so that a broken gVisor
// setup fails instead of passing through the refusal path.

const strictProfile = "strict"

// engineHasRunsc reports whether the engine offers the runtime runsc.
func engineHasRunsc(t *testing.T) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := dockerCli.Info(ctx)
	if err != nil {
		t.Fatalf("docker info: %v", err)
	}
	_, ok := info.Runtimes["runsc"]
	if !ok && os.Getenv("SANDBOXD_REQUIRE_GVISOR") == "1" {
		t.Fatalf("SANDBOXD_REQUIRE_GVISOR=1 but the engine has no runtime runsc (it has %v); run `make gvisor`", sortedKeys(info.Runtimes))
	}
	return ok
}

func getReadyz(t *testing.T) (int, *e2e.Readiness) {
	t.Helper()
	res, r, err := api.Readiness(context.Background())
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	return res.Status, r
}

func strict(code string) e2e.ExecRequest {
	r := e2e.Py(code)
	r.Profile = strictProfile
	return r
}

func hostKernelRelease(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestGVisorStrictProfile: under strict the code runs, and sees gVisor's
// kernel rather than the host's.
func TestGVisorStrictProfile(t *testing.T) {
	c := newTC(t)
	has := engineHasRunsc(t)

	code, rz := getReadyz(t)
	check := rz.Check("runtime runsc")
	if code != http.StatusOK || check == nil || check.OK != has || !check.Optional {
		t.Fatalf("readyz %d, runtime runsc check %+v; want 200 and an optional check that is ok=%v", code, check, has)
	}

	if !has {
		if !slices.Contains(rz.Unavailable, strictProfile) {
			t.Errorf("readyz unavailable_profiles = %v, want it to list strict", rz.Unavailable)
		}
		res := c.post(strict("print(1)"))
		msg := wantError(t, res, http.StatusServiceUnavailable, "UNAVAILABLE", "*")
		for _, want := range []string{`"runsc"`, `"strict"`, "make gvisor"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q lacks %q", msg, want)
			}
		}
		t.Logf("the engine has no runsc: checked that strict execs are refused (%s); run `make gvisor` to run them", msg)
		return
	}

	host := hostKernelRelease(t)
	probe := "import platform\nprint(platform.release())\nprint(open('/proc/version').read().strip())"

	// The default profile sees the host's kernel, so the comparison below
	// means something.
	def, res := c.execStatus(e2e.Py(probe), "ok")
	if got := strings.SplitN(def.Stdout, "\n", 2)[0]; got != host {
		t.Fatalf("default profile sees kernel %q, want the host's %q\n%s", got, host, res)
	}

	w := startWatch()
	r, res := c.execStatus(strict(probe+"\nimport time\ntime.sleep(1)"), "ok")
	seen := w.stop()
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != 2 || lines[0] == host || strings.Contains(lines[1], host) {
		t.Errorf("under strict the code sees kernel %q (/proc/version %q), the host's is %q: not gVisor\n%s", lines[0], lines[1:], host, res)
	}
	t.Logf("strict sees kernel %q; the host runs %q", lines[0], host)
	if r.Profile.Name != strictProfile || r.Limits.MemoryMB != 128 || r.Limits.CPUs != 0.5 || r.Limits.TimeoutMS != 5000 {
		t.Errorf("profile %+v limits %+v, want strict with 128 MiB, 0.5 CPU, 5000 ms", r.Profile, r.Limits)
	}
	if cellMode() {
		// A cell of a host: a cell host under runsc ran while it did (the
		// default profile's hosts run runc).
		hosts := 0
		for _, info := range seen {
			if info.Config.Labels[runner.LabelCellTenant] != "" && info.HostConfig.Runtime == "runsc" {
				hosts++
			}
		}
		if hosts == 0 {
			t.Errorf("no cell host under runsc was seen while exec %s ran", r.ID)
		}
	} else if info, ok := seen[r.ID]; !ok {
		t.Errorf("no container of exec %s was seen while it ran", r.ID)
	} else if info.HostConfig.Runtime != "runsc" {
		t.Errorf("container of exec %s runs with runtime %q, want runsc", r.ID, info.HostConfig.Runtime)
	}

	// print(1) is ok.
	r, res = c.execStatus(strict("print(1)"), "ok")
	if r.Stdout != "1\n" || r.ExitCode != 0 {
		t.Errorf("print(1) under strict: stdout %q exit %d\n%s", r.Stdout, r.ExitCode, res)
	}
	waitExecGone(t, r.ID)
}

// TestGVisorStrictBasics: threads (this runsc needs seccomp/gvisor.json for
// them), an exit code, no network and the memory limit, under gVisor.
func TestGVisorStrictBasics(t *testing.T) {
	if !engineHasRunsc(t) {
		t.Skip("the engine has no runtime runsc (make gvisor); TestGVisorStrictProfile checks the refusal")
	}
	c := newTC(t)
	r, res := c.execStatus(strict(`import threading
out = []
ts = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]
for t in ts: t.start()
for t in ts: t.join()
print(len(out))`), "ok")
	if r.Stdout != "8\n" {
		t.Errorf("8 threads under strict: stdout %q\n%s", r.Stdout, res)
	}

	r, res = c.execStatus(strict("import sys\nsys.exit(3)"), "error")
	if r.ExitCode != 3 {
		t.Errorf("exit code %d, want 3\n%s", r.ExitCode, res)
	}

	r, res = c.execStatus(strict(`import socket
try:
    s = socket.socket()
    s.settimeout(2)
    s.connect(("1.1.1.1", 53))
    print("connected")
except OSError as e:
    print("refused", e.errno)`), "ok")
	if !strings.HasPrefix(r.Stdout, "refused") {
		t.Errorf("network under strict: %q\n%s", r.Stdout, res)
	}

	r, res = c.exec(strict("b = bytearray(200 << 20)\nprint(len(b))"))
	if r.Status != "oom" && r.Status != "killed" {
		t.Errorf("200 MiB under a 128 MiB limit: status %q, want oom\n%s", r.Status, res)
	}
}

// TestGVisorLatency logs the median of 20 print(1) round trips under strict
// (runsc) and default (runc), one request at a time.
func TestGVisorLatency(t *testing.T) {
	if !engineHasRunsc(t) {
		t.Skip("the engine has no runtime runsc (make gvisor)")
	}
	c := newTC(t)
	median := func(req e2e.ExecRequest) time.Duration {
		var walls []time.Duration
		for range 20 {
			r, res := c.execStatus(req, "ok")
			if r.Stdout != "1\n" {
				t.Fatalf("stdout %q\n%s", r.Stdout, res)
			}
			walls = append(walls, res.Wall)
		}
		sort.Slice(walls, func(i, j int) bool { return walls[i] < walls[j] })
		return (walls[9] + walls[10]) / 2
	}
	runsc := median(strict("print(1)"))
	runc := median(e2e.Py("print(1)"))
	t.Logf("print(1) through the API, median of 20: runsc (strict) %v, runc (default) %v", runsc.Round(time.Millisecond), runc.Round(time.Millisecond))
}
