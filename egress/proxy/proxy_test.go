package proxy

// The tests run the proxy and its upstream servers on loopback only, and
// never query real DNS: names resolve through egresstest.Resolver. Loopback
// is always denied, so the test profiles open it explicitly with
// allow_cidrs: ["127.0.0.0/8"] -- the same knob an operator uses for an
// internal mirror; no test-only hook exists in the proxy. The proxy's own
// address stays denied whatever allow_cidrs says (see TestProxyOwnAddress).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/egress/egresstest"
	"github.com/sandboxd/sandboxd/internal/logbuf"
)

// logBuffer collects the proxy's JSON log lines.
type logBuffer struct{ logbuf.Buffer }

// lines returns the decision lines logged so far. Unlike Records, which
// skips what does not decode, a line that is not JSON fails the test.
func (b *logBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", l)
		}
		if m["msg"] == egress.LogMessage {
			out = append(out, m)
		}
	}
	return out
}

// waitLines waits until n decision lines are logged (tunnels log when they
// close) and returns them.
func (b *logBuffer) waitLines(t *testing.T, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l := b.lines(t)
		if len(l) >= n || time.Now().After(deadline) {
			if len(l) != n {
				t.Fatalf("%d decision lines logged, want %d: %v", len(l), n, l)
			}
			return l
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type env struct {
	proxy   *Proxy
	addr    string // host:port of the proxy
	res     *egresstest.Resolver
	checker *egress.Checker
	logs    *logBuffer
	profile atomic.Pointer[egress.Profile]
	unknown atomic.Bool // the lookup knows no client
	lookups atomic.Int32
	cfg     Config
}

// newEnv starts a proxy on loopback whose single client (any loopback
// source address) is "ex_test" under a profile allowing up.test and
// *.up.test on ports 80, 443 and ports, with loopback opened by allow_cidrs.
func newEnv(t *testing.T, ports []int, mutate ...func(*egress.Profile)) *env {
	t.Helper()
	return newEnvConfig(t, ports, Config{}, mutate...)
}

func newEnvConfig(t *testing.T, ports []int, cfg Config, mutate ...func(*egress.Profile)) *env {
	t.Helper()
	if cfg.Checker == nil {
		cfg.Checker = &egress.Checker{} // the env's checker is new; only its Self is taken
	}
	e := &env{logs: &logBuffer{}, res: egresstest.NewResolver(map[string][]string{
		"up.test":         {"127.0.0.1"},
		"a.up.test":       {"127.0.0.1"},
		"private.up.test": {"10.0.0.7"},
	})}
	e.checker = &egress.Checker{Resolver: e.res, DNSTimeout: time.Second, Self: cfg.Checker.Self}
	e.setProfile(t, ports, mutate...)
	cfg.Lookup = func(remote netip.Addr) (string, *egress.Profile, bool) {
		e.lookups.Add(1)
		if e.unknown.Load() || !remote.IsLoopback() {
			return "", nil, false
		}
		return "ex_test", e.profile.Load(), true
	}
	cfg.Checker = e.checker
	cfg.Log = slog.New(slog.NewJSONHandler(e.logs, nil))
	e.cfg = cfg
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.proxy = p
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		p.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return e
}

func (e *env) setProfile(t *testing.T, ports []int, mutate ...func(*egress.Profile)) {
	t.Helper()
	p := egress.Defaults()
	p.Name = "proxytest"
	p.AllowCIDRs = []string{"127.0.0.0/8"}
	p.Allow = []egress.Rule{{Name: "up", Hosts: []string{"up.test", "*.up.test"}, Ports: append([]int{80, 443}, ports...), Methods: []string{"GET", "HEAD", "POST", "CONNECT"}}}
	p.Deny = []egress.Rule{{Name: "blocked", Hosts: []string{"blocked.up.test"}}}
	for _, m := range mutate {
		m(&p)
	}
	if err := p.Compile(); err != nil {
		t.Fatal(err)
	}
	e.profile.Store(&p)
}

// client returns an HTTP client that sends everything through the proxy.
func (e *env) client() *http.Client {
	u := &url.URL{Scheme: "http", Host: e.addr}
	return &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
		Timeout: 10 * time.Second,
	}
}

// raw sends bytes to the proxy and returns the response it reads.
func (e *env) raw(t *testing.T, request string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response to %q: %v", request, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// upstream starts a loopback HTTP server and returns it with its port.
func upstream(t *testing.T, h http.HandlerFunc) (*httptest.Server, int) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, srv.Listener.Addr().(*net.TCPAddr).Port
}

func TestProxyPlainHTTP(t *testing.T) {
	var got struct {
		sync.Mutex
		host, proxyAuth, accept string
		hits                    int
	}
	_, port := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		got.Lock()
		got.host, got.proxyAuth, got.accept = r.Host, r.Header.Get("Proxy-Authorization"), r.Header.Get("Accept-Encoding")
		got.hits++
		got.Unlock()
		fmt.Fprint(w, "hello")
	})
	e := newEnv(t, []int{port})
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://A.UP.test.:%d/x", port), nil)
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	resp, err := e.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello" {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	got.Lock()
	if want := fmt.Sprintf("a.up.test:%d", port); got.host != want || got.proxyAuth != "" {
		t.Errorf("upstream saw Host %q (want %q), Proxy-Authorization %q (want none)", got.host, want, got.proxyAuth)
	}
	got.Unlock()
	l := e.logs.waitLines(t, 1)[0]
	want := map[string]any{
		"via": "proxy", "profile": "proxytest", "profile_version": e.profile.Load().Version, "client": "ex_test",
		"method": "GET", "host": "a.up.test", "port": float64(port), "ip": "127.0.0.1", "decision": "allow",
		"code": "allowed", "rule": "allow[0]:up", "outcome": "ok", "status": float64(200), "bytes_down": float64(5), "bytes_up": float64(0),
	}
	for k, v := range want {
		if l[k] != v {
			t.Errorf("log %s = %v, want %v", k, l[k], v)
		}
	}
	if _, ok := l["time"]; !ok {
		t.Error("log line has no time")
	}
	if e.res.Calls()[0] != "a.up.test" || len(e.res.Calls()) != 1 {
		t.Errorf("lookups %v, want one of a.up.test", e.res.Calls())
	}
}

