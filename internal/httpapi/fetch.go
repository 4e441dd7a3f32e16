package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/andybalholm/cascadia"
	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/browse"
	"github.com/sandboxd/sandboxd/browse/safetext"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/control/budget"
	"github.com/sandboxd/sandboxd/internal/dataset"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/redact"
)

// Request field limits.
const (
	maxFetchURLLen  = 8 << 10
	maxSelectorLen  = 1 << 10
	fetchMaxOutput  = 1 << 20
	fetchTitleLimit = 300
)

// fetchJob is one fetch on its way through the control plane.
type fetchJob struct {
	key           *auth.Key
	session       string
	idemKey       string
	id            string
	req           api.FetchRequest
	profile       *egress.Profile
	call, reqHash string
	requestID     string
	log           *slog.Logger
	meta          auditMeta
	started       time.Time
}

func (s *Server) fetchRoutes(e *echo.Echo) {
	e.POST("/fetch", s.fetch, s.authenticate(auth.RoleAgent))
}

func (s *Server) fetch(c echo.Context) error {
	var req api.FetchRequest
	tc, err := s.startCall(c, budget.KindFetch, &req)
	if err != nil {
		return err
	}
	key, session, idemKey := tc.key, tc.session, tc.idemKey
	p, err := s.checkFetch(&req, key)
	if err != nil {
		return err
	}
	c.Set(ctxProfile, p.Name)
	id := "f_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	rid, _ := c.Get(ctxRequestID).(string)
	j := &fetchJob{key: key, session: session, idemKey: idemKey, id: id, req: req, profile: p, requestID: rid,
		log: requestLogger(c, s.log).With("egress_profile", p.Name, "fetch_id", id)}
	if session != "" {
		j.log = j.log.With("session", session)
	}
	j.call, j.reqHash = fetchFingerprints(&req, session)
	j.meta, j.started = metaOf(c), time.Now()
	j.meta.session = session
	if idemKey != "" {
		j.log = j.log.With("idempotency_key_sha256", shortHash(idemKey))
		ic := &idemCall{kind: "fetch", tenant: key.Tenant, key: idemKey, reqHash: j.reqHash, id: id, log: j.log}
		return s.idempotent(c, ic, func() *answer { return s.runFetch(c, j) })
	}
	return s.send(c, s.runFetch(c, j))
}

// checkFetch validates the request, fills in defaults, and returns the
// egress profile it runs under.
func (s *Server) checkFetch(req *api.FetchRequest, key *auth.Key) (*egress.Profile, error) {
	switch {
	case req.URL == "":
		return nil, validation("url", "url is required: the absolute http or https URL to fetch")
	case len(req.URL) > maxFetchURLLen:
		return nil, validation("url", "url is %d bytes long; at most %d are accepted", len(req.URL), maxFetchURLLen)
	case req.MaxBytes < 0:
		return nil, validation("max_bytes", "max_bytes must be positive (or omitted for the profile's cap), not %d", req.MaxBytes)
	case len(req.Selector) > maxSelectorLen:
		return nil, validation("selector", "selector is %d bytes long; at most %d are accepted", len(req.Selector), maxSelectorLen)
	}
	if req.Format == "" {
		req.Format = "text"
	}
	if req.Format != "text" && req.Format != "markdown" {
		return nil, validation("format", "format %q is not known; use text or markdown", req.Format)
	}
	if req.Links == "" {
		req.Links = "text"
	}
	if !slices.Contains([]string{"none", "text", "full"}, req.Links) {
		return nil, validation("links", "links %q is not known; use none, text or full", req.Links)
	}
	if req.Selector != "" {
		if _, err := cascadia.ParseGroup(req.Selector); err != nil {
			return nil, validation("selector", "selector %q is not a valid CSS selector: %v", req.Selector, err)
		}
	}
	set := s.profiles()
	name := req.Profile
	if name == "" {
		name = s.ctl.limits.Limits(key.Tenant).FetchProfile
		if name == "" {
			return nil, validation("profile", "profile is required: name an egress profile (%s); a tenant's fetch_profile in the tenants file makes it optional", strings.Join(set.EgressNames(), ", "))
		}
		req.Profile = name
	}
	p := set.Egress[name]
	if p == nil {
		return nil, validation("profile", "egress profile %q does not exist; the profiles are: %s", name, strings.Join(set.EgressNames(), ", "))
	}
	return p, nil
}

