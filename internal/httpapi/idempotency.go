package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Idempotency headers.
const (
	headerIdempotencyKey = "Idempotency-Key"
	headerReplayed       = "Idempotent-Replayed"
)

var idemKeyPattern = regexp.MustCompile(`^[\x21-\x7e]{1,255}$`)

// idempotencyKey returns the Idempotency-Key header, checked.
func idempotencyKey(c echo.Context) (string, error) {
	vals := c.Request().Header.Values(headerIdempotencyKey)
	switch {
	case len(vals) == 0:
		return "", nil
	case len(vals) > 1:
		return "", validation(headerIdempotencyKey, "send one Idempotency-Key header, not %d", len(vals))
	case !idemKeyPattern.MatchString(vals[0]):
		return "", validation(headerIdempotencyKey, "the Idempotency-Key must be 1 to 255 visible ASCII characters (a UUID is a good choice)")
	}
	return vals[0], nil
}

// idemPoll is how often a request waiting for an in-flight key looks at
// the store, besides being woken when this process finishes a key.
const idemPoll = 250 * time.Millisecond

// idemCall is a keyed request on its way through idempotency: its tenant,
// key, request fingerprint and the id (exec or fetch) it runs under.
type idemCall struct {
	kind    string // "exec" or "fetch", for messages
	tenant  string
	key     string
	reqHash string
	id      string
	log     *slog.Logger
}

// execIdempotent serves an exec with an Idempotency-Key.
func (s *Server) execIdempotent(c echo.Context, j *execJob) error {
	j.log = j.log.With("idempotency_key_sha256", shortHash(j.idemKey))
	ic := &idemCall{kind: "exec", tenant: j.key.Tenant, key: j.idemKey, reqHash: j.reqHash, id: j.id, log: j.log}
	return s.idempotent(c, ic, func() *answer { return s.admitRunAudit(c, j) })
}

// idempotent serves a request with an Idempotency-Key: the first request
// with the key runs; a later one with the same request gets the stored
// answer (Idempotent-Replayed: true) without running anything, or waits
// for the first to finish, or is refused.
func (s *Server) idempotent(c echo.Context, ic *idemCall, run func() *answer) error {
	ctx := c.Request().Context()
	deadline := time.NewTimer(s.ctl.cfg.IdempotencyWait)
	defer deadline.Stop()
	for {
		woken := s.ctl.idemWaitChan() // before the read, so no wake-up is lost
		now := time.Now()
		rec, claimed, err := s.ctl.store.ClaimIdempotency(ctx, &store.IdemRecord{
			Tenant: ic.tenant, Key: ic.key, RequestSHA256: ic.reqHash, ExecID: ic.id, Owner: s.ctl.cfg.Owner,
			CreatedAt: now, ExpiresAt: now.Add(s.ctl.cfg.IdempotencyTTL)})
		if err != nil {
			if ctx.Err() != nil {
				return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the request ended before its Idempotency-Key was checked"}
			}
			ic.log.Error("idempotency store failed", "err", err)
			return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the idempotency store failed, so the request was not run; retry later with the same Idempotency-Key"}
		}
		if claimed {
			a := run()
			s.finishClaim(ic, a)
			return s.send(c, a)
		}
		if rec.RequestSHA256 != ic.reqHash {
			return s.refusal(&api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeIdempotencyMismatch, Field: headerIdempotencyKey,
				Message: fmt.Sprintf("this Idempotency-Key was first used at %s with a different request (endpoint, body, or X-Session-Id); a key names one request: send a new key for a new request", rec.CreatedAt.Format(time.RFC3339))})
		}
		switch rec.State {
		case store.IdemDone:
			return s.replay(c, ic, rec)
		case store.IdemInterrupted:
			effect := "the code may have run in part or in full, and it is not run again. Check for its effects"
			if ic.kind == "fetch" {
				effect = "the page may have been requested, and it is not requested again"
			}
			return s.refusal(&api.Error{Status: http.StatusConflict, Code: api.CodeInterrupted,
				Message: fmt.Sprintf("the first request with this Idempotency-Key (%s %s, %s) was in flight when sandboxd stopped; %s; to run it again, send a new Idempotency-Key", ic.kind, rec.ExecID, rec.CreatedAt.Format(time.RFC3339), effect)})
		}
		// In flight: wait for it, bounded.
		poll := time.NewTimer(idemPoll)
		select {
		case <-woken:
		case <-poll.C:
		case <-deadline.C:
			poll.Stop()
			return s.refusal(&api.Error{Status: http.StatusConflict, Code: api.CodeInProgress, RetryAfter: 1,
				Message: fmt.Sprintf("the first request with this Idempotency-Key (%s %s) is still running after %s; retry with the same key to get its result", ic.kind, rec.ExecID, s.ctl.cfg.IdempotencyWait)})
		case <-ctx.Done():
			poll.Stop()
			return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the request ended while waiting for the first request with its Idempotency-Key"}
		}
		poll.Stop()
	}
}

// finishClaim stores a keyed exec's answer, or releases the key when the
// exec was refused before anything ran.
func (s *Server) finishClaim(j *idemCall, a *answer) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer s.ctl.idemNotify()
	if !a.keep {
		if err := s.ctl.store.ReleaseIdempotency(ctx, j.tenant, j.key, s.ctl.cfg.Owner); err != nil {
			j.log.Error("releasing an idempotency key failed; retries wait for it and then get 409 IN_PROGRESS until a restart", "err", err)
		}
		return
	}
	if err := s.ctl.store.CompleteIdempotency(ctx, j.tenant, j.key, a.status, a.body); err != nil {
		j.log.Error("storing an idempotent answer failed; retries get 409 IN_PROGRESS until a restart, then INTERRUPTED", "err", err)
	}
}

// replay sends a stored answer.
func (s *Server) replay(c echo.Context, j *idemCall, rec *store.IdemRecord) error {
	s.ctl.metrics.IdempotentReplays.Inc()
	j.log.Info("idempotent replay", "first_id", rec.ExecID, "status", rec.Status)
	h := c.Response().Header()
	h.Set(headerReplayed, "true")
	if rec.Status == http.StatusAccepted {
		var st api.ExecState
		if json.Unmarshal(rec.Body, &st) == nil && st.ID != "" {
			h.Set("Location", "/exec/"+st.ID)
		}
	}
	var body struct {
		Status string     `json:"status"`
		Error  *api.Error `json:"error"`
	}
	if json.Unmarshal(rec.Body, &body) == nil {
		if body.Error != nil {
			c.Set(ctxErrorCode, body.Error.Code)
		} else {
			c.Set(ctxRunStatus, body.Status)
		}
	}
	return c.Blob(rec.Status, echo.MIMEApplicationJSONCharsetUTF8, rec.Body)
}

// shortHash names a key in logs without logging the key.
func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}
