package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func open(t *testing.T, dir string) *SQLite {
	t.Helper()
	s, err := OpenSQLite(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestWALAndLock(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	var mode string
	if err := s.db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode %q, %v; want wal", mode, err)
	}
	if _, err := OpenSQLite(dir); err == nil {
		t.Fatal("a second open of the same data dir succeeded; want the lock to refuse it")
	}
	s.Close()
	s2 := open(t, dir)
	s2.Close()
}

func TestIdempotencyLifecycle(t *testing.T) { forEachBackend(t, testIdempotencyLifecycle) }

func testIdempotencyLifecycle(t *testing.T, b backend) {
	ctx := context.Background()
	s := b.open(t)
	rec := &IdemRecord{Tenant: "acme", Key: "k1", RequestSHA256: "aa", ExecID: "ex_1", Owner: "p1", ExpiresAt: time.Now().Add(time.Hour)}
	got, claimed, err := s.ClaimIdempotency(ctx, rec)
	if err != nil || !claimed || got.State != IdemInFlight {
		t.Fatalf("first claim: %+v %v %v", got, claimed, err)
	}
	// Another tenant's same key is independent.
	if _, claimed, _ := s.ClaimIdempotency(ctx, &IdemRecord{Tenant: "other", Key: "k1", Owner: "p1", ExpiresAt: time.Now().Add(time.Hour)}); !claimed {
		t.Fatal("the same key of another tenant was not claimable")
	}
	got, claimed, err = s.ClaimIdempotency(ctx, &IdemRecord{Tenant: "acme", Key: "k1", RequestSHA256: "bb", Owner: "p1", ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil || claimed || got.RequestSHA256 != "aa" || got.ExecID != "ex_1" {
		t.Fatalf("second claim: %+v %v %v", got, claimed, err)
	}
	if err := s.CompleteIdempotency(ctx, "acme", "k1", 200, []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.CompleteIdempotency(ctx, "acme", "k1", 200, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("completing twice: %v", err)
	}
	s.Close()

	// Survives a reopen.
	s = b.open(t)
	defer s.Close()
	got, err = s.GetIdempotency(ctx, "acme", "k1")
	if err != nil || got.State != IdemDone || got.Status != 200 || string(got.Body) != `{"x":1}` {
		t.Fatalf("after reopen: %+v %v", got, err)
	}
}

func TestReleaseRecoverAndExpiry(t *testing.T) { forEachBackend(t, testReleaseRecoverAndExpiry) }

func testReleaseRecoverAndExpiry(t *testing.T, b backend) {
	ctx := context.Background()
	s := b.open(t)
	defer s.Close()
	exp := time.Now().Add(time.Hour)
	s.ClaimIdempotency(ctx, &IdemRecord{Tenant: "t", Key: "a", Owner: "dead", ExpiresAt: exp})
	s.ClaimIdempotency(ctx, &IdemRecord{Tenant: "t", Key: "b", Owner: "live", ExpiresAt: exp})
	s.ClaimIdempotency(ctx, &IdemRecord{Tenant: "t", Key: "c", Owner: "dead", ExpiresAt: exp})
	// Release only works for the owner.
	s.ReleaseIdempotency(ctx, "t", "c", "someone-else")
	if _, err := s.GetIdempotency(ctx, "t", "c"); err != nil {
		t.Fatal("released by a non-owner")
	}
	s.ReleaseIdempotency(ctx, "t", "c", "dead")
	if _, err := s.GetIdempotency(ctx, "t", "c"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("not released: %v", err)
	}
	s.PutExec(ctx, &ExecRecord{ID: "ex_q", Tenant: "t", State: ExecQueued, Owner: "dead", ExpiresAt: exp})
	s.PutExec(ctx, &ExecRecord{ID: "ex_d", Tenant: "t", State: ExecDone, Owner: "dead", Body: []byte("{}"), ExpiresAt: exp})
	beatLongEnough(t, s, "live")
	st, err := s.Recover(ctx, "live")
	if err != nil || st.Idempotency != 1 || st.Execs != 1 {
		t.Fatalf("recover: %+v %v", st, err)
	}
	if r, _ := s.GetIdempotency(ctx, "t", "a"); r.State != IdemInterrupted {
		t.Fatalf("a: %s", r.State)
	}
	if r, _ := s.GetIdempotency(ctx, "t", "b"); r.State != IdemInFlight {
		t.Fatalf("b: %s", r.State)
	}
	if r, _ := s.GetExec(ctx, "ex_q"); r.State != ExecInterrupted {
		t.Fatalf("ex_q: %s", r.State)
	}
	if r, _ := s.GetExec(ctx, "ex_d"); r.State != ExecDone {
		t.Fatalf("ex_d: %s", r.State)
	}
	// An expired record is gone for readers and claimable again.
	s.ClaimIdempotency(ctx, &IdemRecord{Tenant: "t", Key: "old", Owner: "live", RequestSHA256: "1", ExpiresAt: time.Now().Add(-time.Second)})
	if _, err := s.GetIdempotency(ctx, "t", "old"); !errors.Is(err, ErrNotFound) {
		t.Fatal("expired record still readable")
	}
	if _, claimed, _ := s.ClaimIdempotency(ctx, &IdemRecord{Tenant: "t", Key: "old", Owner: "live", RequestSHA256: "2", ExpiresAt: exp}); !claimed {
		t.Fatal("expired key not claimable")
	}
	s.PutExec(ctx, &ExecRecord{ID: "ex_old", Tenant: "t", State: ExecDone, ExpiresAt: time.Now().Add(-time.Second)})
	n, err := s.Purge(ctx, time.Now(), time.Now().Add(-time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
}

// Many goroutines claim one key: exactly one wins.
func TestClaimRace(t *testing.T) { forEachBackend(t, testClaimRace) }

func testClaimRace(t *testing.T, b backend) {
	ctx := context.Background()
	s := b.open(t)
	defer s.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, claimed, err := s.ClaimIdempotency(ctx, &IdemRecord{Tenant: "t", Key: "k", ExecID: fmt.Sprint(i), Owner: "p", ExpiresAt: time.Now().Add(time.Hour)})
			if err != nil {
				t.Error(err)
			}
			if claimed {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d claims won, want 1", wins)
	}
}

func TestUsageAndSettings(t *testing.T) { forEachBackend(t, testUsageAndSettings) }

func testUsageAndSettings(t *testing.T, b backend) {
	ctx := context.Background()
	s := b.open(t)
	defer s.Close()
	d := UsageDelta{Scope: ScopeSession, Tenant: "t", Name: "s1", Usage: Usage{Execs: 1, CPUMillis: 100, WallMillis: 200}}
	if err := s.AddUsage(ctx, d, d, UsageDelta{Scope: ScopeTenantDay, Tenant: "t", Name: "2026-01-01", Usage: Usage{CPUMillis: 5}}); err != nil {
		t.Fatal(err)
	}
	u, err := s.Usage(ctx, ScopeSession, "t", "s1")
	if err != nil || u != (Usage{Execs: 2, CPUMillis: 200, WallMillis: 400}) {
		t.Fatalf("usage %+v %v", u, err)
	}
	if u, _ := s.Usage(ctx, ScopeSession, "t", "nope"); u != (Usage{}) {
		t.Fatalf("missing usage %+v", u)
	}
	if _, ok, _ := s.Setting(ctx, "frozen"); ok {
		t.Fatal("unset setting reported set")
	}
	s.SetSetting(ctx, "frozen", "1")
	s.SetSetting(ctx, "frozen", "2")
	if v, ok, err := s.Setting(ctx, "frozen"); v != "2" || !ok || err != nil {
		t.Fatalf("setting %q %v %v", v, ok, err)
	}
}

func BenchmarkClaimComplete(b *testing.B) {
	ctx := context.Background()
	s, err := OpenSQLite(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	body := make([]byte, 2048)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key := fmt.Sprint(i)
		s.ClaimIdempotency(ctx, &IdemRecord{Tenant: "t", Key: key, Owner: "p", ExpiresAt: time.Now().Add(time.Hour)})
		s.CompleteIdempotency(ctx, "t", key, 200, body)
	}
}
