// Command bench measures sandboxd's exec latency and throughput side by side
// with the alternatives, on the same engine in one run, and writes the table
// to bench/RESULTS.md (`make bench`).
//
// Scenarios, for print(1) and (with -data) a pandas script:
//   - python3 on the host, as the floor;
//   - `docker run --rm IMAGE python3 -c CODE`;
//   - sandboxd in container mode (isolation: container, one engine
//     container per exec) with the warm pool off (cold) and on (warm);
//   - sandboxd in cell mode (isolation: cell, a fresh cell per exec in a
//     long-lived per-tenant cell host), as the shipped profiles say.
//
// Each at concurrency 1 (a count of runs, the warm ones paced as an agent's
// calls are) and, for the warm sandboxd modes, throughput at a higher
// concurrency for a fixed time, with clients that wait out each 429 as its
// Retry-After says. The strict profile (runsc) is measured both ways: one
// runsc container per exec (container mode) against its shipped cells, one
// gVisor sandbox per tenant that the launcher builds cells in; whether
// bubblewrap could build them under this runsc is probed and reported.
// Container mode runs against a copy of the profiles dir in which every
// `isolation: cell` says `isolation: container`.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// workload is one piece of code run in every scenario.
type workload struct {
	name    string
	code    string
	want    string // its stdout, trimmed
	image   string
	profile string
	// pace spaces single warm requests (untimed), as an agent's calls are
	// spaced by model turns; it must let the pool start the next sandbox
	// (or a cell host build its next cell), which for a profile with a
	// heavy preload takes over a second here.
	pace time.Duration
	// conc is the concurrency of its throughput lines.
	conc int
}

// Scenario names, as the table shows them.
const (
	scFloor     = "python3 on the host (floor)"
	scDocker    = "docker run --rm"
	scCold      = "sandboxd container, cold (pool off)"
	scWarm      = "sandboxd container, warm (pool on)"
	scCells     = "sandboxd cells"
	scRunc      = "docker run --rm --runtime runc"
	scRunsc     = "docker run --rm --runtime runsc"
	scStrict    = "sandboxd container (runsc), warm (pool on)"
	scStrictSel = "sandboxd cells (runsc)"
	loadStrict  = "strict print(1)"
)

// parts are the groups of lines -only selects from.
var parts = []string{"floor", "docker", "cold", "warm", "cells", "strict"}

type config struct {
	runs      int
	lineMax   time.Duration
	duration  time.Duration
	warmup    time.Duration
	settle    time.Duration
	poolSize  int
	startRuns int
	keep      bool
	only      map[string]bool
}

