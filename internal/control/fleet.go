package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Fleet timing. A replica beats every beatEvery; the kill switch is read
// as often, so a freeze on one replica stops new work on all within about
// beatEvery plus a request's own check; dead members' work is recovered
// every recoverEvery (store.Postgres.DeadAfter says when a member is dead).
const (
	beatEvery    = time.Second
	recoverEvery = 5 * time.Second
)

// fleet is a plane's membership in a fleet of replicas sharing a store.
type fleet struct {
	sh   store.Shared
	done chan struct{}
	// lastErr is the last beat's error (nil: the store answered), for
	// readiness.
	lastErr atomic.Pointer[error]
	// freezeRaw is the kill switch as last read, to log changes once.
	freezeRaw string
}

// joinFleet makes the plane a fleet member: budgets and the loop guard
// count in the shared store, and a loop beats, follows the kill switch
// other replicas set, and recovers dead replicas' work.
func (p *Plane) joinFleet(ctx context.Context, sh store.Shared) {
	f := &fleet{sh: sh, done: make(chan struct{})}
	p.fleet = f
	p.cfg.Limits.Share(sh, p.cfg.Owner)
	p.guard.Share(sh)
	if b, err := json.Marshal(p.frozen.Load()); err == nil {
		f.freezeRaw = string(b)
	}
	f.beat(ctx, p)
	go func() {
		defer close(f.done)
		t := time.NewTicker(beatEvery)
		defer t.Stop()
		lastRecover := time.Time{}
		for {
			select {
			case <-ctx.Done():
				lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = sh.Leave(lctx, p.cfg.Owner)
				cancel()
				return
			case <-t.C:
			}
			f.beat(ctx, p)
			if time.Since(lastRecover) >= recoverEvery {
				lastRecover = time.Now()
				p.recoverDead(ctx)
			}
		}
	}()
}

// beat records this member alive and reads the fleet's kill switch.
func (f *fleet) beat(ctx context.Context, p *Plane) {
	bctx, cancel := context.WithTimeout(ctx, beatEvery*2)
	defer cancel()
	err := f.sh.Beat(bctx, store.Member{Owner: p.cfg.Owner, Replica: p.cfg.Replica, Addr: p.cfg.Addr})
	if err == nil {
		err = f.followFreeze(bctx, p)
	}
	prev := f.lastErr.Swap(&err)
	switch {
	case err != nil && (prev == nil || *prev == nil):
		p.cfg.Log.Error("the shared state store stopped answering; requests that need state answer 503 until it is back", "err", err)
	case err == nil && prev != nil && *prev != nil:
		p.cfg.Log.Info("the shared state store answers again")
	}
}

// followFreeze takes the kill switch another replica set (or lifted).
func (f *fleet) followFreeze(ctx context.Context, p *Plane) error {
	v, ok, err := p.cfg.Store.Setting(ctx, freezeSetting)
	if err != nil || !ok || v == f.freezeRaw {
		return err
	}
	st := &api.FreezeState{}
	if err := json.Unmarshal([]byte(v), st); err != nil {
		st = &api.FreezeState{Frozen: true, Since: time.Now().UTC(), By: "sandboxd", Reason: "the stored kill switch was malformed"}
	}
	f.freezeRaw = v
	was := p.frozen.Load().Frozen
	p.frozen.Store(st)
	if st.Frozen != was {
		p.cfg.Log.Warn("the kill switch changed on another replica", "frozen", st.Frozen, "by", st.By, "reason", st.Reason)
	}
	return nil
}

// recoverDead marks the in-flight work of replicas that stopped beating
// as interrupted (their keys answer 409 INTERRUPTED), and ends their
// sessions, whichever replica notices first.
func (p *Plane) recoverDead(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := p.cfg.Store.Recover(rctx, p.cfg.Owner)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			p.cfg.Log.Error("recovering dead replicas' work failed", "err", err)
		}
		return
	}
	if st.Idempotency+st.Execs+st.Sessions > 0 {
		p.cfg.Log.Warn("took over the work of replicas that stopped answering", "idempotency_keys", st.Idempotency, "async_execs", st.Execs, "sessions", st.Sessions)
	}
}

// StateError says why the state store cannot serve (nil when it can): in a
// fleet, the last beat's failure. /readyz fails with it.
func (p *Plane) StateError() error {
	if p.fleet == nil {
		return nil
	}
	if e := p.fleet.lastErr.Load(); e != nil && *e != nil {
		return fmt.Errorf("the shared state store does not answer: %w", *e)
	}
	return nil
}

// Shared is the fleet's shared store, or nil on a single host.
func (p *Plane) Shared() store.Shared {
	if p.fleet == nil {
		return nil
	}
	return p.fleet.sh
}

// Replica is this replica's name.
func (p *Plane) Replica() string { return p.cfg.Replica }

// Addr is this replica's API base URL for other replicas.
func (p *Plane) Addr() string { return p.cfg.Addr }
