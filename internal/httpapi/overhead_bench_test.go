package httpapi

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// The control plane's overhead per request, with the fake engine (which
// answers at once): compare BenchmarkExecPlain (no control headers, no
// tenants file) with BenchmarkExecControlled (an Idempotency-Key, a session,
// a traceparent, and a tenants file with every rate and budget set, over a
// file store). Run: go test ./api -run XXX -bench Exec -benchtime 3000x

func reportLatency(b *testing.B, d []time.Duration) {
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(d[len(d)*9/10].Microseconds()), "p90-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
}

// timedOK serves req and returns how long the handler took; an answer
// other than 200 fails b.
func timedOK(b *testing.B, srv *Server, req *http.Request) time.Duration {
	rec := httptest.NewRecorder()
	start := time.Now()
	srv.Handler().ServeHTTP(rec, req)
	d := time.Since(start)
	if rec.Code != 200 {
		b.Fatalf("%d %s", rec.Code, rec.Body)
	}
	return d
}

func BenchmarkExecPlain(b *testing.B) {
	t := &testing.T{}
	f := newFixture(t, 4, 4)
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest(http.MethodPost, "/exec", strings.NewReader(`{"language":"python","code":"print(1)"}`))
		req.Header.Set("Authorization", "Bearer "+f.agent)
		d = append(d, timedOK(b, f.srv, req))
	}
	reportLatency(b, d)
}

func BenchmarkExecControlled(b *testing.B) {
	t := &testing.T{}
	f := newCtl(t, `defaults:
  exec_per_minute: 100000000
  concurrent_execs: 100
  daily_cpu_seconds: 100000000
  session: {max_execs: 100000000, cpu_seconds: 100000000, wall_seconds: 100000000}
`, time.Second)
	defer f.stop()
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest(http.MethodPost, "/exec", strings.NewReader(fmt.Sprintf(`{"language":"python","code":"print(%d)"}`, i)))
		req.Header.Set("Authorization", "Bearer "+keyAgent)
		req.Header.Set("Idempotency-Key", fmt.Sprint("bench-", i))
		req.Header.Set("X-Session-Id", fmt.Sprint("bench-", i%50))
		req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		d = append(d, timedOK(b, f.srv, req))
	}
	reportLatency(b, d)
}
