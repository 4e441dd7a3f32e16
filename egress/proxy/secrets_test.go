package proxy

// Secrets injected by the proxy, attacked: every test here tries to get a
// placeholder somewhere it must not go, or the value back to the client.

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/secrets"
)

const (
	stripeValue = "sk_live_PROXY-TEST-VALUE-0123456789"
	plainValue  = "plain/VALUE+0123456789="
)

// echo is an upstream that tells what it got, and echoes the credential in
// a header and in its body (vendors do).
type echo struct {
	mu  sync.Mutex
	got []string // every request, raw-ish: method, URL, headers, body
}

func (e *echo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", r.Method, r.URL.RequestURI())
	_ = r.Header.Write(&b)
	b.Write(body)
	e.mu.Lock()
	e.got = append(e.got, b.String())
	e.mu.Unlock()
	w.Header().Set("X-Echo-Auth", r.Header.Get("Authorization"))
	w.Header().Set("X-Echo-Query", r.URL.RawQuery)
	if r.URL.Path == "/gzip" {
		w.Header().Set("Content-Encoding", "gzip")
	}
	fmt.Fprintf(w, "you sent: %s", b.String())
}

func (e *echo) all() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.got, "\n----\n")
}

type secretsEnv struct {
	*env
	tlsSrv, plainSrv *httptest.Server
	tlsPort, port    int
	up               *echo
	run              *secrets.Run
	ca               *secrets.CA
	observed         *observed
}

type observed struct {
	mu sync.Mutex
	ds []egress.Decision
}

func (o *observed) add(d *egress.Decision) {
	o.mu.Lock()
	o.ds = append(o.ds, *d)
	o.mu.Unlock()
}

func (o *observed) find(code egress.Code) *egress.Decision {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range o.ds {
		if o.ds[i].Code == code {
			return &o.ds[i]
		}
	}
	return nil
}

func newSecretsEnv(t *testing.T) *secretsEnv {
	t.Helper()
	se := &secretsEnv{up: &echo{}, observed: &observed{}}
	se.tlsSrv = httptest.NewTLSServer(se.up) // a certificate for example.com
	t.Cleanup(se.tlsSrv.Close)
	se.plainSrv = httptest.NewServer(se.up)
	t.Cleanup(se.plainSrv.Close)
	se.tlsPort = se.tlsSrv.Listener.Addr().(*net.TCPAddr).Port
	se.port = se.plainSrv.Listener.Addr().(*net.TCPAddr).Port
	file := fmt.Sprintf(`secrets:
  - name: stripe
    tenants: [acme]
    hosts: [example.com]
    ports: [%d]
    header: "Authorization: Bearer {secret}"
    value_env: STRIPE
  - name: plain
    tenants: [acme]
    hosts: [up.test]
    schemes: [http]
    ports: [%d]
    query: api_key
    value_env: PLAIN
`, se.tlsPort, se.port)
	set, err := secrets.Parse("s.yaml", []byte(file), func(n string) (string, bool) {
		return map[string]string{"STRIPE": stripeValue, "PLAIN": plainValue}[n], true
	})
	if err != nil {
		t.Fatal(err)
	}
	se.run = secrets.NewRun("acme", []*secrets.Secret{set.Get("stripe"), set.Get("plain")})
	se.run.Bind("ex_test")
	se.ca, err = secrets.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(se.tlsSrv.Certificate())
	cfg := Config{RootCAs: pool, CA: se.ca, Secrets: func(remote netip.Addr, client string) *secrets.Run { return se.run }}
	se.env = newEnvConfig(t, []int{se.tlsPort, se.port}, cfg, func(p *egress.Profile) {
		p.Allow[0].Hosts = append(p.Allow[0].Hosts, "example.com")
	})
	se.checker.Observe = se.observed.add
	se.res.Set("example.com", "127.0.0.1")
	return se
}

func (se *secretsEnv) ph(name string) string { return se.run.Env()[secrets.EnvName(name)] }

// client trusts only the proxy's CA (as a sandbox with secrets does).
func (se *secretsEnv) client() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(se.ca.PEM())
	return &http.Client{Transport: &http.Transport{
		Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: se.addr}),
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		DisableKeepAlives: true,
	}, Timeout: 10 * time.Second}
}