// Requests the decision denies never reach an upstream, and are answered
// with the status of their code.
func TestProxyDenials(t *testing.T) {
	var hits atomic.Int32
	_, port := upstream(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	e := newEnv(t, []int{port})
	cases := []struct {
		name, request string
		status        int
		code          egress.Code
	}{
		{"host matches no rule", fmt.Sprintf("GET http://evil.example:%d/ HTTP/1.1\r\nHost: evil.example\r\n\r\n", port), 403, egress.CodeNoRule},
		{"deny rule", fmt.Sprintf("GET http://blocked.up.test:%d/ HTTP/1.1\r\nHost: x\r\n\r\n", port), 403, egress.CodeDenyRule},
		{"loopback literal", fmt.Sprintf("GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: x\r\n\r\n", port), 403, egress.CodeNoRule},
		{"metadata literal", "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: x\r\n\r\n", 403, egress.CodeDeniedAddress},
		{"decimal metadata", "GET http://2852039166/ HTTP/1.1\r\nHost: x\r\n\r\n", 403, egress.CodeDeniedAddress},
		{"name resolving to private", "GET http://private.up.test/ HTTP/1.1\r\nHost: x\r\n\r\n", 403, egress.CodeDeniedAddress},
		{"metadata name", "GET http://metadata.google.internal/ HTTP/1.1\r\nHost: x\r\n\r\n", 403, egress.CodeDeniedName},
		{"userinfo", fmt.Sprintf("GET http://up.test@evil.example:%d/ HTTP/1.1\r\nHost: x\r\n\r\n", port), 400, egress.CodeUserinfo},
		{"port policy", "GET http://up.test:6379/ HTTP/1.1\r\nHost: x\r\n\r\n", 403, egress.CodePort},
		{"method", fmt.Sprintf("DELETE http://up.test:%d/ HTTP/1.1\r\nHost: x\r\n\r\n", port), 403, egress.CodeMethod},
		{"ftp", "GET ftp://up.test/ HTTP/1.1\r\nHost: x\r\n\r\n", 403, egress.CodeScheme},
		{"origin-form", "GET / HTTP/1.1\r\nHost: up.test\r\n\r\n", 400, egress.OutcomeNotProxy},
		{"origin-form with port Host", fmt.Sprintf("GET /x HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port), 400, egress.OutcomeNotProxy},
		{"CONNECT port 22", "CONNECT up.test:22 HTTP/1.1\r\nHost: up.test:22\r\n\r\n", 403, egress.CodePort},
		{"CONNECT without port", "CONNECT up.test HTTP/1.1\r\nHost: up.test\r\n\r\n", 400, egress.CodeBadPort},
		{"CONNECT port 0443", "CONNECT up.test:0443 HTTP/1.1\r\nHost: up.test\r\n\r\n", 400, egress.CodeBadPort},
		{"CONNECT userinfo", "CONNECT up.test@127.0.0.1:22 HTTP/1.1\r\nHost: x\r\n\r\n", 400, egress.CodeUserinfo},
		{"WebSocket upgrade", fmt.Sprintf("GET http://up.test:%d/ws HTTP/1.1\r\nHost: up.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", port), 501, egress.OutcomeUpgrade},
		{"CONNECT metadata", "CONNECT 169.254.169.254:443 HTTP/1.1\r\nHost: x\r\n\r\n", 403, egress.CodeDeniedAddress},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := e.raw(t, tc.request)
			if resp.StatusCode != tc.status || resp.Header.Get("X-Sandboxd-Egress") != string(tc.code) {
				t.Fatalf("status %d code %q (%s), want %d %s", resp.StatusCode, resp.Header.Get("X-Sandboxd-Egress"), body, tc.status, tc.code)
			}
			l := e.logs.waitLines(t, i+1)[i]
			if l["decision"] != "deny" || l["code"] != string(tc.code) || l["reason"] == "" || l["client"] != "ex_test" {
				t.Errorf("log line %v", l)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("upstream was reached %d times", n)
	}
}

// The URL's authority decides and is sent upstream, whatever Host header
// the client sends (reference case 30).
func TestProxyHostHeaderCannotRedirect(t *testing.T) {
	var host atomic.Value
	_, port := upstream(t, func(w http.ResponseWriter, r *http.Request) { host.Store(r.Host) })
	e := newEnv(t, []int{port})
	resp, _ := e.raw(t, fmt.Sprintf("GET http://up.test:%d/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n", port))
	if resp.StatusCode != 200 || host.Load() != fmt.Sprintf("up.test:%d", port) {
		t.Fatalf("status %d, upstream saw Host %v", resp.StatusCode, host.Load())
	}
}

// Malformed requests are refused by net/http before the proxy sees them
// (request smuggling shapes, bad Host headers, oversized headers).
func TestProxyMalformedRequests(t *testing.T) {
	var hits atomic.Int32
	_, port := upstream(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	e := newEnv(t, []int{port})
	target := fmt.Sprintf("http://up.test:%d/", port)
	cases := []struct {
		name, request string
		status        int
	}{
		{"CONNECT zone id", "CONNECT [fe80::1%eth0]:443 HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"two Content-Lengths", "POST " + target + " HTTP/1.1\r\nHost: up.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400},
		{"xchunked", "POST " + target + " HTTP/1.1\r\nHost: up.test\r\nTransfer-Encoding: xchunked\r\n\r\n", 501},
		{"Host with space", "GET " + target + " HTTP/1.1\r\nHost: up.test 127.0.0.1\r\n\r\n", 400},
		{"two Hosts", "GET " + target + " HTTP/1.1\r\nHost: up.test\r\nHost: evil\r\n\r\n", 400},
		{"no Host on HTTP/1.1", "GET " + target + " HTTP/1.1\r\n\r\n", 400},
		{"headers over 1 MiB", "GET " + target + " HTTP/1.1\r\nHost: up.test\r\nX-Big: " + strings.Repeat("a", 1<<20+4096) + "\r\n\r\n", 431},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if resp, body := e.raw(t, tc.request); resp.StatusCode != tc.status {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tc.status)
			}
		})
	}
	if hits.Load() != 0 {
		t.Errorf("upstream reached %d times", hits.Load())
	}
}

// Both Transfer-Encoding and Content-Length: net/http drops the
// Content-Length and reads the chunked body (RFC 9112 6.1); upstream gets
// the chunked body and no Content-Length, so nothing is smuggled.
func TestProxyReframesTEAndCL(t *testing.T) {
	var got atomic.Value
	_, port := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(fmt.Sprintf("%s|%q", b, r.Header.Values("Content-Length")))
	})
	e := newEnv(t, []int{port})
	resp, _ := e.raw(t, fmt.Sprintf("POST http://up.test:%d/ HTTP/1.1\r\nHost: up.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 100\r\n\r\n5\r\nhello\r\n0\r\n\r\n", port))
	if resp.StatusCode != 200 || got.Load() != "hello|[]" {
		t.Fatalf("status %d, upstream saw %v", resp.StatusCode, got.Load())
	}
}

