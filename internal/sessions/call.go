package sessions

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"image/png"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/execflow"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/internal/outputs"
	"github.com/sandboxd/sandboxd/runner"
)

// Call is one call of a session.
type Call struct {
	Key *auth.Key
	// XSession is the request's X-Session-Id ("" if none): the call counts
	// against that session's budgets, else against this session's.
	XSession string
	Req      *api.SessionExecRequest
	Who      audit.Who
	Log      *slog.Logger
}

// Exec runs a call in ls through the exec flow: every answer, refusals
// included, is audited as /exec's. The answer's body is an
// api.SessionExecResponse.
func (m *Manager) Exec(ctx context.Context, ls *Session, call *Call) (*control.Answer, error) {
	req, prof := call.Req, ls.profile
	limits := ls.limits
	switch {
	case req.Code == nil:
		return nil, api.Validation("code", "code is required: the Python source to run")
	case int64(len(*req.Code)) > prof.MaxCodeBytes:
		return nil, api.Validation("code", "code is %d bytes; profile %q allows at most %d", len(*req.Code), prof.Name, prof.MaxCodeBytes)
	case int64(len(req.Stdin)) > prof.MaxStdinBytes:
		return nil, api.Validation("stdin", "stdin is %d bytes; profile %q allows at most %d", len(req.Stdin), prof.Name, prof.MaxStdinBytes)
	}
	if req.TimeoutMS != nil {
		switch v := *req.TimeoutMS; {
		case v > limits.TimeoutMS:
			return nil, api.Validation("timeout_ms", "%d is above the session's limit of %d ms; a call may only lower it", v, limits.TimeoutMS)
		case v < 1:
			return nil, api.Validation("timeout_ms", "%d is below the minimum of 1", v)
		}
		limits.TimeoutMS = *req.TimeoutMS
	}
	files, err := execflow.DecodeFiles(prof, limits, req.Files)
	if err != nil {
		return nil, err
	}
	flow := m.cfg.Flow
	xs := cmp.Or(call.XSession, ls.auditSession())
	id := runner.NewExecID()
	spec := &runner.Spec{ID: id, Profile: prof, Limits: limits, Redact: flow.Redactor(prof), Job: jobproto.Job{
		Code: []byte(*req.Code), Stdin: []byte(req.Stdin), Files: files, TimeoutMS: limits.TimeoutMS, OutputBytes: limits.OutputBytes,
		MaxOutFileBytes: prof.Files.MaxOutputFileBytes, MaxOutTotalBytes: prof.Files.MaxOutputTotalBytes, MaxOutCount: prof.Files.MaxOutputCount}}
	j := &execflow.Job{Key: call.Key, Session: xs, Spec: spec, ID: id, OrigTimeout: limits.TimeoutMS,
		Log: call.Log.With("profile", prof.Name, "exec_id", id, "session", xs), Who: call.Who, Started: time.Now()}
	b, _ := json.Marshal(req)
	h := sha256.Sum256(append(b, "|session="+ls.id...))
	j.ReqHash = hex.EncodeToString(h[:])
	j.Who.Session = xs
	var res *runner.SessionResult
	j.AuditHook = func(r *audit.Record, parts *[]capture.Part, meta map[string]string) {
		auditCall(ls, res, r, parts, meta)
	}
	j.Run = func(ctx context.Context, spec *runner.Spec) (*execflow.Outcome, error) {
		var err error
		res, err = m.run(ctx, ls, spec)
		if err != nil {
			return nil, err
		}
		return &execflow.Outcome{Result: &res.Result, ChargeCPU: res.ChargeCPU, Ended: res.Ended}, nil
	}
	j.Finished = func(cpuMS int64) { m.finished(ls, res, cpuMS, j.Log) }
	j.Respond = func(resp *api.ExecResponse) any { return response(ls, res, resp) }

	if m.plane.Frozen() {
		return flow.Refuse(j, m.plane.FrozenError("no new code runs")), nil
	}
	release, cerr := ls.claim()
	if cerr != nil {
		return flow.Refuse(j, cerr), nil
	}
	defer release()
	return flow.Do(ctx, j), nil
}

