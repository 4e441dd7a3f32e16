// Package control is the control plane every call goes through before and
// after it runs: the kill switch, idempotency keys, the loop guard and
// budgets' refusals, and the audit record written before an answer leaves.
// The exec, fetch and session flows (internal/execflow, internal/sessions,
// internal/fetchflow) share one Plane; the HTTP layer only decodes, calls
// and encodes.
package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/control/admit"
	"github.com/sandboxd/sandboxd/internal/control/budget"
	"github.com/sandboxd/sandboxd/internal/control/loopguard"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/metrics"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Config configures the control plane. Store, Limits, Metrics, Gate and
// Audit are required: sandboxd serve wires the durable ones, tests their
// own.
type Config struct {
	// Store keeps idempotency records, async results, usage and the kill
	// switch.
	Store store.Store
	// Owner names this process in in-flight records (store.Recover); empty:
	// a random one.
	Owner string
	// Limits applies the tenants file (rate limits and budgets).
	Limits *budget.Limiter
	// Metrics is where the control plane counts.
	Metrics *metrics.Metrics
	// Gate holds the run slots and their queue.
	Gate *admit.Gate
	// Audit is the log every call's record is appended to before its
	// answer.
	Audit audit.Log
	// Log receives the control plane's own lines.
	Log *slog.Logger
	// IdempotencyTTL is how long a key's record is kept (default 24 h).
	IdempotencyTTL time.Duration
	// IdempotencyWait bounds how long a request waits for the first
	// request with its key to finish before 409 IN_PROGRESS (default 30 s).
	IdempotencyWait time.Duration
	// AsyncTTL is how long an async run's result is kept (default 24 h).
	AsyncTTL time.Duration
	// Queue is the admission queue's length (--queue); an async exec is
	// refused with 429 BUSY at once when the slots and the queue are full.
	// 0: not checked (the async exec then fails later with BUSY).
	Queue int
	// Replica names this replica (the X-Sandboxd-Replica header, audit
	// records); Addr is the base URL other replicas reach its API at
	// (session forwarding). A Store that is store.Shared makes the plane
	// a fleet member (fleet.go).
	Replica string
	Addr    string
}

// Plane is the control plane's state.
type Plane struct {
	cfg   Config
	guard *loopguard.Guard

	frozen atomic.Pointer[api.FreezeState]

	mu sync.Mutex
	// idemChanged is closed and replaced whenever an idempotency record of
	// this process completes or is released, waking requests that wait.
	idemChanged chan struct{}

	stopJanitor context.CancelFunc
	janitorDone chan struct{}

	// fleet is set when the store is shared by several replicas.
	fleet *fleet
}

// New starts the control plane: it reads the kill switch from the store
// (failing safe to frozen when it cannot), registers its gauges and starts
// the janitor that purges expired records.
func New(cfg Config) (*Plane, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("control: no store")
	case cfg.Limits == nil:
		return nil, errors.New("control: no limiter")
	case cfg.Metrics == nil:
		return nil, errors.New("control: no metrics registry")
	case cfg.Gate == nil:
		return nil, errors.New("control: no admission gate")
	case cfg.Audit == nil:
		return nil, errors.New("control: no audit log")
	}
	if cfg.IdempotencyTTL <= 0 {
		cfg.IdempotencyTTL = 24 * time.Hour
	}
	if cfg.IdempotencyWait <= 0 {
		cfg.IdempotencyWait = 30 * time.Second
	}
	if cfg.AsyncTTL <= 0 {
		cfg.AsyncTTL = 24 * time.Hour
	}
	if cfg.Owner == "" {
		cfg.Owner = NewOwnerID()
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	p := &Plane{cfg: cfg, guard: loopguard.New(), idemChanged: make(chan struct{})}
	p.loadFreeze()
	m := cfg.Metrics
	m.Gauge("sandboxd_execs_running", "Execs holding a run slot.", func() float64 { r, _, _ := cfg.Gate.Stats(); return float64(r) })
	m.Gauge("sandboxd_execs_queued", "Execs waiting for a run slot.", func() float64 { _, w, _ := cfg.Gate.Stats(); return float64(w) })
	m.Gauge("sandboxd_run_slots", "Run slots (--max-runs).", func() float64 { _, _, n := cfg.Gate.Stats(); return float64(n) })
	m.Gauge("sandboxd_frozen", "1 while the kill switch is on.", func() float64 {
		if p.frozen.Load().Frozen {
			return 1
		}
		return 0
	})
	jctx, stop := context.WithCancel(context.Background())
	p.stopJanitor, p.janitorDone = stop, make(chan struct{})
	if sh, ok := cfg.Store.(store.Shared); ok {
		p.joinFleet(jctx, sh)
	}
	go p.janitor(jctx)
	return p, nil
}

// NewOwnerID returns a random owner id for a process ("p_" and 16 hex
// digits).
func NewOwnerID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "p_" + hex.EncodeToString(b[:])
}

// Close stops the janitor (and leaves the fleet). The store and the log
// are the caller's.
func (p *Plane) Close() {
	p.stopJanitor()
	<-p.janitorDone
	if p.fleet != nil {
		<-p.fleet.done
	}
}

// Store returns the control-plane store.
func (p *Plane) Store() store.Store { return p.cfg.Store }

// Limits returns the rate limits and budgets in force.
func (p *Plane) Limits() *budget.Limiter { return p.cfg.Limits }

// Metrics returns the metrics registry.
func (p *Plane) Metrics() *metrics.Metrics { return p.cfg.Metrics }

// Gate returns the run slots.
func (p *Plane) Gate() *admit.Gate { return p.cfg.Gate }

// Guard returns the loop guard.
func (p *Plane) Guard() *loopguard.Guard { return p.guard }

// Audit returns the audit log.
func (p *Plane) Audit() audit.Log { return p.cfg.Audit }

// Owner returns this process's owner id.
func (p *Plane) Owner() string { return p.cfg.Owner }

// AsyncTTL is how long an async run's result is kept.
func (p *Plane) AsyncTTL() time.Duration { return p.cfg.AsyncTTL }

// QueueFull reports whether every run slot and the queue are taken, and
// the refusal to give then (for async execs, which cannot wait).
func (p *Plane) QueueFull() *api.Error {
	if p.cfg.Queue <= 0 {
		return nil
	}
	if running, waiting, slots := p.cfg.Gate.Stats(); running >= slots && waiting >= p.cfg.Queue {
		return p.Refusal(busyError(running, waiting, slots))
	}
	return nil
}

// janitor purges expired records and forgets idle sessions.
func (p *Plane) janitor(ctx context.Context) {
	defer close(p.janitorDone)
	t := time.NewTicker(10 * time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		n, err := p.cfg.Store.Purge(pctx, now, now.Add(-sessionRetention))
		cancel()
		if err != nil {
			p.cfg.Log.Error("purging expired records failed", "err", err)
		} else if n > 0 {
			p.cfg.Log.Info("purged expired records", "rows", n)
		}
		p.cfg.Limits.Forget(time.Hour)
		p.guard.Forget(24 * time.Hour)
	}
}

// sessionRetention is how long an idle session's usage is kept.
const sessionRetention = 7 * 24 * time.Hour

// marshalLine is v as one line of JSON.
func marshalLine(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("control: marshalling a response: %v", err))
	}
	return append(b, '\n')
}
