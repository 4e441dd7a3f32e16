package execflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/control/admit"
	"github.com/sandboxd/sandboxd/internal/outputs"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/redact"
	"github.com/sandboxd/sandboxd/runner"
)

// Lifecycle states of GET /exec/{id}, besides the run statuses.
const (
	stateQueued      = "queued"
	stateRunning     = "running"
	stateFailed      = "failed"      // the run could not start; see error
	stateInterrupted = "interrupted" // sandboxd stopped before it finished
	statusFailed     = "failed"      // metrics label for runs that could not start
)

// Do admits and runs the job and writes its audit record before the
// answer goes out (an async exec's record is written when it ends). Every
// outcome, refusals included, is an answer.
func (f *Flow) Do(ctx context.Context, j *Job) *control.Answer {
	j.bindTenant()
	a := f.admitAndRun(ctx, j)
	if a.Status == http.StatusAccepted {
		return a
	}
	a = f.audit(j, a)
	if a.Resp != nil {
		j.timing.total = time.Since(j.Started)
		a.SetHeader("Server-Timing", j.timing.header())
	}
	return a
}

// DoIdempotent is Do for a job with an Idempotency-Key: a retry with the
// key replays the first answer, and the code never runs twice.
func (f *Flow) DoIdempotent(ctx context.Context, j *Job) *control.Answer {
	j.Log = j.Log.With("idempotency_key_sha256", control.ShortHash(j.IdemKey))
	ic := &control.IdemCall{Kind: "exec", Tenant: j.Key.Tenant, Key: j.IdemKey, ReqHash: j.ReqHash, ID: j.ID, Log: j.Log}
	return f.plane.Idempotent(ctx, ic, func() *control.Answer { return f.Do(ctx, j) })
}

// Refuse answers a job refused before admission (a busy session) and
// audits it as Do audits its refusals.
func (f *Flow) Refuse(j *Job, e *api.Error) *control.Answer {
	return f.audit(j, control.ErrAnswer(e))
}

// admitAndRun applies the kill switch, the loop guard and the budgets, then
// runs the job (or, for an async one, starts it and answers 202).
func (f *Flow) admitAndRun(ctx context.Context, j *Job) *control.Answer {
	p := f.plane
	if p.Frozen() {
		return control.ErrAnswer(p.FrozenError("no new code runs"))
	}
	tenant := j.Key.Tenant
	lim := p.Limits().Limits(tenant)
	if j.Session != "" && j.Call != "" {
		refuse, n, err := p.Guard().Check(ctx, tenant+"\x00"+j.Session, j.Call, lim.LoopRepeats)
		if err != nil {
			j.Log.Error("loop guard check failed", "err", err)
			return control.ErrAnswer(control.StoreFailed())
		}
		if refuse {
			return control.ErrAnswer(p.Refusal(&api.Error{Status: http.StatusConflict, Code: api.CodeLoopDetected,
				Message: fmt.Sprintf("session %s sent this same code with the same inputs %d times in a row and got the same result each time; running it again will not change the outcome. Change the code or its inputs, or take a different approach", j.Session, n)}))
		}
	}
	if j.Async {
		if e := p.QueueFull(); e != nil {
			return control.ErrAnswer(e)
		}
	}
	ticket, r, err := p.Limits().AdmitExec(ctx, tenant, j.Session, j.Spec.Limits.TimeoutMS, j.Spec.Limits.CPUs)
	if err != nil {
		j.Log.Error("budget check failed", "err", err)
		return control.ErrAnswer(control.StoreFailed())
	}
	if r != nil {
		return control.ErrAnswer(p.BudgetError(r))
	}
	j.ticket = ticket
	if ticket.TimeoutMS < j.Spec.Limits.TimeoutMS {
		j.Spec.Limits.TimeoutMS = ticket.TimeoutMS
		j.Spec.Job.TimeoutMS = ticket.TimeoutMS
	}
	live := f.Begin(ctx, j)
	if !j.Async {
		a := f.run(live, j)
		f.End(live)
		return a
	}
	// One creation time for the 202, the live state and the stored one.
	now := live.created
	rec := &store.ExecRecord{ID: j.ID, Tenant: tenant, KeyID: j.Key.ID, Session: j.Session, State: store.ExecQueued,
		Owner: p.Owner(), CreatedAt: now, ExpiresAt: now.Add(p.AsyncTTL())}
	rec.Body, _ = json.Marshal(&api.ExecState{ID: j.ID, Status: stateQueued, CreatedAt: now})
	if err := p.Store().PutExec(context.WithoutCancel(ctx), rec); err != nil {
		j.Log.Error("storing the async exec failed", "err", err)
		ticket.Cancel()
		f.End(live)
		return control.ErrAnswer(control.Unavailable("the store failed to record the exec; retry later"))
	}
	go func() {
		a := f.audit(j, f.run(live, j))
		f.saveAsync(j, rec, a, live.startedAt())
		f.End(live) // after the result is stored: shutdown waits for it
	}()
	st := &api.ExecState{ID: j.ID, Status: stateQueued, CreatedAt: now}
	a := &control.Answer{Status: http.StatusAccepted, Body: marshalLine(st), Keep: true}
	a.SetHeader("Location", "/exec/"+j.ID)
	return a
}

