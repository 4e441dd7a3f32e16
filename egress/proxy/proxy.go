// Package proxy is sandboxd's egress forward proxy: plain HTTP requests in
// absolute form and CONNECT tunnels (no TLS interception), each judged by
// egress.Checker.Decide under the profile of the client that sent it and
// dialled through egress.Dialer to the one checked address.
//
// It is built on github.com/elazarl/goproxy with every unsafe default of
// NewProxyHttpServer replaced: the transport takes no proxy from the
// environment (HTTP_PROXY and HTTPS_PROXY in sandboxd's own environment
// change nothing), verifies TLS, never decompresses, keeps no idle
// connections, and dials only through the checking dialer; the CONNECT
// path dials through the same dialer (goproxy's HTTPS_PROXY dialer is
// removed); CONNECT without a port is refused instead of getting ":80";
// origin-form requests ("GET / HTTP/1.1" sent to the proxy) are refused;
// requests that arrive over HTTP/2 are answered 505 instead of reaching
// goproxy's HTTP/2 tunnel code; protocol upgrades (WebSocket over ws://,
// h2c) are refused, so no request turns into an uncounted raw stream.
//
// Known channel, left open: the TLS inside a tunnel is not read, so its
// SNI is not compared with the CONNECT host; a client can reach another
// name served at the same checked address (domain fronting), never another
// address.
//
// Secrets (internal/secrets; inject.go, mitm.go): for a client whose run
// has secrets, the proxy writes a secret's value where its placeholder
// stands in the secret's slot, on a request to where the secret may go,
// and refuses every request that carries a placeholder anywhere else (the
// URL, another header, the body, a tunnel's bytes). It reads the HTTPS of
// exactly those CONNECTs whose host and port a secret of the run may go to
// (with a certificate of its own CA, which only such runs' sandboxes
// trust), through net/http's own server rather than goproxy's MITM; every
// other tunnel stays a tunnel. Responses to such a run lose every spelling
// of its secrets' values before they reach it.
//
// The client, and so the profile, is identified only by the connection's
// source address through the Lookup the caller provides (never by a header
// or credential the sandbox controls). Every request gets exactly one JSON
// log line (egress.Log) when it ends.
package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/secrets"
)

// ClientLookup maps the source address of a connection to the client (an
// exec id) and its egress profile. ok false means an unknown client: every
// request from it is denied and logged.
type ClientLookup func(remote netip.Addr) (clientID string, profile *egress.Profile, ok bool)

// Config configures a Proxy.
type Config struct {
	// Lookup identifies the client of a request. Required.
	Lookup ClientLookup
	// Checker decides requests and knows sandboxd's own listeners (Serve
	// adds the proxy's; give it the process's shared egress.Listeners as
	// Self so that the API's are refused too). Required.
	Checker *egress.Checker
	// Limiter enforces requests_per_minute per client; nil makes one.
	Limiter *egress.Limiter
	// Log receives the decision lines; nil discards them.
	Log *slog.Logger
	// RootCAs verifies upstream TLS for "GET https://..." requests; nil
	// means the system roots. (Tunnels carry the client's own TLS.)
	RootCAs *x509.CertPool
	// ReadHeaderTimeout bounds reading a request's headers from a client
	// (slowloris). Default 10s.
	ReadHeaderTimeout time.Duration
	// ResponseHeaderTimeout bounds waiting for an upstream's response
	// headers, within the profile's total_timeout. Default 30s.
	ResponseHeaderTimeout time.Duration
	// IdleTimeout closes client keep-alive connections idle that long.
	// Default 60s.
	IdleTimeout time.Duration
	// MaxConnsPerClient caps the requests and tunnels one client has open
	// at once; more are answered 429. Default 32.
	MaxConnsPerClient int
	// Secrets returns the secrets of the run a client belongs to (nil:
	// none), from the same source address and client id Lookup gave. Nil:
	// no client has secrets.
	Secrets func(remote netip.Addr, clientID string) *secrets.Run
	// CA signs the certificates of the hosts whose HTTPS the proxy reads to
	// inject a secret. Nil: no HTTPS is read, and no secret is injected
	// over https.
	CA *secrets.CA
	// UpstreamTimeout bounds a TLS handshake with a client whose HTTPS
	// the proxy reads. Default 10s.
	HandshakeTimeout time.Duration
}