func (se *secretsEnv) do(t *testing.T, method, u string, hdr map[string]string, body string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := se.client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// noValue fails when the value shows in what the client got.
func noValue(t *testing.T, what string, resp *http.Response, body string) {
	t.Helper()
	var h strings.Builder
	_ = resp.Header.Write(&h)
	for _, v := range []string{stripeValue, plainValue, url.QueryEscape(plainValue)} {
		if strings.Contains(body, v) || strings.Contains(h.String(), v) {
			t.Errorf("%s: the value came back to the client:\n%s\n%s", what, h.String(), body)
		}
	}
}

func TestSecretInjectedOverHTTPS(t *testing.T) {
	se := newSecretsEnv(t)
	resp, body := se.do(t, "POST", fmt.Sprintf("https://example.com:%d/v1/charges?amount=5", se.tlsPort),
		map[string]string{"Authorization": "Bearer " + se.ph("stripe")}, "amount=5")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if got := se.up.all(); !strings.Contains(got, "Authorization: Bearer "+stripeValue) || strings.Contains(got, "sbx_secret_") {
		t.Errorf("the upstream got:\n%s", got)
	}
	noValue(t, "an echoing upstream", resp, body)
	if resp.Header.Get("X-Echo-Auth") != "Bearer [REDACTED:secret_stripe]" || !strings.Contains(body, "[REDACTED:secret_stripe]") {
		t.Errorf("the echo is not redacted as expected: %v %q", resp.Header, body)
	}
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != se.ca.Certificate().Subject.CommonName {
		t.Error("the answer did not come over the proxy's own TLS")
	}
	d := se.observed.find(egress.CodeSecretInjected)
	if d == nil || d.Secret != "stripe" || d.Client != "ex_test" || d.Host != "example.com" || !d.Allow {
		t.Errorf("the injection decision: %+v", d)
	}
	lines := se.logs.waitLines(t, 2) // the request inside, then the CONNECT when it ends
	if l := lines[0]; l["via"] != "mitm" || l["method"] != "POST" || l["code"] != "secret_injected" || l["secret"] != "stripe" || l["status"] != float64(200) {
		t.Errorf("the request's line: %v", l)
	}
	if l := lines[1]; l["via"] != "mitm" || l["method"] != "CONNECT" {
		t.Errorf("the CONNECT's line: %v", l)
	}
	if strings.Contains(se.logs.String(), stripeValue) {
		t.Error("the log holds the value")
	}
}

func TestSecretInjectedOverHTTP(t *testing.T) {
	se := newSecretsEnv(t)
	resp, body := se.do(t, "GET", fmt.Sprintf("http://up.test:%d/search?q=cats&api_key=%s", se.port, se.ph("plain")), nil, "")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if got := se.up.all(); !strings.Contains(got, "api_key="+url.QueryEscape(plainValue)) {
		t.Errorf("the upstream got:\n%s", got)
	}
	noValue(t, "an echoing upstream", resp, body)
	if resp.Header.Get("X-Echo-Query") != "q=cats&api_key=[REDACTED:secret_plain]" {
		t.Errorf("echoed query %q", resp.Header.Get("X-Echo-Query"))
	}
}

// TestSecretPlaceholderDenied sends the placeholder everywhere it must not
// go; each is refused, the upstream never sees a placeholder or the value,
// and the refusal is a decision naming the secret.
func TestSecretPlaceholderDenied(t *testing.T) {
	se := newSecretsEnv(t)
	st := se.ph("stripe")
	auth := map[string]string{"Authorization": "Bearer " + st}
	cases := []struct {
		name, method, url string
		hdr               map[string]string
		body              string
		code              egress.Code
	}{
		{"another allowed host", "GET", fmt.Sprintf("http://up.test:%d/", se.port), auth, "", egress.CodeSecretElsewhere},
		{"another host's query", "GET", fmt.Sprintf("http://a.up.test:%d/?k=%s", se.port, st), nil, "", egress.CodeSecretElsewhere},
		{"a body to another host", "POST", fmt.Sprintf("http://up.test:%d/", se.port), nil, "token=" + st, egress.CodeSecretElsewhere},
		{"the URL of the secret's host", "GET", fmt.Sprintf("https://example.com:%d/?token=%s", se.tlsPort, st), nil, "", egress.CodeSecretMisplaced},
		{"the body to the secret's host", "POST", fmt.Sprintf("https://example.com:%d/", se.tlsPort), auth, strings.Repeat("x", 50000) + st, egress.CodeSecretMisplaced},
		{"another header to the secret's host", "GET", fmt.Sprintf("https://example.com:%d/", se.tlsPort), map[string]string{"X-Token": st}, "", egress.CodeSecretMisplaced},
		{"the plain secret over https", "GET", fmt.Sprintf("https://example.com:%d/?api_key=%s", se.tlsPort, se.ph("plain")), nil, "", egress.CodeSecretElsewhere},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			time.Sleep(100 * time.Millisecond) // the last case's upstream handler is done
			before := len(se.up.all())
			resp, body := se.do(t, c.method, c.url, c.hdr, c.body)
			if resp.StatusCode != 403 || resp.Header.Get("X-Sandboxd-Egress") != string(c.code) || !strings.Contains(body, "placeholder") {
				t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
			}
			// The secret's own host may get the value in its slot (the
			// headers go before the body is read); nothing else may.
			got := se.up.all()[before:]
			if strings.Contains(strings.ToLower(got), "sbx_secret_") || c.code == egress.CodeSecretElsewhere && strings.Contains(got, stripeValue) {
				t.Errorf("the upstream got:\n%.300s", got)
			}
			noValue(t, c.name, resp, body)
			if d := se.observed.find(c.code); d == nil || d.Allow || d.Secret == "" {
				t.Errorf("no %s decision: %+v", c.code, d)
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	var denied int
	for _, l := range se.logs.lines(t) {
		if strings.HasPrefix(fmt.Sprint(l["code"]), "secret_") && l["decision"] == "deny" && l["secret"] != nil {
			denied++
		}
	}
	if denied < len(cases) {
		t.Errorf("%d refusals logged, want %d:\n%s", denied, len(cases), se.logs.String())
	}
}

// A placeholder in clear through a raw tunnel is caught and the tunnel
// cut; the upstream never reads it.
func TestSecretInRawTunnel(t *testing.T) {
	se := newSecretsEnv(t)
	c, err := net.Dial("tcp", se.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT a.up.test:%d HTTP/1.1\r\nHost: a.up.test\r\n\r\n", se.port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	// Split across writes, so that the scan must join them.
	st := se.ph("stripe")
	fmt.Fprintf(c, "GET /?k=%s", st[:15])
	time.Sleep(50 * time.Millisecond)
	fmt.Fprintf(c, "%s HTTP/1.1\r\nHost: a.up.test\r\n\r\n", st[15:])
	rest, _ := io.ReadAll(br)
	if strings.Contains(string(rest), "200 OK") {
		t.Errorf("the tunnel carried the request: %q", rest)
	}
	if got := se.up.all(); strings.Contains(got, st[15:]) {
		t.Errorf("the upstream got: %q", got)
	}
	if d := se.observed.find(egress.CodeSecretElsewhere); d == nil || d.Secret != "stripe" {
		t.Errorf("decision %+v", d)
	}
	l := se.logs.waitLines(t, 1)[0]
	if l["via"] != "tunnel" || l["code"] != "secret_elsewhere" || l["decision"] != "deny" || l["secret"] != "stripe" {
		t.Errorf("log %v", l)
	}
}

// A placeholder in a host name is refused before any lookup.
func TestSecretInHostName(t *testing.T) {
	se := newSecretsEnv(t)
	resp, body := se.raw(t, fmt.Sprintf("CONNECT %s.up.test:443 HTTP/1.1\r\nHost: x\r\n\r\n", se.ph("stripe")))
	if resp.StatusCode != 403 || !strings.Contains(body, "placeholder") {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	if calls := se.res.Calls(); len(calls) != 0 {
		t.Errorf("the name was looked up: %v", calls)
	}
}

// Only hosts with a secret are read; every other CONNECT stays a tunnel
// (the client, trusting only the proxy's CA, then rejects the upstream's
// own certificate: nothing was intercepted).
func TestSecretOnlySecretHostsIntercepted(t *testing.T) {
	se := newSecretsEnv(t)
	se.res.Set("other.up.test", "127.0.0.1")
	_, err := se.client().Get(fmt.Sprintf("https://other.up.test:%d/", se.tlsPort))
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a host without a secret: %v, want the upstream's own certificate refused", err)
	}
	if l := se.logs.waitLines(t, 1)[0]; l["via"] != "tunnel" {
		t.Errorf("log %v", l)
	}
}

// Fronting through the proxy's reading: another SNI or another Host.
func TestSecretInterceptFronting(t *testing.T) {
	se := newSecretsEnv(t)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(se.ca.PEM())
	dial := func(sni, host string) (string, error) {
		c, err := net.Dial("tcp", se.addr)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT example.com:%d HTTP/1.1\r\nHost: example.com\r\n\r\n", se.tlsPort)
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
			return "", fmt.Errorf("CONNECT %v %v", resp, err)
		}
		tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: pool, InsecureSkipVerify: sni != "example.com"})
		if err := tc.Handshake(); err != nil {
			return "", err
		}
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", host, se.ph("stripe"))
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			return "", err
		}
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b), nil
	}
	if _, err := dial("evil.test", "example.com"); err == nil {
		t.Error("a handshake with another SNI succeeded")
	}
	got, err := dial("example.com", "evil.test")
	if err != nil || !strings.HasPrefix(got, "400") {
		t.Errorf("another Host inside: %q %v", got, err)
	}
	if strings.Contains(se.up.all(), stripeValue) {
		t.Error("the value was sent")
	}
}

// An upstream that compresses its answer to a request that carried the
// secret (past Accept-Encoding: identity) is refused: it cannot be checked.
func TestSecretCompressedAnswerRefused(t *testing.T) {
	se := newSecretsEnv(t)
	resp, body := se.do(t, "GET", fmt.Sprintf("https://example.com:%d/gzip", se.tlsPort), map[string]string{"Authorization": "Bearer " + se.ph("stripe"), "Accept-Encoding": "gzip"}, "")
	if resp.StatusCode != 502 || !strings.Contains(body, "compressed") {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	if !strings.Contains(se.up.all(), "Accept-Encoding: identity") {
		t.Errorf("the upstream was not asked for identity:\n%s", se.up.all())
	}
	noValue(t, "compressed", resp, body)
}

// A run bound to another client is not this client's: nothing is
// injected for it.
func TestSecretOtherClient(t *testing.T) {
	se := newSecretsEnv(t)
	se.run.Bind("ex_other")
	_, _ = se.do(t, "GET", fmt.Sprintf("http://up.test:%d/?api_key=%s", se.port, se.ph("plain")), nil, "")
	if strings.Contains(se.up.all(), url.QueryEscape(plainValue)) {
		t.Error("a run bound to another client got its secret injected")
	}
}
