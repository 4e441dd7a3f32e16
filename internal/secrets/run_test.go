package secrets

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/sandboxd/sandboxd/redact"
)

const testSet = `secrets:
  - name: stripe
    tenants: [acme]
    hosts: ["api.stripe.com"]
    header: "Authorization: Bearer {secret}"
    value_env: STRIPE_KEY
  - name: search
    tenants: [acme]
    hosts: ["*.search.test"]
    schemes: [https, http]
    query: api_key
    value_env: SEARCH_KEY
  - name: basic
    tenants: [acme]
    hosts: ["basic.test"]
    basic_auth: {username: "user", password: "{secret}"}
    value_env: BASIC_KEY
`

var runEnv = testEnv(map[string]string{"STRIPE_KEY": testValue, "SEARCH_KEY": "search-VALUE-0123456789/+=", "BASIC_KEY": "basic-VALUE-9876543210"})

func testRun(t testing.TB) (*Set, *Run) {
	t.Helper()
	set, err := Parse("s.yaml", []byte(testSet), runEnv)
	if err != nil {
		t.Fatal(err)
	}
	return set, NewRun("acme", []*Secret{set.Get("stripe"), set.Get("search"), set.Get("basic")})
}

func newReq(t testing.TB, method, rawURL string, hdr map[string]string, body string) *http.Request {
	t.Helper()
	var b io.Reader
	if body != "" {
		b = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, rawURL, b)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

func TestRunEnvAndPlaceholders(t *testing.T) {
	_, r := testRun(t)
	env := r.Env()
	if len(env) != 3 {
		t.Fatal(env)
	}
	re := regexp.MustCompile(`^sbx_secret_[a-z2-7]{32}$`)
	for k, v := range env {
		if !strings.HasPrefix(k, "SANDBOXD_SECRET_") || !re.MatchString(v) || len(v) != PlaceholderLen {
			t.Errorf("%s=%s", k, v)
		}
	}
	_, r2 := testRun(t)
	if r2.Env()["SANDBOXD_SECRET_STRIPE"] == env["SANDBOXD_SECRET_STRIPE"] {
		t.Error("two runs share a placeholder")
	}
	if !r.HTTPS() || !r.Intercepts("api.stripe.com", 443) || r.Intercepts("api.stripe.com", 8443) || r.Intercepts("evil.test", 443) || !r.Intercepts("x.search.test", 443) {
		t.Error("Intercepts")
	}
}

func TestPrepareInjects(t *testing.T) {
	_, r := testRun(t)
	ph := r.Env()
	cases := []struct {
		name         string
		req          *http.Request
		scheme, host string
		port         uint16
		check        func(*http.Request) bool
	}{
		{"header template", newReq(t, "POST", "https://api.stripe.com/v1/charges", map[string]string{"Authorization": "Bearer " + ph["SANDBOXD_SECRET_STRIPE"]}, ""), "https", "api.stripe.com", 443,
			func(q *http.Request) bool { return q.Header.Get("Authorization") == "Bearer "+testValue }},
		{"bare placeholder", newReq(t, "GET", "https://api.stripe.com/", map[string]string{"Authorization": ph["SANDBOXD_SECRET_STRIPE"]}, ""), "https", "api.stripe.com", 443,
			func(q *http.Request) bool { return q.Header.Get("Authorization") == "Bearer "+testValue }},
		{"query", newReq(t, "GET", "http://x.search.test/q?q=cats&api_key="+ph["SANDBOXD_SECRET_SEARCH"]+"&n=1", nil, ""), "http", "x.search.test", 80,
			func(q *http.Request) bool {
				return q.URL.RawQuery == "q=cats&api_key="+url.QueryEscape("search-VALUE-0123456789/+=")+"&n=1"
			}},
		{"basic", newReq(t, "GET", "https://basic.test/", map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("user:"+ph["SANDBOXD_SECRET_BASIC"]))}, ""), "https", "basic.test", 443,
			func(q *http.Request) bool {
				u, p, ok := q.BasicAuth()
				return ok && u == "user" && p == "basic-VALUE-9876543210"
			}},
	}
	for _, c := range cases {
		got, d := r.Prepare(c.req, c.scheme, c.host, c.port)
		if d != nil || len(got) != 1 || !c.check(c.req) {
			t.Errorf("%s: injected %v, denial %v, request %v %v", c.name, got, d, c.req.URL, c.req.Header)
		}
	}
	// No placeholder: nothing injected, nothing denied.
	req := newReq(t, "GET", "https://api.stripe.com/", map[string]string{"Authorization": "Bearer mine"}, "")
	if got, d := r.Prepare(req, "https", "api.stripe.com", 443); got != nil || d != nil || req.Header.Get("Authorization") != "Bearer mine" {
		t.Errorf("no placeholder: %v %v", got, d)
	}
}

