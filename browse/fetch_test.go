package browse

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/andybalholm/brotli"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/egress/egresstest"
)

// upstream is a loopback test server reachable under the names pages.test
// (allowed) and evil.test (denied), resolved by a fake resolver.
type upstream struct {
	srv    *httptest.Server
	port   int
	hits   atomic.Int64
	logBuf *bytes.Buffer
}

func newUpstream(t *testing.T, h http.Handler, useTLS bool) *upstream {
	t.Helper()
	u := &upstream{}
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { u.hits.Add(1); h.ServeHTTP(w, r) })
	if useTLS {
		u.srv = httptest.NewTLSServer(counted)
	} else {
		u.srv = httptest.NewServer(counted)
	}
	t.Cleanup(u.srv.Close)
	_, port, _ := net.SplitHostPort(u.srv.Listener.Addr().String())
	u.port, _ = strconv.Atoi(port)
	return u
}

func (u *upstream) url(host, path string) string {
	scheme := "http"
	if u.srv.TLS != nil {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s:%d%s", scheme, host, u.port, path)
}

// fetcher returns a fetcher and a profile that allows pages.test and
// other.test on the upstream's port and denies evil.test.
func (u *upstream) fetcher(t *testing.T, mutate ...func(*egress.Profile)) (*Fetcher, *egress.Profile) {
	t.Helper()
	p := egress.Defaults()
	p.Name = "test"
	p.Allow = []egress.Rule{{Hosts: []string{"pages.test", "other.test"}, Ports: []int{u.port}}}
	p.Deny = []egress.Rule{{Name: "no-evil", Hosts: []string{"evil.test"}}}
	p.AllowCIDRs = []string{"127.0.0.1/32"}
	p.MaxResponseBytes = 1 << 20
	p.TotalTimeout = 5 * time.Second
	for _, m := range mutate {
		m(&p)
	}
	if err := p.Compile(); err != nil {
		t.Fatal(err)
	}
	res := egresstest.NewResolver(map[string][]string{
		"pages.test": {"127.0.0.1"}, "other.test": {"127.0.0.1"}, "evil.test": {"127.0.0.1"}, "meta.test": {"169.254.169.254"},
	})
	u.logBuf = &bytes.Buffer{}
	f := &Fetcher{Checker: &egress.Checker{Resolver: res}, Log: slog.New(slog.NewJSONHandler(u.logBuf, nil))}
	if u.srv.TLS != nil {
		pool := x509.NewCertPool()
		pool.AddCert(u.srv.Certificate())
		// httptest's certificate names example.com: verify it under that
		// name (the URL's host is still what the profile judges).
		f.TLSConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, ServerName: "example.com"}
	}
	return f, &p
}

func fetchErr(t *testing.T, err error) *Error {
	t.Helper()
	var fe *Error
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *browse.Error", err, err)
	}
	return fe
}

func TestFetchHTMLAndText(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "pages.test:"+r.URL.Port() && !strings.HasPrefix(r.Host, "pages.test") {
			http.Error(w, "wrong host "+r.Host, 400)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, "<html><title>T</title><p>héllo</p></html>")
	})
	mux.HandleFunc("/json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"a": "ü"}`)
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(404)
		io.WriteString(w, "no such page")
	})
	for _, useTLS := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%t", useTLS), func(t *testing.T) {
			u := newUpstream(t, mux, useTLS)
			f, p := u.fetcher(t)
			res, err := f.Fetch(context.Background(), Request{URL: u.url("pages.test", "/page"), Profile: p, Client: "f1"})
			if err != nil {
				t.Fatal(err)
			}
			if res.Kind != KindHTML || res.Status != 200 || !strings.Contains(string(res.Body), "héllo") || res.Charset != "utf-8" || res.FinalURL != res.URL {
				t.Fatalf("result: %+v body %q", res, res.Body)
			}
			if res.BytesReceived != int64(len(res.Raw)) || len(res.Hops) != 1 || !res.Hops[0].Decision.Allow {
				t.Fatalf("accounting: %+v", res)
			}
			res, err = f.Fetch(context.Background(), Request{URL: u.url("pages.test", "/json"), Profile: p})
			if err != nil || res.Kind != KindText || string(res.Body) != `{"a": "ü"}` {
				t.Fatalf("json: %v %+v", err, res)
			}
			res, err = f.Fetch(context.Background(), Request{URL: u.url("pages.test", "/missing"), Profile: p})
			if err != nil || res.Status != 404 || string(res.Body) != "no such page" {
				t.Fatalf("404 page: %v %+v", err, res)
			}
			// One decision line per hop, via fetch, with the dialled address.
			if n := strings.Count(u.logBuf.String(), `"via":"fetch"`); n != 3 {
				t.Fatalf("want 3 decision lines, got %d:\n%s", n, u.logBuf)
			}
			if !strings.Contains(u.logBuf.String(), `"ip":"127.0.0.1"`) {
				t.Fatalf("decision line lacks the dialled address:\n%s", u.logBuf)
			}
		})
	}
}