// In report mode a request the rules deny goes through and is logged with
// would_deny; an always-denied address is still refused.
func TestProxyReportMode(t *testing.T) {
	_, port := upstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	e := newEnv(t, []int{port}, func(p *egress.Profile) { p.Mode = egress.ModeReport })
	e.res.Set("other.example", "127.0.0.1")
	resp, body := e.raw(t, fmt.Sprintf("GET http://other.example:%d/ HTTP/1.1\r\nHost: x\r\n\r\n", port))
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("report mode: status %d body %q", resp.StatusCode, body)
	}
	l := e.logs.waitLines(t, 1)[0]
	if l["decision"] != "allow" || l["would_deny"] != true || l["code"] != string(egress.CodeNoRule) || l["level"] != "WARN" {
		t.Errorf("log %v", l)
	}
	if resp, _ := e.raw(t, "GET http://169.254.169.254/ HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 403 {
		t.Errorf("report mode let metadata through: %d", resp.StatusCode)
	}
}

func TestProxyUnknownClient(t *testing.T) {
	var hits atomic.Int32
	_, port := upstream(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	e := newEnv(t, []int{port})
	e.unknown.Store(true)
	// An identity header the sandbox controls changes nothing.
	resp, body := e.raw(t, fmt.Sprintf("GET http://up.test:%d/ HTTP/1.1\r\nHost: up.test\r\nX-Sandboxd-Exec-Id: ex_other\r\nProxy-Authorization: Basic ZXhfb3RoZXI6\r\n\r\n", port))
	if resp.StatusCode != 403 || hits.Load() != 0 {
		t.Fatalf("status %d (%s), upstream hits %d", resp.StatusCode, body, hits.Load())
	}
	l := e.logs.waitLines(t, 1)[0]
	if l["code"] != string(egress.CodeUnknownClient) || l["client"] != "" || l["host"] != "up.test" {
		t.Errorf("log %v", l)
	}
	if e.res.Calls() != nil {
		t.Errorf("an unknown client caused lookups: %v", e.res.Calls())
	}
}

func TestProxyConnectTunnel(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "over tls")
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	e := newEnv(t, []int{port})
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c := &http.Client{Transport: &http.Transport{
		Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: e.addr}),
		TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: "example.com"},
		DisableKeepAlives: true,
	}}
	resp, err := c.Get(fmt.Sprintf("https://a.up.test:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "over tls" {
		t.Fatalf("body %q", body)
	}
	l := e.logs.waitLines(t, 1)[0]
	if l["via"] != "tunnel" || l["method"] != "CONNECT" || l["decision"] != "allow" || l["outcome"] != "ok" ||
		l["bytes_up"].(float64) < 100 || l["bytes_down"].(float64) < 100 || l["ip"] != "127.0.0.1" {
		t.Errorf("tunnel log line %v", l)
	}
}

