package main

// Usage counters of the container and its processes, from /proc and the
// memory and CPU cgroup (v2, or v1). Each counter is a read of a file and a
// parse of its text; the parsers are pure, and the readers take the cgroup
// mount so that a test can point them at a tree of sample files.

import (
	"os"
	"strconv"
	"strings"
)

// cgroupRoot is where the container's cgroup filesystem is mounted.
const cgroupRoot = "/sys/fs/cgroup"

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's and v1
// cpuacct.stat's CPU times; 100 on every Linux architecture Go supports.
const clockTicks = 100

// oomKills reads the container's memory cgroup OOM-kill counter (cgroup v2
// memory.events or v1 memory.oom_control), or 0 when neither is readable.
func oomKills() int64 { return oomKillsIn(cgroupRoot) }

// oomKillsIn is oomKills for the cgroup filesystem mounted at cg.
func oomKillsIn(cg string) int64 {
	for _, p := range []string{cg + "/memory.events", cg + "/memory/memory.oom_control"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if n, ok := statField(string(b), "oom_kill"); ok {
			return n
		}
	}
	return 0
}

// cpuUse is CPU time in milliseconds.
type cpuUse struct{ user, sys, total int64 }

// readCPU reads the container's CPU use from its cgroup (v2 cpu.stat, or
// v1 cpuacct), or the process pid's when neither is readable.
func readCPU(pid int) cpuUse { return cpuUseIn(cgroupRoot, pid) }

// cpuUseIn is readCPU for the cgroup filesystem mounted at cg.
func cpuUseIn(cg string, pid int) cpuUse {
	if b, err := os.ReadFile(cg + "/cpu.stat"); err == nil {
		return parseCPUStat(string(b))
	}
	for _, dir := range []string{cg + "/cpuacct", cg + "/cpu,cpuacct"} {
		b, err := os.ReadFile(dir + "/cpuacct.stat")
		if err != nil {
			continue
		}
		usage, _ := os.ReadFile(dir + "/cpuacct.usage")
		return parseCPUAcct(string(b), string(usage))
	}
	t := cpuTicks(pid)
	tick := int64(1000 / clockTicks)
	return cpuUse{user: t.user * tick, sys: t.sys * tick, total: (t.user + t.sys) * tick}
}

// parseCPUStat reads a cgroup v2 cpu.stat (microseconds).
func parseCPUStat(text string) cpuUse {
	total, _ := statField(text, "usage_usec")
	user, _ := statField(text, "user_usec")
	sys, _ := statField(text, "system_usec")
	return cpuUse{user: user / 1000, sys: sys / 1000, total: total / 1000}
}

// parseCPUAcct reads a cgroup v1 cpuacct.stat (clock ticks) and, when it
// holds a number, cpuacct.usage (nanoseconds; finer than the ticks) for
// the total.
func parseCPUAcct(stat, usage string) cpuUse {
	tick := int64(1000 / clockTicks)
	user, _ := statField(stat, "user")
	sys, _ := statField(stat, "system")
	u := cpuUse{user: user * tick, sys: sys * tick, total: (user + sys) * tick}
	if ns, err := strconv.ParseInt(strings.TrimSpace(usage), 10, 64); err == nil {
		u.total = ns / 1e6
	}
	return u
}

// memoryBytes is the container's memory use without reclaimable file cache
// (as `docker stats` counts it), or 0 when the cgroup is not readable.
func memoryBytes() int64 { return memoryBytesIn(cgroupRoot) }

// memoryBytesIn is memoryBytes for the cgroup filesystem mounted at cg.
func memoryBytesIn(cg string) int64 {
	if n, ok := readInt(cg + "/memory.current"); ok {
		return max(n-readStatField(cg+"/memory.stat", "inactive_file"), 0)
	}
	if n, ok := readInt(cg + "/memory/memory.usage_in_bytes"); ok {
		return max(n-readStatField(cg+"/memory/memory.stat", "total_inactive_file"), 0)
	}
	return 0
}

// readInt reads a file that holds one number.
func readInt(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// readStatField is statField of the file at path, or 0.
func readStatField(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := statField(string(b), key)
	return n
}

// statField is the value of the first "key value" line of text (the form
// of the cgroup's stat and events files; 0 when the value is not a number),
// and whether there is such a line.
func statField(text, key string) (int64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, true
		}
	}
	return 0, false
}

// peakRSSKB is a process's peak resident set (VmHWM), or 0.
func peakRSSKB(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	return parseVmHWM(string(b))
}

// parseVmHWM reads the peak resident set in KiB from a /proc/<pid>/status,
// or 0.
func parseVmHWM(status string) int64 {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// ticks is a process's CPU time in clock ticks.
type ticks struct{ user, sys int64 }

// cpuTicks reads a process's user and system CPU time from /proc.
func cpuTicks(pid int) ticks {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ticks{}
	}
	return parseStatTicks(string(b))
}

// parseStatTicks reads utime and stime from a /proc/<pid>/stat, or zero
// when the text is not one.
func parseStatTicks(stat string) ticks {
	// The command name (field 2) may hold spaces; fields after it start
	// behind the last ')'.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return ticks{}
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return ticks{}
	}
	u, _ := strconv.ParseInt(f[11], 10, 64) // field 14, utime
	k, _ := strconv.ParseInt(f[12], 10, 64) // field 15, stime
	return ticks{u, k}
}
