package httpapi

// Stateful sessions: POST /sessions starts a sandbox whose Python
// interpreter stays alive across calls (runner.Session); POST
// /sessions/{id}/exec runs code in it, and returns what /exec returns
// plus the call's rich results. A session belongs to the tenant and key
// that made it: to any other key it does not exist (404). It ends at its
// idle timeout or lifetime, on DELETE, when sandboxd is frozen, at an OOM
// kill and at shutdown; its container is removed on every path.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/control/admit"
	"github.com/sandboxd/sandboxd/internal/control/budget"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/runner"
)

// Session states.
const (
	sessionReady = "ready"
	sessionBusy  = "busy"
	sessionEnded = "ended"
)

// Caps and timings of sessions.
const (
	// sessionMaxTextBytes caps the text of a repr or table result.
	sessionMaxTextBytes = 64 << 10
	// sessionMaxFigureBytes caps one PNG figure (the profile's per-file
	// cap when lower); sessionMaxFigures their number per call.
	sessionMaxFigureBytes = 4 << 20
	sessionMaxFigures     = 10
	// sessionSweep is how often idle timeouts, lifetimes and the kill
	// switch are checked.
	sessionSweep = 250 * time.Millisecond
	// sessionKeepEnded is how long an ended session still answers GET.
	sessionKeepEnded = 10 * time.Minute
	// sessionCreateBody bounds the body of POST /sessions.
	sessionCreateBody = 64 << 10
)

// SessionSandbox is a started session sandbox (*runner.Session).
type SessionSandbox interface {
	ID() string
	ImageID() string
	Exec(ctx context.Context, call *runner.SessionCall) (*runner.SessionResult, error)
	PutFiles(ctx context.Context, files []jobproto.File) error
	GetFile(ctx context.Context, path string, maxBytes int64) (*runner.OutFile, string, error)
	Close(reason string)
	Done() <-chan struct{}
	EndReason() (status, reason string)
}

// SessionEngine is an engine that runs sessions. *runner.Runner is one
// through its StartSession; unit tests use a fake.
type SessionEngine interface {
	OpenSession(ctx context.Context, spec *runner.Spec, opts runner.SessionOptions) (SessionSandbox, error)
}

type runnerSessions interface {
	StartSession(ctx context.Context, spec *runner.Spec, opts runner.SessionOptions) (*runner.Session, error)
}

type runnerSessionEngine struct{ r runnerSessions }

