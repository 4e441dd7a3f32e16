// Package statebench measures the state work of one exec (an
// Idempotency-Key claimed, the budgets' admission held, the audit record
// appended, the hold released with its usage, the answer stored) on the
// embedded SQLite state and on a fleet's PostgreSQL, side by side in one
// run, with 64 concurrent callers as a busy fleet has them: `go test
// -run XXX -bench . ./internal/store/statebench/`.
package statebench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/control/budget"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/pgtest"
	"github.com/sandboxd/sandboxd/internal/store"
)

var pg *pgtest.Server

func TestMain(m *testing.M) {
	var err error
	if pg, err = pgtest.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "statebench:", err)
		os.Exit(1)
	}
	code := m.Run()
	pg.Close()
	os.Exit(code)
}

// state is one backend's store, limiter and audit log.
type state struct {
	st    store.Store
	lim   *budget.Limiter
	log   audit.Log
	close func()
}

func sqliteState(t testing.TB) *state {
	dir := t.TempDir()
	st, err := store.OpenSQLite(dir)
	if err != nil {
		t.Fatal(err)
	}
	l, err := audit.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &state{st: st, lim: budget.New(limits(), st, slog.New(slog.DiscardHandler)), log: l, close: func() { l.Close(); st.Close() }}
}

var dbSeq atomic.Int64

func postgresState(t testing.TB) *state {
	ctx := context.Background()
	dsn, err := pg.NewDatabase(ctx, fmt.Sprintf("bench_%d", dbSeq.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	l, err := audit.OpenPostgres(ctx, st.Pool(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	lim := budget.New(limits(), st, slog.New(slog.DiscardHandler))
	lim.Share(st, "p_bench")
	return &state{st: st, lim: lim, log: l, close: func() { l.Close(); st.Close() }}
}

// limits are budgets that apply (and never refuse in the benchmark).
func limits() *budget.Config {
	cfg, err := budget.Parse("tenants.yaml", []byte("defaults:\n  concurrent_execs: 1000\n  daily_cpu_seconds: 100000000\n  session: {max_execs: 100000000, cpu_seconds: 100000000}\n"))
	if err != nil {
		panic(err)
	}
	return cfg
}

// oneExec is the state work of one exec, i of tenant.
func (s *state) oneExec(ctx context.Context, tenant string, i int64) error {
	key := fmt.Sprintf("k%d", i)
	now := time.Now()
	if _, claimed, err := s.st.ClaimIdempotency(ctx, &store.IdemRecord{Tenant: tenant, Key: key, RequestSHA256: "r", ExecID: "ex_" + key,
		Owner: "p_bench", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil || !claimed {
		return fmt.Errorf("claim: %v %v", claimed, err)
	}
	t, r, err := s.lim.AdmitExec(ctx, tenant, "ses_"+tenant, 10000, 1)
	if err != nil || r != nil {
		return fmt.Errorf("admit: %v %v", r, err)
	}
	code := 0
	if err := s.log.Append(ctx, &audit.Record{Kind: audit.KindExec, Tenant: tenant, KeyID: "k", Subject: "ex_" + key, Status: "ok", ExitCode: &code,
		CodeSHA256: audit.SHA256([]byte(key)), ExecProfile: &audit.ProfileRef{Name: "default", Version: "v"}}); err != nil {
		return fmt.Errorf("append: %v", err)
	}
	t.Finish(ctx, 12, 30)
	return s.st.CompleteIdempotency(ctx, tenant, key, 200, []byte(`{"id":"ex_`+key+`","status":"ok"}`))
}

// BenchmarkStatePerExec runs the state work of b.N execs from 64
// callers over 8 tenants and reports execs/s and the p50 and p99 latency
// of one exec's state work.
func BenchmarkStatePerExec(b *testing.B) {
	for _, c := range []struct {
		name string
		open func(testing.TB) *state
	}{{"sqlite", sqliteState}, {"postgres", postgresState}} {
		b.Run(c.name, func(b *testing.B) {
			s := c.open(b)
			defer s.close()
			ctx := context.Background()
			var next atomic.Int64
			lat := make([]time.Duration, b.N)
			var wg sync.WaitGroup
			b.ResetTimer()
			for w := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						start := time.Now()
						if err := s.oneExec(ctx, fmt.Sprintf("t%d", w%8), i); err != nil {
							b.Error(err)
							return
						}
						lat[i] = time.Since(start)
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "execs/s")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkStateOneCaller is the same state work from one caller: the
// latency an exec adds when the machine is otherwise idle.
func BenchmarkStateOneCaller(b *testing.B) {
	for _, c := range []struct {
		name string
		open func(testing.TB) *state
	}{{"sqlite", sqliteState}, {"postgres", postgresState}} {
		b.Run(c.name, func(b *testing.B) {
			s := c.open(b)
			defer s.close()
			lat := make([]time.Duration, 0, b.N)
			for i := range b.N {
				start := time.Now()
				if err := s.oneExec(context.Background(), "t", int64(i)); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		})
	}
}
