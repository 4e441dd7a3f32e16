package security

import (
	"os"
	"strings"
	"testing"
)

// kernelAttacks: what the code can do with the kernel beyond its files
// (issue 16, items 9, 10 and 12).
func kernelAttacks() []attack {
	return []attack{
		// Item 9: noexec is no code-execution barrier (ctypes runs native
		// code anyway), but dropping a binary into memory and executing it
		// is not free: memfd_create is denied.
		denySyscall("memfd-exec", `
import shutil
MFD_CLOEXEC = 1
_libc.memfd_create.restype = ctypes.c_int
ctypes.set_errno(0)
fd = _libc.memfd_create(b"x", MFD_CLOEXEC)
if fd < 0:
    denied("memfd_create", ctypes.get_errno())
else:
    os.write(fd, open(shutil.which("true") or "/bin/true", "rb").read())
    try:
        os.execv("/proc/self/fd/%d" % fd, ["x"])
    except OSError as e:
        denied("memfd-execve", e.errno)
attempt("os.memfd_create", os.memfd_create, "y")
# ctypes callbacks (libffi closures) still work without it.
cb = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda v: v + 1)
allowed("ctypes-callback", cb(41))
`, []string{"memfd_create", "os.memfd_create"}, eperm, nil, "ctypes-callback"),

		// Item 10: AF_NETLINK for NETLINK_ROUTE (glibc needs it) only; the
		// audit, netfilter, xfrm, diag and uevent protocols are denied.
		denySyscall("netlink-protocols", `
import socket
for tag, proto in (("netlink-route", 0), ("netlink-sock-diag", 4), ("netlink-xfrm", 6), ("netlink-audit", 9),
                   ("netlink-netfilter", 12), ("netlink-kobject-uevent", 15), ("netlink-generic", 16), ("netlink-crypto", 21)):
    try:
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, proto)
        allowed(tag)
        s.close()
    except OSError as e:
        denied(tag, e.errno)
`, []string{"netlink-sock-diag", "netlink-xfrm", "netlink-audit", "netlink-netfilter", "netlink-kobject-uevent", "netlink-generic", "netlink-crypto"},
			eperm, nil, "netlink-route"),

		// Item 12: host-wide facts under /proc read as nothing.
		{
			name: "proc-host-info",
			code: `
for p in ("/proc/cmdline", "/proc/stat", "/proc/loadavg", "/proc/interrupts", "/proc/softirqs", "/proc/buddyinfo",
          "/proc/zoneinfo", "/proc/schedstat", "/proc/diskstats", "/proc/vmallocinfo"):
    try:
        data = open(p, "rb").read(4096)
    except OSError as e:
        say("READ", p, "error", ename(e.errno))
        continue
    say("READ", p, len(data), data[:300])
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				host, _ := os.ReadFile("/proc/cmdline")
				for _, line := range strings.Split(x.r.Stdout, "\n") {
					f := strings.Fields(line)
					if len(f) >= 3 && f[0] == "READ" && f[2] != "0" && f[2] != "error" {
						t.Errorf("HOLE: %s is readable in the sandbox: %s", f[1], e2eClip(line))
					}
				}
				if h := strings.TrimSpace(string(host)); len(h) > 10 && strings.Contains(string(x.res.Body), h[:10]) {
					t.Errorf("HOLE: the host kernel's command line is in the answer")
				}
			},
			strict: &override{why: "gVisor has its own /proc: its files describe the sandbox's kernel, not the host's",
				check: func(t *testing.T, x *run) {
					host, _ := os.ReadFile("/proc/cmdline")
					if h := strings.TrimSpace(string(host)); len(h) > 10 && strings.Contains(x.r.Stdout, h[:10]) {
						t.Errorf("HOLE: the host kernel's command line is visible under gVisor")
					}
				}},
		},
	}
}

func e2eClip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
