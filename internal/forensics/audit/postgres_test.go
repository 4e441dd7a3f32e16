package audit

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandboxd/sandboxd/internal/pgdb"
	"github.com/sandboxd/sandboxd/internal/pgtest"
)

var pg *pgtest.Server

func TestMain(m *testing.M) {
	var err error
	if pg, err = pgtest.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "audit tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	pg.Close()
	os.Exit(code)
}

var dbSeq atomic.Int64

// newPool returns a pool on a fresh database.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	dsn, err := pg.NewDatabase(ctx, fmt.Sprintf("audit_%d", dbSeq.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgdb.Open(ctx, dsn, 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func openPG(t testing.TB, pool *pgxpool.Pool, replica string) *Postgres {
	t.Helper()
	l, err := OpenPostgres(context.Background(), pool, replica)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Three replicas append at once to one database: one chain holds every
// record exactly once, in an order all of them agree on, each naming the
// replica that wrote it; it verifies, and a fourth log sees the same head.
func TestPostgresOneChainForTheFleet(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t)
	logs := []*Postgres{openPG(t, pool, "r1"), openPG(t, pool, "r2"), openPG(t, pool, "r3")}
	var wg sync.WaitGroup
	const each = 60
	var mu sync.Mutex
	byReplica := map[string]int{}
	for w, l := range logs {
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each / 4 {
					r := execRecord(w*1000 + g*100 + i)
					if err := l.Append(ctx, r); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					byReplica[r.Replica]++
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if byReplica["r1"] != each || byReplica["r2"] != each || byReplica["r3"] != each {
		t.Fatalf("records by replica %v; want %d each", byReplica, each)
	}
	rep, err := logs[0].Verify(ctx)
	if err != nil || !rep.OK || rep.Records != 3*each {
		t.Fatalf("verify: %v %+v", err, rep)
	}
	head, err := openPG(t, pool, "r4").Head(ctx)
	if err != nil || head.Seq != rep.HeadSeq || head.Hash != rep.HeadHash {
		t.Fatalf("head %+v %v; verify says %d %s", head, err, rep.HeadSeq, rep.HeadHash)
	}
	recs, _, err := logs[1].Query(ctx, Filter{Limit: 1})
	if err != nil || len(recs) != 1 || recs[0].Replica == "" {
		t.Fatalf("query: %+v %v", recs, err)
	}
	if err := logs[2].CheckAnchors(ctx, rep, head); err != nil || !rep.OK || rep.Anchors != 1 {
		t.Fatalf("anchor: %v %+v", err, rep)
	}
}

func TestPostgresVerifyFindsTampering(t *testing.T) {
	body := func(from, to string) string {
		return fmt.Sprintf(`body = convert_to(replace(convert_from(body, 'UTF8'), '%s', '%s'), 'UTF8')`, from, to)
	}
	cases := []struct {
		name    string
		sql     string
		seq     int64
		problem string
	}{
		{"changed body", `UPDATE audit_records SET ` + body(`"status":"ok"`, `"status":"error"`) + ` WHERE seq = 4`, 4, "does not match its hash"},
		{"changed indexed column", `UPDATE audit_records SET tenant = 'evil' WHERE seq = 5`, 5, "indexed columns"},
		{"deleted record", `DELETE FROM audit_records WHERE seq = 6`, 6, "missing"},
		{"reordered records", `UPDATE audit_records SET seq = CASE seq WHEN 3 THEN 1000 WHEN 7 THEN 3 ELSE seq END WHERE seq IN (3, 7); UPDATE audit_records SET seq = 7 WHERE seq = 1000`, 3, "hash before it"},
		{"replica changed", `UPDATE audit_records SET ` + body(`"replica":"r1"`, `"replica":"r9"`) + ` WHERE seq = 2`, 2, "does not match its hash"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			pool := newPool(t)
			l := openPG(t, pool, "r1")
			for i := range 10 {
				if err := l.Append(ctx, execRecord(i)); err != nil {
					t.Fatal(err)
				}
			}
			for _, stmt := range strings.Split(c.sql, ";") {
				if _, err := pool.Exec(ctx, stmt); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := l.Verify(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK || rep.BreakSeq != c.seq || !strings.Contains(rep.Problem, c.problem) {
				t.Fatalf("report %+v, want a break at %d mentioning %q", rep, c.seq, c.problem)
			}
		})
	}
}

func TestPostgresQueryFiltersAndPages(t *testing.T) {
	ctx := context.Background()
	l := openPG(t, newPool(t), "r1")
	for i := range 40 {
		r := execRecord(i)
		if i%10 == 0 {
			r.SandboxSession = "ses_x"
		}
		if err := l.Append(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		f    Filter
		want int
	}{
		{Filter{}, 40},
		{Filter{Tenant: "acme", Limit: 3}, 20},
		{Filter{Host: "HOST2.test"}, 8},
		{Filter{Session: "ses_x"}, 4},
		{Filter{Session: "s1"}, 10},
		{Filter{Status: "timeout", Profile: "default"}, 13},
	} {
		n, f := 0, c.f
		for {
			recs, next, err := l.Query(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			n += len(recs)
			if next == "" {
				break
			}
			f.Cursor = next
		}
		if n != c.want {
			t.Errorf("filter %+v: %d, want %d", c.f, n, c.want)
		}
	}
}

// BenchmarkPostgresAppend: durable appends per second to the fleet's
// chain from 1 and 32 concurrent appenders of one replica, and from 3
// replicas of 32 appenders each, beside the SQLite log (BenchmarkAppend).
func BenchmarkPostgresAppend(b *testing.B) {
	for _, c := range []struct{ replicas, par int }{{1, 1}, {1, 32}, {3, 32}} {
		b.Run(fmt.Sprintf("replicas=%d/appenders=%d", c.replicas, c.par), func(b *testing.B) {
			pool := newPool(b)
			var logs []*Postgres
			for i := range c.replicas {
				logs = append(logs, openPG(b, pool, fmt.Sprint("r", i)))
			}
			next := make(chan int)
			var wg sync.WaitGroup
			for _, l := range logs {
				for range c.par {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range next {
							if err := l.Append(context.Background(), execRecord(i)); err != nil {
								b.Error(err)
							}
						}
					}()
				}
			}
			b.ResetTimer()
			for i := range b.N {
				next <- i
			}
			close(next)
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
