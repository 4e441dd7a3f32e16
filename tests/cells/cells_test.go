package cells

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/internal/e2e"
)

// The host of a run has its profile's whole lockdown, seen from the
// engine: what a container per run has, plus only what building a cell
// needs in its seccomp profile.
func TestCellHostLockdown(t *testing.T) {
	r := runAs(t, "lockdown", e2e.Py("print('hi')"))
	if r.r.Status != "ok" || r.r.Stdout != "hi\n" {
		t.Fatalf("run: %+v", r.r)
	}
	info := inspect(t, r.host)
	cfg, hc := info.Config, info.HostConfig
	if cfg.User != "65534:65534" {
		t.Errorf("User %q, want 65534:65534", cfg.User)
	}
	if cfg.Labels["sandboxd.cell-tenant"] != "lockdown" || cfg.Labels["sandboxd.instance"] != instance {
		t.Errorf("labels %v, want the tenant lockdown and instance %s", cfg.Labels, instance)
	}
	if !slices.Contains(hc.CapDrop, "ALL") || len(hc.CapAdd) != 0 || hc.Privileged {
		t.Errorf("CapDrop %v CapAdd %v Privileged %v, want ALL dropped and none added", hc.CapDrop, hc.CapAdd, hc.Privileged)
	}
	if !hc.ReadonlyRootfs || hc.NetworkMode != "none" || !cfg.NetworkDisabled {
		t.Errorf("ReadonlyRootfs %v NetworkMode %q NetworkDisabled %v", hc.ReadonlyRootfs, hc.NetworkMode, cfg.NetworkDisabled)
	}
	if hc.Runtime != "runc" || string(hc.IpcMode) != "private" || string(hc.CgroupnsMode) != "private" {
		t.Errorf("Runtime %q IpcMode %q CgroupnsMode %q", hc.Runtime, hc.IpcMode, hc.CgroupnsMode)
	}
	l := r.r.Limits
	if mem := l.MemoryMB << 20; hc.Memory != mem || hc.MemorySwap != mem {
		t.Errorf("Memory %d MemorySwap %d, want %d: one run at a time, so the run's limit", hc.Memory, hc.MemorySwap, mem)
	}
	if want := l.Pids + 16 + 4; hc.PidsLimit == nil || *hc.PidsLimit != want {
		t.Errorf("PidsLimit %v, want %d", hc.PidsLimit, want)
	}
	if !strings.Contains(hc.Tmpfs["/tmp"], "noexec") || !strings.Contains(hc.Tmpfs["/tmp"], fmt.Sprintf("size=%dm", l.TmpfsMB)) {
		t.Errorf("/tmp tmpfs %q", hc.Tmpfs["/tmp"])
	}
	var seccomp string
	nnp := false
	for _, o := range hc.SecurityOpt {
		nnp = nnp || o == "no-new-privileges:true"
		if v, ok := strings.CutPrefix(o, "seccomp="); ok {
			seccomp = v
		}
	}
	if !nnp {
		t.Errorf("SecurityOpt %v lacks no-new-privileges", hc.SecurityOpt)
	}
	host := allowed(t, []byte(seccomp))
	prof := allowed(t, readFile(t, filepath.Join(moduleRoot(t), "profiles", "seccomp", "default.json")))
	for name := range host {
		if !prof[name] && !slices.Contains([]string{"unshare", "mount", "umount2", "pivot_root", "setns", "chroot", "sethostname"}, name) {
			t.Errorf("the host's seccomp profile allows %s, which neither the profile nor building a cell needs", name)
		}
	}
	for name := range prof {
		if !host[name] {
			t.Errorf("the host's seccomp profile lacks %s of the profile", name)
		}
	}
	// Inside, the code has none of it: the cell's filter (the profile's)
	// denies what the host's allows for building cells.
	r = runAs(t, "lockdown", e2e.Py(`import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for name, call in [("unshare-user", lambda: libc.unshare(0x10000000)), ("unshare-mnt", lambda: libc.unshare(0x00020000)),
                   ("mount-tmpfs", lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
                   ("setns", lambda: libc.setns(os.open("/proc/self/ns/mnt", os.O_RDONLY), 0)),
                   ("chroot", lambda: libc.chroot(b"/tmp")), ("sethostname", lambda: libc.sethostname(b"x", 1))]:
    rc = call()
    print(name, "ALLOWED" if rc == 0 else "DENIED", os.strerror(ctypes.get_errno()))
`))
	for _, line := range strings.Split(strings.TrimSpace(r.r.Stdout), "\n") {
		if !strings.Contains(line, "DENIED") {
			t.Errorf("in a cell: %s", line)
		}
	}
	if n := strings.Count(r.r.Stdout, "DENIED"); n != 6 {
		t.Errorf("%d of 6 attempts reported: %q %q", n, r.r.Stdout, r.r.Stderr)
	}
}

