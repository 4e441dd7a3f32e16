package fetchflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/browse"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/egress/proxy"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/runner"
)

// Rendering (render: true) and PDFs run in browser sandboxes
// (runner.Browse): a fresh container of the browser image with no network.
// A rendered page's every request comes out of the sandbox as a tunnelled
// connection that the flow's own egress proxy serves under the fetch's
// egress profile, the fetch's id being the proxy's client id: decided,
// logged, counted and, through the checker's Observe, kept for the fetch's
// audit record. There is no fallback to an un-sandboxed read: when the
// sandbox cannot run, the fetch fails (503 UNAVAILABLE).

// Browser runs browser sandboxes (runner.Runner).
type Browser interface {
	Browse(ctx context.Context, spec *runner.BrowserSpec) (*runner.BrowserResult, error)
}

// BrowserConfig is where browser sandboxes come from.
type BrowserConfig struct {
	// Runner runs them; nil: renders and PDFs answer 503 UNAVAILABLE.
	Runner Browser
	// Image is the browser image (default DefaultBrowserImage).
	Image string
	// Seccomp reads a filter of the profiles directory by file name; nil:
	// from the loaded profile set's seccomp/ directory.
	Seccomp func(name string) ([]byte, error)
	// Max is how many browser sandboxes run at once (each may use 1 GiB);
	// more wait up to MaxWait, then answer 429 BUSY. 0: DefaultMaxBrowsers.
	Max     int
	MaxWait time.Duration
}

// DefaultMaxBrowsers bounds concurrent browser sandboxes.
const DefaultMaxBrowsers = 4

// DefaultBrowserImage is the image `make image` builds.
const DefaultBrowserImage = "sandboxd/browser:latest"

// Limits of a browser sandbox.
const (
	browserMemoryMB = 1024
	browserCPUs     = 1.0
	browserPids     = 512
	browserTmpfsMB  = 256
	browserShmMB    = 128
	browserWidth    = 1280
	browserHeight   = 900
	browserSettleMS = 500
	// What a driver may send back.
	maxDOMBytes   = 16 << 20
	maxShotBytes  = 8 << 20
	maxStreams    = 512
	maxUpBytes    = 32 << 20
	pdfTimeoutCap = 60 * time.Second
)

// renderer is the flow's side of browser sandboxes: the egress proxy their
// connections are served by, and the decisions it made for each fetch.
type renderer struct {
	cfg     BrowserConfig
	slots   chan struct{}
	proxy   *proxy.Proxy
	ln      *connListener
	next    atomic.Uint64
	mu      sync.Mutex
	clients map[netip.Addr]renderClient
	byID    map[string][]audit.Decision
	dropped map[string]int
}

type renderClient struct {
	id      string
	profile *egress.Profile
}

// maxRenderDecisions bounds the decisions kept for one fetch.
const maxRenderDecisions = 500

func newRenderer(cfg BrowserConfig, base *egress.Checker, log *slog.Logger) (*renderer, error) {
	r := &renderer{cfg: cfg, clients: map[netip.Addr]renderClient{}, byID: map[string][]audit.Decision{}, dropped: map[string]int{}}
	if r.cfg.Image == "" {
		r.cfg.Image = DefaultBrowserImage
	}
	if r.cfg.Max <= 0 {
		r.cfg.Max = DefaultMaxBrowsers
	}
	if r.cfg.MaxWait <= 0 {
		r.cfg.MaxWait = 10 * time.Second
	}
	r.slots = make(chan struct{}, r.cfg.Max)
	checker := &egress.Checker{Resolver: base.Resolver, DNSTimeout: base.DNSTimeout, Approvals: base.Approvals, Self: base.Self,
		Observe: func(d *egress.Decision) {
			if base.Observe != nil {
				base.Observe(d)
			}
			r.record(d)
		}}
	px, err := proxy.New(proxy.Config{Lookup: r.lookup, Checker: checker, Log: log})
	if err != nil {
		return nil, err
	}
	r.proxy = px
	r.ln = newConnListener()
	go func() { _ = px.Serve(r.ln) }()
	return r, nil
}

