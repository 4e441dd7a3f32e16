package budget

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
)

// Share makes the limiter keep its rate buckets, budget holds and usage
// in a fleet's shared store instead of this process's memory, so that a
// tenant's limits are exact across every replica; owner names this
// process in its holds (a dead replica's holds are dropped by the store's
// Recover).
func (l *Limiter) Share(sh store.Shared, owner string) {
	l.shared, l.owner = sh, owner
}

// Shared reports whether the limiter counts in a shared store.
func (l *Limiter) Shared() bool { return l.shared != nil }

func newHoldID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "hold_" + hex.EncodeToString(b[:])
}

// admitShared is AdmitExec in a fleet: the rule (decide) runs inside the
// store's admission transaction for the tenant.
func (l *Limiter) admitShared(ctx context.Context, tenant, session string, timeoutMS int64, cpus float64) (*Ticket, *Refusal, error) {
	lim := l.cfg.For(tenant)
	now := l.now()
	today := day(now)
	var a admission
	hold, err := l.shared.Admit(ctx, tenant, session, today, func(v store.BudgetView) *store.Hold {
		a = decide(lim, tenant, session, today, v, timeoutMS, cpus, now)
		if a.refusal != nil {
			return nil
		}
		return &store.Hold{ID: newHoldID(), Tenant: tenant, Session: session, Day: today, CPUMS: a.cpuMS, WallMS: a.wallMS, Owner: l.owner, CreatedAt: now}
	})
	if err != nil {
		return nil, nil, err
	}
	if hold == nil {
		return nil, a.refusal, nil
	}
	return &Ticket{l: l, tenant: tenant, session: session, day: today, TimeoutMS: a.timeoutMS, LoweredBy: a.loweredBy,
		cpuMS: a.cpuMS, wallMS: a.wallMS, hold: hold}, nil, nil
}

// releaseShared ends a shared ticket's hold, charging u (nil for a run
// that never started) in the same transaction.
func (l *Limiter) releaseShared(ctx context.Context, t *Ticket, u *store.Usage) {
	l.mu.Lock()
	if t.done {
		l.mu.Unlock()
		return
	}
	t.done = true
	l.mu.Unlock()
	var deltas []store.UsageDelta
	if u != nil {
		deltas = append(deltas, store.UsageDelta{Scope: store.ScopeTenantDay, Tenant: t.tenant, Name: t.day, Usage: *u})
		if t.session != "" {
			deltas = append(deltas, store.UsageDelta{Scope: store.ScopeSession, Tenant: t.tenant, Name: t.session, Usage: *u})
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := l.shared.ReleaseHold(ctx, t.hold.ID, deltas...); err != nil {
		// The hold stays until this replica's owner is recovered as dead
		// or restarts; the usage is lost. Both are logged for the operator.
		l.log.Error("releasing a budget hold in the shared store failed; its CPU stays held until this replica restarts", "tenant", t.tenant, "hold", t.hold.ID, "err", err)
	}
}
