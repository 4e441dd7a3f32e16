// Package sessions manages stateful interpreter sessions: POST /sessions
// starts a sandbox whose Python interpreter stays alive across calls
// (runner.Session); a call runs code in it through the same exec flow as
// POST /exec (internal/execflow) and also returns the call's rich results.
// A session belongs to the tenant and key that made it: to any other key
// it does not exist. It ends at its idle timeout or lifetime, on Delete,
// when sandboxd is frozen, at an OOM kill and at shutdown; its container is
// removed on every path, and its start and end are audit records.
package sessions

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/execflow"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/runner"
)

// Session states.
const (
	stateReady = "ready"
	stateBusy  = "busy"
	stateEnded = "ended"
)

// Caps and timings of sessions.
const (
	// maxTextBytes caps the text of a repr or table result.
	maxTextBytes = 64 << 10
	// maxFigureBytes caps one PNG figure (the profile's per-file cap when
	// lower); maxFigures their number per call.
	maxFigureBytes = 4 << 20
	maxFigures     = 10
	// sweepEvery is how often idle timeouts, lifetimes and the kill switch
	// are checked.
	sweepEvery = 250 * time.Millisecond
	// keepEnded is how long an ended session still answers Get.
	keepEnded = 10 * time.Minute
)

// Sandbox is a started session sandbox (*runner.Session).
type Sandbox interface {
	ID() string
	ImageID() string
	Exec(ctx context.Context, call *runner.SessionCall) (*runner.SessionResult, error)
	PutFiles(ctx context.Context, files []jobproto.File) error
	GetFile(ctx context.Context, path string, maxBytes int64) (*runner.OutFile, string, error)
	Close(reason string)
	Done() <-chan struct{}
	EndReason() (status, reason string)
	// Uncharged is the CPU the sandbox used that no call was charged for,
	// once it has ended (threads a call left running); taken once.
	Uncharged() time.Duration
}

// Engine starts session sandboxes. Runner adapts *runner.Runner; unit
// tests use a fake.
type Engine interface {
	OpenSession(ctx context.Context, spec *runner.Spec, opts runner.SessionOptions) (Sandbox, error)
}

// Starter is what *runner.Runner offers for sessions.
type Starter interface {
	StartSession(ctx context.Context, spec *runner.Spec, opts runner.SessionOptions) (*runner.Session, error)
}

// Runner adapts a Starter (*runner.Runner) to Engine.
type Runner struct{ Starter Starter }

