package e2e

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// HostPids lists the pids of the processes in /proc.
func HostPids() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// HostProcsMatching describes ("pid: command line") the host processes
// whose command line contains s.
func HostProcsMatching(s string) []string {
	var out []string
	for _, pid := range HostPids() {
		p := strconv.Itoa(pid)
		b, err := os.ReadFile("/proc/" + p + "/cmdline")
		if err != nil || !bytes.Contains(b, []byte(s)) {
			continue
		}
		out = append(out, p+": "+strings.ReplaceAll(string(bytes.TrimRight(b, "\x00")), "\x00", " "))
	}
	return out
}

// HostFilesMatching lists the files in the host's usual writable places
// whose name contains s.
func HostFilesMatching(s string) []string {
	var out []string
	for _, dir := range []string{"/", "/tmp", "/var/tmp", "/dev/shm", "/run", "/root"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.Contains(e.Name(), s) {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	return out
}

// HostAddrs lists the host's own addresses, loopback excluded.
func HostAddrs() []string {
	var out []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() {
			continue
		}
		out = append(out, ipn.IP.String())
	}
	return out
}

// HostAbstractSockets lists the abstract unix socket names bound in the
// test's network namespace (from /proc/net/unix).
func HostAbstractSockets() []string {
	b, _ := os.ReadFile("/proc/net/unix")
	seen := map[string]bool{}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 8 || !strings.HasPrefix(f[7], "@") || seen[f[7]] {
			continue
		}
		seen[f[7]] = true
		out = append(out, f[7][1:])
	}
	return out
}
