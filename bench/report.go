package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// report is bench/RESULTS.md.
func report(rows []row, probes *strictProbes, c *config, loads []workload) string {
	var b strings.Builder
	writeHeader(&b, c, loads)
	writeTable(&b, rows)
	writeTargets(&b, rows, loads)
	writeRatios(&b, rows, loads)
	writeStrict(&b, rows, probes)
	writeErrors(&b, rows)
	writePhases(&b, rows)
	writeBusy(&b, rows)
	return b.String()
}

func writeHeader(b *strings.Builder, c *config, loads []workload) {
	host, _ := os.Hostname()
	kernel, _ := exec.Command("uname", "-r").Output()
	engine, _ := exec.Command("docker", "info", "--format", "{{.ServerVersion}}, storage driver {{.Driver}}, cgroup v{{.CgroupVersion}}").Output()
	var paces, concs []string
	for _, w := range loads {
		paces = append(paces, fmt.Sprintf("%v for %s", w.pace, w.name))
		concs = append(concs, fmt.Sprintf("%d for %s", w.conc, w.name))
	}
	fmt.Fprintf(b, "# sandboxd benchmark results\n\n")
	fmt.Fprintf(b, "Written by `make bench` (`go run ./bench`) on %s: %d CPUs, %s, kernel %s, Docker Engine %s, host %s.\n\n",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), memTotal(), strings.TrimSpace(string(kernel)), strings.TrimSpace(string(engine)), host)
	fmt.Fprintf(b, "Modes: *container* is one engine container per exec (isolation: container; sandboxd runs on a copy of profiles/ with every `isolation: cell` made `isolation: container`), "+
		"cold with the warm pool off, warm with it on (size %d); *cells* is the shipped profiles' isolation: cell, a fresh cell per exec in a long-lived cell host of the tenant's "+
		"(one tenant here, so at most the profile's cell.hosts hosts; no warm pool: a host builds its next cell while it waits). "+
		"sandboxd runs with --max-runs 16 --queue 64 --cell-hosts 64.\n\n", c.poolSize)
	fmt.Fprintf(b, "Concurrency-1 lines make up to %d calls, for at most %v. Their warm lines are spaced (%s, untimed), as an agent's calls are spaced by model turns, "+
		"which lets the pool start the next sandbox or a host build its next cell. Throughput lines run %v at concurrency %s (after %v of untimed warm-up load): "+
		"each client waits out a 429 as its Retry-After says and asks again (a 429 is counted, not an error); latency is from a call's first request to its answer, "+
		"waits included; throughput is the answers within the %v, divided by it. Latency is end to end over HTTP on loopback for sandboxd, and the whole command for the others. "+
		"CPU per exec is the whole machine's busy CPU time during the line (sandboxd, the engine, containerd, shims, runc, the storage driver, the kernel and the code) divided by its answers: "+
		"with %d CPUs, %d s divided by it bounds the sustained rate. *warm* counts the answers whose Server-Timing said `sandbox;desc=\"warm\"` "+
		"(a pooled container, or a cell that had been started before the call: its interpreter may still be importing the profile's preload then, "+
		"and that wait shows as exchange time in the phases below).\n\n",
		c.runs, c.lineMax, strings.Join(paces, ", "), c.duration, strings.Join(concs, ", "), c.warmup, c.duration, runtime.NumCPU(), runtime.NumCPU())
}

func writeTable(b *strings.Builder, rows []row) {
	b.WriteString("| workload | scenario | concurrency | length | ok | errors | 429s | warm | median | p95 | p99 | throughput (execs/s) | CPU per exec |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		if r.note != "" {
			fmt.Fprintf(b, "| %s | %s | %d | %s | - | - | - | - | - | - | - | - | - |\n", r.load, r.scenario, r.conc, r.note)
			continue
		}
		warm := "-"
		if len(r.phases) > 0 {
			warm = fmt.Sprint(r.warm)
		}
		fmt.Fprintf(b, "| %s | %s | %d | %s | %d | %d | %d | %s | %s | %s | %s | %.1f | %s |\n", r.load, r.scenario, r.conc, r.length,
			r.ok, r.errs, r.busy, warm, ms(r.median), ms(r.p95), ms(r.p99), r.tput, ms(r.cpuPerRun))
	}
}