// An HTTP/2 CONNECT (or any request over HTTP/2) is answered 505, never
// handed to goproxy's tunnel code; a handler that cannot hijack answers
// cleanly too.
func TestProxyHTTP2ConnectAnsweredCleanly(t *testing.T) {
	e := newEnv(t, nil)
	for _, proto := range []int{2, 1} {
		r := httptest.NewRequest("CONNECT", "https://up.test:443", nil)
		r.RequestURI = "up.test:443"
		r.ProtoMajor, r.ProtoMinor = proto, 0
		r.RemoteAddr = "127.0.0.1:5555"
		w := httptest.NewRecorder() // not a Hijacker
		e.proxy.ServeHTTP(w, r)
		if w.Code != http.StatusHTTPVersionNotSupported {
			t.Errorf("HTTP/%d CONNECT without hijacking: status %d, want 505", proto, w.Code)
		}
	}
	// An HTTP/2 prior-knowledge preface on the wire gets no HTTP/2 server.
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		t.Logf("HTTP/2 preface answered: %s", resp.Status)
	} else {
		t.Logf("HTTP/2 preface: connection closed: %v", err)
	}
	if err == nil && resp.StatusCode < 400 {
		t.Errorf("HTTP/2 preface answered %d", resp.StatusCode)
	}
}

