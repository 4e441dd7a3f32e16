package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/egress"
)

// oasChecker sends requests to a server and validates every request it
// marks valid and every response against openapi.yaml, recording which
// operations answered with which statuses.
type oasChecker struct {
	t    *testing.T
	v    validator.Validator
	h    http.Handler
	seen map[string]map[int]bool // "GET /exec/{id}" -> statuses
}

func newOASChecker(t *testing.T, h http.Handler) *oasChecker {
	t.Helper()
	doc, err := libopenapi.NewDocument(api.OpenAPIDocument())
	if err != nil {
		t.Fatalf("openapi.yaml does not load: %v", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("openapi.yaml: validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("openapi.yaml is not a valid OpenAPI document: %s: %s", e.Message, e.Reason)
			for _, se := range e.SchemaValidationErrors {
				t.Errorf("  %s: %s", se.FieldPath+" "+se.KeywordLocation, se.Reason)
			}
		}
		t.FailNow()
	}
	return &oasChecker{t: t, v: v, h: h, seen: map[string]map[int]bool{}}
}

type oasCall struct {
	method, route, target, key, body string
	header                           map[string]string
	// validRequest: the request itself must conform (calls that test
	// refusals send bodies or headers the document rules out).
	validRequest bool
}

type oasReply struct {
	code   int
	header http.Header
	raw    []byte
	body   map[string]any
}

func (c *oasChecker) newRequest(k oasCall) *http.Request {
	var body io.Reader
	if k.body != "" {
		body = strings.NewReader(k.body)
	}
	req := httptest.NewRequest(k.method, k.target, body)
	if k.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if k.key != "" {
		req.Header.Set("Authorization", "Bearer "+k.key)
	}
	for name, v := range k.header {
		req.Header.Set(name, v)
	}
	return req
}

func (c *oasChecker) do(k oasCall) *oasReply {
	t := c.t
	t.Helper()
	if k.validRequest {
		if ok, errs := c.v.ValidateHttpRequest(c.newRequest(k)); !ok {
			t.Errorf("%s %s: the request does not conform to openapi.yaml:%s", k.method, k.target, describe(errs))
		}
	}
	rec := httptest.NewRecorder()
	c.h.ServeHTTP(rec, c.newRequest(k))
	resp := rec.Result()
	raw := rec.Body.Bytes()
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	if ok, errs := c.v.ValidateHttpResponse(c.newRequest(k), resp); !ok {
		t.Errorf("%s %s -> %d: the response does not conform to openapi.yaml:%s\nbody: %s", k.method, k.target, resp.StatusCode, describe(errs), truncate(raw, 600))
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Errorf("%s %s -> %d: no X-Request-Id", k.method, k.target, resp.StatusCode)
	}
	op := k.method + " " + k.route
	if c.seen[op] == nil {
		c.seen[op] = map[int]bool{}
	}
	c.seen[op][resp.StatusCode] = true
	r := &oasReply{code: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

// want fails unless the reply has the status (and, for errors, the code).
func (r *oasReply) want(t *testing.T, what string, status int, code string) *oasReply {
	t.Helper()
	if r.code != status {
		t.Fatalf("%s: status %d, want %d: %s", what, r.code, status, truncate(r.raw, 600))
	}
	if code != "" {
		e, _ := r.body["error"].(map[string]any)
		if e == nil || e["code"] != code {
			t.Fatalf("%s: error %v, want code %s", what, r.body["error"], code)
		}
	}
	return r
}

func describe(errs []*verrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  %s: %s", e.Message, e.Reason)
		for _, se := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n    at %s: %s", se.FieldPath+" "+se.KeywordLocation, se.Reason)
		}
	}
	return b.String()
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// docOperations lists "METHOD /path" of every operation in openapi.yaml.
func docOperations(t *testing.T) []string {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(api.OpenAPIDocument(), &doc); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for path, item := range doc.Paths {
		for method := range item {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
				ops = append(ops, strings.ToUpper(method)+" "+path)
			}
		}
	}
	sort.Strings(ops)
	return ops
}

// echoOperations lists "METHOD /path" of every route registered in echo,
// with :param written {param}. The review page (/ui, package ui) is HTML
// for people, not part of the JSON API: ui's own tests cover it.
func echoOperations(s *Server) []string {
	var ops []string
	for _, r := range s.echo.Routes() {
		if r.Path == "/ui" || strings.HasPrefix(r.Path, "/ui/") {
			continue
		}
		segs := strings.Split(r.Path, "/")
		for i, seg := range segs {
			if strings.HasPrefix(seg, ":") {
				segs[i] = "{" + seg[1:] + "}"
			}
		}
		ops = append(ops, r.Method+" "+strings.Join(segs, "/"))
	}
	sort.Strings(ops)
	return slices.Compact(ops)
}

// TestOpenAPIDocumentsEveryRoute fails when a route registered in echo is
// missing from openapi.yaml, or the document names a route that is not
// served.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	f := newFixture(t, 1, 1)
	doc, served := docOperations(t), echoOperations(f.srv)
	for _, op := range served {
		if !slices.Contains(doc, op) {
			t.Errorf("route %s is served but missing from api/openapi.yaml: document it (request, responses, error codes)", op)
		}
	}
	for _, op := range doc {
		if !slices.Contains(served, op) {
			t.Errorf("api/openapi.yaml documents %s, which is not a route", op)
		}
	}
}