func (e runnerSessionEngine) OpenSession(ctx context.Context, spec *runner.Spec, opts runner.SessionOptions) (SessionSandbox, error) {
	s, err := e.r.StartSession(ctx, spec, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) sessionEngine() SessionEngine {
	switch e := s.cfg.Engine.(type) {
	case SessionEngine:
		return e
	case runnerSessions:
		return runnerSessionEngine{e}
	}
	return nil
}

// execAuditHook adds to an exec's audit record and capture (sessions.go
// uses it for the session's id and the call's results).
type execAuditHook func(r *audit.Record, parts *[]capture.Part, meta map[string]string)

// sessionMgr holds the sessions of the server.
type sessionMgr struct {
	mu   sync.Mutex
	byID map[string]*liveSession
	open map[string]int // open sessions by tenant, reservations included

	stop chan struct{}
	done chan struct{}
}

// liveSession is one session of the server, open or recently ended.
type liveSession struct {
	id, tenant, keyID string
	// xsession is the X-Session-Id the session was made with ("" if none).
	xsession string
	profile  *profiles.Exec
	limits   profiles.Limits
	idle     time.Duration
	lifetime time.Duration
	created  time.Time
	box      SessionSandbox
	sandbox  string

	mu        sync.Mutex
	busy      bool
	lastUsed  time.Time
	ended     bool
	endedAt   time.Time
	endReason string
	usage     api.SessionUsage
}

// auditSession is the session its own records (start, end, file
// transfers) carry: the X-Session-Id it was made with, else its id.
func (ls *liveSession) auditSession() string {
	return cmp.Or(ls.xsession, ls.id)
}

// sessionRoutes adds the session endpoints and starts the sweeper.
func (s *Server) sessionRoutes(e *echo.Echo) {
	m := &sessionMgr{byID: map[string]*liveSession{}, open: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	s.ctl.sessions = m
	s.ctl.metrics.Gauge("sandboxd_sessions_open", "Sessions open or starting.", func() float64 {
		m.mu.Lock()
		defer m.mu.Unlock()
		n := 0
		for _, v := range m.open {
			n += v
		}
		return float64(n)
	})
	go s.sweepSessions(m)
	agent := s.authenticate(auth.RoleAgent)
	e.POST("/sessions", s.createSession, agent)
	e.GET("/sessions/:id", s.getSession, agent)
	e.DELETE("/sessions/:id", s.deleteSession, agent)
	e.POST("/sessions/:id/exec", s.sessionExec, agent)
	e.POST("/sessions/:id/files", s.sessionPutFiles, agent)
	e.GET("/sessions/:id/files/:path", s.sessionGetFile, agent)
}

// closeSessions ends every session (at Close, after KillRuns) and stops
// the sweeper.
func (s *Server) closeSessions() {
	m := s.ctl.sessions
	if m == nil {
		return
	}
	select {
	case <-m.stop:
		return
	default:
	}
	close(m.stop)
	<-m.done
	for _, ls := range m.list() {
		s.endSession(ls, "sandboxd is shutting down")
	}
}

func (m *sessionMgr) list() []*liveSession {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*liveSession, 0, len(m.byID))
	for _, ls := range m.byID {
		out = append(out, ls)
	}
	return out
}

// sweepSessions ends the sessions past their idle timeout or lifetime,
// those whose sandbox ended, and all of them while sandboxd is frozen;
// ended sessions are forgotten after sessionKeepEnded.
func (s *Server) sweepSessions(m *sessionMgr) {
	defer close(m.done)
	t := time.NewTicker(sessionSweep)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		frozen := s.Frozen()
		for _, ls := range m.list() {
			ls.mu.Lock()
			reason := ""
			switch {
			case ls.ended:
				if now.Sub(ls.endedAt) > sessionKeepEnded {
					m.mu.Lock()
					delete(m.byID, ls.id)
					m.mu.Unlock()
				}
			case frozen:
				st := s.ctl.frozen.Load()
				reason = fmt.Sprintf("sandboxd was frozen by an operator (%s)%s", st.By, reasonSuffix(st.Reason))
			case now.Sub(ls.created) >= ls.lifetime:
				reason = fmt.Sprintf("the session reached its lifetime of %d s", int64(ls.lifetime/time.Second))
			case !ls.busy && now.Sub(ls.lastUsed) >= ls.idle:
				reason = fmt.Sprintf("the session was idle for its idle timeout of %d s", int64(ls.idle/time.Second))
			default:
				select {
				case <-ls.box.Done():
					_, reason = ls.box.EndReason()
				default:
				}
			}
			ls.mu.Unlock()
			if reason != "" {
				s.endSession(ls, reason)
			}
		}
	}
}

// endSession ends ls: its sandbox is closed (the container killed and
// removed) and it no longer counts against its tenant.
func (s *Server) endSession(ls *liveSession, reason string) {
	ls.mu.Lock()
	if ls.ended {
		ls.mu.Unlock()
		return
	}
	if st, r := ls.box.EndReason(); r != "" {
		reason = r
		if st == runner.StatusOOM && !strings.Contains(r, "memory") {
			reason += " (memory limit)"
		}
	}
	ls.ended, ls.endedAt, ls.endReason = true, time.Now().UTC(), reason
	ls.mu.Unlock()
	m := s.ctl.sessions
	m.mu.Lock()
	m.open[ls.tenant]--
	if m.open[ls.tenant] <= 0 {
		delete(m.open, ls.tenant)
	}
	m.mu.Unlock()
	ls.box.Close(reason)
	s.log.Info("session ended", "session_id", ls.id, "tenant", ls.tenant, "key_id", ls.keyID, "sandbox_id", ls.sandbox, "reason", reason)
	ar := &audit.Record{Kind: audit.KindSession, Action: "end", Status: "ended", Tenant: ls.tenant, KeyID: ls.keyID, Session: ls.auditSession(), Subject: ls.id,
		Message: reason, ExecProfile: &audit.ProfileRef{Name: ls.profile.Name, Version: ls.profile.Version},
		Detail: map[string]string{"sandbox_id": ls.sandbox}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.audit.Append(ctx, ar); err != nil {
		s.log.Error("writing the session end's audit record failed", "session_id", ls.id, "err", err)
	}
}

func (ls *liveSession) info() *api.SessionInfo {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	in := &api.SessionInfo{ID: ls.id, SandboxID: ls.sandbox, Profile: api.ProfileRef{Name: ls.profile.Name, Version: ls.profile.Version},
		Limits: api.Limits(ls.limits), Image: ls.box.ImageID(), IdleTimeoutS: int64(ls.idle / time.Second), MaxLifetimeS: int64(ls.lifetime / time.Second),
		CreatedAt: ls.created, LastUsedAt: ls.lastUsed, EndsBy: ls.created.Add(ls.lifetime), Usage: ls.usage}
	in.ExpiresAt = ls.lastUsed.Add(ls.idle)
	if in.EndsBy.Before(in.ExpiresAt) {
		in.ExpiresAt = in.EndsBy
	}
	switch {
	case ls.ended:
		in.State = sessionEnded
		t := ls.endedAt
		in.EndedAt, in.EndReason = &t, ls.endReason
	case ls.busy:
		in.State = sessionBusy
	default:
		in.State = sessionReady
	}
	return in
}

func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "ses_" + hex.EncodeToString(b[:])
}