// leaveBehind is a run that leaves something in every place it can write
// or hold, and a daemon that ignores every signal it can, holding a lock,
// an inotify watch, both listeners and 150 MiB.
const leaveBehind = `import ctypes, fcntl, os, signal, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)
for p in ("/tmp/left-tmp", "/sandbox/left-sandbox", "/dev/shm/left-shm"):
    open(p, "w").write("x")
print("SHM", libc.shmget(0x5ab0, 4096, 0o1000 | 0o666))
print("MSG", libc.msgget(0x5ab1, 0o1000 | 0o666))
a = socket.socket(socket.AF_UNIX); a.bind("\0sbx-left-abstract"); a.listen()
p = socket.socket(socket.AF_UNIX); p.bind("/tmp/sbx-left.sock"); p.listen()
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork():
        os._exit(0)
    for s in range(1, 65):
        try:
            signal.signal(s, signal.SIG_IGN)
        except (OSError, ValueError):
            pass
    f = open("/tmp/left-lock", "w"); fcntl.flock(f, fcntl.LOCK_EX)
    buf = bytearray(150 << 20)
    for i in range(0, len(buf), 4096):
        buf[i] = 1
    fd = libc.inotify_init(); libc.inotify_add_watch(fd, b"/tmp", 0xfff)
    os.write(w, b"up")
    while True:
        time.sleep(1)
os.close(w)
print("DAEMON", os.read(r, 2).decode())
print("PIDS", sorted(int(x) for x in os.listdir("/proc") if x.isdigit()))
`

// findNothing looks for all of it, and takes its whole memory limit.
const findNothing = `import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
print("FILES", sorted(os.listdir("/tmp")), sorted(os.listdir("/sandbox")), sorted(os.listdir("/dev/shm")))
print("PIDS", sorted(int(x) for x in os.listdir("/proc") if x.isdigit()), "SELF", os.getpid())
print("SYSV", open("/proc/sysvipc/shm").read().splitlines()[1:], open("/proc/sysvipc/msg").read().splitlines()[1:])
print("SHMGET", libc.shmget(0x5ab0, 0, 0), "MSGGET", libc.msgget(0x5ab1, 0))
for addr in ("\0sbx-left-abstract", "/tmp/sbx-left.sock"):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(addr)
        print("CONNECTED", repr(addr))
    except OSError as e:
        print("REFUSED", repr(addr), e.errno)
print("UNIX", [l for l in open("/proc/net/unix").read().splitlines()[1:] if "sbx-left" in l])
buf = bytearray(MB << 20)
for i in range(0, len(buf), 4096):
    buf[i] = 1
print("MEM", MB)
`

// Nothing of one run reaches the next run in the same host.
func TestNothingCrossesRuns(t *testing.T) {
	a := runAs(t, "xrun", e2e.Py(leaveBehind))
	if a.r.Status != "ok" || !strings.Contains(a.r.Stdout, "DAEMON up") || strings.Contains(a.r.Stdout, "SHM -1") || strings.Contains(a.r.Stdout, "MSG -1") {
		t.Fatalf("the first run did not leave everything: %+v", a.r)
	}
	waitIdle(t, "default")
	// The whole memory limit less what the interpreter and the launcher
	// take: 150 MiB of it were the daemon's.
	mb := a.r.Limits.MemoryMB - 48
	b := runAs(t, "xrun", e2e.Py(fmt.Sprintf("MB = %d\n%s", mb, findNothing)))
	if b.host != a.host {
		t.Fatalf("the second run had host %s, the first %s: the test needs both in one host", b.host, a.host)
	}
	if b.r.Status != "ok" {
		t.Fatalf("the second run: %+v", b.r)
	}
	out := b.r.Stdout
	for _, want := range []string{
		"FILES ['main.py'] ['out'] []", // its own code and output directory
		"SYSV [] []",
		"SHMGET -1 MSGGET -1",
		`REFUSED '\x00sbx-left-abstract' 111`,
		`REFUSED '/tmp/sbx-left.sock' 2`,
		"UNIX []",
		fmt.Sprintf("MEM %d", mb),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the second run lacks %q:\n%s", want, out)
		}
	}
	// Its only processes are the cell's init (pid 1) and itself.
	var self string
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "PIDS "); ok {
			pids, s, _ := strings.Cut(rest, " SELF ")
			self = s
			if pids != "[1, "+s+"]" {
				t.Errorf("the second run sees processes %s, want only [1, %s]", pids, s)
			}
		}
	}
	if self == "" {
		t.Errorf("no PIDS line:\n%s", out)
	}
}

