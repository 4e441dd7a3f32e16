package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/egress/hostport"
)

// intercept serves a CONNECT whose HTTPS the proxy reads, because a
// secret of the client's run may go to its host and port. The proxy
// answers 200, completes the client's TLS handshake with a certificate
// for the CONNECT host from its CA (an SNI naming another host is
// refused), and serves the requests inside with net/http's server
// (HTTP/1.1 only, its strict parser, header and idle timeouts): each is
// checked and injected like a plain request (inject.go), sent to the
// address the CONNECT's decision checked over TLS verified against the
// host's name, and answered with the secrets' values removed. The
// connection ends at the profile's total_timeout, like a tunnel, and
// holds the client's connection slot until then.
func (p *Proxy) intercept(w http.ResponseWriter, r *http.Request, st *state) {
	st.via = "mitm"
	defer p.logState(context.Background(), st, "mitm")
	hj, ok := w.(http.Hijacker)
	if !ok {
		st.setOutcome(egress.OutcomeProtocol, "this connection cannot carry a tunnel", http.StatusHTTPVersionNotSupported)
		http.Error(w, "sandboxd egress proxy: this connection cannot carry a tunnel", http.StatusHTTPVersionNotSupported)
		return
	}
	raw, brw, err := hj.Hijack()
	if err != nil {
		st.setOutcome(egress.OutcomeClientGone, err.Error(), 0)
		return
	}
	client := &bufConn{Conn: raw, r: brw.Reader}
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.mitms[client] = struct{}{}
	}
	p.mu.Unlock()
	defer func() {
		client.Close()
		p.mu.Lock()
		delete(p.mitms, client)
		p.mu.Unlock()
	}()
	if closed {
		return
	}
	deadline := st.start.Add(st.profile.TotalTimeout)
	_ = client.SetDeadline(deadline)
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		st.setOutcome(egress.OutcomeClientGone, err.Error(), 0)
		return
	}
	st.setOutcome(egress.OutcomeOK, "", http.StatusOK)

	host := st.d.Host
	tc := tls.Server(client, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName != "" {
				if sni, _, err := hostport.NormalizeHost(hello.ServerName); err != nil || sni != host {
					return nil, fmt.Errorf("the TLS server name %q is not the CONNECT host %s", hello.ServerName, host)
				}
			}
			return p.cfg.CA.Leaf(host)
		},
	})
	hctx, cancel := context.WithTimeout(r.Context(), p.cfg.HandshakeTimeout)
	err = tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		st.setOutcome(egress.OutcomeProtocol, "TLS handshake with the client: "+err.Error(), 0)
		return
	}

	ln := newOneConn(tc)
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, in *http.Request) { p.serveInner(w, in, st) }),
		ReadHeaderTimeout: p.cfg.ReadHeaderTimeout,
		IdleTimeout:       p.cfg.IdleTimeout,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(discardOr(p.cfg.Log).Handler(), slog.LevelDebug),
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	srv.Protocols = &protocols
	_ = srv.Serve(ln)
	<-ln.done
}

