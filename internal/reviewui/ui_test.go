package reviewui

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/labstack/echo/v4"
	xhtml "golang.org/x/net/html"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/auth/authtest"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
	"github.com/sandboxd/sandboxd/internal/testclock"
)

const (
	keyAgent = "sbx_agent_acme_0123456789"
	keyRev   = "sbx_reviewer_acme_0123456"
	keySec   = "sbx_security_other_01234"
	keyAdmin = "sbx_admin_ops_01234567890"
	origin   = "http://review.test"
)

// hostile strings planted in every field a page shows.
var hostile = []string{
	`<script>alert(1)</script>`,
	`"><img src=x onerror=alert(2)>`,
	`</textarea><script>alert(3)</script>`,
	`'><svg onload=alert(4)>`,
	`</pre><b id=injected>x</b>`,
}

// hostileAll joins them, for fields that hold one string.
var hostileAll = strings.Join(hostile, " ")

type fixture struct {
	t     *testing.T
	h     http.Handler
	keys  *auth.Keyring
	log   audit.Log
	caps  *capture.SQLite
	clock *testclock.Clock
	// ids of planted records and captures
	acmeExec, acmeFetch, otherExec, otherCap, acmeExecCap, acmeFetchCap string
}

// keysFile is the test's keys: agent-1, rev-1, sec-1 and ops-1.
var keysFile = fmt.Sprintf(`keys:
  - {id: agent-1, tenant: acme, key: %s, roles: [agent]}
  - {id: rev-1, tenant: acme, key: %s, roles: [reviewer]}
  - {id: sec-1, tenant: other, key: %s, roles: [security]}
  - {id: ops-1, tenant: ops, key: %s, roles: [admin]}
`, keyAgent, keyRev, keySec, keyAdmin)

func keyring(t *testing.T) *auth.Keyring { return authtest.Keyring(t, keysFile) }

