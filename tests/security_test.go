package tests

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/internal/e2e"
)

// lines parses "KEY value..." lines printed by test code.
func lines(stdout string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(stdout, "\n") {
		k, v, _ := strings.Cut(l, " ")
		if k != "" {
			m[k] = v
		}
	}
	return m
}

// TestNoNetwork checks that the sandbox has no network: connecting to
// sandboxd's own port on loopback fails, and so does a connection to an
// address outside the machine. The latter is attempted only after the code
// has checked that the sandbox has no interface but lo and no route, so no
// packet can leave even if the lockdown were broken (TEST-NET 192.0.2.1 is
// never routed in any case).
// noRouteFailWithin bounds how long a connect to a non-loopback address may
// take to fail in the sandbox. With no route the kernel refuses at once
// (ENETUNREACH, microseconds); the code's 2 s socket timeout firing instead
// would mean packets were sent and went unanswered.
const noRouteFailWithin = 1 * time.Second

func TestNoNetwork(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	code := fmt.Sprintf(`import socket, time
ifaces = sorted(n for _, n in socket.if_nameindex())
print("IFACES", ",".join(ifaces))
routes = [l for l in open("/proc/net/route").read().splitlines()[1:] if l.strip()]
routes6 = [l for l in open("/proc/net/ipv6_route").read().splitlines() if l.strip() and not l.rstrip().endswith("lo")]
print("ROUTES", len(routes), len(routes6))

def attempt(tag, host, port):
    t0 = time.monotonic()
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    except OSError as e:
        # A profile without network allows no IP sockets at all (EPERM).
        print(tag, "FAILED", e.errno, "%%.3f" %% (time.monotonic() - t0), type(e).__name__)
        return
    s.settimeout(2)
    try:
        s.connect((host, port))
        print(tag, "CONNECTED")
    except OSError as e:
        print(tag, "FAILED", e.errno, "%%.3f" %% (time.monotonic() - t0), type(e).__name__)
    finally:
        s.close()

attempt("LOOPBACK", "127.0.0.1", %d)
if ifaces == ["lo"] and not routes and not routes6:
    attempt("PUBLIC", "192.0.2.1", 80)
else:
    print("PUBLIC NOT-TRIED the sandbox has a network")
`, srv.Port)
	r, res := c.execStatus(e2e.Py(code), "ok")
	m := lines(r.Stdout)
	if m["IFACES"] != "lo" {
		t.Errorf("network interfaces %q, want only lo\n%s", m["IFACES"], res)
	}
	if m["ROUTES"] != "0 0" {
		t.Errorf("routes (IPv4, IPv6 non-lo) %q, want none\n%s", m["ROUTES"], res)
	}
	if !strings.HasPrefix(m["LOOPBACK"], "FAILED") {
		t.Errorf("connecting to 127.0.0.1:%d (sandboxd's port) from the sandbox: %q, want a failure\n%s", srv.Port, m["LOOPBACK"], res)
	}
	pub := strings.Fields(m["PUBLIC"])
	if len(pub) < 3 || pub[0] != "FAILED" {
		t.Fatalf("connecting to 192.0.2.1:80: %q, want an immediate failure\n%s", m["PUBLIC"], res)
	}
	var secs float64
	fmt.Sscanf(pub[2], "%g", &secs)
	if secs >= noRouteFailWithin.Seconds() {
		t.Errorf("connecting to 192.0.2.1:80 took %gs to fail; with no network it must fail at once (within %v)", secs, noRouteFailWithin)
	}
}

