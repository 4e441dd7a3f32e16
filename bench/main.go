// Command bench measures sandboxd's exec latency and throughput side by side
// with the alternatives, on the same engine in one run, and writes the table
// to bench/RESULTS.md (`make bench`).
//
// Scenarios: `docker run --rm IMAGE python3 -c CODE`; sandboxd with the
// warm pool off (cold); sandboxd with the pool on (warm); python3 on the
// host as the floor. Each at concurrency 1 (median, p95, p99) and, for the
// sandboxd ones, throughput with p99 at higher concurrency.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type workload struct {
	name    string
	code    string
	image   string
	profile string
	// pace spaces single warm requests (untimed), as an agent's calls are
	// spaced by model turns; it must let the pool start the next sandbox,
	// which for a profile with a heavy preload takes over a second here.
	pace time.Duration
}

func main() {
	runs := flag.Int("runs", 200, "runs per scenario and concurrency")
	out := flag.String("out", "bench/RESULTS.md", "where to write the results table")
	concs := flag.String("concurrency", "4,16", "concurrency levels for the throughput runs")
	poolSize := flag.Int("pool-size", 4, "warm pool size for the warm scenario")
	pace := flag.Duration("pace", time.Second, "untimed pause before each single warm print(1) request, as an agent's model turn between tool calls")
	data := flag.Bool("data", false, "also run the pandas workload (needs sandboxd/python-data:3.11 and the data profile)")
	flag.Parse()

	root, err := os.Getwd()
	check(err)
	tmp, err := os.MkdirTemp("", "sandboxd-bench-")
	check(err)
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "sandboxd")
	run("go", "build", "-o", bin, "./cmd/sandboxd")

	loads := []workload{{name: "print(1)", code: "print(1)", image: "sandboxd/python:3.11", profile: "default", pace: *pace}}
	if *data {
		loads = append(loads, workload{name: "pandas script", code: "import pandas as pd\nprint(pd.DataFrame({'a': [1, 2, 3]})['a'].sum())",
			image: "sandboxd/python-data:3.11", profile: "data", pace: 2 * time.Second})
	}
	var levels []int
	for _, f := range strings.Split(*concs, ",") {
		var n int
		if _, err := fmt.Sscan(f, &n); err == nil && n > 0 {
			levels = append(levels, n)
		}
	}

	var rows []row
	for _, w := range loads {
		fmt.Fprintf(os.Stderr, "== %s\n", w.name)
		rows = append(rows, measure("python3 on the host (floor)", w.name, 1, *runs, 0, hostPython(w.code)))
		rows = append(rows, measure("docker run --rm", w.name, 1, *runs, 0, dockerRun(w.image, w.code)))
		for _, mode := range []struct {
			name string
			pool int
		}{{"sandboxd cold (pool off)", 0}, {"sandboxd warm (pool on)", *poolSize}} {
			srv := startServer(bin, root, tmp, mode.pool)
			fn := srv.exec(w)
			for i := 0; i < 5; i++ { // let the pool fill, warm the caches
				_, _ = fn()
				time.Sleep(300 * time.Millisecond)
			}
			pace := time.Duration(0)
			if mode.pool > 0 {
				pace = w.pace
			}
			rows = append(rows, measure(mode.name, w.name, 1, *runs, pace, fn))
			for _, c := range levels {
				rows = append(rows, measure(mode.name, w.name, c, *runs, 0, fn))
			}
			srv.stop()
		}
	}
	check(os.WriteFile(*out, []byte(report(rows, *runs, *poolSize, loads)), 0o644))
	fmt.Fprintf(os.Stderr, "wrote %s\n", *out)
}

type row struct {
	scenario, load          string
	conc, ok, errs          int
	median, p95, p99, total time.Duration
	// cpuPerRun is the machine's busy CPU time during the line divided by
	// its runs: all of it, sandboxd's, the engine's, the code's.
	cpuPerRun time.Duration
	// phases are the medians of sandboxd's Server-Timing phases.
	phases map[string]float64
	warm   int // runs that got a warm sandbox
}

// timed is one call: its Server-Timing header, if any, or an error.
type timed func() (string, error)