func gzipped(s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	io.WriteString(zw, s)
	zw.Close()
	return b.Bytes()
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	log, err := audit.Open("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	caps, err := capture.Open(t.TempDir(), capture.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { caps.Close() })
	f := &fixture{t: t, log: log, caps: caps, clock: testclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	ctx := context.Background()

	put := func(c *capture.Capture) string {
		if err := caps.Put(ctx, c); err != nil {
			t.Fatal(err)
		}
		return c.ID
	}
	f.acmeExecCap = put(&capture.Capture{Kind: "exec", Tenant: "acme", KeyID: "agent-1", RequestID: hostileAll,
		Meta: map[string]string{"exec_id": "ex_1", "input.0": hostileAll + ".csv", "note": hostileAll},
		Parts: []capture.Part{
			{Name: "code", ContentType: "text/x-python", Data: []byte("print('''" + hostileAll + "''')\n# bidi \u202e evil\n")},
			{Name: "stdin", Data: []byte(hostileAll)},
			{Name: "input.0", Data: []byte("a,b\n" + hostileAll + "\n")},
			{Name: "stdout", Data: []byte(hostileAll + "\n")},
			{Name: "stderr", Data: []byte("Traceback: " + hostileAll)},
			{Name: "output.0", Data: append([]byte{0, 1, 2, 0x89, 'P', 'N', 'G'}, []byte(hostileAll)...)},
		}})
	page := `<html><head><title>` + hostileAll + `</title><script>document.title="PWNED"</script></head><body><p>Visible words</p>` + hostileAll + `</body></html>`
	f.acmeFetchCap = put(&capture.Capture{Kind: "fetch", Tenant: "acme", KeyID: "agent-1",
		Meta: map[string]string{"fetch_id": "fe_1", "url": "http://pages.test/" + hostileAll, "charset": "utf-8"},
		Parts: []capture.Part{
			{Name: "raw", Data: gzipped(page)},
			{Name: "headers", Data: []byte("HTTP 200 OK\r\nContent-Encoding: gzip\r\nContent-Type: text/html\r\nX-Evil: " + hostileAll + "\r\n")},
			{Name: "returned.json", Data: []byte(fmt.Sprintf(`{"title":%q,"content":%q}`, hostileAll, "Visible words "+hostileAll))},
		}})
	f.otherCap = put(&capture.Capture{Kind: "exec", Tenant: "other", KeyID: "x",
		Parts: []capture.Part{{Name: "code", Data: []byte("print('OTHER_TENANT_SECRET')")}}})

	add := func(r *audit.Record) string {
		if err := log.Append(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	exit := 1
	f.acmeExec = add(&audit.Record{Kind: audit.KindExec, Tenant: "acme", KeyID: hostileAll, Session: "sess-1", Subject: hostileAll,
		CodeSHA256: strings.Repeat("ab", 32), Status: hostileAll, ExitCode: &exit, Message: hostileAll, Image: hostileAll,
		ExecProfile: &audit.ProfileRef{Name: hostileAll, Version: hostileAll}, Hosts: []string{hostileAll},
		Detail: map[string]string{hostileAll: hostileAll}, Redactions: map[string]int{hostileAll: 2},
		Inputs:     []audit.Output{{Name: "files/in.csv", Size: 2048, SHA256: strings.Repeat("cd", 32)}, {Name: hostileAll, Size: 1, SHA256: hostileAll}},
		Outputs:    []audit.Output{{Name: hostileAll, Size: 3, SHA256: hostileAll}},
		CaptureIDs: []string{f.acmeExecCap}})
	f.acmeFetch = add(&audit.Record{Kind: audit.KindFetch, Tenant: "acme", KeyID: "agent-1", Session: "sess-1", Subject: "fe_1", Status: "ok",
		EgressProfile: &audit.ProfileRef{Name: "pages", Version: "v1"}, Hosts: []string{"pages.test"},
		Egress: []audit.Decision{
			{URL: "http://pages.test/" + hostileAll, Method: "GET", Host: "pages.test", Port: 80, IP: "127.0.0.1", Verdict: "allow", Code: "ALLOWED", Rule: hostileAll, Status: 302},
			{URL: "http://evil.test/", Method: "GET", Host: "evil.test", Verdict: "deny", Code: "DENIED", Rule: "no-evil", Reason: hostileAll},
			{Method: "POST", Host: "api.stripe.test", Port: 443, Verdict: "allow", Code: "secret_injected", Secret: "stripe_" + "injected", Reason: "secret \"stripe\" injected"},
		},
		Detail:     map[string]string{"url": "http://pages.test/" + hostileAll},
		CaptureIDs: []string{f.acmeFetchCap}})
	f.otherExec = add(&audit.Record{Kind: audit.KindExec, Tenant: "other", KeyID: "x", Session: "sess-1", Subject: "ex_other", Status: "ok",
		Message: "OTHER_TENANT_RECORD", CaptureIDs: []string{f.otherCap}})

	f.keys = keyring(t)
	f.h = mount(New(Config{Audit: log, Captures: caps, Keys: f.keys, Now: f.clock.Now, Origins: []string{origin}}))
	return f
}

// mount puts the page's routes on a router of their own at /ui, as the
// API server does on its own.
func mount(h *Handler) http.Handler {
	e := echo.New()
	h.Register(e.Group("/ui"))
	return e
}

// request is one request to the page.
type request struct {
	method, path string
	form         url.Values
	cookies      []*http.Cookie
	// headers; by default Origin is this page's and Sec-Fetch-Site is
	// same-origin, as a browser sends on a same-origin form post.
	headers map[string]string
}

func (f *fixture) do(rq request) *httptest.ResponseRecorder {
	f.t.Helper()
	var body io.Reader
	if rq.form != nil {
		body = strings.NewReader(rq.form.Encode())
	}
	if rq.method == "" {
		rq.method = http.MethodGet
	}
	req := httptest.NewRequest(rq.method, "http://review.test"+rq.path, body)
	if rq.form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if rq.method == http.MethodPost {
		req.Header.Set("Origin", origin)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	for k, v := range rq.headers {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	for _, c := range rq.cookies {
		req.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	checkHeaders(f.t, rq.method+" "+rq.path, rec)
	return rec
}

// checkHeaders asserts the security headers every response carries.
func checkHeaders(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	h := rec.Header()
	csp := h.Get("Content-Security-Policy")
	if !strings.HasPrefix(csp, "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'") {
		t.Errorf("%s: Content-Security-Policy %q", what, csp)
	}
	if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("%s: nosniff %q, Referrer-Policy %q", what, h.Get("X-Content-Type-Options"), h.Get("Referrer-Policy"))
	}
	if ct := h.Get("Content-Type"); strings.HasPrefix(ct, "text/html") && strings.Contains(strings.ToLower(rec.Body.String()), "<script") {
		t.Errorf("%s: the page holds a script element", what)
	}
}

var csrfPattern = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, body string) string {
	t.Helper()
	m := csrfPattern.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF field in %s", body)
	}
	return html.UnescapeString(m[1])
}

func cookieOf(rec *httptest.ResponseRecorder, name string) *http.Cookie {
	for _, c := range rec.Result().Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// loginForm fetches the sign-in form: its token and cookie.
func (f *fixture) loginForm() (string, *http.Cookie) {
	f.t.Helper()
	rec := f.do(request{path: "/ui/login"})
	if rec.Code != 200 {
		f.t.Fatalf("GET /ui/login: %d", rec.Code)
	}
	c := cookieOf(rec, loginCookie)
	if c == nil {
		f.t.Fatal("no sign-in cookie")
	}
	return csrfOf(f.t, rec.Body.String()), c
}

// signIn signs in with key and returns the session cookie.
func (f *fixture) signIn(key string) *http.Cookie {
	f.t.Helper()
	tok, lc := f.loginForm()
	rec := f.do(request{method: "POST", path: "/ui/login", form: url.Values{"csrf": {tok}, "key": {key}}, cookies: []*http.Cookie{lc}})
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/ui/audit" {
		f.t.Fatalf("sign-in: %d %s %s", rec.Code, rec.Header().Get("Location"), rec.Body)
	}
	c := cookieOf(rec, sessionCookie)
	if c == nil {
		f.t.Fatal("no session cookie")
	}
	return c
}

func (f *fixture) get(c *http.Cookie, path string, want int) string {
	f.t.Helper()
	rec := f.do(request{path: path, cookies: []*http.Cookie{c}})
	if rec.Code != want {
		f.t.Fatalf("GET %s: %d, want %d: %s", path, rec.Code, want, rec.Body)
	}
	return rec.Body.String()
}

func TestSignInCookie(t *testing.T) {
	f := newFixture(t)
	tok, lc := f.loginForm()
	if !lc.HttpOnly || lc.SameSite != http.SameSiteStrictMode || lc.Path != "/ui/" {
		t.Errorf("sign-in cookie flags: %+v", lc)
	}
	rec := f.do(request{method: "POST", path: "/ui/login", form: url.Values{"csrf": {tok}, "key": {keyRev}}, cookies: []*http.Cookie{lc}})
	if rec.Code != http.StatusSeeOther {
		t.Fatalf("sign-in: %d %s", rec.Code, rec.Body)
	}
	c := cookieOf(rec, sessionCookie)
	if c == nil {
		t.Fatal("no session cookie")
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ui/" || c.MaxAge <= 0 || c.MaxAge > 8*3600 || c.Expires.IsZero() {
		t.Errorf("session cookie flags: %+v", c)
	}
	if c.Secure {
		t.Errorf("Secure on a plain-HTTP request without SecureCookie")
	}
	if len(c.Value) < 40 || strings.Contains(c.Value, keyRev) {
		t.Errorf("session cookie value %q", c.Value)
	}
	for _, sc := range rec.Result().Header.Values("Set-Cookie") {
		if strings.Contains(sc, keyRev) {
			t.Errorf("a cookie holds the key: %s", sc)
		}
	}
	if cl := cookieOf(rec, loginCookie); cl == nil || cl.MaxAge >= 0 {
		t.Errorf("sign-in cookie not cleared: %+v", cl)
	}
	body := f.get(c, "/ui/audit", 200)
	if !strings.Contains(body, "rev-1") || strings.Contains(body, keyRev) {
		t.Errorf("audit page after sign-in: who is missing or the key is shown")
	}
	// Over TLS the cookie is Secure.
	req := httptest.NewRequest("GET", "https://review.test/ui/login", nil)
	req.TLS = &tls.ConnectionState{}
	rec = httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	if c := cookieOf(rec, loginCookie); c == nil || !c.Secure {
		t.Errorf("cookie over TLS: %+v", c)
	}
	rec = f.do(request{path: "/ui/login", headers: map[string]string{"X-Forwarded-Proto": "https"}})
	if c := cookieOf(rec, loginCookie); c == nil || !c.Secure {
		t.Errorf("cookie behind a TLS proxy: %+v", c)
	}
}

func TestSignInRefusals(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name, key string
		code      int
		says      string
	}{
		{"bad key", "sbx_not_a_key", http.StatusUnauthorized, "not valid"},
		{"empty key", "", http.StatusUnauthorized, "not valid"},
		{"agent key", keyAgent, http.StatusForbidden, "may not sign in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, lc := f.loginForm()
			rec := f.do(request{method: "POST", path: "/ui/login", form: url.Values{"csrf": {tok}, "key": {tc.key}}, cookies: []*http.Cookie{lc}})
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.says) {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			if cookieOf(rec, sessionCookie) != nil {
				t.Fatal("a session cookie was set")
			}
			if tc.key != "" && strings.Contains(rec.Body.String(), tc.key) {
				t.Fatal("the refused key is shown back")
			}
		})
	}
	for _, key := range []string{keySec, keyAdmin} {
		f.signIn(key)
	}
}

func TestCSRF(t *testing.T) {
	f := newFixture(t)
	tok, lc := f.loginForm()
	good := url.Values{"csrf": {tok}, "key": {keyRev}}
	for _, tc := range []struct {
		name    string
		form    url.Values
		cookies []*http.Cookie
		headers map[string]string
	}{
		{"no token", url.Values{"key": {keyRev}}, []*http.Cookie{lc}, nil},
		{"wrong token", url.Values{"csrf": {"x" + tok}, "key": {keyRev}}, []*http.Cookie{lc}, nil},
		{"no cookie", good, nil, nil},
		{"planted cookie", good, []*http.Cookie{{Name: loginCookie, Value: "attacker"}}, nil},
		{"other origin", good, []*http.Cookie{lc}, map[string]string{"Origin": "http://evil.test", "Sec-Fetch-Site": ""}},
		{"cross-site", good, []*http.Cookie{lc}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"same-site", good, []*http.Cookie{lc}, map[string]string{"Sec-Fetch-Site": "same-site"}},
		{"null origin, no fetch metadata", good, []*http.Cookie{lc}, map[string]string{"Origin": "null", "Sec-Fetch-Site": ""}},
		{"no origin at all", good, []*http.Cookie{lc}, map[string]string{"Origin": "", "Sec-Fetch-Site": ""}},
		{"foreign referer", good, []*http.Cookie{lc}, map[string]string{"Origin": "", "Sec-Fetch-Site": "", "Referer": "http://evil.test/ui/login"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := f.do(request{method: "POST", path: "/ui/login", form: tc.form, cookies: tc.cookies, headers: tc.headers})
			if rec.Code != http.StatusForbidden || cookieOf(rec, sessionCookie) != nil {
				t.Fatalf("%d %v", rec.Code, rec.Result().Cookies())
			}
		})
	}
	// What browsers send under Referrer-Policy: no-referrer passes.
	for _, hd := range []map[string]string{
		{"Origin": "null", "Sec-Fetch-Site": "same-origin"},
		{"Origin": "", "Sec-Fetch-Site": "", "Referer": origin + "/ui/login"},
		{"Origin": origin, "Sec-Fetch-Site": ""},
	} {
		rec := f.do(request{method: "POST", path: "/ui/login", form: good, cookies: []*http.Cookie{lc}, headers: hd})
		if rec.Code != http.StatusSeeOther {
			t.Fatalf("%v: %d %s", hd, rec.Code, rec.Body)
		}
	}

	// Sign-out needs the session's token and this origin.
	c := f.signIn(keyRev)
	body := f.get(c, "/ui/audit", 200)
	st := csrfOf(t, body)
	for _, tc := range []struct {
		form    url.Values
		headers map[string]string
	}{
		{url.Values{}, nil},
		{url.Values{"csrf": {tok}}, nil},
		{url.Values{"csrf": {st}}, map[string]string{"Origin": "http://evil.test", "Sec-Fetch-Site": "cross-site"}},
	} {
		rec := f.do(request{method: "POST", path: "/ui/logout", form: tc.form, cookies: []*http.Cookie{c}, headers: tc.headers})
		if rec.Code != http.StatusForbidden {
			t.Fatalf("sign-out %v: %d", tc.form, rec.Code)
		}
		f.get(c, "/ui/audit", 200) // still signed in
	}
	rec := f.do(request{method: "POST", path: "/ui/logout", form: url.Values{"csrf": {st}}, cookies: []*http.Cookie{c}})
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/ui/login" {
		t.Fatalf("sign-out: %d %s", rec.Code, rec.Header().Get("Location"))
	}
	if cl := cookieOf(rec, sessionCookie); cl == nil || cl.MaxAge >= 0 {
		t.Errorf("session cookie not cleared: %+v", cl)
	}
	rec = f.do(request{path: "/ui/audit", cookies: []*http.Cookie{c}})
	if rec.Code != http.StatusSeeOther || !strings.HasPrefix(rec.Header().Get("Location"), "/ui/login?") {
		t.Fatalf("after sign-out: %d %s", rec.Code, rec.Header().Get("Location"))
	}
}

// TestNext: a link followed without a session comes back after the
// sign-in, to this page only.
func TestNext(t *testing.T) {
	f := newFixture(t)
	for next, want := range map[string]string{
		"/ui/audit/" + f.acmeExec + "?x=1": "/ui/audit/" + f.acmeExec + "?x=1",
		"//evil.test/ui/":                  "/ui/audit",
		"https://evil.test/ui/":            "/ui/audit",
		"/ui/\\evil.test":                  "/ui/audit",
		"/elsewhere":                       "/ui/audit",
	} {
		rec := f.do(request{path: "/ui/login?" + url.Values{"next": {next}}.Encode()})
		tok, lc := csrfOf(t, rec.Body.String()), cookieOf(rec, loginCookie)
		form := url.Values{"csrf": {tok}, "key": {keyRev}}
		if m := regexp.MustCompile(`name="next" value="([^"]*)"`).FindStringSubmatch(rec.Body.String()); m != nil {
			form.Set("next", html.UnescapeString(m[1]))
		}
		rec = f.do(request{method: "POST", path: "/ui/login", form: form, cookies: []*http.Cookie{lc}})
		if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != want {
			t.Errorf("next %q: %d %q, want %q", next, rec.Code, rec.Header().Get("Location"), want)
		}
		// Posted directly, a foreign next is refused too.
		tok, lc = f.loginForm()
		rec = f.do(request{method: "POST", path: "/ui/login", form: url.Values{"csrf": {tok}, "key": {keyRev}, "next": {next}}, cookies: []*http.Cookie{lc}})
		if rec.Header().Get("Location") != want {
			t.Errorf("posted next %q: %q, want %q", next, rec.Header().Get("Location"), want)
		}
	}
}

func TestSessionExpiry(t *testing.T) {
	f := newFixture(t)
	c := f.signIn(keyRev)
	f.clock.Add(50 * time.Minute)
	f.get(c, "/ui/audit", 200)
	f.clock.Add(61 * time.Minute) // idle for more than an hour
	if rec := f.do(request{path: "/ui/audit", cookies: []*http.Cookie{c}}); rec.Code != http.StatusSeeOther {
		t.Fatalf("idle session: %d", rec.Code)
	}
	c = f.signIn(keyRev)
	for range 8 {
		f.clock.Add(55 * time.Minute)
		f.get(c, "/ui/audit", 200)
	}
	f.clock.Add(55 * time.Minute) // past 8 hours in all
	if rec := f.do(request{path: "/ui/audit", cookies: []*http.Cookie{c}}); rec.Code != http.StatusSeeOther {
		t.Fatalf("expired session: %d", rec.Code)
	}
	if rec := f.do(request{path: "/ui/audit", cookies: []*http.Cookie{{Name: sessionCookie, Value: "forged"}}}); rec.Code != http.StatusSeeOther {
		t.Fatalf("forged session: %d", rec.Code)
	}
}

// TestKeysReloadEndsSessions: every request checks the session's key
// against the keyring as a reload left it. A key removed, rotated, moved
// to another tenant or reduced to the agent role ends its sessions: the
// next page sends the browser to sign in, and the session is gone (it
// does not come back when the key does). The roles that decide are the
// current ones.
func TestKeysReloadEndsSessions(t *testing.T) {
	for name, edit := range map[string][2]string{
		"removed":        {"  - {id: rev-1, tenant: acme, key: " + keyRev + ", roles: [reviewer]}\n", ""},
		"rotated":        {"key: " + keyRev, "key: " + keyRev + "_rotated"},
		"role reduced":   {"key: " + keyRev + ", roles: [reviewer]", "key: " + keyRev + ", roles: [agent]"},
		"tenant changed": {"{id: rev-1, tenant: acme", "{id: rev-1, tenant: other"},
		"id changed":     {"{id: rev-1,", "{id: rev-2,"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			c := f.signIn(keyRev)
			if b := f.get(c, "/ui/audit", 200); !strings.Contains(b, "fe_1") {
				t.Fatal("the reviewer's list misses its records before the reload")
			}
			before := len(f.reads(f.acmeExecCap)) // the list's code excerpt
			changed := strings.Replace(keysFile, edit[0], edit[1], 1)
			if changed == keysFile {
				t.Fatalf("the edit %q changes nothing", edit[0])
			}
			f.keys.Replace(authtest.Keyring(t, changed))
			for _, p := range []string{"/ui/audit", "/ui/audit/" + f.acmeExec, "/ui/captures/" + f.acmeExecCap, "/ui/session?id=sess-1"} {
				rec := f.do(request{path: p, cookies: []*http.Cookie{c}})
				if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/ui/login?"+(url.Values{"next": {p}}).Encode() ||
					strings.Contains(rec.Body.String(), "fe_1") || strings.Contains(rec.Body.String(), "print(") {
					t.Fatalf("GET %s after the reload: %d %q %s", p, rec.Code, rec.Header().Get("Location"), rec.Body)
				}
			}
			// The session is gone, not only refused: it stays ended when
			// the key is back.
			f.keys.Replace(keyring(t))
			if rec := f.do(request{path: "/ui/audit", cookies: []*http.Cookie{c}}); rec.Code != http.StatusSeeOther {
				t.Fatalf("the ended session came back with the key: %d", rec.Code)
			}
			if n := len(f.reads(f.acmeExecCap)) - before; n != 0 {
				t.Errorf("%d capture reads recorded for refused requests", n)
			}
		})
	}

	// A reload that leaves the key as it was keeps its sessions; the
	// roles in force are the key's current ones.
	f := newFixture(t)
	rev, adm := f.signIn(keyRev), f.signIn(keyAdmin)
	f.get(adm, "/ui/audit?tenant=other", 200)
	f.keys.Replace(authtest.Keyring(t, strings.Replace(keysFile, "roles: [admin]", "roles: [security]", 1)+
		"  - {id: new-1, tenant: acme, key: sbx_new_key_0123456789, roles: [reviewer]}\n"))
	if b := f.get(rev, "/ui/audit", 200); !strings.Contains(b, "fe_1") {
		t.Error("the reviewer's session did not survive an unrelated reload")
	}
	if b := f.get(adm, "/ui/audit?tenant=other", http.StatusForbidden); strings.Contains(b, "ex_other") {
		t.Error("a key demoted from admin still reads another tenant")
	}
	f.get(adm, "/ui/audit/"+f.otherExec, http.StatusNotFound)
	if b := f.get(adm, "/ui/audit", 200); strings.Contains(b, "every tenant") {
		t.Error("the page still says the demoted key sees every tenant")
	}
}