func TestProxyResponseCap(t *testing.T) {
	const cap = 64 << 10
	big := strings.Repeat("x", 4*cap)
	_, port := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/declared" {
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
		}
		if r.URL.Path == "/exact" {
			io.WriteString(w, big[:cap])
			return
		}
		w.(http.Flusher).Flush() // chunked: no length known in advance
		io.WriteString(w, big)
	})
	e := newEnv(t, []int{port}, func(p *egress.Profile) { p.MaxResponseBytes = cap })

	// Streamed: cut at the cap, and the client sees an error, not a
	// complete-looking short body.
	resp, err := e.client().Get(fmt.Sprintf("http://up.test:%d/stream", port))
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil || n > cap {
		t.Fatalf("read %d bytes, err %v; want at most %d and an error", n, err, cap)
	}
	l := e.logs.waitLines(t, 1)[0]
	if l["outcome"] != string(egress.OutcomeResponseCap) || l["bytes_down"].(float64) != cap {
		t.Errorf("log %v", l)
	}

	// Declared over the cap: refused before any body byte.
	resp, err = e.client().Get(fmt.Sprintf("http://up.test:%d/declared", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("declared oversize: status %d, want 502", resp.StatusCode)
	}

	// HEAD of a large body sends no body: not refused.
	req, _ := http.NewRequest("HEAD", fmt.Sprintf("http://up.test:%d/declared", port), nil)
	resp, err = e.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != int64(len(big)) {
		t.Errorf("HEAD: status %d length %d, want 200 and %d", resp.StatusCode, resp.ContentLength, len(big))
	}

	// Exactly the cap is fine.
	resp, err = e.client().Get(fmt.Sprintf("http://up.test:%d/exact", port))
	if err != nil {
		t.Fatal(err)
	}
	n, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != cap {
		t.Errorf("exact cap: read %d, %v", n, err)
	}
}

func TestProxyRequestCap(t *testing.T) {
	var hits atomic.Int32
	_, port := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.Copy(io.Discard, r.Body)
	})
	e := newEnv(t, []int{port}, func(p *egress.Profile) { p.MaxRequestBytes = 1000 })
	target := fmt.Sprintf("http://up.test:%d/", port)
	resp, err := e.client().Post(target, "text/plain", strings.NewReader(strings.Repeat("a", 1001)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || hits.Load() != 0 {
		t.Errorf("declared upload: status %d, upstream hits %d; want 413 and none", resp.StatusCode, hits.Load())
	}
	// A chunked upload has no declared length: cut while streaming.
	resp, err = e.client().Post(target, "text/plain", io.MultiReader(strings.NewReader(strings.Repeat("a", 5000))))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked upload: status %d, want 413", resp.StatusCode)
	}
	if l := e.logs.waitLines(t, 2)[1]; l["outcome"] != string(egress.OutcomeRequestCap) || l["bytes_up"].(float64) > 1000 {
		t.Errorf("log %v", l)
	}
}

// An upstream that accepts and never answers is cut at total_timeout.
func TestProxyUpstreamNeverAnswers(t *testing.T) {
	var conns []net.Conn
	var mu sync.Mutex
	port := egresstest.Upstream(t, func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c) // hold it open, say nothing
		mu.Unlock()
	})
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	e := newEnv(t, []int{port}, func(p *egress.Profile) { p.TotalTimeout = time.Second; p.ConnectTimeout = 500 * time.Millisecond })
	start := time.Now()
	resp, err := e.client().Get(fmt.Sprintf("http://up.test:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || time.Since(start) > 3*time.Second {
		t.Fatalf("status %d after %v, want 504 after about 1s", resp.StatusCode, time.Since(start))
	}
	if l := e.logs.waitLines(t, 1)[0]; l["outcome"] != string(egress.OutcomeTimeout) {
		t.Errorf("log %v", l)
	}

	// A tunnel to it is closed at total_timeout too.
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\n", port)
	br := bufio.NewReader(c)
	r2, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || r2.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", r2, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start = time.Now()
	if _, err := br.ReadByte(); err == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("idle tunnel: read err %v after %v, want closed after about 1s", err, time.Since(start))
	}
	if l := e.logs.waitLines(t, 2)[1]; l["via"] != "tunnel" || l["outcome"] != string(egress.OutcomeTimeout) {
		t.Errorf("tunnel log %v", l)
	}
}

