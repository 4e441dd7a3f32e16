// Package fetchflow is POST /fetch's orchestration: the request is checked
// against its egress profile, admitted by the control plane (kill switch,
// loop guard, fetched-bytes budgets), fetched hop by hop through the
// egress decisions (package browse), turned into safe text (browse/safetext),
// redacted, wrapped in the untrusted-content envelope, captured and audited
// before the answer leaves.
package fetchflow

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
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/andybalholm/cascadia"
	"github.com/google/uuid"
	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/browse"
	"github.com/sandboxd/sandboxd/browse/safetext"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/internal/outputs"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/redact"
)

// Config configures the flow; every field but Log is required.
type Config struct {
	Plane    *control.Plane
	Fetcher  *browse.Fetcher
	Captures capture.Store
	Profiles *atomic.Pointer[profiles.Set]
	// Redactors compiles each egress profile's redact rules once.
	Redactors *redact.Cache
	// Secrets are the secrets the egress proxy injects (nil: none): their
	// values are redacted from fetched pages too (a page may echo one).
	Secrets *secrets.Store
	// Runs counts fetches as running, so that shutdown waits for them and
	// ends them (the exec flow's Track).
	Runs interface {
		Track(ctx context.Context) (context.Context, func())
	}
	Log *slog.Logger
	// Browser runs browser sandboxes, for render: true and PDFs; without
	// a runner they answer 503 UNAVAILABLE.
	Browser BrowserConfig
}

// Flow runs fetches.
type Flow struct {
	cfg   Config
	plane *control.Plane
	rend  *renderer // render.go; nil without a browser runner
}

// New returns a flow.
func New(cfg Config) (*Flow, error) {
	if cfg.Plane == nil || cfg.Fetcher == nil || cfg.Captures == nil || cfg.Profiles == nil || cfg.Redactors == nil || cfg.Runs == nil {
		return nil, errors.New("fetchflow: the plane, fetcher, capture store, profiles, redactor cache and run tracker are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	f := &Flow{cfg: cfg, plane: cfg.Plane}
	if cfg.Browser.Runner != nil {
		r, err := newRenderer(cfg.Browser, cfg.Fetcher.Checker, cfg.Fetcher.Log)
		if err != nil {
			return nil, err
		}
		f.rend = r
	}
	return f, nil
}

// Call is one POST /fetch.
type Call struct {
	Key     *auth.Key
	Session string // X-Session-Id
	IdemKey string
	Req     *api.FetchRequest
	Who     audit.Who
	Log     *slog.Logger
	// Profile learns the egress profile's name once it is known (for the
	// access log).
	Profile func(name string)
}

// Fetch checks, admits, fetches, captures and audits one fetch; every
// outcome but a bad request is an answer.
func (f *Flow) Fetch(ctx context.Context, call *Call) (*control.Answer, error) {
	req := *call.Req
	p, err := f.check(&req, call.Key)
	if err != nil {
		return nil, err
	}
	if call.Profile != nil {
		call.Profile(p.Name)
	}
	id := "f_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	j := &fetchJob{key: call.Key, session: call.Session, idemKey: call.IdemKey, id: id, req: req, profile: p, requestID: call.Who.RequestID,
		log: call.Log.With("egress_profile", p.Name, "fetch_id", id)}
	if j.session != "" {
		j.log = j.log.With("session", j.session)
	}
	j.call, j.reqHash = fetchFingerprints(&req, j.session)
	j.who, j.started = call.Who, time.Now()
	j.who.Session = j.session
	if j.idemKey != "" {
		j.log = j.log.With("idempotency_key_sha256", control.ShortHash(j.idemKey))
		ic := &control.IdemCall{Kind: "fetch", Tenant: j.key.Tenant, Key: j.idemKey, ReqHash: j.reqHash, ID: id, Log: j.log}
		return f.plane.Idempotent(ctx, ic, func() *control.Answer { return f.run(ctx, j) }), nil
	}
	return f.run(ctx, j), nil
}

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
	who           audit.Who
	started       time.Time
	// render is the browser sandbox's report of a rendered fetch (nil:
	// not rendered); pdf the text of a PDF.
	render *renderOutcome
	pdf    *jobproto.PDFReport
}

