package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// line is how one line of the table is driven: conc workers call until
// runs calls have been made or dur has passed, whichever comes first (a
// zero bound does not apply).
type line struct {
	conc int
	runs int
	dur  time.Duration
	pace time.Duration // untimed pause before each call
	// window: throughput counts the answers within dur, over dur (calls
	// still running at the end are waited for, and count for latency and
	// CPU only); otherwise the answers over the time taken, pauses out.
	window bool
}

// attempt is the outcome of one request.
type attempt struct {
	timing string // the Server-Timing header, if any
	// busy is a 429: the client waits retryAfter and asks again.
	busy       bool
	retryAfter time.Duration
	err        error
}

// call makes one request.
type call func() attempt

type row struct {
	scenario, load string
	conc           int
	// length says what bounded the line: "100 runs" or "60 s".
	length           string
	ok, errs, busy   int
	warm             int // answers that got a warm sandbox
	median, p95, p99 time.Duration
	tput             float64 // answers per second
	// cpuPerRun is the machine's busy CPU time during the line divided by
	// its answers: all of it, sandboxd's, the engine's, the code's.
	cpuPerRun time.Duration
	// phases are the medians of sandboxd's Server-Timing phases.
	phases map[string]float64
	// errors counts each distinct error.
	errors map[string]int
	// logged counts the warnings and errors sandboxd logged during the
	// line.
	logged map[string]int
	// before is how busy the machine was just before the line (0 to 1).
	before float64
	// note replaces the figures of a line that could not be measured.
	note string
}

// collector gathers the calls of one line.
type collector struct {
	mu       sync.Mutex
	lats     []time.Duration
	inWindow int
	errs     int
	busy     int
	warm     int
	phases   map[string][]float64
	errors   map[string]int
	paused   time.Duration
}

func (c *collector) add(lat time.Duration, inWindow bool, a attempt, n429 int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.busy += n429
	for name, v := range parseTiming(a.timing) {
		c.phases[name] = append(c.phases[name], v)
	}
	if strings.Contains(a.timing, `sandbox;desc="warm"`) {
		c.warm++
	}
	if a.err != nil {
		c.errs++
		c.errors[a.err.Error()]++
		return
	}
	c.lats = append(c.lats, lat)
	if inWindow {
		c.inWindow++
	}
}

// measure runs one line of fn. A call's latency runs from its first
// request to its answer, the waits after 429s included.
func measure(scenario, load string, l line, fn call) row {
	col := &collector{phases: map[string][]float64{}, errors: map[string]int{}}
	before := busyFraction(200 * time.Millisecond)
	var (
		wg    sync.WaitGroup
		slots = make(chan struct{}, max(l.runs, 0))
	)
	for i := 0; i < l.runs; i++ {
		slots <- struct{}{}
	}
	close(slots)
	busy0 := busyCPU()
	start := time.Now()
	deadline := start.Add(l.dur)
	more := func() bool {
		if l.dur > 0 && !time.Now().Before(deadline) {
			return false
		}
		if l.runs > 0 {
			_, ok := <-slots
			return ok
		}
		return true
	}
	for i := 0; i < l.conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for more() {
				time.Sleep(l.pace)
				col.mu.Lock()
				col.paused += l.pace
				col.mu.Unlock()
				t := time.Now()
				a, n429, done := retrying(fn, deadline, l.dur > 0)
				if !done { // told to wait past the deadline: gives up
					col.mu.Lock()
					col.busy += n429
					col.mu.Unlock()
					return
				}
				end := time.Now()
				col.add(end.Sub(t), l.dur == 0 || !end.After(deadline), a, n429)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	r := row{scenario: scenario, load: load, conc: l.conc, ok: len(col.lats), errs: col.errs, busy: col.busy, warm: col.warm,
		cpuPerRun: (busyCPU() - busy0) / time.Duration(max(len(col.lats), 1)), phases: map[string]float64{}, errors: col.errors, before: before}
	if l.window {
		r.length = fmt.Sprintf("%v", l.dur)
		r.tput = float64(col.inWindow) / l.dur.Seconds()
	} else {
		r.length = fmt.Sprintf("%d runs", r.ok+r.errs)
		r.tput = float64(r.ok) / (elapsed - col.paused/time.Duration(max(l.conc, 1))).Seconds()
	}
	for name, vs := range col.phases {
		slices.Sort(vs)
		r.phases[name] = vs[(len(vs)-1)/2]
	}
	slices.Sort(col.lats)
	if len(col.lats) > 0 {
		r.median, r.p95, r.p99 = pct(col.lats, 50), pct(col.lats, 95), pct(col.lats, 99)
	}
	fmt.Fprintf(os.Stderr, "%-44s %-15s c=%-2d %-8s ok=%d errors=%d 429s=%d warm=%d median=%v p99=%v %.1f/s CPU/exec=%v (machine %.0f%% busy before)\n",
		scenario, load, l.conc, r.length, r.ok, r.errs, r.busy, r.warm, r.median.Round(time.Millisecond/10), r.p99.Round(time.Millisecond),
		r.tput, r.cpuPerRun.Round(time.Millisecond/10), 100*before)
	for _, e := range topErrors(r.errors, 3) {
		fmt.Fprintf(os.Stderr, "  %s\n", e)
	}
	return r
}

// retrying makes a call, waiting out each 429 as its Retry-After says.
// done is false when a wait would pass the deadline (bounded is true).
func retrying(fn call, deadline time.Time, bounded bool) (a attempt, n429 int, done bool) {
	for {
		a = fn()
		if !a.busy {
			return a, n429, true
		}
		n429++
		if bounded && time.Now().Add(a.retryAfter).After(deadline) {
			return a, n429, false
		}
		time.Sleep(a.retryAfter)
	}
}

// topErrors are the n commonest errors, with their counts.
func topErrors(errs map[string]int, n int) []string {
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if d := errs[b] - errs[a]; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	var out []string
	for _, k := range keys[:min(n, len(keys))] {
		out = append(out, fmt.Sprintf("%d x %s", errs[k], k))
	}
	return out
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
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

// quiet is how busy the machine may be for settle to call it quiet.
const quiet = 0.15

// settle waits, at most most, until the machine is under quiet busy over
// a second: what the previous line left (containers being removed, a pool
// filling) should not be counted in the next.
func settle(most time.Duration) {
	if most <= 0 {
		return
	}
	end := time.Now().Add(most)
	for {
		f := busyFraction(time.Second)
		if f < quiet {
			return
		}
		if time.Now().After(end) {
			fmt.Fprintf(os.Stderr, "  (the machine is still %.0f%% busy after %v; measuring anyway)\n", 100*f, most)
			return
		}
	}
}

// busyFraction is the share of the machine's CPU time that was busy over
// the next d.
func busyFraction(d time.Duration) float64 {
	b0 := busyCPU()
	time.Sleep(d)
	return float64(busyCPU()-b0) / float64(d*time.Duration(runtime.NumCPU()))
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