// sessionNotFound is the answer for a session that does not exist or
// belongs to another key: the two are not told apart.
func sessionNotFound(id string) *api.Error {
	return &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound,
		Message: fmt.Sprintf("no session %q visible to this key: a session is visible only to the key that made it, until %s after it ended", id, sessionKeepEnded)}
}

// lookupSession returns the session id of the request's key.
func (s *Server) lookupSession(c echo.Context) (*liveSession, error) {
	id := c.Param("id")
	key := requestKey(c)
	m := s.ctl.sessions
	m.mu.Lock()
	ls := m.byID[id]
	m.mu.Unlock()
	if ls == nil || ls.tenant != key.Tenant || ls.keyID != key.ID {
		return nil, sessionNotFound(id)
	}
	c.Set(ctxLogger, requestLogger(c, s.log).With("session_id", id))
	return ls, nil
}

// claim marks ls busy for one operation; the returned func releases it.
func (ls *liveSession) claim() (func(), *api.Error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	switch {
	case ls.ended:
		return nil, &api.Error{Status: http.StatusConflict, Code: api.CodeSessionEnded, Message: fmt.Sprintf("session %s has ended: %s; start a new one with POST /sessions", ls.id, ls.endReason)}
	case ls.busy:
		return nil, &api.Error{Status: http.StatusConflict, Code: api.CodeSessionBusy, RetryAfter: 1,
			Message: fmt.Sprintf("session %s is running another call or file transfer; a session runs one at a time, retry when it has finished", ls.id)}
	}
	ls.busy = true
	return func() {
		ls.mu.Lock()
		ls.busy, ls.lastUsed = false, time.Now().UTC()
		ls.mu.Unlock()
	}, nil
}

func (s *Server) frozenError() *api.Error {
	st := s.ctl.frozen.Load()
	return s.refusal(&api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeFrozen,
		Message: fmt.Sprintf("sandboxd is frozen by an operator (since %s, by %s%s): no new code runs until it is unfrozen", st.Since.Format(time.RFC3339), st.By, reasonSuffix(st.Reason))})
}

// sessionSeconds lowers a profile's session bound by the request's.
func sessionSeconds(field string, v *int64, ceiling int64, profile string) (time.Duration, error) {
	if v == nil {
		return time.Duration(ceiling) * time.Second, nil
	}
	switch {
	case *v > ceiling:
		return 0, validation(field, "%d is above the ceiling of %d set by profile %q; a request may only lower it", *v, ceiling, profile)
	case *v < 1:
		return 0, validation(field, "%d is below the minimum of 1 second", *v)
	}
	return time.Duration(*v) * time.Second, nil
}