// check validates the request, fills in defaults, and returns the
// egress profile it runs under.
func (f *Flow) check(req *api.FetchRequest, key *auth.Key) (*egress.Profile, error) {
	switch {
	case req.URL == "":
		return nil, api.Validation("url", "url is required: the absolute http or https URL to fetch")
	case len(req.URL) > maxFetchURLLen:
		return nil, api.Validation("url", "url is %d bytes long; at most %d are accepted", len(req.URL), maxFetchURLLen)
	case req.MaxBytes < 0:
		return nil, api.Validation("max_bytes", "max_bytes must be positive (or omitted for the profile's cap), not %d", req.MaxBytes)
	case len(req.Selector) > maxSelectorLen:
		return nil, api.Validation("selector", "selector is %d bytes long; at most %d are accepted", len(req.Selector), maxSelectorLen)
	}
	if req.Format == "" {
		req.Format = "text"
	}
	if req.Format != "text" && req.Format != "markdown" {
		return nil, api.Validation("format", "format %q is not known; use text or markdown", req.Format)
	}
	if req.Links == "" {
		req.Links = "text"
	}
	if !slices.Contains([]string{"none", "text", "full"}, req.Links) {
		return nil, api.Validation("links", "links %q is not known; use none, text or full", req.Links)
	}
	if req.Selector != "" {
		if _, err := cascadia.ParseGroup(req.Selector); err != nil {
			return nil, api.Validation("selector", "selector %q is not a valid CSS selector: %v", req.Selector, err)
		}
	}
	switch req.Content {
	case "", api.ContentFull:
		// The default; left empty so that it fingerprints as omitted.
		req.Content = ""
	case api.ContentMain:
		if req.Selector != "" {
			return nil, api.Validation("content", "content \"main\" cannot be combined with selector: the selector already chooses what is returned; drop one of them")
		}
	default:
		return nil, api.Validation("content", "content %q is not known; use full (the whole page) or main (only its main content)", req.Content)
	}
	set := f.cfg.Profiles.Load()
	name := req.Profile
	if name == "" {
		name = f.plane.Limits().Limits(key.Tenant).FetchProfile
		if name == "" {
			return nil, api.Validation("profile", "profile is required: name an egress profile (%s); a tenant's fetch_profile in the tenants file makes it optional", strings.Join(set.EgressNames(), ", "))
		}
		req.Profile = name
	}
	p := set.Egress[name]
	if p == nil {
		return nil, api.Validation("profile", "egress profile %q does not exist; the profiles are: %s", name, strings.Join(set.EgressNames(), ", "))
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

// run runs a checked fetch and writes its audit record before the
// answer goes out; every outcome is an answer.
func (f *Flow) run(ctx context.Context, j *fetchJob) *control.Answer {
	o := f.fetchOnce(ctx, j)
	return f.audit(j, o.res, o.a, o.resp, o.captureID)
}

// fetchOutcome is what fetchOnce did.
type fetchOutcome struct {
	a         *control.Answer
	res       *browse.Result
	resp      *api.FetchResponse
	captureID string
}

func (f *Flow) fetchOnce(ctx context.Context, j *fetchJob) (o fetchOutcome) {
	m := f.plane.Metrics()
	if f.plane.Frozen() {
		o.a = control.ErrAnswer(f.plane.FrozenError("no fetch runs"))
		return o
	}
	tenant := j.key.Tenant
	lim := f.plane.Limits().Limits(tenant)
	guardKey := tenant + "\x00" + j.session
	if j.session != "" {
		refuse, n, err := f.plane.Guard().Check(ctx, guardKey, j.call, lim.LoopRepeats)
		if err != nil {
			j.log.Error("loop guard check failed", "err", err)
			o.a = control.ErrAnswer(control.StoreFailed())
			return o
		}
		if refuse {
			o.a = control.ErrAnswer(f.plane.Refusal(&api.Error{Status: http.StatusConflict, Code: api.CodeLoopDetected,
				Message: fmt.Sprintf("session %s fetched this same URL the same way %d times in a row and got the same page each time; fetching it again will not change it. Use what you have, or fetch a different page", j.session, n)}))
			return o
		}
	}
	allowance, r, err := f.plane.Limits().FetchAllowance(ctx, tenant, j.session)
	if err != nil {
		j.log.Error("budget check failed", "err", err)
		o.a = control.ErrAnswer(control.StoreFailed())
		return o
	}
	if r != nil {
		o.a = control.ErrAnswer(f.plane.BudgetError(r))
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
	fctx, done := f.cfg.Runs.Track(parent)
	defer done()

	begin := time.Now()
	var res *browse.Result
	if wantsRender(&j.req, j.profile) {
		capBytes := j.profile.RenderMaxBytes()
		if maxBytes > 0 && maxBytes < capBytes {
			capBytes = maxBytes
		}
		res, j.render, err = f.render(fctx, j, capBytes) // render.go
		if j.render != nil && j.render.res != nil && j.render.res.DownBytes > 0 {
			f.plane.Limits().ChargeFetch(context.WithoutCancel(ctx), tenant, j.session, j.render.res.DownBytes)
		}
	} else {
		res, err = f.cfg.Fetcher.Fetch(fctx, browse.Request{URL: j.req.URL, Profile: j.profile, MaxBytes: maxBytes, Client: j.id, Tenant: tenant, KeyID: j.key.ID})
		if res != nil && res.BytesReceived > 0 {
			f.plane.Limits().ChargeFetch(context.WithoutCancel(ctx), tenant, j.session, res.BytesReceived)
		}
		if err == nil && res.Kind == browse.KindPDF {
			j.pdf, err = f.readPDF(fctx, j, res) // render.go: in a browser sandbox
		}
	}
	m.FetchSeconds.Observe(time.Since(begin).Seconds())
	o.res = res
	var ae *api.Error
	if errors.As(err, &ae) {
		m.Fetches.WithLabelValues(j.profile.Name, strings.ToLower(ae.Code)).Inc()
		e := *ae
		e.Message = redactString(f.redactor(j.profile), e.Message)
		j.log.Info("fetch refused", "code", e.Code, "rendered", j.render != nil)
		a := control.ErrAnswer(&e)
		a.Keep = j.render != nil || res != nil
		o.a = a
		return o
	}
	if err != nil {
		var fe *browse.Error
		if !errors.As(err, &fe) {
			j.log.Error("fetch failed", "err", err)
			m.Fetches.WithLabelValues(j.profile.Name, "internal").Inc()
			o.a = control.ErrAnswer(control.Internal())
			return o
		}
		m.Fetches.WithLabelValues(j.profile.Name, strings.ToLower(fe.Code)).Inc()
		e := &api.Error{Status: fe.Status, Code: fe.Code, Message: redactString(f.redactor(j.profile), fe.Message)}
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
		a := control.ErrAnswer(e)
		// Once a request went upstream, a keyed retry gets this answer
		// rather than fetching again.
		a.Keep = res != nil && len(res.Hops) > 0 && res.Hops[0].Decision.Allow
		o.a = a
		return o
	}

	resp, capt, err := f.fetchResponse(j, res)
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) {
			o.a = control.ErrAnswer(ae)
			return o
		}
		j.log.Error("storing the fetch capture failed", "err", err)
		m.Fetches.WithLabelValues(j.profile.Name, "failed").Inc()
		o.a = control.ErrAnswer(control.Unavailable("the capture store failed, so the page is not returned (every returned page is captured for review); retry later"))
		o.a.Keep = true // the page was fetched: a keyed retry does not fetch it again
		return o
	}
	m.Fetches.WithLabelValues(j.profile.Name, "ok").Inc()
	for typ, n := range resp.Redactions {
		m.Redactions.WithLabelValues(typ).Add(float64(n))
	}
	if j.session != "" {
		h := sha256.Sum256([]byte(fmt.Sprintf("%d|%s|%s", resp.Status, resp.FinalURL, capt)))
		if err := f.plane.Guard().Record(context.WithoutCancel(ctx), guardKey, j.call, hex.EncodeToString(h[:])); err != nil {
			j.log.Error("recording the fetch for the loop guard failed", "err", err)
		}
	}
	j.log.Info("fetch done", "status", resp.Status, "hops", len(res.Hops), "bytes_received", res.BytesReceived,
		"content_type", res.MediaType, "truncated", resp.Truncated, "capture_id", resp.CaptureID, "redactions", redact.Counts(resp.Redactions).Total())
	o.resp, o.captureID = resp, resp.CaptureID
	o.a = control.JSONAnswer(resp)
	return o
}

// fetchResponse turns a fetched body into the safe, redacted, wrapped
// answer and stores the capture. It returns the content's sha256 for the
// loop guard.
func (f *Flow) fetchResponse(j *fetchJob, res *browse.Result) (*api.FetchResponse, string, error) {
	var text, title string
	var warnings []api.FetchWarning
	if res.Truncated && j.render == nil {
		warnings = append(warnings, api.FetchWarning{Code: api.WarnTruncated, Message: truncationMessage(j, res)})
	}
	truncated, outputCut := res.Truncated, false
	mode, omitted := api.ContentFull, 0
	pages := 0
	if j.render != nil {
		pg := j.render.res.Report.Page
		if pg.TimedOut {
			warnings = append(warnings, api.FetchWarning{Code: api.WarnRenderTimeout,
				Message: fmt.Sprintf("the page had not finished loading at the render's time limit of %s; content is what it showed then", j.profile.RenderTimeout())})
		}
		if j.render.res.CapHit {
			truncated = true
			warnings = append(warnings, api.FetchWarning{Code: api.WarnRenderCut,
				Message: fmt.Sprintf("the browser downloaded %d bytes, the cap in force; its connections were cut there and content is what the page showed then", res.Cap)})
		}
		if pg.DOMTruncated {
			warnings = append(warnings, api.FetchWarning{Code: api.WarnTruncated,
				Message: fmt.Sprintf("the rendered page is longer than %d bytes; content is its first part", maxDOMBytes)})
		}
	}
	switch res.Kind {
	case browse.KindHTML:
		base, _ := url.Parse(res.FinalURL)
		page, err := safetext.HTML(bytes.NewReader(res.Body), safetext.Options{Format: j.req.Format, Links: j.req.Links, Selector: j.req.Selector,
			Content: j.req.Content, BaseURL: base, MaxOutput: fetchMaxOutput})
		if err != nil {
			return nil, "", api.Validation("selector", "%v", err)
		}
		text, title, outputCut = page.Text, page.Title, page.Truncated
		mode, omitted = page.Content, page.OmittedWords
		for _, w := range page.Warnings {
			warnings = append(warnings, api.FetchWarning{Code: w.Code, Message: w.Message})
		}
	case browse.KindPDF:
		text, outputCut = safetext.Text(pdfText(j.pdf.Pages), fetchMaxOutput)
		outputCut = outputCut || j.pdf.Truncated
		pages = len(j.pdf.Pages)
		if j.pdf.InvisibleText {
			warnings = append(warnings, api.FetchWarning{Code: api.WarnInvisibleText,
				Message: "the PDF draws text invisibly (text render mode 3, usually a scanned page's recognised text); that text is in content, though a reader of the pages does not see it as text"})
		}
		if j.req.Content == api.ContentMain {
			warnings = append(warnings, api.FetchWarning{Code: api.WarnMainFallback,
				Message: "content \"main\" applies to HTML pages; this PDF is returned whole"})
		}
	default:
		text, outputCut = safetext.Text(string(res.Body), fetchMaxOutput)
		if j.req.Content == api.ContentMain {
			warnings = append(warnings, api.FetchWarning{Code: api.WarnMainFallback,
				Message: "content \"main\" applies to HTML pages; this page is not HTML and is returned whole"})
		}
	}
	if outputCut {
		truncated = true
		warnings = append(warnings, api.FetchWarning{Code: api.WarnOutputCut,
			Message: fmt.Sprintf("the text was cut at the output cap of %d bytes", fetchMaxOutput)})
	}
	if warnings == nil {
		warnings = []api.FetchWarning{}
	}
	rd := f.redactor(j.profile)
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
		ContentMode: mode, WordsOmitted: omitted, Warnings: warnings, Rendered: j.render != nil, Pages: pages,
		BytesReceived: res.BytesReceived, Redactions: map[string]int(counts), Profile: api.ProfileRef{Name: j.profile.Name, Version: j.profile.Version}}
	if resp.Redactions == nil {
		resp.Redactions = map[string]int{}
	}
	// The last net: every text field of the answer is redacted too (the
	// upstream's content type, say).
	redact.Counts(resp.Redactions).Add(outputs.Strings(rd, resp))

	capt := &capture.Capture{Kind: "fetch", Tenant: j.key.Tenant, KeyID: j.key.ID, RequestID: j.requestID, Retention: capture.Days(j.profile.CaptureRetentionDays),
		Meta: map[string]string{
			"fetch_id": j.id, "url": j.req.URL, "final_url": res.FinalURL, "status": fmt.Sprint(res.Status),
			"content_type": res.ContentType, "charset": res.Charset, "egress_profile": j.profile.Name,
			"egress_profile_version": j.profile.Version, "session": j.session, "hops": hopSummary(res.Hops),
			"content_sha256": hex.EncodeToString(sum[:]), "content_mode": mode,
		},
		Parts: []capture.Part{
			{Name: "raw", ContentType: "application/octet-stream", Data: res.Raw},
			{Name: "headers", ContentType: "text/plain", Data: headerBlock(res)},
			{Name: "returned.json", ContentType: "application/json", Data: control.JSONAnswer(resp).Body},
		}}
	if j.render != nil {
		// raw is the rendered DOM (what the browser showed, hidden
		// elements removed: the body the safe-text rules read), with the
		// screenshot of the viewport; the review page shows both.
		rep := j.render.res.Report
		capt.Parts[0] = capture.Part{Name: "raw", ContentType: "text/html; charset=utf-8", Data: rep.DOM}
		if len(rep.Shot) > 0 {
			capt.Parts = append(capt.Parts, capture.Part{Name: "screenshot", ContentType: "image/png", Data: rep.Shot})
		}
		capt.Meta["rendered"] = "true"
		capt.Meta["hops"] = decisionSummary(j.render.decisions)
		capt.Meta["render_hidden_removed"] = fmt.Sprint(rep.Page.Hidden)
		capt.Meta["render_requests"] = fmt.Sprint(rep.Page.Requests)
		capt.Meta["render_bytes"] = fmt.Sprint(j.render.res.DownBytes)
		capt.Meta["browser_image"] = j.render.res.ImageID
	}
	if j.pdf != nil {
		capt.Meta["pdf_pages"] = fmt.Sprint(len(j.pdf.Pages))
		capt.Meta["pdf_invisible_text"] = fmt.Sprint(j.pdf.InvisibleText)
		capt.Meta["pdf_invisible_checked"] = fmt.Sprint(j.pdf.InvisibleChecked)
	}
	if err := f.cfg.Captures.Put(context.Background(), capt); err != nil {
		return nil, "", err
	}
	resp.CaptureID = capt.ID
	return resp, hex.EncodeToString(sum[:]), nil
}