func TestReadOnlyRootAndNoexecTmp(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	r, res := c.execStatus(e2e.Py(`import os, shutil, subprocess, errno
def try_write(tag, path):
    try:
        with open(path, "w") as f:
            f.write("x")
        print(tag, "WROTE")
    except OSError as e:
        print(tag, "FAILED", errno.errorcode.get(e.errno, e.errno))
try_write("ROOT", "/evil")
try_write("USR", "/usr/evil")
try_write("SBIN", "/usr/local/bin/evil")
try_write("TMP", "/tmp/ok.txt")
try_write("SANDBOX", "/sandbox/ok.txt")
print("TMPREAD", open("/tmp/ok.txt").read())

with open("/tmp/run.sh", "w") as f:
    f.write("#!/bin/sh\necho executed\n")
os.chmod("/tmp/run.sh", 0o755)
shutil.copy("/bin/true", "/tmp/true")
os.chmod("/tmp/true", 0o755)
for tag, path in (("EXECSH", "/tmp/run.sh"), ("EXECBIN", "/tmp/true")):
    try:
        p = subprocess.run([path], capture_output=True)
        print(tag, "RAN", p.returncode)
    except OSError as e:
        print(tag, "FAILED", errno.errorcode.get(e.errno, e.errno))
`), "ok")
	m := lines(r.Stdout)
	for _, k := range []string{"ROOT", "USR", "SBIN"} {
		if m[k] != "FAILED EROFS" {
			t.Errorf("writing a file under the root filesystem (%s): %q, want FAILED EROFS\n%s", k, m[k], res)
		}
	}
	for _, k := range []string{"TMP", "SANDBOX"} {
		if m[k] != "WROTE" {
			t.Errorf("writing to the scratch space (%s): %q, want WROTE\n%s", k, m[k], res)
		}
	}
	if m["TMPREAD"] != "x" {
		t.Errorf("reading back /tmp/ok.txt: %q", m["TMPREAD"])
	}
	for _, k := range []string{"EXECSH", "EXECBIN"} {
		if m[k] != "FAILED EACCES" {
			t.Errorf("executing a file from /tmp (%s): %q, want FAILED EACCES (noexec)\n%s", k, m[k], res)
		}
	}
}

func TestOutputLinksAndSpecialFiles(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	r, res := c.execStatus(e2e.Py(`import os
os.symlink("/etc/passwd", "/sandbox/out/passwd_link")
os.symlink("/etc", "/sandbox/out/etc_link")
os.symlink("../../etc/shadow", "/sandbox/out/relative_link")
os.mkfifo("/sandbox/out/fifo")
with open("/sandbox/out/ok.txt", "w") as f:
    f.write("ok")
`), "ok")
	for _, p := range []string{"passwd_link", "etc_link", "relative_link", "fifo"} {
		s := r.Skipped(p)
		if s == nil {
			t.Errorf("skipped_files lacks %q\n%s", p, res)
		} else if strings.TrimSpace(s.Reason) == "" {
			t.Errorf("skipped file %q has no reason", p)
		}
	}
	if len(r.Files) != 1 || r.File("ok.txt") == nil || string(unb64(t, r.File("ok.txt").Content)) != "ok" {
		t.Errorf("files %+v, want only ok.txt with \"ok\"", r.Files)
	}
	// No passwd content (the host's or the image's) anywhere in the response.
	hostPasswd, _ := os.ReadFile("/etc/passwd")
	needles := []string{"root:x:0:0", "root:*:0:0", "nobody:x:65534"}
	if first, _, _ := strings.Cut(string(hostPasswd), "\n"); len(first) > 8 {
		needles = append(needles, first)
	}
	body := string(res.Body)
	for _, n := range needles {
		if strings.Contains(body, n) {
			t.Errorf("the response contains %q from a passwd file\n%s", n, res)
		}
		for _, enc := range b64Variants(n) {
			if strings.Contains(body, enc) {
				t.Errorf("the response contains %q from a passwd file, base64-encoded\n%s", n, res)
			}
		}
	}
	for _, f := range r.Files {
		content := string(unb64(t, f.Content))
		for _, n := range needles {
			if strings.Contains(content, n) {
				t.Errorf("returned file %q contains %q from a passwd file", f.Path, n)
			}
		}
	}
	for _, f := range r.Files {
		if strings.HasPrefix(f.Path, "etc_link/") {
			t.Errorf("a file under the directory symlink was returned: %q", f.Path)
		}
	}
}

