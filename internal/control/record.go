package control

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
)

// appendTimeout bounds one durable append.
const appendTimeout = 30 * time.Second

// Append writes r durably, at most appendTimeout.
func (p *Plane) Append(r *audit.Record) error {
	ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
	defer cancel()
	return p.cfg.Audit.Append(ctx, r)
}

// Recorded writes r durably and returns a; on failure a result is
// replaced by a 503 that says the action (what) happened and its result is
// withheld (kept for an Idempotency-Key, so a retry does not act twice).
// An error answer (a refusal, a failure) carries no result to withhold:
// it goes out as it is, its missing record logged.
func (p *Plane) Recorded(r *audit.Record, a *Answer, what string) *Answer {
	if err := p.Append(r); err != nil {
		if a.Err != nil {
			p.cfg.Log.Error("writing the audit record of an error answer failed; the error is answered without its record", "kind", r.Kind, "subject", r.Subject, "code", a.Err.Code, "err", err)
			return a
		}
		p.cfg.Log.Error("writing an audit record failed; the answer is withheld", "kind", r.Kind, "subject", r.Subject, "err", err)
		e := ErrAnswer(auditUnavailable(what))
		e.Keep = a.Keep
		return e
	}
	return a
}

// auditUnavailable is the 503 of an action whose record could not be
// written.
func auditUnavailable(what string) *api.Error {
	return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeAuditUnavailable,
		Message: fmt.Sprintf("%s finished, but its audit record could not be written, so its result is withheld; the operator must repair the audit log (the request id names it in the log)", what)}
}

// RecordEvent writes the record of an action that has taken effect (an
// admin action, a hold, a session start, a file transfer). On failure it
// logs to log and returns the 503 to answer: the action stands, its record
// is missing.
func (p *Plane) RecordEvent(r *audit.Record, what string, log interface{ Error(string, ...any) }) *api.Error {
	if err := p.Append(r); err != nil {
		log.Error("writing an audit record failed", "kind", r.Kind, "err", err)
		return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeAuditUnavailable,
			Message: fmt.Sprintf("%s took effect, but its audit record could not be written; the operator must repair the audit log", what)}
	}
	return nil
}