// run runs a call in the session's sandbox. At shutdown and on a freeze
// the session ends with the call, rather than being interrupted and kept.
func (m *Manager) run(ctx context.Context, ls *Session, spec *runner.Spec) (*runner.SessionResult, error) {
	stopped := func() bool {
		cause := context.Cause(ctx)
		return cause != nil && (errors.Is(cause, execflow.ErrShutdown) || m.plane.Frozen())
	}
	stop := context.AfterFunc(ctx, func() {
		if stopped() {
			m.End(ls, "the call was stopped: "+context.Cause(ctx).Error())
		}
	})
	defer stop()
	call := &runner.SessionCall{ID: spec.ID, Code: spec.Job.Code, Stdin: spec.Job.Stdin, Files: spec.Job.Files,
		TimeoutMS: spec.Limits.TimeoutMS, OutputBytes: spec.Limits.OutputBytes, Redact: spec.Redact}
	res, err := ls.box.Exec(ctx, call)
	if err == nil {
		outputs.Session(spec.Redact, res)
	}
	if err != nil {
		switch {
		case errors.Is(err, runner.ErrSessionEnded):
			return nil, m.ended(ls, err)
		case errors.Is(err, runner.ErrEngine):
			m.End(ls, "the container engine failed")
			return nil, control.Unavailable("the container engine failed to run the call; the session has ended")
		}
		return nil, err
	}
	// A call stopped by a freeze or the shutdown ends its session (the
	// hook above may not have run yet), and the answer says so.
	if stopped() {
		m.End(ls, "the call was stopped: "+context.Cause(ctx).Error())
	}
	ls.mu.Lock()
	res.Ended = res.Ended || ls.ended
	ls.mu.Unlock()
	return res, nil
}

// finished adds a finished call to the session's usage, and ends the
// session when its sandbox ended with the call.
func (m *Manager) finished(ls *Session, res *runner.SessionResult, cpuMS int64, log *slog.Logger) {
	ls.mu.Lock()
	ls.usage.Calls++
	ls.usage.CPUMS += cpuMS
	ls.usage.WallMS += res.Duration.Milliseconds()
	if res.MemoryBytes > 0 {
		ls.usage.MemoryBytes = res.MemoryBytes
	}
	if res.StateLost {
		ls.usage.Restarts++
	}
	ls.mu.Unlock()
	if res.Ended {
		_, reason := ls.box.EndReason()
		m.End(ls, reason)
	}
	log.Info("session call finished", "status", res.Status, "exit_code", res.ExitCode, "duration_ms", res.Duration.Milliseconds(),
		"state_lost", res.StateLost, "session_ended", res.Ended, "results", len(res.Results), "stdout_bytes", len(res.Stdout), "stderr_bytes", len(res.Stderr))
}

// response is the body of a session call's 200: the exec response and the
// call's results.
func response(ls *Session, res *runner.SessionResult, er *api.ExecResponse) *api.SessionExecResponse {
	resp := &api.SessionExecResponse{ExecResponse: *er, Results: []api.RichResult{}, SessionID: ls.id, SessionState: stateReady}
	if res == nil { // stopped before it started
		return resp
	}
	resp.StateLost = res.StateLost
	if res.Ended {
		resp.SessionState = stateEnded
	}
	if e := res.Exception; e != nil {
		resp.Exception = &api.SessionException{Type: e.Type, Message: e.Message, Traceback: e.Traceback}
	}
	for _, r := range res.Results {
		resp.Results = append(resp.Results, richResult(r))
	}
	return resp
}

// richResult renders one result; a figure is checked to be a PNG image.
func richResult(r jobproto.RichResult) api.RichResult {
	out := api.RichResult{Type: r.Kind, Text: r.Text, Truncated: r.Truncated, Omitted: r.Omitted}
	if r.Kind != jobproto.ResultPNG || r.Omitted != "" {
		return out
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(r.Data))
	if err != nil {
		out.Omitted = "the figure is not a valid PNG image"
		return out
	}
	out.Data, out.Width, out.Height, out.Size = base64.StdEncoding.EncodeToString(r.Data), cfg.Width, cfg.Height, len(r.Data)
	return out
}

// auditCall adds a call's session and results to its exec record and
// capture.
func auditCall(ls *Session, res *runner.SessionResult, r *audit.Record, parts *[]capture.Part, meta map[string]string) {
	if r.Detail == nil {
		r.Detail = map[string]string{}
	}
	r.Detail["session_id"], r.Detail["sandbox_id"] = ls.id, ls.sandbox
	r.SandboxSession = ls.id
	meta["session_id"] = ls.id
	if res == nil {
		return
	}
	if res.StateLost {
		r.Detail["state_lost"] = "true"
	}
	if res.Ended {
		r.Detail["session_ended"] = "true"
	}
	if res.Exception != nil {
		r.Detail["exception"] = res.Exception.Type
	}
	for i, rr := range res.Results {
		data, ct := []byte(rr.Text), "text/plain; charset=utf-8"
		if rr.Kind == jobproto.ResultPNG {
			data, ct = rr.Data, "image/png"
		}
		if len(data) == 0 {
			continue
		}
		name := "result." + strconv.Itoa(i)
		*parts = append(*parts, capture.Part{Name: name, ContentType: ct, Data: data})
		meta[name] = rr.Kind
		r.Outputs = append(r.Outputs, audit.Output{Name: "results/" + strconv.Itoa(i) + "." + strings.ReplaceAll(rr.Kind, "/", "-"), Size: int64(len(data)), SHA256: audit.SHA256(data)})
	}
}
