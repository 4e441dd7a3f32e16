package budget

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Refusal codes.
const (
	CodeRateLimited    = api.CodeRateLimited
	CodeBudgetExceeded = api.CodeBudgetExceeded
)

// Budget names, as they appear in refusals and in GET /usage.
const (
	TenantExecRate        = "tenant.exec_per_minute"
	TenantFetchRate       = "tenant.fetch_per_minute"
	TenantConcurrentExecs = "tenant.concurrent_execs"
	TenantDailyCPU        = "tenant.daily_cpu_seconds"
	TenantDailyFetchBytes = "tenant.daily_fetch_bytes"
	// TenantOpenRequests is the cap on the requests a tenant holds open at
	// once (the server's --max-open-requests).
	TenantOpenRequests = "tenant.open_requests"
	SessionMaxExecs    = "session.max_execs"
	SessionCPU         = "session.cpu_seconds"
	SessionWall        = "session.wall_seconds"
	SessionFetchBytes  = "session.fetch_bytes"
)

// Request kinds for the token buckets.
const (
	KindExec  = "exec"
	KindFetch = "fetch"
)

// Refusal says which budget or rate a request ran into.
type Refusal struct {
	Code    string // CodeRateLimited or CodeBudgetExceeded
	Budget  string // e.g. "session.cpu_seconds"
	Limit   float64
	Used    float64
	Message string
	// RetryAfter is when waiting helps (0: it does not).
	RetryAfter time.Duration
}

func (r *Refusal) Error() string { return r.Code + ": " + r.Message }

// minSliceMS is the least CPU or wall time, in milliseconds, worth starting
// a run for: a budget with less left refuses, rather than admitting runs
// cut to a few milliseconds each.
const minSliceMS = 100

// Limiter applies Config. It is safe for concurrent use.
type Limiter struct {
	cfg   *Config
	store store.Store // usage persistence; nil keeps usage in memory only
	log   *slog.Logger
	now   func() time.Time

	// shared, when set (Share), keeps the rate buckets, holds and usage
	// of a fleet in its shared store: exact across replicas, nothing
	// counted in this process's memory. owner names this process in its
	// holds.
	shared store.Shared
	owner  string

	mu       sync.Mutex
	buckets  map[string]*bucket
	tenants  map[string]*tenantState
	sessions map[string]*sessionState
}

type bucket struct {
	tokens float64
	last   time.Time
}

type tenantState struct {
	running int
	day     string
	used    store.Usage // of day, finished runs
	// reservedCPU is CPU milliseconds held by running execs.
	reservedCPU int64
}

type sessionState struct {
	used                      store.Usage // finished runs
	pending                   int64       // execs admitted, not finished
	reservedCPU, reservedWall int64
	lastSeen                  time.Time
}