// ApprovalIDHeader carries the id of the approval request on a refusal
// under a profile in approve mode (approval_required, approval_rejected).
const ApprovalIDHeader = "X-Sandboxd-Approval-Id"

// TunnelSlack is added to a profile's byte caps for tunnels: TLS
// handshakes and request and response headers travel inside them.
const TunnelSlack = 64 << 10

// Proxy is the forward proxy. It is an http.Handler; Serve runs it on a
// listener.
type Proxy struct {
	cfg    Config
	gp     *goproxy.ProxyHttpServer
	tr     *http.Transport
	dialer *egress.Dialer

	mu      sync.Mutex
	active  map[string]int
	tunnels map[*tunnelConn]struct{}
	// mitms are the client connections whose HTTPS the proxy reads.
	mitms   map[net.Conn]struct{}
	servers map[*http.Server][]netip.AddrPort
	closed  bool
}

// New builds a proxy. It does not listen; call Serve.
func New(cfg Config) (*Proxy, error) {
	if cfg.Lookup == nil || cfg.Checker == nil {
		return nil, errors.New("proxy: Config.Lookup and Config.Checker are required")
	}
	if cfg.Limiter == nil {
		cfg.Limiter = egress.NewLimiter()
	}
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = 10 * time.Second
	}
	if cfg.ResponseHeaderTimeout <= 0 {
		cfg.ResponseHeaderTimeout = 30 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 60 * time.Second
	}
	if cfg.MaxConnsPerClient <= 0 {
		cfg.MaxConnsPerClient = 32
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	p := &Proxy{
		cfg:     cfg,
		dialer:  &egress.Dialer{Checker: cfg.Checker},
		active:  make(map[string]int),
		tunnels: make(map[*tunnelConn]struct{}),
		mitms:   make(map[net.Conn]struct{}),
		servers: make(map[*http.Server][]netip.AddrPort),
	}
	p.tr = &http.Transport{
		Proxy:       nil, // never from the environment
		DialContext: p.dialHTTP,
		TLSClientConfig: &tls.Config{
			RootCAs:    cfg.RootCAs,
			MinVersion: tls.VersionTLS12,
		},
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  cfg.ResponseHeaderTimeout,
		MaxResponseHeaderBytes: 1 << 20,
		// Connections are dialled per decision and never reused: a pooled
		// connection would carry one client's checked address into
		// another's request.
		DisableKeepAlives: true,
		// Bodies pass through as bytes and are counted as such; the proxy
		// never inflates a gzip bomb.
		DisableCompression: true,
		ForceAttemptHTTP2:  false,
	}

	gp := goproxy.NewProxyHttpServer()
	gp.Tr = p.tr
	gp.ConnectDial = nil // goproxy's default reads HTTPS_PROXY
	gp.ConnectDialWithReq = p.dialConnect
	gp.NonproxyHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Unreachable: ServeHTTP refuses origin-form requests first.
		http.Error(w, "sandboxd egress proxy: only absolute-form requests (GET http://host/...) and CONNECT host:port are accepted", http.StatusBadRequest)
	})
	gp.Logger = goproxyLogger{cfg.Log}
	gp.Verbose = false
	gp.KeepHeader = false        // strip Proxy-Authorization and friends
	gp.KeepAcceptEncoding = true // pass the client's Accept-Encoding; the transport adds none
	gp.KeepDestinationHeaders = false
	gp.AllowHTTP2 = false
	gp.OnRequest().HandleConnectFunc(func(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		if stateFrom(ctx.Req.Context()) == nil {
			return goproxy.RejectConnect, host
		}
		// A plain tunnel; never MITM.
		return &goproxy.ConnectAction{Action: goproxy.ConnectAccept}, host
	})
	gp.OnRequest().DoFunc(p.onRequest)
	gp.OnResponse().DoFunc(p.onResponse)
	p.gp = gp
	return p, nil
}