func main() {
	var c config
	flag.IntVar(&c.runs, "runs", 100, "most runs per concurrency-1 line")
	flag.DurationVar(&c.lineMax, "line-max", time.Minute, "longest a concurrency-1 line runs; it ends there even short of -runs")
	flag.DurationVar(&c.duration, "duration", time.Minute, "length of each throughput line")
	flag.DurationVar(&c.warmup, "warmup", 5*time.Second, "untimed load at a throughput line's concurrency before it, so that pools and cell hosts are up")
	flag.DurationVar(&c.settle, "settle", 20*time.Second, "longest wait before each line for the machine to go quiet (under 15% busy); 0: no wait")
	flag.IntVar(&c.poolSize, "pool-size", 4, "warm pool size for container mode's warm lines")
	flag.IntVar(&c.startRuns, "start-runs", 10, "runs of each docker run --runtime line (runc against runsc start) of the strict part")
	flag.BoolVar(&c.keep, "keep", false, "keep the temporary dir: sandboxd's logs (sandboxd-MODE.log), data dirs and the container-mode profiles")
	out := flag.String("out", "bench/RESULTS.md", "where to write the results table")
	only := flag.String("only", strings.Join(parts, ","), "comma-separated parts to run: "+strings.Join(parts, ", "))
	printConc := flag.Int("concurrency", 16, "concurrency of print(1)'s and strict's throughput lines")
	dataConc := flag.Int("data-concurrency", 4, "concurrency of the pandas script's throughput lines")
	pace := flag.Duration("pace", time.Second, "untimed pause before each single warm print(1) request, as an agent's model turn between tool calls")
	data := flag.Bool("data", false, "also run the pandas workload (needs sandboxd/python-data:3.11 and the data profile)")
	flag.Parse()
	c.only = map[string]bool{}
	for _, p := range strings.Split(*only, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(parts, p) {
			fail(fmt.Errorf("-only: unknown part %q; the parts are %s", p, strings.Join(parts, ", ")))
		}
		c.only[p] = true
	}

	loads := []workload{{name: "print(1)", code: "print(1)", want: "1", image: "sandboxd/python:3.11", profile: "default", pace: *pace, conc: *printConc}}
	if *data {
		loads = append(loads, workload{name: "pandas script", code: "import pandas as pd\nprint(pd.DataFrame({'a': [1, 2, 3]})['a'].sum())", want: "6",
			image: "sandboxd/python-data:3.11", profile: "data", pace: 2 * time.Second, conc: *dataConc})
	}
	rows, probes := runAll(&c, loads)
	order := []string{}
	for _, w := range loads {
		order = append(order, w.name)
	}
	order = append(order, loadStrict)
	sortRows(rows, order)
	check(os.WriteFile(*out, []byte(keepTail(*out, report(rows, probes, &c, loads))), 0o644))
	fmt.Fprintf(os.Stderr, "wrote %s\n", *out)
}

