// Package client calls sandboxd's HTTP API from Go: every endpoint, with
// the api package's request and response types, typed errors and the
// headers an agent runtime sends (Idempotency-Key, X-Session-Id,
// traceparent).
//
//	c, err := client.New("http://127.0.0.1:8080", os.Getenv("SANDBOXD_KEY"))
//	code := "print(6*7)"
//	res, err := c.Exec(ctx, &api.ExecRequest{Language: "python", Code: &code},
//		client.IdempotencyKey(uuid.NewString()), client.SessionID("agent-run-7"))
//	switch {
//	case client.IsCode(err, api.CodeRateLimited, api.CodeBusy):
//		// wait client.RetryAfter(err) and send the same request again
//	case err != nil:
//		// *client.Error: Status, Code, Message, Field, Budget, ...
//	default:
//		fmt.Print(res.Stdout)
//	}
//
// A request's context bounds the whole call; a synchronous exec waits for
// the run, so give it at least the profile's time limit. The client does
// not retry by itself: retry with the same Idempotency-Key, and a request
// that already ran is answered from the record instead of running again.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Client calls one sandboxd with one key. It is safe for concurrent use.
type Client struct {
	base   *url.URL
	key    string
	hc     *http.Client
	header http.Header
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (default: a client without a
// timeout; bound calls with their contexts).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithHeader sends a header with every request.
func WithHeader(name, value string) Option { return func(c *Client) { c.header.Set(name, value) } }

// WithSession sends X-Session-Id with every request: the agent session
// that session budgets and the loop guard count.
func WithSession(id string) Option { return WithHeader("X-Session-Id", id) }

// WithUserAgent sets the User-Agent.
func WithUserAgent(ua string) Option { return WithHeader("User-Agent", ua) }

// New returns a client of the sandboxd at baseURL (such as
// http://127.0.0.1:8080) that authenticates with key ("" for the
// endpoints that need none).
func New(baseURL, key string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("client: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http:// or https:// and a host", baseURL)
	}
	c := &Client{base: u, key: key, hc: &http.Client{}, header: http.Header{}}
	c.header.Set("User-Agent", "sandboxd-client")
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// CallOption sets something on one call.
type CallOption func(*call)

type call struct {
	header http.Header
	meta   *ResponseMeta
}

// IdempotencyKey sends an Idempotency-Key (1 to 255 visible ASCII
// characters; a UUID): a retry with the same key and request gets the
// first answer instead of running again.
func IdempotencyKey(key string) CallOption {
	return func(c *call) { c.header.Set("Idempotency-Key", key) }
}

// SessionID sends X-Session-Id for this call (overriding WithSession).
func SessionID(id string) CallOption { return func(c *call) { c.header.Set("X-Session-Id", id) } }

// Traceparent sends a W3C traceparent; its trace id goes into the log
// lines of the request.
func Traceparent(tp string) CallOption { return func(c *call) { c.header.Set("traceparent", tp) } }

// RequestID sends X-Request-Id (1 to 64 of A-Z a-z 0-9 . _ : -), which the
// response and the log then carry.
func RequestID(id string) CallOption { return func(c *call) { c.header.Set("X-Request-Id", id) } }

// Header sends any header with this call.
func Header(name, value string) CallOption { return func(c *call) { c.header.Set(name, value) } }

// ResponseInto fills m with the status and headers of the call's response
// (success or error).
func ResponseInto(m *ResponseMeta) CallOption { return func(c *call) { c.meta = m } }

// ResponseMeta is what ResponseInto records.
type ResponseMeta struct {
	Status    int
	Header    http.Header
	RequestID string
	// Replayed: the answer is the stored answer of an earlier request with
	// the same Idempotency-Key (Idempotent-Replayed: true).
	Replayed bool
}

// RawResponse is an answer as it came, for Raw.
type RawResponse struct {
	Status int
	Header http.Header
	Body   []byte
}

// Raw sends a request with a body as is and returns the answer whatever
// its status; the error is only for a call that got no answer. It is for
// callers that pass JSON through (such as `sandboxd mcp`).
func (c *Client) Raw(ctx context.Context, method, path string, body []byte, opts ...CallOption) (*RawResponse, error) {
	resp, cl, err := c.send(ctx, method, path, nil, body, opts)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: reading the answer: %w", method, path, err)
	}
	cl.record(resp)
	return &RawResponse{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

func (cl *call) record(resp *http.Response) {
	if cl.meta != nil {
		*cl.meta = ResponseMeta{Status: resp.StatusCode, Header: resp.Header, RequestID: resp.Header.Get("X-Request-Id"),
			Replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
	}
}

// send makes one request; body nil sends none.
func (c *Client) send(ctx context.Context, method, path string, query url.Values, body []byte, opts []CallOption) (*http.Response, *call, error) {
	cl := &call{header: http.Header{}}
	for _, o := range opts {
		o(cl)
	}
	u := *c.base
	u.Path = strings.TrimRight(c.base.Path, "/") + path
	if len(query) > 0 {
		u.RawQuery = query.Encode()
	}
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), r)
	if err != nil {
		return nil, nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	for k, v := range cl.header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	return resp, cl, nil
}

// maxAnswer bounds what the client reads of an answer (an exec response
// with returned files can be large).
const maxAnswer = 256 << 20

// exchange sends a request (body nil: none), records its response for
// ResponseInto and reads the answer, up to maxAnswer bytes.
func (c *Client) exchange(ctx context.Context, method, path string, query url.Values, body []byte, opts []CallOption) (*http.Response, []byte, error) {
	resp, cl, err := c.send(ctx, method, path, query, body, opts)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	cl.record(resp)
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, nil, fmt.Errorf("client: %s %s: reading the answer: %w", method, path, err)
	}
	return resp, raw, nil
}

// do sends in as JSON (nil: no body) and decodes a 2xx answer into out
// (nil: discarded). Any other answer is an *Error.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any, opts []CallOption) error {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("client: %s %s: encoding the request: %w", method, path, err)
		}
		body = b
	}
	resp, raw, err := c.exchange(ctx, method, path, query, body, opts)
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return errorOf(resp, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("client: %s %s: decoding the answer (HTTP %d): %w", method, path, resp.StatusCode, err)
		}
	}
	return nil
}

