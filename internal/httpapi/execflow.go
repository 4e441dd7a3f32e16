package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/control/budget"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/runner"
)

// execJob is one exec on its way through the control plane.
type execJob struct {
	key     *auth.Key
	session string
	idemKey string
	async   bool
	spec    *runner.Spec
	// id is the exec's handle: the id given before the run (a pooled
	// sandbox may run it under its own id, logged as sandbox_id).
	id string
	// call fingerprints the tool call (code and inputs) for the loop guard;
	// reqHash fingerprints the request for the Idempotency-Key.
	call, reqHash string
	origTimeout   int64
	ticket        *budget.Ticket
	log           *slog.Logger
	// meta and started are for the audit record.
	meta    auditMeta
	started time.Time
	// datasets the run mounts, with their snapshot ids.
	datasets []api.DatasetRef
	// auditHook, when set, adds to the audit record and the capture.
	auditHook execAuditHook
	// timing is sent as the Server-Timing header (timing.go).
	timing execTiming
}

// answer is an exec's HTTP answer, kept as bytes so that it can be stored
// and replayed exactly.
type answer struct {
	status int
	body   []byte
	err    *api.Error        // for error answers
	resp   *api.ExecResponse // for run results
	header map[string]string
	// keep: the answer is stored for an Idempotency-Key (the code ran or may
	// have run, or the exec was accepted). Refusals are not kept: nothing
	// ran, and a retry with the same key may run.
	keep bool
}

// Lifecycle states of GET /exec/{id}, besides the run statuses.
const (
	stateQueued      = "queued"
	stateRunning     = "running"
	stateFailed      = "failed"      // the run could not start; see error
	stateInterrupted = "interrupted" // sandboxd stopped before it finished
	statusFailed     = "failed"      // metrics label for runs that could not start
)

func marshalLine(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("api: marshalling a response: " + err.Error())
	}
	return append(b, '\n')
}

func errAnswer(e *api.Error) *answer {
	a := &answer{status: e.Status, err: e, body: marshalLine(api.ErrorBody{Error: e})}
	if e.RetryAfter > 0 {
		a.header = map[string]string{"Retry-After": fmt.Sprint(e.RetryAfter)}
	}
	return a
}

func (s *Server) resultAnswer(j *execJob, res *runner.Result) *answer {
	resp := toResponse(j.spec, res)
	if set := s.profiles(); set != nil {
		if eg := set.Egress[j.spec.Profile.Egress]; eg != nil {
			resp.Egress = &api.ProfileRef{Name: eg.Name, Version: eg.Version}
		}
	}
	if j.async {
		resp.ID = j.id
	}
	resp.Datasets = j.datasets
	return &answer{status: http.StatusOK, resp: resp, body: marshalLine(resp), keep: true}
}

func acceptedAnswer(id string, created time.Time) *answer {
	st := &api.ExecState{ID: id, Status: stateQueued, CreatedAt: created}
	return &answer{status: http.StatusAccepted, body: marshalLine(st), keep: true, header: map[string]string{"Location": "/exec/" + id}}
}

// send writes an answer.
func (s *Server) send(c echo.Context, a *answer) error {
	if a.err != nil {
		c.Set(ctxErrorCode, a.err.Code)
	}
	if a.resp != nil {
		c.Set(ctxRunStatus, a.resp.Status)
	}
	for k, v := range a.header {
		c.Response().Header().Set(k, v)
	}
	return c.Blob(a.status, echo.MIMEApplicationJSONCharsetUTF8, a.body)
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return ": " + r
}

// startLive registers the job as live and gives it its run context: it ends
// at shutdown, on DELETE /exec/{id} or a freeze with kill_running, and -
// only for a plain synchronous exec - when the client goes away. A keyed or
// async exec outlives its request, so that a retry finds its result.
func (s *Server) startLive(c echo.Context, j *execJob) *liveExec {
	parent := c.Request().Context()
	if j.async || j.idemKey != "" {
		parent = context.WithoutCancel(parent)
	}
	ctx, cancel := context.WithCancelCause(parent)
	// Counted before the hook on runCtx is registered, so that KillRuns,
	// which cancels runCtx before it waits, always sees this exec.
	s.runs.Add(1)
	stop := context.AfterFunc(s.runCtx, func() { cancel(context.Cause(s.runCtx)) })
	l := &liveExec{id: j.id, tenant: j.key.Tenant, keyID: j.key.ID, async: j.async, created: time.Now().UTC(), ctx: ctx, done: make(chan struct{}),
		cancel: func(err error) { cancel(err) }}
	l.stop = func() { stop(); cancel(nil) }
	s.ctl.register(l)
	return l
}

// endLive unregisters an exec that has ended (and whose result, for an
// async one, is stored).
func (s *Server) endLive(l *liveExec) {
	s.ctl.unregister(l)
	s.runs.Done()
}

// saveAsync stores an async exec's final state.
func (s *Server) saveAsync(j *execJob, rec *store.ExecRecord, a *answer) {
	st := &api.ExecState{ID: j.id, CreatedAt: rec.CreatedAt}
	now := time.Now().UTC()
	st.FinishedAt = &now
	switch {
	case a.resp != nil:
		st.Status, st.Result = a.resp.Status, a.resp
		st.Message = a.resp.Message
	case a.err != nil:
		st.Status, st.Error = stateFailed, a.err
	}
	r := *rec
	r.State = store.ExecDone
	r.Body = marshalLine(st)
	if err := s.ctl.store.PutExec(context.Background(), &r); err != nil {
		j.log.Error("storing the async exec's result failed", "err", err)
	}
}

// fingerprints returns the loop guard's fingerprint of the tool call (code
// and every input) and the idempotency fingerprint of the whole request.
func fingerprints(req *api.ExecRequest, session string) (call, request string) {
	r := *req
	r.Async = false
	b, _ := json.Marshal(&r) // struct fields in order, map keys sorted
	h := sha256.Sum256(b)
	call = hex.EncodeToString(h[:])
	h = sha256.Sum256([]byte(fmt.Sprintf("%s|async=%t|session=%s", call, req.Async, session)))
	return call, hex.EncodeToString(h[:])
}

// outcome fingerprints what a run produced, for the loop guard.
func outcome(res *runner.Result) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%d|%s|", res.Status, res.ExitCode, res.Signal)
	for _, b := range [][]byte{res.Stdout, res.Stderr} {
		s := sha256.Sum256(b)
		h.Write(s[:])
	}
	files := make([]string, 0, len(res.Files))
	for _, f := range res.Files {
		s := sha256.Sum256(f.Content)
		files = append(files, f.Path+"="+hex.EncodeToString(s[:]))
	}
	sort.Strings(files)
	h.Write([]byte(strings.Join(files, ",")))
	return hex.EncodeToString(h.Sum(nil))
}