// TestPrepareDenies tries every way of sending a placeholder where it
// does not belong.
func TestPrepareDenies(t *testing.T) {
	_, r := testRun(t)
	st := r.Env()["SANDBOXD_SECRET_STRIPE"]
	bearer := map[string]string{"Authorization": "Bearer " + st}
	cases := []struct {
		name         string
		req          *http.Request
		scheme, host string
		port         uint16
		elsewhere    bool
	}{
		{"another host", newReq(t, "GET", "https://evil.test/", bearer, ""), "https", "evil.test", 443, true},
		{"another port", newReq(t, "GET", "https://api.stripe.com:8443/", bearer, ""), "https", "api.stripe.com", 8443, true},
		{"plain http", newReq(t, "GET", "http://api.stripe.com/", bearer, ""), "http", "api.stripe.com", 80, true},
		{"in the URL query", newReq(t, "GET", "https://api.stripe.com/?k="+st, nil, ""), "https", "api.stripe.com", 443, false},
		{"in the URL path", newReq(t, "GET", "https://api.stripe.com/"+st, nil, ""), "https", "api.stripe.com", 443, false},
		{"percent-encoded in the path", newReq(t, "GET", "https://api.stripe.com/"+url.PathEscape(strings.ReplaceAll(st, "_", "%5F")), nil, ""), "https", "api.stripe.com", 443, false},
		{"upper case", newReq(t, "GET", "https://api.stripe.com/", map[string]string{"Authorization": "Bearer " + strings.ToUpper(st)}, ""), "https", "api.stripe.com", 443, false},
		{"another header", newReq(t, "GET", "https://api.stripe.com/", map[string]string{"X-Leak": st}, ""), "https", "api.stripe.com", 443, false},
		{"slot and another header", newReq(t, "GET", "https://api.stripe.com/", map[string]string{"Authorization": "Bearer " + st, "X-Leak": "a" + st}, ""), "https", "api.stripe.com", 443, false},
		{"a header name", newReq(t, "GET", "https://api.stripe.com/", map[string]string{"X-" + st: "1"}, ""), "https", "api.stripe.com", 443, false},
		{"the template twice", newReq(t, "GET", "https://api.stripe.com/", map[string]string{"Authorization": "Bearer " + st + " " + st}, ""), "https", "api.stripe.com", 443, false},
		{"fragment to evil", newReq(t, "GET", "https://evil.test/#"+st, nil, ""), "https", "evil.test", 443, true},
		{"basic to evil", newReq(t, "GET", "https://evil.test/", map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("x:"+st))}, ""), "https", "evil.test", 443, true},
		{"another secret's slot", newReq(t, "GET", "https://x.search.test/?api_key="+st, nil, ""), "https", "x.search.test", 443, true},
	}
	for _, c := range cases {
		got, d := r.Prepare(c.req, c.scheme, c.host, c.port)
		if d == nil || got != nil {
			t.Errorf("%s: not denied (injected %v)", c.name, got)
			continue
		}
		if d.Secret != "stripe" || d.Elsewhere != c.elsewhere || strings.Contains(d.Reason, testValue) {
			t.Errorf("%s: %+v", c.name, d)
		}
		if strings.Contains(c.req.Header.Get("Authorization"), testValue) || strings.Contains(c.req.URL.String(), testValue) {
			t.Errorf("%s: the value was written into a denied request", c.name)
		}
	}
	// Two Authorization headers: not the slot, so misplaced.
	req := newReq(t, "GET", "https://api.stripe.com/", nil, "")
	req.Header.Add("Authorization", "Bearer "+st)
	req.Header.Add("Authorization", "Bearer "+st)
	if _, d := r.Prepare(req, "https", "api.stripe.com", 443); d == nil || d.Elsewhere {
		t.Errorf("two Authorization headers: %+v", d)
	}
}