// fetchFingerprints returns the loop guard's fingerprint of the fetch (the
// URL and how it is read) and the idempotency fingerprint of the request.
func fetchFingerprints(req *api.FetchRequest, session string) (call, request string) {
	b, _ := json.Marshal(req)
	h := sha256.Sum256(append([]byte("fetch|"), b...))
	call = hex.EncodeToString(h[:])
	h = sha256.Sum256([]byte(call + "|session=" + session))
	return call, hex.EncodeToString(h[:])
}

// runFetch runs a checked fetch and writes its audit record before the
// answer goes out; every outcome is an answer.
func (s *Server) runFetch(c echo.Context, j *fetchJob) *answer {
	o := s.fetchOnce(c, j)
	return s.auditFetch(j, o.res, o.a, o.resp, o.captureID)
}

// fetchOutcome is what fetchOnce did.
type fetchOutcome struct {
	a         *answer
	res       *browse.Result
	resp      *api.FetchResponse
	captureID string
}

func (s *Server) fetchOnce(c echo.Context, j *fetchJob) (o fetchOutcome) {
	m := s.ctl.metrics
	if st := s.ctl.frozen.Load(); st.Frozen {
		o.a = errAnswer(s.refusal(&api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeFrozen,
			Message: fmt.Sprintf("sandboxd is frozen by an operator (since %s, by %s%s): no fetch runs until it is unfrozen", st.Since.Format(time.RFC3339), st.By, reasonSuffix(st.Reason))}))
		return o
	}
	tenant := j.key.Tenant
	lim := s.ctl.limits.Limits(tenant)
	guardKey := tenant + "\x00" + j.session
	if j.session != "" {
		if refuse, n := s.ctl.guard.Check(guardKey, j.call, lim.LoopRepeats); refuse {
			o.a = errAnswer(s.refusal(&api.Error{Status: http.StatusConflict, Code: api.CodeLoopDetected,
				Message: fmt.Sprintf("session %s fetched this same URL the same way %d times in a row and got the same page each time; fetching it again will not change it. Use what you have, or fetch a different page", j.session, n)}))
			return o
		}
	}
	ctx := c.Request().Context()
	allowance, r, err := s.ctl.limits.FetchAllowance(ctx, tenant, j.session)
	if err != nil {
		j.log.Error("budget check failed", "err", err)
		o.a = errAnswer(&api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the usage store failed; retry later"})
		return o
	}
	if r != nil {
		o.a = errAnswer(s.budgetError(r))
		return o
	}
	maxBytes := j.req.MaxBytes
	if allowance >= 0 && (maxBytes == 0 || allowance < maxBytes) {
		maxBytes = allowance
	}

	// A keyed fetch outlives its request, so that a retry finds its answer;
	// shutdown ends every fetch.
	parent := ctx
	if j.idemKey != "" {
		parent = context.WithoutCancel(ctx)
	}
	fctx, cancel := context.WithCancelCause(parent)
	s.runs.Add(1)
	stop := context.AfterFunc(s.runCtx, func() { cancel(context.Cause(s.runCtx)) })
	defer func() { stop(); cancel(nil); s.runs.Done() }()

	begin := time.Now()
	res, err := s.fetcher.Fetch(fctx, browse.Request{URL: j.req.URL, Profile: j.profile, MaxBytes: maxBytes, Client: j.id, Tenant: tenant, KeyID: j.key.ID})
	if res != nil && res.BytesReceived > 0 {
		s.ctl.limits.ChargeFetch(context.WithoutCancel(ctx), tenant, j.session, res.BytesReceived)
	}
	m.FetchSeconds.Observe(time.Since(begin).Seconds())
	o.res = res
	if err != nil {
		var fe *browse.Error
		if !errors.As(err, &fe) {
			j.log.Error("fetch failed", "err", err)
			m.Fetches.WithLabelValues(j.profile.Name, "internal").Inc()
			o.a = errAnswer(&api.Error{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: "internal error; the request id in X-Request-Id helps the operator find it in the log"})
			return o
		}
		m.Fetches.WithLabelValues(j.profile.Name, strings.ToLower(fe.Code)).Inc()
		e := &api.Error{Status: fe.Status, Code: fe.Code, Message: redactString(s.redactor(j.profile), fe.Message)}
		if fe.Code == browse.CodeBadURL {
			e.Field = "url"
		}
		if fe.Code == browse.CodeUnsupported {
			e.ContentType = fe.ContentType
			size := fe.Size
			e.Size = &size
		}
		hops := 0
		if res != nil {
			hops = len(res.Hops)
		}
		j.log.Info("fetch refused", "code", fe.Code, "hops", hops)
		a := errAnswer(e)
		// Once a request went upstream, a keyed retry gets this answer
		// rather than fetching again.
		a.keep = res != nil && len(res.Hops) > 0 && res.Hops[0].Decision.Allow
		o.a = a
		return o
	}

	resp, capt, err := s.fetchResponse(j, res)
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) {
			o.a = errAnswer(ae)
			return o
		}
		j.log.Error("storing the fetch capture failed", "err", err)
		m.Fetches.WithLabelValues(j.profile.Name, "failed").Inc()
		o.a = errAnswer(&api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the capture store failed, so the page is not returned (every returned page is captured for review); retry later"})
		o.a.keep = true // the page was fetched: a keyed retry does not fetch it again
		return o
	}
	m.Fetches.WithLabelValues(j.profile.Name, "ok").Inc()
	for typ, n := range resp.Redactions {
		m.Redactions.WithLabelValues(typ).Add(float64(n))
	}
	if j.session != "" {
		h := sha256.Sum256([]byte(fmt.Sprintf("%d|%s|%s", resp.Status, resp.FinalURL, capt)))
		s.ctl.guard.Record(guardKey, j.call, hex.EncodeToString(h[:]))
	}
	j.log.Info("fetch done", "status", resp.Status, "hops", len(res.Hops), "bytes_received", res.BytesReceived,
		"content_type", res.MediaType, "truncated", resp.Truncated, "capture_id", resp.CaptureID, "redactions", redact.Counts(resp.Redactions).Total())
	o.resp, o.captureID = resp, resp.CaptureID
	o.a = &answer{status: http.StatusOK, body: marshalLine(resp), keep: true}
	return o
}