func TestTenantScoping(t *testing.T) {
	f := newFixture(t)
	rev := f.signIn(keyRev) // acme
	body := f.get(rev, "/ui/audit", 200)
	if strings.Contains(body, "ex_other") || !strings.Contains(body, "fe_1") {
		t.Errorf("reviewer's list: other tenant shown or own missing")
	}
	f.get(rev, "/ui/audit?tenant=acme", 200)
	if b := f.get(rev, "/ui/audit?tenant=other", http.StatusForbidden); strings.Contains(b, "ex_other") {
		t.Error("other tenant's records shown with a 403")
	}
	f.get(rev, "/ui/audit/"+f.otherExec, http.StatusNotFound)
	f.get(rev, "/ui/captures/"+f.otherCap, http.StatusNotFound)
	f.get(rev, "/ui/captures/"+f.otherCap+"/part?name=code", http.StatusNotFound)
	f.get(rev, "/ui/session?id=sess-1&tenant=other", http.StatusForbidden)
	if b := f.get(rev, "/ui/session?id=sess-1", 200); strings.Contains(b, "ex_other") || strings.Contains(b, "OTHER_TENANT") {
		t.Error("the timeline shows another tenant's record")
	}
	if b := f.get(rev, "/ui/audit/"+f.acmeExec, 200); strings.Contains(b, "OTHER_TENANT") {
		t.Error("record page leaks")
	}
	f.get(rev, "/ui/captures/"+f.acmeFetchCap, 200)

	sec := f.signIn(keySec) // other
	if b := f.get(sec, "/ui/audit", 200); !strings.Contains(b, "ex_other") || strings.Contains(b, "fe_1") {
		t.Error("security key's list")
	}
	f.get(sec, "/ui/audit/"+f.acmeExec, http.StatusNotFound)
	f.get(sec, "/ui/captures/"+f.acmeExecCap, http.StatusNotFound)
	if b := f.get(sec, "/ui/audit/"+f.otherExec, 200); !strings.Contains(b, "OTHER_TENANT_SECRET") {
		t.Error("own capture's code not shown")
	}

	adm := f.signIn(keyAdmin) // ops, sees all
	b := f.get(adm, "/ui/audit", 200)
	if !strings.Contains(b, "ex_other") || !strings.Contains(b, "fe_1") {
		t.Error("admin's list misses a tenant")
	}
	if b := f.get(adm, "/ui/audit?tenant=other", 200); strings.Contains(b, "fe_1") || !strings.Contains(b, "ex_other") {
		t.Error("admin's tenant filter")
	}
	f.get(adm, "/ui/audit/"+f.otherExec, 200)
	f.get(adm, "/ui/captures/"+f.acmeExecCap, 200)
	if b := f.get(adm, "/ui/session?id=sess-1", 200); !strings.Contains(b, "ex_other") || !strings.Contains(b, "fe_1") {
		t.Error("admin's timeline misses a tenant")
	}
}

