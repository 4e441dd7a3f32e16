package execflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Live is an exec that is queued or running in this process.
type Live struct {
	id      string
	tenant  string
	keyID   string
	async   bool
	created time.Time
	ctx     context.Context
	cancel  context.CancelCauseFunc
	stop    func() // releases the context once the exec has ended
	done    chan struct{}

	mu      sync.Mutex
	started time.Time // zero while queued
}

// Context is the run's context: it ends at shutdown, on a cancel or a
// freeze with kill_running, and (for a plain synchronous exec) when the
// client goes away.
func (l *Live) Context() context.Context { return l.ctx }

func (l *Live) startedAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.started
}

// MarkStarted records that the exec has a run slot.
func (l *Live) MarkStarted() {
	l.mu.Lock()
	l.started = time.Now().UTC()
	l.mu.Unlock()
}

// live is the registry of live execs.
type live struct {
	mu   sync.Mutex
	byID map[string]*Live
}

func (r *live) register(l *Live) {
	r.mu.Lock()
	r.byID[l.id] = l
	r.mu.Unlock()
}

func (r *live) unregister(l *Live) {
	r.mu.Lock()
	delete(r.byID, l.id)
	r.mu.Unlock()
	l.stop()
	close(l.done)
}

func (r *live) lookup(id string) *Live {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

// Begin registers the job as live and gives it its run context: it ends
// at shutdown, on Cancel or a freeze with kill_running, and - only for a
// plain synchronous exec - when ctx (the request's) ends. A keyed or async
// exec outlives its request, so that a retry finds its result.
func (f *Flow) Begin(ctx context.Context, j *Job) *Live {
	parent := ctx
	if j.Async || j.IdemKey != "" {
		parent = context.WithoutCancel(parent)
	}
	rctx, cancel := context.WithCancelCause(parent)
	// Counted before the hook on runCtx is registered, so that KillRuns,
	// which cancels runCtx before it waits, always sees this exec.
	f.runs.Add(1)
	stop := context.AfterFunc(f.runCtx, func() { cancel(context.Cause(f.runCtx)) })
	l := &Live{id: j.ID, tenant: j.Key.Tenant, keyID: j.Key.ID, async: j.Async, created: time.Now().UTC(), ctx: rctx, done: make(chan struct{}),
		cancel: func(err error) { cancel(err) }}
	l.stop = func() { stop(); cancel(nil) }
	f.live.register(l)
	return l
}

// End unregisters an exec that has ended (and whose result, for an async
// one, is stored).
func (f *Flow) End(l *Live) {
	f.live.unregister(l)
	f.runs.Done()
}

// Running returns the ids of the live execs (queued or running).
func (f *Flow) Running() []string {
	f.live.mu.Lock()
	defer f.live.mu.Unlock()
	ids := make([]string, 0, len(f.live.byID))
	for id := range f.live.byID {
		ids = append(ids, id)
	}
	return ids
}

// Identity returns the tenant and key of a live exec (the egress proxy's
// approvals ask who runs a sandbox).
func (f *Flow) Identity(execID string) (tenant, keyID string, ok bool) {
	l := f.live.lookup(execID)
	if l == nil {
		return "", "", false
	}
	return l.tenant, l.keyID, true
}

// Cancel stops a live exec that key may see, with reason, and waits at
// most wait for it to end. It reports whether there was one.
func (f *Flow) Cancel(key *auth.Key, id, reason string, wait time.Duration) bool {
	l := f.live.lookup(id)
	if l == nil || !key.CanSee(l.tenant) {
		return false
	}
	l.cancel(&stopCause{reason})
	select {
	case <-l.done:
	case <-time.After(wait):
	}
	return true
}

// KillAll stops every live exec with reason and waits at most wait for
// them to end; it returns how many there were.
func (f *Flow) KillAll(reason string, wait time.Duration) int {
	f.live.mu.Lock()
	list := make([]*Live, 0, len(f.live.byID))
	for _, l := range f.live.byID {
		list = append(list, l)
	}
	f.live.mu.Unlock()
	cause := &stopCause{reason}
	for _, l := range list {
		l.cancel(cause)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for _, l := range list {
		select {
		case <-l.done:
		case <-t.C:
			return len(list)
		}
	}
	return len(list)
}

// stopCause is why an exec was stopped from outside (a cancel, a freeze).
type stopCause struct{ msg string }

func (c *stopCause) Error() string { return c.msg }

func isStopCause(err error) bool {
	var sc *stopCause
	return errors.As(err, &sc)
}

// ErrShutdown is the cause given to running jobs killed at shutdown.
var ErrShutdown = errors.New("sandboxd is shutting down")

// KillRuns stops every running job (their containers are killed and
// removed) and waits until they have ended, at most until ctx ends.
func (f *Flow) KillRuns(ctx context.Context, cause error) error {
	f.cancelRun(cause)
	if !f.WaitRuns(ctx) {
		return fmt.Errorf("runs still in progress after kill: %w", ctx.Err())
	}
	return nil
}

// WaitRuns waits until running jobs finish on their own, at most until ctx
// ends; it reports whether they did.
func (f *Flow) WaitRuns(ctx context.Context) bool {
	done := make(chan struct{})
	go func() { f.runs.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// Track counts a call other than an exec (a fetch) as running until the
// returned func is called, and gives it a context that shutdown ends.
func (f *Flow) Track(ctx context.Context) (context.Context, func()) {
	tctx, cancel := context.WithCancelCause(ctx)
	f.runs.Add(1)
	stop := context.AfterFunc(f.runCtx, func() { cancel(context.Cause(f.runCtx)) })
	return tctx, func() { stop(); cancel(nil); f.runs.Done() }
}

// State is the state of exec id as key may see it: a live exec's, or the
// stored state of an async one.
func (f *Flow) State(ctx context.Context, key *auth.Key, id string) (*api.ExecState, error) {
	notFound := &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound,
		Message: fmt.Sprintf("no exec %q visible to this key: ids of async execs are kept for %s, those of synchronous ones only while they run", id, f.plane.AsyncTTL())}
	if l := f.live.lookup(id); l != nil {
		if !key.CanSee(l.tenant) {
			return nil, notFound
		}
		st := &api.ExecState{ID: id, Status: stateQueued, CreatedAt: l.created}
		if t := l.startedAt(); !t.IsZero() {
			st.Status, st.StartedAt = stateRunning, &t
		}
		if !l.async || st.Status == stateRunning {
			return st, nil
		}
	}
	rec, err := f.plane.Store().GetExec(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound
	}
	if err != nil {
		return nil, err
	}
	if !key.CanSee(rec.Tenant) {
		return nil, notFound
	}
	var st api.ExecState
	if err := json.Unmarshal(rec.Body, &st); err != nil {
		return nil, fmt.Errorf("stored state of exec %s: %w", id, err)
	}
	if rec.State == store.ExecInterrupted {
		st.Status = stateInterrupted
		st.Message = "sandboxd stopped (crash, kill or restart) before this exec finished; the code may have run in part or in full, and it is not run again"
		t := rec.UpdatedAt
		st.FinishedAt = &t
	}
	return &st, nil
}