// lookup tells the proxy which fetch a connection belongs to.
func (r *renderer) lookup(addr netip.Addr) (string, *egress.Profile, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.clients[addr]
	return c.id, c.profile, ok
}

// record keeps a decision of the proxy for its fetch's audit record.
func (r *renderer) record(d *egress.Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byID[d.Client]; !ok {
		return // not a render in progress
	}
	if len(r.byID[d.Client]) >= maxRenderDecisions {
		r.dropped[d.Client]++
		return
	}
	ip := ""
	if d.Dial.IsValid() {
		ip = d.Dial.Addr().String()
	}
	target := d.Host
	if d.Port != 0 {
		target = net.JoinHostPort(d.Host, fmt.Sprint(d.Port))
	}
	r.byID[d.Client] = append(r.byID[d.Client], audit.Decision{URL: target, Method: d.Method, Host: d.Host, Port: d.Port, IP: ip,
		Verdict: d.Verdict(), Code: string(d.Code), Rule: d.Rule, Reason: d.Reason, Secret: d.Secret})
}

// register makes the proxy know a fetch's connections by a fresh address;
// the returned function forgets it and returns the decisions made.
func (r *renderer) register(id string, p *egress.Profile) (net.Addr, func() ([]audit.Decision, int)) {
	n := r.next.Add(1)
	var b [16]byte
	copy(b[:], []byte{0xfd, 0x73, 0x62, 0x78, 0x72, 0x65, 0x6e, 0x64}) // fd73:6278:7265:6e64::/64
	for i := 0; i < 8; i++ {
		b[15-i] = byte(n >> (8 * i))
	}
	addr := netip.AddrFrom16(b)
	r.mu.Lock()
	r.clients[addr] = renderClient{id: id, profile: p}
	r.byID[id] = []audit.Decision{}
	r.mu.Unlock()
	return &net.TCPAddr{IP: addr.AsSlice(), Port: 1}, func() ([]audit.Decision, int) {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.clients, addr)
		ds, dropped := r.byID[id], r.dropped[id]
		delete(r.byID, id)
		delete(r.dropped, id)
		return ds, dropped
	}
}

// seccomp is the filter of the browser sandbox: network.json (sockets of
// the inet families, for the loopback proxy; there is no other network).
// Under runsc, clone3 is allowed as in gvisor.json: it reaches gVisor's
// kernel, which answers ENOSYS (runsc turns the filter's ENOSYS into
// EPERM, which glibc does not fall back from).
func (r *renderer) seccomp(dir, runtime string) ([]byte, error) {
	read := r.cfg.Seccomp
	if read == nil {
		read = func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, "seccomp", name)) }
	}
	net, err := read("network.json")
	if err != nil || runtime != "runsc" {
		return net, err
	}
	gv, err := read("gvisor.json")
	if err != nil {
		return nil, err
	}
	return withClone3(net, gv)
}

