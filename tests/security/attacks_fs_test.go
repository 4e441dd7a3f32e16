package security

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/e2e"
)

// roErr: what writing a read-only kernel file may fail with (EROFS from the
// read-only mount, EACCES from the file's mode for uid 65534).
var roErr = []string{"EROFS", "EACCES", "EPERM"}

func fsAttacks() []attack {
	return []attack{
		{
			// Files that act on the host kernel are only opened for
			// writing, never written: a successful open is the hole.
			name: "write-proc-sys-kernel",
			code: `
targets = [("core_pattern", "/proc/sys/kernel/core_pattern", None),
           ("modprobe", "/proc/sys/kernel/modprobe", None),
           ("hostname", "/proc/sys/kernel/hostname", b"sbx-{{NONCE}}"),
           ("panic_on_oops", "/proc/sys/kernel/panic_on_oops", None),
           ("randomize_va_space", "/proc/sys/kernel/randomize_va_space", None),
           ("sysrq", "/proc/sys/kernel/sysrq", None),
           ("drop_caches", "/proc/sys/vm/drop_caches", None),
           ("ip_forward", "/proc/sys/net/ipv4/ip_forward", b"1"),
           ("ping_group_range", "/proc/sys/net/ipv4/ping_group_range", b"0 2147483647")]
for tag, path, data in targets:
    probe_write_present(tag, path, data)
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				for _, tag := range x.tags("DENIED") {
					x.wantDenied(t, tag, roErr...)
				}
				x.noAllowed(t)
				if n := len(x.tags("DENIED")); n < 3 {
					t.Errorf("only %d /proc/sys files were there to try", n)
				}
				x.wantDenied(t, "core_pattern", roErr...)
			},
			strict: &override{check: func(t *testing.T, x *run) {
				x.noAllowed(t)
			}, why: "gVisor's /proc/sys has few files; none may be writable"},
			host: func(t *testing.T, x *run) {
				for _, p := range []string{"/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname", "/proc/sys/kernel/modprobe"} {
					if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), x.nonce) {
						t.Errorf("HOLE: the host's %s holds the attack's value %q", p, b)
					}
				}
			},
		},
		{
			name: "write-proc-sysrq-trigger",
			code: `
probe_write_present("sysrq-trigger", "/proc/sysrq-trigger")
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				if _, ok := x.fact("ABSENT"); ok {
					t.Logf("NOTE: /proc/sysrq-trigger does not exist in the sandbox (kernel without magic SysRq, or masked)")
				} else {
					x.wantDenied(t, "sysrq-trigger", roErr...)
				}
				x.noAllowed(t)
			},
		},
		{
			name: "write-sys",
			code: `
for tag, path, data in (("uevent_helper", "/sys/kernel/uevent_helper", None),
                        ("power-state", "/sys/power/state", None),
                        ("lo-mtu", "/sys/class/net/lo/mtu", b"1500"),
                        ("thp-enabled", "/sys/kernel/mm/transparent_hugepage/enabled", None),
                        ("kexec-loaded", "/sys/kernel/kexec_loaded", None),
                        ("module-parameters", "/sys/module/printk/parameters/time", None)):
    probe_write_present(tag, path, data)
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				for _, tag := range []string{"uevent_helper", "power-state", "lo-mtu", "thp-enabled", "kexec-loaded", "module-parameters"} {
					if _, _, ok := x.marker(tag); ok {
						x.wantDenied(t, tag, roErr...)
					}
				}
				x.noAllowed(t)
				if len(x.tags("DENIED")) < 3 {
					t.Errorf("fewer than 3 /sys files were there to try: %v", x.tags("DENIED"))
				}
			},
			strict: &override{check: func(t *testing.T, x *run) { x.noAllowed(t) }, why: "gVisor's /sys has few files; none may be writable"},
		},
		{
			// Raising its own limits through the cgroup files (v1 here,
			// mounted read-only in a private cgroup namespace).
			name: "write-own-cgroup-limits",
			code: `
import glob
targets = [("memory-limit", "/sys/fs/cgroup/memory/memory.limit_in_bytes", b"-1"),
           ("memsw-limit", "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", b"-1"),
           ("pids-max", "/sys/fs/cgroup/pids/pids.max", b"max"),
           ("cfs-quota", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us", b"-1"),
           ("devices-allow", "/sys/fs/cgroup/devices/devices.allow", b"a"),
           ("freezer-state", "/sys/fs/cgroup/freezer/freezer.state", b"THAWED"),
           ("v2-memory-max", "/sys/fs/cgroup/memory.max", b"max"),
           ("v2-pids-max", "/sys/fs/cgroup/pids.max", b"max"),
           ("v2-cpu-max", "/sys/fs/cgroup/cpu.max", b"max"),
           ("v2-subtree", "/sys/fs/cgroup/cgroup.subtree_control", b"+memory")]
n = 0
for tag, path, data in targets:
    if os.path.exists(path):
        n += 1
        probe_write(tag, path, data)
say("TRIED", n)
for p in ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"):
    if os.path.exists(p):
        say("MEMLIMIT", open(p).read().strip())
attempt("mkdir-child-cgroup", os.mkdir, (glob.glob("/sys/fs/cgroup/memory") or ["/sys/fs/cgroup"])[0] + "/sbx-{{NONCE}}")
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				if n := x.factInt(t, "TRIED"); n < 3 {
					t.Errorf("only %d cgroup limit files were there to try", n)
				}
				for _, tag := range x.tags("DENIED") {
					x.wantDenied(t, tag, roErr...)
				}
				x.noAllowed(t)
				want := strconv.FormatInt(x.r.Limits.MemoryMB<<20, 10)
				x.wantFact(t, "MEMLIMIT", want)
			},
			strict: &override{check: func(t *testing.T, x *run) { x.noAllowed(t) }, why: "gVisor shows no cgroup files here; none may be writable"},
		},
		{
			// CVE-2022-0492: mount a cgroup v1 hierarchy and set
			// release_agent to a program of ours, which the host kernel would
			// run as root. Every step must fail; the host must show no trace.
			name: "cgroup-release-agent",
			code: `
os.makedirs("/tmp/cg", exist_ok=True)
sc("mount-cgroup-v1-rdma", "mount", b"cgroup", b"/tmp/cg", b"cgroup", 0, b"rdma")
sc("mount-cgroup-v1-memory", "mount", b"cgroup", b"/tmp/cg", b"cgroup", 0, b"memory")
sc("mount-cgroup2", "mount", b"cgroup2", b"/tmp/cg", b"cgroup2", 0, None)
sc("unshare-user-mnt-cgroup", "unshare", CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWCGROUP)
with open("/sandbox/agent.sh", "w") as f:
    f.write("#!/bin/sh\ntouch /tmp/{{NONCE}}-release-agent-ran\n")
found = 0
for d in sorted(os.listdir("/sys/fs/cgroup")):
    base = "/sys/fs/cgroup/" + d
    if not os.path.isdir(base):
        continue
    for name, data in (("release_agent", b"/tmp/{{NONCE}}-agent.sh"), ("notify_on_release", b"1"), ("cgroup.procs", str(os.getpid()).encode())):
        p = base + "/" + name
        if os.path.exists(p):
            found += 1
            probe_write("write-%s-%s" % (d, name), p, data)
    attempt("mkdir-" + d, os.mkdir, base + "/sbx-{{NONCE}}")
say("CGROUPFILES", found)
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				x.allDenied(t, []string{"mount-cgroup-v1-rdma", "mount-cgroup-v1-memory", "mount-cgroup2", "unshare-user-mnt-cgroup"}, eperm)
				for _, tag := range x.tags("DENIED") {
					if strings.HasPrefix(tag, "write-") || strings.HasPrefix(tag, "mkdir-") {
						x.wantDenied(t, tag, roErr...)
					}
				}
			},
			strict: &override{check: func(t *testing.T, x *run) {
				x.allDenied(t, []string{"mount-cgroup-v1-rdma", "mount-cgroup-v1-memory", "mount-cgroup2", "unshare-user-mnt-cgroup"}, strictDeny)
			}},
			host: func(t *testing.T, x *run) {
				agents, _ := filepath.Glob("/sys/fs/cgroup/*/release_agent")
				for _, p := range agents {
					if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), x.nonce) {
						t.Errorf("HOLE: the host's %s is %q", p, b)
					}
				}
			},
		},
		{
			// Linux lets a process write its own read-only private mappings
			// through /proc/self/mem (FOLL_FORCE, as debuggers do). The copy
			// is private: neither the file nor another process changes. The
			// launcher's memory (pid 1) is out of reach.
			name: "proc-self-mem-readonly-mapping",
			code: `
target = None
for line in open("/proc/self/maps"):
    f = line.split()
    if len(f) >= 6 and f[1] == "r--p" and f[2] == "00000000" and "python3" in f[5]:
        target = (int(f[0].split("-")[0], 16), f[5])
        break
lo, path = target
addr = lo + 8   # e_ident padding of the ELF header: bytes nothing reads
orig = ctypes.string_at(addr, 8)
say("MAPPING", hex(lo), "r--p", path)
r, w = os.pipe()
child = os.fork()
if child == 0:
    os.close(w)
    os.read(r, 1)
    os.write(1, b"CHILD " + (b"changed" if ctypes.string_at(addr, 8) == b"SBXPWNED" else b"unchanged") + b"\n")
    os._exit(0)
os.close(r)
try:
    with open("/proc/self/mem", "r+b", buffering=0) as m:
        m.seek(addr)
        m.write(b"SBXPWNED")
    allowed("selfmem-write", "changed" if ctypes.string_at(addr, 8) == b"SBXPWNED" else "unchanged")
except OSError as e:
    denied("selfmem-write", e.errno)
os.write(w, b"x")
os.waitpid(child, 0)
with open(path, "rb") as f:
    f.seek(8)
    say("DISK", "changed" if f.read(8) == b"SBXPWNED" else "unchanged")
try:
    with open("/proc/self/mem", "r+b", buffering=0) as m:
        m.seek(addr)
        m.write(orig)
except OSError:
    pass
attempt("pid1-mem-open", open, "/proc/1/mem", "r+b")
attempt("parent-mem-open", open, "/proc/%d/mem" % os.getppid(), "r+b")
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				v, rest, ok := x.marker("selfmem-write")
				if !ok {
					t.Fatalf("the /proc/self/mem write was not reported")
				}
				t.Logf("NOTE: writing a read-only mapping of the code's own process through /proc/self/mem: %s %s (Linux allows it via FOLL_FORCE; the effect stays in that process)", v, rest)
				x.wantFact(t, "DISK", "unchanged")
				x.wantFact(t, "CHILD", "unchanged")
				x.wantDenied(t, "pid1-mem-open", "EACCES", "EPERM")
				x.wantDenied(t, "parent-mem-open", "EACCES", "EPERM")
				x.noAllowed(t, "selfmem-write")
			},
		},
		{
			name: "mknod-devices",
			code: `
import stat
for tag, path, mode, dev in (("mknod-null-in-sandbox", "/sandbox/null", stat.S_IFCHR | 0o666, os.makedev(1, 3)),
                             ("mknod-mem-in-tmp", "/tmp/mem", stat.S_IFCHR | 0o600, os.makedev(1, 1)),
                             ("mknod-kmsg-in-shm", "/dev/shm/kmsg", stat.S_IFCHR | 0o600, os.makedev(1, 11)),
                             ("mknod-sda-in-out", "/sandbox/out/sda", stat.S_IFBLK | 0o600, os.makedev(8, 0)),
                             ("mknod-vda-in-sandbox", "/sandbox/vda", stat.S_IFBLK | 0o600, os.makedev(254, 0))):
    attempt(tag, os.mknod, path, mode, dev)
attempt("mkfifo", os.mkfifo, "/sandbox/fifo")
for i, p in enumerate(("/dev/mem", "/dev/kmem", "/dev/port", "/dev/sda", "/dev/vda", "/dev/nvme0n1", "/dev/fuse",
                       "/dev/net/tun", "/dev/kvm", "/dev/dri/card0", "/dev/loop0", "/dev/loop-control", "/dev/mapper/control")):
    attempt("open-%d" % i, os.open, p, os.O_RDONLY)
devs = sorted(os.listdir("/dev"))
say("DEV", ",".join(devs))
say("BLOCKDEVS", sum(1 for d in devs if stat.S_ISBLK(os.lstat("/dev/" + d).st_mode)))
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				x.allDenied(t, []string{"mknod-null-in-sandbox", "mknod-mem-in-tmp", "mknod-kmsg-in-shm", "mknod-sda-in-out", "mknod-vda-in-sandbox"}, eperm, "mkfifo")
				x.wantAllowed(t, "mkfifo")
				for i := range 13 {
					x.wantDenied(t, "open-"+strconv.Itoa(i), "ENOENT", "EACCES", "EPERM")
				}
				x.wantFact(t, "BLOCKDEVS", "0")
				okDev := map[string]bool{"console": true, "core": true, "fd": true, "full": true, "mqueue": true, "null": true, "ptmx": true, "pts": true,
					"random": true, "shm": true, "stderr": true, "stdin": true, "stdout": true, "tty": true, "urandom": true, "zero": true}
				devs, _ := x.fact("DEV")
				for _, d := range strings.Split(devs, ",") {
					if !okDev[d] {
						t.Errorf("unexpected /dev entry %q (all: %s)", d, devs)
					}
				}
			},
			strict: &override{check: func(t *testing.T, x *run) {
				// gVisor's own tmpfs takes device nodes and its /dev has
				// fuse and net/tun; all are the sentry's emulations, not
				// host devices. The host's disks and memory stay absent.
				for _, tag := range []string{"mknod-null-in-sandbox", "mknod-mem-in-tmp", "mknod-kmsg-in-shm", "mknod-sda-in-out", "mknod-vda-in-sandbox", "open-6", "open-7"} {
					if v, _, _ := x.marker(tag); v == "ALLOWED" {
						t.Logf("NOTE (gVisor): %s succeeded inside the sentry", tag)
					}
				}
				for _, i := range []int{0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12} {
					x.wantDenied(t, "open-"+strconv.Itoa(i))
				}
				x.wantFact(t, "BLOCKDEVS", "0")
			}, why: "gVisor emulates mknod and some devices inside the sentry"},
		},
		{
			// No set-id program and no file capability in the image. solo:
			// the scan needs a CPU for its time bound.
			name: "setuid-binaries",
			solo: true,
			code: `
import stat
t0 = time.monotonic()
# One walk, in this process (a find under gVisor on a loaded machine took
# the strict profile's whole 5 s): set-id bits from lstat and file
# capabilities from the xattrs of every file, except the data-only trees
# (docs, locales, the Python standard library), which hold no programs and
# are most of the image. Checked per file against a 3 s budget (one
# directory, /usr/lib/x86_64-linux-gnu, holds thousands of files).
skip = {"/proc", "/sys", "/dev", "/tmp", "/sandbox", "/usr/share", "/usr/lib/python3", "/usr/lib/python3.11"}
setid, caps, nfiles, partial = [], [], 0, False
for root, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in skip]
    for f in files:
        if time.monotonic() - t0 > 3:   # the strict profile's limit is 5 s
            partial = True
            break
        nfiles += 1
        p = os.path.join(root, f)
        try:
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                setid.append(p)
            if "security.capability" in os.listxattr(p, follow_symlinks=False):
                caps.append(p)
        except OSError:
            pass
    if partial:
        break