func TestFetchDenied(t *testing.T) {
	u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "secret") }), false)
	f, p := u.fetcher(t)
	cases := []struct {
		url, code string
	}{
		{u.url("evil.test", "/"), CodeDenied},                          // deny rule
		{u.url("nowhere.test", "/"), CodeDenied},                       // no rule
		{u.url("meta.test", "/"), CodeDenied},                          // no rule before the lookup
		{"http://169.254.169.254/latest/meta-data/", CodeDenied},       // metadata address
		{"http://127.0.0.1:" + strconv.Itoa(u.port) + "/", CodeDenied}, // IP literal: no rule names it
		{"file:///etc/passwd", CodeDenied},                             // scheme: policy
		{"http://user:pw@pages.test/", CodeBadURL},
		{"gopher://pages.test/", CodeDenied},
		{"http://pages.test\\@evil.test/", CodeBadURL},
		{"http://pages.test:" + strconv.Itoa(u.port+1) + "/", CodeDenied}, // port not allowed
	}
	for _, c := range cases {
		_, err := f.Fetch(context.Background(), Request{URL: c.url, Profile: p})
		if fe := fetchErr(t, err); fe.Code != c.code {
			t.Errorf("%s: code %s (%s), want %s", c.url, fe.Code, fe.Message, c.code)
		}
	}
	if n := u.hits.Load(); n != 0 {
		t.Fatalf("the upstream was reached %d times by denied fetches", n)
	}
	if _, err := f.Fetch(context.Background(), Request{URL: u.url("pages.test", "/"), Profile: nil}); fetchErr(t, err).Code != CodeDenied {
		t.Fatal("a fetch without a profile was not denied")
	}
}

func TestFetchRedirects(t *testing.T) {
	var u *upstream
	mux := http.NewServeMux()
	mux.HandleFunc("/r/", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/r/"))
		if n == 0 {
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "landed")
			return
		}
		http.Redirect(w, r, "/r/"+strconv.Itoa(n-1), http.StatusFound)
	})
	mux.HandleFunc("/to-evil", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, u.url("evil.test", "/loot"), http.StatusMovedPermanently)
	})
	mux.HandleFunc("/to-meta", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/iam", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/to-file", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
	})
	mux.HandleFunc("/to-other", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, u.url("other.test", "/r/0"), http.StatusSeeOther)
	})
	mux.HandleFunc("/loot", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "LOOT") })
	u = newUpstream(t, mux, false)
	f, p := u.fetcher(t)
	ctx := context.Background()

	res, err := f.Fetch(ctx, Request{URL: u.url("pages.test", "/r/5"), Profile: p})
	if err != nil || string(res.Body) != "landed" || len(res.Redirects) != 5 || res.FinalURL != u.url("pages.test", "/r/0") {
		t.Fatalf("5 redirects: %v %+v", err, res)
	}
	_, err = f.Fetch(ctx, Request{URL: u.url("pages.test", "/r/6"), Profile: p})
	if fe := fetchErr(t, err); fe.Code != CodeUpstream || !strings.Contains(fe.Message, "more than 5 redirects") {
		t.Fatalf("6 redirects: %+v", fe)
	}
	res, err = f.Fetch(ctx, Request{URL: u.url("pages.test", "/to-other"), Profile: p})
	if err != nil || string(res.Body) != "landed" || res.FinalURL != u.url("other.test", "/r/0") {
		t.Fatalf("cross-host redirect to an allowed host: %v %+v", err, res)
	}
	before := u.hits.Load()
	for _, path := range []string{"/to-evil", "/to-meta"} {
		res, err := f.Fetch(ctx, Request{URL: u.url("pages.test", path), Profile: p})
		fe := fetchErr(t, err)
		if fe.Code != CodeDenied || fe.URL == u.url("pages.test", path) {
			t.Fatalf("%s: the denied hop was not refused at the hop: %+v", path, fe)
		}
		if len(res.Hops) != 2 || res.Hops[1].Decision.Allow {
			t.Fatalf("%s: hops %+v", path, res.Hops)
		}
	}
	if got := u.hits.Load() - before; got != 2 { // only the two redirecting hops
		t.Fatalf("denied redirect targets were fetched: %d upstream hits, want 2", got)
	}
	_, err = f.Fetch(ctx, Request{URL: u.url("pages.test", "/to-file"), Profile: p})
	if fe := fetchErr(t, err); fe.Code != CodeDenied || !strings.Contains(fe.Message, "scheme") {
		t.Fatalf("redirect to file: %+v", fe)
	}
}