// fetchResponse turns a fetched body into the safe, redacted, wrapped
// answer and stores the capture. It returns the content's sha256 for the
// loop guard.
func (s *Server) fetchResponse(j *fetchJob, res *browse.Result) (*api.FetchResponse, string, error) {
	var text, title string
	truncated := res.Truncated
	switch res.Kind {
	case browse.KindHTML:
		base, _ := url.Parse(res.FinalURL)
		page, err := safetext.HTML(bytes.NewReader(res.Body), safetext.Options{Format: j.req.Format, Links: j.req.Links, Selector: j.req.Selector, BaseURL: base, MaxOutput: fetchMaxOutput})
		if err != nil {
			return nil, "", validation("selector", "%v", err)
		}
		text, title, truncated = page.Text, page.Title, truncated || page.Truncated
	default:
		var cut bool
		text, cut = safetext.Text(string(res.Body), fetchMaxOutput)
		truncated = truncated || cut
	}
	rd := s.redactor(j.profile)
	counts := redact.Counts{}
	red := func(v string) string {
		out, n := rd.String(v)
		counts.Add(n)
		return out
	}
	text, title = red(text), red(title)
	if len(title) > fetchTitleLimit {
		title = safetext.Clean(title[:fetchTitleLimit])
	}
	finalURL := red(res.FinalURL)
	redirects := make([]string, len(res.Redirects))
	for i, r := range res.Redirects {
		redirects[i] = red(r)
	}
	wrapped, nonce := safetext.Wrap(text, finalURL)
	sum := sha256.Sum256([]byte(text))

	resp := &api.FetchResponse{ID: j.id, URL: red(j.req.URL), FinalURL: finalURL, Redirects: redirects, Status: res.Status,
		ContentType: res.ContentType, Title: title, Content: wrapped, Nonce: nonce, Untrusted: true, Truncated: truncated,
		BytesReceived: res.BytesReceived, Redactions: map[string]int(counts), Profile: api.ProfileRef{Name: j.profile.Name, Version: j.profile.Version}}
	if resp.Redactions == nil {
		resp.Redactions = map[string]int{}
	}

	capt := &capture.Capture{Kind: "fetch", Tenant: j.key.Tenant, KeyID: j.key.ID, RequestID: j.requestID, Retention: days(j.profile.CaptureRetentionDays),
		Meta: map[string]string{
			"fetch_id": j.id, "url": j.req.URL, "final_url": res.FinalURL, "status": fmt.Sprint(res.Status),
			"content_type": res.ContentType, "charset": res.Charset, "egress_profile": j.profile.Name,
			"egress_profile_version": j.profile.Version, "session": j.session, "hops": hopSummary(res.Hops),
			"content_sha256": hex.EncodeToString(sum[:]),
		},
		Parts: []capture.Part{
			{Name: "raw", ContentType: "application/octet-stream", Data: res.Raw},
			{Name: "headers", ContentType: "text/plain", Data: headerBlock(res)},
			{Name: "returned.json", ContentType: "application/json", Data: marshalLine(resp)},
		}}
	if err := s.captures.Put(context.Background(), capt); err != nil {
		return nil, "", err
	}
	resp.CaptureID = capt.ID
	return resp, hex.EncodeToString(sum[:]), nil
}

