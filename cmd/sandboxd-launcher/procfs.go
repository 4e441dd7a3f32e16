package main

// Usage counters of the container and its processes, from /proc and the
// memory and CPU cgroup (v2, or v1).

import (
	"os"
	"strconv"
	"strings"
)

// oomKills reads the container's memory cgroup OOM-kill counter (cgroup v2
// memory.events or v1 memory.oom_control), or 0 when neither is readable.
func oomKills() int64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
	}
	return 0
}

// cpuUse is CPU time in milliseconds.
type cpuUse struct{ user, sys, total int64 }

// readCPU reads the container's CPU use from its cgroup (v2 cpu.stat, or
// v1 cpuacct), or the process pid's when neither is readable.
func readCPU(pid int) cpuUse {
	if b, err := os.ReadFile("/sys/fs/cgroup/cpu.stat"); err == nil {
		var u cpuUse
		for _, line := range strings.Split(string(b), "\n") {
			name, v, _ := strings.Cut(line, " ")
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			switch name {
			case "usage_usec":
				u.total = n / 1000
			case "user_usec":
				u.user = n / 1000
			case "system_usec":
				u.sys = n / 1000
			}
		}
		return u
	}
	for _, dir := range []string{"/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpu,cpuacct"} {
		b, err := os.ReadFile(dir + "/cpuacct.stat")
		if err != nil {
			continue
		}
		var u cpuUse
		tick := int64(1000 / clockTicks)
		for _, line := range strings.Split(string(b), "\n") {
			name, v, _ := strings.Cut(line, " ")
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			switch name {
			case "user":
				u.user = n * tick
			case "system":
				u.sys = n * tick
			}
		}
		u.total = u.user + u.sys
		if b, err := os.ReadFile(dir + "/cpuacct.usage"); err == nil {
			if ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
				u.total = ns / 1e6
			}
		}
		return u
	}
	t := cpuTicks(pid)
	tick := int64(1000 / clockTicks)
	return cpuUse{user: t.user * tick, sys: t.sys * tick, total: (t.user + t.sys) * tick}
}

// memoryBytes is the container's memory use without reclaimable file cache
// (as `docker stats` counts it), or 0 when the cgroup is not readable.
func memoryBytes() int64 {
	read := func(path string) (int64, bool) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil
	}
	statValue := func(path, key string) int64 {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, key+" "); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
		return 0
	}
	if n, ok := read("/sys/fs/cgroup/memory.current"); ok {
		return max(n-statValue("/sys/fs/cgroup/memory.stat", "inactive_file"), 0)
	}
	if n, ok := read("/sys/fs/cgroup/memory/memory.usage_in_bytes"); ok {
		return max(n-statValue("/sys/fs/cgroup/memory/memory.stat", "total_inactive_file"), 0)
	}
	return 0
}

// peakRSSKB is a process's peak resident set (VmHWM), or 0.
func peakRSSKB(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times; 100 on
// every Linux architecture Go supports.
const clockTicks = 100

type ticks struct{ user, sys int64 }

// cpuTicks reads a process's user and system CPU time from /proc.
func cpuTicks(pid int) ticks {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ticks{}
	}
	// The command name (field 2) may hold spaces; fields after it start
	// behind the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ticks{}
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return ticks{}
	}
	u, _ := strconv.ParseInt(f[11], 10, 64) // field 14, utime
	k, _ := strconv.ParseInt(f[12], 10, 64) // field 15, stime
	return ticks{u, k}
}