// Exec runs code and waits for the result (POST /exec). The result is a
// run that started, whatever the code did: see res.Status. Refusals are
// *Error. req.Async must be false; use ExecAsync.
func (c *Client) Exec(ctx context.Context, req *api.ExecRequest, opts ...CallOption) (*api.ExecResponse, error) {
	if req == nil {
		return nil, errors.New("client: Exec: nil request")
	}
	if req.Async {
		return nil, errors.New("client: Exec: req.Async is set; use ExecAsync")
	}
	return decodeCall[api.ExecResponse](ctx, c, http.MethodPost, "/exec", nil, req, opts)
}

// ExecAsync starts a run in the background (POST /exec with async) and
// returns its state (queued); GetExec and WaitExec follow it.
func (c *Client) ExecAsync(ctx context.Context, req *api.ExecRequest, opts ...CallOption) (*api.ExecState, error) {
	if req == nil {
		return nil, errors.New("client: ExecAsync: nil request")
	}
	r := *req
	r.Async = true
	return decodeCall[api.ExecState](ctx, c, http.MethodPost, "/exec", nil, &r, opts)
}

// GetExec returns an exec's state (GET /exec/{id}).
func (c *Client) GetExec(ctx context.Context, id string, opts ...CallOption) (*api.ExecState, error) {
	return decodeCall[api.ExecState](ctx, c, http.MethodGet, "/exec/"+url.PathEscape(id), nil, nil, opts)
}

// CancelExec kills a queued or running exec and returns its final state
// (DELETE /exec/{id}); on an exec that has ended it changes nothing.
func (c *Client) CancelExec(ctx context.Context, id string, opts ...CallOption) (*api.ExecState, error) {
	return decodeCall[api.ExecState](ctx, c, http.MethodDelete, "/exec/"+url.PathEscape(id), nil, nil, opts)
}

// Done reports whether an exec state is final (not queued or running).
func Done(st *api.ExecState) bool {
	return st != nil && st.Status != "queued" && st.Status != "running"
}

// WaitExec polls an exec every interval (default 200 ms) until its state
// is final or ctx ends.
func (c *Client) WaitExec(ctx context.Context, id string, interval time.Duration, opts ...CallOption) (*api.ExecState, error) {
	if interval <= 0 {
		interval = 200 * time.Millisecond
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		st, err := c.GetExec(ctx, id, opts...)
		if err != nil || Done(st) {
			return st, err
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-t.C:
		}
	}
}

