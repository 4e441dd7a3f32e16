package httpapi

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/egress/approval"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/execflow"
	"github.com/sandboxd/sandboxd/internal/logbuf"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/testclock"
)

type approvalFixture struct {
	*egressFixture
	clock *testclock.Clock
	logs  logbuf.Buffer
}

// newApprovalFixture is the egress fixture with an egress profile
// "research-approve" in approve mode (Wikipedia allowed by rule), an
// approval service on the server's store with a fake clock, and its log.
func newApprovalFixture(t *testing.T) *approvalFixture {
	t.Helper()
	f := &approvalFixture{egressFixture: newEgressFixture(t), clock: testclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	p := egress.Defaults()
	p.Name, p.Mode = "research-approve", egress.ModeApprove
	p.Allow = []egress.Rule{{Name: "reference", Hosts: []string{"en.wikipedia.org"}}}
	if err := p.Compile(); err != nil {
		t.Fatal(err)
	}
	set := f.srv.cfg.Profiles
	set.Egress[p.Name] = &p
	f.res.Set("docs.example", "93.184.216.40")
	f.res.Set("inside.example", "10.9.8.7")
	svc := approval.New(approval.Config{Store: f.srv.plane.Store(), Log: slog.New(slog.NewJSONHandler(&f.logs, nil)), Now: f.clock.Now})
	srv := newServer(t, Config{
		DataDir: f.srv.cfg.DataDir, Profiles: set, Keys: f.srv.cfg.Keys, Log: f.srv.log, MaxBodyBytes: 1 << 20,
		Resolver: f.res, Control: Control{Store: f.srv.plane.Store()}, Approvals: svc,
	})
	t.Cleanup(func() { srv.Close() })
	f.srv = srv
	return f
}

// request sends GET url under the approve profile through the decision
// function, as the proxy and the browse pipeline do, for client ex_1.
func (f *approvalFixture) request(url string) egress.Decision {
	c := &egress.Checker{Resolver: f.res, Approvals: f.srv.Approvals()}
	return c.Decide(context.Background(), f.srv.cfg.Profiles.Egress["research-approve"], egress.Request{Method: "GET", Target: url, Client: "ex_1"})
}

func TestApprovalsAPI(t *testing.T) {
	f := newApprovalFixture(t)
	l := f.srv.flow.Begin(context.Background(), &execflow.Job{ID: "ex_1", Key: &auth.Key{ID: "agent-7", Tenant: "acme"}})
	defer f.srv.flow.End(l)

	// The dry run files nothing.
	code, body := f.do(t, "POST", "/profiles/research-approve/evaluate", egressKeySecurity, `{"url": "https://docs.example/a?b=c"}`)
	if code != 200 || body["decision"] != "deny" || body["code"] != string(egress.CodeApproval) || body["approval_id"] != nil {
		t.Fatalf("evaluate: %d %v", code, body)
	}
	if code, body := f.do(t, "GET", "/approvals", egressKeySecurity, ""); code != 200 || len(body["approvals"].([]any)) != 0 {
		t.Fatalf("after a dry run: %d %v", code, body)
	}

	d := f.request("https://docs.example/guide?token=x")
	if d.Allow || d.Code != egress.CodeApproval || d.ApprovalID == "" {
		t.Fatalf("first request: %v %s %q", d.Allow, d.Code, d.ApprovalID)
	}
	id := d.ApprovalID
	f.clock.Add(time.Minute)
	f.request("https://docs.example/other")

	// Roles: agents neither list nor decide; no key is 401.
	if code, body := f.do(t, "GET", "/approvals?status=pending", egressKeyAgent, ""); code != 403 || errCode(body) != api.CodeForbidden {
		t.Errorf("agent lists: %d %v", code, body)
	}
	if code, body := f.do(t, "GET", "/approvals/"+id, egressKeyAgent, ""); code != 403 || errCode(body) != api.CodeForbidden {
		t.Errorf("agent gets: %d %v", code, body)
	}
	if code, body := f.do(t, "POST", "/approvals/"+id, egressKeyAgent, `{"decision": "approve", "ttl": "24h"}`); code != 403 || errCode(body) != api.CodeForbidden {
		t.Errorf("agent approves: %d %v", code, body)
	}
	if code, _ := f.do(t, "GET", "/approvals", "", ""); code != 401 {
		t.Errorf("no key: %d", code)
	}

	code, body = f.do(t, "GET", "/approvals?status=pending", egressKeySecurity, "")
	list, _ := body["approvals"].([]any)
	if code != 200 || len(list) != 1 {
		t.Fatalf("security lists pending: %d %v", code, body)
	}
	got := list[0].(map[string]any)
	for k, want := range map[string]any{
		"id": id, "status": "pending", "profile": "research-approve", "host": "docs.example", "port": float64(443), "method": "GET",
		"url": "https://docs.example/guide", "tenant": "acme", "key_id": "agent-7", "client": "ex_1", "count": float64(2),
		"first_seen": "2026-03-01T12:00:00Z", "last_seen": "2026-03-01T12:01:00Z",
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	if _, ok := got["expires_at"]; ok {
		t.Errorf("a pending request has expires_at: %v", got)
	}

	// Bad decisions are 400 VALIDATION naming the field; unknown ids 404.
	for _, tc := range []struct{ body, field string }{
		{`{"decision": "approve"}`, "ttl"},
		{`{"decision": "approve", "ttl": "31d"}`, "ttl"},
		{`{"decision": "approve", "ttl": "745h"}`, "ttl"},
		{`{"decision": "approve", "ttl": "soon"}`, "ttl"},
		{`{"decision": "approve", "ttl": "10s"}`, "ttl"},
		{`{"decision": "reject", "ttl": "1h"}`, "ttl"},
		{`{"decision": "allow", "ttl": "1h"}`, "decision"},
		{`{"ttl": "1h"}`, "decision"},
		{`{"decision": "approve", "ttl": "1h", "forever": true}`, ""},
		{`{"decision": "approve", "ttl": 3600}`, ""},
	} {
		code, body := f.do(t, "POST", "/approvals/"+id, egressKeySecurity, tc.body)
		e, _ := body["error"].(map[string]any)
		if code != 400 || errCode(body) != api.CodeValidation || (tc.field != "" && e["field"] != tc.field) {
			t.Errorf("%s: %d %v; want 400 VALIDATION on %q", tc.body, code, body, tc.field)
		}
	}
	if code, body := f.do(t, "POST", "/approvals/ap_00000000000000000000", egressKeySecurity, `{"decision": "reject"}`); code != 404 || errCode(body) != api.CodeNotFound {
		t.Errorf("unknown id: %d %v", code, body)
	}
	if code, body := f.do(t, "GET", "/approvals/nope", egressKeySecurity, ""); code != 404 || errCode(body) != api.CodeNotFound {
		t.Errorf("get unknown id: %d %v", code, body)
	}
	if code, body := f.do(t, "GET", "/approvals?status=maybe", egressKeySecurity, ""); code != 400 || errCode(body) != api.CodeValidation {
		t.Errorf("bad status: %d %v", code, body)
	}
	if d := f.request("https://docs.example/"); d.Allow {
		t.Fatal("allowed after refused decisions")
	}

	// Approve for a day: allowed until it expires, logged with who approved.
	code, body = f.do(t, "POST", "/approvals/"+id, egressKeySecurity, `{"decision": "approve", "ttl": "24h", "reason": "vendor docs"}`)
	if code != 200 || body["status"] != "approved" || body["decided_by"] != "sec" || body["decided_by_tenant"] != "t" ||
		body["expires_at"] != "2026-03-02T12:01:00Z" || body["reason"] != "vendor docs" {
		t.Fatalf("approve: %d %v", code, body)
	}
	lines := f.logs.Records("egress approval decided")
	if len(lines) != 1 || lines[0]["decided_by"] != "sec" || lines[0]["decision"] != "approve" || lines[0]["approval_id"] != id ||
		lines[0]["host"] != "docs.example" || lines[0]["ttl"] != "24h0m0s" {
		t.Fatalf("decision log: %v", lines)
	}
	if d := f.request("https://docs.example/guide"); !d.Allow || d.Rule != "approval:"+id {
		t.Fatalf("approved host: %v %s (%s)", d.Allow, d.Code, d.Reason)
	}
	code, body = f.do(t, "POST", "/profiles/research-approve/evaluate", egressKeySecurity, `{"url": "https://docs.example/"}`)
	if code != 200 || body["decision"] != "allow" || body["approval_id"] != id || body["rule"] != "approval:"+id {
		t.Fatalf("evaluate an approved host: %d %v", code, body)
	}
	if code, body := f.do(t, "GET", "/approvals", egressKeySecurity, ""); code != 200 || len(body["approvals"].([]any)) != 0 {
		t.Errorf("pending after approval: %v", body)
	}
	if code, body := f.do(t, "GET", "/approvals?status=approved&profile=research-approve", egressKeySecurity, ""); code != 200 || len(body["approvals"].([]any)) != 1 {
		t.Errorf("approved list: %v", body)
	}

	// Approved, but it resolves to a private address: still denied.
	inside := f.request("http://inside.example/").ApprovalID
	if code, body := f.do(t, "POST", "/approvals/"+inside, egressKeyAdmin, `{"decision": "approve", "ttl": "7d"}`); code != 200 || body["decided_by"] != "admin" {
		t.Fatalf("admin approves: %d %v", code, body)
	}
	if d := f.request("http://inside.example/"); d.Allow || d.Code != egress.CodeDeniedAddress {
		t.Fatalf("approved private host: %v %s", d.Allow, d.Code)
	}

	// Expired: denied again, a new request is filed, the old one cannot be
	// decided any more.
	f.clock.Add(24 * time.Hour)
	d = f.request("https://docs.example/")
	if d.Allow || d.Code != egress.CodeApproval || d.ApprovalID == id {
		t.Fatalf("after expiry: %v %s %s", d.Allow, d.Code, d.ApprovalID)
	}
	if code, body := f.do(t, "POST", "/approvals/"+id, egressKeySecurity, `{"decision": "approve", "ttl": "1h"}`); code != 409 || errCode(body) != api.CodeApprovalExpired {
		t.Errorf("deciding an expired approval: %d %v", code, body)
	}
	if code, body := f.do(t, "GET", "/approvals/"+id, egressKeySecurity, ""); code != 200 || body["status"] != "expired" {
		t.Errorf("get expired: %d %v", code, body)
	}

	// Reject: denied with approval_rejected.
	if code, body := f.do(t, "POST", "/approvals/"+d.ApprovalID, egressKeySecurity, `{"decision": "reject"}`); code != 200 || body["status"] != "rejected" {
		t.Fatalf("reject: %d %v", code, body)
	}
	if d := f.request("https://docs.example/"); d.Allow || d.Code != egress.CodeApprovalRejected {
		t.Fatalf("rejected host: %v %s", d.Allow, d.Code)
	}
	if code, body := f.do(t, "GET", "/approvals?status=all&host=docs.example", egressKeySecurity, ""); code != 200 || len(body["approvals"].([]any)) != 2 {
		t.Errorf("all of docs.example: %v", body)
	}
	if code, body := f.do(t, "GET", "/approvals?bogus=1", egressKeySecurity, ""); code != 400 || errCode(body) != api.CodeValidation {
		t.Errorf("unknown parameter: %d %v", code, body)
	}
}

// Approvals are in the store: a new server on the same store sees them.
func TestApprovalsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	st, err := store.OpenSQLite(dir)
	if err != nil {
		t.Fatal(err)
	}
	svc := approval.New(approval.Config{Store: st})
	a, err := svc.CheckApproval(context.Background(), egress.ApprovalQuery{Profile: "research-approve", Host: "docs.example", Port: 443, Method: "GET"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Decide(context.Background(), a.ID, approval.Decision{Decision: "approve", TTL: "1h", By: "sec"}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = store.OpenSQLite(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f := newEgressFixture(t)
	srv := newServer(t, Config{DataDir: dir, Profiles: f.srv.cfg.Profiles, Keys: f.srv.cfg.Keys, Log: f.srv.log, Control: Control{Store: st}})
	defer srv.Close()
	f.srv = srv
	code, body := f.do(t, "GET", "/approvals?status=approved", egressKeySecurity, "")
	if list, _ := body["approvals"].([]any); code != 200 || len(list) != 1 || list[0].(map[string]any)["id"] != a.ID {
		t.Fatalf("after restart: %d %v", code, body)
	}
}

func errCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}
