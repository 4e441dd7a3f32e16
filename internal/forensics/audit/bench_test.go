package audit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// bulkLoad appends n records in large transactions (the chain computed the
// same way Append does), for the query benchmark.
func bulkLoad(tb testing.TB, l *SQLite, n int) {
	tb.Helper()
	ctx := context.Background()
	const batch = 20000
	base := time.Now().Add(-time.Duration(n) * time.Second).UTC()
	for done := 0; done < n; {
		var reqs []*appendReq
		for i := 0; i < batch && done+i < n; i++ {
			r := execRecord(done + i)
			r.Time = base.Add(time.Duration(done+i) * time.Second)
			reqs = append(reqs, &appendReq{r: r, done: make(chan error, 1)})
		}
		if err := l.commitBatch(reqs); err != nil {
			tb.Fatal(err)
		}
		done += len(reqs)
	}
	_ = ctx
}

// BenchmarkQuery1M measures filtered queries over a log of one million
// records (built once under $TMPDIR/sandboxd-audit-1m; about a minute).
func BenchmarkQuery1M(b *testing.B) {
	dir := filepath.Join(os.TempDir(), "sandboxd-audit-1m")
	os.MkdirAll(dir, 0o700)
	l, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	if l.headSeq < 1_000_000 {
		start := time.Now()
		bulkLoad(b, l, 1_000_000-int(l.headSeq))
		b.Logf("built 1M records in %s", time.Since(start))
	}
	ctx := context.Background()
	mid := time.Now().Add(-500_000 * time.Second)
	filters := []struct {
		name string
		f    Filter
	}{
		{"newest-page", Filter{}},
		{"tenant", Filter{Tenant: "acme"}},
		{"tenant+status", Filter{Tenant: "acme", Status: "timeout"}},
		{"code_sha256", Filter{CodeSHA256: SHA256([]byte("print(1)"))}},
		{"host", Filter{Host: "host3.test"}},
		{"session", Filter{Session: "s2"}},
		{"subject", Filter{Subject: "ex_123456"}},
		{"time-range", Filter{Since: mid, Until: mid.Add(time.Hour)}},
		{"tenant+time-range-deep", Filter{Tenant: "other", Until: mid}},
	}
	for _, c := range filters {
		b.Run(strings.ReplaceAll(c.name, "+", "_"), func(b *testing.B) {
			var n int
			for b.Loop() {
				recs, _, err := l.Query(ctx, c.f)
				if err != nil {
					b.Fatal(err)
				}
				n = len(recs)
			}
			b.ReportMetric(float64(n), "records/page")
		})
	}
	_ = fmt.Sprint
}

// BenchmarkVerify1M measures walking the whole chain of the 1M log.
func BenchmarkVerify1M(b *testing.B) {
	dir := filepath.Join(os.TempDir(), "sandboxd-audit-1m")
	l, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	if l.headSeq < 1_000_000 {
		b.Skip("run BenchmarkQuery1M first: it builds the log")
	}
	for b.Loop() {
		rep, err := l.Verify(context.Background())
		if err != nil || !rep.OK {
			b.Fatal(err, rep)
		}
	}
}
