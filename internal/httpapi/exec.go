package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/control/admit"
	"github.com/sandboxd/sandboxd/internal/control/budget"
	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/runner"
)

var envNamePattern = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)

// Limits on the env field.
const (
	maxEnvVars     = 64
	maxEnvValueLen = 32 << 10
)

// toolCall is what every POST /exec and /fetch starts with: the key, the
// tenant's request rate, X-Session-Id, Idempotency-Key and the body.
type toolCall struct {
	key     *auth.Key
	session string
	idemKey string
}

// startCall takes one request of kind from the tenant's rate, checks the
// headers and decodes the body into req.
func (s *Server) startCall(c echo.Context, kind string, req any) (*toolCall, error) {
	tc := &toolCall{key: requestKey(c)}
	if r := s.ctl.limits.AllowRequest(tc.key.Tenant, kind); r != nil {
		return nil, s.budgetError(r)
	}
	var err error
	if tc.session, err = sessionID(c); err != nil {
		return nil, err
	}
	if tc.idemKey, err = idempotencyKey(c); err != nil {
		return nil, err
	}
	if err := decodeJSON(c, s.cfg.MaxBodyBytes, req); err != nil {
		return nil, err
	}
	return tc, nil
}

func (s *Server) exec(c echo.Context) error {
	var req api.ExecRequest
	tc, err := s.startCall(c, budget.KindExec, &req)
	if err != nil {
		return err
	}
	key, session, idemKey := tc.key, tc.session, tc.idemKey
	spec, err := s.buildSpec(&req)
	if err != nil {
		return err
	}
	refs, err := s.attachDatasets(spec, req.Datasets, key)
	if err != nil {
		return err
	}
	c.Set(ctxProfile, spec.Profile.Name)
	j := &execJob{key: key, session: session, idemKey: idemKey, async: req.Async, spec: spec, id: spec.ID,
		origTimeout: spec.Limits.TimeoutMS, log: requestLogger(c, s.log).With("profile", spec.Profile.Name, "exec_id", spec.ID)}
	if session != "" {
		j.log = j.log.With("session", session)
	}
	j.call, j.reqHash = fingerprints(&req, session)
	j.meta, j.started = metaOf(c), time.Now()
	j.meta.session = session
	j.datasets = refs
	if wantsStream(c) {
		switch {
		case req.Async:
			return validation("async", "async and Accept: text/event-stream exclude each other: stream the output, or run async and poll GET /exec/{id}")
		case idemKey != "":
			return validation(headerIdempotencyKey, "an Idempotency-Key cannot be combined with Accept: text/event-stream (a stream cannot be replayed); send the key with a JSON request")
		}
		st := newExecStream(c, spec.Redact, spec.Limits.OutputBytes)
		spec.OnOutput = st.feed
		return s.finishStream(c, st, s.admitRunAudit(c, j))
	}
	if idemKey != "" {
		return s.execIdempotent(c, j)
	}
	return s.send(c, s.admitRunAudit(c, j))
}

// admitRunAudit admits and runs the job and writes its audit record before
// the answer goes out (an async exec's record is written when it ends).
func (s *Server) admitRunAudit(c echo.Context, j *execJob) *answer {
	a := s.admitAndRun(c, j)
	if a.status == http.StatusAccepted {
		return a
	}
	a = s.auditExec(j, a)
	if a.resp != nil {
		j.timing.total = time.Since(j.started)
		if a.header == nil {
			a.header = map[string]string{}
		}
		a.header["Server-Timing"] = j.timing.header()
	}
	return a
}