// TestOpenAPIRequestSchemasAreTheToolSchemas: the document's ExecRequest
// and FetchRequest are the embedded schemas that validate the bodies and
// serve as the tools' input schemas.
func TestOpenAPIRequestSchemasAreTheToolSchemas(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]any `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(api.OpenAPIDocument(), &doc); err != nil {
		t.Fatal(err)
	}
	for name, raw := range map[string][]byte{"ExecRequest": api.ExecRequestSchema(), "FetchRequest": api.FetchRequestSchema()} {
		var want, got any
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(doc.Components.Schemas[name])
		if err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal(b, &got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("components.schemas.%s in openapi.yaml differs from api/schemas/: copy the schema file into the document\n got: %s\nwant: %s", name, b, raw)
		}
	}
}

// TestOpenAPIConformance drives every route of a server (fake engine,
// loopback upstream for /fetch) through its successes and its typical
// refusals, and validates each request and response against openapi.yaml.
func TestOpenAPIConformance(t *testing.T) {
	const tenants = `
tenants:
  other:
    exec_per_minute: 1
    burst: 1
`
	f := newFetchFixture(t, tenants)
	c := newOASChecker(t, f.srv.Handler())
	page := f.url("pages.test", "/page")
	execBody := `{"language":"python","code":"print(1)"}`

	// Service endpoints.
	c.do(oasCall{method: "GET", route: "/healthz", target: "/healthz", validRequest: true}).want(t, "healthz", 200, "")
	c.do(oasCall{method: "GET", route: "/readyz", target: "/readyz", validRequest: true}).want(t, "readyz", 200, "")
	c.do(oasCall{method: "GET", route: "/openapi.yaml", target: "/openapi.yaml", validRequest: true}).want(t, "openapi", 200, "")

	// POST /exec: a run, an async run, replays, refusals.
	r := c.do(oasCall{method: "POST", route: "/exec", target: "/exec", key: keyAgent, body: execBody, validRequest: true}).want(t, "exec", 200, "")
	if r.body["status"] != "ok" {
		t.Fatalf("exec: %s", r.raw)
	}
	idem := map[string]string{"Idempotency-Key": "k-1", "X-Session-Id": "s-1", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	c.do(oasCall{method: "POST", route: "/exec", target: "/exec", key: keyAgent, body: `{"language":"python","code":"print(2)"}`, header: idem, validRequest: true}).want(t, "keyed exec", 200, "")
	r = c.do(oasCall{method: "POST", route: "/exec", target: "/exec", key: keyAgent, body: `{"language":"python","code":"print(2)"}`, header: idem, validRequest: true}).want(t, "replay", 200, "")
	if r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: no Idempotent-Replayed: %v", r.header)
	}
	c.do(oasCall{method: "POST", route: "/exec", target: "/exec", key: keyAgent, body: `{"language":"python","code":"print(3)"}`, header: idem, validRequest: true}).want(t, "mismatch", 422, api.CodeIdempotencyMismatch)
	r = c.do(oasCall{method: "POST", route: "/exec", target: "/exec", key: keyAgent, body: `{"language":"python","code":"1","async":true}`, validRequest: true}).want(t, "async exec", 202, "")
	asyncID, _ := r.body["id"].(string)
	if r.header.Get("Location") != "/exec/"+asyncID {
		t.Errorf("async: Location %q", r.header.Get("Location"))
	}
	r = c.do(oasCall{method: "POST", route: "/exec", target: "/exec", key: keyAgent, body: `{"language":"python","code":"print('streamed')"}`, header: map[string]string{"Accept": "text/event-stream"}, validRequest: true}).want(t, "streamed exec", 200, "")
	if !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") || !strings.Contains(string(r.raw), "event: result") {
		t.Errorf("streamed exec: %q %s", r.header.Get("Content-Type"), truncate(r.raw, 300))
	}
	c.do(oasCall{method: "POST", route: "/exec", target: "/exec", key: keyAgent, body: `{"language":"python","code":"1","async":true}`, header: map[string]string{"Accept": "text/event-stream"}}).want(t, "streamed async", 400, api.CodeValidation)
	c.do(oasCall{method: "POST", route: "/exec", target: "/exec", key: keyAgent, body: `{"language":"ruby","code":"1"}`}).want(t, "bad language", 400, api.CodeValidation)
	c.do(oasCall{method: "POST", route: "/exec", target: "/exec", key: keyAgent, body: `{"language":"python","code":"1","limits":{"memory_mb":1}}`}).want(t, "low memory", 400, api.CodeValidation)
	r = c.do(oasCall{method: "POST", route: "/exec", target: "/exec", body: execBody}).want(t, "no key", 401, api.CodeAuth)
	if r.header.Get("WWW-Authenticate") == "" {
		t.Errorf("401 without WWW-Authenticate")
	}
	for i := 0; i < 3; i++ {
		r = c.do(oasCall{method: "POST", route: "/exec", target: "/exec", key: keyAgent, body: `{"language":"python","code":"print('loop')"}`, header: map[string]string{"X-Session-Id": "loop-1"}, validRequest: true})
	}
	r.want(t, "loop", 409, api.CodeLoopDetected)
	c.do(oasCall{method: "POST", route: "/exec", target: "/exec", key: keyOther, body: execBody, validRequest: true}).want(t, "other's first exec", 200, "")
	r = c.do(oasCall{method: "POST", route: "/exec", target: "/exec", key: keyOther, body: execBody, validRequest: true}).want(t, "rate limited", 429, api.CodeRateLimited)
	if r.header.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After")
	}

	// GET and DELETE /exec/{id}.
	deadline := time.Now().Add(5 * time.Second)
	for {
		r = c.do(oasCall{method: "GET", route: "/exec/{id}", target: "/exec/" + asyncID, key: keyAgent, validRequest: true}).want(t, "get exec", 200, "")
		if r.body["status"] == "ok" || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r.body["status"] != "ok" || r.body["result"] == nil {
		t.Fatalf("async exec did not finish: %s", r.raw)
	}
	c.do(oasCall{method: "DELETE", route: "/exec/{id}", target: "/exec/" + asyncID, key: keyAgent, validRequest: true}).want(t, "delete exec", 200, "")
	c.do(oasCall{method: "GET", route: "/exec/{id}", target: "/exec/ex_nope", key: keyAgent, validRequest: true}).want(t, "unknown exec", 404, api.CodeNotFound)
	c.do(oasCall{method: "DELETE", route: "/exec/{id}", target: "/exec/ex_nope", key: keyAgent, validRequest: true}).want(t, "delete unknown", 404, api.CodeNotFound)

	// POST /fetch: a page, and each kind of refusal.
	r = c.do(oasCall{method: "POST", route: "/fetch", target: "/fetch", key: keyAgent, body: fetchBody(map[string]any{"url": page, "profile": "pages"}), validRequest: true}).want(t, "fetch", 200, "")
	if r.body["untrusted"] != true {
		t.Fatalf("fetch: %s", r.raw)
	}
	c.do(oasCall{method: "POST", route: "/fetch", target: "/fetch", key: keyAgent, body: fetchBody(map[string]any{"url": page, "profile": "pages", "format": "pdf"})}).want(t, "bad format", 400, api.CodeValidation)
	c.do(oasCall{method: "POST", route: "/fetch", target: "/fetch", key: keyAgent, body: fetchBody(map[string]any{"url": f.url("pages.test", "/to-evil"), "profile": "pages"}), validRequest: true}).want(t, "redirect to evil", 403, api.CodeEgressDenied)
	c.do(oasCall{method: "POST", route: "/fetch", target: "/fetch", key: keyAgent, body: fetchBody(map[string]any{"url": f.url("pages.test", "/zip"), "profile": "pages"}), validRequest: true}).want(t, "zip", 422, api.CodeUnsupported)
	c.do(oasCall{method: "POST", route: "/fetch", target: "/fetch", key: keyAgent, body: fetchBody(map[string]any{"url": f.url("pages.test", "/big"), "profile": "pages"}), validRequest: true}).want(t, "over the cap: cut there", 200, "")
	c.do(oasCall{method: "POST", route: "/fetch", target: "/fetch", key: keyAgent, body: fetchBody(map[string]any{"url": f.url("pages.test", "/hangup"), "profile": "pages"}), validRequest: true}).want(t, "hangup", 502, api.CodeUpstreamError)
	c.do(oasCall{method: "POST", route: "/fetch", target: "/fetch", body: "{}"}).want(t, "fetch without key", 401, api.CodeAuth)

	// GET /usage.
	c.do(oasCall{method: "GET", route: "/usage", target: "/usage?session=s-1", key: keyAgent, validRequest: true}).want(t, "session usage", 200, "")
	c.do(oasCall{method: "GET", route: "/usage", target: "/usage?tenant=acme", key: keyAgent, validRequest: true}).want(t, "tenant usage", 200, "")
	c.do(oasCall{method: "GET", route: "/usage", target: "/usage", key: keyAgent, validRequest: true}).want(t, "usage of nothing", 400, api.CodeValidation)
	c.do(oasCall{method: "GET", route: "/usage", target: "/usage?tenant=other", key: keyAgent, validRequest: true}).want(t, "other tenant", 403, api.CodeForbidden)

	// The kill switch.
	c.do(oasCall{method: "GET", route: "/admin/freeze", target: "/admin/freeze", key: keyAdmin, validRequest: true}).want(t, "freeze state", 200, "")
	c.do(oasCall{method: "POST", route: "/admin/freeze", target: "/admin/freeze", key: keyAgent, validRequest: true}).want(t, "agent freezes", 403, api.CodeForbidden)
	c.do(oasCall{method: "POST", route: "/admin/freeze", target: "/admin/freeze", key: keyAdmin, body: `{"reason":"drill"}`, validRequest: true}).want(t, "freeze", 200, "")
	c.do(oasCall{method: "POST", route: "/exec", target: "/exec", key: keyAgent, body: `{"language":"python","code":"print('frozen')"}`, validRequest: true}).want(t, "frozen exec", 503, api.CodeFrozen)
	c.do(oasCall{method: "POST", route: "/fetch", target: "/fetch", key: keyAgent, body: fetchBody(map[string]any{"url": page, "profile": "pages", "format": "markdown"}), validRequest: true}).want(t, "frozen fetch", 503, api.CodeFrozen)
	c.do(oasCall{method: "POST", route: "/admin/unfreeze", target: "/admin/unfreeze", key: keyAdmin, validRequest: true}).want(t, "unfreeze", 200, "")
	c.do(oasCall{method: "POST", route: "/admin/freeze", target: "/admin/freeze", key: keyAdmin, body: `{"reason":"` + strings.Repeat("x", 501) + `"}`}).want(t, "long reason", 400, api.CodeValidation)
	c.do(oasCall{method: "POST", route: "/admin/unfreeze", target: "/admin/unfreeze", key: keyAdmin, validRequest: true}).want(t, "unfreeze again", 200, "")

	// Profiles.
	c.do(oasCall{method: "GET", route: "/profiles", target: "/profiles", key: keyAdmin, validRequest: true}).want(t, "profiles", 200, "")
	c.do(oasCall{method: "GET", route: "/profiles", target: "/profiles", key: keyAgent, validRequest: true}).want(t, "profiles as agent", 403, api.CodeForbidden)
	c.do(oasCall{method: "GET", route: "/profiles/{name}", target: "/profiles/default", key: keyAdmin, validRequest: true}).want(t, "profile", 200, "")
	c.do(oasCall{method: "GET", route: "/profiles/{name}", target: "/profiles/web-research", key: keyAdmin, validRequest: true}).want(t, "egress profile", 200, "")
	c.do(oasCall{method: "GET", route: "/profiles/{name}", target: "/profiles/nope", key: keyAdmin, validRequest: true}).want(t, "no profile", 404, api.CodeNotFound)
	c.do(oasCall{method: "POST", route: "/profiles/{name}/evaluate", target: "/profiles/pages/evaluate", key: keyAdmin, body: fetchBody(map[string]any{"url": page}), validRequest: true}).want(t, "evaluate", 200, "")
	c.do(oasCall{method: "POST", route: "/profiles/{name}/evaluate", target: "/profiles/pages/evaluate", key: keyAdmin, body: `{"method":"GET"}`}).want(t, "evaluate without url", 400, api.CodeValidation)
	c.do(oasCall{method: "POST", route: "/profiles/{name}/evaluate", target: "/profiles/nope/evaluate", key: keyAdmin, body: fetchBody(map[string]any{"url": page}), validRequest: true}).want(t, "evaluate unknown", 404, api.CodeNotFound)

	// Approvals: one filed as the proxy would, listed, read and decided.
	st, err := f.srv.Approvals().CheckApproval(context.Background(), egress.ApprovalQuery{Profile: "pages", ProfileVersion: "v", Host: "docs.vendor.test", Port: 443, Method: "GET", URL: "https://docs.vendor.test/", Client: "ex_1", Tenant: "acme", KeyID: "agent-1"})
	if err != nil || st.ID == "" {
		t.Fatalf("filing an approval: %v %+v", err, st)
	}
	c.do(oasCall{method: "GET", route: "/approvals", target: "/approvals?status=pending&limit=10", key: keyAdmin, validRequest: true}).want(t, "approvals", 200, "")
	c.do(oasCall{method: "GET", route: "/approvals", target: "/approvals?color=red", key: keyAdmin}).want(t, "approvals filter", 400, api.CodeValidation)
	c.do(oasCall{method: "GET", route: "/approvals/{id}", target: "/approvals/" + st.ID, key: keyAdmin, validRequest: true}).want(t, "approval", 200, "")
	c.do(oasCall{method: "GET", route: "/approvals/{id}", target: "/approvals/apr_nope", key: keyAdmin, validRequest: true}).want(t, "unknown approval", 404, api.CodeNotFound)
	c.do(oasCall{method: "POST", route: "/approvals/{id}", target: "/approvals/" + st.ID, key: keyAdmin, body: `{"decision":"approve"}`, validRequest: true}).want(t, "approve without ttl", 400, api.CodeValidation)
	c.do(oasCall{method: "POST", route: "/approvals/{id}", target: "/approvals/" + st.ID, key: keyAdmin, body: `{"decision":"approve","ttl":"1h","reason":"docs"}`, validRequest: true}).want(t, "approve", 200, "")
	c.do(oasCall{method: "POST", route: "/approvals/{id}", target: "/approvals/apr_nope", key: keyAdmin, body: `{"decision":"reject"}`, validRequest: true}).want(t, "decide unknown", 404, api.CodeNotFound)

	// The audit log and the captures (the fetch above was captured).
	r = c.do(oasCall{method: "GET", route: "/audit", target: "/audit?limit=50", key: keyAdmin, validRequest: true}).want(t, "audit", 200, "")
	recs, _ := r.body["records"].([]any)
	if len(recs) == 0 {
		t.Fatalf("no audit records: %s", r.raw)
	}
	recID, _ := recs[0].(map[string]any)["id"].(string)
	c.do(oasCall{method: "GET", route: "/audit/{id}", target: "/audit/" + recID, key: keyAdmin, validRequest: true}).want(t, "audit record", 200, "")
	c.do(oasCall{method: "GET", route: "/audit/{id}", target: "/audit/nope", key: keyAdmin, validRequest: true}).want(t, "unknown record", 404, api.CodeNotFound)
	c.do(oasCall{method: "GET", route: "/audit", target: "/audit?limit=0", key: keyAdmin}).want(t, "audit limit", 400, api.CodeValidation)
	c.do(oasCall{method: "GET", route: "/audit", target: "/audit", key: keyAgent, validRequest: true}).want(t, "audit as agent", 403, api.CodeForbidden)
	r = c.do(oasCall{method: "GET", route: "/captures", target: "/captures?kind=fetch&limit=10", key: keyAdmin, validRequest: true}).want(t, "captures", 200, "")
	caps, _ := r.body["captures"].([]any)
	if len(caps) == 0 {
		t.Fatalf("no captures: %s", r.raw)
	}
	capID, _ := caps[0].(map[string]any)["id"].(string)
	capRoute := "/captures/" + capID
	c.do(oasCall{method: "GET", route: "/captures/{id}", target: capRoute, key: keyAdmin, validRequest: true}).want(t, "capture", 200, "")
	r = c.do(oasCall{method: "GET", route: "/captures/{id}/raw", target: capRoute + "/raw", key: keyAdmin, validRequest: true}).want(t, "raw capture", 200, "")
	if !strings.HasPrefix(r.header.Get("Content-Disposition"), "attachment") {
		t.Errorf("raw capture: %v", r.header)
	}
	c.do(oasCall{method: "GET", route: "/captures/{id}/raw", target: capRoute + "/raw?part=nope", key: keyAdmin, validRequest: true}).want(t, "raw unknown part", 404, api.CodeNotFound)
	c.do(oasCall{method: "GET", route: "/captures/{id}", target: "/captures/cap_nope", key: keyAdmin, validRequest: true}).want(t, "unknown capture", 404, api.CodeNotFound)
	c.do(oasCall{method: "POST", route: "/captures/{id}/hold", target: capRoute + "/hold", key: keyAdmin, body: `{"on":true,"reason":"case 1"}`, validRequest: true}).want(t, "hold", 200, "")
	c.do(oasCall{method: "DELETE", route: "/captures/{id}", target: capRoute, key: keyAdmin, body: `{"reason":"erasure request"}`, validRequest: true}).want(t, "erase held", 409, "HELD")
	c.do(oasCall{method: "POST", route: "/captures/{id}/hold", target: capRoute + "/hold", key: keyAdmin, body: `{"reason":"case 1"}`}).want(t, "hold without on", 400, api.CodeValidation)
	c.do(oasCall{method: "POST", route: "/captures/{id}/hold", target: capRoute + "/hold", key: keyAdmin, body: `{"on":false,"reason":"case closed"}`, validRequest: true}).want(t, "release", 200, "")
	c.do(oasCall{method: "DELETE", route: "/captures/{id}", target: capRoute, key: keyAdmin, body: `{"reason":"erasure request"}`, validRequest: true}).want(t, "erase", 200, "")
	c.do(oasCall{method: "DELETE", route: "/captures/{id}", target: capRoute, key: keyAdmin, body: `{"reason":"again"}`, validRequest: true}).want(t, "erase again", 410, "ERASED")
	c.do(oasCall{method: "GET", route: "/captures/{id}/raw", target: capRoute + "/raw", key: keyAdmin, validRequest: true}).want(t, "raw of erased", 410, "ERASED")
	c.do(oasCall{method: "POST", route: "/holds/{tenant}", target: "/holds/acme", key: keyAdmin, body: `{"on":true,"reason":"litigation"}`, validRequest: true}).want(t, "tenant hold", 200, "")
	c.do(oasCall{method: "POST", route: "/holds/{tenant}", target: "/holds/acme", key: keyAdmin, body: `{"on":false,"reason":"settled"}`, validRequest: true}).want(t, "tenant release", 200, "")
	c.do(oasCall{method: "POST", route: "/holds/{tenant}", target: "/holds/acme", key: keyAgent, body: `{"on":true,"reason":"x"}`, validRequest: true}).want(t, "hold as agent", 403, api.CodeForbidden)

	// Tools, in each format.
	for _, format := range []string{"", "?format=anthropic", "?format=openai", "?format=openai-responses", "?format=mcp"} {
		c.do(oasCall{method: "GET", route: "/tools", target: "/tools" + format, key: keyAgent, validRequest: true}).want(t, "tools"+format, 200, "")
	}
	c.do(oasCall{method: "GET", route: "/tools", target: "/tools?format=xml", key: keyAgent}).want(t, "tools xml", 400, api.CodeValidation)
	c.do(oasCall{method: "GET", route: "/tools", target: "/tools"}).want(t, "tools without key", 401, api.CodeAuth)

	// MCP: the handshake, a notification, tools/list, a tool call.
	accept := map[string]string{"Accept": "application/json, text/event-stream"}
	rpc := func(body string) oasCall {
		return oasCall{method: "POST", route: "/mcp", target: "/mcp", key: keyAgent, body: body, header: accept, validRequest: true}
	}
	r = c.do(rpc(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"conformance","version":"1"}}}`)).want(t, "initialize", 200, "")
	if res, _ := r.body["result"].(map[string]any); res == nil || res["serverInfo"] == nil {
		t.Fatalf("initialize: %s", r.raw)
	}
	c.do(rpc(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)).want(t, "initialized", 202, "")
	r = c.do(rpc(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)).want(t, "tools/list", 200, "")
	if !strings.Contains(string(r.raw), `"run_python"`) || !strings.Contains(string(r.raw), `"fetch_url"`) {
		t.Fatalf("tools/list: %s", r.raw)
	}
	r = c.do(rpc(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run_python","arguments":{"language":"python","code":"print('mcp')"}}}`)).want(t, "tools/call", 200, "")
	if !strings.Contains(string(r.raw), "status: ok") {
		t.Fatalf("tools/call: %s", r.raw)
	}
	c.do(oasCall{method: "POST", route: "/mcp", target: "/mcp", body: `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, header: accept}).want(t, "mcp without key", 401, api.CodeAuth)
	c.do(oasCall{method: "POST", route: "/mcp", target: "/mcp", key: keyAgent, body: `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`}).want(t, "mcp without accept", 400, "")

	// Sessions: one started, used, given a file, read from and ended; refusals.
	r = c.do(oasCall{method: "POST", route: "/sessions", target: "/sessions", key: keyAgent, body: `{"profile":"default","idle_timeout_s":60}`, validRequest: true}).want(t, "create session", 201, "")
	sid, _ := r.body["id"].(string)
	c.do(oasCall{method: "POST", route: "/sessions", target: "/sessions", key: keyAgent, body: `{"idle_timeout_s":999999}`}).want(t, "session idle over the ceiling", 400, api.CodeValidation)
	c.do(oasCall{method: "POST", route: "/sessions/{id}/exec", target: "/sessions/" + sid + "/exec", key: keyAgent, body: `{"code":"plot()","timeout_ms":1000}`, validRequest: true}).want(t, "session exec", 200, "")
	c.do(oasCall{method: "POST", route: "/sessions/{id}/files", target: "/sessions/" + sid + "/files", key: keyAgent, body: `{"files":[{"path":"d/a.txt","content":"aGk="}]}`, validRequest: true}).want(t, "session files", 200, "")
	c.do(oasCall{method: "GET", route: "/sessions/{id}/files/{path}", target: "/sessions/" + sid + "/files/d%2Fa.txt", key: keyAgent, validRequest: true}).want(t, "session file", 200, "")
	c.do(oasCall{method: "GET", route: "/sessions/{id}/files/{path}", target: "/sessions/" + sid + "/files/nope", key: keyAgent, validRequest: true}).want(t, "session file missing", 404, api.CodeNotFound)
	c.do(oasCall{method: "GET", route: "/sessions/{id}", target: "/sessions/" + sid, key: keyAgent, validRequest: true}).want(t, "get session", 200, "")
	c.do(oasCall{method: "GET", route: "/sessions/{id}", target: "/sessions/" + sid, key: keyOther, validRequest: true}).want(t, "other tenant's session", 404, api.CodeNotFound)
	c.do(oasCall{method: "DELETE", route: "/sessions/{id}", target: "/sessions/" + sid, key: keyAgent, validRequest: true}).want(t, "end session", 200, "")
	c.do(oasCall{method: "POST", route: "/sessions/{id}/exec", target: "/sessions/" + sid + "/exec", key: keyAgent, body: `{"code":"1"}`, validRequest: true}).want(t, "exec in an ended session", 409, api.CodeSessionEnded)

	// Metrics last: it has counted every request above.
	c.do(oasCall{method: "GET", route: "/metrics", target: "/metrics", validRequest: true}).want(t, "metrics", 200, "")

	// Every documented operation answered at least once with a success.
	for _, op := range docOperations(t) {
		ok := false
		for status := range c.seen[op] {
			ok = ok || status < 300
		}
		if !ok {
			t.Errorf("%s was not driven to a success by this test (statuses seen: %v): add a call", op, c.seen[op])
		}
	}
}

func TestOpenAPIServedDocument(t *testing.T) {
	f := newFixture(t, 1, 1)
	req := httptest.NewRequest("GET", "/openapi.yaml", nil)
	rec := httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), api.OpenAPIDocument()) || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/yaml") {
		t.Fatalf("GET /openapi.yaml: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
}