// compress returns b written through the compressor w makes.
func compress(b []byte, w func(io.Writer) io.WriteCloser) []byte {
	var buf bytes.Buffer
	c := w(&buf)
	c.Write(b)
	c.Close()
	return buf.Bytes()
}

func gz(b []byte) []byte {
	return compress(b, func(w io.Writer) io.WriteCloser {
		c, _ := gzip.NewWriterLevel(w, gzip.BestCompression)
		return c
	})
}

func TestFetchEncodings(t *testing.T) {
	text := strings.Repeat("compressible text ", 200)
	enc := map[string]func([]byte) []byte{
		"gzip": gz,
		"deflate": func(b []byte) []byte {
			return compress(b, func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) })
		},
		"rawdeflate": func(b []byte) []byte {
			return compress(b, func(w io.Writer) io.WriteCloser {
				c, _ := flate.NewWriter(w, flate.BestCompression)
				return c
			})
		},
		"br": func(b []byte) []byte {
			return compress(b, func(w io.Writer) io.WriteCloser { return brotli.NewWriter(w) })
		},
	}
	u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/")
		if name == "gzip-br" {
			w.Header().Set("Content-Encoding", "gzip, br")
			w.Header().Set("Content-Type", "text/plain")
			w.Write(enc["br"](gz([]byte(text))))
			return
		}
		if name == "zstd" {
			w.Header().Set("Content-Encoding", "zstd")
			w.Header().Set("Content-Type", "text/plain")
			w.Write([]byte("whatever"))
			return
		}
		header := name
		if name == "rawdeflate" {
			header = "deflate"
		}
		w.Header().Set("Content-Encoding", header)
		w.Header().Set("Content-Type", "text/plain")
		w.Write(enc[name]([]byte(text)))
	}), false)
	f, p := u.fetcher(t)
	for _, name := range []string{"gzip", "deflate", "rawdeflate", "br", "gzip-br"} {
		res, err := f.Fetch(context.Background(), Request{URL: u.url("pages.test", "/"+name), Profile: p})
		if err != nil || string(res.Body) != text || len(res.Raw) >= len(text) {
			t.Fatalf("%s: %v body %d bytes raw %d bytes", name, err, len(res.Body), len(res.Raw))
		}
	}
	_, err := f.Fetch(context.Background(), Request{URL: u.url("pages.test", "/zstd"), Profile: p})
	if fe := fetchErr(t, err); fe.Code != CodeUpstream || !strings.Contains(fe.Message, "zstd") {
		t.Fatalf("unknown encoding: %+v", fe)
	}
}

// A gzip bomb (256 MiB of zeros in about 256 KiB: one compressed MiB
// repeated as gzip members, which a gzip reader reads as one stream) stops
// at the cap: with the profile's cap it is cut there, with a lower
// max_bytes it is cut at max_bytes; in neither case is more than cap+1
// bytes decompressed.
func TestFetchGzipBombStopsAtCap(t *testing.T) {
	member := gz(make([]byte, 1<<20))
	bomb := bytes.NewBuffer(bytes.Repeat(member, 256))
	u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Type", "text/html")
		w.Write(bomb.Bytes())
	}), false)
	f, p := u.fetcher(t)
	if int64(bomb.Len()) > p.MaxResponseBytes {
		t.Fatalf("the bomb (%d bytes) must fit under the raw cap to test the decompressed cap", bomb.Len())
	}
	start := time.Now()
	res, err := f.Fetch(context.Background(), Request{URL: u.url("pages.test", "/"), Profile: p})
	if err != nil || !res.Truncated || int64(len(res.Body)) != p.MaxResponseBytes || res.Cap != p.MaxResponseBytes {
		t.Fatalf("bomb under the profile cap: %v truncated=%v body=%d", err, res != nil && res.Truncated, len(res.Body))
	}
	res, err = f.Fetch(context.Background(), Request{URL: u.url("pages.test", "/"), Profile: p, MaxBytes: 4096})
	if err != nil || !res.Truncated || len(res.Body) != 4096 {
		t.Fatalf("bomb under max_bytes: %v truncated=%v body=%d", err, res != nil && res.Truncated, len(res.Body))
	}
	t.Logf("two bomb fetches took %s", time.Since(start))
}