// Serve accepts connections on l until Shutdown or Close and serves them
// over HTTP/1.1 only. The listener's address is recorded with the
// Checker's own listeners (AddSelf; an unspecified address stands for
// every local address), so requests cannot loop back into it. It returns http.ErrServerClosed after
// Shutdown or Close.
func (p *Proxy) Serve(l net.Listener) error {
	self := listenerAddrs(l)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: p.cfg.ReadHeaderTimeout,
		IdleTimeout:       p.cfg.IdleTimeout,
		MaxHeaderBytes:    1 << 20,
		Protocols:         &protocols,
		ErrorLog:          slog.NewLogLogger(discardOr(p.cfg.Log).Handler(), slog.LevelDebug),
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return http.ErrServerClosed
	}
	p.servers[srv] = self
	p.mu.Unlock()
	p.cfg.Checker.AddSelf(self...)
	defer p.cfg.Checker.RemoveSelf(self...)
	return srv.Serve(l)
}

// Shutdown stops accepting connections, waits for plain requests in
// flight (at most until ctx ends) and closes every open tunnel.
func (p *Proxy) Shutdown(ctx context.Context) error {
	return p.stop(func(s *http.Server) error { return s.Shutdown(ctx) })
}

// Close stops the proxy at once: listeners, connections and tunnels.
func (p *Proxy) Close() error { return p.stop((*http.Server).Close) }

// stop refuses new Serve calls, stops every server with stopServer, then
// closes the open tunnels.
func (p *Proxy) stop(stopServer func(*http.Server) error) error {
	p.mu.Lock()
	p.closed = true
	servers := slices.Collect(maps.Keys(p.servers))
	p.mu.Unlock()
	var errs []error
	for _, s := range servers {
		errs = append(errs, stopServer(s))
	}
	p.closeTunnels()
	return errors.Join(errs...)
}

func (p *Proxy) closeTunnels() {
	p.mu.Lock()
	tunnels := slices.Collect(maps.Keys(p.tunnels))
	mitms := slices.Collect(maps.Keys(p.mitms))
	p.mu.Unlock()
	for _, t := range tunnels {
		t.Close()
	}
	for _, c := range mitms {
		c.Close()
	}
}

// listenerAddrs returns the address a listener receives connections on.
// An unspecified address stays as it is: the Checker's Listeners treat it
// as every local address at its port, read at each decision.
func listenerAddrs(l net.Listener) []netip.AddrPort {
	tcp, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return nil
	}
	return []netip.AddrPort{tcp.AddrPort()}
}

// state is what one request carries through goproxy, in its context.
type state struct {
	d       egress.Decision
	profile *egress.Profile
	start   time.Time

	mu        sync.Mutex
	outcome   egress.Code
	detail    string
	status    int
	bytesUp   atomic.Int64
	bytesDown atomic.Int64
	cut       bool // a response was cut at the cap: abort the client connection
	tunnel    *tunnelConn
	dialErr   error
	// release frees the client's connection slot (a tunnel holds it until
	// it closes).
	release func()
	// run is the client's secrets (nil: none); denied, once set, is the
	// decision that refused the request for a placeholder it carried, and
	// replaces d in the log line.
	run    *secrets.Run
	denied *egress.Decision
	via    string
	// encodingChecked: the upstream may have a secret of the run, so its
	// answer must come uncompressed (inject.go).
	encodingChecked bool
}

// decision returns the decision to log: the refusal for a placeholder, if
// there was one, or the request's.
func (s *state) decision() egress.Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.denied != nil {
		return *s.denied
	}
	return s.d
}