// TestEscaping plants hostile strings in every field of records and
// captures and checks that every page shows them escaped, never as markup.
func TestEscaping(t *testing.T) {
	f := newFixture(t)
	c := f.signIn(keyRev)
	pages := map[string]int{
		"/ui/audit":                      200,
		"/ui/audit?kind=exec":            200,
		"/ui/audit/" + f.acmeExec:        200,
		"/ui/audit/" + f.acmeFetch:       200,
		"/ui/captures/" + f.acmeExecCap:  200,
		"/ui/captures/" + f.acmeFetchCap: 200,
		"/ui/session?id=sess-1":          200,
		// Hostile input echoed back in forms, errors and timelines.
		"/ui/audit?status=" + url.QueryEscape(hostileAll) + "&session=" + url.QueryEscape(hostileAll): 200,
		"/ui/audit?since=" + url.QueryEscape(hostileAll):                                              400,
		"/ui/session?id=" + url.QueryEscape(hostileAll):                                               200,
		"/ui/audit/" + url.PathEscape(hostileAll):                                                     404,
		"/ui/captures/" + url.PathEscape(hostileAll):                                                  404,
		"/ui/captures/" + f.acmeExecCap + "/part?name=" + url.QueryEscape(hostileAll):                 404,
	}
	for path, want := range pages {
		body := f.get(c, path, want)
		for _, h := range hostile {
			if strings.Contains(body, h) {
				t.Errorf("%s: %q appears unescaped", path, h)
			}
		}
		checkMarkup(t, path, body)
	}
	// The escaped text is there for the reviewer to read.
	body := f.get(c, "/ui/captures/"+f.acmeFetchCap, 200)
	for _, want := range []string{
		"&lt;script&gt;document.title=&#34;PWNED&#34;&lt;/script&gt;", // the raw source, decoded from gzip
		"&lt;script&gt;alert(1)&lt;/script&gt;",
		"Visible words", "decoded from gzip", "X-Evil",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("capture page lacks %q", want)
		}
	}
	body = f.get(c, "/ui/audit/"+f.acmeExec, 200)
	for _, want := range []string{"&lt;/textarea&gt;&lt;script&gt;alert(3)&lt;/script&gt;", "⟨U&#43;202E⟩", "00000000  00 01 02 89 50 4e 47", "exit 1", `id="digests"`, "<td>in</td><td class=\"mono\">files/in.csv", strings.Repeat("cd", 32)} {
		if !strings.Contains(body, want) {
			t.Errorf("exec record page lacks %q", want)
		}
	}
	body = f.get(c, "/ui/audit/"+f.acmeFetch, 200)
	for _, want := range []string{"DENIED", "no-evil", "127.0.0.1", "Egress decisions", "<th>Secret</th>", "secret_injected", ">stripe_injected<"} {
		if !strings.Contains(body, want) {
			t.Errorf("fetch record page lacks %q", want)
		}
	}
}

