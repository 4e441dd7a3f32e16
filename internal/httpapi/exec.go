package httpapi

import (
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/control/budget"
	"github.com/sandboxd/sandboxd/internal/execflow"
)

// toolCall is what every POST /exec and /fetch starts with: the key, the
// tenant's request rate, X-Session-Id, Idempotency-Key and the body.
type toolCall struct {
	r       *request
	session string
	idemKey string
}

// startCall takes one request of kind from the tenant's rate, checks the
// headers and decodes the body into req.
func (s *Server) startCall(c echo.Context, kind string, req any) (*toolCall, error) {
	tc := &toolCall{r: reqOf(c)}
	if e := s.plane.AllowRequest(c.Request().Context(), tc.r.key.Tenant, kind); e != nil {
		return nil, e
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

// exec serves POST /exec: as JSON, as a stream of events, or async.
func (s *Server) exec(c echo.Context) error {
	var req api.ExecRequest
	tc, err := s.startCall(c, budget.KindExec, &req)
	if err != nil {
		return err
	}
	spec, err := s.flow.Spec(&req)
	if err != nil {
		return err
	}
	datasets, err := s.flow.AttachDatasets(spec, req.Datasets, tc.r.key)
	if err != nil {
		return err
	}
	if err := s.flow.AttachSecrets(spec, req.Secrets, tc.r.key); err != nil {
		return err
	}
	tc.r.profile = spec.Profile.Name
	j := &execflow.Job{Key: tc.r.key, Session: tc.session, IdemKey: tc.idemKey, Async: req.Async, Spec: spec, ID: spec.ID,
		OrigTimeout: spec.Limits.TimeoutMS, Log: tc.r.log.With("profile", spec.Profile.Name, "exec_id", spec.ID),
		Who: tc.r.who(tc.session), Started: time.Now(), Datasets: datasets}
	if tc.session != "" {
		j.Log = j.Log.With("session", tc.session)
	}
	j.Call, j.ReqHash = execflow.Fingerprints(&req, tc.session)
	ctx := c.Request().Context()
	if wantsStream(c) {
		switch {
		case req.Async:
			return api.Validation("async", "async and Accept: text/event-stream exclude each other: stream the output, or run async and poll GET /exec/{id}")
		case tc.idemKey != "":
			return api.Validation(control.HeaderIdempotencyKey, "an Idempotency-Key cannot be combined with Accept: text/event-stream (a stream cannot be replayed); send the key with a JSON request")
		}
		st := newExecStream(c, spec.Redact, spec.Limits.OutputBytes)
		spec.OnOutput = st.feed
		return s.finishStream(c, st, s.flow.Do(ctx, j))
	}
	if tc.idemKey != "" {
		return s.send(c, s.flow.DoIdempotent(ctx, j))
	}
	return s.send(c, s.flow.Do(ctx, j))
}