func (s *state) setOutcome(code egress.Code, detail string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.outcome == "" || s.outcome == egress.OutcomeOK {
		s.outcome, s.detail = code, detail
	}
	if status != 0 {
		s.status = status
	}
}

type stateKey struct{}

func stateFrom(ctx context.Context) *state {
	s, _ := ctx.Value(stateKey{}).(*state)
	return s
}

// ServeHTTP identifies the client, applies the rate and connection limits,
// decides the request and hands an allowed one to goproxy.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	req := egress.Request{Method: r.Method, Target: r.RequestURI}

	remote, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		p.refuse(w, r, egress.Refuse(nil, req, egress.CodeUnknownClient, fmt.Sprintf("cannot read the source address %q of the connection", r.RemoteAddr)), start, "")
		return
	}
	client, profile, ok := p.cfg.Lookup(remote.Addr().Unmap())
	if !ok {
		p.refuse(w, r, egress.Refuse(nil, req, egress.CodeUnknownClient, fmt.Sprintf("no sandbox is known at source address %s; requests from unknown addresses are denied", remote.Addr().Unmap())), start, "")
		return
	}
	req.Client = client
	if profile == nil || !profile.Compiled() {
		p.refuse(w, r, egress.Refuse(profile, req, egress.CodeNoProfile, "the client has no compiled egress profile; nothing is allowed"), start, "")
		return
	}

	if r.ProtoMajor != 1 {
		p.refuse(w, r, egress.Refuse(profile, req, egress.OutcomeProtocol, fmt.Sprintf("%s is not supported; the proxy speaks HTTP/1.1 (CONNECT host:port for HTTPS)", r.Proto)), start, "")
		return
	}
	if r.Method == http.MethodConnect {
		if _, ok := w.(http.Hijacker); !ok {
			p.refuse(w, r, egress.Refuse(profile, req, egress.OutcomeProtocol, "this connection cannot carry a tunnel; send CONNECT over HTTP/1.1"), start, "")
			return
		}
	} else if !r.URL.IsAbs() || !strings.Contains(r.RequestURI, "://") {
		p.refuse(w, r, egress.Refuse(profile, req, egress.OutcomeNotProxy,
			"origin-form request sent to the proxy; send the absolute URL (GET http://host/path) or CONNECT host:port"), start, "")
		return
	}

	if r.Header.Get("Upgrade") != "" {
		// A WebSocket or h2c upgrade would turn the request into a raw
		// stream outside the body caps; tunnels exist for that (CONNECT).
		p.refuse(w, r, egress.Refuse(profile, req, egress.OutcomeUpgrade,
			fmt.Sprintf("protocol upgrade to %q is not supported through the egress proxy; use wss:// (a CONNECT tunnel) instead", r.Header.Get("Upgrade"))), start, "")
		return
	}
	if ok, wait := p.cfg.Limiter.Allow(client, profile.RequestsPerMinute); !ok {
		secs := int((wait + time.Second - 1) / time.Second)
		p.refuse(w, r, egress.Refuse(profile, req, egress.OutcomeRateLimited,
			fmt.Sprintf("more than %d requests per minute (requests_per_minute of profile %s); retry in %ds", profile.RequestsPerMinute, profile.Name, secs)), start, strconv.Itoa(secs))
		return
	}
	if !p.acquire(client) {
		p.refuse(w, r, egress.Refuse(profile, req, egress.OutcomeTooMany,
			fmt.Sprintf("more than %d requests and tunnels open at once", p.cfg.MaxConnsPerClient)), start, "5")
		return
	}
	var once sync.Once
	release := func() { once.Do(func() { p.release(client) }) }
	tunnelOpen := false
	defer func() {
		if !tunnelOpen {
			release()
		}
	}()

	if r.Method != http.MethodConnect && r.ContentLength > profile.MaxRequestBytes {
		p.refuse(w, r, egress.Refuse(profile, req, egress.OutcomeRequestCap,
			fmt.Sprintf("request body of %d bytes is over max_request_bytes %d", r.ContentLength, profile.MaxRequestBytes)), start, "")
		return
	}

	run := p.runOf(remote.Addr().Unmap(), client)
	if run != nil {
		// A placeholder in the host is refused before its name is looked
		// up: a DNS query would carry it out.
		if den := run.FindIn(targetHost(r), "", targetHost(r), 0, "the host name"); den != nil {
			d := egress.Refuse(profile, req, egress.CodeSecretElsewhere, den.Reason)
			d.Secret = den.Secret
			p.observe(&d)
			p.refuse(w, r, d, start, "")
			return
		}
	}

	d := p.cfg.Checker.Decide(r.Context(), profile, req)
	if !d.Allow {
		p.refuse(w, r, d, start, "")
		return
	}

	st := &state{d: d, profile: profile, start: start, run: run}
	ctx := context.WithValue(r.Context(), stateKey{}, st)

	if r.Method == http.MethodConnect && run != nil && p.cfg.CA != nil && run.Intercepts(d.Host, d.Port) {
		// A secret of the run may go here: read the HTTPS (mitm.go). The
		// connection holds the client's slot until it ends.
		p.intercept(w, r.WithContext(ctx), st)
		return
	}

	if r.Method == http.MethodConnect {
		st.release = release // the tunnel frees the slot when it closes
		p.gp.ServeHTTP(w, r.WithContext(ctx))
		st.mu.Lock()
		tunnel, dialErr := st.tunnel, st.dialErr
		st.mu.Unlock()
		tunnelOpen = tunnel != nil
		if tunnel == nil {
			// The dial failed; goproxy answered 502 and closed the client.
			code, status := classify(dialErr)
			if dialErr == nil {
				code, status, dialErr = egress.OutcomeConnectFailed, http.StatusBadGateway, errors.New("no tunnel was opened")
			}
			st.setOutcome(code, dialErr.Error(), status)
			p.logState(r.Context(), st, "tunnel")
		}
		return
	}

	ctx, cancel := context.WithTimeout(ctx, profile.TotalTimeout)
	defer cancel()
	rec := &statusRecorder{ResponseWriter: w}
	p.gp.ServeHTTP(rec, r.WithContext(ctx))
	st.setOutcome(egress.OutcomeOK, "", rec.status)
	p.logState(r.Context(), st, "proxy")
	st.mu.Lock()
	cut := st.cut
	st.mu.Unlock()
	if cut {
		// The response was cut at the cap. Abort the connection so that the
		// client sees an error rather than a complete-looking short body.
		panic(http.ErrAbortHandler)
	}
}

