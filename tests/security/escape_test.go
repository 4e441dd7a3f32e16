package security

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/profiles"
)

// An attack is one Python program and what must come of it.
//
// The program prints marker lines: "DENIED <tag> <ERRNO>" when an attempt
// failed and "ALLOWED <tag> ..." when it went through; other lines are
// "KEY value..." facts. check asserts on them and on the response; host
// looks at the host after the response (files, processes the attack tried
// to leave behind).
//
// Placeholders in code: {{NONCE}} (unique per run, in every name the attack
// tries to create outside the sandbox), {{NONCENUM}} (the same as digits),
// {{PORT}} (sandboxd's port), {{HOSTADDRS}}, {{HOSTPORT}}, {{ABSTRACT}}
// (Python literals: the host's own addresses, a port the suite listens on
// on every host address, the host's abstract unix socket names),
// {{HOSTPIDS}} (pids of the engine's processes on the host), {{MAXFILE}},
// {{MAXTOTAL}}, {{MAXCOUNT}} (the profile's caps on returned files).
type attack struct {
	name   string
	code   string
	limits map[string]any
	env    map[string]string
	// status is the exact status the run must end with.
	status string
	// otherStatus lists further statuses that are equally right for this
	// attack; only where the kernel's own behaviour is racy (see the case).
	otherStatus []string
	check       func(t *testing.T, x *run)
	host        func(t *testing.T, x *run)
	// solo runs the attack alone, after the parallel ones: it needs a whole
	// CPU for its time bound.
	solo bool
	// hostCPU samples the CPU time of the run's container from the engine
	// while it runs (with solo: the only busy container of the server).
	hostCPU bool
	// strict replaces parts of the expectation under the gVisor profile.
	strict *override
}

// override is the part of an attack's expectation that differs under the
// strict (gVisor) profile.
type override struct {
	status      string                     // "" keeps the attack's status (and otherStatus)
	otherStatus []string                   // with status: further right statuses
	check       func(t *testing.T, x *run) // nil keeps the attack's check
	why         string
}

// run is one attack's exchange.
type run struct {
	profile  string
	prof     *profiles.Exec
	nonce    string
	nonceNum string
	req      e2e.ExecRequest
	res      *e2e.Result
	r        *e2e.ExecResponse
	lines    []string
	// With attack.hostCPU: the highest CPU rate (in CPUs) the engine saw
	// for a container of the server over hostWindow, and the CFS periods
	// it was throttled in.
	hostRate      float64
	hostWindow    time.Duration
	hostThrottled uint64
}

// strictProfile is the name of the gVisor exec profile.
const strictProfile = "strict"

var runCounter atomic.Int64

// suiteNum is the digit form of suiteNonce's randomness.
var suiteNum = func() string {
	n, _ := strconv.ParseUint(suiteNonce[len("sbxesc"):], 16, 64)
	return fmt.Sprintf("%015d", n%1e15)
}()

// hostListener accepts TCP connections on every host address; no sandbox
// may reach it.
type hostListener struct {
	port     int
	accepted atomic.Int64
	ln       net.Listener
	abstract string
	aln      net.Listener
}

func startHostListener(t *testing.T) *hostListener {
	t.Helper()
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatalf("host listener: %v", err)
	}
	h := &hostListener{port: ln.Addr().(*net.TCPAddr).Port, ln: ln, abstract: suiteNonce + "-host-abstract"}
	go h.serve(ln)
	if aln, err := net.Listen("unix", "@"+h.abstract); err == nil {
		h.aln = aln
		go h.serve(aln)
	} else {
		t.Logf("no abstract unix listener on the host: %v", err)
		h.abstract = ""
	}
	t.Cleanup(func() {
		ln.Close()
		if h.aln != nil {
			h.aln.Close()
		}
	})
	return h
}

func (h *hostListener) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		h.accepted.Add(1)
		c.Close()
	}
}

func pyList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		b, _ := json.Marshal(s)
		q[i] = string(b)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// TestEscapes runs the attack table under the default profile and, when the
