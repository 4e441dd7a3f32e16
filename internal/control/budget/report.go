package budget

import (
	"context"
	"math"

	"github.com/sandboxd/sandboxd/api"
)

func budget(name string, limit, used float64, unit string) api.UsageBudget {
	b := api.UsageBudget{Name: name, Limit: limit, Used: math.Round(used*1000) / 1000, Unit: unit}
	if limit > 0 {
		r := math.Max(0, math.Round((limit-used)*1000)/1000)
		b.Remaining = &r
	}
	return b
}

// TenantUsage reports tenant's use today against each tenant budget.
func (l *Limiter) TenantUsage(ctx context.Context, tenant string) (*api.TenantUsageReport, error) {
	if err := l.load(ctx, tenant, ""); err != nil {
		return nil, err
	}
	lim := l.cfg.For(tenant)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	ts := l.tenants[tenant]
	rateUsed := func(kind string, rate float64) float64 {
		b := l.buckets[kind+"\x00"+tenant]
		if b == nil || rate <= 0 {
			return 0
		}
		tokens := math.Min(lim.burst(rate), b.tokens+now.Sub(b.last).Seconds()*rate/60)
		return lim.burst(rate) - tokens
	}
	r := &api.TenantUsageReport{Tenant: tenant, Day: ts.day, Used: api.UsageTotals{
		Execs: ts.used.Execs, Running: int64(ts.running), CPUSeconds: float64(ts.used.CPUMillis) / 1000,
		WallSeconds: float64(ts.used.WallMillis) / 1000, FetchBytes: ts.used.FetchBytes}}
	r.Budgets = []api.UsageBudget{
		budget(TenantExecRate, lim.ExecPerMinute, rateUsed(KindExec, lim.ExecPerMinute), "requests per minute (token bucket: used = tokens taken and not yet refilled)"),
		budget(TenantFetchRate, lim.FetchPerMinute, rateUsed(KindFetch, lim.FetchPerMinute), "requests per minute (token bucket: used = tokens taken and not yet refilled)"),
		budget(TenantConcurrentExecs, float64(lim.ConcurrentExecs), float64(ts.running), "execs queued or running"),
		budget(TenantDailyCPU, lim.DailyCPUSeconds, float64(ts.used.CPUMillis)/1000, "CPU-seconds today (UTC)"),
		budget(TenantDailyFetchBytes, float64(lim.DailyFetchBytes), float64(ts.used.FetchBytes), "bytes fetched today (UTC)"),
	}
	return r, nil
}

// SessionUsage reports a session's use against each session budget.
func (l *Limiter) SessionUsage(ctx context.Context, tenant, session string) (*api.SessionUsageReport, error) {
	if err := l.load(ctx, tenant, session); err != nil {
		return nil, err
	}
	lim := l.cfg.For(tenant).Session
	l.mu.Lock()
	defer l.mu.Unlock()
	ss := l.sessions[sessionKey(tenant, session)]
	u := ss.used
	r := &api.SessionUsageReport{Tenant: tenant, Session: session, Used: api.UsageTotals{
		Execs: u.Execs, Running: ss.pending, CPUSeconds: float64(u.CPUMillis) / 1000,
		WallSeconds: float64(u.WallMillis) / 1000, FetchBytes: u.FetchBytes}}
	r.Budgets = []api.UsageBudget{
		budget(SessionMaxExecs, float64(lim.MaxExecs), float64(u.Execs+ss.pending), "execs (finished and running)"),
		budget(SessionCPU, lim.CPUSeconds, float64(u.CPUMillis)/1000, "CPU-seconds"),
		budget(SessionWall, lim.WallSeconds, float64(u.WallMillis)/1000, "wall-clock seconds of running code"),
		budget(SessionFetchBytes, float64(lim.FetchBytes), float64(u.FetchBytes), "bytes fetched"),
	}
	return r, nil
}
