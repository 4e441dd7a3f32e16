package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Two "replicas" (two stores on one database) take tokens from one
// bucket at once: exactly its capacity is handed out, and then the wait
// is what the refill rate says.
func TestTakeTokenIsExactAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	dsn := newPGDatabase(t)
	a, b := openPG(t, dsn), openPG(t, dsn)
	defer a.Close()
	defer b.Close()
	now := time.Now()
	var taken atomic.Int64
	var wg sync.WaitGroup
	for i := range 60 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait, err := s.TakeToken(ctx, "exec|acme", 20.0/60, 20, now)
			if err != nil {
				t.Error(err)
				return
			}
			if wait == 0 {
				taken.Add(1)
			} else if wait <= 0 || wait > 3*time.Second {
				t.Errorf("wait %v; want up to the 3 s one token takes at 20 a minute", wait)
			}
		}()
	}
	wg.Wait()
	if n := taken.Load(); n != 20 {
		t.Fatalf("%d tokens taken from a bucket of 20; want exactly 20", n)
	}
	// Three seconds later one token is back, and only one.
	later := now.Add(3 * time.Second)
	if w, _ := a.TakeToken(ctx, "exec|acme", 20.0/60, 20, later); w != 0 {
		t.Fatalf("after 3 s: wait %v, want a token", w)
	}
	if w, _ := b.TakeToken(ctx, "exec|acme", 20.0/60, 20, later); w == 0 {
		t.Fatal("a second token 3 s later; want one")
	}
	// Another key is another bucket.
	if w, _ := b.TakeToken(ctx, "exec|other", 20.0/60, 20, later); w != 0 {
		t.Fatal("another tenant's bucket was empty")
	}
}