// A tunnel is cut once more than max_response_bytes + TunnelSlack come down
// or max_request_bytes + TunnelSlack go up.
func TestProxyTunnelByteCaps(t *testing.T) {
	port := egresstest.Upstream(t, func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, 1)
		if _, err := c.Read(buf); err != nil {
			return
		}
		if buf[0] == 'd' { // flood down
			c.Write(bytes.Repeat([]byte("x"), 1<<20))
			return
		}
		io.Copy(io.Discard, c) // swallow uploads
	})
	e := newEnv(t, []int{port}, func(p *egress.Profile) { p.MaxResponseBytes = 1000; p.MaxRequestBytes = 1000 })
	tunnel := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\n", port)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		return c, br
	}
	c, br := tunnel()
	c.Write([]byte("d"))
	n, _ := io.Copy(io.Discard, br)
	c.Close()
	if n != 1000+TunnelSlack {
		t.Errorf("down: got %d bytes through, want %d", n, 1000+TunnelSlack)
	}
	c, _ = tunnel()
	var sent int
	for sent < 4<<20 {
		m, err := c.Write(bytes.Repeat([]byte("u"), 32<<10))
		sent += m
		if err != nil {
			break
		}
	}
	c.Close()
	lines := e.logs.waitLines(t, 2)
	down, up := lines[0], lines[1]
	if down["outcome"] != string(egress.OutcomeResponseCap) || down["bytes_down"].(float64) != 1000+TunnelSlack {
		t.Errorf("down log %v", down)
	}
	if up["outcome"] != string(egress.OutcomeRequestCap) || up["bytes_up"].(float64) > 1000+TunnelSlack {
		t.Errorf("up log %v", up)
	}
}

func TestProxyRateLimit(t *testing.T) {
	_, port := upstream(t, func(w http.ResponseWriter, r *http.Request) {})
	e := newEnv(t, []int{port}, func(p *egress.Profile) { p.RequestsPerMinute = 2 })
	target := fmt.Sprintf("http://up.test:%d/", port)
	for i := range 3 {
		resp, err := e.client().Get(target)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := 200
		if i == 2 {
			want = 429
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d: status %d, want %d", i+1, resp.StatusCode, want)
		}
		if i == 2 {
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 || s > 30 {
				t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
			}
		}
	}
	if l := e.logs.waitLines(t, 3)[2]; l["code"] != string(egress.OutcomeRateLimited) {
		t.Errorf("log %v", l)
	}
	if len(e.res.Calls()) != 2 {
		t.Errorf("a rate-limited request was resolved: %v", e.res.Calls())
	}
}