// admitAndRun applies the kill switch, the loop guard and the budgets, then
// runs the job (or, for an async one, starts it and answers 202).
func (s *Server) admitAndRun(c echo.Context, j *execJob) *answer {
	if st := s.ctl.frozen.Load(); st.Frozen {
		return errAnswer(s.refusal(&api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeFrozen,
			Message: fmt.Sprintf("sandboxd is frozen by an operator (since %s, by %s%s): no new code runs until it is unfrozen", st.Since.Format(time.RFC3339), st.By, reasonSuffix(st.Reason))}))
	}
	tenant := j.key.Tenant
	lim := s.ctl.limits.Limits(tenant)
	if j.session != "" {
		if refuse, n := s.ctl.guard.Check(tenant+"\x00"+j.session, j.call, lim.LoopRepeats); refuse {
			return errAnswer(s.refusal(&api.Error{Status: http.StatusConflict, Code: api.CodeLoopDetected,
				Message: fmt.Sprintf("session %s sent this same code with the same inputs %d times in a row and got the same result each time; running it again will not change the outcome. Change the code or its inputs, or take a different approach", j.session, n)}))
		}
	}
	if j.async && s.ctl.cfg.Queue > 0 {
		if running, waiting, slots := s.cfg.Gate.Stats(); running >= slots && waiting >= s.ctl.cfg.Queue {
			return errAnswer(s.refusal(busyError(running, waiting, slots)))
		}
	}
	ticket, r, err := s.ctl.limits.AdmitExec(c.Request().Context(), tenant, j.session, j.spec.Limits.TimeoutMS, j.spec.Limits.CPUs)
	if err != nil {
		j.log.Error("budget check failed", "err", err)
		return errAnswer(&api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the usage store failed; retry later"})
	}
	if r != nil {
		return errAnswer(s.budgetError(r))
	}
	j.ticket = ticket
	if ticket.TimeoutMS < j.spec.Limits.TimeoutMS {
		j.spec.Limits.TimeoutMS = ticket.TimeoutMS
		j.spec.Job.TimeoutMS = ticket.TimeoutMS
	}
	live := s.startLive(c, j)
	if !j.async {
		a := s.run(live, j)
		s.endLive(live)
		return a
	}
	now := time.Now().UTC()
	rec := &store.ExecRecord{ID: j.id, Tenant: tenant, KeyID: j.key.ID, Session: j.session, State: store.ExecQueued,
		Owner: s.ctl.cfg.Owner, CreatedAt: now, ExpiresAt: now.Add(s.ctl.cfg.AsyncTTL)}
	rec.Body, _ = json.Marshal(&api.ExecState{ID: j.id, Status: stateQueued, CreatedAt: now})
	if err := s.ctl.store.PutExec(context.WithoutCancel(c.Request().Context()), rec); err != nil {
		j.log.Error("storing the async exec failed", "err", err)
		ticket.Cancel()
		s.endLive(live)
		return errAnswer(&api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the store failed to record the exec; retry later"})
	}
	go func() {
		a := s.auditExec(j, s.run(live, j))
		s.saveAsync(j, rec, a)
		s.endLive(live) // after the result is stored: shutdown waits for it
	}()
	return acceptedAnswer(j.id, now)
}

// run waits for a run slot and runs the job; every outcome is an answer.
func (s *Server) run(live *liveExec, j *execJob) *answer {
	spec, m := j.spec, s.ctl.metrics
	profile := spec.Profile.Name
	queued := time.Now()
	release, err := s.cfg.Gate.Acquire(live.ctx)
	if err != nil {
		j.ticket.Cancel()
		cause := context.Cause(live.ctx)
		switch {
		case errors.Is(err, admit.ErrBusy):
			m.Execs.WithLabelValues(profile, statusFailed).Inc()
			running, waiting, slots := s.cfg.Gate.Stats()
			return errAnswer(s.refusal(busyError(running, waiting, slots)))
		case live.ctx.Err() != nil && (isStopCause(cause) || errors.Is(cause, errShutdown)):
			// Cancelled, frozen or shut down while queued: nothing ran.
			m.Execs.WithLabelValues(profile, runner.StatusKilled).Inc()
			j.log.Info("exec stopped before it started", "cause", cause.Error())
			res := &runner.Result{Status: runner.StatusKilled, ExitCode: -1, Message: "the exec was stopped before it started: " + cause.Error()}
			return s.resultAnswer(j, res)
		}
		m.Execs.WithLabelValues(profile, statusFailed).Inc()
		return errAnswer(&api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the request ended while waiting for a run slot"})
	}
	defer release()
	j.timing.queue = time.Since(queued)
	m.QueueSeconds.WithLabelValues(profile).Observe(j.timing.queue.Seconds())
	live.markStarted()

	begin := time.Now()
	res, err := s.cfg.Engine.Run(live.ctx, spec) // may assign spec.ID (a pooled sandbox's)
	wall := time.Since(begin)
	log := j.log
	if spec.ID != j.id {
		log = log.With("sandbox_id", spec.ID)
	}
	if err != nil {
		log.Error("run failed", "err", err)
		m.Execs.WithLabelValues(profile, statusFailed).Inc()
		switch {
		case errors.Is(err, runner.ErrImageMissing), errors.Is(err, runner.ErrRuntimeMissing), errors.Is(err, runner.ErrEgressUnavailable):
			j.ticket.Cancel()
			return errAnswer(&api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: err.Error()})
		case errors.Is(err, runner.ErrEngine):
			j.ticket.Cancel()
			return errAnswer(&api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the container engine failed to run the sandbox; retry later"})
		}
		// The code may have run: charge the time and keep the answer, so
		// that a retry with the same Idempotency-Key does not run it again.
		j.ticket.Finish(live.ctx, int64(float64(wall.Milliseconds())*spec.Limits.CPUs), wall.Milliseconds())
		a := errAnswer(&api.Error{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: "internal error; the request id in X-Request-Id helps the operator find it in the log"})
		a.keep = true
		return a
	}
	j.timing.pooled, j.timing.acquire, j.timing.run = res.Pooled, res.Acquire, res.Duration
	j.timing.exchange = max(0, wall-res.Acquire-res.Duration)
	cpu := (res.UserCPU + res.SysCPU).Milliseconds()
	if cpu == 0 && (res.Status == runner.StatusTimeout || res.Status == runner.StatusKilled) {
		// Stopped from outside, the launcher reported no usage: charge
		// what the code could have used in its wall time.
		cpu = int64(float64(res.Duration.Milliseconds()) * spec.Limits.CPUs)
	}
	j.ticket.Finish(live.ctx, cpu, res.Duration.Milliseconds())
	m.Execs.WithLabelValues(profile, res.Status).Inc()
	m.RunSeconds.WithLabelValues(profile).Observe(res.Duration.Seconds())
	m.StartSeconds.WithLabelValues(profile).Observe(max(0, (wall - res.Duration).Seconds()))
	if j.session != "" {
		s.ctl.guard.Record(j.key.Tenant+"\x00"+j.session, j.call, outcome(res))
	}
	if res.Status == runner.StatusTimeout && j.ticket.LoweredBy != "" {
		res.Message += fmt.Sprintf(" (the limit was lowered from %d ms to what the %s budget had left)", j.origTimeout, j.ticket.LoweredBy)
	}
	log.Info("run finished", "status", res.Status, "exit_code", res.ExitCode, "duration_ms", res.Duration.Milliseconds(),
		"stdout_bytes", len(res.Stdout), "stderr_bytes", len(res.Stderr), "files", len(res.Files), "image", res.ImageID)
	return s.resultAnswer(j, res)
}

func busyError(running, waiting, slots int) *api.Error {
	return &api.Error{Status: http.StatusTooManyRequests, Code: api.CodeBusy, RetryAfter: 1 + waiting/max(slots, 1),
		Message: fmt.Sprintf("all %d run slots are busy (%d running, %d waiting); retry after the Retry-After seconds", slots, running, waiting)}
}

// buildSpec validates the request against its profile and returns the run.
func (s *Server) buildSpec(req *api.ExecRequest) (*runner.Spec, error) {
	switch req.Language {
	case "python":
	case "":
		return nil, validation("language", `language is required; the only supported value is "python"`)
	default:
		return nil, validation("language", `unsupported language %q; the only supported value is "python"`, req.Language)
	}
	name := req.Profile
	if name == "" {
		name = "default"
	}
	set := s.profiles()
	prof, ok := set.Exec[name]
	if !ok {
		return nil, validation("profile", "no exec profile named %q; available: %s", name, strings.Join(set.Names(), ", "))
	}
	if req.Code == nil {
		return nil, validation("code", "code is required: the Python source to run")
	}
	if int64(len(*req.Code)) > prof.MaxCodeBytes {
		return nil, validation("code", "code is %d bytes; profile %q allows at most %d", len(*req.Code), prof.Name, prof.MaxCodeBytes)
	}
	if int64(len(req.Stdin)) > prof.MaxStdinBytes {
		return nil, validation("stdin", "stdin is %d bytes; profile %q allows at most %d", len(req.Stdin), prof.Name, prof.MaxStdinBytes)
	}
	limits, err := effectiveLimits(prof, req.Limits)
	if err != nil {
		return nil, err
	}
	files, err := decodeFiles(prof, limits, req.Files)
	if err != nil {
		return nil, err
	}
	if err := checkEnv(req.Env); err != nil {
		return nil, err
	}
	return &runner.Spec{
		ID:      runner.NewExecID(),
		Profile: prof,
		Limits:  limits,
		Redact:  s.execRedactor(prof),
		Job: jobproto.Job{
			Code:             []byte(*req.Code),
			Stdin:            []byte(req.Stdin),
			Files:            files,
			Env:              req.Env,
			TimeoutMS:        limits.TimeoutMS,
			OutputBytes:      limits.OutputBytes,
			MaxOutFileBytes:  prof.Files.MaxOutputFileBytes,
			MaxOutTotalBytes: prof.Files.MaxOutputTotalBytes,
			MaxOutCount:      prof.Files.MaxOutputCount,
		},
	}, nil
}

// effectiveLimits lowers the profile's limits by the request's; a value above
// the profile's ceiling, or below a workable floor, is refused.
func effectiveLimits(p *profiles.Exec, r *api.LimitsRequest) (profiles.Limits, error) {
	l := p.Limits
	if r == nil {
		return l, nil
	}
	lowerInt := func(field string, v *int64, ceiling, floor int64, dst *int64) error {
		if v == nil {
			return nil
		}
		switch {
		case *v > ceiling:
			return validation("limits."+field, "%d is above the ceiling of %d set by profile %q; a request may only lower limits", *v, ceiling, p.Name)
		case *v < floor:
			return validation("limits."+field, "%d is below the minimum of %d", *v, floor)
		}
		*dst = *v
		return nil
	}
	for _, f := range []struct {
		name           string
		v              *int64
		ceiling, floor int64
		dst            *int64
	}{
		{"timeout_ms", r.TimeoutMS, p.Limits.TimeoutMS, 1, &l.TimeoutMS},
		{"memory_mb", r.MemoryMB, p.Limits.MemoryMB, 16, &l.MemoryMB},
		{"pids", r.Pids, p.Limits.Pids, 1, &l.Pids},
		{"output_bytes", r.OutputBytes, p.Limits.OutputBytes, 0, &l.OutputBytes},
		{"tmpfs_mb", r.TmpfsMB, p.Limits.TmpfsMB, 1, &l.TmpfsMB},
	} {
		if err := lowerInt(f.name, f.v, f.ceiling, f.floor, f.dst); err != nil {
			return l, err
		}
	}
	if r.CPUs != nil {
		switch v := *r.CPUs; {
		case v > p.Limits.CPUs:
			return l, validation("limits.cpus", "%g is above the ceiling of %g set by profile %q; a request may only lower limits", v, p.Limits.CPUs, p.Name)
		case v < 0.01:
			return l, validation("limits.cpus", "%g is below the minimum of 0.01", v)
		}
		l.CPUs = *r.CPUs
	}
	return l, nil
}

func decodeFiles(p *profiles.Exec, l profiles.Limits, in []api.InFile) ([]jobproto.File, error) {
	if len(in) > p.Files.MaxInputCount {
		return nil, validation("files", "%d files sent; profile %q allows at most %d", len(in), p.Name, p.Files.MaxInputCount)
	}
	out := make([]jobproto.File, 0, len(in))
	seen := map[string]bool{}
	var total int64
	for i, f := range in {
		field := fmt.Sprintf("files[%d]", i)
		if err := jobproto.CheckPath(f.Path); err != nil {
			return nil, validation(field+".path", "%q: %v", f.Path, err)
		}
		if f.Path == "out" {
			return nil, validation(field+".path", `"out" is the output directory; put input files elsewhere or inside it`)
		}
		if seen[f.Path] {
			return nil, validation(field+".path", "%q is given twice", f.Path)
		}
		seen[f.Path] = true
		content, err := base64.StdEncoding.DecodeString(f.Content)
		if err != nil {
			return nil, validation(field+".content", "content must be standard base64: %v", err)
		}
		total += int64(len(content))
		if total > p.Files.MaxInputBytes {
			return nil, validation("files", "input files total more than the %d bytes profile %q allows", p.Files.MaxInputBytes, p.Name)
		}
		out = append(out, jobproto.File{Path: f.Path, Content: content})
	}
	// A path that is also a directory of another path cannot be written.
	for path := range seen {
		for dir := path; ; {
			i := strings.LastIndexByte(dir, '/')
			if i < 0 {
				break
			}
			dir = dir[:i]
			if seen[dir] {
				return nil, validation("files", "%q is a file and also the directory of %q", dir, path)
			}
		}
	}
	if total > (l.TmpfsMB<<20)*3/4 {
		return nil, validation("files", "input files (%d bytes) do not fit in the %d MiB /sandbox scratch space", total, l.TmpfsMB)
	}
	return out, nil
}

func checkEnv(env map[string]string) error {
	if len(env) > maxEnvVars {
		return validation("env", "%d variables sent; at most %d are allowed", len(env), maxEnvVars)
	}
	for k, v := range env {
		field := "env." + k
		switch {
		case !envNamePattern.MatchString(k):
			return validation("env", "variable name %q is not allowed: names match [A-Z_][A-Z0-9_]*", k)
		case k == "PATH" || k == "HOME" || strings.HasPrefix(k, "PYTHON") || strings.HasPrefix(k, "LD_"):
			return validation(field, "%s may not be overridden (PATH, HOME, PYTHON* and LD_* are reserved)", k)
		case len(v) > maxEnvValueLen:
			return validation(field, "value is %d bytes; at most %d are allowed", len(v), maxEnvValueLen)
		case strings.IndexByte(v, 0) >= 0:
			return validation(field, "value contains a NUL byte")
		}
	}
	return nil
}

func toResponse(spec *runner.Spec, res *runner.Result) *api.ExecResponse {
	r := &api.ExecResponse{
		ID:              spec.ID,
		Status:          res.Status,
		ExitCode:        res.ExitCode,
		Signal:          res.Signal,
		Message:         res.Message,
		StdoutTruncated: res.StdoutTruncated,
		StderrTruncated: res.StderrTruncated,
		DurationMS:      res.Duration.Milliseconds(),
		Usage:           api.Usage{UserCPUMS: res.UserCPU.Milliseconds(), SysCPUMS: res.SysCPU.Milliseconds(), MaxRSSKB: res.MaxRSSKB},
		Files:           []api.OutFile{},
		SkippedFiles:    []api.SkippedFile{},
		Limits:          api.Limits(spec.Limits),
		Profile:         api.ProfileRef{Name: spec.Profile.Name, Version: spec.Profile.Version},
		Image:           res.ImageID,
		Redactions:      res.Redactions,
	}
	if r.Redactions == nil {
		r.Redactions = map[string]int{}
	}
	r.Stdout, r.StdoutBase64 = textOf(res.Stdout, res.StdoutTruncated)
	r.Stderr, r.StderrBase64 = textOf(res.Stderr, res.StderrTruncated)
	for _, f := range res.Files {
		r.Files = append(r.Files, api.OutFile{Path: f.Path, Size: int64(len(f.Content)), Mode: fmt.Sprintf("%04o", f.Mode), Content: base64.StdEncoding.EncodeToString(f.Content)})
	}
	for _, sk := range res.Skipped {
		r.SkippedFiles = append(r.SkippedFiles, api.SkippedFile{Path: sk.Path, Reason: sk.Reason})
	}
	return r
}

// textOf returns output as valid UTF-8 text; when the bytes are not valid
// UTF-8 it also returns them exactly, as base64. A multi-byte character cut
// by truncation at the end does not count as invalid.
func textOf(b []byte, truncated bool) (string, string) {
	check := b
	if truncated {
		for i := 0; i < utf8.UTFMax && len(check) > 0; i++ {
			if r, _ := utf8.DecodeLastRune(check); r != utf8.RuneError {
				break
			}
			check = check[:len(check)-1]
		}
		if utf8.Valid(check) {
			return string(check), ""
		}
	}
	if utf8.Valid(b) {
		return string(b), ""
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), base64.StdEncoding.EncodeToString(b)
}