// Two tenants' runs, mixed: no host ever serves both.
func TestTenantsNeverShareAHost(t *testing.T) {
	var mu sync.Mutex
	by := map[string]map[string]bool{} // host -> tenants
	var wg sync.WaitGroup
	work := make(chan string)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tenant := range work {
				r := runAs(t, tenant, e2e.Py("print(1)"))
				if r.r.Status != "ok" {
					t.Errorf("%s: %+v", tenant, r.r)
				}
				mu.Lock()
				if by[r.host] == nil {
					by[r.host] = map[string]bool{}
				}
				by[r.host][tenant] = true
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < 200; i++ {
		work <- []string{"red", "blue"}[i%2]
	}
	close(work)
	wg.Wait()
	counts := map[string]int{}
	for host, ts := range by {
		if len(ts) != 1 {
			t.Errorf("host %s served tenants %v", host, ts)
		}
		for tenant := range ts {
			counts[tenant]++
		}
	}
	if counts["red"] == 0 || counts["blue"] == 0 {
		t.Fatalf("hosts per tenant %v: both tenants should have had hosts", counts)
	}
	t.Logf("200 runs of two tenants on %d hosts (%v)", len(by), counts)
}

// A host whose run did not end by itself is never used again.
func TestHostReplacedAfterOOMTimeoutAndKill(t *testing.T) {
	for _, tc := range []struct {
		name, code, status string
		limits             map[string]any
	}{
		{"oom", "x = bytearray(2 << 30)\nfor i in range(0, len(x), 4096):\n    x[i] = 1\n", "oom", nil},
		{"timeout", "while True:\n    pass\n", "timeout", map[string]any{"timeout_ms": 1000}},
		{"killed", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "killed", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := runAs(t, "retire", e2e.Py("print('before')"))
			waitIdle(t, "default")
			req := e2e.Py(tc.code)
			req.Limits = tc.limits
			bad := runAs(t, "retire", req)
			if bad.r.Status != tc.status {
				t.Fatalf("status %q, want %q: %+v", bad.r.Status, tc.status, bad.r)
			}
			if bad.host != before.host {
				t.Fatalf("the %s run had host %s, the run before it %s: the test needs both in one host", tc.name, bad.host, before.host)
			}
			waitGone(t, bad.host, "a run that ended "+tc.status)
			after := runAs(t, "retire", e2e.Py("print('after')"))
			if after.host == bad.host || after.r.Status != "ok" {
				t.Errorf("the next run had host %s (status %s), the %s run's was %s", after.host, after.r.Status, tc.name, bad.host)
			}
		})
	}
}

// The data profile runs in cells too: its preloads are imported while
// the host waits.
func TestDataProfileInACell(t *testing.T) {
	req := e2e.Py("import pandas as pd\nprint(pd.DataFrame({'a': [1, 2, 3]})['a'].sum())")
	req.Profile = "data"
	for i := 0; i < 3; i++ {
		r := runAs(t, "data", req)
		if r.r.Status != "ok" || r.r.Stdout != "6\n" {
			t.Fatalf("run %d: %+v", i, r.r)
		}
	}
}

// Many runs in cells; TestMain then checks that the shutdown leaves no
// container, process or mount of any host. SANDBOXD_CELLS_SOAK sets how
// many (make soak: 10000).
func TestManyRunsThenShutdown(t *testing.T) {
	n := 300
	if v, err := strconv.Atoi(os.Getenv("SANDBOXD_CELLS_SOAK")); err == nil && v > 0 {
		n = v
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	hosts := map[string]bool{}
	work := make(chan int)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				r := runAs(t, "soak", e2e.Py(fmt.Sprintf("print(%d)", i)))
				if r.r.Status != "ok" || r.r.Stdout != fmt.Sprintf("%d\n", i) {
					t.Errorf("run %d: %+v", i, r.r)
				}
				mu.Lock()
				hosts[r.host] = true
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("%d runs on %d hosts", n, len(hosts))
}

func allowed(t *testing.T, profile []byte) map[string]bool {
	t.Helper()
	var doc struct {
		Syscalls []struct {
			Names  []string `json:"names"`
			Action string   `json:"action"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(profile, &doc); err != nil {
		t.Fatalf("seccomp profile: %v", err)
	}
	out := map[string]bool{}
	for _, r := range doc.Syscalls {
		if r.Action == "SCMP_ACT_ALLOW" {
			for _, n := range r.Names {
				out[n] = true
			}
		}
	}
	return out
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := e2e.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}
