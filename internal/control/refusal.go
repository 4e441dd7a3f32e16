package control

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/control/budget"
)

// Refusal counts a control-plane refusal and returns it.
func (p *Plane) Refusal(e *api.Error) *api.Error {
	p.cfg.Metrics.Refusals.WithLabelValues(e.Code, e.Budget).Inc()
	return e
}

// BudgetError turns a limiter refusal into a counted 429.
func (p *Plane) BudgetError(r *budget.Refusal) *api.Error {
	limit, used := r.Limit, r.Used
	e := &api.Error{Status: http.StatusTooManyRequests, Code: r.Code, Message: r.Message, Budget: r.Budget, Limit: &limit}
	if r.Code == budget.CodeBudgetExceeded || r.Budget == budget.TenantConcurrentExecs {
		e.Used = &used
	}
	if r.RetryAfter > 0 {
		e.RetryAfter = int((r.RetryAfter + time.Second - 1) / time.Second)
	}
	return p.Refusal(e)
}

// busyError is the 429 BUSY of full run slots and queue.
func busyError(running, waiting, slots int) *api.Error {
	return &api.Error{Status: http.StatusTooManyRequests, Code: api.CodeBusy, RetryAfter: 1 + waiting/max(slots, 1),
		Message: fmt.Sprintf("all %d run slots are busy (%d running, %d waiting); retry after the Retry-After seconds", slots, running, waiting)}
}

// GateBusy is busyError with the gate's current figures, counted.
func (p *Plane) GateBusy() *api.Error {
	running, waiting, slots := p.cfg.Gate.Stats()
	return p.Refusal(busyError(running, waiting, slots))
}

// StoreFailed is the 503 of a usage store that failed a budget check.
func StoreFailed() *api.Error {
	return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, RetryAfter: stateRetryAfter,
		Message: "the usage store failed, so nothing ran; retry after the Retry-After seconds"}
}

// Internal is the 500 of a bug; the request id finds it in the log.
func Internal() *api.Error {
	return &api.Error{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: "internal error; the request id in X-Request-Id helps the operator find it in the log"}
}

// Unavailable is a 503 UNAVAILABLE with msg.
func Unavailable(msg string) *api.Error {
	return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: msg}
}

// stateRetryAfter is the Retry-After of a 503 for state that could not be
// read or written: long enough for a database to fail over or restart.
const stateRetryAfter = 2

// StateUnavailable is the 503 of a request that needs state the store
// could not give (in a fleet, the shared PostgreSQL stopped answering):
// nothing ran, and a retry after Retry-After seconds may succeed.
func StateUnavailable(what string, err error) *api.Error {
	return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, RetryAfter: stateRetryAfter,
		Message: fmt.Sprintf("sandboxd could not %s: its state store did not answer (%v); nothing ran: retry after the Retry-After seconds", what, err)}
}

// AllowRequest takes one of tenant's request tokens of kind: nil, the 429
// RATE_LIMITED refusal, or a 503 when the state store did not answer.
func (p *Plane) AllowRequest(ctx context.Context, tenant, kind string) *api.Error {
	r, err := p.cfg.Limits.AllowRequest(ctx, tenant, kind)
	if err != nil {
		p.cfg.Log.Error("rate limit check failed", "tenant", tenant, "err", err)
		return p.Refusal(StateUnavailable("check the tenant's request rate", err))
	}
	if r != nil {
		return p.BudgetError(r)
	}
	return nil
}