// withClone3 returns filter with its clone3 rules replaced by those of from.
func withClone3(filter, from []byte) ([]byte, error) {
	var f, g map[string]json.RawMessage
	if err := json.Unmarshal(filter, &f); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(from, &g); err != nil {
		return nil, err
	}
	type rule struct {
		Names []string `json:"names"`
	}
	var fs, gs []json.RawMessage
	if err := json.Unmarshal(f["syscalls"], &fs); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(g["syscalls"], &gs); err != nil {
		return nil, err
	}
	isClone3 := func(raw json.RawMessage) bool {
		var r rule
		return json.Unmarshal(raw, &r) == nil && len(r.Names) == 1 && r.Names[0] == "clone3"
	}
	out := fs[:0:0]
	for _, s := range fs {
		if !isClone3(s) {
			out = append(out, s)
		}
	}
	for _, s := range gs {
		if isClone3(s) {
			out = append(out, s)
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	f["syscalls"] = b
	return json.Marshal(f)
}

// acquire takes a browser sandbox slot, waiting up to MaxWait.
func (r *renderer) acquire(ctx context.Context) (func(), error) {
	t := time.NewTimer(r.cfg.MaxWait)
	defer t.Stop()
	select {
	case r.slots <- struct{}{}:
		return func() { <-r.slots }, nil
	case <-t.C:
		return nil, &api.Error{Status: http.StatusTooManyRequests, Code: api.CodeBusy, RetryAfter: 5,
			Message: fmt.Sprintf("all %d browser sandboxes were busy for %s; retry later", r.cfg.Max, r.cfg.MaxWait)}
	case <-ctx.Done():
		return nil, &api.Error{Status: http.StatusBadGateway, Code: api.CodeUpstreamError, Message: "the fetch ended while it waited for a browser sandbox"}
	}
}

// connListener hands the browser sandboxes' connections to the proxy.
type connListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnListener() *connListener {
	return &connListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return browserListenAddr{} }

// serve hands one connection to the proxy.
func (l *connListener) serve(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		c.Close()
	}
}

type browserListenAddr struct{}

func (browserListenAddr) Network() string { return "browser" }
func (browserListenAddr) String() string  { return "browser-sandboxes" }

// wantsRender says whether a fetch is rendered: the request's render, or
// else the profile's render.hosts.
func wantsRender(req *api.FetchRequest, p *egress.Profile) bool {
	if req.Render != nil {
		return *req.Render
	}
	u, err := url.Parse(req.URL)
	return err == nil && p.RendersByDefault(u.Hostname())
}

// renderOutcome is a finished render, for fetchResponse.
type renderOutcome struct {
	res       *runner.BrowserResult
	decisions []audit.Decision
	dropped   int
}

// browserUnavailable is the answer when no browser sandbox can run.
func browserUnavailable(what string, err error) *api.Error {
	msg := what + " in a browser sandbox, and none can run here"
	if err != nil {
		msg += ": " + err.Error()
	}
	return control.Unavailable(msg + "; nothing is read outside a sandbox. Build the browser image with `make image`")
}

// render loads the page in a browser sandbox. It returns the fetch's
// browse.Result built from what the browser reported, or an *api.Error.
func (f *Flow) render(ctx context.Context, j *fetchJob, capBytes int64) (*browse.Result, *renderOutcome, error) {
	rr := f.rend
	if rr == nil || rr.cfg.Runner == nil {
		return nil, nil, browserUnavailable("render: true loads the page", nil)
	}
	set := f.cfg.Profiles.Load()
	sc, err := rr.seccomp(set.Dir, j.profile.Render.Runtime)
	if err != nil {
		return nil, nil, browserUnavailable("render: true loads the page", fmt.Errorf("reading its seccomp filter: %w", err))
	}
	release, err := rr.acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	p := j.profile
	timeout := p.RenderTimeout()
	addr, forget := rr.register(j.id, p)
	spec := &runner.BrowserSpec{
		ID: j.id, Tenant: j.key.Tenant, Image: rr.cfg.Image, Runtime: p.Render.Runtime, SeccompJSON: sc,
		MemoryMB: browserMemoryMB, CPUs: browserCPUs, Pids: browserPids, TmpfsMB: browserTmpfsMB, ShmMB: browserShmMB,
		Job: jobproto.BrowserJob{Kind: jobproto.BrowserRender, URL: j.req.URL, TimeoutMS: timeout.Milliseconds(), SettleMS: browserSettleMS,
			MaxDOMBytes: maxDOMBytes, MaxShotBytes: maxShotBytes, MaxTextBytes: 1, Width: browserWidth, Height: browserHeight},
		Limits:       browserLimits(),
		MaxDownBytes: capBytes,
		Serve:        rr.ln.serve,
		Addr:         addr,
	}
	res, err := rr.cfg.Runner.Browse(ctx, spec)
	// The proxy logs and records a connection's decision when it ends:
	// give the last ones a moment after the sandbox is gone.
	time.Sleep(50 * time.Millisecond)
	ds, dropped := forget()
	out := &renderOutcome{res: res, decisions: ds, dropped: dropped}
	if err != nil {
		return nil, out, browserError(err)
	}
	if d := res.Report.Done; d.Error != "" {
		if d.Code == "timeout" {
			return nil, out, &api.Error{Status: http.StatusBadGateway, Code: api.CodeUpstreamTimeout, Message: "the page did not load within the render's time limit of " + timeout.String() + ": " + d.Error}
		}
		return nil, out, &api.Error{Status: http.StatusBadGateway, Code: api.CodeUpstreamError, Message: "the browser sandbox could not load the page: " + d.Error}
	}
	pg := res.Report.Page
	if pg == nil || res.Report.DOM == nil {
		return nil, out, &api.Error{Status: http.StatusBadGateway, Code: api.CodeUpstreamError, Message: "the browser sandbox reported no page"}
	}
	if pg.Error != "" || pg.Egress != "" {
		if d := deniedFor(ds, j.req.URL, pg); d != nil {
			rule := ""
			if d.Rule != "" {
				rule = " (rule " + d.Rule + ")"
			}
			return nil, out, &api.Error{Status: http.StatusForbidden, Code: api.CodeEgressDenied,
				Message: fmt.Sprintf("egress profile %s denies %s%s: %s", p.Name, hostPort(d), rule, d.Reason)}
		}
		if pg.Error != "" {
			return nil, out, &api.Error{Status: http.StatusBadGateway, Code: api.CodeUpstreamError, Message: "the browser could not load " + j.req.URL + ": " + pg.Error}
		}
	}
	mime := strings.ToLower(pg.MIME)
	if mime == "application/pdf" {
		e := &api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeUnsupported, ContentType: pg.MIME,
			Message: "the page is a PDF; fetch it without render: its text is read in a sandbox page by page"}
		size := int64(-1)
		e.Size = &size
		return nil, out, e
	}
	br := &browse.Result{URL: j.req.URL, FinalURL: pg.URL, Redirects: pg.Redirects, Status: pg.Status, ContentType: pg.MIME,
		MediaType: mime, Kind: browse.KindHTML, Body: res.Report.DOM, Raw: res.Report.DOM, Charset: "utf-8",
		Truncated: pg.DOMTruncated, Cap: capBytes, BytesReceived: res.DownBytes}
	if br.FinalURL == "" {
		br.FinalURL = j.req.URL
	}
	if br.Redirects == nil {
		br.Redirects = []string{}
	}
	return br, out, nil
}