say("SETID", len(setid))
for f in setid:
    say("SETID-FILE", f)
say("FILES", nfiles, "partial" if partial else "all")
say("FILECAPS", len(caps))
for c in caps:
    say("FILECAP-FILE", c)
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				x.wantFact(t, "SETID", "0")
				x.wantFact(t, "FILECAPS", "0")
				if v, _ := x.fact("FILES"); strings.HasSuffix(v, "partial") {
					t.Logf("NOTE: the set-id and file-capability scan stopped at 3 s after %s files", strings.Fields(v)[0])
				} else if n := x.factInt(t, "FILES"); n < 100 {
					t.Errorf("only %d files walked; the scan did not cover the image", n)
				}
			},
		},
		{
			// chmod u+s gains nothing: no-new-privileges, /tmp noexec and
			// nosuid, /sandbox nosuid, and the file belongs to the sandbox
			// user anyway. The identity calls fail.
			name: "setuid-chmod-and-identity",
			code: `
import shutil, subprocess
for d in ("/tmp", "/sandbox"):
    tag = d.strip("/")
    dst = d + "/id"
    shutil.copy("/usr/bin/id", dst)
    os.chmod(dst, 0o6755)
    say("MODE-" + tag, oct(os.stat(dst).st_mode & 0o7777))
    try:
        out = subprocess.run([dst], capture_output=True, text=True)
        allowed("exec-" + tag, out.stdout.strip().replace(" ", "_"))
    except OSError as e:
        denied("exec-" + tag, e.errno)
attempt("chown-root", os.chown, "/sandbox/id", 0, 0)
attempt("setuid-0", os.setuid, 0)
attempt("setgid-0", os.setgid, 0)
attempt("setgroups-0", os.setgroups, [0])
attempt("setresuid-0", os.setresuid, 0, 0, 0)
attempt("setreuid-0", os.setreuid, 0, 0)
for l in open("/proc/self/status"):
    k, _, v = l.partition(":")
    if k in ("NoNewPrivs", "CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh", "Uid", "Gid"):
        say(k, " ".join(v.split()))
for l in open("/proc/self/mountinfo"):
    f = l.split()
    if f[4] in ("/tmp", "/sandbox", "/dev/shm"):
        say("MOUNT-" + f[4].strip("/").replace("/", "-"), f[5])
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				x.wantDenied(t, "exec-tmp", "EACCES")
				if v, rest, _ := x.marker("exec-sandbox"); v == "ALLOWED" {
					if !strings.Contains(rest, "uid=65534") || strings.Contains(rest, "euid=") || strings.Contains(rest, "uid=0") {
						t.Errorf("HOLE: the setuid copy in /sandbox ran as %q", rest)
					}
				} else {
					x.wantDenied(t, "exec-sandbox", "EACCES")
					t.Logf("NOTE: /sandbox is mounted noexec (%s), although the README's lockdown table lists it as nosuid,nodev only", func() string { v, _ := x.fact("MOUNT-sandbox"); return v }())
				}
				// In a cell (isolation: cell) uid and gid 0 do not exist: the
				// cell's user namespace maps only the code's, and the kernel
				// answers a change to an unmapped id with EINVAL.
				for _, tag := range []string{"chown-root", "setuid-0", "setgid-0", "setgroups-0", "setresuid-0", "setreuid-0"} {
					x.wantDenied(t, tag, "EPERM", "EINVAL")
				}
				x.noAllowed(t, "exec-sandbox")
				x.wantFact(t, "NoNewPrivs", "1")
				for _, k := range []string{"CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"} {
					x.wantFact(t, k, "0000000000000000")
				}
				x.wantFact(t, "Uid", "65534 65534 65534 65534")
				for _, m := range []struct{ key, opts string }{{"MOUNT-tmp", "nosuid,nodev,noexec"}, {"MOUNT-sandbox", "nosuid,nodev"}, {"MOUNT-dev-shm", "nosuid,nodev"}} {
					v, _ := x.fact(m.key)
					for _, o := range strings.Split(m.opts, ",") {
						if !contains(strings.Split(v, ","), o) {
							t.Errorf("%s options %q lack %s", m.key, v, o)
						}
					}
				}
			},
			strict: &override{check: func(t *testing.T, x *run) {
				// In a cell (isolation: cell) uid and gid 0 do not exist: the
				// cell's user namespace maps only the code's, and the kernel
				// answers a change to an unmapped id with EINVAL.
				for _, tag := range []string{"chown-root", "setuid-0", "setgid-0", "setgroups-0", "setresuid-0", "setreuid-0"} {
					x.wantDenied(t, tag, "EPERM", "EINVAL")
				}
				x.noAllowed(t, "exec-sandbox")
			}},
		},
		{
			// The launcher (pid 1) is not dumpable: its /proc entries belong
			// to root and are closed to the code (the report stream, its
			// environment, memory and file descriptors).
			name: "proc-pid1-launcher",
			code: `
say("PID1", open("/proc/1/cmdline", "rb").read().split(b"\0")[0].decode())
attempt("pid1-environ", lambda: open("/proc/1/environ", "rb").read())
attempt("pid1-mem", open, "/proc/1/mem", "rb")
attempt("pid1-fd-list", os.listdir, "/proc/1/fd")
attempt("pid1-fd1-write", os.open, "/proc/1/fd/1", os.O_WRONLY)
attempt("pid1-fd2-write", os.open, "/proc/1/fd/2", os.O_WRONLY)
attempt("pid1-fd0-read", os.open, "/proc/1/fd/0", os.O_RDONLY)
attempt("pid1-root", os.listdir, "/proc/1/root/")
attempt("pid1-cwd", os.listdir, "/proc/1/cwd/")
attempt("pid1-exe", os.readlink, "/proc/1/exe")
attempt("pid1-maps", lambda: open("/proc/1/maps").read())
attempt("pid1-oom-score-adj", probe_write_raise, "/proc/1/oom_score_adj", b"-1000")
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				x.wantFact(t, "PID1", "/usr/local/bin/sandboxd-launcher")
				x.allDenied(t, []string{"pid1-environ", "pid1-mem", "pid1-fd-list", "pid1-fd1-write", "pid1-fd2-write", "pid1-fd0-read", "pid1-root", "pid1-cwd", "pid1-exe", "pid1-maps", "pid1-oom-score-adj"}, []string{"EACCES", "EPERM"})
			},
			strict: &override{check: func(t *testing.T, x *run) {
				x.wantFact(t, "PID1", "/usr/local/bin/sandboxd-launcher")
				// Under gVisor the launcher runs as root and the code as
				// another uid: its descriptors, memory and settings are
				// closed to the code. gVisor's procfs still lists them and
				// shows its environment (the image's) and maps: noted.
				x.allDenied(t, []string{"pid1-mem", "pid1-oom-score-adj", "pid1-fd1-write", "pid1-fd2-write", "pid1-fd0-read"}, nil,
					"pid1-environ", "pid1-fd-list", "pid1-root", "pid1-cwd", "pid1-exe", "pid1-maps")
				for _, tag := range []string{"pid1-environ", "pid1-fd-list", "pid1-root", "pid1-cwd", "pid1-exe", "pid1-maps"} {
					if v, rest, _ := x.marker(tag); v == "ALLOWED" {
						t.Logf("NOTE (gVisor): the code can read the launcher's %s: %.80s", tag, rest)
					}
				}
			}, why: "gVisor's procfs ignores PR_SET_DUMPABLE and another uid's modes for some entries"},
		},
		{
			// The code writes frames in the launcher's format (a stdout
			// chunk, two files, an exit status 0) into every descriptor of
			// the launcher it can open, then fails for real. The response
			// must report the real outcome.
			name: "forge-report-via-launcher-fds",
			code: `
import json, struct
def frame(t, payload):
    return t + struct.pack(">I", len(payload)) + payload
def file_frame(path, content):
    hdr = json.dumps({"path": path, "mode": 420, "size": len(content)}).encode()
    return frame(b"F", struct.pack(">I", len(hdr)) + hdr + content)
forged = (frame(b"O", b"FORGED\n") + file_frame("../../escape.txt", b"forged") + file_frame("forged.txt", b"forged")
          + frame(b"X", json.dumps({"exit_code": 0, "duration_ms": 1}).encode()))
for tag, path in (("pid1-fd1", "/proc/1/fd/1"), ("pid1-fd2", "/proc/1/fd/2"), ("parent-fd1", "/proc/%d/fd/1" % os.getppid()),
                  ("self-fd1-of-pid1-via-task", "/proc/1/task/1/fd/1")):
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as e:
        denied(tag, e.errno)
        continue
    try:
        os.write(fd, forged)
        allowed(tag, "wrote forged frames")
    except OSError as e:
        denied(tag, e.errno)
    os.close(fd)
raise ValueError("the real outcome")
`,
			status: "error",
			check: func(t *testing.T, x *run) {
				if x.r.ExitCode != 1 || !strings.Contains(x.r.Stderr, "ValueError: the real outcome") {
					t.Errorf("exit_code %d stderr %q: want the real outcome (1, the ValueError)", x.r.ExitCode, e2e.Clip([]byte(x.r.Stderr), 300))
				}
				if strings.Contains(x.r.Stdout, "FORGED") {
					t.Errorf("HOLE: stdout holds the forged chunk")
				}
				if len(x.r.Files) != 0 || len(x.r.SkippedFiles) != 0 {
					t.Errorf("HOLE: forged files in the response: %+v %+v", x.r.Files, x.r.SkippedFiles)
				}
				x.noAllowed(t)
			},
		},
		{
			// Signals to the launcher: it is the namespace's init, so the
			// kernel drops the signals the code sends it unless it handles
			// them; it must survive every one and report the code's real
			// exit. Each is announced before it is sent: output stops at
			// the one that ended the launcher.
			name:   "signal-launcher",
			limits: map[string]any{"timeout_ms": 3000},
			code: `
import signal
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGPIPE,
          signal.SIGALRM, signal.SIGXCPU, signal.SIGXFSZ, signal.SIGVTALRM, signal.SIGPROF, signal.SIGTSTP, signal.SIGTTIN,
          signal.SIGTTOU, signal.SIGPWR, signal.SIGWINCH, signal.SIGURG, signal.SIGIO, signal.SIGCHLD, signal.SIGRTMIN,
          signal.SIGSTOP, signal.SIGCONT, signal.SIGKILL,
          signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGTRAP, signal.SIGABRT, signal.SIGSYS, signal.SIGSTKFLT):
    say("SENDING", s.name)
    try:
        os.kill(1, s)
    except OSError as e:
        say("SENDFAIL", s.name, ename(e.errno))
    time.sleep(0.02)
time.sleep(0.2)
try:
    say("LAUNCHER-STATE", [l.split()[1] for l in open("/proc/1/status") if l.startswith("State:")][0])
except OSError as e:
    say("LAUNCHER-STATE", ename(e.errno))
sys.exit(3)
`,
			status: "error",
			check: func(t *testing.T, x *run) {
				if v, ok := x.fact("LAUNCHER-STATE"); !ok {
					t.Errorf("HOLE: the launcher (pid 1) died from a signal the code sent it: the last one sent was %s; the run reports %q (%s)",
						lastFact(x, "SENDING", "?"), x.r.Status, x.r.Message)
				} else if v != "S" && v != "R" {
					t.Errorf("LAUNCHER-STATE = %q after the signals, want S or R (running, not stopped)", v)
				}
				if x.r.ExitCode != 3 {
					t.Errorf("exit_code %d, want the code's 3 reported by the launcher", x.r.ExitCode)
				}
			},
		},
		{
			// The launcher runs as the code's uid, so without a filter on
			// the pid argument the code can change its resource limits and
			// scheduling: RLIMIT_NOFILE 0 makes it drop /sandbox/out
			// silently, RLIMIT_CPU 0 gets it killed by the kernel (the run
			// then ends "killed ... without reporting an exit status").
			name: "launcher-same-uid-tampering",
			code: `
import resource
try:
    resource.prlimit(1, resource.RLIMIT_CPU)
    say("PRLIMIT-READ", "allowed")
except OSError as e:
    say("PRLIMIT-READ", ename(e.errno))
for tag, lim in (("prlimit-pid1-nofile", resource.RLIMIT_NOFILE), ("prlimit-pid1-cpu", resource.RLIMIT_CPU), ("prlimit-pid1-as", resource.RLIMIT_AS)):
    soft, hard = resource.getrlimit(lim)
    try:
        old = resource.prlimit(1, lim)
        resource.prlimit(1, lim, old)   # the same values back: no harm done
        allowed(tag, "set to its own value", old)
    except OSError as e:
        denied(tag, e.errno)
attempt("setpriority-pid1", os.setpriority, os.PRIO_PROCESS, 1, 0)
attempt("sched_setaffinity-pid1", os.sched_setaffinity, 1, os.sched_getaffinity(0))
attempt("sched_setscheduler-pid1", os.sched_setscheduler, 1, os.SCHED_OTHER, os.sched_param(0))
sc("ioprio_set-pid1", "ioprio_set", 1, 1, 0)
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				x.allDenied(t, []string{"prlimit-pid1-nofile", "prlimit-pid1-cpu", "prlimit-pid1-as", "setpriority-pid1", "sched_setaffinity-pid1", "sched_setscheduler-pid1", "ioprio_set-pid1"}, []string{"EPERM", "EACCES"})
			},
		},
		{
			name: "pid-namespace",
			code: `
import socket
procs = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            comm = open("/proc/%s/comm" % p).read().strip()
        except OSError as e:
            comm = "?" + ename(e.errno)
        procs.append((int(p), comm))
say("PROCS", len(procs))
say("COMMS", ",".join("%d:%s" % x for x in sorted(procs)))
for k in ("shm", "msg", "sem"):
    try:
        say("SYSV" + k.upper(), len(open("/proc/sysvipc/" + k).read().splitlines()) - 1)
    except OSError as e:
        say("SYSV" + k.upper(), ename(e.errno))
say("HOSTNAME", socket.gethostname())
for i, pid in enumerate({{HOSTPIDS}}):
    attempt("signal0-host-pid-%d" % i, os.kill, pid, 0)
say("HOSTPIDS", len({{HOSTPIDS}}))
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				if n := x.factInt(t, "PROCS"); n > 3 {
					c, _ := x.fact("COMMS")
					t.Errorf("%d processes visible in the sandbox, want the launcher and python only: %s", n, c)
				}
				comms, _ := x.fact("COMMS")
				for _, pc := range strings.Split(comms, ",") {
					_, comm, _ := strings.Cut(pc, ":")
					if comm != "sandboxd-launch" && comm != "python3" {
						t.Errorf("a process other than the launcher and the code is visible: %s (all: %s)", pc, comms)
					}
				}
				for _, k := range []string{"SYSVSHM", "SYSVMSG", "SYSVSEM"} {
					if v, _ := x.fact(k); v != "0" && v != "ENOENT" {
						t.Errorf("%s = %q: System V IPC objects of others are visible", k, v)
					}
				}
				x.wantFact(t, "HOSTNAME", "sandbox")
				n := x.factInt(t, "HOSTPIDS")
				for i := range n {
					x.wantDenied(t, "signal0-host-pid-"+strconv.FormatInt(i, 10), "ESRCH", "EPERM")
				}
				x.noAllowed(t)
			},
		},
		{
			// Masked and read-only kernel files reveal nothing.
			name: "masked-kernel-files",
			code: `
for tag, p in (("keys", "/proc/keys"), ("timer_list", "/proc/timer_list"), ("sched_debug", "/proc/sched_debug"), ("kcore", "/proc/kcore")):
    try:
        with open(p, "rb") as f:
            say("SIZE-" + tag, len(f.read(65536)))
    except OSError as e:
        say("SIZE-" + tag, ename(e.errno))
for tag, p in (("firmware", "/sys/firmware"), ("acpi", "/proc/acpi"), ("scsi", "/proc/scsi")):
    try:
        say("LIST-" + tag, len(os.listdir(p)))
    except OSError as e:
        say("LIST-" + tag, ename(e.errno))
try:
    nonzero = 0
    with open("/proc/kallsyms") as f:
        for l in f:
            if int(l.split()[0], 16):
                nonzero += 1
    say("KALLSYMS-NONZERO", nonzero)
except OSError as e:
    say("KALLSYMS-NONZERO", ename(e.errno))
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				for _, k := range []string{"SIZE-keys", "SIZE-timer_list", "SIZE-sched_debug", "SIZE-kcore"} {
					if v, _ := x.fact(k); v != "0" && v != "ENOENT" && v != "EACCES" {
						t.Errorf("%s = %q: a masked kernel file has content", k, v)
					}
				}
				for _, k := range []string{"LIST-firmware", "LIST-acpi", "LIST-scsi"} {
					if v, _ := x.fact(k); v != "0" && v != "ENOENT" && v != "EACCES" {
						t.Errorf("%s = %q: a masked directory has entries", k, v)
					}
				}
				if v, _ := x.fact("KALLSYMS-NONZERO"); v != "0" && v != "ENOENT" {
					t.Errorf("KALLSYMS-NONZERO = %q: kernel addresses (KASLR) are visible", v)
				}
			},
		},
		{
			// What /proc/self/mountinfo shows about the host. Host paths may
			// appear there (Docker's bind mount of /etc/hostname names its
			// source under /var/lib/docker); the sandbox must not be able to
			// open any of them, and nothing beyond the expected mounts exists.
			name: "mountinfo-host-paths",
			code: `
import re
mi = open("/proc/self/mountinfo").read()
for l in mi.splitlines():
    f = l.split()
    say("MOUNT", f[4], f[3])
paths = sorted(set(re.findall(r"(/var/lib/(?:docker|containerd)[^\s,:]*|/run/(?:containerd|docker)[^\s,:]*|/home/[^\s,:]+|/root[^\s,:]*)", mi)))
say("HOSTPATHS", len(paths))
for i, p in enumerate(paths):
    say("HOSTPATH-%d" % i, p)
    attempt("stat-hostpath-%d" % i, os.stat, p)
    attempt("open-hostpath-%d" % i, lambda p=p: open(p, "rb").read(16))
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				n := x.factInt(t, "HOSTPATHS")
				var hp []string
				for i := range n {
					s := strconv.FormatInt(i, 10)
					p, _ := x.fact("HOSTPATH-" + s)
					hp = append(hp, p)
					x.wantDenied(t, "stat-hostpath-"+s, "ENOENT", "EACCES")
					x.wantDenied(t, "open-hostpath-"+s, "ENOENT", "EACCES")
				}
				if n > 0 {
					t.Logf("NOTE: /proc/self/mountinfo names %d host path(s): %s; none can be opened from the sandbox", n, strings.Join(hp, ", "))
				}
				x.noAllowed(t)
				okMount := func(mp string) bool {
					switch mp {
					case "/", "/sandbox", "/tmp", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf":
						return true
					}
					for _, pre := range []string{"/proc", "/dev", "/sys"} {
						if mp == pre || strings.HasPrefix(mp, pre+"/") {
							return true
						}
					}
					return false
				}
				for _, l := range x.lines {
					f := strings.Fields(l)
					if len(f) >= 2 && f[0] == "MOUNT" && !okMount(f[1]) {
						t.Errorf("unexpected mount point in the sandbox: %s", l)
					}
				}
			},
		},
		{
			// Docker's own files in the container are bind mounts from the
			// host's disk: writing them would write the host.
			name: "docker-managed-etc-files",
			code: `
for tag, p in (("hostname", "/etc/hostname"), ("hosts", "/etc/hosts"), ("resolv", "/etc/resolv.conf"), ("passwd", "/etc/passwd")):
    if os.path.exists(p):
        probe_write(tag, p, None)
    else:
        say("ABSENT", tag)
attempt("create-in-etc", os.open, "/etc/sbx-{{NONCE}}", os.O_WRONLY | os.O_CREAT, 0o644)
attempt("create-in-root", os.open, "/sbx-{{NONCE}}", os.O_WRONLY | os.O_CREAT, 0o644)
attempt("create-in-var-tmp", os.open, "/var/tmp/sbx-{{NONCE}}", os.O_WRONLY | os.O_CREAT, 0o644)
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				for _, tag := range x.tags("DENIED") {
					x.wantDenied(t, tag, roErr...)
				}
				x.noAllowed(t)
				if len(x.tags("DENIED")) < 5 {
					t.Errorf("fewer attempts than expected: %v", x.tags("DENIED"))
				}
			},
		},
		{
			name: "env-host-secrets",
			env:  map[string]string{"SBX_REQUEST_VAR": "from-the-request"},
			code: `
for k in sorted(os.environ):
    say("ENV", k)
say("ENVBYTES", len(open("/proc/self/environ", "rb").read()))
attempt("pid1-environ", lambda: open("/proc/1/environ", "rb").read())
for p in os.listdir("/proc"):
    if p.isdigit() and p not in ("1", str(os.getpid())):
        try:
            say("OTHER-ENVIRON", p, len(open("/proc/%s/environ" % p, "rb").read()))
        except OSError:
            pass
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				allowedEnv := map[string]bool{"HOME": true, "PATH": true, "LANG": true, "PYTHONDONTWRITEBYTECODE": true, "PYTHONUNBUFFERED": true,
					"PYTHONIOENCODING": true, "PYTHONPATH": true, "HOSTNAME": true, "LC_CTYPE": true, "SBX_REQUEST_VAR": true}
				var keys []string
				for _, l := range x.lines {
					if k, ok := strings.CutPrefix(l, "ENV "); ok {
						keys = append(keys, k)
						if !allowedEnv[k] {
							t.Errorf("unexpected variable %s in the sandbox's environment", k)
						}
						for _, bad := range []string{"AWS_", "DOCKER_", "SANDBOXD_", "SBXSEC_", "GITHUB_", "GOOGLE_", "AZURE_", "KUBERNETES_", "SSH_", "GO", "CI", "TOKEN", "SECRET", "PASSWORD", "KEY"} {
							if strings.Contains(k, bad) {
								t.Errorf("HOLE: the sandbox's environment has %s", k)
							}
						}
					}
				}
				if !contains(keys, "SBX_REQUEST_VAR") {
					t.Errorf("the request's own variable is missing (env keys %v): the probe is broken", keys)
				}
				t.Logf("environment of the code: %s", strings.Join(keys, " "))
				x.wantDenied(t, "pid1-environ", "EACCES", "EPERM")
				x.noAllowed(t)
			},
			strict: &override{check: func(t *testing.T, x *run) {
				for _, l := range x.lines {
					if k, ok := strings.CutPrefix(l, "ENV "); ok {
						for _, bad := range []string{"AWS_", "DOCKER_", "SANDBOXD_", "SBXSEC_", "GITHUB_", "TOKEN", "SECRET", "PASSWORD"} {
							if strings.Contains(k, bad) {
								t.Errorf("HOLE: the sandbox's environment has %s", k)
							}
						}
					}
				}
				if v, rest, _ := x.marker("pid1-environ"); v == "ALLOWED" {
					t.Logf("NOTE (gVisor): the code reads the launcher's environment (the image's variables only): %.100s", rest)
				}
			}, why: "gVisor's procfs ignores PR_SET_DUMPABLE for environ; the values are checked for secrets"},
		},
		{
			name: "tty-injection",
			code: `
import fcntl, termios
attempt("open-dev-tty", os.open, "/dev/tty", os.O_RDWR)
attempt("open-dev-console", os.open, "/dev/console", os.O_RDWR)
for fd in (0, 1, 2):
    attempt("tiocsti-fd%d" % fd, fcntl.ioctl, fd, termios.TIOCSTI, b"x")
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				x.wantDenied(t, "open-dev-tty", "ENXIO", "ENOENT", "EIO")
				x.wantDenied(t, "open-dev-console", "ENOENT", "EACCES")
				for _, fd := range []string{"0", "1", "2"} {
					x.wantDenied(t, "tiocsti-fd"+fd, "ENOTTY", "EIO", "EPERM")
				}
				x.noAllowed(t)
			},
		},
		{
			name: "rlimits-raise",
			code: `
import resource
for name in ("RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_CORE", "RLIMIT_NPROC", "RLIMIT_MEMLOCK"):
    lim = getattr(resource, name)
    soft, hard = resource.getrlimit(lim)
    say("LIMIT-" + name, soft, hard)
    if hard != resource.RLIM_INFINITY:
        try:
            resource.setrlimit(lim, (hard * 2 + 1, hard * 2 + 1))
            allowed("raise-" + name, resource.getrlimit(lim))
        except ValueError:
            denied("raise-" + name, "EPERM")
        except OSError as e:
            denied("raise-" + name, e.errno)
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				x.wantFact(t, "LIMIT-RLIMIT_CORE", "0 0")
				for _, tag := range []string{"raise-RLIMIT_NOFILE", "raise-RLIMIT_FSIZE", "raise-RLIMIT_CORE"} {
					x.wantDenied(t, tag, "EPERM")
				}
				x.noAllowed(t)
			},
		},
	}
}
