package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/control/budget"
	"github.com/sandboxd/sandboxd/internal/control/loopguard"
	"github.com/sandboxd/sandboxd/internal/metrics"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Control configures the control plane: idempotency, asynchronous runs,
// the kill switch, budgets, the loop guard and metrics. Zero values work:
// a private in-memory store, no budgets, a fresh metrics registry.
type Control struct {
	// Store keeps idempotency records, async results, usage and the frozen
	// flag. nil: a private in-memory store (nothing survives a restart).
	Store store.Store
	// Owner names this process in in-flight records; see store.Recover.
	Owner string
	// Limits applies the tenants file. nil: no rate limits or budgets.
	Limits *budget.Limiter
	// Metrics is where the API counts. nil: a new registry.
	Metrics *metrics.Metrics
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
}

// control is the server's control-plane state.
type control struct {
	cfg     Control
	ownsDB  bool
	store   store.Store
	limits  *budget.Limiter
	guard   *loopguard.Guard
	metrics *metrics.Metrics
	// sessions are the server's sessions (sessions.go).
	sessions *sessionMgr

	frozen atomic.Pointer[api.FreezeState]

	mu   sync.Mutex
	live map[string]*liveExec // by exec id: queued and running execs
	// idemChanged is closed and replaced whenever an idempotency record of
	// this process completes or is released, waking requests that wait.
	idemChanged chan struct{}

	stopJanitor context.CancelFunc
	janitorDone chan struct{}
}

const freezeSetting = "freeze"

func newOwnerID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "p_" + hex.EncodeToString(b[:])
}

// initControl sets up the control plane. It panics only if the in-memory
// fallback store cannot be opened, which does not happen.
func (s *Server) initControl() {
	cfg := s.cfg.Control
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
		cfg.Owner = newOwnerID()
	}
	ctl := &control{cfg: cfg, store: cfg.Store, limits: cfg.Limits, metrics: cfg.Metrics,
		guard: loopguard.New(), live: map[string]*liveExec{}, idemChanged: make(chan struct{})}
	if ctl.store == nil {
		st, err := store.OpenSQLite("")
		if err != nil {
			panic("api: opening the in-memory store: " + err.Error())
		}
		ctl.store, ctl.ownsDB = st, true
	}
	if ctl.limits == nil {
		ctl.limits = budget.New(nil, ctl.store, s.log)
	}
	if ctl.metrics == nil {
		ctl.metrics = metrics.New()
	}
	s.ctl = ctl

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := &api.FreezeState{}
	if v, ok, err := ctl.store.Setting(ctx, freezeSetting); err != nil {
		// Fail safe: a kill switch that cannot be read is on.
		s.log.Error("reading the kill switch from the store failed; starting frozen (POST /admin/unfreeze lifts it)", "err", err)
		st = &api.FreezeState{Frozen: true, Since: time.Now().UTC(), By: "sandboxd", Reason: "the stored kill switch could not be read at start-up"}
	} else if ok {
		if err := json.Unmarshal([]byte(v), st); err != nil {
			s.log.Error("the stored kill switch is malformed; starting frozen", "err", err)
			st = &api.FreezeState{Frozen: true, Since: time.Now().UTC(), By: "sandboxd", Reason: "the stored kill switch was malformed"}
		}
	}
	ctl.frozen.Store(st)
	if st.Frozen {
		s.log.Warn("sandboxd is frozen: every new exec answers 503 FROZEN until POST /admin/unfreeze", "since", st.Since, "by", st.By, "reason", st.Reason)
	}

	m := ctl.metrics
	m.Gauge("sandboxd_execs_running", "Execs holding a run slot.", func() float64 { r, _, _ := s.cfg.Gate.Stats(); return float64(r) })
	m.Gauge("sandboxd_execs_queued", "Execs waiting for a run slot.", func() float64 { _, w, _ := s.cfg.Gate.Stats(); return float64(w) })
	m.Gauge("sandboxd_run_slots", "Run slots (--max-runs).", func() float64 { _, _, n := s.cfg.Gate.Stats(); return float64(n) })
	m.Gauge("sandboxd_frozen", "1 while the kill switch is on.", func() float64 {
		if ctl.frozen.Load().Frozen {
			return 1
		}
		return 0
	})

	jctx, stop := context.WithCancel(context.Background())
	ctl.stopJanitor, ctl.janitorDone = stop, make(chan struct{})
	go s.janitor(jctx)
}

// controlRoutes adds the control plane's endpoints.
func (s *Server) controlRoutes(e *echo.Echo) {
	agent := s.authenticate(auth.RoleAgent)
	admin := s.authenticate(auth.RoleAdmin)
	e.GET("/exec/:id", s.getExec, agent)
	e.DELETE("/exec/:id", s.deleteExec, agent)
	e.GET("/usage", s.usage, agent)
	e.GET("/admin/freeze", s.freezeState, admin)
	e.POST("/admin/freeze", s.freeze, admin)
	e.POST("/admin/unfreeze", s.unfreeze, admin)
	e.GET("/metrics", echo.WrapHandler(s.ctl.metrics.Handler()))
}

// Close stops the control plane's background work and closes the store if
// the server opened it. Call it after KillRuns.
func (s *Server) Close() error {
	s.closeSessions() // sessions.go
	s.ctl.stopJanitor()
	<-s.ctl.janitorDone
	if s.ownsAudit {
		_ = s.audit.Close()
	}
	if s.ctl.ownsDB {
		return s.ctl.store.Close()
	}
	return nil
}

// Frozen reports whether the kill switch is on (for other endpoints such as
// POST /fetch, which must answer 503 FROZEN too).
func (s *Server) Frozen() bool { return s.ctl.frozen.Load().Frozen }