// browserError types a failed browser sandbox.
func browserError(err error) error {
	switch {
	case errors.Is(err, runner.ErrBrowserTimeout):
		return &api.Error{Status: http.StatusBadGateway, Code: api.CodeUpstreamTimeout, Message: err.Error()}
	case errors.Is(err, runner.ErrBrowser):
		return &api.Error{Status: http.StatusBadGateway, Code: api.CodeUpstreamError, Message: err.Error()}
	}
	return browserUnavailable("the page is read", err)
}

// deniedFor finds the proxy's refusal of the page itself: a denied
// decision for the host of the URL or of a redirect target.
func deniedFor(ds []audit.Decision, u string, pg *jobproto.PageReport) *audit.Decision {
	hosts := map[string]bool{}
	for _, s := range append([]string{u, pg.URL}, pg.Redirects...) {
		if pu, err := url.Parse(s); err == nil && pu.Hostname() != "" {
			hosts[strings.ToLower(pu.Hostname())] = true
		}
	}
	for i := range ds {
		if ds[i].Verdict == "deny" && hosts[strings.ToLower(ds[i].Host)] {
			return &ds[i]
		}
	}
	return nil
}

func hostPort(d *audit.Decision) string {
	if d.Port == 0 {
		return d.Host
	}
	return net.JoinHostPort(d.Host, fmt.Sprint(d.Port))
}