// runAll runs the selected parts: the lines without sandboxd first, then
// one sandboxd per mode, then the strict part's engine lines and probes.
func runAll(c *config, loads []workload) ([]row, *strictProbes) {
	root, err := os.Getwd()
	check(err)
	tmp, err := os.MkdirTemp("", "sandboxd-bench-")
	check(err)
	if c.keep {
		defer fmt.Fprintf(os.Stderr, "kept %s (sandboxd's logs, data dirs and profiles)\n", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	shipped := filepath.Join(root, "profiles")
	for _, w := range loads {
		if c.only["cells"] && isolationOf(shipped, w.profile) != "cell" {
			fail(fmt.Errorf("profiles/exec/%s.yaml does not say isolation: cell, so the cells lines would not measure cells", w.profile))
		}
	}
	var rows []row
	for _, w := range loads {
		if c.only["floor"] {
			rows = append(rows, c.single(scFloor, w.name, c.runs, measure, hostPython(w)))
		}
		if c.only["docker"] {
			rows = append(rows, c.single(scDocker, w.name, c.runs, measure, dockerRun("", w)))
		}
	}
	if c.only["cold"] || c.only["warm"] || c.only["strict"] || c.only["cells"] {
		bin := filepath.Join(tmp, "sandboxd")
		run("go", "build", "-o", bin, "./cmd/sandboxd")
		containers := filepath.Join(tmp, "profiles-container")
		check(containerProfiles(shipped, containers))
		rows = append(rows, c.sandboxdLines(bin, shipped, containers, tmp, loads)...)
	}
	if !c.only["strict"] {
		return rows, nil
	}
	w := workload{name: loadStrict, code: "print(1)", want: "1", image: "sandboxd/python:3.11"}
	rows = append(rows, c.single(scRunc, w.name, c.startRuns, measure, dockerRun("runc", w)),
		c.single(scRunsc, w.name, c.startRuns, measure, dockerRun("runsc", w)))
	return rows, probeStrict(w.image)
}

// sandboxdLines are the lines of each sandboxd mode, one server each:
// container mode cold and warm (with strict), then cells.
func (c *config) sandboxdLines(bin, shipped, containers, tmp string, loads []workload) []row {
	var rows []row
	if c.only["cold"] {
		srv := startServer(bin, containers, tmp, "cold", 0)
		for _, w := range loads {
			fn := srv.exec(w)
			warmUp(fn, 3)
			rows = append(rows, c.single(scCold, w.name, c.runs, srv.measure, fn))
		}
		srv.stop()
	}
	if c.only["warm"] || c.only["strict"] {
		srv := startServer(bin, containers, tmp, "warm", c.poolSize)
		if c.only["warm"] {
			for _, w := range loads {
				rows = append(rows, c.modeLines(srv, scWarm, w)...)
			}
		}
		if c.only["strict"] {
			rows = append(rows, c.throughput(srv, scStrict, strictLoad(loads)))
		}
		srv.stop()
	}
	if c.only["cells"] {
		srv := startServer(bin, shipped, tmp, "cells", 0)
		for _, w := range loads {
			rows = append(rows, c.modeLines(srv, scCells, w)...)
		}
		if c.only["strict"] {
			rows = append(rows, c.throughput(srv, scStrictSel, strictLoad(loads)))
		}
		srv.stop()
	}
	return rows
}

// measurer runs one line: measure, or a server's.
type measurer func(scenario, load string, l line, fn call) row

// single is a concurrency-1 line of at most runs calls, after the machine
// settled.
func (c *config) single(scenario, load string, runs int, m measurer, fn call) row {
	settle(c.settle)
	return m(scenario, load, line{conc: 1, runs: runs, dur: c.lineMax}, fn)
}

// modeLines are a warm sandboxd mode's lines for one workload: single
// paced requests, then throughput.
func (c *config) modeLines(srv *server, scenario string, w workload) []row {
	fn := srv.exec(w)
	warmUp(fn, 5)
	settle(c.settle)
	single := srv.measure(scenario, w.name, line{conc: 1, runs: c.runs, dur: c.lineMax, pace: w.pace}, fn)
	return []row{single, c.throughput(srv, scenario, w)}
}

// throughput is one throughput line, after an untimed warm-up at its
// concurrency.
func (c *config) throughput(srv *server, scenario string, w workload) row {
	fn := srv.exec(w)
	if c.warmup > 0 {
		srv.measure("(warm-up) "+scenario, w.name, line{conc: w.conc, dur: c.warmup}, fn)
	}
	settle(c.settle)
	return srv.measure(scenario, w.name, line{conc: w.conc, dur: c.duration, window: true}, fn)
}

// warmUp makes n spaced calls, to let a pool fill and warm the caches.
func warmUp(fn call, n int) {
	for i := 0; i < n; i++ {
		_ = fn()
		time.Sleep(300 * time.Millisecond)
	}
}

// sortRows orders rows by workload (in order), then concurrency, keeping
// the order of scenarios within.
func sortRows(rows []row, order []string) {
	slices.SortStableFunc(rows, func(a, b row) int {
		if d := slices.Index(order, a.load) - slices.Index(order, b.load); d != 0 {
			return d
		}
		return a.conc - b.conc
	})
}

// tailMarker ends what make bench writes in its output file; what follows
// it there (figures measured otherwise, such as the state stores') is kept.
const tailMarker = "<!-- make bench writes what is above this line and keeps what follows -->"

// keepTail returns the new report followed by the marker and what followed
// the marker in the file at path, if anything did.
func keepTail(path, report string) string {
	tail := ""
	if old, err := os.ReadFile(path); err == nil {
		if _, after, ok := strings.Cut(string(old), tailMarker); ok {
			tail = after
		}
	}
	return strings.TrimRight(report, "\n") + "\n\n" + tailMarker + "\n" + strings.TrimLeft(tail, "\n")
}

// strictLoad is print(1) under the strict profile, at print(1)'s
// throughput concurrency.
func strictLoad(loads []workload) workload {
	return workload{name: loadStrict, code: "print(1)", want: "1", image: "sandboxd/python:3.11", profile: "strict", conc: loads[0].conc}
}