// checkMarkup parses a page and fails on any element or attribute that
// could run script or that a planted string would create.
func checkMarkup(t *testing.T, what, body string) {
	t.Helper()
	allowed := map[string]bool{"html": true, "head": true, "meta": true, "title": true, "link": true, "body": true, "header": true,
		"nav": true, "main": true, "footer": true, "a": true, "span": true, "form": true, "input": true, "button": true, "label": true,
		"select": true, "option": true, "h1": true, "h2": true, "h3": true, "h4": true, "p": true, "table": true, "thead": true,
		"tbody": true, "tr": true, "th": true, "td": true, "dl": true, "dt": true, "dd": true, "pre": true, "code": true, "br": true,
		"details": true, "summary": true, "section": true, "div": true, "ol": true, "li": true, "ul": true, "b": true,
		"optgroup": true, "colgroup": true, "col": true, "img": true}
	figure := regexp.MustCompile(`^/ui/captures/cap_[0-9a-f]{32}/figure\?name=(result\.[0-9]+|screenshot)$`)
	z := xhtml.NewTokenizer(strings.NewReader(body))
	for {
		switch z.Next() {
		case xhtml.ErrorToken:
			if z.Err() != io.EOF {
				t.Errorf("%s: %v", what, z.Err())
			}
			return
		case xhtml.StartTagToken, xhtml.SelfClosingTagToken:
			tok := z.Token()
			if !allowed[tok.Data] {
				t.Errorf("%s: element <%s> in the page", what, tok.Data)
			}
			for _, a := range tok.Attr {
				if a.Key == "src" && tok.Data == "img" && figure.MatchString(a.Val) {
					continue // the page's own figures
				}
				if strings.HasPrefix(a.Key, "on") || a.Key == "style" || a.Key == "src" || a.Key == "id" && a.Val == "injected" {
					t.Errorf("%s: attribute %s=%q on <%s>", what, a.Key, a.Val, tok.Data)
				}
				if (a.Key == "href" || a.Key == "action") && !strings.HasPrefix(a.Val, "/ui/") {
					t.Errorf("%s: %s=%q on <%s> leaves the page", what, a.Key, a.Val, tok.Data)
				}
			}
		}
	}
}