func TestFetchCaps(t *testing.T) {
	big := strings.Repeat("x", 3000)
	u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if r.URL.Path == "/chunked" {
			// No Content-Length: the cap is found while reading.
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, big)
	}), false)
	f, p := u.fetcher(t, func(p *egress.Profile) { p.MaxResponseBytes = 2000 })
	for _, path := range []string{"/declared", "/chunked"} {
		// Over the profile's cap: cut there, and no more than cap+1
		// bytes are read.
		res, err := f.Fetch(context.Background(), Request{URL: u.url("pages.test", path), Profile: p})
		if err != nil || !res.Truncated || string(res.Body) != big[:2000] || res.BytesReceived > 2001 || res.Cap != 2000 {
			t.Fatalf("%s over the profile cap: %v %+v", path, err, res)
		}
		res, err = f.Fetch(context.Background(), Request{URL: u.url("pages.test", path), Profile: p, MaxBytes: 100})
		if err != nil || !res.Truncated || string(res.Body) != big[:100] || res.BytesReceived > 101 {
			t.Fatalf("%s soft cap: %v %+v", path, err, res)
		}
		// max_bytes above the profile's cap cannot raise it.
		res, err = f.Fetch(context.Background(), Request{URL: u.url("pages.test", path), Profile: p, MaxBytes: 1 << 30})
		if err != nil || !res.Truncated || len(res.Body) != 2000 || res.BytesReceived > 2001 {
			t.Fatalf("%s: max_bytes raised the cap: %v %+v", path, err, res)
		}
	}
}

func TestFetchCharsets(t *testing.T) {
	pages := map[string]struct{ ct, body, want string }{
		"/latin1-header": {"text/html; charset=iso-8859-1", "<p>caf\xe9</p>", "café"},
		"/latin1-meta":   {"text/html", "<meta charset=\"iso-8859-1\"><p>caf\xe9</p>", "café"},
		"/sjis-meta":     {"text/html", "<meta http-equiv=\"Content-Type\" content=\"text/html; charset=shift_jis\"><p>\x93\xfa\x96\x7b</p>", "日本"},
		"/utf8-nohint":   {"text/html", "<p>日本</p>", "日本"},
		"/utf16-bom":     {"text/plain", "\xff\xfeh\x00i\x00", "hi"},
		"/cp1252-nohint": {"text/plain", "smart \x93quotes\x94", "smart \u201cquotes\u201d"},
		"/lying-utf8":    {"text/plain; charset=utf-8", "bad \xff\xfe bytes", "bad \uFFFD bytes"},
	}
	u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pg := pages[r.URL.Path]
		w.Header().Set("Content-Type", pg.ct)
		io.WriteString(w, pg.body)
	}), false)
	f, p := u.fetcher(t)
	for path, pg := range pages {
		res, err := f.Fetch(context.Background(), Request{URL: u.url("pages.test", path), Profile: p})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !strings.Contains(string(res.Body), pg.want) {
			t.Errorf("%s: body %q (charset %s), want it to contain %q", path, res.Body, res.Charset, pg.want)
		}
	}
}