func TestProxyConcurrentTunnelLimit(t *testing.T) {
	port := egresstest.Upstream(t, func(c net.Conn) { io.Copy(io.Discard, c); c.Close() })
	e := newEnvConfig(t, []int{port}, Config{MaxConnsPerClient: 2})
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for i := range 3 {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\n", port)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "CONNECT"})
		if err != nil {
			t.Fatal(err)
		}
		want := 200
		if i == 2 {
			want = 429
		}
		if resp.StatusCode != want {
			t.Fatalf("tunnel %d: status %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	// Closing a tunnel frees its slot.
	open[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\n", port)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "CONNECT"})
		open = append(open, c)
		if err == nil && resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slot of a closed tunnel was not freed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Requests aimed at the proxy itself are denied even though allow_cidrs
// opens loopback.
func TestProxyOwnAddress(t *testing.T) {
	e := newEnv(t, nil)
	_, port, _ := net.SplitHostPort(e.addr)
	e.setProfile(t, []int{mustAtoi(port)})
	for _, req := range []string{
		"GET http://up.test:" + port + "/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"CONNECT up.test:" + port + " HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		resp, body := e.raw(t, req)
		if resp.StatusCode != 403 || resp.Header.Get("X-Sandboxd-Egress") != string(egress.CodeDeniedSelf) {
			t.Errorf("%q: status %d %s", req, resp.StatusCode, body)
		}
	}
}

// sandboxd's other listeners are refused too: with the process's shared
// Listeners, a sandbox whose profile opens loopback cannot reach the API's
// /metrics through the proxy, by a name resolving to the API's address or
// to 0.0.0.0, over GET or CONNECT. Without the API in them, the same
// request reaches it (the attack the test guards against).
func TestProxySandboxdListeners(t *testing.T) {
	var hits atomic.Int32
	apiSrv, apiPort := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "sandboxd_exec_total 1")
	})
	self := &egress.Listeners{}
	e := newEnvConfig(t, []int{apiPort}, Config{Checker: &egress.Checker{Self: self}}, func(p *egress.Profile) {
		p.AllowCIDRs = []string{"127.0.0.0/8", "0.0.0.0/8"}
	})
	e.res.Set("api.up.test", "127.0.0.1")
	e.res.Set("zero.up.test", "0.0.0.0")
	e.res.Set("zero6.up.test", "::")
	port := strconv.Itoa(apiPort)

	resp, body := e.raw(t, "GET http://api.up.test:"+port+"/metrics HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 || hits.Load() != 1 {
		t.Fatalf("before the API is recorded, the request should reach it: %d %q", resp.StatusCode, body)
	}
	e.logs.waitLines(t, 1)
	e.logs.Reset()
	self.Add(apiSrv.Listener.Addr().(*net.TCPAddr).AddrPort())
	requests := []string{}
	for _, host := range []string{"api.up.test", "zero.up.test", "zero6.up.test", "127.0.0.1", "0.0.0.0", "[::]"} {
		requests = append(requests,
			"GET http://"+host+":"+port+"/metrics HTTP/1.1\r\nHost: x\r\n\r\n",
			"CONNECT "+host+":"+port+" HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	for _, req := range requests {
		resp, body := e.raw(t, req)
		if resp.StatusCode != 403 || resp.Header.Get("X-Sandboxd-Egress") != string(egress.CodeDeniedSelf) {
			t.Errorf("%q: status %d %s %s", req, resp.StatusCode, resp.Header.Get("X-Sandboxd-Egress"), body)
		}
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the API was reached %d more times", n-1)
	}
	for _, l := range e.logs.waitLines(t, len(requests)) {
		if l["code"] != string(egress.CodeDeniedSelf) || l["decision"] != "deny" || !strings.Contains(l["reason"].(string), "sandboxd's own listener 127.0.0.1:"+port) {
			t.Errorf("log line %v", l)
		}
	}
	// The proxy's own listener went into the shared set as well.
	if got := self.List(); len(got) != 2 {
		t.Errorf("shared listeners %v, want the API's and the proxy's", got)
	}
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

// A redirect is passed to the client, never followed by the proxy; the
// client's follow-up request is judged on its own.
func TestProxyDoesNotFollowRedirects(t *testing.T) {
	_, port := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	e := newEnv(t, []int{port})
	resp, err := e.client().Get(fmt.Sprintf("http://up.test:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("status %d, want the 302 passed through", resp.StatusCode)
	}
	resp, err = e.client().Get(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("follow-up to metadata: status %d, want 403", resp.StatusCode)
	}
}

// HTTP_PROXY and HTTPS_PROXY in the proxy's own environment change nothing.
func TestProxyIgnoresEnvironmentProxy(t *testing.T) {
	var trap atomic.Int32
	_, trapPort := upstream(t, func(w http.ResponseWriter, r *http.Request) { trap.Add(1) })
	_, port := upstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "direct") })
	trapURL := fmt.Sprintf("http://127.0.0.1:%d", trapPort)
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"} {
		t.Setenv(k, trapURL)
	}
	t.Setenv("NO_PROXY", "")
	e := newEnv(t, []int{port})
	resp, err := e.client().Get(fmt.Sprintf("http://up.test:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\n", port)
	r2, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "CONNECT"})
	if err != nil || r2.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", r2, err)
	}
	if string(body) != "direct" || trap.Load() != 0 {
		t.Fatalf("body %q, environment proxy reached %d times", body, trap.Load())
	}
}