func browserLimits() jobproto.BrowserLimits {
	return jobproto.BrowserLimits{MaxStreams: maxStreams, MaxUpBytes: maxUpBytes, MaxDOM: maxDOMBytes, MaxShot: maxShotBytes,
		MaxText: fetchMaxOutput + 64<<10, MaxNotes: 32, MaxNoteSize: 2000}
}

// readPDF extracts a fetched PDF's text in a browser sandbox.
func (f *Flow) readPDF(ctx context.Context, j *fetchJob, res *browse.Result) (*jobproto.PDFReport, error) {
	rr := f.rend
	if rr == nil || rr.cfg.Runner == nil {
		return nil, browserUnavailable("a PDF's text is read", nil)
	}
	set := f.cfg.Profiles.Load()
	sc, err := rr.seccomp(set.Dir, j.profile.Render.Runtime)
	if err != nil {
		return nil, browserUnavailable("a PDF's text is read", fmt.Errorf("reading its seccomp filter: %w", err))
	}
	release, err := rr.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	timeout := min(j.profile.RenderTimeout()*2, pdfTimeoutCap)
	spec := &runner.BrowserSpec{
		ID: j.id, Tenant: j.key.Tenant, Image: rr.cfg.Image, Runtime: j.profile.Render.Runtime, SeccompJSON: sc,
		MemoryMB: browserMemoryMB, CPUs: browserCPUs, Pids: browserPids, TmpfsMB: browserTmpfsMB, ShmMB: browserShmMB,
		Job: jobproto.BrowserJob{Kind: jobproto.BrowserPDF, PDF: res.Body, TimeoutMS: timeout.Milliseconds(),
			MaxDOMBytes: 1, MaxShotBytes: 1, MaxTextBytes: fetchMaxOutput + 1},
		Limits:       browserLimits(),
		MaxDownBytes: 0,
	}
	br, err := rr.cfg.Runner.Browse(ctx, spec)
	if err != nil {
		return nil, browserError(err)
	}
	if d := br.Report.Done; d.Error != "" {
		switch d.Code {
		case "timeout":
			return nil, &api.Error{Status: http.StatusBadGateway, Code: api.CodeUpstreamTimeout, Message: "reading the PDF took longer than " + timeout.String() + ": " + d.Error}
		case "pdf":
			msg := "the PDF could not be read: " + d.Error
			if res.Truncated {
				msg += " (it was cut at the cap of " + fmt.Sprint(res.Cap) + " bytes; a PDF's index is at its end)"
			}
			return nil, &api.Error{Status: http.StatusBadGateway, Code: api.CodeUpstreamError, Message: msg}
		}
		return nil, &api.Error{Status: http.StatusBadGateway, Code: api.CodeUpstreamError, Message: "the PDF sandbox failed: " + d.Error}
	}
	if br.Report.PDF == nil {
		return nil, &api.Error{Status: http.StatusBadGateway, Code: api.CodeUpstreamError, Message: "the PDF sandbox reported no text"}
	}
	return br.Report.PDF, nil
}

// markerRE finds what in a page's text would pass for a page marker.
var markerRE = regexp.MustCompile(`(?i)-{3,}(\s*page\s+\d+\s*)-{3,}`)

// pdfText joins the pages' text with page markers ("--- page 3 ---") that
// only sandboxd writes: text of a page that looks like one is changed.
func pdfText(pages []string) string {
	var b strings.Builder
	for i, pg := range pages {
		if i > 0 {
			b.WriteString("\n\n")
		}
		fmt.Fprintf(&b, "--- page %d ---\n", i+1)
		b.WriteString(markerRE.ReplaceAllString(pg, "- -$1- -"))
	}
	return b.String()
}