func TestScanBody(t *testing.T) {
	_, r := testRun(t)
	st := r.Env()["SANDBOXD_SECRET_STRIPE"]
	for _, body := range []string{st, "x=" + st + "&y=1", strings.Repeat("a", 70000) + st, strings.Repeat("b", 100) + strings.ToUpper(st)} {
		rc := r.ScanBody(io.NopCloser(iotest.OneByteReader(strings.NewReader(body))), "https", "api.stripe.com", 443)
		got, err := io.ReadAll(rc)
		var d *Denial
		if !errors.As(err, &d) || d.Secret != "stripe" || d.Elsewhere {
			t.Errorf("body of %d bytes: %v", len(body), err)
		}
		if bytes.Contains(bytes.ToLower(got), []byte(st[:len(st)-4])) {
			t.Errorf("the placeholder was handed on before the denial: %q", got[max(0, len(got)-60):])
		}
	}
	clean := strings.Repeat("hello world ", 10000) + "sbx_secret_" // a prefix alone is nothing
	got, err := io.ReadAll(r.ScanBody(io.NopCloser(iotest.HalfReader(strings.NewReader(clean))), "https", "api.stripe.com", 443))
	if err != nil || string(got) != clean {
		t.Errorf("a clean body: %v, %d bytes of %d", err, len(got), len(clean))
	}
	// To another host: elsewhere.
	_, err = io.ReadAll(r.ScanBody(io.NopCloser(strings.NewReader(st)), "https", "evil.test", 443))
	if d := (*Denial)(nil); !errors.As(err, &d) || !d.Elsewhere {
		t.Errorf("a body to another host: %v", err)
	}
}

func TestScanTunnel(t *testing.T) {
	_, r := testRun(t)
	st := r.Env()["SANDBOXD_SECRET_SEARCH"]
	s := r.NewScan("", "mirror.test", 443)
	data := []byte("GET /?k=" + st + " HTTP/1.1\r\n")
	for i, b := range data {
		d := s.Feed([]byte{b})
		if d != nil {
			if i != 8+len(st)-1 || d.Secret != "search" || !d.Elsewhere {
				t.Errorf("found at %d: %+v", i, d)
			}
			return
		}
	}
	t.Error("the placeholder in a tunnel was not found")
}

func TestLiteralsReader(t *testing.T) {
	set, _ := testRun(t)
	l := NewLiterals(set.Get("stripe"), set.Get("basic"))
	basicCred := base64.StdEncoding.EncodeToString([]byte("user:basic-VALUE-9876543210"))
	in := "a " + testValue + " b " + basicCred + " c " + url.QueryEscape(testValue) + " " + strings.Repeat("z", 40000) + testValue
	for _, rd := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.HalfReader, iotest.DataErrReader} {
		rr := l.NewReader(rd(strings.NewReader(in)))
		out, err := io.ReadAll(rr)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(out, []byte(testValue)) || bytes.Contains(out, []byte(basicCred)) || bytes.Contains(out, []byte("basic-VALUE")) {
			t.Errorf("a value came through: %q", out[:200])
		}
		if !bytes.HasPrefix(out, []byte("a [REDACTED:secret_stripe] b [REDACTED:secret_basic] c ")) || Count(rr) != 4 {
			t.Errorf("got %q..., %d", out[:100], Count(rr))
		}
	}
	if s := l.String("x" + testValue); s != "x[REDACTED:secret_stripe]" {
		t.Error(s)
	}
}