func TestIdentityAndPrivileges(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	r, res := c.execStatus(e2e.Py(`import os
print("UID", os.getuid(), os.geteuid())
print("GID", os.getgid(), os.getegid())
print("GROUPS", ",".join(str(g) for g in sorted(os.getgroups())) or "-")
for line in open("/proc/self/status"):
    k, _, v = line.partition(":")
    if k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"):
        print(k, v.strip())
import socket
print("HOSTNAME", socket.gethostname())
`), "ok")
	m := lines(r.Stdout)
	want := map[string]string{
		"UID":        "65534 65534",
		"GID":        "65534 65534",
		"CapInh":     "0000000000000000",
		"CapPrm":     "0000000000000000",
		"CapEff":     "0000000000000000",
		"CapBnd":     "0000000000000000",
		"CapAmb":     "0000000000000000",
		"NoNewPrivs": "1",
		"Seccomp":    "2",
		"HOSTNAME":   "sandbox",
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %q, want %q\n%s", k, m[k], v, res)
		}
	}
	if slices.Contains(strings.Split(m["GROUPS"], ","), "0") {
		t.Errorf("supplementary groups %q include root", m["GROUPS"])
	}
}

func TestPtraceAndUnshareRefused(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	r, res := c.execStatus(e2e.Py(`import ctypes, os, time, errno, signal
libc = ctypes.CDLL(None, use_errno=True)
def show(tag, rc):
    e = ctypes.get_errno()
    print(tag, rc, errno.errorcode.get(e, e) if rc != 0 else "-")

pid = os.fork()
if pid == 0:
    time.sleep(30)
    os._exit(0)
PTRACE_ATTACH = 16
show("PTRACE_ATTACH", libc.ptrace(PTRACE_ATTACH, pid, None, None))
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
show("PTRACE_TRACEME", libc.ptrace(0, 0, None, None))
show("UNSHARE_USER", libc.unshare(0x10000000))
show("UNSHARE_NS", libc.unshare(0x00020000))
show("UNSHARE_NET", libc.unshare(0x40000000))
show("MOUNT", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
`), "ok")
	m := lines(r.Stdout)
	for _, k := range []string{"PTRACE_ATTACH", "PTRACE_TRACEME", "UNSHARE_USER", "UNSHARE_NS", "UNSHARE_NET", "MOUNT"} {
		if m[k] != "-1 EPERM" {
			t.Errorf("%s: %q, want -1 EPERM\n%s", k, m[k], res)
		}
	}
}

// TestNoHostEnvironment: nothing from sandboxd's own environment reaches the
// code (the canary was put in sandboxd's environment only).
func TestNoHostEnvironment(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	r, res := c.execStatus(e2e.Py(`import os
for k in sorted(os.environ):
    print(k + "=" + os.environ[k])
`), "ok")
	if strings.Contains(r.Stdout, canaryValue) || strings.Contains(r.Stdout, canaryName) {
		t.Errorf("the code sees the canary %s from sandboxd's environment\n%s", canaryName, res)
	}
	allowed := envNames(imageEnv(t))
	// Set by the kernel/runtime or the launcher, not taken from the host.
	for _, k := range []string{"HOSTNAME", "PYTHONPATH", "PWD", "SHLVL", "_"} {
		allowed[k] = true
	}
	got := envNames(strings.Split(strings.TrimSpace(r.Stdout), "\n"))
	for k := range envNames(serverEnv) {
		if got[k] && !allowed[k] {
			t.Errorf("the code sees %s, a variable of sandboxd's environment that the image does not set\n%s", k, res)
		}
	}
}

