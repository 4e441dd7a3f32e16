package security

import (
	"strconv"
	"strings"
	"testing"
)

// pyNet is shared by the network attacks: it first establishes that the
// sandbox has no interface but lo and no route, so that no packet can leave
// whatever the connection attempts do; the attempts use 1 s timeouts.
const pyNet = `
import socket
def isolated():
    ifaces = sorted(n for _, n in socket.if_nameindex())
    routes = [l for l in open("/proc/net/route").read().splitlines()[1:] if l.strip()]
    routes6 = [l for l in open("/proc/net/ipv6_route").read().splitlines() if l.strip() and l.split()[-1] != "lo"]
    say("IFACES", ",".join(ifaces))
    say("ROUTES", len(routes), len(routes6))
    return ifaces == ["lo"] and not routes and not routes6

def probe(tag, host, kind, attempt, what):
    t0 = time.monotonic()
    try:
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, kind)
    except OSError as e:
        # A profile without network allows no IP sockets at all.
        say("DENIED", tag, ename(e.errno), "%.3f" % (time.monotonic() - t0))
        return
    s.settimeout(1)
    try:
        attempt(s)
        allowed(tag, what)
    except OSError as e:
        say("DENIED", tag, ename(e.errno) if e.errno else type(e).__name__, "%.3f" % (time.monotonic() - t0))
    finally:
        s.close()

def tcp(tag, host, port):
    probe(tag, host, socket.SOCK_STREAM, lambda s: s.connect((host, port)), "connected")

def udp(tag, host, port):
    probe(tag, host, socket.SOCK_DGRAM, lambda s: s.sendto(b"sandbox", (host, port)), "sent")

if not isolated():
    say("NOT-ISOLATED the sandbox has a network; no connection is tried")
    sys.exit(0)
`

