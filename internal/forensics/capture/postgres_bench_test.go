package capture

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkStores compares the stores on the service's two captures (a
// 100 KiB fetch, a small exec), Put and Get, unencrypted: SQLite with
// fsync (as the service runs it), Postgres with S3 (the fleet), Postgres
// with S3 and every part an object (inline=off: what inline parts save),
// and Postgres with a directory. Besides ns/op it reports the CPU time
// per operation of this process (cpu-µs/op: encoding, the clients) and of
// the PostgreSQL and S3 servers (server-cpu-µs/op), all on this machine.
//
//	go test -run '^$' -bench Stores -benchtime 200x ./internal/forensics/capture/
func BenchmarkStores(b *testing.B) {
	type store struct {
		name string
		open func(b *testing.B) Forensics
	}
	stores := []store{
		{"sqlite", func(b *testing.B) Forensics { return openDurable(b, b.TempDir(), Options{}) }},
		{"postgres-s3", func(b *testing.B) Forensics {
			return openPG(b, newPGDatabase(b), newS3Objects(b, newS3Config(b)), Options{})
		}},
		{"postgres-s3,inline=off", func(b *testing.B) Forensics {
			return openPG(b, newPGDatabase(b), newS3Objects(b, newS3Config(b)), Options{inlineMax: -1})
		}},
		{"postgres-dir", func(b *testing.B) Forensics {
			o, err := NewLocalObjects(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			return openPG(b, newPGDatabase(b), o, Options{})
		}},
	}
	captures := []struct {
		name string
		make func(int) *Capture
		size int64
	}{{"100KiB", benchCapture, 100 << 10}, {"SmallExec", execCapture, 0}}
	for _, st := range stores {
		for _, cp := range captures {
			b.Run("Put"+cp.name+"/"+st.name, func(b *testing.B) {
				s := st.open(b)
				caps := make([]*Capture, b.N)
				for i := range caps {
					caps[i] = cp.make(i)
				}
				if cp.size > 0 {
					b.SetBytes(cp.size)
				}
				m := startCPU(b)
				for i := 0; i < b.N; i++ {
					if err := s.Put(bg, caps[i]); err != nil {
						b.Fatal(err)
					}
				}
				m.report(b)
			})
			b.Run("Get"+cp.name+"/"+st.name, func(b *testing.B) {
				s := st.open(b)
				var ids []string
				for i := range 32 {
					c := cp.make(i)
					if err := s.Put(bg, c); err != nil {
						b.Fatal(err)
					}
					ids = append(ids, c.ID)
				}
				if cp.size > 0 {
					b.SetBytes(cp.size)
				}
				m := startCPU(b)
				for i := 0; i < b.N; i++ {
					if _, err := s.Get(bg, ids[i%len(ids)]); err != nil {
						b.Fatal(err)
					}
				}
				m.report(b)
			})
		}
	}
}

// cpuMeter measures the CPU time of this process and of the test servers
// (their process trees) over a benchmark's loop.
type cpuMeter struct {
	self, servers time.Duration
}

func startCPU(b *testing.B) *cpuMeter {
	b.ResetTimer()
	self, srv := cpuTimes()
	return &cpuMeter{self, srv}
}

func (m *cpuMeter) report(b *testing.B) {
	b.StopTimer()
	self, srv := cpuTimes()
	n := float64(b.N)
	b.ReportMetric(float64((self-m.self).Microseconds())/n, "cpu-µs/op")
	b.ReportMetric(float64((srv-m.servers).Microseconds())/n, "server-cpu-µs/op")
}

// cpuTimes returns this process's CPU time and that of the PostgreSQL
// and S3 servers' process trees (0 before they start).
func cpuTimes() (self, srv time.Duration) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	var roots []int
	if servers.s3 != nil {
		roots = append(roots, servers.s3.Pid())
	}
	if servers.pg != nil {
		if pid := postmaster(servers.pg.Port); pid != 0 {
			roots = append(roots, pid)
		}
	}
	return self, treeCPU(roots)
}

// postmaster finds the pid of the postgres server listening on port.
func postmaster(port int) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && filepath.Base(args[0]) == "postgres" && strings.Contains(string(b), "\x00-p\x00"+strconv.Itoa(port)+"\x00") {
			pid, _ := strconv.Atoi(filepath.Base(d))
			return pid
		}
	}
	return 0
}

// treeCPU sums user and system time of the processes roots and their
// descendants (live ones, and the reaped children each has counted).
func treeCPU(roots []int) time.Duration {
	if len(roots) == 0 {
		return 0
	}
	type proc struct {
		ppid  int
		ticks int64
	}
	procs := map[int]proc{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+2:])
		if len(f) < 15 {
			continue
		}
		// Fields after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15), 1-based from state.
		ppid, _ := strconv.Atoi(f[1])
		var ticks int64
		for _, k := range []int{11, 12, 13, 14} {
			v, _ := strconv.ParseInt(f[k], 10, 64)
			ticks += v
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		procs[pid] = proc{ppid, ticks}
	}
	in := map[int]bool{}
	for _, r := range roots {
		in[r] = true
	}
	var total int64
	for changed := true; changed; {
		changed = false
		for pid, p := range procs {
			if !in[pid] && in[p.ppid] {
				in[pid], changed = true, true
			}
		}
	}
	for pid := range in {
		total += procs[pid].ticks
	}
	// /proc counts in clock ticks of 1/100 s (USER_HZ on Linux).
	return time.Duration(total) * 10 * time.Millisecond
}