// run waits for a run slot and runs the job; every outcome is an answer.
func (f *Flow) run(live *Live, j *Job) *control.Answer {
	spec, m := j.Spec, f.plane.Metrics()
	profile := spec.Profile.Name
	queued := time.Now()
	release, err := f.plane.Gate().Acquire(live.ctx)
	if err != nil {
		j.ticket.Cancel()
		cause := context.Cause(live.ctx)
		switch {
		case errors.Is(err, admit.ErrBusy):
			m.Execs.WithLabelValues(profile, statusFailed).Inc()
			return control.ErrAnswer(f.plane.GateBusy())
		case live.ctx.Err() != nil && (isStopCause(cause) || errors.Is(cause, ErrShutdown)):
			// Cancelled, frozen or shut down while queued: nothing ran.
			m.Execs.WithLabelValues(profile, runner.StatusKilled).Inc()
			j.Log.Info("exec stopped before it started", "cause", cause.Error())
			res := &runner.Result{Status: runner.StatusKilled, ExitCode: -1, Message: "the exec was stopped before it started: " + cause.Error()}
			return f.resultAnswer(j, res)
		}
		m.Execs.WithLabelValues(profile, statusFailed).Inc()
		return control.ErrAnswer(control.Unavailable("the request ended while waiting for a run slot"))
	}
	defer release()
	j.timing.queue = time.Since(queued)
	m.QueueSeconds.WithLabelValues(profile).Observe(j.timing.queue.Seconds())
	live.MarkStarted()

	runFn := j.Run
	if runFn == nil {
		runFn = f.engineRun
	}
	begin := time.Now()
	out, err := runFn(live.ctx, spec) // may assign spec.ID (a pooled sandbox's)
	wall := time.Since(begin)
	log := j.Log
	if spec.ID != j.ID {
		log = log.With("sandbox_id", spec.ID)
	}
	if err != nil {
		log.Error("run failed", "err", err)
		m.Execs.WithLabelValues(profile, statusFailed).Inc()
		var ae *api.Error
		switch {
		case errors.As(err, &ae):
			j.ticket.Cancel()
			return control.ErrAnswer(ae)
		case errors.Is(err, runner.ErrImageMissing), errors.Is(err, runner.ErrRuntimeMissing), errors.Is(err, runner.ErrEgressUnavailable), errors.Is(err, runner.ErrCellsUnavailable):
			j.ticket.Cancel()
			return control.ErrAnswer(control.Unavailable(err.Error()))
		case errors.Is(err, runner.ErrEngine):
			j.ticket.Cancel()
			return control.ErrAnswer(control.Unavailable("the container engine failed to run the sandbox; retry later"))
		}
		// The code may have run: charge the time and keep the answer, so
		// that a retry with the same Idempotency-Key does not run it again.
		j.ticket.Finish(live.ctx, int64(float64(wall.Milliseconds())*spec.Limits.CPUs), wall.Milliseconds())
		a := control.ErrAnswer(control.Internal())
		a.Keep = true
		return a
	}
	res := out.Result
	outputs.Result(spec.Redact, res)
	for typ, n := range res.Redactions {
		m.Redactions.WithLabelValues(typ).Add(float64(n))
	}
	j.timing.pooled, j.timing.acquire, j.timing.run = res.Pooled, res.Acquire, res.Duration
	j.timing.exchange = max(0, wall-res.Acquire-res.Duration)
	cpu := (res.UserCPU + res.SysCPU).Milliseconds()
	if out.ChargeCPU > 0 {
		cpu = out.ChargeCPU.Milliseconds()
	}
	if cpu == 0 && (res.Status == runner.StatusTimeout || res.Status == runner.StatusKilled || out.Ended) {
		// Stopped from outside, the launcher reported no usage: charge
		// what the code could have used in its wall time.
		cpu = int64(float64(res.Duration.Milliseconds()) * spec.Limits.CPUs)
	}
	j.ticket.Finish(live.ctx, cpu, res.Duration.Milliseconds())
	m.Execs.WithLabelValues(profile, res.Status).Inc()
	m.RunSeconds.WithLabelValues(profile).Observe(res.Duration.Seconds())
	m.StartSeconds.WithLabelValues(profile).Observe(max(0, (wall - res.Duration).Seconds()))
	if j.Session != "" && j.Call != "" {
		if err := f.plane.Guard().Record(live.ctx, j.Key.Tenant+"\x00"+j.Session, j.Call, outcome(res)); err != nil {
			log.Error("recording the call for the loop guard failed", "err", err)
		}
	}
	if res.Status == runner.StatusTimeout && j.ticket.LoweredBy != "" {
		res.Message += fmt.Sprintf(" (the limit was lowered from %d ms to what the %s budget had left)", j.OrigTimeout, j.ticket.LoweredBy)
	}
	log.Info("run finished", "status", res.Status, "exit_code", res.ExitCode, "duration_ms", res.Duration.Milliseconds(),
		"stdout_bytes", len(res.Stdout), "stderr_bytes", len(res.Stderr), "files", len(res.Files), "image", res.ImageID, "container", shortID(res.Container))
	if j.Finished != nil {
		j.Finished(cpu)
	}
	return f.resultAnswer(j, res)
}