// strict (gVisor) profile exists and /readyz says its runtime works, under
// strict as well.
func TestEscapes(t *testing.T) {
	start := time.Now()
	hl := startHostListener(t)
	profs := []string{"default"}
	if ok, why := strictUsable(); ok {
		profs = append(profs, strictProfile)
		t.Logf("running the table under default and %s: %s", strictProfile, why)
	} else {
		t.Logf("running the table under default only: %s", why)
	}
	attacks := allAttacks()
	names := map[string]bool{}
	for _, a := range attacks {
		if names[a.name] {
			t.Fatalf("two attacks are named %q", a.name)
		}
		names[a.name] = true
	}
	t.Logf("%d attacks", len(attacks))
	subst := hostSubst(hl)
	for _, prof := range profs {
		t.Run(prof, func(t *testing.T) {
			pstart := time.Now()
			t.Run("parallel", func(t *testing.T) {
				for _, a := range attacks {
					if a.solo {
						continue
					}
					t.Run(a.name, func(t *testing.T) {
						t.Parallel()
						runAttack(t, prof, a, subst)
					})
				}
			})
			t.Run("solo", func(t *testing.T) {
				for _, a := range attacks {
					if a.solo {
						t.Run(a.name, func(t *testing.T) { runAttack(t, prof, a, subst) })
					}
				}
			})
			t.Run("after", func(t *testing.T) { afterTable(t, prof, hl) })
			t.Logf("profile %s: %d attacks in %v", prof, len(attacks), time.Since(pstart).Round(100*time.Millisecond))
		})
	}
	t.Logf("escape suite: %d attacks x %d profile(s) in %v", len(attacks), len(profs), time.Since(start).Round(100*time.Millisecond))
}

// hostSubst is the table's placeholders for the host's side: sandboxd's
// port, the host's addresses, its listener and abstract sockets, and the
// pids of its daemons.
func hostSubst(hl *hostListener) map[string]string {
	return map[string]string{
		"{{PORT}}":      strconv.Itoa(srv.Port),
		"{{HOSTADDRS}}": pyList(usableHostAddrs()),
		"{{HOSTPORT}}":  strconv.Itoa(hl.port),
		"{{ABSTRACT}}":  pyList(abstractTargets(hl)),
		"{{HOSTPIDS}}":  "[" + strings.Join(hostDaemonPids(), ", ") + "]",
	}
}

// usableHostAddrs are the host's addresses a sandbox could try to reach:
// the Docker bridge gateway and every non-loopback address, IPv6 link-local
// ones left out (they need a zone).
func usableHostAddrs() []string {
	out := []string{"172.17.0.1"}
	for _, a := range e2e.HostAddrs() {
		ip := net.ParseIP(a)
		if ip == nil || ip.IsLinkLocalUnicast() || slices.Contains(out, a) {
			continue
		}
		out = append(out, a)
	}
	return out
}

// strictUsable reports whether the strict profile exists and /readyz says
// the gVisor runtime is usable, and why (not).
func strictUsable() (bool, string) {
	p := filepath.Join(moduleRoot, "profiles", "exec", strictProfile+".yaml")
	if _, err := os.Stat(p); err != nil {
		return false, fmt.Sprintf("%s does not exist", p)
	}
	res, ra, err := api.Readiness(context.Background())
	if err != nil && (res == nil || res.Status == 0) {
		return false, fmt.Sprintf("GET /readyz: %v", err)
	}
	if err != nil {
		return false, fmt.Sprintf("/readyz body: %v", err)
	}
	var seen []string
	for _, c := range ra.Checks {
		n := strings.ToLower(c.Name)
		if !strings.Contains(n, "runsc") && !strings.Contains(n, "gvisor") && !strings.Contains(n, strictProfile) {
			continue
		}
		if !c.OK {
			return false, fmt.Sprintf("%s exists but /readyz check %q fails: %s", p, c.Name, c.Error)
		}
		seen = append(seen, c.Name)
	}
	if len(seen) == 0 {
		return false, fmt.Sprintf("%s exists but /readyz reports no runsc runtime check (checks: %s)", p, readyNames(ra))
	}
	return true, fmt.Sprintf("/readyz checks %v are ok", seen)
}