// OpenSession implements Engine.
func (r Runner) OpenSession(ctx context.Context, spec *runner.Spec, opts runner.SessionOptions) (Sandbox, error) {
	s, err := r.Starter.StartSession(ctx, spec, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Config configures the manager. Flow is required; without an Engine every
// session start answers 503.
type Config struct {
	Flow     *execflow.Flow
	Engine   Engine
	Captures capture.Store
	Profiles *atomic.Pointer[profiles.Set]
	Log      *slog.Logger
}

// Manager holds the sessions of the process.
type Manager struct {
	cfg   Config
	plane *control.Plane
	log   *slog.Logger

	mu   sync.Mutex
	byID map[string]*Session
	open map[string]int // open sessions by tenant, reservations included
	// starting are the sessions by tenant being started (in open, not yet
	// in a fleet's directory).
	starting map[string]int

	stop chan struct{}
	done chan struct{}
}

// New starts the manager and its sweeper.
func New(cfg Config) (*Manager, error) {
	if cfg.Flow == nil || cfg.Captures == nil || cfg.Profiles == nil {
		return nil, errors.New("sessions: the flow, the capture store and the profiles are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{cfg: cfg, plane: cfg.Flow.Plane(), log: cfg.Log, byID: map[string]*Session{}, open: map[string]int{}, starting: map[string]int{},
		stop: make(chan struct{}), done: make(chan struct{})}
	m.plane.Metrics().Gauge("sandboxd_sessions_open", "Sessions open or starting.", func() float64 {
		m.mu.Lock()
		defer m.mu.Unlock()
		n := 0
		for _, v := range m.open {
			n += v
		}
		return float64(n)
	})
	go m.sweep()
	return m, nil
}

// Session is one session, open or recently ended.
type Session struct {
	id, tenant, keyID string
	// xsession is the X-Session-Id the session was made with ("" if none).
	xsession string
	profile  *profiles.Exec
	limits   profiles.Limits
	idle     time.Duration
	lifetime time.Duration
	created  time.Time
	box      Sandbox
	sandbox  string

	mu        sync.Mutex
	busy      bool
	lastUsed  time.Time
	ended     bool
	endedAt   time.Time
	endReason string
	usage     api.SessionUsage
}

// ID is the session's id.
func (ls *Session) ID() string { return ls.id }

// Profile is the session's exec profile.
func (ls *Session) Profile() *profiles.Exec { return ls.profile }

// auditSession is the session its own records (start, end, file
// transfers) carry: the X-Session-Id it was made with, else its id.
func (ls *Session) auditSession() string {
	return cmp.Or(ls.xsession, ls.id)
}

// Close ends every session (after the flow's KillRuns) and stops the
// sweeper.
func (m *Manager) Close() {
	select {
	case <-m.stop:
		return
	default:
	}
	close(m.stop)
	<-m.done
	for _, ls := range m.list() {
		m.End(ls, "sandboxd is shutting down")
	}
}

func (m *Manager) list() []*Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Session, 0, len(m.byID))
	for _, ls := range m.byID {
		out = append(out, ls)
	}
	return out
}

// sweep ends the sessions past their idle timeout or lifetime, those whose
// sandbox ended, and all of them while sandboxd is frozen; ended sessions
// are forgotten after keepEnded.
func (m *Manager) sweep() {
	defer close(m.done)
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		frozen := m.plane.Frozen()
		for _, ls := range m.list() {
			ls.mu.Lock()
			reason := ""
			switch {
			case ls.ended:
				if now.Sub(ls.endedAt) > keepEnded {
					m.mu.Lock()
					delete(m.byID, ls.id)
					m.mu.Unlock()
				}
			case frozen:
				st := m.plane.FreezeState()
				reason = fmt.Sprintf("sandboxd was frozen by an operator (%s)%s", st.By, control.ReasonSuffix(st.Reason))
			case now.Sub(ls.created) >= ls.lifetime:
				reason = fmt.Sprintf("the session reached its lifetime of %d s", int64(ls.lifetime/time.Second))
			case !ls.busy && now.Sub(ls.lastUsed) >= ls.idle:
				reason = fmt.Sprintf("the session was idle for its idle timeout of %d s", int64(ls.idle/time.Second))
			default:
				select {
				case <-ls.box.Done():
					_, reason = ls.box.EndReason()
				default:
				}
			}
			ls.mu.Unlock()
			if reason != "" {
				m.End(ls, reason)
			}
		}
	}
}

// End ends ls: its sandbox is closed (the container killed and removed),
// it no longer counts against its tenant, and its end is an audit record.
func (m *Manager) End(ls *Session, reason string) {
	ls.mu.Lock()
	if ls.ended {
		ls.mu.Unlock()
		return
	}
	if st, r := ls.box.EndReason(); r != "" {
		reason = r
		if st == runner.StatusOOM && !strings.Contains(r, "memory") {
			reason += " (memory limit)"
		}
	}
	ls.ended, ls.endedAt, ls.endReason = true, time.Now().UTC(), reason
	ls.mu.Unlock()
	m.release(ls.tenant)
	ls.box.Close(reason)
	// What ran after the last call (threads it left spinning) is charged
	// now, to the tenant's day and the budget session its calls ran under.
	extra := ls.box.Uncharged().Milliseconds()
	if extra > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		m.plane.Limits().ChargeCPU(ctx, ls.tenant, ls.auditSession(), extra)
		cancel()
		ls.mu.Lock()
		ls.usage.CPUMS += extra
		ls.mu.Unlock()
	}
	if sh := m.plane.Shared(); sh != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := sh.PutSession(ctx, m.entry(ls, store.SessionEnded, reason))
		cancel()
		if err != nil {
			m.log.Error("marking the session ended in the fleet's directory failed; it ends there when this replica stops", "session_id", ls.id, "err", err)
		}
	}
	m.log.Info("session ended", "session_id", ls.id, "tenant", ls.tenant, "key_id", ls.keyID, "sandbox_id", ls.sandbox, "reason", reason, "cpu_after_calls_ms", extra)
	ar := audit.SessionEnd(ls.tenant, ls.keyID, ls.auditSession(), ls.id, reason, audit.ProfileRef{Name: ls.profile.Name, Version: ls.profile.Version}, ls.sandbox)
	if err := m.plane.Append(ar); err != nil {
		m.log.Error("writing the session end's audit record failed", "session_id", ls.id, "err", err)
	}
}

