package approval_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/egress/approval"
	"github.com/sandboxd/sandboxd/egress/egresstest"
	"github.com/sandboxd/sandboxd/internal/logbuf"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/testclock"
)

type env struct {
	t    *testing.T
	st   *store.SQLite
	svc  *approval.Service
	clk  *testclock.Clock
	res  *egresstest.Resolver
	c    *egress.Checker
	p    *egress.Profile
	logs *logbuf.Buffer
}

func newEnv(t *testing.T, mode egress.Mode) *env {
	t.Helper()
	st, err := store.OpenSQLite("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{t: t, st: st, clk: testclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)), logs: &logbuf.Buffer{}}
	log := slog.New(slog.NewJSONHandler(e.logs, nil))
	e.svc = approval.New(approval.Config{Store: st, Log: log, Now: e.clk.Now})
	e.svc.SetIdentify(func(client string) (string, string, bool) {
		if client == "ex_1" {
			return "acme", "agent-1", true
		}
		return "", "", false
	})
	e.res = egresstest.NewResolver(map[string][]string{
		"allowed.com":   {"93.184.216.34"},
		"docs.example":  {"93.184.216.40"},
		"other.example": {"93.184.216.41"},
		"private.test":  {"10.0.0.5"},
		"mixed.test":    {"93.184.216.42", "169.254.169.254"},
		"blocked.test":  {"93.184.216.43"},
	})
	e.c = &egress.Checker{Resolver: e.res, Approvals: e.svc}
	p := egress.Defaults()
	p.Name, p.Mode = "research", mode
	p.Allow = []egress.Rule{{Name: "known", Hosts: []string{"allowed.com"}}}
	p.Deny = []egress.Rule{{Name: "never", Hosts: []string{"blocked.test"}}}
	if err := p.Compile(); err != nil {
		t.Fatal(err)
	}
	e.p = &p
	return e
}

func (e *env) decide(method, target string) egress.Decision {
	return e.c.Decide(context.Background(), e.p, egress.Request{Method: method, Target: target, Client: "ex_1"})
}

func (e *env) approve(id, ttl string) {
	e.t.Helper()
	if _, _, err := e.svc.Decide(context.Background(), id, approval.Decision{Decision: approval.DecisionApprove, TTL: ttl, By: "sec-1", ByTenant: "acme"}); err != nil {
		e.t.Fatalf("approving %s: %v", id, err)
	}
}

func (e *env) logLines(msg string) []map[string]any { return e.logs.Records(msg) }

func TestPendingApprovedExpired(t *testing.T) {
	e := newEnv(t, egress.ModeApprove)
	ctx := context.Background()

	d := e.decide("GET", "https://docs.example/guide/intro?token=secret#frag")
	if d.Allow || d.Code != egress.CodeApproval || d.ApprovalID == "" || !strings.Contains(d.Reason, d.ApprovalID) {
		t.Fatalf("first request: allow %v code %s id %q (%s)", d.Allow, d.Code, d.ApprovalID, d.Reason)
	}
	if slices.Contains(e.res.Calls(), "docs.example") {
		t.Fatal("a host waiting for approval was resolved")
	}
	id := d.ApprovalID
	e.clk.Add(time.Minute)
	d2 := e.decide("HEAD", "http://docs.example/other")
	if d2.Allow || d2.Code != egress.CodeApproval || d2.ApprovalID != id {
		t.Fatalf("second request: allow %v code %s id %q, want the same pending request %s", d2.Allow, d2.Code, d2.ApprovalID, id)
	}
	rec, err := e.svc.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	want := store.Approval{ID: id, Profile: "research", ProfileVersion: e.p.Version, Host: "docs.example", Port: 443, Method: "GET",
		URL: "https://docs.example/guide/intro", Tenant: "acme", KeyID: "agent-1", Client: "ex_1", State: store.ApprovalPending, Count: 2,
		FirstSeen: e.clk.Now().Add(-time.Minute), LastSeen: e.clk.Now()}
	if *rec != want {
		t.Fatalf("record:\n got %+v\nwant %+v", *rec, want)
	}
	if lines := e.logLines("egress approval requested"); len(lines) != 1 || lines[0]["approval_id"] != id || lines[0]["url"] != "https://docs.example/guide/intro" {
		t.Fatalf("request log lines: %v", lines)
	}

	// Nothing is approved by waiting.
	e.clk.Add(60 * 24 * time.Hour)
	if d := e.decide("GET", "https://docs.example/"); d.Allow || d.ApprovalID != id {
		t.Fatalf("after 60 days unanswered: allow %v id %s", d.Allow, d.ApprovalID)
	}

	e.approve(id, "24h")
	d = e.decide("GET", "https://docs.example/guide")
	if !d.Allow || d.Code != egress.CodeAllowed || d.Rule != "approval:"+id || d.ApprovalID != id || d.Dial.String() != "93.184.216.40:443" {
		t.Fatalf("approved: allow %v code %s rule %s dial %s (%s)", d.Allow, d.Code, d.Rule, d.Dial, d.Reason)
	}
	if !strings.Contains(d.Reason, "sec-1") {
		t.Errorf("reason does not name who approved: %s", d.Reason)
	}
	// The approval covers the defaults of an allow rule, and the HTTPS
	// tunnel a sandbox opens through the proxy (CONNECT to 443), only.
	if d := e.decide("POST", "https://docs.example/upload"); d.Allow || d.Code != egress.CodeMethod {
		t.Errorf("POST to an approved host: allow %v code %s", d.Allow, d.Code)
	}
	if d := e.decide("CONNECT", "docs.example:443"); !d.Allow || d.Code != egress.CodeAllowed {
		t.Errorf("CONNECT to 443 of an approved host: allow %v code %s (%s)", d.Allow, d.Code, d.Reason)
	}
	if d := e.decide("CONNECT", "docs.example:80"); d.Allow || d.Code != egress.CodeMethod {
		t.Errorf("CONNECT to 80 of an approved host: allow %v code %s", d.Allow, d.Code)
	}
	if d := e.decide("GET", "http://docs.example:8080/"); d.Allow || d.Code != egress.CodePort {
		t.Errorf("port 8080 of an approved host: allow %v code %s", d.Allow, d.Code)
	}
	// Another host is not approved by it.
	if d := e.decide("GET", "https://other.example/"); d.Allow || d.Code != egress.CodeApproval || d.ApprovalID == id {
		t.Errorf("another host: allow %v code %s id %s", d.Allow, d.Code, d.ApprovalID)
	}
	// Nor is the same host under another profile.
	other := *e.p
	other.Name = "research-2"
	if err := other.Compile(); err != nil {
		t.Fatal(err)
	}
	if d := e.c.Decide(ctx, &other, egress.Request{Method: "GET", Target: "https://docs.example/"}); d.Allow {
		t.Errorf("the approval leaked to profile %s", other.Name)
	}

	// Just before expiry it allows, at expiry it denies and a new request
	// is filed.
	e.clk.Add(24*time.Hour - time.Second)
	if d := e.decide("GET", "https://docs.example/"); !d.Allow {
		t.Fatalf("a second before expiry: %s (%s)", d.Code, d.Reason)
	}
	e.clk.Add(time.Second)
	d = e.decide("GET", "https://docs.example/")
	if d.Allow || d.Code != egress.CodeApproval || d.ApprovalID == "" || d.ApprovalID == id {
		t.Fatalf("at expiry: allow %v code %s id %s; want a new pending request", d.Allow, d.Code, d.ApprovalID)
	}
	if old, _ := e.svc.Get(ctx, id); old.Status(e.svc.Now()) != store.ApprovalExpired {
		t.Fatalf("old approval status %s", old.Status(e.svc.Now()))
	}
	if _, _, err := e.svc.Decide(ctx, id, approval.Decision{Decision: approval.DecisionApprove, TTL: "1h", By: "sec-1"}); !errors.Is(err, store.ErrApprovalExpired) {
		t.Fatalf("re-approving an expired approval: %v", err)
	}
}

func TestRejected(t *testing.T) {
	e := newEnv(t, egress.ModeApprove)
	d := e.decide("GET", "https://docs.example/")
	if _, _, err := e.svc.Decide(context.Background(), d.ApprovalID, approval.Decision{Decision: approval.DecisionReject, By: "sec-2", Reason: "not needed"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		got := e.decide("GET", "https://docs.example/")
		if got.Allow || got.Code != egress.CodeApprovalRejected || got.ApprovalID != d.ApprovalID || !strings.Contains(got.Reason, "sec-2") {
			t.Fatalf("after rejection: allow %v code %s id %s (%s)", got.Allow, got.Code, got.ApprovalID, got.Reason)
		}
	}
	if got := egress.CodeApprovalRejected.Status(); got != 403 {
		t.Errorf("status of approval_rejected: %d", got)
	}
	lines := e.logLines("egress approval decided")
	if len(lines) != 1 || lines[0]["decided_by"] != "sec-2" || lines[0]["decision"] != "reject" || lines[0]["previous_status"] != "pending" {
		t.Fatalf("decision log lines: %v", lines)
	}
	// A person may change their mind; a revoked approval denies again.
	e.approve(d.ApprovalID, "1h")
	if got := e.decide("GET", "https://docs.example/"); !got.Allow {
		t.Fatalf("approved after rejection: %s", got.Code)
	}
	if _, _, err := e.svc.Decide(context.Background(), d.ApprovalID, approval.Decision{Decision: approval.DecisionReject, By: "sec-2"}); err != nil {
		t.Fatal(err)
	}
	if got := e.decide("GET", "https://docs.example/"); got.Allow || got.Code != egress.CodeApprovalRejected {
		t.Fatalf("revoked: allow %v code %s", got.Allow, got.Code)
	}
}

// An approval never opens an always-denied address, and never overrides
// a deny rule.
func TestApprovalKeepsAddressPolicy(t *testing.T) {
	e := newEnv(t, egress.ModeApprove)
	for _, target := range []string{"http://private.test/", "http://mixed.test/"} {
		d := e.decide("GET", target)
		if d.Code != egress.CodeApproval {
			t.Fatalf("%s: %s", target, d.Code)
		}
		e.approve(d.ApprovalID, "1h")
		d = e.decide("GET", target)
		if d.Allow || d.Code != egress.CodeDeniedAddress || d.ApprovalID == "" {
			t.Errorf("%s approved: allow %v code %s (%s); want %s", target, d.Allow, d.Code, d.Reason, egress.CodeDeniedAddress)
		}
	}
	if d := e.decide("GET", "http://blocked.test/"); d.Allow || d.Code != egress.CodeDenyRule || d.ApprovalID != "" {
		t.Errorf("deny rule: allow %v code %s id %q", d.Allow, d.Code, d.ApprovalID)
	}
}

// What no approval could allow is denied outright and files nothing.
func TestNothingToApprove(t *testing.T) {
	e := newEnv(t, egress.ModeApprove)
	for _, tc := range []struct {
		method, target string
		code           egress.Code
	}{
		{"CONNECT", "docs.example:80", egress.CodeMethod},
		{"POST", "https://docs.example/", egress.CodeMethod},
		{"GET", "http://docs.example:22/", egress.CodePort},
		{"GET", "http://93.184.216.40/", egress.CodeNoRule},
		{"GET", "http://169.254.169.254/latest/meta-data/", egress.CodeDeniedAddress},
		{"GET", "http://metadata.google.internal/", egress.CodeDeniedName},
		{"GET", "http://a@docs.example/", egress.CodeUserinfo},
	} {
		d := e.decide(tc.method, tc.target)
		if d.Allow || d.Code != tc.code || d.ApprovalID != "" {
			t.Errorf("%s %s: allow %v code %s id %q (%s); want %s and nothing filed", tc.method, tc.target, d.Allow, d.Code, d.ApprovalID, d.Reason, tc.code)
		}
	}
	if list, _ := e.svc.List(context.Background(), store.ApprovalFilter{}); len(list) != 0 {
		t.Fatalf("%d approval requests filed", len(list))
	}
}

// Approvals apply in approve mode only: the same profile switched to
// enforce denies an approved host.
func TestApprovalOnlyInApproveMode(t *testing.T) {
	e := newEnv(t, egress.ModeApprove)
	d := e.decide("GET", "https://docs.example/")
	e.approve(d.ApprovalID, "1h")
	enforce := *e.p
	enforce.Mode = egress.ModeEnforce
	if err := enforce.Compile(); err != nil {
		t.Fatal(err)
	}
	if d := e.c.Decide(context.Background(), &enforce, egress.Request{Method: "GET", Target: "https://docs.example/"}); d.Allow || d.Code != egress.CodeNoRule {
		t.Fatalf("enforce mode: allow %v code %s", d.Allow, d.Code)
	}
}

// The read-only view files nothing and reports what stands.
func TestReadOnly(t *testing.T) {
	e := newEnv(t, egress.ModeApprove)
	ro := &egress.Checker{Resolver: e.res, Approvals: e.svc.ReadOnly()}
	d := ro.Decide(context.Background(), e.p, egress.Request{Method: "GET", Target: "https://docs.example/"})
	if d.Allow || d.Code != egress.CodeApproval || d.ApprovalID != "" {
		t.Fatalf("dry run: allow %v code %s id %q", d.Allow, d.Code, d.ApprovalID)
	}
	if list, _ := e.svc.List(context.Background(), store.ApprovalFilter{}); len(list) != 0 {
		t.Fatalf("a dry run filed %d requests", len(list))
	}
	id := e.decide("GET", "https://docs.example/").ApprovalID
	if d := ro.Decide(context.Background(), e.p, egress.Request{Method: "GET", Target: "https://docs.example/"}); d.ApprovalID != id || d.Allow {
		t.Fatalf("dry run with a pending request: allow %v id %q", d.Allow, d.ApprovalID)
	}
	e.approve(id, "1h")
	if d := ro.Decide(context.Background(), e.p, egress.Request{Method: "GET", Target: "https://docs.example/"}); !d.Allow {
		t.Fatalf("dry run of an approved host: %s", d.Code)
	}
	if rec, _ := e.svc.Get(context.Background(), id); rec.Count != 1 {
		t.Fatalf("dry runs counted: %d", rec.Count)
	}
}

type failingStore struct{ store.ApprovalStore }

func (failingStore) StandingApproval(context.Context, string, string, time.Time) (*store.Approval, error) {
	return nil, errors.New("disk on fire")
}

func TestStoreFailureDenies(t *testing.T) {
	e := newEnv(t, egress.ModeApprove)
	e.c.Approvals = approval.New(approval.Config{Store: failingStore{e.st}})
	d := e.decide("GET", "https://docs.example/")
	if d.Allow || d.Code != egress.CodeApproval || !strings.Contains(d.Reason, "disk on fire") {
		t.Fatalf("store failure: allow %v code %s (%s)", d.Allow, d.Code, d.Reason)
	}
}

func TestDecideValidation(t *testing.T) {
	e := newEnv(t, egress.ModeApprove)
	id := e.decide("GET", "https://docs.example/").ApprovalID
	for _, tc := range []struct {
		d     approval.Decision
		field string
	}{
		{approval.Decision{Decision: "approve"}, "ttl"},
		{approval.Decision{Decision: "approve", TTL: "31d"}, "ttl"},
		{approval.Decision{Decision: "approve", TTL: "721h"}, "ttl"},
		{approval.Decision{Decision: "approve", TTL: "30s"}, "ttl"},
		{approval.Decision{Decision: "approve", TTL: "-1h"}, "ttl"},
		{approval.Decision{Decision: "approve", TTL: "forever"}, "ttl"},
		{approval.Decision{Decision: "reject", TTL: "1h"}, "ttl"},
		{approval.Decision{Decision: "yes"}, "decision"},
		{approval.Decision{}, "decision"},
		{approval.Decision{Decision: "reject", Reason: "a\nb"}, "reason"},
		{approval.Decision{Decision: "reject", Reason: strings.Repeat("x", 501)}, "reason"},
	} {
		_, _, err := e.svc.Decide(context.Background(), id, tc.d)
		var ve *approval.ValidationError
		if !errors.As(err, &ve) || ve.Field != tc.field {
			t.Errorf("%+v: %v; want a validation error on %s", tc.d, err, tc.field)
		}
	}
	if _, _, err := e.svc.Decide(context.Background(), "ap_unknown", approval.Decision{Decision: "reject"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown id: %v", err)
	}
	for in, want := range map[string]time.Duration{"24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "30d": 30 * 24 * time.Hour, "720h": 720 * time.Hour, "90m": 90 * time.Minute} {
		if got, err := approval.ParseTTL(in); err != nil || got != want {
			t.Errorf("ParseTTL(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
}
