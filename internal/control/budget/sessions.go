package budget

import "fmt"

// TenantMaxSessions is the budget name of the cap on a tenant's open
// sessions.
const TenantMaxSessions = "tenant.max_sessions"

// AdmitSession checks that tenant, which has open sessions already, may
// open one more (Limits.MaxSessions; 0 is no limit).
func (l *Limiter) AdmitSession(tenant string, open int) *Refusal {
	limit := l.cfg.For(tenant).MaxSessions
	if limit <= 0 || open < limit {
		return nil
	}
	return &Refusal{Code: CodeBudgetExceeded, Budget: TenantMaxSessions, Limit: float64(limit), Used: float64(open),
		Message: fmt.Sprintf("tenant %s has %d sessions open, its limit; end one (DELETE /sessions/{id}) or wait for one to expire", tenant, open)}
}