// publish enters a started session in a fleet's directory, so that the
// other replicas forward its calls here (nil on a single host).
func (m *Manager) publish(ctx context.Context, ls *Session) error {
	sh := m.plane.Shared()
	if sh == nil {
		return nil
	}
	return sh.PutSession(context.WithoutCancel(ctx), m.entry(ls, store.SessionLive, ""))
}

// entry is ls's directory entry in state.
func (m *Manager) entry(ls *Session, state, reason string) *store.SessionEntry {
	return &store.SessionEntry{ID: ls.id, Tenant: ls.tenant, KeyID: ls.keyID, Owner: m.plane.Owner(), Replica: m.plane.Replica(),
		Addr: m.plane.Addr(), State: state, EndReason: reason, CreatedAt: ls.created}
}

// release gives back one of tenant's open sessions.
func (m *Manager) release(tenant string) {
	m.mu.Lock()
	if m.open[tenant]--; m.open[tenant] <= 0 {
		delete(m.open, tenant)
	}
	m.mu.Unlock()
}

// Info is the session as the API shows it.
func (ls *Session) Info() *api.SessionInfo {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	in := &api.SessionInfo{ID: ls.id, SandboxID: ls.sandbox, Profile: api.ProfileRef{Name: ls.profile.Name, Version: ls.profile.Version},
		Limits: api.Limits(ls.limits), Image: ls.box.ImageID(), IdleTimeoutS: int64(ls.idle / time.Second), MaxLifetimeS: int64(ls.lifetime / time.Second),
		CreatedAt: ls.created, LastUsedAt: ls.lastUsed, EndsBy: ls.created.Add(ls.lifetime), Usage: ls.usage}
	in.ExpiresAt = ls.lastUsed.Add(ls.idle)
	if in.EndsBy.Before(in.ExpiresAt) {
		in.ExpiresAt = in.EndsBy
	}
	switch {
	case ls.ended:
		in.State = stateEnded
		t := ls.endedAt
		in.EndedAt, in.EndReason = &t, ls.endReason
	case ls.busy:
		in.State = stateBusy
	default:
		in.State = stateReady
	}
	return in
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "ses_" + hex.EncodeToString(b[:])
}

// notFound is the answer for a session that does not exist or belongs to
// another key: the two are not told apart.
func notFound(id string) *api.Error {
	return &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound,
		Message: fmt.Sprintf("no session %q visible to this key: a session is visible only to the key that made it, until %s after it ended", id, keepEnded)}
}

// Lookup returns session id of key.
func (m *Manager) Lookup(key *auth.Key, id string) (*Session, error) {
	m.mu.Lock()
	ls := m.byID[id]
	m.mu.Unlock()
	if ls == nil || ls.tenant != key.Tenant || ls.keyID != key.ID {
		return nil, notFound(id)
	}
	return ls, nil
}

// claim marks ls busy for one operation; the returned func releases it.
func (ls *Session) claim() (func(), *api.Error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	switch {
	case ls.ended:
		return nil, ls.endedError()
	case ls.busy:
		return nil, &api.Error{Status: http.StatusConflict, Code: api.CodeSessionBusy, RetryAfter: 1,
			Message: fmt.Sprintf("session %s is running another call or file transfer; a session runs one at a time, retry when it has finished", ls.id)}
	}
	ls.busy = true
	return func() {
		ls.mu.Lock()
		ls.busy, ls.lastUsed = false, time.Now().UTC()
		ls.mu.Unlock()
	}, nil
}

// endedError is the 409 SESSION_ENDED of ls (ls.mu held).
func (ls *Session) endedError() *api.Error {
	return &api.Error{Status: http.StatusConflict, Code: api.CodeSessionEnded, Message: fmt.Sprintf("session %s has ended: %s; start a new one with POST /sessions", ls.id, ls.endReason)}
}

// ended ends ls after its sandbox reported its end with err, and returns
// the 409 to answer.
func (m *Manager) ended(ls *Session, err error) *api.Error {
	m.End(ls, strings.TrimPrefix(err.Error(), runner.ErrSessionEnded.Error()+": "))
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.endedError()
}