// hopSummary lists each hop's URL, verdict, address and status for the
// capture's metadata.
func hopSummary(hops []browse.Hop) string {
	parts := make([]string, len(hops))
	for i, h := range hops {
		ip := ""
		if h.Decision.Dial.IsValid() {
			ip = h.Decision.Dial.String()
		}
		parts[i] = fmt.Sprintf("%s %s %s %s %d", h.URL, h.Decision.Verdict(), h.Decision.Rule, ip, h.Status)
	}
	return strings.Join(parts, "\n")
}

// headerBlock renders the final response's status line and headers.
func headerBlock(res *browse.Result) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP %d %s\r\n", res.Status, http.StatusText(res.Status))
	names := make([]string, 0, len(res.Header))
	for k := range res.Header {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		for _, v := range res.Header[k] {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	return b.Bytes()
}

func redactString(r *redact.Redactor, v string) string {
	out, _ := r.String(v)
	return out
}

// redactor returns the redactor for an egress profile: the built-in rules
// and the profile's own (redact:), compiled once per profile version.
func (s *Server) redactor(p *egress.Profile) *redact.Redactor {
	if p == nil || len(p.Redact) == 0 {
		return redact.Default()
	}
	return s.cachedRedactor("egress:"+p.Version, p.Name, p.Redact)
}

func (s *Server) cachedRedactor(key, profile string, rules []redact.Rule) *redact.Redactor {
	s.redactMu.Lock()
	defer s.redactMu.Unlock()
	if r, ok := s.redactors[key]; ok {
		return r
	}
	r, err := redact.New(rules)
	if err != nil {
		// The loader validated the rules; fall back to the built-ins.
		s.log.Error("a profile's redact rules do not compile; using the built-in rules", "profile", profile, "err", err)
		r = redact.Default()
	}
	if len(s.redactors) > 64 {
		clear(s.redactors)
	}
	s.redactors[key] = r
	return r
}

// execRedactor returns the redactor for an exec profile: the built-in
// rules and the profile's own, compiled once per profile version.
func (s *Server) execRedactor(p *profiles.Exec) *redact.Redactor {
	if len(p.Redact) == 0 {
		return redact.Default()
	}
	return s.cachedRedactor("exec:"+p.Version, p.Name, p.Redact)
}

// initFetch sets up POST /fetch: the fetcher, the capture store and the
// audit log.
func (s *Server) initFetch() {
	s.snapshots = dataset.NewRegistry()
	s.audit = s.cfg.Audit
	if s.audit == nil {
		l, err := audit.Open("")
		if err != nil {
			panic("api: opening an in-memory audit log: " + err.Error())
		}
		s.audit, s.ownsAudit = l, true
	}
	s.redactors = map[string]*redact.Redactor{}
	s.fetcher = s.cfg.Fetcher
	if s.fetcher == nil {
		s.fetcher = &browse.Fetcher{Checker: &egress.Checker{Resolver: s.cfg.Resolver, Approvals: s.approvals}, Log: s.log, UserAgent: "sandboxd/" + s.cfg.Version}
	}
	s.captures = s.cfg.Captures
	if s.captures == nil {
		fs, err := capture.OpenFS(filepath.Join(s.cfg.DataDir, "captures"))
		if err != nil {
			s.log.Error("the capture store cannot be opened; POST /fetch answers 503 until it can", "err", err)
			s.captures = brokenStore{err}
			return
		}
		s.captures = fs
	}
}

// brokenStore fails every call: fetches are refused rather than returned
// without their capture.
type brokenStore struct{ err error }

func (b brokenStore) Put(context.Context, *capture.Capture) error { return b.err }
func (b brokenStore) Get(context.Context, string) (*capture.Capture, error) {
	return nil, b.err
}
func (b brokenStore) Delete(context.Context, string) error { return b.err }