// TestContainerLockdown inspects running sandbox containers: one with the
// default profile, one with lowered limits. Not parallel, so the containers
// seen are this test's.
func TestContainerLockdown(t *testing.T) {
	if cellMode() {
		t.Skip("cell mode: a run has no container of its own; tests/cells TestCellHostLockdown inspects its host")
	}
	c := newTC(t)
	code := "import time\ntime.sleep(3)\nprint('done')"
	lowered := e2e.Py(code)
	lowered.Limits = map[string]any{"memory_mb": 64, "cpus": 0.5, "pids": 32, "tmpfs_mb": 8}

	w := startWatch()
	var wg sync.WaitGroup
	var rDef, rLow *e2e.ExecResponse
	wg.Add(2)
	go func() { defer wg.Done(); rDef = execNoFatal(t, c, e2e.Py(code)) }()
	go func() { defer wg.Done(); rLow = execNoFatal(t, c, lowered) }()
	wg.Wait()
	seen := w.stop()
	if rDef == nil || rLow == nil {
		t.FailNow()
	}
	imgEnv := imageEnv(t)
	for _, tt := range []struct {
		name string
		r    *e2e.ExecResponse
		want e2e.ExecLimits
	}{
		{"default", rDef, e2e.ExecLimits{MemoryMB: defMemoryMB, CPUs: defCPUs, Pids: defPids, TmpfsMB: defTmpfsMB}},
		{"lowered", rLow, e2e.ExecLimits{MemoryMB: 64, CPUs: 0.5, Pids: 32, TmpfsMB: 8}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.r.Status != "ok" || tt.r.Stdout != "done\n" {
				t.Errorf("run: status %q stdout %q stderr %q", tt.r.Status, tt.r.Stdout, tt.r.Stderr)
			}
			info, ok := seen[tt.r.ID]
			if !ok {
				t.Fatalf("no running container labelled sandboxd.exec-id=%s was seen during its 3 s run (saw %v)", tt.r.ID, sortedKeys(seen))
			}
			checkLockdown(t, info, tt.r.ID, tt.want, imgEnv)
			waitExecGone(t, tt.r.ID)
		})
	}
}

func execNoFatal(t *testing.T, c *tc, req e2e.ExecRequest) *e2e.ExecResponse {
	res, err := rawExec(context.Background(), agentKey, req, c.requestID())
	if err != nil {
		t.Errorf("POST /exec: %v", err)
		return nil
	}
	if res.Status != 200 {
		t.Errorf("want 200\n%s", res)
		return nil
	}
	var r e2e.ExecResponse
	if err := json.Unmarshal(res.Body, &r); err != nil {
		t.Errorf("%v\n%s", err, res)
		return nil
	}
	seenExecIDs.Add(r.ID)
	c.note(r.ID)
	return &r
}

var tmpfsSize = regexp.MustCompile(`(^|,)size=([0-9]+[kmgKMG]?)(,|$)`)

