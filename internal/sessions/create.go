package sessions

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/control/admit"
	"github.com/sandboxd/sandboxd/internal/execflow"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/runner"
)

// Start is one request to start a session.
type Start struct {
	Key *auth.Key
	// XSession is the request's X-Session-Id ("" if none).
	XSession string
	Req      *api.SessionCreateRequest
	Who      audit.Who
	Log      *slog.Logger
	// Profile learns the profile's name once it is known (for the log).
	Profile func(name string)
}

// Create starts a session: the profile and bounds are checked, the
// tenant's cap and a run slot are taken while the sandbox starts, and the
// start is an audit record before the session is returned.
func (m *Manager) Create(ctx context.Context, st *Start) (*Session, error) {
	req, key := st.Req, st.Key
	if m.plane.Frozen() {
		return nil, m.plane.FrozenError("no new code runs")
	}
	name := req.Profile
	if name == "" {
		name = profiles.DefaultName
	}
	set := m.cfg.Profiles.Load()
	prof, ok := set.Exec[name]
	if !ok {
		return nil, api.Validation("profile", "no exec profile named %q; available: %s", name, strings.Join(set.Names(), ", "))
	}
	if st.Profile != nil {
		st.Profile(prof.Name)
	}
	limits, err := execflow.EffectiveLimits(prof, req.Limits)
	if err != nil {
		return nil, err
	}
	idle, err := seconds("idle_timeout_s", req.IdleTimeoutS, prof.SessionIdleTimeoutS, prof.Name)
	if err != nil {
		return nil, err
	}
	life, err := seconds("max_lifetime_s", req.MaxLifetimeS, prof.SessionMaxLifetimeS, prof.Name)
	if err != nil {
		return nil, err
	}
	if m.cfg.Engine == nil {
		return nil, control.Unavailable("this sandboxd's engine does not run sessions")
	}
	// The tenant's cap, with this session reserved until it started or
	// failed; in a fleet, the tenant's live sessions on every replica
	// count (those this one is starting are not in the directory yet).
	fleetOpen := -1
	if sh := m.plane.Shared(); sh != nil {
		n, err := sh.OpenSessions(ctx, key.Tenant)
		if err != nil {
			return nil, m.plane.Refusal(control.StateUnavailable("count the tenant's open sessions", err))
		}
		fleetOpen = n
	}
	m.mu.Lock()
	open := m.open[key.Tenant]
	if fleetOpen >= 0 {
		open = fleetOpen + m.starting[key.Tenant]
	}
	if r := m.plane.Limits().AdmitSession(key.Tenant, open); r != nil {
		m.mu.Unlock()
		return nil, m.plane.BudgetError(r)
	}
	m.open[key.Tenant]++
	m.starting[key.Tenant]++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		if m.starting[key.Tenant]--; m.starting[key.Tenant] <= 0 {
			delete(m.starting, key.Tenant)
		}
		m.mu.Unlock()
	}()
	started := false
	defer func() {
		if !started {
			m.release(key.Tenant)
		}
	}()
	release, err := m.plane.Gate().Acquire(ctx)
	if err != nil {
		if errors.Is(err, admit.ErrBusy) {
			return nil, m.plane.GateBusy()
		}
		return nil, control.Unavailable("the request ended while waiting for a run slot")
	}
	id := newID()
	spec := &runner.Spec{ID: id, Profile: prof, Limits: limits}
	opts := runner.SessionOptions{MaxTextBytes: maxTextBytes, MaxFigureBytes: min(maxFigureBytes, prof.Files.MaxOutputFileBytes), MaxFigures: maxFigures}
	log := st.Log.With("session_id", id, "profile", prof.Name)
	begin := time.Now()
	box, err := m.cfg.Engine.OpenSession(ctx, spec, opts)
	release()
	if err != nil {
		log.Error("starting a session failed", "err", err)
		switch {
		case errors.Is(err, runner.ErrImageMissing), errors.Is(err, runner.ErrRuntimeMissing), errors.Is(err, runner.ErrEgressUnavailable):
			return nil, control.Unavailable(err.Error())
		case errors.Is(err, runner.ErrEngine), errors.Is(err, runner.ErrLauncher), errors.Is(err, runner.ErrSessionEnded):
			return nil, control.Unavailable("the container engine failed to start the session's sandbox; retry later")
		case ctx.Err() != nil:
			return nil, control.Unavailable("the request ended while the session started")
		}
		return nil, err
	}
	now := time.Now().UTC()
	ls := &Session{id: id, tenant: key.Tenant, keyID: key.ID, xsession: st.XSession, profile: prof, limits: limits, idle: idle, lifetime: life,
		created: now, lastUsed: now, box: box, sandbox: box.ID()}
	m.mu.Lock()
	closing := false
	select {
	case <-m.stop:
		closing = true // Close has run or runs: it would miss this one
	default:
		m.byID[id] = ls
	}
	m.mu.Unlock()
	if closing {
		box.Close("sandboxd is shutting down")
		return nil, control.Unavailable("sandboxd is shutting down")
	}
	started = true
	if e := m.publish(ctx, ls); e != nil {
		log.Error("writing the session to the fleet's directory failed", "err", e)
		m.End(ls, "it could not be entered in the fleet's session directory")
		return nil, m.plane.Refusal(control.StateUnavailable("enter the session in the fleet's directory", e))
	}
	log.Info("session started", "sandbox_id", ls.sandbox, "start_ms", time.Since(begin).Milliseconds(), "idle_timeout_s", int64(idle/time.Second), "max_lifetime_s", int64(life/time.Second))
	who := st.Who
	who.Session = ls.auditSession()
	ar := audit.SessionStart(who, id, audit.ProfileRef{Name: prof.Name, Version: prof.Version}, box.ImageID(), prof.Runtime,
		map[string]string{"sandbox_id": ls.sandbox, "idle_timeout_s": strconv.FormatInt(int64(idle/time.Second), 10), "max_lifetime_s": strconv.FormatInt(int64(life/time.Second), 10)})
	if e := m.plane.RecordEvent(ar, "the session start", log); e != nil {
		m.End(ls, "its audit record could not be written")
		return nil, e
	}
	return ls, nil
}

// seconds lowers a profile's session bound by the request's.
func seconds(field string, v *int64, ceiling int64, profile string) (time.Duration, error) {
	if v == nil {
		return time.Duration(ceiling) * time.Second, nil
	}
	switch {
	case *v > ceiling:
		return 0, api.Validation(field, "%d is above the ceiling of %d set by profile %q; a request may only lower it", *v, ceiling, profile)
	case *v < 1:
		return 0, api.Validation(field, "%d is below the minimum of 1 second", *v)
	}
	return time.Duration(*v) * time.Second, nil
}