// "GET https://..." makes the proxy speak TLS upstream: it verifies the
// certificate (self-signed fails) against RootCAs.
func TestProxyVerifiesUpstreamTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "tls") }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	e := newEnv(t, []int{port})
	e.res.Set("example.com", "127.0.0.1") // the name in httptest's certificate
	e.setProfile(t, []int{port}, func(p *egress.Profile) { p.Allow[0].Hosts = append(p.Allow[0].Hosts, "example.com") })
	resp, body := e.raw(t, fmt.Sprintf("GET https://example.com:%d/ HTTP/1.1\r\nHost: example.com\r\n\r\n", port))
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("self-signed upstream: status %d (%s), want 502", resp.StatusCode, body)
	}
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	e2 := newEnvConfig(t, []int{port}, Config{RootCAs: pool}, func(p *egress.Profile) { p.Allow[0].Hosts = append(p.Allow[0].Hosts, "example.com") })
	e2.res.Set("example.com", "127.0.0.1")
	resp, body = e2.raw(t, fmt.Sprintf("GET https://example.com:%d/ HTTP/1.1\r\nHost: example.com\r\n\r\n", port))
	if resp.StatusCode != 200 || body != "tls" {
		t.Fatalf("trusted upstream: status %d body %q", resp.StatusCode, body)
	}
}

// A rebinding resolver gets one lookup; the dial goes to the first answer.
func TestProxyRebinding(t *testing.T) {
	var hits atomic.Int32
	_, port := upstream(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	e := newEnv(t, []int{port}, func(p *egress.Profile) { p.AllowCIDRs = []string{"127.0.0.1/32"} })
	rb := &flipResolver{first: "127.0.0.1", then: "127.0.0.2"}
	e.checker.Resolver = rb
	resp, err := e.client().Get(fmt.Sprintf("http://up.test:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || hits.Load() != 1 || rb.calls.Load() != 1 {
		t.Fatalf("status %d, upstream hits %d, lookups %d; want 200, 1, 1", resp.StatusCode, hits.Load(), rb.calls.Load())
	}
}

type flipResolver struct {
	first, then string
	calls       atomic.Int32
}

func (f *flipResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if f.calls.Add(1) == 1 {
		return []netip.Addr{netip.MustParseAddr(f.first)}, nil
	}
	return []netip.Addr{netip.MustParseAddr(f.then)}, nil
}

func TestNewRequiresLookupAndChecker(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without Lookup and Checker succeeded")
	}
}

// BenchmarkProxyOverhead compares a GET of a small body from a loopback
// server, direct and through the proxy (decision with a table resolver,
// checked dial, one decision log line), and reports the ratio of their
// times as overhead-x. Both clients keep their connection to the next hop
// alive; the proxy dials upstream afresh for every request by design.
func BenchmarkProxyOverhead(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	e := newEnvBench(b, port)
	direct := &http.Client{Transport: &http.Transport{}}
	proxied := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: e.addr})}}
	get := func(c *http.Client, u string) {
		resp, err := c.Get(u)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	directURL := srv.URL + "/"
	proxyURL := fmt.Sprintf("http://up.test:%d/", port)
	var dDirect, dProxy time.Duration
	n := 0
	for b.Loop() {
		s := time.Now()
		get(direct, directURL)
		dDirect += time.Since(s)
		s = time.Now()
		get(proxied, proxyURL)
		dProxy += time.Since(s)
		n++
	}
	b.ReportMetric(float64(dDirect.Nanoseconds())/float64(n), "direct-ns/req")
	b.ReportMetric(float64(dProxy.Nanoseconds())/float64(n), "proxied-ns/req")
	b.ReportMetric(float64(dProxy)/float64(dDirect), "overhead-x")
}

// newEnvBench starts a proxy for benchmarks, with logging to io.Discard
// through the JSON handler (so the cost of the log line is counted).
func newEnvBench(b *testing.B, port int) *env {
	e := &env{logs: &logBuffer{}, res: egresstest.NewResolver(map[string][]string{"up.test": {"127.0.0.1"}})}
	e.checker = &egress.Checker{Resolver: e.res}
	p := egress.Defaults()
	p.Name = "bench"
	p.AllowCIDRs = []string{"127.0.0.0/8"}
	p.RequestsPerMinute = egress.MaxRequestsPerMinute
	p.Allow = []egress.Rule{{Hosts: []string{"up.test"}, Ports: []int{port}}}
	if err := p.Compile(); err != nil {
		b.Fatal(err)
	}
	e.profile.Store(&p)
	prox, err := New(Config{
		Lookup:  func(netip.Addr) (string, *egress.Profile, bool) { return "ex_bench", e.profile.Load(), true },
		Checker: e.checker,
		Limiter: egress.NewLimiter(),
		Log:     slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	e.addr = ln.Addr().String()
	go prox.Serve(ln)
	b.Cleanup(func() { prox.Close() })
	return e
}