func checkLockdown(t *testing.T, info container.InspectResponse, id string, want e2e.ExecLimits, imgEnv []string) {
	t.Helper()
	cfg, hc := info.Config, info.HostConfig
	if cfg == nil || hc == nil || info.ContainerJSONBase == nil {
		t.Fatalf("inspect lacks Config or HostConfig")
	}
	errorf := func(format string, args ...any) { t.Helper(); t.Errorf(format, args...) }

	if info.Name != "/sandboxd-"+id {
		errorf("container name %q, want /sandboxd-%s", info.Name, id)
	}
	if cfg.Labels["sandboxd.managed"] != "true" || cfg.Labels["sandboxd.exec-id"] != id {
		errorf("labels %v, want sandboxd.managed=true and sandboxd.exec-id=%s", cfg.Labels, id)
	}
	if hc.NetworkMode != "none" {
		errorf("NetworkMode %q, want none", hc.NetworkMode)
	}
	if !hc.ReadonlyRootfs {
		errorf("ReadonlyRootfs false")
	}
	wantTmpfs := func(path string, flags ...string) {
		t.Helper()
		opts, ok := hc.Tmpfs[path]
		if !ok {
			errorf("Tmpfs %v has no %s", hc.Tmpfs, path)
			return
		}
		have := strings.Split(opts, ",")
		for _, f := range flags {
			if !slices.Contains(have, f) {
				errorf("tmpfs %s options %q lack %s", path, opts, f)
			}
		}
		m := tmpfsSize.FindStringSubmatch(opts)
		if m == nil {
			errorf("tmpfs %s options %q have no size", path, opts)
			return
		}
		if sz := m[2]; sz != fmt.Sprintf("%dm", want.TmpfsMB) && sz != fmt.Sprintf("%d", want.TmpfsMB<<20) && sz != fmt.Sprintf("%dk", want.TmpfsMB<<10) {
			errorf("tmpfs %s size %s, want %d MiB", path, sz, want.TmpfsMB)
		}
	}
	wantTmpfs("/tmp", "noexec", "nosuid", "nodev")
	wantTmpfs("/sandbox", "nosuid", "nodev")
	if mem := want.MemoryMB << 20; hc.Memory != mem || hc.MemorySwap != mem {
		errorf("Memory %d MemorySwap %d, want both %d (%d MiB)", hc.Memory, hc.MemorySwap, mem, want.MemoryMB)
	}
	if n := int64(want.CPUs * 1e9); hc.NanoCPUs != n {
		errorf("NanoCPUs %d, want %d", hc.NanoCPUs, n)
	}
	if hc.PidsLimit == nil || *hc.PidsLimit != want.Pids+pidsOverhead {
		errorf("PidsLimit %v, want %d (pids %d + %d)", derefInt(hc.PidsLimit), want.Pids+pidsOverhead, want.Pids, pidsOverhead)
	}
	ulimits := map[string][2]int64{}
	for _, u := range hc.Ulimits {
		if u != nil {
			ulimits[u.Name] = [2]int64{u.Soft, u.Hard}
		}
	}
	for _, name := range []string{"nofile", "fsize"} {
		if v, ok := ulimits[name]; !ok || v[0] <= 0 || v[1] <= 0 {
			errorf("ulimit %s %v, want set (Ulimits %v)", name, v, ulimits)
		}
	}
	if v, ok := ulimits["core"]; !ok || v != [2]int64{0, 0} {
		errorf("ulimit core %v (set %v), want 0/0", v, ok)
	}
	if len(hc.CapDrop) != 1 || !strings.EqualFold(hc.CapDrop[0], "ALL") {
		errorf("CapDrop %v, want [ALL]", hc.CapDrop)
	}
	if len(hc.CapAdd) != 0 {
		errorf("CapAdd %v, want none", hc.CapAdd)
	}
	if !slices.Contains(hc.SecurityOpt, "no-new-privileges:true") && !slices.Contains(hc.SecurityOpt, "no-new-privileges") {
		errorf("SecurityOpt lacks no-new-privileges:true: %v", shortOpts(hc.SecurityOpt))
	}
	seccomp := ""
	for _, o := range hc.SecurityOpt {
		if strings.HasPrefix(o, "seccomp=") || strings.HasPrefix(o, "seccomp:") {
			seccomp = o[len("seccomp="):]
		}
	}
	if seccomp == "" || seccomp == "unconfined" {
		errorf("SecurityOpt has no seccomp profile (or an unconfined one): %v", shortOpts(hc.SecurityOpt))
	}
	if hc.Privileged {
		errorf("Privileged true")
	}
	if cfg.User != "65534:65534" {
		errorf("User %q, want 65534:65534", cfg.User)
	}
	// No docker-init: sandboxd's launcher is the container's init (pid 1), so
	// that no process the code can reach holds the report stream.
	if hc.Init != nil && *hc.Init {
		errorf("Init true: docker-init would hold the report stream as a process the code can reach")
	}
	if hc.CgroupnsMode != "private" {
		errorf("CgroupnsMode %q, want private", hc.CgroupnsMode)
	}
	if hc.IpcMode != "private" {
		errorf("IpcMode %q, want private", hc.IpcMode)
	}
	if hc.ShmSize <= 0 || hc.ShmSize > 64<<20 {
		errorf("ShmSize %d, want small (0 < size <= 64 MiB)", hc.ShmSize)
	}
	if cfg.Hostname != "sandbox" {
		errorf("Hostname %q, want sandbox", cfg.Hostname)
	}
	if len(hc.Binds) != 0 || len(hc.Mounts) != 0 || len(hc.VolumesFrom) != 0 || len(hc.Devices) != 0 {
		errorf("host resources mapped in: Binds %v Mounts %v VolumesFrom %v Devices %v", hc.Binds, hc.Mounts, hc.VolumesFrom, hc.Devices)
	}
	for _, m := range info.Mounts {
		errorf("container has a %s mount %s -> %s", m.Type, m.Source, m.Destination)
	}
	if hc.LogConfig.Type != "none" {
		errorf("LogConfig.Type %q, want none", hc.LogConfig.Type)
	}
	for _, mode := range []struct{ name, v string }{{"PidMode", string(hc.PidMode)}, {"UTSMode", string(hc.UTSMode)}, {"UsernsMode", string(hc.UsernsMode)}} {
		if mode.v == "host" {
			errorf("%s is host", mode.name)
		}
	}
	// Env: the canary is absent, and every variable is one the image sets.
	imgSet := map[string]bool{}
	for _, kv := range imgEnv {
		imgSet[kv] = true
	}
	for _, kv := range cfg.Env {
		if strings.Contains(kv, canaryValue) || strings.HasPrefix(kv, canaryName+"=") {
			errorf("container Env holds the host canary: %q", kv)
		} else if !imgSet[kv] {
			errorf("container Env holds %q, which the image does not set", kv)
		}
	}
	if info.State == nil || !info.State.Running {
		errorf("container was not running when inspected")
	}
}