// refuse answers a denied request with the status of its code and logs it.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, d egress.Decision, start time.Time, retryAfter string) {
	status := d.Code.Status()
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("X-Sandboxd-Egress", string(d.Code))
	if d.ApprovalID != "" {
		// approve mode: the approval request to quote to a security user.
		w.Header().Set(ApprovalIDHeader, d.ApprovalID)
	}
	w.Header().Set("Connection", "close")
	http.Error(w, "sandboxd egress proxy: "+d.Verdict()+": "+d.Reason, status)
	egress.Log(r.Context(), p.cfg.Log, &d, egress.Outcome{Status: status, Duration: time.Since(start), Via: via(r)})
}

func via(r *http.Request) string {
	if r.Method == http.MethodConnect {
		return "tunnel"
	}
	return "proxy"
}

func (p *Proxy) logState(ctx context.Context, st *state, via string) {
	d := st.decision()
	st.mu.Lock()
	o := egress.Outcome{Code: st.outcome, Detail: st.detail, Status: st.status, Via: via}
	st.mu.Unlock()
	if st.via != "" {
		o.Via = st.via
	}
	o.BytesUp, o.BytesDown = st.bytesUp.Load(), st.bytesDown.Load()
	o.Duration = time.Since(st.start)
	if st.run != nil {
		o.Detail = st.run.Literals().String(o.Detail)
	}
	egress.Log(ctx, p.cfg.Log, &d, o)
}

