package budget

import (
	"context"
	"math"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/store"
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
	lim := l.cfg.For(tenant)
	now := l.now()
	today := day(now)
	var used store.Usage
	var running int
	// tokensTaken is how many of a bucket's tokens are taken and not yet
	// refilled.
	var tokensTaken func(kind string, rate float64) (float64, error)
	if l.shared != nil {
		v, err := l.shared.View(ctx, tenant, "", today)
		if err != nil {
			return nil, err
		}
		used, running = v.Tenant, v.Running
		tokensTaken = func(kind string, rate float64) (float64, error) {
			if rate <= 0 {
				return 0, nil
			}
			t, err := l.shared.Tokens(ctx, kind+"|"+tenant, rate/60, lim.burst(rate), now)
			return lim.burst(rate) - t, err
		}
	} else {
		if err := l.load(ctx, tenant, ""); err != nil {
			return nil, err
		}
		l.mu.Lock()
		ts := l.tenants[tenant]
		used, running, today = ts.used, ts.running, ts.day
		buckets := map[string]bucket{}
		for _, kind := range []string{KindExec, KindFetch} {
			if b := l.buckets[kind+"\x00"+tenant]; b != nil {
				buckets[kind] = *b
			}
		}
		l.mu.Unlock()
		tokensTaken = func(kind string, rate float64) (float64, error) {
			b, ok := buckets[kind]
			if !ok || rate <= 0 {
				return 0, nil
			}
			tokens := math.Min(lim.burst(rate), b.tokens+now.Sub(b.last).Seconds()*rate/60)
			return lim.burst(rate) - tokens, nil
		}
	}
	execTaken, err := tokensTaken(KindExec, lim.ExecPerMinute)
	if err != nil {
		return nil, err
	}
	fetchTaken, err := tokensTaken(KindFetch, lim.FetchPerMinute)
	if err != nil {
		return nil, err
	}
	r := &api.TenantUsageReport{Tenant: tenant, Day: today, Used: api.UsageTotals{
		Execs: used.Execs, Running: int64(running), CPUSeconds: float64(used.CPUMillis) / 1000,
		WallSeconds: float64(used.WallMillis) / 1000, FetchBytes: used.FetchBytes}}
	r.Budgets = []api.UsageBudget{
		budget(TenantExecRate, lim.ExecPerMinute, execTaken, "requests per minute (token bucket: used = tokens taken and not yet refilled)"),
		budget(TenantFetchRate, lim.FetchPerMinute, fetchTaken, "requests per minute (token bucket: used = tokens taken and not yet refilled)"),
		budget(TenantConcurrentExecs, float64(lim.ConcurrentExecs), float64(running), "execs queued or running"),
		budget(TenantDailyCPU, lim.DailyCPUSeconds, float64(used.CPUMillis)/1000, "CPU-seconds today (UTC)"),
		budget(TenantDailyFetchBytes, float64(lim.DailyFetchBytes), float64(used.FetchBytes), "bytes fetched today (UTC)"),
	}
	return r, nil
}

// SessionUsage reports a session's use against each session budget.
func (l *Limiter) SessionUsage(ctx context.Context, tenant, session string) (*api.SessionUsageReport, error) {
	var u store.Usage
	var pending int64
	if l.shared != nil {
		v, err := l.shared.View(ctx, tenant, session, day(l.now()))
		if err != nil {
			return nil, err
		}
		u, pending = v.Session, v.Pending
	} else {
		if err := l.load(ctx, tenant, session); err != nil {
			return nil, err
		}
		l.mu.Lock()
		ss := l.sessions[sessionKey(tenant, session)]
		u, pending = ss.used, ss.pending
		l.mu.Unlock()
	}
	lim := l.cfg.For(tenant).Session
	r := &api.SessionUsageReport{Tenant: tenant, Session: session, Used: api.UsageTotals{
		Execs: u.Execs, Running: pending, CPUSeconds: float64(u.CPUMillis) / 1000,
		WallSeconds: float64(u.WallMillis) / 1000, FetchBytes: u.FetchBytes}}
	r.Budgets = []api.UsageBudget{
		budget(SessionMaxExecs, float64(lim.MaxExecs), float64(u.Execs+pending), "execs (finished and running)"),
		budget(SessionCPU, lim.CPUSeconds, float64(u.CPUMillis)/1000, "CPU-seconds"),
		budget(SessionWall, lim.WallSeconds, float64(u.WallMillis)/1000, "wall-clock seconds of running code"),
		budget(SessionFetchBytes, float64(lim.FetchBytes), float64(u.FetchBytes), "bytes fetched"),
	}
	return r, nil
}