func readyNames(ra *e2e.Readiness) string {
	var out []string
	for _, c := range ra.Checks {
		out = append(out, fmt.Sprintf("%s=%v", c.Name, c.OK))
	}
	return strings.Join(out, ", ")
}

func runAttack(t *testing.T, prof string, a attack, subst map[string]string) {
	x, n, code := newRun(t, prof, pyPrelude+a.code, subst)
	x.req = e2e.ExecRequest{Language: "python", Code: code, Limits: a.limits, Env: a.env}
	if prof != "default" {
		x.req.Profile = prof
	}
	reqID := fmt.Sprintf("escape-%d-%s", n, strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, a.name))
	if len(reqID) > 64 {
		reqID = reqID[:64]
	}
	defer logOnFailure(t, reqID)
	var cw *cpuWatch
	if a.hostCPU {
		cw = startCPUWatch()
	}
	res, err := execs.Exec(context.Background(), x.req, reqID)
	if cw != nil {
		x.hostRate, x.hostWindow, x.hostThrottled = cw.stop(time.Second)
	}
	if err != nil {
		t.Fatalf("POST /exec: %v", err)
	}
	x.res = res
	if res.Status != http.StatusOK {
		t.Fatalf("POST /exec answered %d, want 200 for a run that started: %s", res.Status, e2e.Clip(res.Body, 2000))
	}
	status, check, others := a.status, a.check, a.otherStatus
	if prof == strictProfile && a.strict != nil {
		if a.strict.status != "" {
			status, others = a.strict.status, a.strict.otherStatus
		}
		if a.strict.check != nil {
			check = a.strict.check
		}
	}
	x.checkAnswer(t, res.Body, status, others)
	seenExecIDs.Add(x.r.ID)
	if check != nil {
		check(t, x)
	}
	if a.host != nil {
		a.host(t, x)
	}
	// Nothing the attack started may outlive its run on the host.
	x.checkHostClean(t, "of this run are still alive on the host after its response", x.r.Stdout)
}

// newRun numbers a run of the table under prof and returns it, its number
// and src (the prelude and the attack's code) with its placeholders (the
// run's nonces, the profile's caps, subst) filled in.
func newRun(t *testing.T, prof, src string, subst map[string]string) (*run, int64, string) {
	t.Helper()
	n := runCounter.Add(1)
	x := &run{
		profile:  prof,
		prof:     profSet.Exec[prof],
		nonce:    fmt.Sprintf("%s-%d", suiteNonce, n),
		nonceNum: fmt.Sprintf("%s%04d", suiteNum, n),
	}
	if x.prof == nil {
		t.Fatalf("profile %q is not in %s/profiles", prof, moduleRoot)
	}
	repl := []string{"{{NONCE}}", x.nonce, "{{NONCENUM}}", x.nonceNum,
		"{{MAXFILE}}", strconv.FormatInt(x.prof.Files.MaxOutputFileBytes, 10),
		"{{MAXTOTAL}}", strconv.FormatInt(x.prof.Files.MaxOutputTotalBytes, 10),
		"{{MAXCOUNT}}", strconv.Itoa(x.prof.Files.MaxOutputCount)}
	for k, v := range subst {
		repl = append(repl, k, v)
	}
	return x, n, strings.NewReplacer(repl...).Replace(src)
}

// logOnFailure, deferred, logs sandboxd's lines about reqID when t failed.
func logOnFailure(t *testing.T, reqID string) {
	if t.Failed() {
		// The output reaches the log through a pipe: give the last lines a
		// moment.
		time.Sleep(200 * time.Millisecond)
		if l := logLines(reqID); l != "" {
			t.Logf("sandboxd log lines of %s:\n%s", reqID, l)
		}
	}
}

