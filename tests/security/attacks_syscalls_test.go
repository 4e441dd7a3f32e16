package security

import (
	"testing"
)

// Errno sets.
var (
	eperm  = []string{"EPERM"}
	enosys = []string{"ENOSYS"}
	// Under gVisor the sentry implements (or refuses) syscalls itself, so a
	// denied call may fail with ENOSYS, EACCES or ENOENT instead of the
	// host filter's EPERM.
	strictDeny = []string{"EPERM", "ENOSYS", "EACCES", "EOPNOTSUPP", "ENOENT", "EINVAL"}
)

// denySyscall is an attack whose every tag must be denied with one of
// errnos (per-tag errnos in perTag win), with only the controls allowed.
func denySyscall(name, code string, tags []string, errnos []string, perTag map[string][]string, controls ...string) attack {
	check := func(strict bool) func(t *testing.T, x *run) {
		return func(t *testing.T, x *run) {
			if _, ok := x.fact("ARCH"); ok {
				t.Skipf("syscall numbers are x86_64 only; this machine is not")
			}
			for _, tag := range tags {
				want := errnos
				if e, ok := perTag[tag]; ok {
					want = e
				}
				if strict {
					// gVisor's own kernel: any refusal will do, and an
					// attempt whose preparation failed (a /proc file gVisor
					// does not have) is no success either.
					if v, _, ok := x.marker(tag); ok && v == "DENIED" || !ok {
						continue
					}
				}
				x.wantDenied(t, tag, want...)
			}
			if !strict {
				for _, c := range controls {
					x.wantAllowed(t, c)
				}
			}
			x.noAllowed(t, controls...)
		}
	}
	return attack{
		name:   "syscall-" + name,
		code:   code,
		status: "ok",
		check:  check(false),
		strict: &override{check: check(true), why: "gVisor's own kernel refuses calls with its own errnos, and controls may differ"},
	}
}