func derefInt(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// shortOpts abbreviates inline seccomp JSON in SecurityOpt for messages.
func shortOpts(opts []string) []string {
	out := make([]string, len(opts))
	for i, o := range opts {
		if len(o) > 60 {
			o = o[:60] + "…"
		}
		out[i] = o
	}
	return out
}

// TestClientDisconnect: a client that goes away mid-run leaves no container.
// Not parallel, so every container of ours that appears is this test's.
func TestClientDisconnect(t *testing.T) {
	c := newTC(t)
	ctx, cancel := context.WithTimeout(context.Background(), disconnectAfter)
	defer cancel()
	start := time.Now()
	reqID := c.requestID()
	_, err := rawExec(ctx, agentKey, e2e.Py("import time\ntime.sleep(30)\nprint('finished')"), reqID)
	gaveUp := time.Now()
	if err == nil {
		t.Fatalf("the request finished before the client gave up after %v", disconnectAfter)
	}
	// The run's container may have been started before the request (warm
	// pool), so its exec id comes from the server's log of the request.
	execID := execIDFromLog(t, reqID)
	seenExecIDs.Add(execID)
	c.note(execID)
	seen := map[string]bool{execID: true}
	ids := sortedKeys(seen)
	left := e2e.WaitGone(e2e.RemovalTimeout, ourContainers, func(cs container.Summary) bool { return slices.Contains(ids, cs.Labels["sandboxd.exec-id"]) })
	if len(left) > 0 {
		t.Errorf("%v after the client disconnected, its container is still there: %s", time.Since(gaveUp).Round(time.Millisecond), strings.Join(left, ", "))
	} else {
		t.Logf("container of %v gone %v after the disconnect (run started %v before it)", ids, time.Since(gaveUp).Round(10*time.Millisecond), gaveUp.Sub(start).Round(10*time.Millisecond))
	}
	wantHealthy(t)
}

// disconnectAfter is when the disconnect test's client cancels its request
// (spec: after 1 s).
const disconnectAfter = 1 * time.Second

// b64Variants returns s base64-encoded at the three byte alignments, minus
// the edge characters that depend on neighbours.
func b64Variants(s string) []string {
	var out []string
	for pad := 0; pad < 3; pad++ {
		enc := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\x00", pad) + s))
		skip := (pad*4 + 2) / 3
		end := len(enc) - 4
		if end > skip {
			out = append(out, enc[skip:end])
		}
	}
	return out
}

// TestSandboxCannotForgeItsResult: the code must not be able to write into
// the channel that carries the launcher's report to sandboxd. It tries the
// container's stdout through /proc/1/fd/1 (the container's init shares it
// with the launcher) and /proc/<launcher>/fd/1, writing frames in the
// launcher's format (a forged stdout chunk, a forged output file with a path
// outside /sandbox/out, a forged exit status 0), then fails for real. The
// response must report the real outcome.
func TestSandboxCannotForgeItsResult(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	r, res := c.exec(e2e.Py(`import json, os, struct
def frame(t, payload):
    return t + struct.pack(">I", len(payload)) + payload
hdr = json.dumps({"path": "../../escape.txt", "mode": 420, "size": 6}).encode()
forged = (frame(b"O", b"FORGED\n")
          + frame(b"F", struct.pack(">I", len(hdr)) + hdr + b"forged")
          + frame(b"X", json.dumps({"exit_code": 0, "duration_ms": 1}).encode()))
for path in ("/proc/%d/fd/1" % os.getppid(), "/proc/1/fd/1"):
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as e:
        print("NOOPEN", path, e.errno, flush=True)
        continue
    os.write(fd, forged)
    os.close(fd)
print("PID1", open("/proc/1/cmdline", "rb").read().split(b"\0")[0].decode(), flush=True)
raise ValueError("the real outcome")
`))
	if !strings.Contains(r.Stdout, "PID1 /usr/local/bin/sandboxd-launcher") {
		t.Errorf("pid 1 is not the launcher: stdout %q", r.Stdout)
	}
	if r.Status != "error" || r.ExitCode != 1 || !strings.Contains(r.Stderr, "ValueError: the real outcome") {
		t.Errorf("status %q exit_code %d stderr %q: want the real outcome (error, 1, the ValueError traceback)\n%s", r.Status, r.ExitCode, r.Stderr, res)
	}
	if strings.Contains(r.Stdout, "FORGED") {
		t.Errorf("stdout holds the forged chunk: %q", r.Stdout)
	}
	if len(r.Files) != 0 {
		t.Errorf("files %+v: the code wrote nothing under /sandbox/out; these were forged", r.Files)
	}
}

// TestBusy fills every run slot and the queue: the requests past them get
// 429 BUSY with Retry-After at once, never another error. Not parallel, so
// other tests do not see the server full.
func TestBusy(t *testing.T) {
	c := newTC(t)
	// sandboxd's defaults: 2 runs per core at once, 4 waiting per core.
	capacity := 6 * runtime.NumCPU()
	n := capacity + 4
	body := e2e.JSON(e2e.Py("import time\ntime.sleep(1)\nprint('slept')"))
	results := c.burst("request", slices.Repeat([][]byte{body}, n))
	ok, busy := 0, 0
	for i, res := range results {
		if res == nil {
			continue
		}
		switch res.Status {
		case 200:
			r := c.decodeExec(res)
			if r.Status != "ok" || r.Stdout != "slept\n" {
				t.Errorf("request %d: status %q stdout %q", i, r.Status, r.Stdout)
			}
			ok++
		case 429:
			wantError(t, res, 429, "BUSY", "*")
			if ra := res.Header.Get("Retry-After"); ra == "" || ra == "0" {
				t.Errorf("429 without a positive Retry-After (%q)", ra)
			}
			busy++
		default:
			t.Errorf("request %d: want 200 or 429\n%s", i, res)
		}
	}
	t.Logf("%d requests: %d ok, %d busy", n, ok, busy)
	if busy == 0 {
		t.Errorf("%d concurrent 1 s runs, none turned away: the queue is not bounded at %d", n, capacity)
	}
	if ok < 2*runtime.NumCPU() {
		t.Errorf("only %d of %d runs were served; at least the %d run slots should be", ok, n, 2*runtime.NumCPU())
	}
	wantHealthy(t)
}

// The code cannot stop the launcher (the container's init) from reporting:
// signals to pid 1 are dropped, kill(-1) spares it, and a daemon the code
// leaves behind is gone when the run ends.
func TestSandboxCannotSilenceTheLauncher(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	r, res := c.exec(e2e.Py(`import os, signal, sys, time
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGPIPE):
    os.kill(1, s)
try:
    os.kill(1, signal.SIGKILL)
except OSError as e:
    print("KILL1", e.errno)
if os.fork() == 0:
    os.setsid()
    time.sleep(60)
    os._exit(0)
time.sleep(0.2)
print("still here", flush=True)
sys.exit(3)
`))
	if r.Status != "error" || r.ExitCode != 3 || !strings.Contains(r.Stdout, "still here") {
		t.Fatalf("status %q exit %d stdout %q: the launcher should have reported exit 3\n%s", r.Status, r.ExitCode, r.Stdout, res)
	}
	if r.DurationMS > 5000 {
		t.Fatalf("the run took %d ms: the daemon the code left kept it alive", r.DurationMS)
	}
}

// execIDFromLog waits for the server's "run finished" line of a request and
// returns its exec id.
func execIDFromLog(t *testing.T, reqID string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(srv.Log.String(), "\n") {
			var rec struct {
				Msg       string `json:"msg"`
				RequestID string `json:"request_id"`
				ExecID    string `json:"exec_id"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "run finished" && rec.RequestID == reqID && rec.ExecID != "" {
				return rec.ExecID
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the server logged no finished run for request %s", reqID)
	return ""
}