// unreachable requires every DENIED line whose tag starts with prefix to
// fail with "no route" within 1 s, at least min of them, and none ALLOWED.
func (x *run) unreachable(t *testing.T, prefix string, min int, errnos ...string) {
	t.Helper()
	if len(errnos) == 0 {
		// No IP socket at all (the seccomp filter of a profile without
		// network: EPERM), or no route: Linux says ENETUNREACH, gVisor
		// EHOSTUNREACH.
		errnos = []string{"EPERM", "ENETUNREACH", "EHOSTUNREACH"}
	}
	n := 0
	for _, l := range x.lines {
		f := strings.Fields(l)
		if len(f) < 2 || !strings.HasPrefix(f[1], prefix) {
			continue
		}
		switch f[0] {
		case "ALLOWED":
			t.Errorf("HOLE: %s: %s", f[1], l)
		case "DENIED":
			n++
			if len(f) < 4 || !contains(errnos, f[2]) {
				t.Errorf("%s: %q, want one of %v", f[1], l, errnos)
				continue
			}
			if secs, err := strconv.ParseFloat(f[3], 64); err != nil || secs >= 1.0 {
				t.Errorf("%s took %ss to fail; with no route it must fail at once (packets may have been sent)", f[1], f[3])
			}
		}
	}
	if n < min {
		t.Errorf("%d %s* attempts reported, want at least %d", n, prefix, min)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func (x *run) wantIsolated(t *testing.T) {
	t.Helper()
	x.wantFact(t, "IFACES", "lo")
	x.wantFact(t, "ROUTES", "0 0")
	if _, ok := x.fact("NOT-ISOLATED"); ok {
		t.Errorf("HOLE: the sandbox has a network interface or route besides lo")
	}
}

func netAttacks() []attack {
	return []attack{
		{
			name: "net-host-and-bridge-gateway",
			code: pyNet + `
for a in {{HOSTADDRS}}:
    for port in ({{HOSTPORT}}, 2375, 2376, 22, 80, {{PORT}}):
        tcp("tcp-%s-%d" % (a, port), a, port)
    udp("udp-%s-53" % a, a, 53)
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				x.wantIsolated(t)
				x.unreachable(t, "tcp-", 6*len(usableHostAddrs()))
				x.unreachable(t, "udp-", len(usableHostAddrs()))
			},
		},
		{
			name: "net-cloud-metadata",
			code: pyNet + `
tcp("metadata-tcp-80", "169.254.169.254", 80)
udp("metadata-udp-53", "169.254.169.254", 53)
tcp("metadata-v6-tcp-80", "fd00:ec2::254", 80)
tcp("metadata-alibaba", "100.100.100.200", 80)
tcp("public-dns-tcp", "8.8.8.8", 53)
udp("public-dns-udp", "1.1.1.1", 53)
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				x.wantIsolated(t)
				x.unreachable(t, "metadata-", 4)
				x.unreachable(t, "public-", 2)
			},
		},
		{
			name: "net-dns",
			code: pyNet + `
for name in ("example.com", "metadata.google.internal", "host.docker.internal"):
    t0 = time.monotonic()
    try:
        r = socket.getaddrinfo(name, 80)
        allowed("getaddrinfo-" + name, r[0][4])
    except socket.gaierror as e:
        say("DENIED", "getaddrinfo-" + name, "gaierror", e.errno, "%.3f" % (time.monotonic() - t0))
say("RESOLV", repr(open("/etc/resolv.conf").read()))
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				x.wantIsolated(t)
				for _, n := range []string{"example.com", "metadata.google.internal", "host.docker.internal"} {
					tag := "getaddrinfo-" + n
					v, rest, ok := x.marker(tag)
					if !ok || v != "DENIED" {
						t.Errorf("HOLE? %s resolved: %s %s", n, v, rest)
						continue
					}
					f := strings.Fields(rest)
					if secs, err := strconv.ParseFloat(f[len(f)-1], 64); err != nil || secs > 2 {
						t.Errorf("resolving %s took %s s to fail; with no network it should fail at once", n, f[len(f)-1])
					}
				}
			},
		},
		{
			name: "net-raw-and-packet-sockets",
			code: `
import socket
AF_PACKET, ETH_P_ALL = 17, 0x0003
for tag, fam, typ, proto in (("inet-raw-icmp", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
                             ("inet-raw-tcp", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP),
                             ("inet-raw-ipproto-raw", socket.AF_INET, socket.SOCK_RAW, 255),
                             ("inet6-raw-icmpv6", socket.AF_INET6, socket.SOCK_RAW, 58),
                             ("packet-raw", AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)),
                             ("packet-dgram", AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))):
    attempt(tag, socket.socket, fam, typ, proto)
# unprivileged ICMP ("ping") sockets depend on net.ipv4.ping_group_range of
# the sandbox's own network namespace: recorded, not asserted (lo only).
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    say("PING-SOCKET allowed")
except OSError as e:
    say("PING-SOCKET", ename(e.errno))
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				x.allDenied(t, []string{"inet-raw-icmp", "inet-raw-tcp", "inet-raw-ipproto-raw", "inet6-raw-icmpv6", "packet-raw", "packet-dgram"}, eperm)
			},
			strict: &override{check: func(t *testing.T, x *run) {
				x.allDenied(t, []string{"inet-raw-icmp", "inet-raw-tcp", "inet-raw-ipproto-raw", "inet6-raw-icmpv6", "packet-raw", "packet-dgram"}, strictDeny)
			}, why: "gVisor may refuse socket families with EAFNOSUPPORT/ENOSYS"},
		},
		{
			// A profile without network allows only AF_UNIX and AF_NETLINK
			// (network.json adds AF_INET and AF_INET6); the rarely used
			// families are where socket-layer kernel bugs turn up.
			name: "net-socket-families",
			code: `
import socket
for tag, fam, typ in (("unix", 1, socket.SOCK_STREAM), ("inet", 2, socket.SOCK_STREAM), ("inet6", 10, socket.SOCK_STREAM), ("netlink", 16, socket.SOCK_RAW),
                      ("ax25", 3, socket.SOCK_SEQPACKET), ("appletalk", 5, socket.SOCK_DGRAM), ("x25", 9, socket.SOCK_SEQPACKET),
                      ("key", 15, socket.SOCK_RAW), ("rds", 21, socket.SOCK_SEQPACKET), ("llc", 26, socket.SOCK_DGRAM),
                      ("can", 29, socket.SOCK_RAW), ("tipc", 30, socket.SOCK_RDM), ("bluetooth", 31, socket.SOCK_RAW),
                      ("alg", 38, socket.SOCK_SEQPACKET), ("vsock", 40, socket.SOCK_STREAM), ("kcm", 41, socket.SOCK_DGRAM),
                      ("qipcrtr", 42, socket.SOCK_DGRAM), ("smc", 43, socket.SOCK_STREAM), ("xdp", 44, socket.SOCK_RAW),
                      ("mctp", 45, socket.SOCK_DGRAM)):
    s = attempt("family-" + tag, socket.socket, fam, typ, 0)
    if s and s is not True:
        s.close()
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				x.allDenied(t, []string{"family-inet", "family-inet6", "family-ax25", "family-appletalk", "family-x25", "family-key", "family-rds", "family-llc", "family-can",
					"family-tipc", "family-bluetooth", "family-alg", "family-vsock", "family-kcm", "family-qipcrtr", "family-smc", "family-xdp", "family-mctp"},
					eperm, "family-unix", "family-netlink")
				for _, c := range []string{"family-unix", "family-netlink"} {
					x.wantAllowed(t, c)
				}
			},
			strict: &override{check: func(t *testing.T, x *run) {
				x.noAllowed(t, "family-unix", "family-netlink")
			}, why: "gVisor implements few families and refuses the others with its own errno"},
		},
		{
			// Abstract unix sockets belong to a network namespace: the
			// host's (including one this suite listens on) are unreachable.
			name: "net-host-abstract-unix-sockets",
			code: `
import socket
names = {{ABSTRACT}}
for i, name in enumerate(names):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1)
    try:
        s.connect("\0" + name)
        allowed("abstract-%d" % i, name)
    except OSError as e:
        denied("abstract-%d" % i, e.errno)
    s.close()
say("ABSTRACT-TRIED", len(names))
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				n := x.factInt(t, "ABSTRACT-TRIED")
				for i := range n {
					x.wantDenied(t, "abstract-"+strconv.FormatInt(i, 10), "ECONNREFUSED", "ENOENT")
				}
				x.noAllowed(t)
			},
			strict: &override{check: func(t *testing.T, x *run) {
				n := x.factInt(t, "ABSTRACT-TRIED")
				for i := range n {
					x.wantDenied(t, "abstract-"+strconv.FormatInt(i, 10), "ECONNREFUSED", "ENOENT", "EINVAL")
				}
				x.noAllowed(t)
			}, why: "gVisor's netstack answers a connect to an abstract name nobody bound in the cell's network namespace with EINVAL"},
		},
		{
			name: "net-engine-socket",
			code: `
import socket
paths = ["/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock",
         "/var/run/docker/containerd/containerd.sock", "/run/docker/runtime-runc/moby",
         "/var/lib/docker", "/run/podman/podman.sock", "/var/run/crio/crio.sock", "/run/runc"]
for i, p in enumerate(paths):
    attempt("stat-%d" % i, os.stat, p)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(p)
        allowed("connect-%d" % i, p)
    except OSError as e:
        denied("connect-%d" % i, e.errno)
    s.close()
say("PATHS", len(paths))
# the engine's TCP port and sandboxd's own port, on the sandbox's own loopback
for tag, port in (("tcp-loopback-2375", 2375), ("tcp-loopback-2376", 2376), ("tcp-loopback-sandboxd", {{PORT}})):
    try:
        s = socket.socket()
    except OSError as e:
        denied(tag, e.errno)  # no IP sockets without network
        continue
    s.settimeout(1)
    try:
        s.connect(("127.0.0.1", port))
        allowed(tag)
    except OSError as e:
        denied(tag, e.errno if e.errno else type(e).__name__)
    s.close()
`,
			status: "ok",
			check: func(t *testing.T, x *run) {
				n := x.factInt(t, "PATHS")
				for i := range n {
					s := strconv.FormatInt(i, 10)
					x.wantDenied(t, "stat-"+s, "ENOENT")
					x.wantDenied(t, "connect-"+s, "ENOENT")
				}
				for _, tag := range []string{"tcp-loopback-2375", "tcp-loopback-2376", "tcp-loopback-sandboxd"} {
					x.wantDenied(t, tag, "ECONNREFUSED", "EPERM")
				}
				x.noAllowed(t)
			},
		},
	}
}