// truncationMessage says which cap cut a fetched body.
func truncationMessage(j *fetchJob, res *browse.Result) string {
	which := "the remaining fetched-bytes budget"
	switch {
	case res.Cap == j.profile.MaxResponseBytes:
		which = "the egress profile's cap (max_response_bytes)"
	case res.Cap == j.req.MaxBytes:
		which = "max_bytes"
	}
	return fmt.Sprintf("the page is longer than %d bytes, %s: content is its first part", res.Cap, which)
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

// decisionSummary lists a render's egress decisions for the capture's
// metadata.
func decisionSummary(ds []audit.Decision) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%s %s:%d %s %s %s", d.Method, d.Host, d.Port, d.Verdict, d.Code, d.Rule)
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

// redactor returns the redactor for an egress profile: the built-in rules,
// the profile's own (redact:) and every secret's value, compiled once per
// profile version and secrets load.
func (f *Flow) redactor(p *egress.Profile) *redact.Redactor {
	key, rules := f.cfg.Secrets.Rules()
	if p == nil {
		if len(rules) == 0 {
			return redact.Default()
		}
		return f.cfg.Redactors.For("egress:|"+key, "", rules)
	}
	if len(rules) == 0 {
		return f.cfg.Redactors.For("egress:"+p.Version, p.Name, p.Redact)
	}
	return f.cfg.Redactors.For("egress:"+p.Version+"|"+key, p.Name, append(slices.Clip(p.Redact), rules...))
}

// audit appends a fetch's audit record: every hop's decision, the
// hosts, the capture and what was returned.
func (f *Flow) audit(j *fetchJob, res *browse.Result, a *control.Answer, resp *api.FetchResponse, captureID string) *control.Answer {
	r := j.who.Record(audit.KindFetch)
	r.Subject = j.id
	r.RequestSHA256 = j.reqHash
	r.EgressProfile = &audit.ProfileRef{Name: j.profile.Name, Version: j.profile.Version}
	r.Detail = map[string]string{"url": redactString(f.redactor(j.profile), j.req.URL)}
	if res != nil {
		for _, h := range res.Hops {
			d := h.Decision
			ip := ""
			if d.Dial.IsValid() {
				ip = d.Dial.Addr().String()
			}
			r.Egress = append(r.Egress, audit.Decision{URL: redactString(f.redactor(j.profile), h.URL), Method: d.Method, Host: d.Host, Port: d.Port, IP: ip,
				Verdict: d.Verdict(), Code: string(d.Code), Rule: d.Rule, Reason: d.Reason, Status: h.Status})
			if d.Host != "" && !slices.Contains(r.Hosts, d.Host) {
				r.Hosts = append(r.Hosts, d.Host)
			}
		}
	}
	if j.render != nil {
		// Every decision the egress proxy made for the browser's requests.
		for _, d := range j.render.decisions {
			d.URL = redactString(f.redactor(j.profile), d.URL)
			r.Egress = append(r.Egress, d)
			if d.Host != "" && !slices.Contains(r.Hosts, d.Host) {
				r.Hosts = append(r.Hosts, d.Host)
			}
		}
		r.Detail["rendered"] = "true"
		if j.render.dropped > 0 {
			r.Detail["egress_decisions_dropped"] = strconv.Itoa(j.render.dropped)
		}
		if br := j.render.res; br != nil {
			r.Detail["render_bytes"] = strconv.FormatInt(br.DownBytes, 10)
			r.Detail["render_connections"] = strconv.Itoa(br.Streams)
			r.Detail["browser_image"] = br.ImageID
		}
	}
	if len(r.Hosts) == 0 {
		if u, err := url.Parse(j.req.URL); err == nil && u.Hostname() != "" {
			r.Hosts = []string{u.Hostname()}
		}
	}
	switch {
	case resp != nil:
		r.Status = "ok"
		r.Detail["upstream_status"] = strconv.Itoa(resp.Status)
		r.Detail["content_type"] = resp.ContentType
		r.Redactions = resp.Redactions
		r.Outputs = []audit.Output{{Name: "content", Size: int64(len(resp.Content)), SHA256: audit.SHA256([]byte(resp.Content))}}
		if res != nil {
			r.Outputs = append(r.Outputs, audit.Output{Name: "raw", Size: int64(len(res.Raw)), SHA256: audit.SHA256(res.Raw)})
		}
	case a.Err != nil:
		r.Status, r.Message = a.Err.Code, a.Err.Message
	}
	if captureID != "" {
		r.CaptureIDs = []string{captureID}
	}
	r.DurationsMS = map[string]int64{"total": time.Since(j.started).Milliseconds()}
	return f.plane.Recorded(r, a, "the fetch "+j.id)
}