// checkAnswer decodes the 200 body of x's run into x and checks what holds
// for every run: it ended with status or one of others, the file names it
// returns are relative and clean, and no secret of sandboxd's environment
// is in it in any form.
func (x *run) checkAnswer(t *testing.T, body []byte, status string, others []string) {
	t.Helper()
	var r e2e.ExecResponse
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("200 body is not a JSON exec response: %v\n%s", err, e2e.Clip(body, 2000))
	}
	x.r = &r
	x.lines = strings.Split(r.Stdout, "\n")
	if r.Status != status && !slices.Contains(others, r.Status) {
		want := strconv.Quote(status)
		for _, o := range others {
			want += " or " + strconv.Quote(o)
		}
		t.Errorf("status %q, want %s\n%s", r.Status, want, x.describe())
	}
	for _, f := range r.Files {
		if !safeName(f.Path) {
			t.Errorf("returned file name %q is not a clean relative path without control characters", f.Path)
		}
	}
	for _, s := range r.SkippedFiles {
		if !e2e.CleanRelPath(s.Path) {
			t.Errorf("skipped file name %q is absolute or has an empty, '.' or '..' element", s.Path)
		}
		if strings.TrimSpace(s.Reason) == "" {
			t.Errorf("skipped file %q has no reason", s.Path)
		}
	}
	for k, v := range hostSecrets {
		if bytes.Contains(body, []byte(v)) || strings.Contains(r.Decoded(), v) {
			t.Errorf("the response carries the value of %s from sandboxd's environment", k)
		}
	}
}

// checkHostClean fails t when a process (described by alive) or a file
// named after the run is left on the host, and logs the run's stdout when
// t failed.
func (x *run) checkHostClean(t *testing.T, alive, stdout string) {
	t.Helper()
	if left := waitHostProcs(2*time.Second, x.nonce, x.nonceNum); len(left) > 0 {
		t.Errorf("processes %s: %s", alive, strings.Join(left, "; "))
	}
	if left := e2e.HostFilesMatching(x.nonce); len(left) > 0 {
		t.Errorf("files named after this run exist on the host: %s", strings.Join(left, ", "))
	}
	if t.Failed() {
		t.Logf("stdout:\n%s", e2e.Clip([]byte(stdout), 6000))
	}
}