// engineRun runs the spec in a fresh sandbox of the engine.
func (f *Flow) engineRun(ctx context.Context, spec *runner.Spec) (*Outcome, error) {
	res, err := f.cfg.Engine.Run(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &Outcome{Result: res}, nil
}

// resultAnswer is the 200 of a run.
func (f *Flow) resultAnswer(j *Job, res *runner.Result) *control.Answer {
	resp := ToResponse(j.Spec, res)
	if eg := f.profiles().Egress[j.Spec.Profile.Egress]; eg != nil {
		resp.Egress = &api.ProfileRef{Name: eg.Name, Version: eg.Version}
	}
	if j.Async {
		resp.ID = j.ID
	}
	resp.Datasets = j.Datasets
	// The last net: every text field of the answer is redacted too.
	redact.Counts(resp.Redactions).Add(outputs.Strings(j.Spec.Redact, resp))
	if j.Respond != nil {
		body := j.Respond(resp)
		redact.Counts(resp.Redactions).Add(outputs.Strings(j.Spec.Redact, body))
		return control.RunAnswer(resp, body)
	}
	return control.RunAnswer(resp, resp)
}

// saveAsync stores an async exec's final state.
// started is when it got its run slot (zero: it never did).
func (f *Flow) saveAsync(j *Job, rec *store.ExecRecord, a *control.Answer, started time.Time) {
	st := &api.ExecState{ID: j.ID, CreatedAt: rec.CreatedAt}
	now := time.Now().UTC()
	st.FinishedAt = &now
	if !started.IsZero() {
		st.StartedAt = &started
	}
	switch {
	case a.Resp != nil:
		st.Status, st.Result = a.Resp.Status, a.Resp
		st.Message = a.Resp.Message
	case a.Err != nil:
		st.Status, st.Error = stateFailed, a.Err
	}
	r := *rec
	r.State = store.ExecDone
	r.Body = marshalLine(st)
	if err := f.plane.Store().PutExec(context.Background(), &r); err != nil {
		j.Log.Error("storing the async exec's result failed", "err", err)
	}
}

// shortID is a container id as the engine's CLI shows it.
func shortID(id string) string { return id[:min(len(id), 12)] }
