package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/apitest"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/httpapi"
	"github.com/sandboxd/sandboxd/runner"
)

func newClient(t *testing.T, s *apitest.Server, key string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(s.URL, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func code(s string) *string { return &s }

func TestExecAndAsync(t *testing.T) {
	s := apitest.New(t, nil)
	s.Engine.Set(runner.Result{Status: runner.StatusOK, Stdout: []byte("42\n")})
	c := newClient(t, s, apitest.AgentKey)
	var meta client.ResponseMeta
	res, err := c.Exec(ctx(t), &api.ExecRequest{Language: "python", Code: code("print(6*7)")}, client.RequestID("req-1"), client.ResponseInto(&meta))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "ok" || res.Stdout != "42\n" || res.Limits.TimeoutMS == 0 || res.Profile.Name != "default" {
		t.Fatalf("exec: %+v", res)
	}
	if meta.Status != 200 || meta.RequestID != "req-1" || meta.Replayed {
		t.Fatalf("meta: %+v", meta)
	}
	if _, err := c.Exec(ctx(t), &api.ExecRequest{Language: "python", Code: code("1"), Async: true}); err == nil {
		t.Fatal("Exec with Async set: no error")
	}

	st, err := c.ExecAsync(ctx(t), &api.ExecRequest{Language: "python", Code: code("print(1)")})
	if err != nil || st.Status != "queued" || st.ID == "" {
		t.Fatalf("async: %+v %v", st, err)
	}
	done, err := c.WaitExec(ctx(t), st.ID, 5*time.Millisecond)
	if err != nil || done.Status != "ok" || done.Result == nil || done.Result.Stdout != "42\n" || !client.Done(done) {
		t.Fatalf("wait: %+v %v", done, err)
	}
	got, err := c.GetExec(ctx(t), st.ID)
	if err != nil || got.Status != "ok" {
		t.Fatalf("get: %+v %v", got, err)
	}
	del, err := c.CancelExec(ctx(t), st.ID)
	if err != nil || del.Status != "ok" {
		t.Fatalf("cancel of an ended exec: %+v %v", del, err)
	}
	_, err = c.GetExec(ctx(t), "ex_nope")
	if !client.IsCode(err, api.CodeNotFound) || client.StatusOf(err) != 404 {
		t.Fatalf("unknown exec: %v", err)
	}
}

func TestIdempotencyAndSessionHeaders(t *testing.T) {
	s := apitest.New(t, nil)
	c := newClient(t, s, apitest.AgentKey, client.WithSession("run-7"))
	req := &api.ExecRequest{Language: "python", Code: code("print(1)")}
	if _, err := c.Exec(ctx(t), req, client.IdempotencyKey("idem-1")); err != nil {
		t.Fatal(err)
	}
	var meta client.ResponseMeta
	if _, err := c.Exec(ctx(t), req, client.IdempotencyKey("idem-1"), client.ResponseInto(&meta)); err != nil {
		t.Fatal(err)
	}
	if !meta.Replayed || len(s.Engine.Runs()) != 1 {
		t.Fatalf("the retry ran again: replayed %v, runs %d", meta.Replayed, len(s.Engine.Runs()))
	}
	_, err := c.Exec(ctx(t), &api.ExecRequest{Language: "python", Code: code("print(2)")}, client.IdempotencyKey("idem-1"))
	if !client.IsCode(err, api.CodeIdempotencyMismatch) {
		t.Fatalf("another request with the key: %v", err)
	}
	// The session (from WithSession) was counted; SessionID overrides it.
	if _, err := c.Exec(ctx(t), &api.ExecRequest{Language: "python", Code: code("print(3)")}, client.SessionID("run-8"),
		client.Traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")); err != nil {
		t.Fatal(err)
	}
	rep, err := c.SessionUsage(ctx(t), "", "run-7")
	if err != nil || rep.Used.Execs != 1 || rep.Tenant != "acme" {
		t.Fatalf("session usage: %+v %v", rep, err)
	}
	rep, err = c.SessionUsage(ctx(t), "", "run-8")
	if err != nil || rep.Used.Execs != 1 {
		t.Fatalf("session run-8: %+v %v", rep, err)
	}
	trep, err := c.TenantUsage(ctx(t), "acme")
	if err != nil || trep.Tenant != "acme" || trep.Day == "" {
		t.Fatalf("tenant usage: %+v %v", trep, err)
	}
	_, err = c.TenantUsage(ctx(t), "other")
	if !client.IsCode(err, api.CodeForbidden) {
		t.Fatalf("other tenant's usage: %v", err)
	}
}

func TestTypedErrors(t *testing.T) {
	s := apitest.New(t, &apitest.Options{Tenants: "tenants:\n  acme:\n    exec_per_minute: 1\n    burst: 1\n"})
	c := newClient(t, s, apitest.AgentKey)
	_, err := c.Exec(ctx(t), &api.ExecRequest{Language: "python", Code: code("1"), Limits: &api.LimitsRequest{MemoryMB: ptr[int64](100000)}})
	e, ok := client.AsError(err)
	if !ok || e.Status != 400 || e.Code != api.CodeValidation || e.Field != "limits.memory_mb" || !strings.Contains(e.Message, "ceiling") || e.RequestID == "" {
		t.Fatalf("validation: %#v", err)
	}
	if !strings.Contains(e.Error(), "HTTP 400 VALIDATION (field limits.memory_mb)") || e.Temporary() {
		t.Fatalf("Error(): %s", e.Error())
	}
	// The rate is counted before the body is read: the refused request
	// took the only token.
	_, err = c.Exec(ctx(t), &api.ExecRequest{Language: "python", Code: code("2")})
	e, ok = client.AsError(err)
	if !ok || !client.IsCode(err, api.CodeBusy, api.CodeRateLimited) || e.Budget != "tenant.exec_per_minute" || e.Limit == nil || e.RetryAfter <= 0 || client.RetryAfter(err) != e.RetryAfter || !e.Temporary() {
		t.Fatalf("rate limit: %#v", err)
	}
	wrapped := errors.Join(errors.New("context"), err)
	if !client.IsCode(wrapped, api.CodeRateLimited) {
		t.Fatal("IsCode does not see a wrapped error")
	}
	bad := newClient(t, s, "sbx_wrong")
	err = bad.Healthz(ctx(t))
	if err != nil {
		t.Fatalf("healthz needs no key: %v", err)
	}
	_, err = bad.Exec(ctx(t), &api.ExecRequest{Language: "python", Code: code("1")})
	if !client.IsCode(err, api.CodeAuth) || client.StatusOf(err) != 401 {
		t.Fatalf("wrong key: %v", err)
	}
	if client.IsCode(errors.New("x"), api.CodeAuth) || client.StatusOf(errors.New("x")) != 0 {
		t.Fatal("a plain error is not an API error")
	}
	if _, err := client.New("ftp://x", ""); err == nil {
		t.Fatal("ftp base URL accepted")
	}
}

func ptr[T any](v T) *T { return &v }

func TestFetch(t *testing.T) {
	s := apitest.New(t, nil)
	c := newClient(t, s, apitest.AgentKey)
	res, err := c.Fetch(ctx(t), &api.FetchRequest{URL: s.PageURL("/page"), Profile: "pages", Format: "markdown"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Untrusted || res.Title != "Release notes" || !strings.Contains(res.Content, "# Release 4.2") ||
		!strings.Contains(res.Content, `nonce="`+res.Nonce+`"`) || strings.Contains(res.Content, "Ignore previous") {
		t.Fatalf("fetch: %+v", res)
	}
	_, err = c.Fetch(ctx(t), &api.FetchRequest{URL: s.PageURL("/zip"), Profile: "pages"})
	e, ok := client.AsError(err)
	if !ok || e.Code != api.CodeUnsupported || e.ContentType != "application/zip" || e.Size == nil {
		t.Fatalf("zip: %#v", err)
	}
	_, err = c.Fetch(ctx(t), &api.FetchRequest{URL: "http://10.0.0.1/", Profile: "pages"})
	if !client.IsCode(err, api.CodeEgressDenied) || client.StatusOf(err) != 403 {
		t.Fatalf("private address: %v", err)
	}
	_, err = c.Fetch(ctx(t), &api.FetchRequest{URL: s.PageURL("/page"), Profile: "pages", Links: "some"})
	if e, _ := client.AsError(err); e == nil || e.Field != "links" {
		t.Fatalf("bad links: %v", err)
	}
}

func TestAdminProfilesApprovals(t *testing.T) {
	s := apitest.New(t, nil)
	admin := newClient(t, s, apitest.AdminKey)
	sec := newClient(t, s, apitest.SecurityKey)
	agent := newClient(t, s, apitest.AgentKey)

	st, err := admin.FreezeState(ctx(t))
	if err != nil || st.Frozen {
		t.Fatalf("state: %+v %v", st, err)
	}
	st, err = admin.Freeze(ctx(t), &api.FreezeRequest{Reason: "drill"})
	if err != nil || !st.Frozen || st.Reason != "drill" || st.By != "ops-1" {
		t.Fatalf("freeze: %+v %v", st, err)
	}
	_, err = agent.Exec(ctx(t), &api.ExecRequest{Language: "python", Code: code("1")})
	if !client.IsCode(err, api.CodeFrozen) {
		t.Fatalf("frozen exec: %v", err)
	}
	if st, err = admin.Unfreeze(ctx(t)); err != nil || st.Frozen {
		t.Fatalf("unfreeze: %+v %v", st, err)
	}
	if st, err = admin.Freeze(ctx(t), nil); err != nil || !st.Frozen {
		t.Fatalf("freeze without body: %+v %v", st, err)
	}
	admin.Unfreeze(ctx(t))
	if _, err := agent.Freeze(ctx(t), nil); !client.IsCode(err, api.CodeForbidden) {
		t.Fatalf("agent freezes: %v", err)
	}

	list, err := sec.Profiles(ctx(t))
	if err != nil || len(list.Exec) == 0 || len(list.Egress) == 0 {
		t.Fatalf("profiles: %+v %v", list, err)
	}
	p, err := sec.Profile(ctx(t), "default")
	if err != nil || p.Kinds[0] != "exec" || p.Exec["limits"] == nil {
		t.Fatalf("profile: %+v %v", p, err)
	}
	if _, err := sec.Profile(ctx(t), "nope"); !client.IsCode(err, api.CodeNotFound) {
		t.Fatalf("unknown profile: %v", err)
	}
	d, err := sec.Evaluate(ctx(t), "pages", &api.EvaluateRequest{URL: s.PageURL("/page")})
	if err != nil || d.Decision != "allow" || d.Profile.Name != "pages" {
		t.Fatalf("evaluate: %+v %v", d, err)
	}

	filed, err := s.API.Approvals().CheckApproval(context.Background(), egress.ApprovalQuery{Profile: "pages", Host: "docs.vendor.test", Port: 443, Method: "GET", URL: "https://docs.vendor.test/", Tenant: "acme", KeyID: "agent-1", Client: "ex_1"})
	if err != nil {
		t.Fatal(err)
	}
	al, err := sec.Approvals(ctx(t), client.ApprovalFilter{Status: "pending", Profile: "pages", Limit: 10})
	if err != nil || len(al.Approvals) != 1 || al.Approvals[0].ID != filed.ID {
		t.Fatalf("approvals: %+v %v", al, err)
	}
	a, err := sec.Approval(ctx(t), filed.ID)
	if err != nil || a.Host != "docs.vendor.test" || a.Status != "pending" {
		t.Fatalf("approval: %+v %v", a, err)
	}
	a, err = sec.DecideApproval(ctx(t), filed.ID, &api.ApprovalDecisionRequest{Decision: "approve", TTL: "1h", Reason: "docs"})
	if err != nil || a.Status != "approved" || a.DecidedBy != "security-1" {
		t.Fatalf("decide: %+v %v", a, err)
	}
	_, err = sec.DecideApproval(ctx(t), filed.ID, &api.ApprovalDecisionRequest{Decision: "approve"})
	if e, _ := client.AsError(err); e == nil || e.Code != api.CodeValidation || e.Field != "ttl" {
		t.Fatalf("approve without ttl: %v", err)
	}
}

func TestAuditAndCaptures(t *testing.T) {
	s := apitest.New(t, nil)
	agent := newClient(t, s, apitest.AgentKey)
	rev := newClient(t, s, apitest.ReviewerKey)
	sec := newClient(t, s, apitest.SecurityKey)
	res, err := agent.Fetch(ctx(t), &api.FetchRequest{URL: s.PageURL("/text"), Profile: "pages"})
	if err != nil {
		t.Fatal(err)
	}
	page, err := rev.Audit(ctx(t), audit.Filter{Kind: "fetch", Since: time.Now().Add(-time.Hour), Limit: 10})
	if err != nil || len(page.Records) == 0 {
		t.Fatalf("audit: %+v %v", page, err)
	}
	rec, err := rev.AuditRecord(ctx(t), page.Records[0].ID)
	if err != nil || rec.Subject != res.ID || rec.Tenant != "acme" {
		t.Fatalf("audit record: %+v %v", rec, err)
	}
	if _, err := agent.Audit(ctx(t), audit.Filter{}); !client.IsCode(err, api.CodeForbidden) {
		t.Fatalf("agent reads the audit log: %v", err)
	}
	caps, err := rev.Captures(ctx(t), client.CaptureFilter{Kind: "fetch", Limit: 5})
	if err != nil || len(caps.Captures) == 0 {
		t.Fatalf("captures: %+v %v", caps, err)
	}
	cv, err := rev.Capture(ctx(t), res.CaptureID)
	if err != nil || cv.ID != res.CaptureID || cv.Text["headers"] == "" {
		t.Fatalf("capture: %+v %v", cv, err)
	}
	raw, err := rev.CaptureRaw(ctx(t), res.CaptureID, "")
	if err != nil || string(raw) != "plain text page\n" {
		t.Fatalf("raw: %q %v", raw, err)
	}
	if _, err := rev.CaptureRaw(ctx(t), res.CaptureID, "nope"); !client.IsCode(err, api.CodeNotFound) {
		t.Fatalf("unknown part: %v", err)
	}
	held, err := sec.HoldCapture(ctx(t), res.CaptureID, true, "case 1")
	if err != nil || held.Hold == nil {
		t.Fatalf("hold: %+v %v", held, err)
	}
	if _, err := sec.EraseCapture(ctx(t), res.CaptureID, "request"); !client.IsCode(err, "HELD") {
		t.Fatalf("erase held: %v", err)
	}
	if _, err := sec.HoldCapture(ctx(t), res.CaptureID, false, "closed"); err != nil {
		t.Fatal(err)
	}
	erased, err := sec.EraseCapture(ctx(t), res.CaptureID, "request")
	if err != nil || erased.Erased == nil {
		t.Fatalf("erase: %+v %v", erased, err)
	}
	th, err := sec.HoldTenant(ctx(t), "acme", true, "litigation")
	if err != nil || !th.Hold || th.Tenant != "acme" {
		t.Fatalf("tenant hold: %+v %v", th, err)
	}
}

func TestServiceEndpoints(t *testing.T) {
	s := apitest.New(t, nil)
	c := newClient(t, s, apitest.AgentKey)
	if err := c.Healthz(ctx(t)); err != nil {
		t.Fatal(err)
	}
	r, err := c.Readyz(ctx(t))
	if err != nil || !r.Ready() || len(r.Checks) == 0 {
		t.Fatalf("readyz: %+v %v", r, err)
	}
	tools, err := c.Tools(ctx(t))
	if err != nil || len(tools) != 2 || tools[0].Name != httpapi.ToolRunPython || tools[1].Name != httpapi.ToolFetchURL {
		t.Fatalf("tools: %+v %v", tools, err)
	}
	raw, err := c.ToolsJSON(ctx(t), "openai")
	var oa api.OpenAIToolList
	if err != nil || json.Unmarshal(raw, &oa) != nil || oa.Tools[1].Function.Name != httpapi.ToolFetchURL {
		t.Fatalf("openai tools: %s %v", raw, err)
	}
	if _, err := c.ToolsJSON(ctx(t), "xml"); !client.IsCode(err, api.CodeValidation) {
		t.Fatalf("xml tools: %v", err)
	}
	doc, err := c.OpenAPI(ctx(t))
	if err != nil || !strings.HasPrefix(string(doc), "openapi: 3.1") {
		t.Fatalf("openapi: %.40s %v", doc, err)
	}
	m, err := c.Metrics(ctx(t))
	if err != nil || !strings.Contains(m, "sandboxd_http_requests_total") {
		t.Fatalf("metrics: %v", err)
	}
	rr, err := c.Raw(ctx(t), http.MethodPost, "/exec", []byte(`{"language":"ruby"}`))
	if err != nil || rr.Status != 400 || !strings.Contains(string(rr.Body), `"VALIDATION"`) {
		t.Fatalf("raw: %+v %v", rr, err)
	}
	// A non-JSON error answer keeps its text.
	plain, err := client.New(s.Upstream.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	err = plain.Healthz(ctx(t))
	if e, ok := client.AsError(err); !ok || e.Status != 404 || e.Code != "" || !strings.Contains(e.Message, "not found") {
		t.Fatalf("plain 404: %#v", err)
	}
	// Contexts bound calls.
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Healthz(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// recorder is an http.RoundTripper that keeps the requests it passes on.
type recorder struct {
	next http.RoundTripper
	reqs []*http.Request
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.reqs = append(r.reqs, req)
	return r.next.RoundTrip(req)
}

// WithHTTPClient's client carries every call, and WithHeader's header goes
// with each of them (a call's own Header wins over it).
func TestHTTPClientAndHeaderOptions(t *testing.T) {
	s := apitest.New(t, nil)
	rec := &recorder{next: http.DefaultTransport}
	c := newClient(t, s, apitest.AgentKey, client.WithHTTPClient(&http.Client{Transport: rec}),
		client.WithHeader("X-Request-Id", "opt-1"), client.WithUserAgent("agent-loop/1"))
	var meta client.ResponseMeta
	if err := c.Healthz(ctx(t), client.ResponseInto(&meta)); err != nil {
		t.Fatal(err)
	}
	if meta.RequestID != "opt-1" {
		t.Errorf("X-Request-Id answered %q, want the header WithHeader set", meta.RequestID)
	}
	if _, err := c.Tools(ctx(t), client.Header("X-Request-Id", "call-2")); err != nil {
		t.Fatal(err)
	}
	if len(rec.reqs) != 2 {
		t.Fatalf("%d requests went through WithHTTPClient's client, want 2", len(rec.reqs))
	}
	for i, want := range []string{"opt-1", "call-2"} {
		if got := rec.reqs[i].Header.Get("X-Request-Id"); got != want {
			t.Errorf("request %d: X-Request-Id %q, want %q", i, got, want)
		}
		if ua := rec.reqs[i].Header.Get("User-Agent"); ua != "agent-loop/1" {
			t.Errorf("request %d: User-Agent %q", i, ua)
		}
	}
}