func (p *Proxy) acquire(client string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active[client] >= p.cfg.MaxConnsPerClient {
		return false
	}
	p.active[client]++
	return true
}

func (p *Proxy) release(client string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active[client] <= 1 {
		delete(p.active, client)
		return
	}
	p.active[client]--
}

// onRequest points the outgoing request at the checked host: the URL's
// authority wins over any Host header the client sent.
func (p *Proxy) onRequest(req *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	st := stateFrom(req.Context())
	if st == nil {
		return req, goproxy.NewResponse(req, goproxy.ContentTypeText, http.StatusForbidden, "sandboxd egress proxy: no decision for this request")
	}
	if st.run != nil {
		if resp := p.inject(req, st); resp != nil {
			return req, resp
		}
	}
	req.URL.Scheme = st.d.Scheme
	req.URL.Host = st.d.HostHeader
	req.Host = st.d.HostHeader
	if st.run != nil {
		req.Body = p.scanBody(req.Body, st)
	}
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = &countingBody{ReadCloser: req.Body, n: &st.bytesUp, limit: st.profile.MaxRequestBytes, err: errRequestCap, onCap: func() {
			st.setOutcome(egress.OutcomeRequestCap, fmt.Sprintf("request body over max_request_bytes %d", st.profile.MaxRequestBytes), 0)
		}}
	}
	ctx.RoundTripper = goproxy.RoundTripperFunc(p.roundTrip)
	return req, nil
}

// roundTrip sends the request and wraps the response body so that it is
// counted and cut at the cap. The body is wrapped here, not in onResponse,
// so that goproxy keeps the upstream's Content-Length.
func (p *Proxy) roundTrip(req *http.Request, ctx *goproxy.ProxyCtx) (*http.Response, error) {
	resp, err := p.tr.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	st := stateFrom(req.Context())
	if st != nil && st.run != nil {
		if resp, err = p.cleanResponse(req, resp, st); err != nil {
			return nil, err
		}
	}
	if st != nil && resp.Body != nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &st.bytesDown, limit: st.profile.MaxResponseBytes, err: errResponseCap, onCap: func() {
			st.mu.Lock()
			st.cut = true
			st.mu.Unlock()
			st.setOutcome(egress.OutcomeResponseCap, fmt.Sprintf("response body cut at max_response_bytes %d", st.profile.MaxResponseBytes), 0)
		}}
	}
	return resp, nil
}

// onResponse turns upstream failures into clean answers and refuses a
// response whose declared length is over the cap.
func (p *Proxy) onResponse(resp *http.Response, ctx *goproxy.ProxyCtx) *http.Response {
	st := stateFrom(ctx.Req.Context())
	if st == nil {
		return resp
	}
	if den := st.decision(); !den.Allow {
		// The body carried a placeholder: nothing of it was sent, and
		// whatever the upstream answered is not passed on.
		if resp != nil {
			resp.Body.Close()
		}
		st.setOutcome("", "", den.Code.Status())
		return denyResponse(ctx.Req, den)
	}
	if resp == nil {
		code, status := classify(ctx.Error)
		st.mu.Lock()
		if st.outcome == egress.OutcomeRequestCap {
			code, status = egress.OutcomeRequestCap, http.StatusRequestEntityTooLarge
		}
		st.mu.Unlock()
		detail := "no response"
		if ctx.Error != nil {
			detail = ctx.Error.Error()
		}
		if st.run != nil {
			// An error may quote the URL, which may hold an injected value.
			detail = st.run.Literals().String(detail)
		}
		st.setOutcome(code, detail, status)
		return goproxy.NewResponse(ctx.Req, goproxy.ContentTypeText, status, "sandboxd egress proxy: "+string(code)+": "+detail+"\n")
	}
	if resp.ContentLength > st.profile.MaxResponseBytes && bodyAllowed(ctx.Req.Method, resp.StatusCode) {
		resp.Body.Close()
		msg := fmt.Sprintf("the response declares %d bytes, over max_response_bytes %d", resp.ContentLength, st.profile.MaxResponseBytes)
		st.setOutcome(egress.OutcomeResponseCap, msg, http.StatusBadGateway)
		return goproxy.NewResponse(ctx.Req, goproxy.ContentTypeText, http.StatusBadGateway, "sandboxd egress proxy: "+msg+"\n")
	}
	return resp
}