// New returns a limiter for cfg (nil: unlimited) that keeps usage in st
// (nil: in memory only).
func New(cfg *Config, st store.Store, log *slog.Logger) *Limiter {
	if cfg == nil {
		cfg = unlimited()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Limiter{cfg: cfg, store: st, log: log, now: time.Now,
		buckets: map[string]*bucket{}, tenants: map[string]*tenantState{}, sessions: map[string]*sessionState{}}
}

// Config returns the configuration in force.
func (l *Limiter) Config() *Config { return l.cfg }

// Limits returns the limits of tenant.
func (l *Limiter) Limits(tenant string) Limits { return l.cfg.For(tenant) }

func day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

func untilMidnight(t time.Time) time.Duration {
	t = t.UTC()
	next := time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
	return next.Sub(t)
}

func sessionKey(tenant, session string) string { return tenant + "\x00" + session }

// AllowRequest takes a token from the tenant's bucket for kind, or says
// when one will be there. The error is the shared store's (a fleet).
func (l *Limiter) AllowRequest(ctx context.Context, tenant, kind string) (*Refusal, error) {
	lim := l.cfg.For(tenant)
	rate, name := lim.ExecPerMinute, TenantExecRate
	if kind == KindFetch {
		rate, name = lim.FetchPerMinute, TenantFetchRate
	}
	if rate <= 0 {
		return nil, nil
	}
	capacity := lim.burst(rate)
	perSec := rate / 60
	now := l.now()
	var wait time.Duration
	if l.shared != nil {
		w, err := l.shared.TakeToken(ctx, kind+"|"+tenant, perSec, capacity, now)
		if err != nil {
			return nil, fmt.Errorf("taking a %s token of tenant %s: %w", kind, tenant, err)
		}
		wait = w
	} else {
		l.mu.Lock()
		b := l.buckets[kind+"\x00"+tenant]
		if b == nil {
			b = &bucket{tokens: capacity, last: now}
			l.buckets[kind+"\x00"+tenant] = b
		}
		b.tokens = math.Min(capacity, b.tokens+now.Sub(b.last).Seconds()*perSec)
		b.last = now
		if b.tokens >= 1 {
			b.tokens--
		} else {
			wait = time.Duration((1 - b.tokens) / perSec * float64(time.Second))
		}
		l.mu.Unlock()
	}
	if wait <= 0 {
		return nil, nil
	}
	return &Refusal{Code: CodeRateLimited, Budget: name, Limit: rate, RetryAfter: wait,
		Message: fmt.Sprintf("tenant %s is over its rate of %g %s requests per minute (burst %g); retry after the Retry-After seconds", tenant, rate, kind, capacity)}, nil
}

// load makes sure the tenant's state for today and the session's state are
// in memory, reading them from the store outside the lock.
func (l *Limiter) load(ctx context.Context, tenant, session string) error {
	today := day(l.now())
	l.mu.Lock()
	ts := l.tenants[tenant]
	needTenant := ts == nil || ts.day != today
	_, haveSession := l.sessions[sessionKey(tenant, session)]
	needSession := session != "" && !haveSession
	l.mu.Unlock()
	if l.store == nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		if needTenant {
			l.setDay(tenant, today, store.Usage{})
		}
		if needSession {
			l.sessions[sessionKey(tenant, session)] = &sessionState{lastSeen: l.now()}
		}
		return nil
	}
	var tu, su store.Usage
	var err error
	if needTenant {
		if tu, err = l.store.Usage(ctx, store.ScopeTenantDay, tenant, today); err != nil {
			return fmt.Errorf("reading the usage of tenant %s: %w", tenant, err)
		}
	}
	if needSession {
		if su, err = l.store.Usage(ctx, store.ScopeSession, tenant, session); err != nil {
			return fmt.Errorf("reading the usage of session %s: %w", session, err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if needTenant {
		if ts := l.tenants[tenant]; ts == nil || ts.day != today {
			l.setDay(tenant, today, tu)
		}
	}
	if needSession {
		if _, ok := l.sessions[sessionKey(tenant, session)]; !ok {
			l.sessions[sessionKey(tenant, session)] = &sessionState{used: su, lastSeen: l.now()}
		}
	}
	return nil
}

// setDay starts a new day for tenant, keeping its running execs. l.mu held.
func (l *Limiter) setDay(tenant, today string, used store.Usage) {
	ts := l.tenants[tenant]
	if ts == nil {
		ts = &tenantState{}
		l.tenants[tenant] = ts
	}
	ts.day, ts.used = today, used
}

// Ticket is an admitted exec's hold on its tenant's and session's budgets.
// Exactly one of Finish or Cancel must be called.
type Ticket struct {
	l               *Limiter
	tenant, session string
	day             string
	cpuMS, wallMS   int64 // reserved
	// TimeoutMS is the wall-time limit the run may have: the request's,
	// lowered when a budget has less left.
	TimeoutMS int64
	// LoweredBy names the budget that lowered TimeoutMS ("" if none).
	LoweredBy string
	done      bool
	// hold is the ticket's row in a fleet's store (Share).
	hold *store.Hold
}

// admission is what decide makes of a view: the run's hold and its
// (possibly lowered) time limit, or the refusal.
type admission struct {
	timeoutMS, cpuMS, wallMS int64
	loweredBy                string
	refusal                  *Refusal
}

// decide admits (or refuses) a run of at most timeoutMS on cpus CPUs for
// tenant and session, given what they have used and what their running
// execs hold (v). The same rule decides in memory and in a fleet's store.
func decide(lim Limits, tenant, session, today string, v store.BudgetView, timeoutMS int64, cpus float64, now time.Time) admission {
	if lim.ConcurrentExecs > 0 && v.Running >= lim.ConcurrentExecs {
		return admission{refusal: &Refusal{Code: CodeRateLimited, Budget: TenantConcurrentExecs, Limit: float64(lim.ConcurrentExecs), Used: float64(v.Running), RetryAfter: time.Second,
			Message: fmt.Sprintf("tenant %s already has %d execs queued or running, its limit; retry when one has finished", tenant, v.Running)}}
	}
	maxTimeout, loweredBy := timeoutMS, ""
	lower := func(ms int64, budget string) {
		if ms < maxTimeout {
			maxTimeout, loweredBy = ms, budget
		}
	}
	perCPU := func(cpuMS int64) int64 { return int64(float64(cpuMS) / math.Max(cpus, 0.01)) }
	if lim.DailyCPUSeconds > 0 {
		limit := int64(lim.DailyCPUSeconds * 1000)
		left := limit - v.Tenant.CPUMillis - v.ReservedCPU
		if left < minSliceMS {
			r := &Refusal{Code: CodeBudgetExceeded, Budget: TenantDailyCPU, Limit: lim.DailyCPUSeconds, Used: float64(v.Tenant.CPUMillis) / 1000}
			if v.Tenant.CPUMillis+minSliceMS > limit {
				r.RetryAfter = untilMidnight(now)
				r.Message = fmt.Sprintf("tenant %s has used %.3g of its %g CPU-seconds for today (%s UTC; less than %d ms is left); the budget resets at 00:00 UTC", tenant, float64(v.Tenant.CPUMillis)/1000, lim.DailyCPUSeconds, today, minSliceMS)
			} else {
				r.RetryAfter = time.Second
				r.Message = fmt.Sprintf("tenant %s's running execs hold the rest of its %g daily CPU-seconds; retry when they finish", tenant, lim.DailyCPUSeconds)
			}
			return admission{refusal: r}
		}
		lower(perCPU(left), TenantDailyCPU)
	}
	if session != "" {
		sl := lim.Session
		if sl.MaxExecs > 0 && v.Session.Execs+v.Pending >= sl.MaxExecs {
			return admission{refusal: &Refusal{Code: CodeBudgetExceeded, Budget: SessionMaxExecs, Limit: float64(sl.MaxExecs), Used: float64(v.Session.Execs + v.Pending),
				Message: fmt.Sprintf("session %s has run its %d execs; start a new session or finish the task", session, sl.MaxExecs)}}
		}
		if sl.CPUSeconds > 0 {
			left, r := sessionLeft(session, secondsBudget{SessionCPU, sl.CPUSeconds, v.Session.CPUMillis, v.SessionCPU, "CPU-seconds", "CPU-seconds"})
			if r != nil {
				return admission{refusal: r}
			}
			lower(perCPU(left), SessionCPU)
		}
		if sl.WallSeconds > 0 {
			left, r := sessionLeft(session, secondsBudget{SessionWall, sl.WallSeconds, v.Session.WallMillis, v.SessionWall, "wall-clock seconds of running code", "wall seconds"})
			if r != nil {
				return admission{refusal: r}
			}
			lower(left, SessionWall)
		}
	}
	if maxTimeout < 1 {
		maxTimeout = 1
	}
	a := admission{timeoutMS: maxTimeout, wallMS: maxTimeout, cpuMS: int64(math.Ceil(float64(maxTimeout) * cpus))}
	if maxTimeout < timeoutMS {
		a.loweredBy = loweredBy
	}
	return a
}

// AdmitExec checks the tenant's concurrency and CPU budget and the session's
// exec, CPU and wall budgets for a run of at most timeoutMS on cpus CPUs,
// and holds what the run may spend until Finish or Cancel. In a fleet
// (Share) the decision and the hold are made in the shared store, exact
// across replicas.
func (l *Limiter) AdmitExec(ctx context.Context, tenant, session string, timeoutMS int64, cpus float64) (*Ticket, *Refusal, error) {
	if l.shared != nil {
		return l.admitShared(ctx, tenant, session, timeoutMS, cpus)
	}
	if err := l.load(ctx, tenant, session); err != nil {
		return nil, nil, err
	}
	lim := l.cfg.For(tenant)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	ts := l.tenants[tenant]
	var ss *sessionState
	v := store.BudgetView{Tenant: ts.used, Running: ts.running, ReservedCPU: ts.reservedCPU}
	if session != "" {
		ss = l.sessions[sessionKey(tenant, session)]
		ss.lastSeen = now
		v.Session, v.Pending, v.SessionCPU, v.SessionWall = ss.used, ss.pending, ss.reservedCPU, ss.reservedWall
	}
	a := decide(lim, tenant, session, ts.day, v, timeoutMS, cpus, now)
	if a.refusal != nil {
		return nil, a.refusal, nil
	}
	t := &Ticket{l: l, tenant: tenant, session: session, day: ts.day, TimeoutMS: a.timeoutMS, LoweredBy: a.loweredBy, cpuMS: a.cpuMS, wallMS: a.wallMS}
	ts.running++
	ts.reservedCPU += t.cpuMS
	if ss != nil {
		ss.pending++
		ss.reservedCPU += t.cpuMS
		ss.reservedWall += t.wallMS
	}
	return t, nil, nil
}

// secondsBudget is a session budget of seconds (CPU or wall clock) as
// AdmitExec checks it.
type secondsBudget struct {
	name  string  // SessionCPU or SessionWall
	limit float64 // seconds
	// usedMS is what ended runs spent, heldMS what running ones hold.
	usedMS, heldMS int64
	// spent and held name the budget in the refusal's two messages.
	spent, held string
}

// sessionLeft returns the milliseconds left of session's budget b, or the
// refusal when less than minSliceMS is: for good, or until its running
// execs finish.
func sessionLeft(session string, b secondsBudget) (int64, *Refusal) {
	limit := int64(b.limit * 1000)
	left := limit - b.usedMS - b.heldMS
	if left >= minSliceMS {
		return left, nil
	}
	r := &Refusal{Code: CodeBudgetExceeded, Budget: b.name, Limit: b.limit, Used: float64(b.usedMS) / 1000,
		Message: fmt.Sprintf("session %s has used %.3g of its %g %s (less than %d ms is left); start a new session or finish the task", session, float64(b.usedMS)/1000, b.limit, b.spent, minSliceMS)}
	if b.usedMS+minSliceMS <= limit {
		r.RetryAfter = time.Second
		r.Message = fmt.Sprintf("session %s's running execs hold the rest of its %g %s; retry when they finish", session, b.limit, b.held)
	}
	return 0, r
}

// release gives back what t holds. l.mu held.
func (t *Ticket) release() {
	l := t.l
	if ts := l.tenants[t.tenant]; ts != nil {
		ts.running--
		if ts.day == t.day {
			ts.reservedCPU -= t.cpuMS
		}
	}
	if t.session != "" {
		if ss := l.sessions[sessionKey(t.tenant, t.session)]; ss != nil {
			ss.pending--
			ss.reservedCPU -= t.cpuMS
			ss.reservedWall -= t.wallMS
		}
	}
}

// Cancel gives back the hold of a run that never started.
func (t *Ticket) Cancel() {
	if t == nil {
		return
	}
	if t.hold != nil {
		t.l.releaseShared(context.Background(), t, nil)
		return
	}
	t.l.mu.Lock()
	defer t.l.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	t.release()
}

// Finish charges what the run used (CPU and wall milliseconds) and gives
// back the rest of the hold; the usage is written to the store.
func (t *Ticket) Finish(ctx context.Context, cpuMS, wallMS int64) {
	if t == nil {
		return
	}
	l := t.l
	if t.hold != nil {
		l.releaseShared(ctx, t, &store.Usage{Execs: 1, CPUMillis: cpuMS, WallMillis: wallMS})
		return
	}
	l.mu.Lock()
	if t.done {
		l.mu.Unlock()
		return
	}
	t.done = true
	t.release()
	u := store.Usage{Execs: 1, CPUMillis: cpuMS, WallMillis: wallMS}
	if ts := l.tenants[t.tenant]; ts != nil && ts.day == t.day {
		add(&ts.used, u)
	}
	if t.session != "" {
		if ss := l.sessions[sessionKey(t.tenant, t.session)]; ss != nil {
			add(&ss.used, u)
			ss.lastSeen = l.now()
		}
	}
	l.mu.Unlock()
	l.persist(ctx, t.tenant, t.session, t.day, u)
}

func (l *Limiter) persist(ctx context.Context, tenant, session, today string, u store.Usage) {
	if l.store == nil {
		return
	}
	deltas := []store.UsageDelta{{Scope: store.ScopeTenantDay, Tenant: tenant, Name: today, Usage: u}}
	if session != "" {
		deltas = append(deltas, store.UsageDelta{Scope: store.ScopeSession, Tenant: tenant, Name: session, Usage: u})
	}
	if err := l.store.AddUsage(context.WithoutCancel(ctx), deltas...); err != nil {
		l.log.Error("writing usage to the store failed; budgets count it until a restart", "tenant", tenant, "err", err)
	}
}

func add(dst *store.Usage, u store.Usage) {
	dst.Execs += u.Execs
	dst.CPUMillis += u.CPUMillis
	dst.WallMillis += u.WallMillis
	dst.FetchBytes += u.FetchBytes
}

// FetchAllowance is the hook for POST /fetch: it says how many bytes a
// fetch of tenant's session may still read (-1: no limit), or refuses when
// a fetched-bytes budget is spent. Charge what was read with ChargeFetch.
func (l *Limiter) FetchAllowance(ctx context.Context, tenant, session string) (int64, *Refusal, error) {
	now := l.now()
	var tu, su store.Usage // today's and the session's
	if l.shared != nil {
		v, err := l.shared.View(ctx, tenant, session, day(now))
		if err != nil {
			return 0, nil, err
		}
		tu, su = v.Tenant, v.Session
	} else {
		if err := l.load(ctx, tenant, session); err != nil {
			return 0, nil, err
		}
		l.mu.Lock()
		tu = l.tenants[tenant].used
		if session != "" {
			su = l.sessions[sessionKey(tenant, session)].used
		}
		l.mu.Unlock()
	}
	lim := l.cfg.For(tenant)
	allow := int64(-1)
	if lim.DailyFetchBytes > 0 {
		left := lim.DailyFetchBytes - tu.FetchBytes
		if left <= 0 {
			return 0, &Refusal{Code: CodeBudgetExceeded, Budget: TenantDailyFetchBytes, Limit: float64(lim.DailyFetchBytes), Used: float64(tu.FetchBytes),
				RetryAfter: untilMidnight(now), Message: fmt.Sprintf("tenant %s has fetched its %d bytes for today; the budget resets at 00:00 UTC", tenant, lim.DailyFetchBytes)}, nil
		}
		allow = left
	}
	if session != "" && lim.Session.FetchBytes > 0 {
		left := lim.Session.FetchBytes - su.FetchBytes
		if left <= 0 {
			return 0, &Refusal{Code: CodeBudgetExceeded, Budget: SessionFetchBytes, Limit: float64(lim.Session.FetchBytes), Used: float64(su.FetchBytes),
				Message: fmt.Sprintf("session %s has fetched its %d bytes; start a new session or finish the task", session, lim.Session.FetchBytes)}, nil
		}
		if allow < 0 || left < allow {
			allow = left
		}
	}
	return allow, nil, nil
}

// ChargeCPU adds CPU used outside any exec (what a session's threads did
// after its last call) to the tenant's day and the session.
func (l *Limiter) ChargeCPU(ctx context.Context, tenant, session string, cpuMS int64) {
	l.charge(ctx, tenant, session, store.Usage{CPUMillis: cpuMS}, "CPU")
}

// ChargeFetch adds fetched bytes to the tenant's day and the session.
func (l *Limiter) ChargeFetch(ctx context.Context, tenant, session string, n int64) {
	l.charge(ctx, tenant, session, store.Usage{FetchBytes: n}, "fetched bytes")
}

// charge adds u to the tenant's day and the session; what names it in a
// failure's log line.
func (l *Limiter) charge(ctx context.Context, tenant, session string, u store.Usage, what string) {
	if l.shared != nil {
		l.persist(ctx, tenant, session, day(l.now()), u)
		return
	}
	if err := l.load(ctx, tenant, session); err != nil {
		l.log.Error("charging "+what+" failed", "tenant", tenant, "err", err)
		return
	}
	l.mu.Lock()
	ts := l.tenants[tenant]
	add(&ts.used, u)
	if session != "" {
		add(&l.sessions[sessionKey(tenant, session)].used, u)
	}
	today := ts.day
	l.mu.Unlock()
	l.persist(ctx, tenant, session, today, u)
}

// Forget drops sessions idle for longer than idle from memory (their usage
// stays in the store and is read again if the session comes back).
func (l *Limiter) Forget(idle time.Duration) int {
	cut := l.now().Add(-idle)
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for k, ss := range l.sessions {
		if ss.pending == 0 && ss.lastSeen.Before(cut) && l.store != nil {
			delete(l.sessions, k)
			n++
		}
	}
	return n
}