// The redact rules built from the literals redact a value of any length,
// whole, through the redactor's own engine.
func TestRules(t *testing.T) {
	long := strings.Repeat("Ab3", 400) // 1200 bytes
	env := testEnv(map[string]string{"LONG": long, "STRIPE_KEY": testValue})
	set, err := Parse("s.yaml", []byte("secrets:\n  - {name: long, tenants: [a], hosts: [a.test], header: 'A: {secret}', value_env: LONG}\n  - {name: stripe, tenants: [a], hosts: [a.test], header: 'A: {secret}', value_env: STRIPE_KEY}\n"), env)
	if err != nil {
		t.Fatal(err)
	}
	red, err := redact.New(NewLiterals(set.Get("long"), set.Get("stripe")).Rules())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{long, "x=" + long + ";", testValue, `{"k":"` + testValue + `"}`, base64.StdEncoding.EncodeToString([]byte(testValue))} {
		out, c := red.String(in)
		if strings.Contains(out, "Ab3Ab3Ab3") || strings.Contains(out, "THE-REAL-VALUE") || c.Total() == 0 {
			t.Errorf("%.40q -> %.80q %v", in, out, c)
		}
	}
	var w bytes.Buffer
	rw := red.NewWriter(&w)
	for i := 0; i < len(long); i += 7 {
		_, _ = rw.Write([]byte(long[i:min(i+7, len(long))]))
	}
	_ = rw.Close()
	if strings.Contains(w.String(), "Ab3Ab3") {
		t.Errorf("a streamed value: %q", w.String())
	}
}

func TestStoreReload(t *testing.T) {
	set, _ := testRun(t)
	st := NewStore(set)
	var buf bytes.Buffer
	log := slog.New(st.LogHandler(slog.NewJSONHandler(&buf, nil))).With("bound", "x")
	log.Info("m", "v", testValue)
	k1, _ := st.Rules()
	// The value is rotated: both the old and the new one stay redacted.
	env := testEnv(map[string]string{"STRIPE_KEY": "rotated-VALUE-abcdefghij", "SEARCH_KEY": "search-VALUE-0123456789/+=", "BASIC_KEY": "basic-VALUE-9876543210"})
	set2, err := Parse("s.yaml", []byte(strings.Replace(testSet, "  - name: basic\n    tenants: [acme]\n    hosts: [\"basic.test\"]\n    basic_auth: {username: \"user\", password: \"{secret}\"}\n    value_env: BASIC_KEY\n", "", 1)), env)
	if err != nil {
		t.Fatal(err)
	}
	ch := st.Load(set2)
	if strings.Join(ch.Changed, ",") != "stripe" || strings.Join(ch.Removed, ",") != "basic" || len(ch.Added) != 0 {
		t.Errorf("change %+v", ch)
	}
	k2, rules := st.Rules()
	if k1 == k2 || len(rules) == 0 {
		t.Errorf("keys %s %s", k1, k2)
	}
	log.Info("m", "old", testValue, "new", "rotated-VALUE-abcdefghij", "gone", "basic-VALUE-9876543210")
	log.WithGroup("g").Error(testValue, "e", errors.New("x "+testValue))
	out := buf.String()
	for _, v := range []string{testValue, "rotated-VALUE", "basic-VALUE"} {
		if strings.Contains(out, v) {
			t.Errorf("the log holds %s:\n%s", v, out)
		}
	}
	if !strings.Contains(out, `"bound":"x"`) || strings.Count(out, "[REDACTED:secret_stripe]") < 3 {
		t.Errorf("log:\n%s", out)
	}
	if st.Set().Get("basic") != nil || st.Set().Get("stripe").Value() != "rotated-VALUE-abcdefghij" {
		t.Error("the new set is not in force")
	}
	if s := st.Literals().String(testValue); s == testValue {
		t.Error("a retired value is no longer redacted")
	}
	_ = slog.New(st.LogHandler(slog.DiscardHandler)).Handler().Enabled(context.Background(), slog.LevelInfo)
}

func TestCA(t *testing.T) {
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Leaf("api.stripe.com")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := ca.Leaf("api.stripe.com")
	if again != leaf {
		t.Error("the leaf is not cached")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.PEM()) {
		t.Fatal("the CA's PEM does not parse")
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "api.stripe.com"}); err != nil {
		t.Error(err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "evil.test"}); err == nil {
		t.Error("the leaf verifies for another name")
	}
	if bytes.Contains(ca.PEM(), []byte("PRIVATE")) {
		t.Error("the CA's PEM holds a key")
	}
	if _, err := ca.Leaf(""); err == nil {
		t.Error("a leaf for no name")
	}
	_ = tls.Certificate{}
}