// writeTargets checks issue 17's targets against the lines measured.
func writeTargets(b *strings.Builder, rows []row, loads []workload) {
	b.WriteString("\nTargets (issue 17, cells on 2 cores):\n\n")
	p := loads[0]
	cellsT, okC := find(rows, p.name, scCells, p.conc)
	ctrT, okW := find(rows, p.name, scWarm, p.conc)
	if okC {
		fmt.Fprintf(b, "- %s at concurrency %d for %s, cells: %.1f execs/s (at least 30: %s), %d errors (none: %s), p99 %s (under 1 s: %s), CPU per exec %s (goal under 60 ms: %s)",
			p.name, p.conc, cellsT.length, cellsT.tput, met(cellsT.tput >= 30), cellsT.errs, met(cellsT.errs == 0),
			ms(cellsT.p99), met(cellsT.ok > 0 && cellsT.p99 < time.Second), ms(cellsT.cpuPerRun), met(cellsT.cpuPerRun < 60*time.Millisecond))
		if okW {
			fmt.Fprintf(b, "; container mode (warm pool on): %.1f execs/s, %d errors, p99 %s, CPU per exec %s", ctrT.tput, ctrT.errs, ms(ctrT.p99), ms(ctrT.cpuPerRun))
		}
		b.WriteString(".\n")
	} else {
		fmt.Fprintf(b, "- %s at concurrency %d: cells not measured in this run.\n", p.name, p.conc)
	}
	cells1, ok1 := find(rows, p.name, scCells, 1)
	warm1, ok2 := find(rows, p.name, scWarm, 1)
	if ok1 && ok2 {
		fmt.Fprintf(b, "- warm %s at concurrency 1: cells median %s, p99 %s; container mode median %s, p99 %s (no slower: %s).\n",
			p.name, ms(cells1.median), ms(cells1.p99), ms(warm1.median), ms(warm1.p99), met(cells1.median <= warm1.median))
	} else {
		fmt.Fprintf(b, "- warm %s at concurrency 1: not measured in both modes in this run.\n", p.name)
	}
	if len(loads) > 1 {
		d := loads[1]
		cd, okC := find(rows, d.name, scCells, d.conc)
		wd, okW := find(rows, d.name, scWarm, d.conc)
		if okC && okW && wd.tput > 0 {
			fmt.Fprintf(b, "- %s at concurrency %d (data profile): cells %.2f execs/s, container mode %.2f: %.1fx (at least 5x: %s).\n",
				d.name, d.conc, cd.tput, wd.tput, cd.tput/wd.tput, met(cd.tput >= 5*wd.tput))
		} else {
			fmt.Fprintf(b, "- %s at concurrency %d: not measured in both modes in this run.\n", d.name, d.conc)
		}
	} else {
		b.WriteString("- pandas script at concurrency 4: not measured (run with -data).\n")
	}
	s, okS := find(rows, loadStrict, scStrict, p.conc)
	n, okN := find(rows, loadStrict, scStrictSel, p.conc)
	if okS && okN && s.tput > 0 {
		fmt.Fprintf(b, "- strict print(1) at concurrency %d: cells under gVisor %.1f execs/s (p99 %s, CPU per exec %s) against one runsc container per exec %.1f execs/s (p99 %s, CPU per exec %s): %.1fx the throughput.\n",
			p.conc, n.tput, ms(n.p99), ms(n.cpuPerRun), s.tput, ms(s.p99), ms(s.cpuPerRun), n.tput/s.tput)
	}
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// writeRatios compares the modes of each workload.
func writeRatios(b *strings.Builder, rows []row, loads []workload) {
	var lines []string
	for _, w := range loads {
		var parts []string
		floor, okF := find(rows, w.name, scFloor, 1)
		docker, okD := find(rows, w.name, scDocker, 1)
		cold, okO := find(rows, w.name, scCold, 1)
		warm, okW := find(rows, w.name, scWarm, 1)
		cells, okC := find(rows, w.name, scCells, 1)
		ratio := func(ok bool, name string, a, b time.Duration) {
			if ok && a > 0 && b > 0 {
				parts = append(parts, fmt.Sprintf("%s = %.2fx", name, float64(a)/float64(b)))
			}
		}
		ratio(okW && okC, "container warm / cells", warm.median, cells.median)
		ratio(okC && okF, "cells / host floor", cells.median, floor.median)
		ratio(okW && okF, "container warm / host floor", warm.median, floor.median)
		ratio(okD && okC, "docker run --rm / cells", docker.median, cells.median)
		ratio(okD && okW, "docker run --rm / container warm", docker.median, warm.median)
		ratio(okO && okW, "container cold / container warm", cold.median, warm.median)
		if len(parts) > 0 {
			lines = append(lines, fmt.Sprintf("- %s at concurrency 1 (median): %s\n", w.name, strings.Join(parts, "; ")))
		}
		ct, okC := find(rows, w.name, scCells, w.conc)
		wt, okW := find(rows, w.name, scWarm, w.conc)
		if okC && okW && wt.tput > 0 && ct.cpuPerRun > 0 {
			lines = append(lines, fmt.Sprintf("- %s at concurrency %d: throughput cells / container warm = %.1fx (%.1f against %.1f execs/s); CPU per exec container warm / cells = %.1fx (%s against %s)\n",
				w.name, w.conc, ct.tput/wt.tput, ct.tput, wt.tput, float64(wt.cpuPerRun)/float64(ct.cpuPerRun), ms(wt.cpuPerRun), ms(ct.cpuPerRun)))
		}
	}
	if len(lines) > 0 {
		b.WriteString("\nRatios:\n\n" + strings.Join(lines, ""))
	}
}

// writeStrict states what was found about cells under gVisor.
func writeStrict(b *strings.Builder, rows []row, probes *strictProbes) {
	if probes == nil {
		return
	}
	b.WriteString("\nStrict (gVisor, runsc): the shipped strict profile says isolation: cell with runtime: runsc, one gVisor sandbox per tenant serving many cells, " +
		"which the launcher builds itself (PID, network, IPC and UTS namespaces; SECURITY.md says why no mount namespace), because bubblewrap cannot under runsc where the probes below say so. " +
		"Each probe below ran in a container of each runtime as a cell host would (uid 65534, no capabilities, no-new-privileges, no network) " +
		"but with no seccomp filter and an unmasked /proc, so that only the runtime could refuse:\n\n| probe | runc | runsc |\n|---|---|---|\n")
	for i, pr := range cellProbes {
		fmt.Fprintf(b, "| %s | %s | %s |\n", pr.name, code(orOK(probes.results["runc"][i])), code(orOK(probes.results["runsc"][i])))
	}
	rc, ok1 := find(rows, loadStrict, scRunc, 1)
	rs, ok2 := find(rows, loadStrict, scRunsc, 1)
	if ok1 && ok2 && rc.median > 0 && rs.median > 0 {
		fmt.Fprintf(b, "\nStarting a container for print(1) (`docker run --rm`): runc median %s, CPU %s; runsc median %s, CPU %s: runsc takes %.1fx runc's time and %.1fx its CPU per start, "+
			"which a cell host under runsc would pay once per host instead of once per exec.\n",
			ms(rc.median), ms(rc.cpuPerRun), ms(rs.median), ms(rs.cpuPerRun), float64(rs.median)/float64(rc.median), float64(rs.cpuPerRun)/float64(max(rc.cpuPerRun, 1)))
	}
}

func code(s string) string { return "`" + strings.ReplaceAll(s, "`", "'") + "`" }

// writeErrors lists the errors of every line that had some, and what
// sandboxd logged as warnings and errors meanwhile.
func writeErrors(b *strings.Builder, rows []row) {
	first := true
	for _, r := range rows {
		if len(r.errors) == 0 && len(r.logged) == 0 {
			continue
		}
		if first {
			b.WriteString("\nErrors (count x error, the commonest five of each line) and the warnings and errors sandboxd logged during the line:\n\n")
			first = false
		}
		fmt.Fprintf(b, "- %s, %s, concurrency %d:\n", r.load, r.scenario, r.conc)
		for _, e := range topErrors(r.errors, 5) {
			fmt.Fprintf(b, "  - %s\n", code(strings.ReplaceAll(e, "\n", " ")))
		}
		for _, e := range topErrors(r.logged, 5) {
			fmt.Fprintf(b, "  - logged: %s\n", code(strings.ReplaceAll(e, "\n", " ")))
		}
	}
}

// writePhases is where sandboxd's time went, from Server-Timing.
func writePhases(b *strings.Builder, rows []row) {
	b.WriteString("\nWhere sandboxd's time goes: the median of each phase of the answers' Server-Timing header, in ms " +
		"(queue: waiting for a run slot; sandbox: taking a warm sandbox or cell, or creating and starting a cold one, waiting for a free cell host included; " +
		"exchange: handing the job over and reading the report through the engine's attach stream; run: the code, as the launcher measured it; " +
		"capture and audit: the forensic records written before the answer).\n\n")
	names := []string{"queue", "sandbox", "exchange", "run", "capture", "audit", "total"}
	b.WriteString("| workload | scenario | concurrency | warm | " + strings.Join(names, " | ") + " |\n|---|---|---|---|" + strings.Repeat("---|", len(names)) + "\n")
	for _, r := range rows {
		if len(r.phases) == 0 {
			continue
		}
		fmt.Fprintf(b, "| %s | %s | %d | %d of %d |", r.load, r.scenario, r.conc, r.warm, r.ok+r.errs)
		for _, n := range names {
			fmt.Fprintf(b, " %.2f |", r.phases[n])
		}
		b.WriteString("\n")
	}
}

// writeBusy names the lines that began on a machine that was not quiet.
func writeBusy(b *strings.Builder, rows []row) {
	var busy []string
	for _, r := range rows {
		if r.note == "" && r.before >= quiet {
			busy = append(busy, fmt.Sprintf("%s, %s, concurrency %d (%.0f%%)", r.load, r.scenario, r.conc, 100*r.before))
		}
	}
	if len(busy) > 0 {
		fmt.Fprintf(b, "\nThese lines began with the machine %.0f%% busy or more (other work on it), so their figures are worse than a quiet machine's: %s.\n",
			100*quiet, strings.Join(busy, "; "))
	}
}

func find(rows []row, load, scenario string, conc int) (row, bool) {
	for _, r := range rows {
		if r.load == load && r.scenario == scenario && r.conc == conc {
			return r, true
		}
	}
	return row{}, false
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
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