func TestEveryResponseHasHeaders(t *testing.T) {
	f := newFixture(t)
	c := f.signIn(keyRev)
	tok, lc := f.loginForm()
	for _, rq := range []request{
		{path: "/ui"},
		{path: "/ui/"},
		{path: "/ui/login"},
		{path: "/ui/static/style.css"},
		{path: "/ui/nowhere"},
		{path: "/ui/audit"},
		{method: "DELETE", path: "/ui/audit"},
		{method: "POST", path: "/ui/login", form: url.Values{"csrf": {tok}, "key": {"bad"}}, cookies: []*http.Cookie{lc}},
		{method: "POST", path: "/ui/login", form: url.Values{}, headers: map[string]string{"Origin": "http://evil.test"}},
		{path: "/ui/audit", cookies: []*http.Cookie{c}},
		{path: "/ui/audit/" + f.acmeFetch, cookies: []*http.Cookie{c}},
		{path: "/ui/captures/" + f.acmeFetchCap, cookies: []*http.Cookie{c}},
		{path: "/ui/captures/" + f.acmeFetchCap + "/part?name=raw", cookies: []*http.Cookie{c}},
		{path: "/ui/session?id=sess-1", cookies: []*http.Cookie{c}},
		{path: "/ui/session", cookies: []*http.Cookie{c}},
		{method: "POST", path: "/ui/logout", form: url.Values{}, cookies: []*http.Cookie{c}},
	} {
		f.do(rq) // do checks the headers
	}
	rec := f.do(request{path: "/ui/static/style.css"})
	if ct := rec.Header().Get("Content-Type"); ct != "text/css; charset=utf-8" || !strings.Contains(rec.Body.String(), "font-family") {
		t.Errorf("style sheet: %q", ct)
	}
	rec = f.do(request{path: "/ui/captures/" + f.acmeFetchCap + "/part?name=raw", cookies: []*http.Cookie{c}})
	if rec.Header().Get("Content-Type") != "application/octet-stream" || !strings.HasPrefix(rec.Header().Get("Content-Disposition"), "attachment") ||
		!strings.HasSuffix(rec.Header().Get("Content-Security-Policy"), "; sandbox") {
		t.Errorf("part download headers: %v", rec.Header())
	}
	if !bytes.Equal(rec.Body.Bytes(), mustPart(t, f, f.acmeFetchCap, "raw")) {
		t.Error("part download is not the raw bytes")
	}
	// Pages without a session send the browser to sign in.
	for _, p := range []string{"/ui/audit", "/ui/audit/" + f.acmeExec, "/ui/captures/" + f.acmeExecCap, "/ui/session?id=sess-1"} {
		rec := f.do(request{path: p})
		if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/ui/login?"+(url.Values{"next": {p}}).Encode() {
			t.Errorf("%s without a session: %d %s", p, rec.Code, rec.Header().Get("Location"))
		}
	}
}