// Fetch reads a web page as safe, untrusted-marked text (POST /fetch).
// The page is res.Content, between markers that carry res.Nonce.
func (c *Client) Fetch(ctx context.Context, req *api.FetchRequest, opts ...CallOption) (*api.FetchResponse, error) {
	if req == nil {
		return nil, errors.New("client: Fetch: nil request")
	}
	return decodeCall[api.FetchResponse](ctx, c, http.MethodPost, "/fetch", nil, req, opts)
}

// SessionUsage reports a session's use against its budgets (GET
// /usage?session=). tenant "" is the key's own; another needs admin.
func (c *Client) SessionUsage(ctx context.Context, tenant, session string, opts ...CallOption) (*api.SessionUsageReport, error) {
	q := url.Values{"session": {session}}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	return decodeCall[api.SessionUsageReport](ctx, c, http.MethodGet, "/usage", q, nil, opts)
}

// TenantUsage reports a tenant's use today against its budgets (GET
// /usage?tenant=).
func (c *Client) TenantUsage(ctx context.Context, tenant string, opts ...CallOption) (*api.TenantUsageReport, error) {
	return decodeCall[api.TenantUsageReport](ctx, c, http.MethodGet, "/usage", url.Values{"tenant": {tenant}}, nil, opts)
}

// FreezeState returns the kill switch's state (GET /admin/freeze).
func (c *Client) FreezeState(ctx context.Context, opts ...CallOption) (*api.FreezeResponse, error) {
	return decodeCall[api.FreezeResponse](ctx, c, http.MethodGet, "/admin/freeze", nil, nil, opts)
}

// Freeze turns the kill switch on (POST /admin/freeze); req may be nil.
func (c *Client) Freeze(ctx context.Context, req *api.FreezeRequest, opts ...CallOption) (*api.FreezeResponse, error) {
	var in any
	if req != nil {
		in = req
	}
	return decodeCall[api.FreezeResponse](ctx, c, http.MethodPost, "/admin/freeze", nil, in, opts)
}

// Unfreeze lifts the kill switch (POST /admin/unfreeze).
func (c *Client) Unfreeze(ctx context.Context, opts ...CallOption) (*api.FreezeResponse, error) {
	return decodeCall[api.FreezeResponse](ctx, c, http.MethodPost, "/admin/unfreeze", nil, nil, opts)
}

// Profiles lists the exec and egress profiles (GET /profiles).
func (c *Client) Profiles(ctx context.Context, opts ...CallOption) (*api.ProfileList, error) {
	return decodeCall[api.ProfileList](ctx, c, http.MethodGet, "/profiles", nil, nil, opts)
}

// Profile returns one profile of either kind (GET /profiles/{name}).
func (c *Client) Profile(ctx context.Context, name string, opts ...CallOption) (*api.ProfileDetail, error) {
	return decodeCall[api.ProfileDetail](ctx, c, http.MethodGet, "/profiles/"+url.PathEscape(name), nil, nil, opts)
}

// Evaluate returns the decision an egress profile makes on a URL (POST
// /profiles/{name}/evaluate), without connecting anywhere.
func (c *Client) Evaluate(ctx context.Context, profile string, req *api.EvaluateRequest, opts ...CallOption) (*api.EvaluateResponse, error) {
	return decodeCall[api.EvaluateResponse](ctx, c, http.MethodPost, "/profiles/"+url.PathEscape(profile)+"/evaluate", nil, req, opts)
}

// ApprovalFilter selects approvals; zero values are the server's defaults
// (pending, every profile and host, all of them).
type ApprovalFilter struct {
	// Status is pending, approved, rejected, expired or all.
	Status  string
	Profile string
	Host    string
	Limit   int
}

// Approvals lists egress approval requests and decisions (GET /approvals).
func (c *Client) Approvals(ctx context.Context, f ApprovalFilter, opts ...CallOption) (*api.ApprovalList, error) {
	q := filterQuery(map[string]string{"status": f.Status, "profile": f.Profile, "host": f.Host}, f.Limit)
	return decodeCall[api.ApprovalList](ctx, c, http.MethodGet, "/approvals", q, nil, opts)
}

