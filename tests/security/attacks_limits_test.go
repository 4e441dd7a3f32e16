package security

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/e2e"
)

// cpuQuotaSlack: CPU time may exceed wall time × cpus by this factor (CFS
// periods are 100 ms; the bound is the spec's ~1.3x).
const cpuQuotaSlack = 1.3

func limitAttacks() []attack {
	return []attack{
		{
			// Filling the scratch file systems by bytes: the code gets ENOSPC
			// at the tmpfs size, catches it and carries on.
			name: "tmpfs-fill-bytes",
			code: `
def fill(tag, d):
    n, i, err = 0, 0, "none"
    chunk = b"\0" * (1 << 20)
    try:
        while True:
            with open("%s/fill-%d" % (d, i), "wb") as f:
                for _ in range(8):
                    f.write(chunk)
                    n += len(chunk)
            i += 1
    except OSError as e:
        err = ename(e.errno)
    say("FULL-" + tag, err, n >> 20)
fill("sandbox", "/sandbox")
fill("tmp", "/tmp")
fill("shm", "/dev/shm")
os.remove("/sandbox/fill-0")
with open("/sandbox/out/after.txt", "w") as f:
    f.write("still works")
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				tmpfs := x.r.Limits.TmpfsMB
				for _, c := range []struct {
					key  string
					size int64
				}{{"FULL-sandbox", tmpfs}, {"FULL-tmp", tmpfs}, {"FULL-shm", x.prof.ShmMB}} {
					v, _ := x.fact(c.key)
					var errno string
					var mb int64
					if _, err := fmtSscan(v, &errno, &mb); err != nil || errno != "ENOSPC" || mb > c.size || (c.key != "FULL-shm" && mb < c.size-4) {
						t.Errorf("%s = %q: want ENOSPC after about %d MiB", c.key, v, c.size)
					}
				}
				if f := x.r.File("after.txt"); f == nil || string(unb64(f.Content)) != "still works" {
					t.Errorf("after.txt, written after freeing space, was not returned: %+v", x.r.Files)
				}
			},
		},
		{
			// Inodes: tmpfs has no nr_inodes limit of its own here (the
			// kernel default is half the host's RAM pages), so the bound is
			// the memory cgroup, which charges inodes and dentries. At the
			// limit the code stalls in reclaim until the OOM killer or the
			// wall clock ends it; which one comes first is the kernel's race.
			name:        "tmpfs-fill-inodes",
			limits:      map[string]any{"memory_mb": 64, "timeout_ms": 5000},
			status:      "oom",
			otherStatus: []string{"timeout", "ok"},
			strict: &override{status: "oom", otherStatus: []string{"timeout", "ok", "killed"},
				why: "under runsc the host OOM killer may end the whole sandbox, which sandboxd then reports as killed"},
			code: `
n, err = 0, "none"
os.mkdir("/sandbox/i")
try:
    while True:
        os.mknod("/sandbox/i/%d" % n)
        n += 1
        if n % 20000 == 0:
            say("PROGRESS", n)
except OSError as e:
    err = ename(e.errno)
say("INODES", err, n)
`,
			check: func(t *testing.T, x *run) {
				if x.r.Status == "ok" {
					v, _ := x.fact("INODES")
					if f := strings.Fields(v); len(f) == 0 || (f[0] != "ENOSPC" && f[0] != "ENOMEM") {
						t.Errorf("INODES = %q: a run that ends ok must have hit ENOSPC/ENOMEM", v)
					}
				}
				p, _ := x.fact("PROGRESS")
				t.Logf("NOTE: inode fill ended %s (last progress line %q, duration %d ms): bounded by the memory cgroup, not by a tmpfs inode limit", x.r.Status, lastFact(x, "PROGRESS", p), x.r.DurationMS)
			},
		},
		{
			// Every process forks until its own fork fails at the pids
			// limit and it dies of the BlockingIOError. The run's status is
			// that of the first process: usually it meets EAGAIN at once
			// ("error"), but it is one of 64 processes sharing one CPU, and
			// when the machine is busy it may still be winning forks at the
			// wall-clock limit ("timeout", seen in CI). Which comes first is
			// the scheduler's race; either way the pids limit held (stderr
			// shows EAGAIN), the run ends by the limit + 1 s and nothing is
			// left on the host. solo gives it the machine, so "error" is the
			// usual end. pids is lowered so that the bomb reaches the limit
			// in a few dozen forks even when a busy machine gives the
			// sandbox little CPU (CI saw one still short of it after 5 s).
			name:        "fork-bomb",
			limits:      map[string]any{"timeout_ms": 5000, "pids": 32},
			solo:        true,
			otherStatus: []string{"timeout"},
			code: `
while True:
    os.fork()
`,
			status: "error",
			strict: &override{status: "killed", otherStatus: []string{"oom"}, check: func(t *testing.T, x *run) {}, why: "under runsc crossing the pids limit ends the whole sandbox (profiles/exec/strict.yaml); in a cell host, whose pids limit leaves room for the Sentry's own threads, the memory limit may end the bomb first"},
			check: func(t *testing.T, x *run) {
				if !strings.Contains(x.r.Stderr, "BlockingIOError") && !strings.Contains(x.r.Stderr, "Resource temporarily unavailable") {
					t.Errorf("stderr does not show fork failing at the pids limit: %q", e2e.Clip([]byte(x.r.Stderr), 500))
				}
				if x.r.DurationMS > 5000+1000 {
					t.Errorf("duration_ms %d past the 5 s limit + 1 s", x.r.DurationMS)
				}
			},
		},
		{
			// Processes that survive the program: the main program forks
			// children that sleep forever until the pids limit refuses a
			// fork (EAGAIN), tries on for half a second (it survives its
			// errors), and ends; the launcher (whose threads are reserved)
			// kills the children promptly. One process forks, and its
			// children sleep, so the limit is reached in a few dozen cheap
			// forks even on a busy machine (an exponential bomb of Python
			// copies, starved of CPU beside CI's other suites, had not
			// reached it after 5 s; fork-bomb covers that shape).
			name:   "fork-bomb-persistent",
			limits: map[string]any{"timeout_ms": 5000, "pids": 32},
			solo:   true,
			strict: &override{status: "killed", otherStatus: []string{"oom"}, check: func(t *testing.T, x *run) {}, why: "under runsc crossing the pids limit ends the whole sandbox (profiles/exec/strict.yaml); in a cell host, whose pids limit leaves room for the Sentry's own threads, the memory limit may end the bomb first"},
			code: `
t0 = time.monotonic()
kids, err, first, fails = 0, "none", None, 0
while time.monotonic() - t0 < 4 and (first is None or time.monotonic() - first < 0.5):
    try:
        pid = os.fork()
    except OSError as e:
        err, fails = ename(e.errno), fails + 1
        if first is None:
            first = time.monotonic()
        time.sleep(0.01)
        continue
    if pid == 0:
        while True:
            time.sleep(1)
    kids += 1
say("FORKBOMB", err, len([p for p in os.listdir("/proc") if p.isdigit()]), kids, fails)
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				v, _ := x.fact("FORKBOMB")
				var verdict string
				var n int64
				if _, err := fmtSscan(v, &verdict, &n); err != nil || verdict != "EAGAIN" {
					t.Errorf("FORKBOMB = %q: want fork to have failed with EAGAIN at the pids limit", v)
				}
				if max := x.r.Limits.Pids + 16; n > max {
					t.Errorf("%d processes in the sandbox, above pids %d + 16", n, x.r.Limits.Pids)
				}
				if x.r.DurationMS > 6000 {
					t.Errorf("duration_ms %d: the run did not end soon after the main program", x.r.DurationMS)
				}
			},
		},
		{
			name: "thread-bomb",
			code: `
import threading
def f():
    time.sleep(100)
while True:
    threading.Thread(target=f, daemon=True).start()
`,
			status: "error",
			strict: &override{status: "killed", otherStatus: []string{"oom", "timeout"}, check: func(t *testing.T, x *run) {
				t.Logf("NOTE (gVisor): the thread bomb ended %s after %d ms (%s)", x.r.Status, x.r.DurationMS, x.r.Message)
				if x.r.DurationMS >= x.r.Limits.TimeoutMS+1000 {
					t.Errorf("duration_ms %d past the limit + 1 s", x.r.DurationMS)
				}
			}, why: "under runsc the threads' stacks reach the memory limit, the host pids limit ends the sandbox, or the launcher starves and sandboxd's own deadline ends it"},
			check: func(t *testing.T, x *run) {
				if !strings.Contains(x.r.Stderr, "can't start new thread") {
					t.Errorf("stderr does not show thread creation failing: %q", e2e.Clip([]byte(x.r.Stderr), 500))
				}
			},
		},
		{
			name: "memory-bomb-mmap-populate",
			code: `
import mmap
m = mmap.mmap(-1, 1 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)
say("SURVIVED", len(m))
`,
			status: "oom",
			check: func(t *testing.T, x *run) {
				if _, ok := x.fact("SURVIVED"); ok {
					t.Errorf("HOLE: 1 GiB populated under a %d MiB limit", x.r.Limits.MemoryMB)
				}
				if x.r.Usage.MaxRSSKB > (x.r.Limits.MemoryMB<<10)+8<<10 {
					t.Errorf("max_rss_kb %d above the %d MiB limit", x.r.Usage.MaxRSSKB, x.r.Limits.MemoryMB)
				}
			},
			strict: &override{status: "oom", otherStatus: []string{"killed"}, check: func(t *testing.T, x *run) {
				if _, ok := x.fact("SURVIVED"); ok {
					t.Errorf("HOLE: 1 GiB populated under a %d MiB limit", x.r.Limits.MemoryMB)
				}
			}, why: "under runsc the host OOM killer may end the whole sandbox, which sandboxd then reports as killed"},
		},
		{
			// The kernel's memory cgroup kills it. Near the limit the kernel
			// first reclaims the interpreter's own file pages (here through
			// fuse-overlayfs), and on a loaded machine that can stall the
			// code until the wall clock ends it instead: timeout is
			// accepted, with a note, as long as the code never got past the
			// limit (it reports every 16 MiB it holds).
			name: "memory-bomb-growing-list",
			code: `
x = []
while True:
    x.append(b"x" * (1 << 20))
    if len(x) % 16 == 0:
        say("HELD", len(x))
`,
			status:      "oom",
			otherStatus: []string{"timeout"},
			check: func(t *testing.T, x *run) {
				held, _ := x.fact("HELD")
				for _, l := range x.lines {
					if v, ok := strings.CutPrefix(l, "HELD "); ok {
						held = v
					}
				}
				var mb int64
				fmtSscan(held, &mb)
				if mb > x.r.Limits.MemoryMB {
					t.Errorf("HOLE: the code held %d MiB under a %d MiB limit", mb, x.r.Limits.MemoryMB)
				}
				switch x.r.Status {
				case "timeout":
					t.Logf("NOTE: the memory bomb ended in timeout after %d ms, not oom: the code stalled at the limit (held %s MiB of %d) until the wall clock", x.r.DurationMS, held, x.r.Limits.MemoryMB)
				case "killed":
					t.Logf("NOTE (gVisor): the memory bomb ended %q (%s) after %d ms holding %s MiB: the host's OOM killer took the sandbox and sandboxd did not classify it as oom", x.r.Status, x.r.Message, x.r.DurationMS, held)
				}
			},
			strict: &override{status: "oom", otherStatus: []string{"timeout", "killed"},
				why: "under runsc the host OOM killer may end the whole sandbox, which sandboxd then reports as killed"},
		},
		{
			// Lowering its own OOM score (so the kernel would pick the
			// launcher) is refused; the code is the one killed.
			name: "memory-bomb-oom-score-dodge",
			code: `
attempt("lower-own-oom-score-adj", probe_write_raise, "/proc/self/oom_score_adj", b"-1000")
attempt("raise-pid1-oom-score-adj", probe_write_raise, "/proc/1/oom_score_adj", b"1000")
say("OOMADJ", open("/proc/self/oom_score_adj").read().strip())
x = []
while True:
    x.append(b"x" * (1 << 20))
`,
			status: "oom",
			check: func(t *testing.T, x *run) {
				x.allDenied(t, []string{"lower-own-oom-score-adj", "raise-pid1-oom-score-adj"}, []string{"EACCES", "EPERM"})
				x.wantFact(t, "OOMADJ", "1000")
			},
			strict: &override{status: "oom", otherStatus: []string{"killed"}, check: func(t *testing.T, x *run) {
				x.wantDenied(t, "raise-pid1-oom-score-adj")
			}, why: "gVisor keeps its own oom_score_adj per task; the host's OOM killer sees the sandbox as a whole, and may take the sentry with it (killed)"},
		},
		{
			// 8 threads that really run in parallel (hashlib releases the
			// GIL on large buffers) for 2 s under cpus=1: the CFS quota
			// holds CPU time to about the wall time.
			name:    "cpu-spin-threads",
			solo:    true,
			hostCPU: true,
			code: `
import threading, hashlib, resource
buf = b"\0" * (1 << 20)
def rate(n, secs):
    counts = [0] * n
    stop = time.monotonic() + secs
    def spin(i):
        while time.monotonic() < stop:
            hashlib.sha256(buf).digest()
            counts[i] += 1
    ts = [threading.Thread(target=spin, args=(i,)) for i in range(n)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    return sum(counts) / secs
r1 = rate(1, 0.3)
t0 = time.monotonic()
r8 = rate(8, 2)
say("WALL", "%.3f" % (time.monotonic() - t0))
r1 = max(r1, rate(1, 0.3))
ru = resource.getrusage(resource.RUSAGE_SELF)
say("CPU", "%.3f" % (ru.ru_utime + ru.ru_stime))
say("RATIO", "%.3f" % (r8 / r1))
`,
			status: "ok",
			check:  checkCPUQuota,
			strict: &override{check: checkCPUQuotaStrict, why: "gVisor reports virtual CPU time; the quota is checked by throughput"},
		},
		{
			name:    "cpu-spin-processes",
			solo:    true,
			hostCPU: true,
			code: `
import resource
def rate(n, secs):
    stop = time.monotonic() + secs
    r, w = os.pipe()
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            c = 0
            while time.monotonic() < stop:
                c += 1
            os.write(w, b"%d\n" % c)
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    os.close(w)
    total = sum(int(l) for l in os.read(r, 65536).split())
    os.close(r)
    return total / secs
r1 = rate(1, 0.3)
t0 = time.monotonic()
r8 = rate(8, 2)
say("WALL", "%.3f" % (time.monotonic() - t0))
r1 = max(r1, rate(1, 0.3))
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
me = resource.getrusage(resource.RUSAGE_SELF)
say("CPU", "%.3f" % (ru.ru_utime + ru.ru_stime + me.ru_utime + me.ru_stime))
say("RATIO", "%.3f" % (r8 / r1))
`,
			status: "ok",
			check:  checkCPUQuota,
			strict: &override{status: "ok", otherStatus: []string{"timeout", "killed"}, check: func(t *testing.T, x *run) {
				switch x.r.Status {
				case "timeout":
					t.Logf("NOTE (gVisor): 8 forks and the spin did not fit the 5 s limit at half a CPU (the 8-way phase took %s s)", factOr(x, "WALL"))
					return
				case "killed":
					t.Logf("NOTE (gVisor): the sandbox ended without a report after %d ms with 10 processes (%q): the host pids limit counts gVisor's own tasks", x.r.DurationMS, x.r.Message)
					return
				}
				checkCPUQuotaStrict(t, x)
			}, why: "gVisor reports virtual CPU time, so the quota is checked by throughput; forks are slow in the sentry, and the host pids limit counts gVisor's tasks"},
		},
		{
			// A daemon (double fork + setsid, output closed) that outlives
			// the main program: it is killed when the main program ends, so
			// the run ends promptly and its later write never happens. A
			// second one becomes /bin/sleep with the run's nonce in its
			// command line, so the host can be searched for it. The main
			// program reports its own running time: the run may take little
			// longer (not the late writer's 5 s), however slow the machine.
			name: "daemon-double-fork",
			code: `
t0 = time.monotonic()
def daemon(body):
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        for fd in (0, 1, 2):
            os.close(fd)
        body()
        os._exit(0)
    os.waitpid(pid, 0)

def late_writer():
    time.sleep(5)
    with open("/sandbox/out/daemon.txt", "w") as f:
        f.write("the daemon outlived the run")

def sleeper():
    os.execv("/bin/sleep", ["sleep", "300.{{NONCENUM}}"])

daemon(late_writer)
daemon(sleeper)
time.sleep(0.3)
say("MAIN", "exits", int((time.monotonic() - t0) * 1000))
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				v, _ := x.fact("MAIN")
				var exits string
				var mainMS int64
				if _, err := fmtSscan(v, &exits, &mainMS); err != nil || exits != "exits" {
					t.Fatalf("MAIN = %q, want \"exits <ms>\"", v)
				}
				if x.r.File("daemon.txt") != nil || x.r.Skipped("daemon.txt") != nil {
					t.Errorf("HOLE: the daemon's write after the main program ended is in the result")
				}
				if x.r.DurationMS > mainMS+1500 {
					t.Errorf("duration_ms %d, the main program ran %d ms: the run should end when the main program does, not wait for its daemons", x.r.DurationMS, mainMS)
				}
				if w := x.wallAfterStart(); w > 8*time.Second {
					t.Errorf("the request took %v after its sandbox was ready: the run was not ended promptly", w)
				}
			},
			host: func(t *testing.T, x *run) {
				if left := e2e.HostProcsMatching("300." + x.nonceNum); len(left) > 0 {
					t.Errorf("HOLE: the daemon is alive on the host after the response: %s", strings.Join(left, "; "))
				}
			},
		},
		{
			name:   "timeout-ignoring-sigterm",
			limits: map[string]any{"timeout_ms": 1500},
			code: `
import signal
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1):
    signal.signal(s, signal.SIG_IGN)
say("SLEEPING")
time.sleep(60)
say("WOKE")
`,
			status: "timeout",
			check: func(t *testing.T, x *run) {
				switch x.r.Stdout {
				case "SLEEPING\n":
				case "":
					t.Logf("NOTE: the code had not printed its first line when the 1.5 s limit ended it (a loaded machine)")
				default:
					t.Errorf("stdout %q, want the output before the limit only", x.r.Stdout)
				}
				if x.r.DurationMS < 1500 || x.r.DurationMS >= 2500 {
					t.Errorf("duration_ms %d, want in [1500, 2500): within the limit + 1 s", x.r.DurationMS)
				}
				if w := x.wallAfterStart(); w > 7*time.Second {
					t.Errorf("the request took %v after its sandbox was ready, for a 1.5 s limit", w)
				}
			},
		},
		{
			// kill(-1, SIGKILL) reaches every process the code may signal:
			// on Linux not the caller itself and not the namespace's init
			// (the launcher). The code then kills itself; the launcher
			// reports that.
			name: "kill-minus-one",
			code: `
kids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
say("BEFORE")
try:
    os.kill(-1, 9)
    say("KILL-MINUS-ONE", "sent")
except OSError as e:
    say("KILL-MINUS-ONE", ename(e.errno))
say("KIDS", " ".join(str(os.waitpid(p, 0)[1] & 0x7f) for p in kids))
say("CALLER-SURVIVED")
os.kill(os.getpid(), 9)
say("AFTER")
`,
			status: "killed",
			check: func(t *testing.T, x *run) {
				if x.r.Signal != "SIGKILL" || x.r.ExitCode != 137 {
					t.Errorf("signal %q exit_code %d, want SIGKILL 137", x.r.Signal, x.r.ExitCode)
				}
				x.wantFact(t, "KIDS", "9 9 9")
				if strings.Contains(x.r.Stdout, "AFTER") {
					t.Errorf("stdout %q: the code outlived its own SIGKILL", x.r.Stdout)
				}
				if _, ok := x.fact("CALLER-SURVIVED"); ok {
					t.Logf("NOTE: kill(-1, SIGKILL) spared the caller (Linux semantics); the code's own SIGKILL ended it")
				}
			},
		},
		{
			// Deep recursion through C (map calls back into Python): with
			// the recursion limit lifted the C stack overflows.
			name: "recursion-limit-blowup",
			code: `
sys.setrecursionlimit(10**6)
def f(x):
    return list(map(f, [x]))
say("START")
f(0)
say("SURVIVED")
`,
			status: "killed",
			check: func(t *testing.T, x *run) {
				if x.r.Signal != "SIGSEGV" {
					t.Errorf("signal %q, want SIGSEGV (C stack overflow)", x.r.Signal)
				}
			},
			strict: &override{status: "killed", check: func(t *testing.T, x *run) {}},
		},
	}
}

func checkCPUQuota(t *testing.T, x *run) {
	t.Helper()
	cpus := x.r.Limits.CPUs
	if cpus <= 0 {
		cpus = 1
	}
	used := x.r.Usage.UserCPUMS + x.r.Usage.SysCPUMS
	bound := float64(x.r.DurationMS)*cpus*cpuQuotaSlack + 50
	t.Logf("CPU %d ms (user %d + sys %d) in %d ms of wall time with cpus=%g (self-measured: CPU %s s in all, the 8-way phase lasted %s s)",
		used, x.r.Usage.UserCPUMS, x.r.Usage.SysCPUMS, x.r.DurationMS, cpus, factOr(x, "CPU"), factOr(x, "WALL"))
	if float64(used) > bound {
		t.Errorf("HOLE: usage %d ms CPU in %d ms wall: above %gx the %g-CPU quota", used, x.r.DurationMS, cpuQuotaSlack, cpus)
	}
	wall := x.factFloat(t, "WALL")
	checkHostCPU(t, x, cpus)
	if wall < 1.9 {
		t.Errorf("WALL %.3f: the spin did not last its 2 s", wall)
	}
	if used < 300 {
		t.Logf("NOTE: only %d ms CPU used in the run: the machine is loaded and the quota bound says little", used)
	}
}

func factOr(x *run, key string) string {
	v, _ := x.fact(key)
	return v
}

func lastFact(x *run, key, def string) string {
	last := def
	for _, l := range x.lines {
		if v, ok := strings.CutPrefix(l, key+" "); ok {
			last = v
		}
	}
	return last
}

func fmtSscan(s string, args ...any) (int, error) { return fmt.Sscan(s, args...) }

// checkCPUQuotaStrict checks the quota under gVisor, whose in-sandbox CPU
// accounting is virtual (it counts time a task was on a virtual CPU,
// throttled or not): only the engine's measure of the container counts.
func checkCPUQuotaStrict(t *testing.T, x *run) {
	t.Helper()
	t.Logf("NOTE (gVisor): usage says %d ms CPU in %d ms of wall time with cpus=%g (virtual time)", x.r.Usage.UserCPUMS+x.r.Usage.SysCPUMS, x.r.DurationMS, x.r.Limits.CPUs)
	if wall := x.factFloat(t, "WALL"); wall < 1.9 {
		t.Errorf("WALL %.3f: the spin did not last its 2 s", wall)
	}
	checkHostCPU(t, x, x.r.Limits.CPUs)
}

// checkHostCPU bounds the CPU rate the engine measured for the run's
// container by the quota. The work ratio the code measured (8 at once
// against 1 alone) is logged only: on a loaded machine the lone phase gets
// less than its share and the ratio says little.
func checkHostCPU(t *testing.T, x *run, cpus float64) {
	t.Helper()
	if r, ok := x.fact("RATIO"); ok {
		t.Logf("work in 8 at once / work in 1 alone: %s", r)
	}
	if x.hostWindow == 0 {
		t.Logf("NOTE: the engine gave no CPU samples over a second or more for this run; the host-side bound was not checked")
		return
	}
	t.Logf("engine-measured CPU rate of the container: %.2f CPUs over %v (throttled in %d CFS periods), quota %g", x.hostRate, x.hostWindow.Round(time.Millisecond), x.hostThrottled, cpus)
	if x.hostRate > cpus*cpuQuotaSlack+0.05 {
		t.Errorf("HOLE: the container used %.2f CPUs over %v, above %gx its %g-CPU quota", x.hostRate, x.hostWindow.Round(time.Millisecond), cpuQuotaSlack, cpus)
	}
}