// TestRoutes: what every path and method under /ui answers, signed in or
// not: the page's own 404 for what it does not serve, redirects to the
// clean path, and paths matched segment by segment after unescaping.
func TestRoutes(t *testing.T) {
	f := newFixture(t)
	rev := f.signIn(keyRev)
	for _, tc := range []struct {
		method, path string
		signedIn     bool
		code         int
		location     string // or what the page says
	}{
		{"GET", "/ui", false, http.StatusSeeOther, "/ui/"},
		{"HEAD", "/ui?x=1", false, http.StatusSeeOther, "/ui/"},
		{"POST", "/ui?x=1", false, http.StatusTemporaryRedirect, "/ui/?x=1"},
		{"GET", "/ui/", true, http.StatusSeeOther, "/ui/audit"},
		{"HEAD", "/ui/login", false, http.StatusOK, ""},
		{"DELETE", "/ui/audit", true, http.StatusNotFound, "There is no such page."},
		{"POST", "/ui/nowhere", false, http.StatusNotFound, "There is no such page."},
		{"OPTIONS", "/ui/login", false, http.StatusNotFound, "There is no such page."},
		{"GET", "/ui/logout", true, http.StatusNotFound, "There is no such page."},
		{"GET", "/ui/audit/" + f.acmeExec + "/", true, http.StatusNotFound, "There is no such page."},
		{"GET", "/ui/audit/x/y", false, http.StatusNotFound, "There is no such page."},
		{"GET", "/ui/captures/x/y", true, http.StatusNotFound, "There is no such page."},
		{"GET", "/ui//audit?kind=exec", true, http.StatusTemporaryRedirect, "/ui/audit?kind=exec"},
		{"POST", "/ui/captures/./part", false, http.StatusTemporaryRedirect, "/ui/captures/part"},
		{"GET", "/ui/audit/..", true, http.StatusTemporaryRedirect, "/ui"},
		{"POST", "/ui/audit/..", true, http.StatusTemporaryRedirect, "/ui/"},
		{"GET", "/ui/%2e%2e/healthz", true, http.StatusNotFound, "There is no such page."},
		{"GET", "/ui/%61udit", false, http.StatusSeeOther, "/ui/login?next=%2Fui%2F%2561udit"},
		{"GET", "/ui/%61udit", true, http.StatusOK, ""},
		{"GET", "/ui/audit/a%2Fb", true, http.StatusNotFound, "No audit record &#34;a/b&#34;"},
		{"GET", "/ui/audit/a%25b", true, http.StatusNotFound, "No audit record &#34;a%b&#34;"},
		{"GET", "/ui/audit/%61%2Fb", true, http.StatusNotFound, "No audit record &#34;a/b&#34;"},
		{"GET", "/ui/%61udit/a%2Fb", true, http.StatusNotFound, "No audit record &#34;a/b&#34;"},
	} {
		rq := request{method: tc.method, path: tc.path}
		if tc.signedIn {
			rq.cookies = []*http.Cookie{rev}
		}
		rec := f.do(rq)
		got := rec.Header().Get("Location")
		if rec.Code != tc.code || got != tc.location && !strings.Contains(rec.Body.String(), tc.location) {
			t.Errorf("%s %s (signed in %v): %d %q, want %d %q", tc.method, tc.path, tc.signedIn, rec.Code, got, tc.code, tc.location)
		}
	}
}

func mustPart(t *testing.T, f *fixture, id, name string) []byte {
	c, err := f.caps.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return c.Part(name).Data
}