// bodyAllowed reports whether a response to method with status carries a
// body (a HEAD response declares the length of a body it does not send).
func bodyAllowed(method string, status int) bool {
	return method != http.MethodHead && status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

var (
	errRequestCap     = errors.New("request body over max_request_bytes")
	errResponseCap    = errors.New("response body over max_response_bytes")
	errSecretInTunnel = errors.New("a secret's placeholder was sent through the tunnel")
)

// classify maps an upstream error to an outcome and a status.
func classify(err error) (egress.Code, int) {
	var ne net.Error
	switch {
	case err == nil:
		return egress.OutcomeUpstreamError, http.StatusBadGateway
	case errors.Is(err, errRequestCap):
		return egress.OutcomeRequestCap, http.StatusRequestEntityTooLarge
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout(),
		strings.Contains(err.Error(), "timeout awaiting response headers"):
		return egress.OutcomeTimeout, http.StatusGatewayTimeout
	case errors.Is(err, context.Canceled):
		return egress.OutcomeClientGone, 499
	case errors.Is(err, egress.ErrNotAllowed), isDialError(err):
		return egress.OutcomeConnectFailed, http.StatusBadGateway
	}
	return egress.OutcomeUpstreamError, http.StatusBadGateway
}

func isDialError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// dialHTTP is the transport's only dialer: it dials the address the
// request's decision checked, and refuses requests without one.
func (p *Proxy) dialHTTP(ctx context.Context, network, addr string) (net.Conn, error) {
	st := stateFrom(ctx)
	if st == nil {
		return nil, fmt.Errorf("%w: no egress decision for a dial to %s", egress.ErrNotAllowed, addr)
	}
	if addr != authority(st.d) {
		return nil, fmt.Errorf("%w: the transport asked for %s, the decision is for %s", egress.ErrNotAllowed, addr, authority(st.d))
	}
	return p.dialer.Dial(ctx, &st.d)
}

func authority(d egress.Decision) string {
	host := d.Host
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(int(d.Port))
}

// dialConnect is goproxy's CONNECT dialer: the checked address, wrapped so
// that the tunnel is counted, capped, timed out and logged when it closes.
func (p *Proxy) dialConnect(req *http.Request, network, addr string) (net.Conn, error) {
	st := stateFrom(req.Context())
	if st == nil {
		return nil, fmt.Errorf("%w: no egress decision for a tunnel to %s", egress.ErrNotAllowed, addr)
	}
	ctx, cancel := context.WithTimeout(req.Context(), st.profile.TotalTimeout)
	defer cancel()
	conn, err := p.dialer.Dial(ctx, &st.d)
	if err != nil {
		st.mu.Lock()
		st.dialErr = err
		st.mu.Unlock()
		return nil, err
	}
	_ = conn.SetDeadline(st.start.Add(st.profile.TotalTimeout))
	t := &tunnelConn{Conn: conn, p: p, st: st, upLimit: st.profile.MaxRequestBytes + TunnelSlack, downLimit: st.profile.MaxResponseBytes + TunnelSlack}
	if st.run != nil {
		// The proxy does not read a tunnel, but a placeholder sent through
		// one in clear is caught (and the tunnel cut) before it is written.
		t.scan = st.run.NewScan("", st.d.Host, st.d.Port)
	}
	p.mu.Lock()
	p.tunnels[t] = struct{}{}
	p.mu.Unlock()
	st.mu.Lock()
	st.tunnel = t
	st.mu.Unlock()
	st.setOutcome(egress.OutcomeOK, "", http.StatusOK)
	return t, nil
}

// tunnelConn is the upstream side of a tunnel. Reads are bytes down,
// writes bytes up; each direction is cut at its cap. The deadline set at
// dial time ends the tunnel at total_timeout. Close logs the tunnel's line
// and releases the client's connection slot.
type tunnelConn struct {
	net.Conn
	p                  *Proxy
	st                 *state
	upLimit, downLimit int64
	once               sync.Once
	scan               *secrets.Scan
}

func (t *tunnelConn) Read(b []byte) (int, error) {
	n, err := t.Conn.Read(b)
	// Only goproxy's one copying goroutine reads, so load-then-add is safe.
	if room := t.downLimit - t.st.bytesDown.Load(); int64(n) > room {
		n = int(max(room, 0))
		t.st.bytesDown.Add(int64(n))
		t.st.setOutcome(egress.OutcomeResponseCap, fmt.Sprintf("tunnel cut after %d bytes down (max_response_bytes + %d)", t.downLimit, TunnelSlack), 0)
		return n, errResponseCap
	}
	t.st.bytesDown.Add(int64(n))
	if err != nil && isTimeout(err) {
		t.st.setOutcome(egress.OutcomeTimeout, "tunnel closed at total_timeout", 0)
	}
	return n, err
}

func (t *tunnelConn) Write(b []byte) (int, error) {
	if den := t.scan.Feed(b); den != nil {
		t.p.denySecret(t.st, den)
		return 0, errSecretInTunnel
	}
	if t.st.bytesUp.Load()+int64(len(b)) > t.upLimit {
		t.st.setOutcome(egress.OutcomeRequestCap, fmt.Sprintf("tunnel cut after %d bytes up (max_request_bytes + %d)", t.upLimit, TunnelSlack), 0)
		room := max(t.upLimit-t.st.bytesUp.Load(), 0)
		n, _ := t.Conn.Write(b[:room])
		t.st.bytesUp.Add(int64(n))
		return n, errRequestCap
	}
	n, err := t.Conn.Write(b)
	t.st.bytesUp.Add(int64(n))
	if err != nil && isTimeout(err) {
		t.st.setOutcome(egress.OutcomeTimeout, "tunnel closed at total_timeout", 0)
	}
	return n, err
}

// CloseWrite and CloseRead keep goproxy's half-close path working.
func (t *tunnelConn) CloseWrite() error {
	if c, ok := t.Conn.(interface{ CloseWrite() error }); ok {
		return c.CloseWrite()
	}
	return nil
}

func (t *tunnelConn) CloseRead() error {
	if c, ok := t.Conn.(interface{ CloseRead() error }); ok {
		return c.CloseRead()
	}
	return nil
}

func (t *tunnelConn) Close() error {
	err := t.Conn.Close()
	t.once.Do(func() {
		t.p.mu.Lock()
		delete(t.p.tunnels, t)
		t.p.mu.Unlock()
		t.p.logState(context.Background(), t.st, "tunnel")
		if t.st.release != nil {
			t.st.release()
		}
	})
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// countingBody counts the bytes read through it into n and fails with err
// once more than limit bytes would be read.
type countingBody struct {
	io.ReadCloser
	n     *atomic.Int64
	limit int64
	read  int64
	err   error
	onCap func()
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.read+int64(n) > b.limit {
		n = int(b.limit - b.read)
		b.read += int64(n)
		b.n.Add(int64(n))
		if b.onCap != nil {
			b.onCap()
		}
		return n, b.err
	}
	b.read += int64(n)
	b.n.Add(int64(n))
	return n, err
}

// statusRecorder remembers the status goproxy wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// goproxyLogger sends goproxy's own messages to the debug log.
type goproxyLogger struct{ l *slog.Logger }

func (g goproxyLogger) Printf(format string, args ...any) {
	if g.l != nil {
		g.l.Debug("goproxy", "msg", strings.TrimSpace(fmt.Sprintf(format, args...)))
	}
}

func discardOr(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}