// measure runs fn n times at concurrency c, each worker waiting pace
// (untimed) before each call.
func measure(scenario, load string, c, n int, pace time.Duration, fn timed) row {
	var (
		mu     sync.Mutex
		lats   []time.Duration
		errs   int
		next   atomic.Int64
		wg     sync.WaitGroup
		first  error
		phases = map[string][]float64{}
		warm   int
	)
	busy0 := busyCPU()
	start := time.Now()
	for i := 0; i < c; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				time.Sleep(pace)
				t := time.Now()
				st, err := fn()
				d := time.Since(t)
				mu.Lock()
				for name, v := range parseTiming(st) {
					phases[name] = append(phases[name], v)
				}
				if strings.Contains(st, `sandbox;desc="warm"`) {
					warm++
				}
				if err != nil {
					errs++
					if first == nil {
						first = err
					}
				} else {
					lats = append(lats, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r := row{scenario: scenario, load: load, conc: c, ok: len(lats), errs: errs, total: time.Since(start) - time.Duration(n/c)*pace,
		cpuPerRun: (busyCPU() - busy0) / time.Duration(max(n, 1)), phases: map[string]float64{}, warm: warm}
	for name, vs := range phases {
		slices.Sort(vs)
		r.phases[name] = vs[(len(vs)-1)/2]
	}
	slices.Sort(lats)
	if len(lats) > 0 {
		r.median, r.p95, r.p99 = pct(lats, 50), pct(lats, 95), pct(lats, 99)
	}
	fmt.Fprintf(os.Stderr, "%-28s c=%-2d ok=%d errors=%d median=%v p99=%v\n", scenario, c, r.ok, errs, r.median.Round(time.Millisecond/10), r.p99.Round(time.Millisecond))
	if first != nil {
		fmt.Fprintf(os.Stderr, "  first error: %v\n", first)
	}
	return r
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

func hostPython(code string) timed {
	return func() (string, error) {
		out, err := exec.Command("/usr/bin/python3", "-c", code).Output()
		if err != nil {
			return "", fmt.Errorf("host python3: %w", err)
		}
		if len(out) == 0 {
			return "", fmt.Errorf("host python3 printed nothing")
		}
		return "", nil
	}
}

func dockerRun(image, code string) timed {
	return func() (string, error) {
		out, err := exec.Command("docker", "run", "--rm", "--network", "none", image, "python3", "-c", code).Output()
		if err != nil {
			return "", fmt.Errorf("docker run: %w", err)
		}
		if len(out) == 0 {
			return "", fmt.Errorf("docker run printed nothing")
		}
		return "", nil
	}
}

// parseTiming reads a Server-Timing header into phase durations (ms).
func parseTiming(h string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range strings.Split(h, ",") {
		fields := strings.Split(strings.TrimSpace(m), ";")
		for _, f := range fields[1:] {
			if v, ok := strings.CutPrefix(f, "dur="); ok {
				var d float64
				if _, err := fmt.Sscan(v, &d); err == nil {
					out[fields[0]] = d
				}
			}
		}
	}
	return out
}

// busyCPU is the machine's non-idle CPU time so far, from /proc/stat.
func busyCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	var busy int64
	for i, f := range strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1:] {
		var v int64
		fmt.Sscan(f, &v)
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return time.Duration(busy) * 10 * time.Millisecond // USER_HZ is 100
}

type server struct {
	cmd  *exec.Cmd
	url  string
	key  string
	log  *bytes.Buffer
	pool int
}

func startServer(bin, root, tmp string, pool int) *server {
	var k [24]byte
	_, _ = rand.Read(k[:])
	key := "sbxbench_" + hex.EncodeToString(k[:])
	sum := sha256.Sum256([]byte(key))
	keys := filepath.Join(tmp, fmt.Sprintf("keys-%d.yaml", pool))
	check(os.WriteFile(keys, []byte(fmt.Sprintf("keys:\n  - id: bench\n    tenant: bench\n    key_sha256: %x\n    roles: [agent]\n", sum)), 0o600))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	addr := ln.Addr().String()
	ln.Close()
	s := &server{url: "http://" + addr, key: key, log: &bytes.Buffer{}, pool: pool}
	s.cmd = exec.Command(bin, "serve", "--addr", addr, "--data-dir", filepath.Join(tmp, fmt.Sprintf("data-%d", pool)),
		"--profiles-dir", filepath.Join(root, "profiles"), "--keys-file", keys,
		"--pool-size", fmt.Sprint(pool), "--max-runs", "16", "--queue", "64", "--log-level", "warn")
	s.cmd.Stderr = s.log
	check(s.cmd.Start())
	for i := 0; ; i++ {
		resp, err := http.Get(s.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if i > 300 {
			fmt.Fprintf(os.Stderr, "sandboxd did not become ready:\n%s\n", s.log)
			os.Exit(1)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s
}

var client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func (s *server) exec(w workload) timed {
	body, _ := json.Marshal(map[string]any{"language": "python", "code": w.code, "profile": w.profile})
	return func() (string, error) {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, s.url+"/exec", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+s.key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		st := resp.Header.Get("Server-Timing")
		if resp.StatusCode != 200 {
			return st, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
		}
		var r struct{ Status, Stdout string }
		if err := json.Unmarshal(b, &r); err != nil || r.Status != "ok" {
			return st, fmt.Errorf("run: %s", b)
		}
		return st, nil
	}
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
}

func report(rows []row, runs, pool int, loads []workload) string {
	var b strings.Builder
	host, _ := os.Hostname()
	kernel, _ := exec.Command("uname", "-r").Output()
	engine, _ := exec.Command("docker", "info", "--format", "{{.ServerVersion}}, storage driver {{.Driver}}, cgroup v{{.CgroupVersion}}").Output()
	var paces []string
	for _, w := range loads {
		paces = append(paces, fmt.Sprintf("%v for %s", w.pace, w.name))
	}
	fmt.Fprintf(&b, "# sandboxd benchmark results\n\n")
	fmt.Fprintf(&b, "Written by `make bench` (`go run ./bench`) on %s: %d CPUs, %s, kernel %s, Docker Engine %s, host %s. "+
		"%d runs per line; warm pool size %d. Latency is end to end over HTTP on loopback for sandboxd, and the whole command for the others. "+
		"Single-request warm runs are spaced (%s, untimed), as an agent's calls are spaced by model turns, which lets the pool start the next sandbox; "+
		"the throughput lines are back to back. CPU per run is the whole machine's busy CPU time during the line (sandboxd, the engine, containerd, shims, runc, the storage driver, the kernel and the code) divided by its runs: "+
		"with 2 CPUs, 2 s divided by it bounds the sustained rate.\n\n",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), memTotal(), strings.TrimSpace(string(kernel)), strings.TrimSpace(string(engine)), host, runs, pool, strings.Join(paces, ", "))
	fmt.Fprintf(&b, "| workload | scenario | concurrency | ok | errors | median | p95 | p99 | throughput (runs/s) | CPU per run |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		tput := float64(r.ok) / r.total.Seconds()
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %s | %s | %s | %.1f | %s |\n", r.load, r.scenario, r.conc, r.ok, r.errs, ms(r.median), ms(r.p95), ms(r.p99), tput, ms(r.cpuPerRun))
	}
	b.WriteString("\nRatios at concurrency 1 (median):\n\n")
	for _, load := range uniqueLoads(rows) {
		floor, dockerRun, cold, warm := find(rows, load, "python3 on the host (floor)"), find(rows, load, "docker run --rm"), find(rows, load, "sandboxd cold (pool off)"), find(rows, load, "sandboxd warm (pool on)")
		if floor.median > 0 && warm.median > 0 {
			fmt.Fprintf(&b, "- %s: warm / host floor = %.2fx; docker run --rm / warm = %.1fx; cold / warm = %.1fx\n", load,
				float64(warm.median)/float64(floor.median), float64(dockerRun.median)/float64(warm.median), float64(cold.median)/float64(warm.median))
		}
	}
	b.WriteString("\nWhere sandboxd's time goes at concurrency 1: the median of each phase of the answers' Server-Timing header, in ms " +
		"(queue: waiting for a run slot; sandbox: taking a warm sandbox or creating and starting a cold one; exchange: handing the job over and reading the report through the engine's attach stream; run: the code, as the launcher measured it; capture and audit: the forensic records written before the answer).\n\n")
	names := []string{"queue", "sandbox", "exchange", "run", "capture", "audit", "total"}
	b.WriteString("| workload | scenario | warm runs | " + strings.Join(names, " | ") + " |\n|---|---|---|" + strings.Repeat("---|", len(names)) + "\n")
	for _, r := range rows {
		if r.conc != 1 || len(r.phases) == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %d of %d |", r.load, r.scenario, r.warm, r.ok)
		for _, n := range names {
			fmt.Fprintf(&b, " %.2f |", r.phases[n])
		}
		b.WriteString("\n")
	}
	return b.String()
}

func uniqueLoads(rows []row) []string {
	var out []string
	for _, r := range rows {
		if !slices.Contains(out, r.load) {
			out = append(out, r.load)
		}
	}
	return out
}

func find(rows []row, load, scenario string) row {
	for _, r := range rows {
		if r.load == load && r.scenario == scenario && r.conc == 1 {
			return r
		}
	}
	return row{}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown memory"
	}
	var kb int64
	fmt.Sscanf(strings.TrimPrefix(strings.SplitN(string(b), "\n", 2)[0], "MemTotal:"), "%d", &kb)
	return fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
}

func run(name string, args ...string) {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	check(cmd.Run())
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
