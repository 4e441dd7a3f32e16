package audit

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func openTemp(t testing.TB) (*SQLite, string) {
	t.Helper()
	dir := t.TempDir()
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, dir
}

func execRecord(i int) *Record {
	code := 0
	return &Record{Kind: KindExec, Tenant: []string{"acme", "other"}[i%2], KeyID: "k1", Subject: fmt.Sprintf("ex_%d", i),
		CodeSHA256: SHA256([]byte(fmt.Sprintf("print(%d)", i%3))), ExecProfile: &ProfileRef{Name: "default", Version: "v1"},
		Status: []string{"ok", "error", "timeout"}[i%3], ExitCode: &code, Session: fmt.Sprintf("s%d", i%4),
		Outputs: []Output{{Name: "stdout", Size: 2, SHA256: SHA256([]byte("1\n"))}}, Hosts: []string{fmt.Sprintf("host%d.test", i%5)}}
}

func fill(t testing.TB, l *SQLite, n int) []*Record {
	t.Helper()
	var out []*Record
	for i := range n {
		r := execRecord(i)
		if err := l.Append(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func TestAppendChainsAndVerifies(t *testing.T) {
	l, _ := openTemp(t)
	recs := fill(t, l, 10)
	for i, r := range recs {
		if r.Seq != int64(i+1) || len(r.Hash) != 64 || !strings.HasPrefix(r.ID, "au_") || r.Time.IsZero() {
			t.Fatalf("record %d not filled in: %+v", i, r)
		}
		if i > 0 && r.PrevHash != recs[i-1].Hash {
			t.Fatalf("record %d does not chain to %d", i+1, i)
		}
	}
	rep, err := l.Verify(context.Background())
	if err != nil || !rep.OK || rep.Records != 10 || rep.HeadSeq != 10 || rep.HeadHash != recs[9].Hash {
		t.Fatalf("verify: %v %+v", err, rep)
	}
	got, err := l.Get(context.Background(), recs[3].ID)
	if err != nil || got.Hash != recs[3].Hash || got.Subject != "ex_3" || *got.ExitCode != 0 {
		t.Fatalf("get: %v %+v", err, got)
	}
}

// Each kind of tampering is found, at the record where it happened.
func TestVerifyFindsTampering(t *testing.T) {
	cases := []struct {
		name    string
		sql     string
		seq     int64
		problem string
	}{
		{"changed body", `UPDATE records SET body = replace(body, '"status":"ok"', '"status":"error"') WHERE seq = 4`, 4, "does not match its hash"},
		{"changed indexed column", `UPDATE records SET tenant = 'evil' WHERE seq = 5`, 5, "indexed columns"},
		{"deleted record", `DELETE FROM records WHERE seq = 6`, 6, "missing"},
		{"deleted first record", `DELETE FROM records WHERE seq = 1`, 1, "missing"},
		{"reordered records", `UPDATE records SET seq = CASE seq WHEN 3 THEN 1000 WHEN 7 THEN 3 ELSE seq END; UPDATE records SET seq = 7 WHERE seq = 1000`, 3, "hash before it"},
		{"recomputed hash", `UPDATE records SET body = replace(body, '"tenant":"acme"', '"tenant":"acmf"'), tenant = 'acmf', hash = 'ff' WHERE seq = 8`, 8, "hash"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, _ := openTemp(t)
			fill(t, l, 10)
			for _, stmt := range strings.Split(c.sql, ";") {
				if _, err := l.db.Exec(stmt); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := l.Verify(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK || rep.BreakSeq != c.seq || !strings.Contains(rep.Problem, c.problem) {
				t.Fatalf("report %+v, want a break at %d mentioning %q", rep, c.seq, c.problem)
			}
		})
	}
}

// Records appended concurrently all land, each exactly once, in one chain.
func TestConcurrentAppends(t *testing.T) {
	l, dir := openTemp(t)
	var wg sync.WaitGroup
	const workers, each = 16, 25
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := l.Append(context.Background(), execRecord(w*each+i)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	l.Close()
	l2, err := Open(dir) // reopened: every appended record is on disk
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	rep, err := l2.Verify(context.Background())
	if err != nil || !rep.OK || rep.Records != workers*each {
		t.Fatalf("verify after concurrent appends: %v %+v", err, rep)
	}
	// Appends after a reopen continue the chain.
	r := execRecord(0)
	if err := l2.Append(context.Background(), r); err != nil || r.Seq != workers*each+1 || r.PrevHash != rep.HeadHash {
		t.Fatalf("append after reopen: %v %+v", err, r)
	}
}

func TestQueryFiltersAndPages(t *testing.T) {
	l, _ := openTemp(t)
	fill(t, l, 60)
	ctx := context.Background()
	count := func(f Filter) int {
		t.Helper()
		n := 0
		for {
			recs, next, err := l.Query(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i < len(recs); i++ {
				if recs[i].Seq >= recs[i-1].Seq {
					t.Fatal("records are not newest first")
				}
			}
			n += len(recs)
			if next == "" {
				return n
			}
			f.Cursor = next
		}
	}
	cases := []struct {
		f    Filter
		want int
	}{
		{Filter{}, 60},
		{Filter{Limit: 7}, 60},
		{Filter{Tenant: "acme", Limit: 5}, 30},
		{Filter{Status: "timeout"}, 20},
		{Filter{Tenant: "acme", Status: "ok"}, 10},
		{Filter{Kind: KindFetch}, 0},
		{Filter{Profile: "default"}, 60},
		{Filter{Session: "s1"}, 15},
		{Filter{CodeSHA256: SHA256([]byte("print(1)"))}, 20},
		{Filter{Host: "HOST2.test", Limit: 3}, 12},
		{Filter{Subject: "ex_42"}, 1},
		{Filter{Until: time.Now().Add(-time.Hour)}, 0},
		{Filter{Since: time.Now().Add(-time.Hour)}, 60},
	}
	for _, c := range cases {
		if got := count(c.f); got != c.want {
			t.Errorf("filter %+v: %d records, want %d", c.f, got, c.want)
		}
	}
	if _, _, err := l.Query(ctx, Filter{Cursor: "x"}); err == nil {
		t.Error("a bad cursor was accepted")
	}
	if _, _, err := l.Query(ctx, Filter{Limit: MaxLimit + 1}); err == nil {
		t.Error("a limit over the maximum was accepted")
	}
}

func TestAppendAfterClose(t *testing.T) {
	l, _ := openTemp(t)
	l.Close()
	if err := l.Append(context.Background(), execRecord(1)); err != errClosed {
		t.Fatalf("append after close: %v", err)
	}
}

// BenchmarkAppend measures durable appends per second with 1 and with 32
// concurrent appenders (group commit shares a transaction and its fsync).
func BenchmarkAppend(b *testing.B) {
	for _, par := range []int{1, 32} {
		b.Run(fmt.Sprintf("appenders=%d", par), func(b *testing.B) {
			l, _ := openTemp(b)
			var wg sync.WaitGroup
			next := make(chan int)
			start := time.Now()
			for range par {
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
			for i := range b.N {
				next <- i
			}
			close(next)
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
		})
	}
}