func syscallAttacks() []attack {
	return []attack{
		denySyscall("ptrace", `
pid = os.fork()
if pid == 0:
    time.sleep(30)
    os._exit(0)
sc("ptrace-attach-child", "ptrace", 16, pid, 0, 0)
sc("ptrace-seize-child", "ptrace", 0x4206, pid, 0, 0)
sc("ptrace-attach-pid1", "ptrace", 16, 1, 0, 0)
sc("ptrace-traceme", "ptrace", 0, 0, 0, 0)
os.kill(pid, 9)
os.waitpid(pid, 0)
`, []string{"ptrace-attach-child", "ptrace-seize-child", "ptrace-attach-pid1", "ptrace-traceme"}, eperm, nil),

		denySyscall("mount", `
os.makedirs("/tmp/m", exist_ok=True)
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC = 1, 32, 4096, 16384
sc("mount-tmpfs", "mount", b"none", b"/tmp/m", b"tmpfs", 0, None)
sc("mount-proc", "mount", b"proc", b"/tmp/m", b"proc", 0, None)
sc("mount-sysfs", "mount", b"sysfs", b"/tmp/m", b"sysfs", 0, None)
sc("mount-bind-root", "mount", b"/", b"/tmp/m", None, MS_BIND | MS_REC, None)
sc("mount-remount-root-rw", "mount", None, b"/", None, MS_REMOUNT | MS_BIND, None)
sc("mount-remount-sandbox-bigger", "mount", None, b"/sandbox", None, MS_REMOUNT, b"size=4g")
`, []string{"mount-tmpfs", "mount-proc", "mount-sysfs", "mount-bind-root", "mount-remount-root-rw", "mount-remount-sandbox-bigger"}, eperm, nil),

		denySyscall("umount2", `
MNT_DETACH = 2
sc("umount2-proc-sys", "umount2", b"/proc/sys", MNT_DETACH)
sc("umount2-proc-keys-mask", "umount2", b"/proc/keys", MNT_DETACH)
sc("umount2-sandbox", "umount2", b"/sandbox", MNT_DETACH)
sc("umount2-etc-hostname", "umount2", b"/etc/hostname", MNT_DETACH)
sc("umount2-sys-fs-cgroup", "umount2", b"/sys/fs/cgroup", MNT_DETACH)
`, []string{"umount2-proc-sys", "umount2-proc-keys-mask", "umount2-sandbox", "umount2-etc-hostname", "umount2-sys-fs-cgroup"}, eperm, nil),

		denySyscall("pivot_root", `
os.makedirs("/tmp/new/old", exist_ok=True)
sc("pivot_root-tmp", "pivot_root", b"/tmp/new", b"/tmp/new/old")
os.chdir("/")
sc("pivot_root-dot", "pivot_root", b".", b".")
`, []string{"pivot_root-tmp", "pivot_root-dot"}, eperm, nil),

		denySyscall("chroot", `
os.makedirs("/tmp/jail", exist_ok=True)
sc("chroot-tmp", "chroot", b"/tmp/jail")
sc("chroot-root", "chroot", b"/")
`, []string{"chroot-tmp", "chroot-root"}, eperm, nil),

		denySyscall("unshare", `
for tag, f in (("user", CLONE_NEWUSER), ("mnt", CLONE_NEWNS), ("net", CLONE_NEWNET), ("pid", CLONE_NEWPID),
               ("uts", CLONE_NEWUTS), ("ipc", CLONE_NEWIPC), ("cgroup", CLONE_NEWCGROUP), ("time", CLONE_NEWTIME),
               ("user-mnt-cgroup", CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWCGROUP)):
    sc("unshare-" + tag, "unshare", f)
`, []string{"unshare-user", "unshare-mnt", "unshare-net", "unshare-pid", "unshare-uts", "unshare-ipc", "unshare-cgroup", "unshare-time", "unshare-user-mnt-cgroup"}, eperm, nil),

		denySyscall("setns", `
for ns, flag in (("mnt", CLONE_NEWNS), ("net", CLONE_NEWNET), ("pid", CLONE_NEWPID), ("user", CLONE_NEWUSER),
                 ("uts", CLONE_NEWUTS), ("ipc", CLONE_NEWIPC), ("cgroup", CLONE_NEWCGROUP)):
    fd = attempt("open-self-ns-" + ns, os.open, "/proc/self/ns/" + ns, os.O_RDONLY)
    if fd:
        sc("setns-" + ns, "setns", fd, flag)
        os.close(fd)
# the launcher's (pid 1) namespaces: it is not dumpable
attempt("open-pid1-ns-mnt", os.open, "/proc/1/ns/mnt", os.O_RDONLY)
attempt("open-pid1-root", os.listdir, "/proc/1/root")
`, []string{"setns-mnt", "setns-net", "setns-pid", "setns-user", "setns-uts", "setns-ipc", "setns-cgroup", "open-pid1-ns-mnt", "open-pid1-root"},
			eperm, map[string][]string{"open-pid1-ns-mnt": {"EACCES"}, "open-pid1-root": {"EACCES"}},
			"open-self-ns-mnt", "open-self-ns-net", "open-self-ns-pid", "open-self-ns-user", "open-self-ns-uts", "open-self-ns-ipc", "open-self-ns-cgroup"),

		denySyscall("clone-newuser", `
raw_clone("clone-plain", 0)
raw_clone("clone-newuser", CLONE_NEWUSER)
raw_clone("clone-newuser-newns", CLONE_NEWUSER | CLONE_NEWNS)
raw_clone("clone-newuser-newpid", CLONE_NEWUSER | CLONE_NEWPID)
`, []string{"clone-newuser", "clone-newuser-newns", "clone-newuser-newpid"}, eperm, nil, "clone-plain"),

		denySyscall("clone-newns", `
raw_clone("clone-plain", 0)
raw_clone("clone-newns", CLONE_NEWNS)
raw_clone("clone-newpid", CLONE_NEWPID)
raw_clone("clone-newnet", CLONE_NEWNET)
raw_clone("clone-newcgroup", CLONE_NEWCGROUP)
raw_clone("clone-newuts", CLONE_NEWUTS)
raw_clone("clone-newipc", CLONE_NEWIPC)
`, []string{"clone-newns", "clone-newpid", "clone-newnet", "clone-newcgroup", "clone-newuts", "clone-newipc"}, eperm, nil, "clone-plain"),

		// clone3 keeps its flags in memory seccomp cannot read: the profile
		// makes the whole call fail with ENOSYS so libc falls back to clone.
		denySyscall("clone3", `
args = (ctypes.c_uint64 * 11)()
for tag, flags in (("clone3-newuser", CLONE_NEWUSER), ("clone3-newns", CLONE_NEWNS), ("clone3-plain", 0)):
    args[0] = flags
    args[4] = 17
    rc, e = raw("clone3", ctypes.byref(args), 88)
    if rc == 0:
        os._exit(0)
    if rc == -1:
        denied(tag, e)
    else:
        os.waitpid(rc, 0)
        allowed(tag, rc)
`, []string{"clone3-newuser", "clone3-newns", "clone3-plain"}, enosys, nil),

		denySyscall("keyctl", `
KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING = -3, -4
sc("keyctl-get-session-keyring", "keyctl", 0, KEY_SPEC_SESSION_KEYRING, 1)
sc("keyctl-join-session-keyring", "keyctl", 1, b"sbx-{{NONCE}}")
sc("keyctl-describe-user-keyring", "keyctl", 6, KEY_SPEC_USER_KEYRING, ctypes.create_string_buffer(256), 256)
`, []string{"keyctl-get-session-keyring", "keyctl-join-session-keyring", "keyctl-describe-user-keyring"}, eperm, nil),

		denySyscall("add_key", `
KEY_SPEC_PROCESS_KEYRING = -2
sc("add_key-user", "add_key", b"user", b"sbx-{{NONCE}}", b"secret", 6, KEY_SPEC_PROCESS_KEYRING)
sc("add_key-keyring", "add_key", b"keyring", b"sbx-{{NONCE}}-ring", None, 0, KEY_SPEC_PROCESS_KEYRING)
`, []string{"add_key-user", "add_key-keyring"}, eperm, nil),

		// With callout info the kernel would run /sbin/request-key on the
		// host (a usermode helper): the host must show no such process.
		denySyscall("request_key", `
KEY_SPEC_PROCESS_KEYRING = -2
sc("request_key-user", "request_key", b"user", b"sbx-{{NONCE}}", None, KEY_SPEC_PROCESS_KEYRING)
sc("request_key-callout", "request_key", b"user", b"sbx-{{NONCE}}-callout", b"callout-{{NONCE}}", KEY_SPEC_PROCESS_KEYRING)
`, []string{"request_key-user", "request_key-callout"}, eperm, nil),

		denySyscall("bpf", `
attr = (ctypes.c_uint32 * 30)()
attr[0], attr[1], attr[2], attr[3] = 2, 4, 4, 1   # BPF_MAP_TYPE_ARRAY, 4-byte keys and values, 1 entry
sc("bpf-map-create", "bpf", 0, ctypes.byref(attr), 120)
insns = (ctypes.c_uint64 * 2)(0xb7, 0x95)          # r0 = 0; exit
lic = ctypes.create_string_buffer(b"GPL")
pattr = (ctypes.c_uint64 * 15)()
pattr[0] = 1 | (2 << 32)                           # BPF_PROG_TYPE_SOCKET_FILTER, 2 instructions
pattr[1] = ctypes.addressof(insns)
pattr[2] = ctypes.addressof(lic)
sc("bpf-prog-load", "bpf", 5, ctypes.byref(pattr), 120)
`, []string{"bpf-map-create", "bpf-prog-load"}, eperm, nil),

		denySyscall("perf_event_open", `
attr = (ctypes.c_uint8 * 128)()
ctypes.c_uint32.from_buffer(attr, 4).value = 128                  # size
ctypes.c_uint64.from_buffer(attr, 40).value = 1 | 1 << 5 | 1 << 6 # disabled, exclude_kernel, exclude_hv
for tag, typ in (("perf_event_open-sw-self", 1), ("perf_event_open-hw-self", 0)):
    ctypes.c_uint32.from_buffer(attr, 0).value = typ
    sc(tag, "perf_event_open", ctypes.byref(attr), 0, -1, -1, 0)
ctypes.c_uint32.from_buffer(attr, 0).value = 1
sc("perf_event_open-sw-all-cpus", "perf_event_open", ctypes.byref(attr), -1, 0, -1, 0)
`, []string{"perf_event_open-sw-self", "perf_event_open-hw-self", "perf_event_open-sw-all-cpus"}, eperm, nil),

		denySyscall("userfaultfd", `
UFFD_USER_MODE_ONLY = 1
sc("userfaultfd", "userfaultfd", os.O_CLOEXEC | os.O_NONBLOCK)
sc("userfaultfd-user-mode-only", "userfaultfd", os.O_CLOEXEC | os.O_NONBLOCK | UFFD_USER_MODE_ONLY)
attempt("open-dev-userfaultfd", os.open, "/dev/userfaultfd", os.O_RDWR)
`, []string{"userfaultfd", "userfaultfd-user-mode-only", "open-dev-userfaultfd"}, eperm, map[string][]string{"open-dev-userfaultfd": {"ENOENT"}}),

		denySyscall("io_uring_setup", `
params = (ctypes.c_uint8 * 120)()
sc("io_uring_setup", "io_uring_setup", 4, ctypes.byref(params))
sc("io_uring_setup-sqpoll", "io_uring_setup", 4, ctypes.byref((ctypes.c_uint32 * 30)(0, 0, 2)))
`, []string{"io_uring_setup", "io_uring_setup-sqpoll"}, eperm, nil),

		denySyscall("kexec_load", `
sc("kexec_load", "kexec_load", 0, 0, None, 0)
sc("kexec_file_load", "kexec_file_load", -1, -1, 0, b"", 2)
`, []string{"kexec_load", "kexec_file_load"}, eperm, nil),

		denySyscall("init_module", `
image = ctypes.create_string_buffer(b"\x7fELF" + b"\0" * 60, 64)
sc("init_module", "init_module", image, 64, b"")
`, []string{"init_module"}, eperm, nil),

		denySyscall("finit_module", `
with open("/sandbox/evil.ko", "wb") as f:
    f.write(b"\x7fELF" + b"\0" * 60)
fd = os.open("/sandbox/evil.ko", os.O_RDONLY)
sc("finit_module", "finit_module", fd, b"", 0)
`, []string{"finit_module"}, eperm, nil),

		denySyscall("delete_module", `
sc("delete_module-missing", "delete_module", b"sbx_no_such_module", os.O_NONBLOCK)
sc("delete_module-empty-name", "delete_module", b"", os.O_NONBLOCK)
`, []string{"delete_module-missing", "delete_module-empty-name"}, eperm, nil),

		// LINUX_REBOOT_CMD_CAD_OFF: even a permitted call would do nothing
		// here (EINVAL in a child pid namespace).
		denySyscall("reboot", `
sc("reboot-cad-off", "reboot", 0xfee1dead, 672274793, 0, None)
`, []string{"reboot-cad-off"}, eperm, nil),

		denySyscall("swapon", `
with open("/sandbox/swap", "wb") as f:
    f.write(b"\0" * 65536)
sc("swapon", "swapon", b"/sandbox/swap", 0)
`, []string{"swapon"}, eperm, nil),

		denySyscall("swapoff", `
with open("/sandbox/swap", "wb") as f:
    f.write(b"\0" * 65536)
sc("swapoff-sandbox-file", "swapoff", b"/sandbox/swap")
sc("swapoff-missing", "swapoff", b"/dev/sbx-no-such-swap")
`, []string{"swapoff-sandbox-file", "swapoff-missing"}, eperm, nil),

		denySyscall("acct", `
sc("acct-on", "acct", b"/sandbox/acct")
sc("acct-off", "acct", None)
`, []string{"acct-on", "acct-off"}, eperm, nil),

		// Q_SYNC with no device needs no privilege at all: only the filter
		// stops it.
		denySyscall("quotactl", `
QCMD_SYNC_USR, QCMD_GETINFO_USR = 0x80000100, 0x80000500
sc("quotactl-sync-all", "quotactl", QCMD_SYNC_USR, None, 0, None)
sc("quotactl-getinfo-root", "quotactl", QCMD_GETINFO_USR, b"/", 0, ctypes.create_string_buffer(64))
`, []string{"quotactl-sync-all", "quotactl-getinfo-root"}, eperm, nil),

		// Only the default personas are allowed; the query (0xffffffff) is
		// the control showing the filter looks at the argument.
		denySyscall("personality", `
sc("personality-query", "personality", 0xffffffff)
sc("personality-addr-no-randomize", "personality", 0x0040000)
sc("personality-read-implies-exec", "personality", 0x0400000)
sc("personality-mmap-page-zero", "personality", 0x0100000)
`, []string{"personality-addr-no-randomize", "personality-read-implies-exec", "personality-mmap-page-zero"}, eperm, nil, "personality-query"),

		denySyscall("process_vm_readv", `
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
secret = ctypes.create_string_buffer(b"secret-in-child", 32)
pid = os.fork()
if pid == 0:
    time.sleep(30)
    os._exit(0)
local = ctypes.create_string_buffer(32)
liov, riov = iovec(ctypes.addressof(local), 32), iovec(ctypes.addressof(secret), 32)
sc("process_vm_readv-child", "process_vm_readv", pid, ctypes.byref(liov), 1, ctypes.byref(riov), 1, 0)
sc("process_vm_readv-pid1", "process_vm_readv", 1, ctypes.byref(liov), 1, ctypes.byref(riov), 1, 0)
say("READ", local.value)
os.kill(pid, 9)
os.waitpid(pid, 0)
`, []string{"process_vm_readv-child", "process_vm_readv-pid1"}, eperm, nil),

		denySyscall("process_vm_writev", `
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
target = ctypes.create_string_buffer(b"untouched", 32)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(w)
    os.read(r, 1)
    os.write(1, b"CHILD " + target.value + b"\n")
    os._exit(0)
os.close(r)
local = ctypes.create_string_buffer(b"overwritten", 32)
liov, riov = iovec(ctypes.addressof(local), 32), iovec(ctypes.addressof(target), 32)
sc("process_vm_writev-child", "process_vm_writev", pid, ctypes.byref(liov), 1, ctypes.byref(riov), 1, 0)
sc("process_vm_writev-pid1", "process_vm_writev", 1, ctypes.byref(liov), 1, ctypes.byref(riov), 1, 0)
os.write(w, b"x")
os.waitpid(pid, 0)
`, []string{"process_vm_writev-child", "process_vm_writev-pid1"}, eperm, nil),

		denySyscall("name_to_handle_at", `
class FH(ctypes.Structure):
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int), ("f_handle", ctypes.c_ubyte * 128)]
AT_FDCWD = -100
for tag, path in (("name_to_handle_at-passwd", b"/etc/passwd"), ("name_to_handle_at-hostname", b"/etc/hostname"), ("name_to_handle_at-sandbox", b"/sandbox")):
    fh = FH()
    fh.handle_bytes = 128
    mount_id = ctypes.c_int()
    sc(tag, "name_to_handle_at", AT_FDCWD, path, ctypes.byref(fh), ctypes.byref(mount_id), 0)
`, []string{"name_to_handle_at-passwd", "name_to_handle_at-hostname", "name_to_handle_at-sandbox"}, eperm, nil),

		// "Shocker": a file handle for inode 2 (the root directory of an
		// ext4 file system), opened relative to a file on the host's disk
		// (/etc/hostname is a bind mount from the engine's data directory).
		denySyscall("open_by_handle_at", `
class FH(ctypes.Structure):
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int), ("f_handle", ctypes.c_ubyte * 128)]
fh = FH()
fh.handle_bytes, fh.handle_type = 8, 1
fh.f_handle[0] = 2
for tag, path in (("open_by_handle_at-via-hostname", "/etc/hostname"), ("open_by_handle_at-via-root", "/")):
    try:
        mfd = os.open(path, os.O_RDONLY)
    except OSError as e:
        say("NOMOUNTFD", path, ename(e.errno))
        continue
    rc = sc(tag, "open_by_handle_at", mfd, ctypes.byref(fh), os.O_RDONLY | os.O_DIRECTORY)
    if rc >= 0:
        say("LEAKED", sorted(os.listdir(rc))[:20])
`, []string{"open_by_handle_at-via-hostname", "open_by_handle_at-via-root"}, eperm, nil),

		denySyscall("syslog", `
buf = ctypes.create_string_buffer(4096)
sc("syslog-read-all", "syslog", 3, buf, 4096)
sc("syslog-size-buffer", "syslog", 10, None, 0)
attempt("open-dev-kmsg", os.open, "/dev/kmsg", os.O_RDONLY)
attempt("open-proc-kmsg", os.open, "/proc/kmsg", os.O_RDONLY)
`, []string{"syslog-read-all", "syslog-size-buffer", "open-dev-kmsg", "open-proc-kmsg"}, eperm,
			map[string][]string{"open-dev-kmsg": {"ENOENT"}, "open-proc-kmsg": {"EACCES", "EPERM"}}),

		// Invalid values: a call that got past the filter would fail with
		// EINVAL and change nothing, so EPERM shows the filter at work.
		denySyscall("settimeofday", `
tv = (ctypes.c_long * 2)(int(time.time()), 2000000)   # tv_usec out of range
sc("settimeofday-invalid", "settimeofday", ctypes.byref(tv), None)
tz = (ctypes.c_int * 2)(0, 0)
sc("settimeofday-tz-only", "settimeofday", None, ctypes.byref(tz))
`, []string{"settimeofday-invalid", "settimeofday-tz-only"}, eperm, nil),

		denySyscall("clock_settime", `
ts = (ctypes.c_long * 2)(int(time.time()), 0)
sc("clock_settime-monotonic", "clock_settime", 1, ctypes.byref(ts))
bad = (ctypes.c_long * 2)(int(time.time()), 2000000000)  # tv_nsec out of range
sc("clock_settime-realtime-invalid", "clock_settime", 0, ctypes.byref(bad))
timex = (ctypes.c_uint8 * 256)()                       # modes = 0: a read
sc("adjtimex-read", "adjtimex", ctypes.byref(timex))
sc("clock_adjtime-read", "clock_adjtime", 0, ctypes.byref(timex))
`, []string{"clock_settime-monotonic", "clock_settime-realtime-invalid", "adjtimex-read", "clock_adjtime-read"}, eperm, nil),

		denySyscall("new-mount-api", `
AT_FDCWD = -100
sc("fsopen-tmpfs", "fsopen", b"tmpfs", 0)
sc("fsopen-cgroup", "fsopen", b"cgroup", 0)
sc("fspick-root", "fspick", AT_FDCWD, b"/", 0)
sc("open_tree-clone-root", "open_tree", AT_FDCWD, b"/", 1 | os.O_CLOEXEC)
sc("open_tree-plain", "open_tree", AT_FDCWD, b"/sandbox", os.O_CLOEXEC)
sc("move_mount", "move_mount", AT_FDCWD, b"/sandbox", AT_FDCWD, b"/tmp", 0)
sc("mount_setattr-root", "mount_setattr", AT_FDCWD, b"/", 0, ctypes.create_string_buffer(32), 32)
sc("fsmount", "fsmount", 0, 0, 0)
`, []string{"fsopen-tmpfs", "fsopen-cgroup", "fspick-root", "open_tree-clone-root", "open_tree-plain", "move_mount", "mount_setattr-root", "fsmount"}, eperm, nil),

		// modify_ldt's read needs no privilege; iopl/ioperm would open I/O
		// ports.
		denySyscall("x86-ldt-io-ports", `
sc("modify_ldt-read", "modify_ldt", 0, ctypes.create_string_buffer(16), 16)
sc("iopl-3", "iopl", 3)
sc("ioperm-port-0x80", "ioperm", 0x80, 1, 1)
`, []string{"modify_ldt-read", "iopl-3", "ioperm-port-0x80"}, eperm, nil),

		// kcmp and pidfd_getfd on the process itself need no privilege; the
		// others are obsolete or need capabilities.
		denySyscall("misc-kernel", `
me = os.getpid()
sc("kcmp-self", "kcmp", me, me, 0, 0, 0)
pfd, e = raw("pidfd_open", me, 0)
say("PIDFD_OPEN", pfd, ename(e))
if pfd >= 0:
    sc("pidfd_getfd-self", "pidfd_getfd", pfd, 0, 0)
else:
    denied("pidfd_getfd-self", e)
sc("fanotify_init", "fanotify_init", 0, 0)
sc("lookup_dcookie", "lookup_dcookie", 0, ctypes.create_string_buffer(64), 64)
sc("vhangup", "vhangup")
sc("sethostname", "sethostname", b"sbx-{{NONCE}}", 10)
sc("setdomainname", "setdomainname", b"sbx-{{NONCE}}", 10)
sc("uselib", "uselib", b"/usr/lib/x86_64-linux-gnu/libc.so.6")
sc("nfsservctl", "nfsservctl", 0, None, None)
`, []string{"kcmp-self", "pidfd_getfd-self", "fanotify_init", "lookup_dcookie", "vhangup", "sethostname", "setdomainname", "uselib", "nfsservctl"}, eperm, nil),

		denySyscall("numa-memory-policy", `
page = ctypes.create_string_buffer(8192)
addr = (ctypes.addressof(page) + 4095) & ~4095
mask = ctypes.c_ulong(1)
sc("set_mempolicy-default", "set_mempolicy", 0, None, 0)
sc("get_mempolicy", "get_mempolicy", ctypes.byref(ctypes.c_int()), None, 0, None, 0)
sc("mbind-default", "mbind", addr, 4096, 0, None, 0, 0)
sc("migrate_pages-self", "migrate_pages", 0, 64, ctypes.byref(mask), ctypes.byref(mask))
sc("move_pages-self-query", "move_pages", 0, 0, None, None, None, 0)
`, []string{"set_mempolicy-default", "get_mempolicy", "mbind-default", "migrate_pages-self", "move_pages-self-query"}, eperm, nil),
	}
}
