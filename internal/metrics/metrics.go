// Package metrics holds sandboxd's Prometheus metrics. Every name starts
// with sandboxd_. Labels never carry tenants, keys, sessions or code: only
// profile names, statuses, codes and budget names, so the set stays small
// and /metrics leaks nothing about who runs what.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is one registry and the collectors on it.
type Metrics struct {
	Registry *prometheus.Registry

	// Execs counts execs by profile and final status: the run statuses (ok,
	// error, timeout, oom, killed) and "failed" for runs that could not
	// start.
	Execs *prometheus.CounterVec
	// QueueSeconds, StartSeconds and RunSeconds split an exec's latency:
	// waiting for a run slot; from the slot to the code starting (sandbox
	// start or pool take, job hand-over, and collecting the result); the
	// code's own wall time.
	QueueSeconds *prometheus.HistogramVec
	StartSeconds *prometheus.HistogramVec
	RunSeconds   *prometheus.HistogramVec
	// Refusals counts requests refused by the control plane, by code
	// (RATE_LIMITED, BUDGET_EXCEEDED, BUSY, FROZEN, LOOP_DETECTED,
	// IDEMPOTENCY_MISMATCH, IN_PROGRESS, INTERRUPTED) and budget name ("" when
	// the code names no budget).
	Refusals *prometheus.CounterVec
	// IdempotentReplays counts responses replayed for an Idempotency-Key.
	IdempotentReplays prometheus.Counter
	// Requests counts HTTP responses by route and status code.
	Requests *prometheus.CounterVec
	// Cancels counts execs stopped by DELETE /exec/{id} or a freeze.
	Cancels *prometheus.CounterVec
	// Fetches counts POST /fetch outcomes by egress profile and outcome
	// (ok, egress_denied, upstream_timeout, upstream_error, too_large,
	// unsupported_content, validation, failed).
	Fetches *prometheus.CounterVec
	// FetchSeconds is the time a fetch spent upstream (every hop).
	FetchSeconds prometheus.Histogram
	// Redactions counts secrets removed from what was returned, by type.
	Redactions *prometheus.CounterVec
	// EgressDecisions counts egress decisions (proxy and fetch) by egress
	// profile, verdict and code (allowed, no_rule, denied_address, ...).
	EgressDecisions *prometheus.CounterVec
}

// Buckets for exec latencies: 5 ms to about 80 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.005, 2, 15)

// New makes the registry with sandboxd's metrics and the Go and process
// collectors.
func New() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		Execs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_execs_total", Help: "Execs by exec profile and final status (failed: the run could not start).",
		}, []string{"profile", "status"}),
		QueueSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandboxd_exec_queue_seconds", Help: "Time an exec waited for a run slot.", Buckets: latencyBuckets,
		}, []string{"profile"}),
		StartSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandboxd_exec_start_seconds", Help: "Time from a run slot to the result, less the code's wall time: sandbox start or pool take, job hand-over, result collection.", Buckets: latencyBuckets,
		}, []string{"profile"}),
		RunSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandboxd_exec_run_seconds", Help: "Wall time of the code itself.", Buckets: latencyBuckets,
		}, []string{"profile"}),
		Refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_refusals_total", Help: "Requests refused by rate limits, budgets, the queue, the kill switch, the loop guard or idempotency rules, by code and budget.",
		}, []string{"code", "budget"}),
		IdempotentReplays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandboxd_idempotent_replays_total", Help: "Responses replayed for a repeated Idempotency-Key without running anything.",
		}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_http_requests_total", Help: "HTTP responses by route and status code.",
		}, []string{"route", "code"}),
		Cancels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_exec_cancels_total", Help: "Execs stopped from outside, by reason (delete, freeze).",
		}, []string{"reason"}),
		Fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_fetches_total", Help: "POST /fetch outcomes by egress profile and outcome (ok or the error code in lower case).",
		}, []string{"profile", "outcome"}),
		FetchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sandboxd_fetch_upstream_seconds", Help: "Time a fetch spent upstream, every hop included.", Buckets: latencyBuckets,
		}),
		Redactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_redactions_total", Help: "Secrets removed from what sandboxd returned (fetched text, exec output), by secret type.",
		}, []string{"type"}),
		EgressDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_egress_decisions_total", Help: "Egress decisions of the proxy and of /fetch, by egress profile, verdict (allow, deny) and code (the reason class).",
		}, []string{"profile", "verdict", "code"}),
	}
	r.MustRegister(m.Execs, m.QueueSeconds, m.StartSeconds, m.RunSeconds, m.Refusals, m.IdempotentReplays, m.Requests, m.Cancels,
		m.Fetches, m.FetchSeconds, m.Redactions, m.EgressDecisions,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Gauge registers a gauge whose value f gives at scrape time (running and
// queued execs, pool sizes, the frozen flag).
func (m *Metrics) Gauge(name, help string, f func() float64) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

// GaugesByLabel registers a gauge with one label whose values f gives at
// scrape time, one per label value (the pool's sandboxes per profile).
func (m *Metrics) GaugesByLabel(name, help, label string, f func() map[string]float64) {
	m.Registry.MustRegister(&labelledGauges{desc: prometheus.NewDesc(name, help, []string{label}, nil), f: f})
}

type labelledGauges struct {
	desc *prometheus.Desc
	f    func() map[string]float64
}

func (g *labelledGauges) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *labelledGauges) Collect(ch chan<- prometheus.Metric) {
	for v, n := range g.f() {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, n, v)
	}
}

// CounterFunc registers a counter whose value f gives at scrape time (a
// count another package keeps, such as the reaper's).
func (m *Metrics) CounterFunc(name, help string, f func() float64) {
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}