func TestPaginationAndFilters(t *testing.T) {
	f := newFixture(t)
	for i := range 5 {
		if err := f.log.Append(context.Background(), &audit.Record{Kind: audit.KindFetch, Tenant: "acme", Subject: fmt.Sprintf("fe_page_%d", i), Status: "ok", Hosts: []string{"many.test"}}); err != nil {
			t.Fatal(err)
		}
	}
	c := f.signIn(keyRev)
	body := f.get(c, "/ui/audit?host=many.test&limit=2", 200)
	if !strings.Contains(body, "fe_page_4") || !strings.Contains(body, "fe_page_3") || strings.Contains(body, "fe_page_2") {
		t.Fatalf("first page")
	}
	m := regexp.MustCompile(`href="([^"]+)" id="older"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no link to older records")
	}
	next := html.UnescapeString(m[1])
	if !strings.Contains(next, "host=many.test") || !strings.Contains(next, "limit=2") || !strings.Contains(next, "cursor=") {
		t.Fatalf("older link %q", next)
	}
	body = f.get(c, next, 200)
	if !strings.Contains(body, "fe_page_2") || !strings.Contains(body, "fe_page_1") || strings.Contains(body, "fe_page_3") {
		t.Fatal("second page")
	}
	f.get(c, "/ui/audit?cursor=abc", 400)
	f.get(c, "/ui/audit?code_sha256=xyz", 400)
	f.get(c, "/ui/audit?limit=5000", 400)
	if b := f.get(c, "/ui/audit?since=2020-01-01T00:00&until=2100-01-01", 200); !strings.Contains(b, "fe_page_4") || !strings.Contains(b, `value="2020-01-01 00:00:00"`) {
		t.Error("time range")
	}
	if b := f.get(c, "/ui/audit?until=2020-01-01T00:00:00Z", 200); !strings.Contains(b, `id="none"`) {
		t.Error("until excludes everything")
	}
	// The timeline is oldest first.
	body = f.get(c, "/ui/session?id=sess-1", 200)
	if i, j := strings.Index(body, "kind-exec"), strings.Index(body, "kind-fetch"); i < 0 || j < 0 || !strings.Contains(body, "fe_1") {
		t.Errorf("timeline entries missing")
	} else if i > j {
		t.Errorf("timeline not oldest first")
	}
}

func TestDecodeBody(t *testing.T) {
	text := strings.Repeat("<p>hello &amp; world</p>\n", 50)
	var z, fl, br bytes.Buffer
	zw := zlib.NewWriter(&z)
	io.WriteString(zw, text)
	zw.Close()
	fw, _ := flate.NewWriter(&fl, 5)
	io.WriteString(fw, text)
	fw.Close()
	bw := brotli.NewWriter(&br)
	bw.Write(gzipped(text)) // gzip, then br
	bw.Close()
	for _, tc := range []struct {
		name    string
		raw     []byte
		headers string
	}{
		{"gzip", gzipped(text), "Content-Encoding: gzip\r\n"},
		{"deflate zlib", z.Bytes(), "content-encoding: deflate\r\n"},
		{"deflate raw", fl.Bytes(), "Content-Encoding: deflate\r\n"},
		{"gzip then br", br.Bytes(), "Content-Encoding: gzip, br\r\n"},
		{"identity", []byte(text), "Content-Type: text/html\r\n"},
	} {
		v := viewRaw(tc.raw, "HTTP 200 OK\r\n"+tc.headers, "utf-8")
		if v.Binary || v.Text != text || v.Size != int64(len(tc.raw)) {
			t.Errorf("%s: binary=%v note=%q text=%.60q", tc.name, v.Binary, v.Note, v.Text)
		}
	}
	// A bomb inflates to the cap only.
	bomb := gzipped(strings.Repeat("a", decodeCap*3))
	out, note := decodeBody(bomb, []string{"gzip"})
	if len(out) != decodeCap || !strings.Contains(note, "first") {
		t.Errorf("bomb: %d bytes, %q", len(out), note)
	}
	// Wrong coding: shown as received, with a note.
	v := viewRaw([]byte("plain text"), "Content-Encoding: gzip\r\n", "")
	if v.Text != "plain text" || !strings.Contains(v.Note, "did not decode") {
		t.Errorf("bad gzip: %+v", v)
	}
	v = viewRaw([]byte("x"), "Content-Encoding: zstd\r\n", "")
	if !strings.Contains(v.Note, "not decoded") {
		t.Errorf("zstd: %+v", v)
	}
	// Latin-1 is converted; binary becomes a hex dump.
	v = viewRaw([]byte("Caf\xe9 <b>"), "", "iso-8859-1")
	if v.Text != "Café <b>" {
		t.Errorf("latin-1: %+v", v)
	}
	v = viewRaw(append([]byte("\x89PNG\r\n\x1a\n\x00\x00"), bytes.Repeat([]byte{0}, 5000)...), "", "")
	if !v.Binary || !strings.HasPrefix(v.Hex, "00000000  89 50 4e 47") || !v.Truncated {
		t.Errorf("binary: %+v", v)
	}
}

func TestVisible(t *testing.T) {
	for in, want := range map[string]string{
		"a\u202eb":       "a⟨U+202E⟩b",
		"zero\u200bw":    "zero⟨U+200B⟩w",
		"tag\U000E0041":  "tag⟨U+E0041⟩",
		"esc\x1b[31m":    "esc\u241b[31m",
		"nul\x00":        "nul\u2400",
		"line\r\nnext\r": "line\nnext\u240d",
		"bad\xffbyte":    "bad\ufffdbyte",
		"tab\tok":        "tab\tok",
	} {
		if got := visible(in); got != want {
			t.Errorf("visible(%q) = %q, want %q", in, got, want)
		}
	}
}

// reads returns the capture_read records of capture id, oldest first.
func (f *fixture) reads(id string) []audit.Record {
	f.t.Helper()
	recs, _, err := f.log.Query(context.Background(), audit.Filter{Kind: audit.KindCaptureRead, Subject: id})
	if err != nil {
		f.t.Fatal(err)
	}
	slices.Reverse(recs)
	return recs
}

// failingAudit refuses every append.
type failingAudit struct{ audit.Log }

func (failingAudit) Append(context.Context, *audit.Record) error { return errors.New("disk full") }

// Every page that shows a capture's content, and every download, appends a
// capture_read record first (who, which capture, how); when it cannot, the
// content is not shown.
func TestCaptureReadsAreAudited(t *testing.T) {
	f := newFixture(t)
	rev := f.signIn(keyRev)
	f.get(rev, "/ui/audit?kind=fetch", 200)
	if n := len(f.reads(f.acmeExecCap)); n != 0 {
		t.Fatalf("a list of fetches, which shows no exec capture, recorded %d reads", n)
	}
	f.get(rev, "/ui/audit", 200) // the first line of the exec's code
	f.get(rev, "/ui/captures/"+f.acmeExecCap, 200)
	f.get(rev, "/ui/captures/"+f.acmeExecCap+"/part?name=code", 200)
	f.get(rev, "/ui/audit/"+f.acmeExec, 200) // the record page shows its capture
	f.get(rev, "/ui/captures/"+f.otherCap, http.StatusNotFound)
	adm := f.signIn(keyAdmin)
	f.get(adm, "/ui/captures/"+f.acmeExecCap, 200)

	got := f.reads(f.acmeExecCap)
	var acts []string
	for _, r := range got {
		acts = append(acts, r.KeyID+"/"+r.Action+"/"+r.Detail["part"])
		if r.Tenant != "acme" || r.Status != "ok" || r.Detail["via"] != "ui" || r.Detail["kind"] != "exec" || len(r.CaptureIDs) != 0 {
			t.Errorf("read record %+v", r)
		}
	}
	if strings.Join(acts, ",") != "rev-1/view/code,rev-1/view/,rev-1/download/code,rev-1/view/,ops-1/view/" {
		t.Fatalf("capture_read records: %v", acts)
	}
	if got[4].Detail["reader_tenant"] != "ops" || got[0].Detail["reader_tenant"] != "" {
		t.Errorf("reader_tenant: admin's %q, reviewer's %q", got[4].Detail["reader_tenant"], got[0].Detail["reader_tenant"])
	}
	if n := len(f.reads(f.otherCap)); n != 0 {
		t.Errorf("a refused read was recorded as a read: %d", n)
	}

	f.h = mount(New(Config{Audit: failingAudit{f.log}, Captures: f.caps, Keys: keyring(t), Now: f.clock.Now, Origins: []string{origin}}))
	rev = f.signIn(keyRev)
	code := string(mustPart(t, f, f.acmeExecCap, "code"))
	for _, p := range []string{"/ui/captures/" + f.acmeExecCap, "/ui/captures/" + f.acmeExecCap + "/part?name=code"} {
		if b := f.get(rev, p, http.StatusServiceUnavailable); strings.Contains(b, "print(") || strings.Contains(b, code) {
			t.Errorf("%s showed the capture although its read could not be recorded", p)
		}
	}
	if b := f.get(rev, "/ui/audit/"+f.acmeExec, 200); strings.Contains(b, "print(") || !strings.Contains(b, "could not be recorded") {
		t.Errorf("the record page showed the capture although its read could not be recorded")
	}
}
