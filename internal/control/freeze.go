package control

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// freezeSetting is the store setting that holds the kill switch.
const freezeSetting = "freeze"

// loadFreeze reads the stored kill switch. Fail safe: a kill switch that
// cannot be read, or is malformed, is on.
func (p *Plane) loadFreeze() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := &api.FreezeState{}
	if v, ok, err := p.cfg.Store.Setting(ctx, freezeSetting); err != nil {
		p.cfg.Log.Error("reading the kill switch from the store failed; starting frozen (POST /admin/unfreeze lifts it)", "err", err)
		st = &api.FreezeState{Frozen: true, Since: time.Now().UTC(), By: "sandboxd", Reason: "the stored kill switch could not be read at start-up"}
	} else if ok {
		if err := json.Unmarshal([]byte(v), st); err != nil {
			p.cfg.Log.Error("the stored kill switch is malformed; starting frozen", "err", err)
			st = &api.FreezeState{Frozen: true, Since: time.Now().UTC(), By: "sandboxd", Reason: "the stored kill switch was malformed"}
		}
	}
	p.frozen.Store(st)
	if st.Frozen {
		p.cfg.Log.Warn("sandboxd is frozen: every new exec answers 503 FROZEN until POST /admin/unfreeze", "since", st.Since, "by", st.By, "reason", st.Reason)
	}
}

// FreezeState returns the kill switch's state.
func (p *Plane) FreezeState() *api.FreezeState { return p.frozen.Load() }

// Frozen reports whether the kill switch is on.
func (p *Plane) Frozen() bool { return p.frozen.Load().Frozen }

// Freeze turns the kill switch on at once, then stores it for restarts. If
// storing fails the freeze still holds in this process (fail safe) and the
// error says so.
func (p *Plane) Freeze(ctx context.Context, st *api.FreezeState) error {
	p.frozen.Store(st)
	return p.storeFreeze(ctx, st)
}

// Unfreeze stores the lifted kill switch first and lifts it only then: if
// storing fails, sandboxd stays frozen.
func (p *Plane) Unfreeze(ctx context.Context, st *api.FreezeState) error {
	if err := p.storeFreeze(ctx, st); err != nil {
		return err
	}
	p.frozen.Store(st)
	return nil
}

func (p *Plane) storeFreeze(ctx context.Context, st *api.FreezeState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return p.cfg.Store.SetSetting(context.WithoutCancel(ctx), freezeSetting, string(b))
}

// FrozenError is the 503 FROZEN refusal, counted; what names what does not
// run ("no new code runs", "no fetch runs").
func (p *Plane) FrozenError(what string) *api.Error {
	st := p.frozen.Load()
	return p.Refusal(&api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeFrozen,
		Message: fmt.Sprintf("sandboxd is frozen by an operator (since %s, by %s%s): %s until it is unfrozen", st.Since.Format(time.RFC3339), st.By, ReasonSuffix(st.Reason), what)})
}

// ReasonSuffix is ": reason", or "" when there is none.
func ReasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return ": " + r
}
