package control

import (
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
	return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the usage store failed; retry later"}
}

// Internal is the 500 of a bug; the request id finds it in the log.
func Internal() *api.Error {
	return &api.Error{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: "internal error; the request id in X-Request-Id helps the operator find it in the log"}
}

// Unavailable is a 503 UNAVAILABLE with msg.
func Unavailable(msg string) *api.Error {
	return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: msg}
}