// Limits returns the rate limits and budgets in force (for /fetch).
func (s *Server) Limits() *budget.Limiter { return s.ctl.limits }

// Metrics returns the metrics registry, for collectors of other packages.
func (s *Server) Metrics() *metrics.Metrics { return s.ctl.metrics }

// janitor purges expired records and forgets idle sessions.
func (s *Server) janitor(ctx context.Context) {
	defer close(s.ctl.janitorDone)
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
		n, err := s.ctl.store.Purge(pctx, now, now.Add(-sessionRetention))
		cancel()
		if err != nil {
			s.log.Error("purging expired records failed", "err", err)
		} else if n > 0 {
			s.log.Info("purged expired records", "rows", n)
		}
		s.ctl.limits.Forget(time.Hour)
		s.ctl.guard.Forget(24 * time.Hour)
	}
}

// sessionRetention is how long an idle session's usage is kept.
const sessionRetention = 7 * 24 * time.Hour

// refusal counts a control-plane refusal and returns it.
func (s *Server) refusal(e *api.Error) *api.Error {
	s.ctl.metrics.Refusals.WithLabelValues(e.Code, e.Budget).Inc()
	return e
}

// budgetError turns a limiter refusal into a 429.
func (s *Server) budgetError(r *budget.Refusal) *api.Error {
	limit, used := r.Limit, r.Used
	e := &api.Error{Status: http.StatusTooManyRequests, Code: r.Code, Message: r.Message, Budget: r.Budget, Limit: &limit}
	if r.Code == budget.CodeBudgetExceeded || r.Budget == budget.TenantConcurrentExecs {
		e.Used = &used
	}
	if r.RetryAfter > 0 {
		e.RetryAfter = int((r.RetryAfter + time.Second - 1) / time.Second)
	}
	return s.refusal(e)
}

var sessionPattern = regexp.MustCompile(`^[A-Za-z0-9._:@-]{1,128}$`)

// sessionID returns the X-Session-Id header, checked.
func sessionID(c echo.Context) (string, error) {
	v := c.Request().Header.Get("X-Session-Id")
	if v == "" {
		return "", nil
	}
	if !sessionPattern.MatchString(v) {
		return "", validation("X-Session-Id", "X-Session-Id must be 1 to 128 letters, digits, '.', '_', ':', '@' or '-'")
	}
	return v, nil
}

// traceparent is the W3C Trace Context header: version-traceid-parentid-flags.
var traceparentPattern = regexp.MustCompile(`^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$`)

// traceID returns the trace id of a valid traceparent header, or "".
func traceID(h string) string {
	m := traceparentPattern.FindStringSubmatch(strings.TrimSpace(h))
	if m == nil || m[1] == "ff" || (m[1] == "00" && m[5] != "") ||
		m[2] == strings.Repeat("0", 32) || m[3] == strings.Repeat("0", 16) {
		return ""
	}
	return m[2]
}

const ctxTraceID = "trace_id"

// observe takes the trace id of a W3C traceparent header into the request's
// log lines, and counts responses by route and status.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if id := traceID(c.Request().Header.Get("traceparent")); id != "" {
			c.Set(ctxTraceID, id)
			c.Set(ctxLogger, requestLogger(c, s.log).With("trace_id", id))
		}
		err := next(c)
		route := c.Path()
		if route == "" || c.Response().Status == http.StatusNotFound && route == "/*" {
			route = "unmatched"
		}
		s.ctl.metrics.Requests.WithLabelValues(route, fmt.Sprint(c.Response().Status)).Inc()
		return err
	}
}

// liveExec is an exec that is queued or running in this process.
type liveExec struct {
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

func (l *liveExec) startedAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.started
}

func (l *liveExec) markStarted() {
	l.mu.Lock()
	l.started = time.Now().UTC()
	l.mu.Unlock()
}

func (ctl *control) register(l *liveExec) {
	ctl.mu.Lock()
	ctl.live[l.id] = l
	ctl.mu.Unlock()
}

func (ctl *control) unregister(l *liveExec) {
	ctl.mu.Lock()
	delete(ctl.live, l.id)
	ctl.mu.Unlock()
	l.stop()
	close(l.done)
}

func (ctl *control) lookup(id string) *liveExec {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	return ctl.live[id]
}

// killAll cancels every live exec with cause and returns them.
func (ctl *control) killAll(cause error) []*liveExec {
	ctl.mu.Lock()
	list := make([]*liveExec, 0, len(ctl.live))
	for _, l := range ctl.live {
		list = append(list, l)
	}
	ctl.mu.Unlock()
	for _, l := range list {
		l.cancel(cause)
	}
	return list
}

// idemNotify wakes requests waiting on an idempotency record.
func (ctl *control) idemNotify() {
	ctl.mu.Lock()
	close(ctl.idemChanged)
	ctl.idemChanged = make(chan struct{})
	ctl.mu.Unlock()
}

func (ctl *control) idemWaitChan() <-chan struct{} {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	return ctl.idemChanged
}

// waitDone waits for the execs to end, at most d.
func waitDone(list []*liveExec, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for _, l := range list {
		select {
		case <-l.done:
		case <-t.C:
			return
		}
	}
}

// canSee reports whether key may see a record of tenant.
func canSee(key *auth.Key, tenant string) bool {
	return key.Tenant == tenant || key.Has(auth.RoleAdmin)
}

// Causes of stopping an exec from outside.
type stopCause struct{ msg string }

func (c *stopCause) Error() string { return c.msg }

func isStopCause(err error) bool {
	var sc *stopCause
	return errors.As(err, &sc)
}

func requestKey(c echo.Context) *auth.Key {
	k, _ := c.Get(ctxKey).(*auth.Key)
	return k
}