func (s *Server) createSession(c echo.Context) error {
	key := requestKey(c)
	xs, err := sessionID(c)
	if err != nil {
		return err
	}
	var req api.SessionCreateRequest
	if err := decodeJSON(c, sessionCreateBody, &req); err != nil {
		return err
	}
	if s.Frozen() {
		return s.frozenError()
	}
	name := req.Profile
	if name == "" {
		name = profiles.DefaultName
	}
	set := s.profiles()
	prof, ok := set.Exec[name]
	if !ok {
		return validation("profile", "no exec profile named %q; available: %s", name, strings.Join(set.Names(), ", "))
	}
	c.Set(ctxProfile, prof.Name)
	limits, err := effectiveLimits(prof, req.Limits)
	if err != nil {
		return err
	}
	idle, err := sessionSeconds("idle_timeout_s", req.IdleTimeoutS, prof.SessionIdleTimeoutS, prof.Name)
	if err != nil {
		return err
	}
	life, err := sessionSeconds("max_lifetime_s", req.MaxLifetimeS, prof.SessionMaxLifetimeS, prof.Name)
	if err != nil {
		return err
	}
	eng := s.sessionEngine()
	if eng == nil {
		return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "this sandboxd's engine does not run sessions"}
	}
	// The tenant's cap, with this session reserved until it started or failed.
	m := s.ctl.sessions
	m.mu.Lock()
	if r := s.ctl.limits.AdmitSession(key.Tenant, m.open[key.Tenant]); r != nil {
		m.mu.Unlock()
		return s.budgetError(r)
	}
	m.open[key.Tenant]++
	m.mu.Unlock()
	started := false
	defer func() {
		if !started {
			m.mu.Lock()
			if m.open[key.Tenant]--; m.open[key.Tenant] <= 0 {
				delete(m.open, key.Tenant)
			}
			m.mu.Unlock()
		}
	}()
	ctx := c.Request().Context()
	release, err := s.cfg.Gate.Acquire(ctx)
	if err != nil {
		if errors.Is(err, admit.ErrBusy) {
			running, waiting, slots := s.cfg.Gate.Stats()
			return s.refusal(busyError(running, waiting, slots))
		}
		return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the request ended while waiting for a run slot"}
	}
	id := newSessionID()
	spec := &runner.Spec{ID: id, Profile: prof, Limits: limits}
	opts := runner.SessionOptions{MaxTextBytes: sessionMaxTextBytes, MaxFigureBytes: min(sessionMaxFigureBytes, prof.Files.MaxOutputFileBytes), MaxFigures: sessionMaxFigures}
	log := requestLogger(c, s.log).With("session_id", id, "profile", prof.Name)
	begin := time.Now()
	box, err := eng.OpenSession(ctx, spec, opts)
	release()
	if err != nil {
		log.Error("starting a session failed", "err", err)
		switch {
		case errors.Is(err, runner.ErrImageMissing), errors.Is(err, runner.ErrRuntimeMissing), errors.Is(err, runner.ErrEgressUnavailable):
			return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: err.Error()}
		case errors.Is(err, runner.ErrEngine), errors.Is(err, runner.ErrLauncher), errors.Is(err, runner.ErrSessionEnded):
			return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the container engine failed to start the session's sandbox; retry later"}
		case ctx.Err() != nil:
			return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the request ended while the session started"}
		}
		return err
	}
	now := time.Now().UTC()
	ls := &liveSession{id: id, tenant: key.Tenant, keyID: key.ID, xsession: xs, profile: prof, limits: limits, idle: idle, lifetime: life,
		created: now, lastUsed: now, box: box, sandbox: box.ID()}
	m.mu.Lock()
	closing := false
	select {
	case <-m.stop:
		closing = true // closeSessions has run or runs: it would miss this one
	default:
		m.byID[id] = ls
	}
	m.mu.Unlock()
	if closing {
		box.Close("sandboxd is shutting down")
		return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "sandboxd is shutting down"}
	}
	started = true
	log.Info("session started", "sandbox_id", ls.sandbox, "start_ms", time.Since(begin).Milliseconds(), "idle_timeout_s", int64(idle/time.Second), "max_lifetime_s", int64(life/time.Second))
	ar := metaOf(c).record(audit.KindSession)
	ar.Session, ar.Subject, ar.Action, ar.Status = ls.auditSession(), id, "start", "ok"
	ar.ExecProfile = &audit.ProfileRef{Name: prof.Name, Version: prof.Version}
	ar.Image, ar.Runtime = box.ImageID(), prof.Runtime
	ar.Detail = map[string]string{"sandbox_id": ls.sandbox, "idle_timeout_s": strconv.FormatInt(int64(idle/time.Second), 10), "max_lifetime_s": strconv.FormatInt(int64(life/time.Second), 10)}
	if err := s.auditEvent(c, ar, "the session start"); err != nil {
		s.endSession(ls, "its audit record could not be written")
		return err
	}
	c.Response().Header().Set("Location", "/sessions/"+id)
	return c.JSON(http.StatusCreated, ls.info())
}