func TestFetchUnsupportedContent(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/pdf":
			w.Header().Set("Content-Type", "application/pdf")
			w.Header().Set("Content-Length", "1234")
			w.Write(make([]byte, 1234))
		case "/sniffed-pdf":
			w.Header()["Content-Type"] = nil
			io.WriteString(w, "%PDF-1.4\n%\xe2\xe3\n1 0 obj<<>>endobj\n")
		case "/big-pdf":
			w.Header().Set("Content-Type", "application/pdf")
			w.Write(bytes.Repeat([]byte("%PDF"), 1000))
		case "/sniffed-png":
			w.Header()["Content-Type"] = nil // no type: sniffed
			w.Write(png)
		case "/sniffed-html":
			w.Header()["Content-Type"] = nil
			io.WriteString(w, "<!DOCTYPE html><p>hi</p>")
		}
	}), false)
	f, p := u.fetcher(t)
	// PDFs pass as bytes, for a browser sandbox to read: never decoded
	// here, cut at the cap like any body.
	res, err := f.Fetch(context.Background(), Request{URL: u.url("pages.test", "/pdf"), Profile: p})
	if err != nil || res.Kind != KindPDF || len(res.Body) != 1234 || res.Charset != "" {
		t.Fatalf("pdf: %v %+v", err, res)
	}
	res, err = f.Fetch(context.Background(), Request{URL: u.url("pages.test", "/sniffed-pdf"), Profile: p})
	if err != nil || res.Kind != KindPDF || !bytes.HasPrefix(res.Body, []byte("%PDF-1.4\n%\xe2\xe3")) {
		t.Fatalf("sniffed pdf: %v %+v", err, res)
	}
	res, err = f.Fetch(context.Background(), Request{URL: u.url("pages.test", "/big-pdf"), Profile: p, MaxBytes: 100})
	if err != nil || res.Kind != KindPDF || len(res.Body) != 100 || !res.Truncated {
		t.Fatalf("pdf over the cap: %v %+v", err, res)
	}
	_, err = f.Fetch(context.Background(), Request{URL: u.url("pages.test", "/sniffed-png"), Profile: p})
	if fe := fetchErr(t, err); fe.Code != CodeUnsupported || fe.ContentType != "image/png" {
		t.Fatalf("png: %+v", fe)
	}
	res, err = f.Fetch(context.Background(), Request{URL: u.url("pages.test", "/sniffed-html"), Profile: p})
	if err != nil || res.Kind != KindHTML {
		t.Fatalf("sniffed html: %v %+v", err, res)
	}
}

func TestFetchTimeoutAndUpstreamErrors(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow-headers":
			<-release
		case "/slow-body":
			w.Header().Set("Content-Type", "text/plain")
			w.Write([]byte("start"))
			w.(http.Flusher).Flush()
			<-release
		case "/hangup":
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		}
	}), false)
	f, p := u.fetcher(t, func(p *egress.Profile) { p.TotalTimeout, p.ConnectTimeout = time.Second, time.Second })
	for _, path := range []string{"/slow-headers", "/slow-body"} {
		start := time.Now()
		_, err := f.Fetch(context.Background(), Request{URL: u.url("pages.test", path), Profile: p})
		if fe := fetchErr(t, err); fe.Code != CodeTimeout || fe.Status != http.StatusBadGateway {
			t.Fatalf("%s: %+v", path, fe)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("%s: the timeout of 1s took %s", path, d)
		}
	}
	_, err := f.Fetch(context.Background(), Request{URL: u.url("pages.test", "/hangup"), Profile: p})
	if fe := fetchErr(t, err); fe.Code != CodeUpstream {
		t.Fatalf("hang-up: %+v", fe)
	}
	// Nothing listens on the next port: connect refused is an upstream error.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	f2, p2 := u.fetcher(t, func(p *egress.Profile) { p.Allow[0].Ports = []int{port} })
	_, err = f2.Fetch(context.Background(), Request{URL: "http://pages.test:" + strconv.Itoa(port) + "/", Profile: p2})
	if fe := fetchErr(t, err); fe.Code != CodeUpstream {
		t.Fatalf("refused connection: %+v", fe)
	}
}

// The Host header and TLS name are the URL's; the address is the checked one.
func TestFetchSendsNoCredentialsOrFragment(t *testing.T) {
	var got *http.Request
	u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok")
	}), false)
	f, p := u.fetcher(t)
	if _, err := f.Fetch(context.Background(), Request{URL: u.url("PAGES.test", "/a?q=1#frag"), Profile: p}); err != nil {
		t.Fatal(err)
	}
	if got.Host != "pages.test:"+strconv.Itoa(u.port) || got.URL.RawQuery != "q=1" || got.Header.Get("Cookie") != "" || got.Header.Get("Authorization") != "" {
		t.Fatalf("upstream saw host %q query %q headers %v", got.Host, got.URL.RawQuery, got.Header)
	}
	if _, err := url.Parse(got.RequestURI); err != nil || strings.Contains(got.RequestURI, "frag") {
		t.Fatalf("request URI %q", got.RequestURI)
	}
}