// Admissions of one tenant from two stores at once see each other's
// holds: a limit of 3 running execs admits exactly 3.
func TestAdmitSerializesATenant(t *testing.T) {
	ctx := context.Background()
	dsn := newPGDatabase(t)
	a, b := openPG(t, dsn), openPG(t, dsn)
	defer a.Close()
	defer b.Close()
	var admitted atomic.Int64
	var seq atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var holds []*Hold
	for i := range 16 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := s.Admit(ctx, "acme", "ses1", "2026-12-02", func(v BudgetView) *Hold {
				if v.Running >= 3 {
					return nil
				}
				return &Hold{ID: fmt.Sprintf("h%d", seq.Add(1)), Tenant: "acme", Session: "ses1", Day: "2026-12-02", CPUMS: 100, WallMS: 100, Owner: "p1"}
			})
			if err != nil {
				t.Error(err)
				return
			}
			if h != nil {
				admitted.Add(1)
				mu.Lock()
				holds = append(holds, h)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n := admitted.Load(); n != 3 {
		t.Fatalf("%d admitted; want exactly 3", n)
	}
	// The view counts the holds of the tenant and the session.
	var seen BudgetView
	if _, err := a.Admit(ctx, "acme", "ses1", "2026-12-02", func(v BudgetView) *Hold { seen = v; return nil }); err != nil {
		t.Fatal(err)
	}
	if seen.Running != 3 || seen.ReservedCPU != 300 || seen.Pending != 3 || seen.SessionWall != 300 {
		t.Fatalf("view %+v", seen)
	}
	// Releasing a hold charges its usage in the same transaction.
	if err := b.ReleaseHold(ctx, holds[0].ID, UsageDelta{Scope: ScopeTenantDay, Tenant: "acme", Name: "2026-12-02", Usage: Usage{Execs: 1, CPUMillis: 40}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Admit(ctx, "acme", "ses1", "2026-12-02", func(v BudgetView) *Hold { seen = v; return nil }); err != nil {
		t.Fatal(err)
	}
	if seen.Running != 2 || seen.Tenant.CPUMillis != 40 || seen.Tenant.Execs != 1 {
		t.Fatalf("after release: %+v", seen)
	}
}

// A member that stops beating is dead: Recover on another takes its keys
// for interrupted, drops its holds and ends its sessions, and leaves a
// live member's alone.
func TestRecoverTakesOnlyDeadMembersWork(t *testing.T) {
	ctx := context.Background()
	dsn := newPGDatabase(t)
	s := openPG(t, dsn)
	defer s.Close()
	s.DeadAfter = 500 * time.Millisecond
	for _, m := range []Member{{Owner: "p_live", Replica: "r1", Addr: "http://r1"}, {Owner: "p_dead", Replica: "r2", Addr: "http://r2"}, {Owner: "p_me", Replica: "r3"}} {
		if err := s.Beat(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	exp := time.Now().Add(time.Hour)
	for _, o := range []string{"p_live", "p_dead", "p_me"} {
		if _, _, err := s.ClaimIdempotency(ctx, &IdemRecord{Tenant: "t", Key: o, Owner: o, ExpiresAt: exp}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutSession(ctx, &SessionEntry{ID: "ses_" + o, Tenant: "t", Owner: o, Replica: o, State: SessionLive}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Admit(ctx, "t", "", "d", func(BudgetView) *Hold { return &Hold{ID: "h_" + o, Tenant: "t", Day: "d", Owner: o} }); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(700 * time.Millisecond)
	for _, m := range []Member{{Owner: "p_live", Replica: "r1", Addr: "http://r1"}, {Owner: "p_dead", Replica: "r2", Addr: "http://r2"}, {Owner: "p_me", Replica: "r3"}} {
		if err := s.Beat(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := s.Recover(ctx, "p_me"); err != nil || st.Idempotency != 0 {
		t.Fatalf("recover while all are alive: %+v %v", st, err)
	}
	time.Sleep(700 * time.Millisecond)
	if err := s.Beat(ctx, Member{Owner: "p_live", Replica: "r1", Addr: "http://r1"}); err != nil {
		t.Fatal(err)
	}
	if _, alive, err := s.Member(ctx, "p_dead"); err != nil || alive {
		t.Fatalf("p_dead alive %v, %v", alive, err)
	}
	st, err := s.Recover(ctx, "p_me")
	if err != nil || st.Idempotency != 1 || st.Sessions != 1 {
		t.Fatalf("recover: %+v %v; want p_dead's key and session", st, err)
	}
	for o, want := range map[string]string{"p_live": IdemInFlight, "p_dead": IdemInterrupted, "p_me": IdemInFlight} {
		if r, _ := s.GetIdempotency(ctx, "t", o); r.State != want {
			t.Errorf("%s's key: %s, want %s", o, r.State, want)
		}
	}
	if e, _ := s.GetSession(ctx, "ses_p_dead"); e.State != SessionEnded || e.EndReason == "" {
		t.Errorf("dead replica's session: %+v", e)
	}
	if e, _ := s.GetSession(ctx, "ses_p_live"); e.State != SessionLive {
		t.Errorf("live replica's session: %+v", e)
	}
	var v BudgetView
	s.Admit(ctx, "t", "", "d", func(x BudgetView) *Hold { v = x; return nil })
	if v.Running != 2 {
		t.Errorf("holds after recover: %d, want 2 (the dead member's gone)", v.Running)
	}
	if _, err := s.GetSession(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing session: %v", err)
	}
	if err := s.Leave(ctx, "p_live"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Member(ctx, "p_live"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after Leave: %v", err)
	}
}

// While the database is down nobody beats: the first member back must not
// take the others' work for interrupted. Recover waits until its own
// beats have gone through for DeadAfter; a member still silent then is
// dead.
func TestRecoverWaitsOutAStoreOutage(t *testing.T) {
	ctx := context.Background()
	// One store per process, as in a fleet.
	dsn := newPGDatabase(t)
	s, so := openPG(t, dsn), openPG(t, dsn)
	defer s.Close()
	defer so.Close()
	s.DeadAfter, so.DeadAfter = 500*time.Millisecond, 500*time.Millisecond
	me, other := Member{Owner: "p_me", Replica: "r1"}, Member{Owner: "p_other", Replica: "r2"}
	if st, err := s.Recover(ctx, me.Owner); err != nil || st != (RecoverStats{}) {
		t.Fatalf("recover before a first beat: %+v %v", st, err)
	}
	for m, st := range map[Member]*Postgres{me: s, other: so} {
		if err := st.Beat(ctx, m); err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.ClaimIdempotency(ctx, &IdemRecord{Tenant: "t", Key: m.Owner, Owner: m.Owner, ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(700 * time.Millisecond)
	// The outage as p_me sees it: its beat fails.
	down, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Beat(down, me); err == nil {
		t.Fatal("a beat with a cancelled context succeeded")
	}
	time.Sleep(700 * time.Millisecond)
	// Back: p_me beats first; p_other's last beat is 1.4 s old.
	if err := s.Beat(ctx, me); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Recover(ctx, me.Owner); err != nil || st.Idempotency != 0 {
		t.Fatalf("recover right after the outage: %+v %v; want nothing taken", st, err)
	}
	if r, _ := s.GetIdempotency(ctx, "t", other.Owner); r.State != IdemInFlight {
		t.Fatalf("p_other's key after the outage: %s", r.State)
	}
	if _, alive, err := s.Member(ctx, other.Owner); err != nil || !alive {
		t.Fatalf("p_other right after the outage: alive %v, %v; want presumed alive", alive, err)
	}
	// p_other stays silent while p_me's beats go through: dead.
	time.Sleep(600 * time.Millisecond)
	if err := s.Beat(ctx, me); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Recover(ctx, me.Owner); err != nil || st.Idempotency != 1 {
		t.Fatalf("recover %s after p_me's beats went through: %+v %v; want p_other's key", s.DeadAfter, st, err)
	}
	if r, _ := s.GetIdempotency(ctx, "t", me.Owner); r.State != IdemInFlight {
		t.Errorf("p_me's own key: %s", r.State)
	}
	if _, alive, err := s.Member(ctx, other.Owner); err != nil || alive {
		t.Errorf("p_other silent while the store answered: alive %v, %v", alive, err)
	}
}

func TestStreaks(t *testing.T) {
	ctx := context.Background()
	s := openPG(t, newPGDatabase(t))
	defer s.Close()
	if st, err := s.Streak(ctx, "a"); err != nil || st.Count != 0 {
		t.Fatalf("empty: %+v %v", st, err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	if err := s.PutStreak(ctx, "a", Streak{Call: "c", Outcome: "o", Count: 2, Seen: now}); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Streak(ctx, "a"); st.Call != "c" || st.Outcome != "o" || st.Count != 2 || !st.Seen.Equal(now) {
		t.Fatalf("got %+v", st)
	}
}

// Replicas starting at once migrate once, one after the other.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	dsn := newPGDatabase(t)
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := OpenPostgres(context.Background(), dsn)
			if err != nil {
				t.Error(err)
				return
			}
			s.Close()
		}()
	}
	wg.Wait()
}