// Approval returns one approval request (GET /approvals/{id}).
func (c *Client) Approval(ctx context.Context, id string, opts ...CallOption) (*api.ApprovalView, error) {
	return decodeCall[api.ApprovalView](ctx, c, http.MethodGet, "/approvals/"+url.PathEscape(id), nil, nil, opts)
}

// DecideApproval approves (with a TTL) or rejects an approval request
// (POST /approvals/{id}).
func (c *Client) DecideApproval(ctx context.Context, id string, req *api.ApprovalDecisionRequest, opts ...CallOption) (*api.ApprovalView, error) {
	return decodeCall[api.ApprovalView](ctx, c, http.MethodPost, "/approvals/"+url.PathEscape(id), nil, req, opts)
}

// Audit lists audit records, newest first (GET /audit). Continue with
// f.Cursor = page.NextCursor until it is empty.
func (c *Client) Audit(ctx context.Context, f api.AuditQuery, opts ...CallOption) (*api.AuditPage, error) {
	return decodeCall[api.AuditPage](ctx, c, http.MethodGet, "/audit", f.Values(), nil, opts)
}

// AuditRecord returns one audit record (GET /audit/{id}).
func (c *Client) AuditRecord(ctx context.Context, id string, opts ...CallOption) (*api.AuditRecord, error) {
	return decodeCall[api.AuditRecord](ctx, c, http.MethodGet, "/audit/"+url.PathEscape(id), nil, nil, opts)
}

// CaptureFilter selects captures for Captures.
type CaptureFilter struct {
	Tenant string
	Kind   string
	Limit  int
	Cursor string
}

// Captures lists capture metadata, newest first (GET /captures).
func (c *Client) Captures(ctx context.Context, f CaptureFilter, opts ...CallOption) (*api.CapturePage, error) {
	q := filterQuery(map[string]string{"tenant": f.Tenant, "kind": f.Kind, "cursor": f.Cursor}, f.Limit)
	return decodeCall[api.CapturePage](ctx, c, http.MethodGet, "/captures", q, nil, opts)
}

// Capture returns a capture's metadata and its text parts (GET
// /captures/{id}).
func (c *Client) Capture(ctx context.Context, id string, opts ...CallOption) (*api.CaptureView, error) {
	return decodeCall[api.CaptureView](ctx, c, http.MethodGet, "/captures/"+url.PathEscape(id), nil, nil, opts)
}

// CaptureRaw returns one part's bytes (GET /captures/{id}/raw); part ""
// is the raw body.
func (c *Client) CaptureRaw(ctx context.Context, id, part string, opts ...CallOption) ([]byte, error) {
	var q url.Values
	if part != "" {
		q = url.Values{"part": {part}}
	}
	return c.bytes(ctx, "/captures/"+url.PathEscape(id)+"/raw", q, opts)
}

// EraseCapture erases a capture's content, keeping its tombstone (DELETE
// /captures/{id}); reason goes into the audit log.
func (c *Client) EraseCapture(ctx context.Context, id, reason string, opts ...CallOption) (*api.Capture, error) {
	return decodeCall[api.Capture](ctx, c, http.MethodDelete, "/captures/"+url.PathEscape(id), nil, &api.CaptureAction{Reason: reason}, opts)
}

// HoldCapture places (on) or lifts a legal hold on a capture (POST
// /captures/{id}/hold).
func (c *Client) HoldCapture(ctx context.Context, id string, on bool, reason string, opts ...CallOption) (*api.Capture, error) {
	return decodeCall[api.Capture](ctx, c, http.MethodPost, "/captures/"+url.PathEscape(id)+"/hold", nil, &api.CaptureAction{On: &on, Reason: reason}, opts)
}

// TenantHold is the answer of HoldTenant.
type TenantHold struct {
	Tenant string `json:"tenant"`
	Hold   bool   `json:"hold"`
}

// HoldTenant places (on) or lifts a legal hold on all of a tenant's
// captures (POST /holds/{tenant}).
func (c *Client) HoldTenant(ctx context.Context, tenant string, on bool, reason string, opts ...CallOption) (*TenantHold, error) {
	return decodeCall[TenantHold](ctx, c, http.MethodPost, "/holds/"+url.PathEscape(tenant), nil, &api.CaptureAction{On: &on, Reason: reason}, opts)
}