func (s *Server) getSession(c echo.Context) error {
	ls, err := s.lookupSession(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ls.info())
}

func (s *Server) deleteSession(c echo.Context) error {
	ls, err := s.lookupSession(c)
	if err != nil {
		return err
	}
	s.endSession(ls, fmt.Sprintf("ended by DELETE /sessions/%s (key %s)", ls.id, requestKey(c).ID))
	return c.JSON(http.StatusOK, ls.info())
}

// sessionExec serves POST /sessions/{id}/exec.
func (s *Server) sessionExec(c echo.Context) error {
	key := requestKey(c)
	if r := s.ctl.limits.AllowRequest(key.Tenant, budget.KindExec); r != nil {
		return s.budgetError(r)
	}
	ls, err := s.lookupSession(c)
	if err != nil {
		return err
	}
	xs, err := sessionID(c)
	if err != nil {
		return err
	}
	if c.Request().Header.Get(headerIdempotencyKey) != "" {
		return validation(headerIdempotencyKey, "session calls take no Idempotency-Key: a call changes the session's state, so a retry is not the same call; check the session's state with GET /sessions/{id} instead")
	}
	var req api.SessionExecRequest
	if err := decodeJSON(c, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	prof := ls.profile
	c.Set(ctxProfile, prof.Name)
	limits := ls.limits
	switch {
	case req.Code == nil:
		return validation("code", "code is required: the Python source to run")
	case int64(len(*req.Code)) > prof.MaxCodeBytes:
		return validation("code", "code is %d bytes; profile %q allows at most %d", len(*req.Code), prof.Name, prof.MaxCodeBytes)
	case int64(len(req.Stdin)) > prof.MaxStdinBytes:
		return validation("stdin", "stdin is %d bytes; profile %q allows at most %d", len(req.Stdin), prof.Name, prof.MaxStdinBytes)
	}
	if req.TimeoutMS != nil {
		switch v := *req.TimeoutMS; {
		case v > limits.TimeoutMS:
			return validation("timeout_ms", "%d is above the session's limit of %d ms; a call may only lower it", v, limits.TimeoutMS)
		case v < 1:
			return validation("timeout_ms", "%d is below the minimum of 1", v)
		}
		limits.TimeoutMS = *req.TimeoutMS
	}
	files, err := decodeFiles(prof, limits, req.Files)
	if err != nil {
		return err
	}
	xs = cmp.Or(xs, ls.auditSession())
	id := runner.NewExecID()
	spec := &runner.Spec{ID: id, Profile: prof, Limits: limits, Redact: s.execRedactor(prof), Job: jobproto.Job{
		Code: []byte(*req.Code), Stdin: []byte(req.Stdin), Files: files, TimeoutMS: limits.TimeoutMS, OutputBytes: limits.OutputBytes,
		MaxOutFileBytes: prof.Files.MaxOutputFileBytes, MaxOutTotalBytes: prof.Files.MaxOutputTotalBytes, MaxOutCount: prof.Files.MaxOutputCount}}
	j := &execJob{key: key, session: xs, spec: spec, id: id, origTimeout: limits.TimeoutMS,
		log: requestLogger(c, s.log).With("profile", prof.Name, "exec_id", id, "session", xs)}
	b, _ := json.Marshal(&req)
	h := sha256.Sum256(append(b, "|session="+ls.id...))
	j.reqHash = hex.EncodeToString(h[:])
	j.meta, j.started = metaOf(c), time.Now()
	j.meta.session = xs
	var res *runner.SessionResult
	j.auditHook = func(r *audit.Record, parts *[]capture.Part, meta map[string]string) {
		if r.Detail == nil {
			r.Detail = map[string]string{}
		}
		r.Detail["session_id"], r.Detail["sandbox_id"] = ls.id, ls.sandbox
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

	// From here every answer is audited, refusals included, as /exec's.
	if s.Frozen() {
		return s.send(c, s.auditExec(j, errAnswer(s.frozenError())))
	}
	release, cerr := ls.claim()
	if cerr != nil {
		return s.send(c, s.auditExec(j, errAnswer(cerr)))
	}
	defer release()
	ticket, refusal, err := s.ctl.limits.AdmitExec(c.Request().Context(), key.Tenant, xs, limits.TimeoutMS, limits.CPUs)
	if err != nil {
		j.log.Error("budget check failed", "err", err)
		return s.send(c, s.auditExec(j, errAnswer(&api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the usage store failed; retry later"})))
	}
	if refusal != nil {
		return s.send(c, s.auditExec(j, errAnswer(s.budgetError(refusal))))
	}
	j.ticket = ticket
	if ticket.TimeoutMS < spec.Limits.TimeoutMS {
		spec.Limits.TimeoutMS, spec.Job.TimeoutMS = ticket.TimeoutMS, ticket.TimeoutMS
	}
	live := s.startLive(c, j)
	var a *answer
	a, res = s.runSessionCall(live, j, ls)
	s.endLive(live)
	return s.send(c, s.auditExec(j, a))
}

// runSessionCall waits for a run slot and runs the call in the session.
func (s *Server) runSessionCall(live *liveExec, j *execJob, ls *liveSession) (*answer, *runner.SessionResult) {
	spec, m := j.spec, s.ctl.metrics
	profile := spec.Profile.Name
	queued := time.Now()
	release, err := s.cfg.Gate.Acquire(live.ctx)
	if err != nil {
		j.ticket.Cancel()
		if errors.Is(err, admit.ErrBusy) {
			m.Execs.WithLabelValues(profile, statusFailed).Inc()
			running, waiting, slots := s.cfg.Gate.Stats()
			return errAnswer(s.refusal(busyError(running, waiting, slots))), nil
		}
		return errAnswer(&api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the request ended while waiting for a run slot"}), nil
	}
	defer release()
	m.QueueSeconds.WithLabelValues(profile).Observe(time.Since(queued).Seconds())
	live.markStarted()
	// At shutdown and on a freeze the session ends with the call, rather
	// than being interrupted and kept.
	stop := context.AfterFunc(live.ctx, func() {
		if cause := context.Cause(live.ctx); errors.Is(cause, errShutdown) || s.Frozen() {
			s.endSession(ls, "the call was stopped: "+cause.Error())
		}
	})
	defer stop()

	call := &runner.SessionCall{ID: spec.ID, Code: spec.Job.Code, Stdin: spec.Job.Stdin, Files: spec.Job.Files,
		TimeoutMS: spec.Limits.TimeoutMS, OutputBytes: spec.Limits.OutputBytes, Redact: spec.Redact}
	begin := time.Now()
	res, err := ls.box.Exec(live.ctx, call)
	wall := time.Since(begin)
	if err != nil {
		switch {
		case errors.Is(err, runner.ErrSessionEnded):
			j.ticket.Cancel()
			s.endSession(ls, strings.TrimPrefix(err.Error(), runner.ErrSessionEnded.Error()+": "))
			ls.mu.Lock()
			reason := ls.endReason
			ls.mu.Unlock()
			return errAnswer(&api.Error{Status: http.StatusConflict, Code: api.CodeSessionEnded, Message: fmt.Sprintf("session %s has ended: %s; start a new one with POST /sessions", ls.id, reason)}), nil
		case errors.Is(err, runner.ErrEngine):
			j.ticket.Cancel()
			j.log.Error("session call failed", "err", err)
			s.endSession(ls, "the container engine failed")
			m.Execs.WithLabelValues(profile, statusFailed).Inc()
			return errAnswer(&api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the container engine failed to run the call; the session has ended"}), nil
		}
		j.log.Error("session call failed", "err", err)
		j.ticket.Finish(live.ctx, int64(float64(wall.Milliseconds())*spec.Limits.CPUs), wall.Milliseconds())
		m.Execs.WithLabelValues(profile, statusFailed).Inc()
		a := errAnswer(&api.Error{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: "internal error; the request id in X-Request-Id helps the operator find it in the log"})
		a.keep = true
		return a, nil
	}
	// A call stopped by a freeze or the shutdown ends its session (the
	// hook above may not have run yet), and the answer says so.
	if cause := context.Cause(live.ctx); cause != nil && (errors.Is(cause, errShutdown) || s.Frozen()) {
		s.endSession(ls, "the call was stopped: "+cause.Error())
	}
	ls.mu.Lock()
	res.Ended = res.Ended || ls.ended
	ls.mu.Unlock()
	cpu := res.ChargeCPU.Milliseconds()
	if cpu == 0 && (res.Status == runner.StatusTimeout || res.Status == runner.StatusKilled || res.Ended) {
		cpu = int64(float64(res.Duration.Milliseconds()) * spec.Limits.CPUs)
	}
	j.ticket.Finish(live.ctx, cpu, res.Duration.Milliseconds())
	m.Execs.WithLabelValues(profile, res.Status).Inc()
	m.RunSeconds.WithLabelValues(profile).Observe(res.Duration.Seconds())
	m.StartSeconds.WithLabelValues(profile).Observe(max(0, (wall - res.Duration).Seconds()))
	if res.Status == runner.StatusTimeout && j.ticket.LoweredBy != "" {
		res.Message += fmt.Sprintf(" (the limit was lowered from %d ms to what the %s budget had left)", j.origTimeout, j.ticket.LoweredBy)
	}
	ls.mu.Lock()
	ls.usage.Calls++
	ls.usage.CPUMS += cpu
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
		s.endSession(ls, reason)
	}
	j.log.Info("session call finished", "status", res.Status, "exit_code", res.ExitCode, "duration_ms", res.Duration.Milliseconds(),
		"state_lost", res.StateLost, "session_ended", res.Ended, "results", len(res.Results), "stdout_bytes", len(res.Stdout), "stderr_bytes", len(res.Stderr))
	return s.sessionAnswer(j, ls, res), res
}

// sessionAnswer builds the 200 of a session call.
func (s *Server) sessionAnswer(j *execJob, ls *liveSession, res *runner.SessionResult) *answer {
	resp := &api.SessionExecResponse{ExecResponse: *toResponse(j.spec, &res.Result), Results: []api.RichResult{}, StateLost: res.StateLost, SessionID: ls.id, SessionState: sessionReady}
	if eg := s.profiles().Egress[j.spec.Profile.Egress]; eg != nil {
		resp.Egress = &api.ProfileRef{Name: eg.Name, Version: eg.Version}
	}
	if res.Ended {
		resp.SessionState = sessionEnded
	}
	if e := res.Exception; e != nil {
		resp.Exception = &api.SessionException{Type: e.Type, Message: e.Message, Traceback: e.Traceback}
	}
	for _, r := range res.Results {
		resp.Results = append(resp.Results, richResult(r))
	}
	return &answer{status: http.StatusOK, resp: &resp.ExecResponse, body: marshalLine(resp), keep: true}
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

// sessionPutFiles serves POST /sessions/{id}/files.
func (s *Server) sessionPutFiles(c echo.Context) error {
	ls, err := s.lookupSession(c)
	if err != nil {
		return err
	}
	var req api.SessionFilesRequest
	if err := decodeJSON(c, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	if len(req.Files) == 0 {
		return validation("files", "files is required: [{\"path\": \"data.csv\", \"content\": \"<base64>\"}]")
	}
	files, err := decodeFiles(ls.profile, ls.limits, req.Files)
	if err != nil {
		return err
	}
	if s.Frozen() {
		return s.frozenError()
	}
	release, cerr := ls.claim()
	if cerr != nil {
		return cerr
	}
	defer release()
	if err := ls.box.PutFiles(c.Request().Context(), files); err != nil {
		return s.sessionFileError(ls, err)
	}
	resp := api.SessionFilesResponse{Files: []api.SessionFileRef{}}
	for _, f := range files {
		resp.Files = append(resp.Files, api.SessionFileRef{Path: f.Path, Size: int64(len(f.Content))})
	}
	requestLogger(c, s.log).Info("session files written", "files", len(files))
	if err := s.auditTransfer(c, ls, "files_put", files, nil, nil); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, resp)
}

// auditTransfer keeps a session's file transfer as a capture and appends
// its audit record (kind session, action files_put or file_get) before the
// answer: the files put are data the session's code sees, the file got is
// what the agent read out of the sandbox. A failed capture is noted in the
// record, as an exec's; a failed append withholds the answer.
func (s *Server) auditTransfer(c echo.Context, ls *liveSession, action string, in, out []jobproto.File, red map[string]int) error {
	m := metaOf(c)
	m.session = ls.auditSession()
	r := m.record(audit.KindSession)
	r.Action, r.Subject, r.Status = action, ls.id, "ok"
	r.ExecProfile = &audit.ProfileRef{Name: ls.profile.Name, Version: ls.profile.Version}
	r.Redactions = red
	r.Detail = map[string]string{"sandbox_id": ls.sandbox}
	meta := map[string]string{"session_id": ls.id, "action": action}
	var parts []capture.Part
	for i, f := range in {
		r.Inputs = append(r.Inputs, keepFile(&parts, meta, "input", i, f.Path, f.Content))
	}
	for i, f := range out {
		r.Outputs = append(r.Outputs, keepFile(&parts, meta, "output", i, f.Path, f.Content))
	}
	capt := &capture.Capture{Kind: "session_files", Tenant: r.Tenant, KeyID: r.KeyID, RequestID: r.RequestID, Meta: meta, Parts: parts,
		Retention: days(ls.profile.CaptureRetentionDays)}
	if err := s.captures.Put(context.Background(), capt); err != nil {
		requestLogger(c, s.log).Error("storing the session transfer's capture failed", "session_id", ls.id, "err", err)
		r.Detail["capture_error"] = err.Error()
	} else {
		r.CaptureIDs = []string{capt.ID}
	}
	what := "the upload of files into session " + ls.id
	if action == "file_get" {
		what = "reading a file of session " + ls.id
	}
	return s.auditEvent(c, r, what)
}

// sessionGetFile serves GET /sessions/{id}/files/{path}: one file under
// /sandbox, within the profile's per-file cap, text redacted as /exec's
// returned files are.
func (s *Server) sessionGetFile(c echo.Context) error {
	ls, err := s.lookupSession(c)
	if err != nil {
		return err
	}
	// The decoded path: a nested one may come with its slashes escaped.
	path := strings.TrimPrefix(c.Request().URL.Path, "/sessions/"+ls.id+"/files/")
	if err := jobproto.CheckPath(path); err != nil {
		return validation("path", "%q: %v", path, err)
	}
	release, cerr := ls.claim()
	if cerr != nil {
		return cerr
	}
	defer release()
	f, reason, err := ls.box.GetFile(c.Request().Context(), path, ls.profile.Files.MaxOutputFileBytes)
	switch {
	case errors.Is(err, runner.ErrNoFile):
		return &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound, Message: fmt.Sprintf("no file /sandbox/%s in session %s", path, ls.id)}
	case err != nil:
		return s.sessionFileError(ls, err)
	case reason != "":
		return &api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeFileUnavailable, Message: fmt.Sprintf("/sandbox/%s is not returned: %s", path, reason)}
	}
	content := f.Content
	var red map[string]int
	if utf8.Valid(content) {
		content, red = s.execRedactor(ls.profile).Bytes(content)
	}
	if err := s.auditTransfer(c, ls, "file_get", nil, []jobproto.File{{Path: path, Content: content}}, red); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.OutFile{Path: path, Size: int64(len(content)), Mode: fmt.Sprintf("%04o", f.Mode), Content: base64.StdEncoding.EncodeToString(content)})
}

func (s *Server) sessionFileError(ls *liveSession, err error) error {
	if errors.Is(err, runner.ErrSessionEnded) {
		s.endSession(ls, strings.TrimPrefix(err.Error(), runner.ErrSessionEnded.Error()+": "))
		ls.mu.Lock()
		reason := ls.endReason
		ls.mu.Unlock()
		return &api.Error{Status: http.StatusConflict, Code: api.CodeSessionEnded, Message: fmt.Sprintf("session %s has ended: %s; start a new one with POST /sessions", ls.id, reason)}
	}
	if errors.Is(err, context.Canceled) {
		return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the request ended during the file transfer"}
	}
	return &api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeFileUnavailable, Message: "the file could not be written: " + err.Error()}
}