// serveInner serves one request read from an intercepted connection.
func (p *Proxy) serveInner(w http.ResponseWriter, in *http.Request, conn *state) {
	profile := conn.profile
	d := conn.d
	d.Method, d.Scheme = in.Method, "https"
	d.HostHeader = d.Host
	if d.Port != 443 {
		d.HostHeader = net.JoinHostPort(d.Host, strconv.Itoa(int(d.Port)))
	}
	st := &state{d: d, profile: profile, start: time.Now(), run: conn.run, via: "mitm"}
	defer func() {
		conn.bytesUp.Add(st.bytesUp.Load())
		conn.bytesDown.Add(st.bytesDown.Load())
	}()
	refuse := func(code egress.Code, reason string) {
		dd := st.d
		dd.Allow, dd.Code, dd.Reason = false, code, reason
		st.mu.Lock()
		st.denied = &dd
		st.mu.Unlock()
		p.observe(&dd)
		w.Header().Set("X-Sandboxd-Egress", string(code))
		w.Header().Set("Connection", "close")
		http.Error(w, "sandboxd egress proxy: deny: "+reason, code.Status())
		st.setOutcome("", "", code.Status())
		p.logState(in.Context(), st, "mitm")
	}

	// The request must be for the host the CONNECT named: another Host
	// or an absolute URL to another host would be fronting through the
	// proxy's own reading.
	if h := in.Host; h != "" {
		hp, err := hostport.ParseAuthority(withPort(h, d.Port))
		if err != nil || hp.Host != d.Host || hp.Port != d.Port {
			refuse(egress.CodeBadHost, fmt.Sprintf("the request inside the tunnel names host %q; the tunnel was opened to %s:%d", h, d.Host, d.Port))
			return
		}
	}
	if in.URL.IsAbs() || in.URL.Host != "" || !strings.HasPrefix(in.RequestURI, "/") {
		refuse(egress.CodeBadURL, "a request inside the tunnel must be in origin form (GET /path HTTP/1.1)")
		return
	}
	if in.Header.Get("Upgrade") != "" {
		refuse(egress.OutcomeUpgrade, fmt.Sprintf("protocol upgrade to %q is not supported on a connection whose HTTPS the proxy reads", in.Header.Get("Upgrade")))
		return
	}
	if ok, _ := p.cfg.Limiter.Allow(conn.d.Client, profile.RequestsPerMinute); !ok {
		refuse(egress.OutcomeRateLimited, fmt.Sprintf("more than %d requests per minute (requests_per_minute of profile %s)", profile.RequestsPerMinute, profile.Name))
		return
	}
	if in.ContentLength > profile.MaxRequestBytes {
		refuse(egress.OutcomeRequestCap, fmt.Sprintf("request body of %d bytes is over max_request_bytes %d", in.ContentLength, profile.MaxRequestBytes))
		return
	}

	ctx, cancel := context.WithTimeout(context.WithValue(in.Context(), stateKey{}, st), profile.TotalTimeout)
	defer cancel()
	out := in.Clone(ctx)
	out.RequestURI = ""
	out.URL = &url.URL{Scheme: "https", Host: d.HostHeader, Path: in.URL.Path, RawPath: in.URL.RawPath, RawQuery: in.URL.RawQuery}
	out.Host = d.HostHeader
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	if resp := p.inject(out, st); resp != nil {
		den := st.decision()
		w.Header().Set("X-Sandboxd-Egress", string(den.Code))
		http.Error(w, "sandboxd egress proxy: deny: "+den.Reason, den.Code.Status())
		p.logState(in.Context(), st, "mitm")
		return
	}
	if out.Body != nil && out.Body != http.NoBody {
		out.Body = &countingBody{ReadCloser: p.scanBody(out.Body, st), n: &st.bytesUp, limit: profile.MaxRequestBytes, err: errRequestCap, onCap: func() {
			st.setOutcome(egress.OutcomeRequestCap, fmt.Sprintf("request body over max_request_bytes %d", profile.MaxRequestBytes), 0)
		}}
	}
	if out.ContentLength == 0 {
		out.Body = http.NoBody
	}

	resp, err := p.tr.RoundTrip(out)
	if err == nil {
		resp, err = p.cleanResponse(out, resp, st)
	}
	if den := st.decision(); !den.Allow {
		if resp != nil {
			resp.Body.Close()
		}
		w.Header().Set("X-Sandboxd-Egress", string(den.Code))
		http.Error(w, "sandboxd egress proxy: deny: "+den.Reason, den.Code.Status())
		p.logState(in.Context(), st, "mitm")
		return
	}
	if err != nil {
		code, status := classify(err)
		st.mu.Lock()
		if st.outcome == egress.OutcomeRequestCap {
			code, status = egress.OutcomeRequestCap, http.StatusRequestEntityTooLarge
		}
		st.mu.Unlock()
		detail := st.run.Literals().String(err.Error())
		st.setOutcome(code, detail, status)
		http.Error(w, "sandboxd egress proxy: "+string(code)+": "+detail, status)
		p.logState(in.Context(), st, "mitm")
		return
	}
	defer resp.Body.Close()
	if resp.ContentLength > profile.MaxResponseBytes && bodyAllowed(in.Method, resp.StatusCode) {
		msg := fmt.Sprintf("the response declares %d bytes, over max_response_bytes %d", resp.ContentLength, profile.MaxResponseBytes)
		st.setOutcome(egress.OutcomeResponseCap, msg, http.StatusBadGateway)
		http.Error(w, "sandboxd egress proxy: "+msg, http.StatusBadGateway)
		p.logState(in.Context(), st, "mitm")
		return
	}
	body := &countingBody{ReadCloser: resp.Body, n: &st.bytesDown, limit: profile.MaxResponseBytes, err: errResponseCap, onCap: func() {
		st.mu.Lock()
		st.cut = true
		st.mu.Unlock()
		st.setOutcome(egress.OutcomeResponseCap, fmt.Sprintf("response body cut at max_response_bytes %d", profile.MaxResponseBytes), 0)
	}}
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	st.setOutcome(egress.OutcomeOK, "", resp.StatusCode)
	_, copyErr := io.Copy(w, body)
	p.logState(in.Context(), st, "mitm")
	st.mu.Lock()
	cut := st.cut
	st.mu.Unlock()
	if cut || copyErr != nil && !errors.Is(copyErr, io.EOF) {
		panic(http.ErrAbortHandler)
	}
}

// hopHeaders are hop-by-hop headers, never forwarded.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// withPort adds port to a Host header that has none.
func withPort(h string, port uint16) string {
	if _, _, err := net.SplitHostPort(h); err == nil {
		return h
	}
	if strings.Count(h, ":") > 1 && !strings.HasPrefix(h, "[") {
		h = "[" + h + "]"
	}
	return net.JoinHostPort(strings.Trim(h, "[]"), strconv.Itoa(int(port)))
}

// bufConn is a hijacked connection with the bytes its server had buffered
// read first.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) {
	if c.r != nil && c.r.Buffered() > 0 {
		return c.r.Read(b)
	}
	return c.Conn.Read(b)
}

// oneConn is a listener that yields one connection, then blocks until it
// is closed and reports the listener closed, so that http.Server.Serve
// serves exactly that connection.
type oneConn struct {
	mu   sync.Mutex
	conn net.Conn
	done chan struct{}
	once sync.Once
}

func newOneConn(c net.Conn) *oneConn {
	l := &oneConn{done: make(chan struct{})}
	l.conn = &closeNotify{Conn: c, l: l}
	return l
}

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error { return nil }

func (l *oneConn) Addr() net.Addr { return &net.TCPAddr{} }

type closeNotify struct {
	net.Conn
	l *oneConn
}

func (c *closeNotify) Close() error {
	err := c.Conn.Close()
	c.l.once.Do(func() { close(c.l.done) })
	return err
}
