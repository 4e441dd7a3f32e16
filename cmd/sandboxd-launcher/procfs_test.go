package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sample reads a file of testdata.
func sample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseStatTicks(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       ticks
	}{
		{"python", sample(t, "proc/stat"), ticks{1234, 56}},
		{"command name with spaces and parentheses", sample(t, "proc/stat-odd-name"), ticks{7, 3}},
		{"too few fields", sample(t, "proc/stat-short"), ticks{}},
		{"no command name", "2417 python3 S 1 2417 1 0 -1 4194560 26083 0 0 0 1234 56", ticks{}},
		{"empty", "", ticks{}},
		{"not numbers", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 u s", ticks{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseStatTicks(tc.text); got != tc.want {
				t.Errorf("parseStatTicks = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseVmHWM(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       int64
	}{
		{"python", sample(t, "proc/status"), 187204},
		{"no VmHWM line (a kernel thread)", sample(t, "proc/status-kernel-thread"), 0},
		{"without the unit", "VmHWM:\t42\n", 42},
		{"empty", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseVmHWM(tc.text); got != tc.want {
				t.Errorf("parseVmHWM = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestStatField(t *testing.T) {
	for _, tc := range []struct {
		name, text, key string
		want            int64
		wantOK          bool
	}{
		{"v2 memory.events", sample(t, "cgroup/v2/memory.events"), "oom_kill", 2, true},
		{"a longer key with the same start is not the key", "oom_kill_disable 1\noom_kill 4\n", "oom_kill", 4, true},
		{"a key is matched at the start of a line only", sample(t, "cgroup/v1/memory/memory.stat"), "inactive_file", 380928, true},
		{"total_ key of v1", sample(t, "cgroup/v1/memory/memory.stat"), "total_inactive_file", 20971520, true},
		{"the first line wins", "a 1\na 2\n", "a", 1, true},
		{"missing", sample(t, "cgroup/v2-events-without-oom-kill/memory.events"), "oom_kill", 0, false},
		{"not a number", "oom_kill many\n", "oom_kill", 0, true},
		{"padded value", "user    17  \n", "user", 17, true},
		{"empty", "", "user", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := statField(tc.text, tc.key)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("statField(%q) = %d, %v; want %d, %v", tc.key, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestParseCPU(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  cpuUse
		want cpuUse
	}{
		{"v2 cpu.stat, microseconds", parseCPUStat(sample(t, "cgroup/v2/cpu.stat")), cpuUse{user: 2101, sys: 733, total: 2834}},
		{"v2 cpu.stat, empty", parseCPUStat(""), cpuUse{}},
		{"v1 cpuacct, ticks and usage in nanoseconds", parseCPUAcct(sample(t, "cgroup/v1/cpuacct/cpuacct.stat"), sample(t, "cgroup/v1/cpuacct/cpuacct.usage")), cpuUse{user: 2120, sys: 370, total: 2534}},
		{"v1 cpuacct without usage: the total is the ticks'", parseCPUAcct(sample(t, "cgroup/v1/cpuacct/cpuacct.stat"), ""), cpuUse{user: 2120, sys: 370, total: 2490}},
		{"v1 cpuacct with a garbled usage", parseCPUAcct("user 1\nsystem 1\n", "12x\n"), cpuUse{user: 10, sys: 10, total: 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %+v, want %+v", tc.got, tc.want)
			}
		})
	}
}

// noSuchPid is a pid /proc never has, for readers that fall back to it.
const noSuchPid = -1

func TestCgroupReaders(t *testing.T) {
	missing := t.TempDir()
	for _, tc := range []struct {
		name    string
		cg      string
		cpu     cpuUse
		memory  int64
		oomKill int64
	}{
		{"v2", "testdata/cgroup/v2", cpuUse{user: 2101, sys: 733, total: 2834}, 52428800 - 16777216, 2},
		{"v1", "testdata/cgroup/v1", cpuUse{user: 2120, sys: 370, total: 2534}, 73400320 - 20971520, 1},
		{"v1, cpu and cpuacct mounted together", "testdata/cgroup/v1-combined", cpuUse{user: 50, sys: 30, total: 90}, 4194304 - 2097152, 0},
		{"v1 without cpuacct.usage", "testdata/cgroup/v1-cpuacct-without-usage", cpuUse{user: 400, sys: 20, total: 420}, 0, 0},
		{"v2 events without oom_kill fall back to v1", "testdata/cgroup/v2-events-without-oom-kill", cpuUse{}, 0, 5},
		{"nothing readable", missing, cpuUse{}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cpuUseIn(tc.cg, noSuchPid); got != tc.cpu {
				t.Errorf("cpuUseIn = %+v, want %+v", got, tc.cpu)
			}
			if got := memoryBytesIn(tc.cg); got != tc.memory {
				t.Errorf("memoryBytesIn = %d, want %d", got, tc.memory)
			}
			if got := oomKillsIn(tc.cg); got != tc.oomKill {
				t.Errorf("oomKillsIn = %d, want %d", got, tc.oomKill)
			}
		})
	}
}

// TestMemoryBytesNeverNegative: more inactive file cache than use (the
// two files are read at different moments) is no use, not a negative one.
func TestMemoryBytesNeverNegative(t *testing.T) {
	cg := t.TempDir()
	write(t, filepath.Join(cg, "memory.current"), "4096\n")
	write(t, filepath.Join(cg, "memory.stat"), "inactive_file 8192\n")
	if got := memoryBytesIn(cg); got != 0 {
		t.Errorf("memoryBytesIn = %d, want 0", got)
	}
}

// TestProcessReaders reads the test's own /proc entries: the readers find
// their fields in what the running kernel writes.
func TestProcessReaders(t *testing.T) {
	if got := peakRSSKB(os.Getpid()); got <= 0 {
		t.Errorf("peakRSSKB(self) = %d, want > 0", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for cpuTicks(os.Getpid()) == (ticks{}) {
		if time.Now().After(deadline) {
			t.Fatal("cpuTicks(self) stays zero while the test burns CPU")
		}
	}
	if got := cpuTicks(noSuchPid); got != (ticks{}) {
		t.Errorf("cpuTicks(no such pid) = %+v, want zero", got)
	}
	if got := peakRSSKB(noSuchPid); got != 0 {
		t.Errorf("peakRSSKB(no such pid) = %d, want 0", got)
	}
}

// write creates a file with text, or fails the test.
func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCPUBetweenSplitsThePreciseTotal(t *testing.T) {
	for _, tc := range []struct {
		a, b      cpuUse
		user, sys int64
	}{
		// 7 ms in all, under one tick each way: all of it is user time.
		{cpuUse{user: 100, sys: 50, total: 153}, cpuUse{user: 100, sys: 50, total: 160}, 7, 0},
		// 30 ms, ticks say 2:1.
		{cpuUse{user: 0, sys: 0, total: 0}, cpuUse{user: 20, sys: 10, total: 30}, 20, 10},
		// A counter that went back (a new cgroup) gives nothing.
		{cpuUse{user: 50, sys: 50, total: 100}, cpuUse{user: 10, sys: 10, total: 20}, 0, 0},
	} {
		if u, s := cpuBetween(tc.a, tc.b); u != tc.user || s != tc.sys {
			t.Errorf("cpuBetween(%+v, %+v) = %d, %d; want %d, %d", tc.a, tc.b, u, s, tc.user, tc.sys)
		}
	}
}

func TestDescendantNamedFindsAGrandchild(t *testing.T) {
	// sh starts sleep: the sleep is a grandchild of this process.
	cmd := exec.Command("/bin/sh", "-c", "sleep 30 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var pid int
	for i := 0; i < 100 && pid == 0; i++ {
		pid = descendantNamed(os.Getpid(), "sleep")
		time.Sleep(20 * time.Millisecond)
	}
	if pid == 0 || pid == cmd.Process.Pid {
		t.Fatalf("descendantNamed = %d, want the sleep under sh %d", pid, cmd.Process.Pid)
	}
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if strings.TrimSpace(string(b)) != "sleep" {
		t.Fatalf("pid %d is %q", pid, b)
	}
	if descendantNamed(os.Getpid(), "no-such-command") != 0 {
		t.Error("found a process that does not exist")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}