// waitHostProcs polls until no host process's command line holds any of
// needles, and returns those left at the deadline.
func waitHostProcs(timeout time.Duration, needles ...string) []string {
	deadline := time.Now().Add(timeout)
	for {
		var left []string
		for _, n := range needles {
			left = append(left, e2e.HostProcsMatching(n)...)
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// safeName: e2e.CleanRelPath, and no control characters or backslashes either.
func safeName(p string) bool {
	if !e2e.CleanRelPath(p) {
		return false
	}
	for _, c := range p {
		if c < 0x20 || c == 0x7f || c == '\\' {
			return false
		}
	}
	return true
}

func (x *run) describe() string {
	r := x.r
	s := fmt.Sprintf("exec %s (%s): exit_code %d signal %q message %q duration_ms %d usage %+v\nstdout (%d bytes, truncated %v): %s\nstderr (%d bytes, truncated %v): %s",
		r.ID, x.profile, r.ExitCode, r.Signal, r.Message, r.DurationMS, r.Usage,
		len(r.Stdout), r.StdoutTruncated, e2e.Clip([]byte(r.Stdout), 3000),
		len(r.Stderr), r.StderrTruncated, e2e.Clip([]byte(r.Stderr), 2000))
	if len(r.Files) > 0 || len(r.SkippedFiles) > 0 {
		fs := firstTen(r.Files, "files", func(f e2e.OutFile) string { return fmt.Sprintf("%q(%d)", f.Path, f.Size) })
		ss := firstTen(r.SkippedFiles, "skipped", func(f e2e.SkippedFile) string { return fmt.Sprintf("%q: %s", f.Path, f.Reason) })
		s += fmt.Sprintf("\nfiles: %s\nskipped: %s", strings.Join(fs, ", "), strings.Join(ss, "; "))
	}
	return s
}

// firstTen describes the first ten of list with describe, and says how
// many there are (in what) when there are more.
func firstTen[T any](list []T, what string, describe func(T) string) []string {
	var out []string
	for i, v := range list {
		if i == 10 {
			return append(out, fmt.Sprintf("… %d %s", len(list), what))
		}
		out = append(out, describe(v))
	}
	return out
}

// ---------------------------------------------------------------------------
// Marker helpers.

// fact returns the value of the first line "KEY value" (ok false if none).
func (x *run) fact(key string) (string, bool) {
	for _, l := range x.lines {
		if k, v, _ := strings.Cut(l, " "); k == key {
			return v, true
		}
	}
	return "", false
}

// marker returns the first "DENIED tag ..." or "ALLOWED tag ..." line for
// tag as (verdict, rest).
func (x *run) marker(tag string) (string, string, bool) {
	for _, l := range x.lines {
		f := strings.SplitN(l, " ", 3)
		if len(f) >= 2 && (f[0] == "DENIED" || f[0] == "ALLOWED") && f[1] == tag {
			rest := ""
			if len(f) == 3 {
				rest = f[2]
			}
			return f[0], rest, true
		}
	}
	return "", "", false
}

// tags lists the tags of the marker lines with the given verdict.
func (x *run) tags(verdict string) []string {
	var out []string
	for _, l := range x.lines {
		f := strings.SplitN(l, " ", 3)
		if len(f) >= 2 && f[0] == verdict {
			out = append(out, f[1])
		}
	}
	return out
}

// wantDenied requires "DENIED tag E" with E one of errnos (any errno when
// none are given).
func (x *run) wantDenied(t *testing.T, tag string, errnos ...string) {
	t.Helper()
	v, rest, ok := x.marker(tag)
	switch {
	case !ok:
		t.Errorf("%s: no DENIED/ALLOWED line; the attempt did not run (stderr %q)", tag, e2e.Clip([]byte(x.r.Stderr), 1500))
	case v != "DENIED":
		t.Errorf("HOLE? %s was ALLOWED (%s); want it denied with %v", tag, rest, errnos)
	case len(errnos) > 0 && !slices.Contains(errnos, strings.Fields(rest + " ?")[0]):
		t.Errorf("%s denied with %q, want %v", tag, rest, errnos)
	}
}

// wantAllowed requires "ALLOWED tag ..." (a control: the thing itself works)
// and returns the rest of the line.
func (x *run) wantAllowed(t *testing.T, tag string) string {
	t.Helper()
	v, rest, ok := x.marker(tag)
	if !ok || v != "ALLOWED" {
		t.Errorf("%s: want ALLOWED (a control that must work), got %q %q (stderr %q)", tag, v, rest, e2e.Clip([]byte(x.r.Stderr), 1500))
	}
	return rest
}

// noAllowed requires that nothing but the given control tags was ALLOWED.
func (x *run) noAllowed(t *testing.T, controls ...string) {
	t.Helper()
	for _, tag := range x.tags("ALLOWED") {
		if !slices.Contains(controls, tag) {
			_, rest, _ := x.marker(tag)
			t.Errorf("HOLE? %s was ALLOWED: %s", tag, rest)
		}
	}
}

// allDenied requires every tag denied with one of errnos, and nothing but
// controls allowed.
func (x *run) allDenied(t *testing.T, tags []string, errnos []string, controls ...string) {
	t.Helper()
	for _, tag := range tags {
		x.wantDenied(t, tag, errnos...)
	}
	x.noAllowed(t, controls...)
}

// wantFact requires the line "KEY want".
func (x *run) wantFact(t *testing.T, key, want string) {
	t.Helper()
	if got, ok := x.fact(key); !ok || got != want {
		t.Errorf("%s = %q (present %v), want %q", key, got, ok, want)
	}
}

// factInt is the number at the start of the line "KEY value".
func (x *run) factInt(t *testing.T, key string) int64 {
	t.Helper()
	return factNumber(t, x, key, func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) })
}

// factFloat is the number at the start of the line "KEY value".
func (x *run) factFloat(t *testing.T, key string) float64 {
	t.Helper()
	return factNumber(t, x, key, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) })
}

// factNumber parses the first word of the line "KEY value" with parse; a
// missing line or another word is an error of the test (and 0).
func factNumber[T any](t *testing.T, x *run, key string, parse func(string) (T, error)) T {
	t.Helper()
	var n T
	v, ok := x.fact(key)
	if !ok {
		t.Errorf("no %s line in stdout", key)
		return n
	}
	n, err := parse(strings.Fields(v + " x")[0])
	if err != nil {
		t.Errorf("%s = %q, not a number", key, v)
	}
	return n
}

// ---------------------------------------------------------------------------
// After the table.

