package budget

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
)

const sample = `# limits
defaults:
  exec_per_minute: 120
  concurrent_execs: 8
  session:
    max_execs: 500
tenants:
  acme:
    exec_per_minute: 6
    burst: 3
    daily_cpu_seconds: 10
    session:
      cpu_seconds: 2
  quiet:
    loop_repeats: 0
`

func TestParse(t *testing.T) {
	cfg, err := Parse("t.yaml", []byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.For("acme")
	if a.ExecPerMinute != 6 || a.Burst != 3 || a.ConcurrentExecs != 8 || a.DailyCPUSeconds != 10 ||
		a.Session.CPUSeconds != 2 || a.Session.MaxExecs != 500 || a.LoopRepeats != defaultLoopRepeats {
		t.Fatalf("acme %+v: want its fields over the defaults", a)
	}
	if d := cfg.For("other"); d.ExecPerMinute != 120 || d.Session.MaxExecs != 500 {
		t.Fatalf("defaults %+v", d)
	}
	if q := cfg.For("quiet"); q.LoopRepeats != 0 {
		t.Fatalf("loop_repeats 0 not kept: %+v", q)
	}
	for _, tc := range []struct{ src, want string }{
		{"defaults:\n  exec_per_minut: 3\n", "t.yaml:2: field exec_per_minut not found"},
		{"tenants:\n  acme:\n    burst: -1\n", "t.yaml:3: burst is negative"},
		{"tenants:\n  acme:\n    session:\n      cpu_second: 1\n", "t.yaml:4: field cpu_second not found"},
		{"tenants:\n  'a b':\n    burst: 1\n", "t.yaml:2: tenant name"},
		{"tenant:\n  acme: {}\n", "t.yaml:1: unknown top-level key"},
		{"defaults:\n  loop_repeats: 1\n", "loop_repeats is 1"},
		{"defaults:\n  burst: lots\n", "t.yaml:2: cannot unmarshal"},
	} {
		_, err := Parse("t.yaml", []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.src, err, tc.want)
		}
	}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newLimiter(t *testing.T, st store.Store) (*Limiter, *clock) {
	cfg, err := Parse("t.yaml", []byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	l := New(cfg, st, nil)
	c := &clock{t: time.Date(2026, 3, 1, 23, 0, 0, 0, time.UTC)}
	l.now = c.now
	return l, c
}

func TestTokenBucket(t *testing.T) {
	l, c := newLimiter(t, nil)
	for i := 0; i < 3; i++ {
		if r := allow(l, "acme", KindExec); r != nil {
			t.Fatalf("request %d of the burst refused: %v", i, r)
		}
	}
	r := allow(l, "acme", KindExec)
	if r == nil || r.Code != CodeRateLimited || r.Budget != TenantExecRate || r.Limit != 6 || r.RetryAfter != 10*time.Second {
		t.Fatalf("4th request: %+v", r)
	}
	c.add(10 * time.Second) // 6/min = one token per 10 s
	if r := allow(l, "acme", KindExec); r != nil {
		t.Fatalf("after refill: %v", r)
	}
	if r := allow(l, "acme", KindExec); r == nil {
		t.Fatal("second request after one refill passed")
	}
	// Fetch has no rate for acme; other tenants have their own bucket.
	if r := allow(l, "acme", KindFetch); r != nil {
		t.Fatal(r)
	}
	if r := allow(l, "other", KindExec); r != nil {
		t.Fatal(r)
	}
}

func TestSessionCPUBudgetLowersTimeoutAndRefuses(t *testing.T) {
	ctx := context.Background()
	st, _ := store.OpenSQLite("")
	defer st.Close()
	l, _ := newLimiter(t, st)
	// 2 CPU-seconds per session: a 10 s run on 1 CPU is cut to 2 s.
	tk, r, err := l.AdmitExec(ctx, "acme", "s1", 10000, 1)
	if err != nil || r != nil {
		t.Fatal(r, err)
	}
	if tk.TimeoutMS != 2000 || tk.LoweredBy != SessionCPU {
		t.Fatalf("ticket %+v", tk)
	}
	// While it runs, its hold blocks a second run of the session.
	_, r, _ = l.AdmitExec(ctx, "acme", "s1", 10000, 1)
	if r == nil || r.Budget != SessionCPU || r.RetryAfter == 0 {
		t.Fatalf("concurrent run: %+v", r)
	}
	// On 0.5 CPU the same budget allows 4 s of wall time (another session).
	tk2, _, _ := l.AdmitExec(ctx, "acme", "s2", 10000, 0.5)
	if tk2.TimeoutMS != 4000 {
		t.Fatalf("half a CPU: %d", tk2.TimeoutMS)
	}
	tk2.Cancel()
	tk.Finish(ctx, 2100, 2000)
	_, r, _ = l.AdmitExec(ctx, "acme", "s1", 10000, 1)
	if r == nil || r.Code != CodeBudgetExceeded || r.Budget != SessionCPU || r.Limit != 2 || r.Used != 2.1 || r.RetryAfter != 0 {
		t.Fatalf("after the budget is spent: %+v", r)
	}
	// Survives a restart: a new limiter over the same store refuses too.
	l2, _ := newLimiter(t, st)
	_, r, _ = l2.AdmitExec(ctx, "acme", "s1", 10000, 1)
	if r == nil || r.Budget != SessionCPU {
		t.Fatalf("after restart: %+v", r)
	}
	rep, _ := l2.SessionUsage(ctx, "acme", "s1")
	if rep.Used.Execs != 1 || rep.Used.CPUSeconds != 2.1 || *rep.Budgets[1].Remaining != 0 {
		t.Fatalf("report %+v", rep)
	}
	// Another tenant's session of the same name is separate.
	if _, r, _ := l2.AdmitExec(ctx, "other", "s1", 10000, 1); r != nil {
		t.Fatalf("other tenant's s1: %+v", r)
	}
}

func TestTenantDailyCPUAndConcurrency(t *testing.T) {
	ctx := context.Background()
	l, c := newLimiter(t, nil)
	var tks []*Ticket
	for i := 0; i < 8; i++ {
		tk, r, _ := l.AdmitExec(ctx, "other", "", 10000, 1)
		if r != nil {
			t.Fatalf("run %d: %+v", i, r)
		}
		tks = append(tks, tk)
	}
	_, r, _ := l.AdmitExec(ctx, "other", "", 10000, 1)
	if r == nil || r.Code != CodeRateLimited || r.Budget != TenantConcurrentExecs || r.RetryAfter == 0 {
		t.Fatalf("9th concurrent: %+v", r)
	}
	for _, tk := range tks {
		tk.Cancel()
		tk.Cancel() // twice is harmless
	}
	// acme: 10 CPU-seconds a day.
	tk, _, _ := l.AdmitExec(ctx, "acme", "", 60000, 1)
	if tk.TimeoutMS != 10000 || tk.LoweredBy != TenantDailyCPU {
		t.Fatalf("%+v", tk)
	}
	tk.Finish(ctx, 10000, 10000)
	_, r, _ = l.AdmitExec(ctx, "acme", "", 1000, 1)
	if r == nil || r.Budget != TenantDailyCPU || r.RetryAfter != time.Hour {
		t.Fatalf("spent: %+v", r)
	}
	c.add(time.Hour) // midnight UTC
	if _, r, _ := l.AdmitExec(ctx, "acme", "", 1000, 1); r != nil {
		t.Fatalf("next day: %+v", r)
	}
	rep, _ := l.TenantUsage(ctx, "acme")
	if rep.Day != "2026-03-02" || rep.Used.Running != 1 {
		t.Fatalf("report %+v", rep)
	}
}

func TestSessionMaxExecs(t *testing.T) {
	ctx := context.Background()
	cfg, _ := Parse("t.yaml", []byte("defaults:\n  session: {max_execs: 2, wall_seconds: 3}\n"))
	l := New(cfg, nil, nil)
	a, _, _ := l.AdmitExec(ctx, "t", "s", 10000, 1)
	if a.TimeoutMS != 3000 || a.LoweredBy != SessionWall {
		t.Fatalf("%+v", a)
	}
	a.Finish(ctx, 10, 1000)
	b, _, _ := l.AdmitExec(ctx, "t", "s", 10000, 1)
	if b.TimeoutMS != 2000 {
		t.Fatalf("%+v", b)
	}
	_, r, _ := l.AdmitExec(ctx, "t", "s", 10, 1)
	if r == nil || r.Budget != SessionMaxExecs || r.Limit != 2 {
		t.Fatalf("%+v", r)
	}
	b.Cancel() // never ran: does not count
	c, r, _ := l.AdmitExec(ctx, "t", "s", 10, 1)
	if r != nil {
		t.Fatalf("%+v", r)
	}
	c.Finish(ctx, 10, 1950)
	// 50 ms of wall time are left: not worth a run.
	cfg2, _ := Parse("t.yaml", []byte("defaults:\n  session: {wall_seconds: 3}\n"))
	l2 := New(cfg2, nil, nil)
	d, _, _ := l2.AdmitExec(ctx, "t", "s", 10000, 1)
	d.Finish(ctx, 10, 2950)
	if _, r, _ := l2.AdmitExec(ctx, "t", "s", 10000, 1); r == nil || r.Budget != SessionWall || r.RetryAfter != 0 || !strings.Contains(r.Message, "less than 100 ms") {
		t.Fatalf("50 ms left: %+v", r)
	}
}

func TestFetchHook(t *testing.T) {
	ctx := context.Background()
	cfg, _ := Parse("t.yaml", []byte("defaults:\n  daily_fetch_bytes: 100\n  session: {fetch_bytes: 50}\n"))
	l := New(cfg, nil, nil)
	n, r, _ := l.FetchAllowance(ctx, "t", "s")
	if n != 50 || r != nil {
		t.Fatal(n, r)
	}
	l.ChargeFetch(ctx, "t", "s", 50)
	if _, r, _ := l.FetchAllowance(ctx, "t", "s"); r == nil || r.Budget != SessionFetchBytes {
		t.Fatalf("%+v", r)
	}
	if n, _, _ := l.FetchAllowance(ctx, "t", "s2"); n != 50 {
		t.Fatal(n)
	}
	l.ChargeFetch(ctx, "t", "s2", 50)
	if _, r, _ := l.FetchAllowance(ctx, "t", ""); r == nil || r.Budget != TenantDailyFetchBytes || r.RetryAfter == 0 {
		t.Fatalf("%+v", r)
	}
}

// CPU charged outside an exec (a session's threads after its last call)
// counts against the tenant's day and the session.
func TestChargeCPUOutsideAnExec(t *testing.T) {
	ctx := context.Background()
	cfg, _ := Parse("t.yaml", []byte("defaults:\n  daily_cpu_seconds: 2\n  session: {cpu_seconds: 1}\n"))
	l := New(cfg, nil, nil)
	if _, r, _ := l.AdmitExec(ctx, "t", "s", 100, 1); r != nil {
		t.Fatalf("before: %+v", r)
	}
	l.ChargeCPU(ctx, "t", "s", 1500)
	if _, r, _ := l.AdmitExec(ctx, "t", "s", 100, 1); r == nil || r.Budget != SessionCPU {
		t.Fatalf("the session's budget after 1.5 s charged: %+v", r)
	}
	l.ChargeCPU(ctx, "t", "other", 600)
	if _, r, _ := l.AdmitExec(ctx, "t", "", 100, 1); r == nil || r.Budget != TenantDailyCPU {
		t.Fatalf("the tenant's day after 2.1 s charged: %+v", r)
	}
	rep, err := l.TenantUsage(ctx, "t")
	if err != nil || rep.Used.CPUSeconds != 2.1 || rep.Used.Execs != 0 {
		t.Fatalf("usage %+v %v", rep, err)
	}
}

// allow is AllowRequest without a shared store (which cannot fail).
func allow(l *Limiter, tenant, kind string) *Refusal {
	r, err := l.AllowRequest(context.Background(), tenant, kind)
	if err != nil {
		panic(err)
	}
	return r
}