// Healthz checks that the process is alive (GET /healthz).
func (c *Client) Healthz(ctx context.Context, opts ...CallOption) error {
	return c.do(ctx, http.MethodGet, "/healthz", nil, nil, nil, opts)
}

// Readiness is the body of GET /readyz.
type Readiness struct {
	Status              string           `json:"status"`
	Checks              []api.ReadyCheck `json:"checks"`
	UnavailableProfiles []string         `json:"unavailable_profiles"`
}

// Ready reports whether the service is ready.
func (r *Readiness) Ready() bool { return r != nil && r.Status == "ready" }

// CodeNotReady is the Code of the *Error Readyz returns with a 503.
const CodeNotReady = "NOT_READY"

// Readyz checks readiness (GET /readyz). When the service is not ready it
// returns the checks and an *Error with Status 503 and Code NOT_READY
// naming the failed checks.
func (c *Client) Readyz(ctx context.Context, opts ...CallOption) (*Readiness, error) {
	resp, raw, err := c.exchange(ctx, http.MethodGet, "/readyz", nil, nil, opts)
	if err != nil {
		return nil, err
	}
	var r Readiness
	if jerr := json.Unmarshal(raw, &r); jerr != nil || r.Status == "" {
		if resp.StatusCode != http.StatusOK {
			return nil, errorOf(resp, raw)
		}
		return nil, fmt.Errorf("client: GET /readyz: decoding the answer: %v", jerr)
	}
	if resp.StatusCode == http.StatusOK {
		return &r, nil
	}
	var failed []string
	for _, ch := range r.Checks {
		if !ch.OK && !ch.Optional {
			failed = append(failed, ch.Name+": "+ch.Error)
		}
	}
	return &r, &Error{Status: resp.StatusCode, Code: CodeNotReady, Message: "not ready: " + strings.Join(failed, "; "),
		RequestID: resp.Header.Get("X-Request-Id"), Body: raw}
}

// Tools returns the run_python and fetch_url definitions, {name,
// description, input_schema} (GET /tools).
func (c *Client) Tools(ctx context.Context, opts ...CallOption) ([]api.ToolDefinition, error) {
	var out api.ToolList
	if err := c.do(ctx, http.MethodGet, "/tools", nil, nil, &out, opts); err != nil {
		return nil, err
	}
	return out.Tools, nil
}

// ToolsJSON returns GET /tools?format= as sent: format is generic,
// anthropic, openai or mcp.
func (c *Client) ToolsJSON(ctx context.Context, format string, opts ...CallOption) (json.RawMessage, error) {
	var out json.RawMessage
	if err := c.do(ctx, http.MethodGet, "/tools", url.Values{"format": {format}}, nil, &out, opts); err != nil {
		return nil, err
	}
	return out, nil
}

// OpenAPI returns the OpenAPI 3.1 document of the API (GET /openapi.yaml).
func (c *Client) OpenAPI(ctx context.Context, opts ...CallOption) ([]byte, error) {
	return c.bytes(ctx, "/openapi.yaml", nil, opts)
}

// Metrics returns the Prometheus metrics text (GET /metrics).
func (c *Client) Metrics(ctx context.Context, opts ...CallOption) (string, error) {
	b, err := c.bytes(ctx, "/metrics", nil, opts)
	return string(b), err
}

// bytes GETs a non-JSON answer.
func (c *Client) bytes(ctx context.Context, path string, q url.Values, opts []CallOption) ([]byte, error) {
	resp, raw, err := c.exchange(ctx, http.MethodGet, path, q, nil, opts)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, errorOf(resp, raw)
	}
	return raw, nil
}

// filterQuery is a list filter as a query: the fields that are set, and
// limit when above 0.
func filterQuery(fields map[string]string, limit int) url.Values {
	q := url.Values{}
	for name, v := range fields {
		if v != "" {
			q.Set(name, v)
		}
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return q
}

// decodeCall does one request and decodes the answer into a new T.
func decodeCall[T any](ctx context.Context, c *Client, method, path string, q url.Values, body any, opts []CallOption) (*T, error) {
	var out T
	if err := c.do(ctx, method, path, q, body, &out, opts); err != nil {
		return nil, err
	}
	return &out, nil
}