func afterTable(t *testing.T, prof string, hl *hostListener) {
	// The service is healthy and runs code in this profile.
	getOK(t, "/healthz")
	resp, err := api.Get(context.Background(), "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	if resp.Status != http.StatusOK && prof == strictProfile {
		t.Errorf("GET /readyz %d after the table", resp.Status)
	} else if resp.Status != http.StatusOK {
		t.Logf("GET /readyz %d after the table (it was %s at start-up)", resp.Status, e2e.Clip(readyBody, 300))
	}
	req := e2e.ExecRequest{Language: "python", Code: "print(1)"}
	if prof != "default" {
		req.Profile = prof
	}
	res, err := execs.Exec(context.Background(), req, "escape-after-"+prof)
	if err != nil {
		t.Fatalf("print(1) after the table: %v", err)
	}
	var r e2e.ExecResponse
	if res.Status != http.StatusOK || json.Unmarshal(res.Body, &r) != nil || r.Status != "ok" || r.Stdout != "1\n" {
		t.Errorf("print(1) after the table: %d %s", res.Status, e2e.Clip(res.Body, 1000))
	}
	seenExecIDs.Add(r.ID)

	// Nothing of any run is left on the host.
	if left := waitHostProcs(2*time.Second, suiteNonce, "300."+suiteNum); len(left) > 0 {
		t.Errorf("processes started by the attacks are alive on the host: %s", strings.Join(left, "; "))
	}
	if left := e2e.HostFilesMatching(suiteNonce); len(left) > 0 {
		t.Errorf("files named by the attacks exist on the host: %s", strings.Join(left, ", "))
	}
	if n := hl.accepted.Load(); n != 0 {
		t.Errorf("HOLE: the host listener (TCP port %d on every host address, abstract socket @%s) accepted %d connection(s) during the table", hl.port, hl.abstract, n)
	}
	// Every container of a finished run is gone (idle warm-pool boxes that
	// never ran code may remain until shutdown).
	ids := seenExecIDs.Snapshot()
	if left := e2e.WaitGone(e2e.RemovalTimeout+5*time.Second, ourContainers, func(c container.Summary) bool { return ids[c.Labels["sandboxd.exec-id"]] }); len(left) > 0 {
		t.Errorf("%d container(s) of finished runs remain: %s", len(left), strings.Join(left, ", "))
	}
}

func allAttacks() []attack {
	var all []attack
	for _, set := range [][]attack{syscallAttacks(), netAttacks(), fsAttacks(), limitAttacks(), outputAttacks(), secretAttacks(), kernelAttacks()} {
		all = append(all, set...)
	}
	return all
}

// hostDaemonPids lists the pids of the engine's processes on the host.
func hostDaemonPids() []string {
	var out []string
	for _, pid := range e2e.HostPids() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			continue
		}
		switch strings.TrimSpace(string(b)) {
		case "dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2", "systemd", "sshd", "sandboxd":
			out = append(out, strconv.Itoa(pid))
		}
	}
	if len(out) > 20 {
		out = out[:20]
	}
	return out
}

func abstractTargets(hl *hostListener) []string {
	out := e2e.HostAbstractSockets()
	if hl.abstract != "" && !slices.Contains(out, hl.abstract) {
		out = append(out, hl.abstract)
	}
	return out
}

// wallAfterStart is the request's wall time less the phases before the code
// ran that its Server-Timing header names (queue: a run slot; sandbox: a
// warm one, or a cold one created and started, which a loaded engine may
// take seconds for): how long sandboxd took from the run to the answer.
// Without the header (a session call) it is the whole wall time.
func (x *run) wallAfterStart() time.Duration {
	w := x.res.Wall
	for _, m := range strings.Split(x.res.Header.Get("Server-Timing"), ",") {
		fields := strings.Split(strings.TrimSpace(m), ";")
		if fields[0] != "queue" && fields[0] != "sandbox" {
			continue
		}
		for _, f := range fields[1:] {
			if v, ok := strings.CutPrefix(f, "dur="); ok {
				if ms, err := strconv.ParseFloat(v, 64); err == nil {
					w -= time.Duration(ms * float64(time.Millisecond))
				}
			}
		}
	}
	return w
}
