package security

// Attacks on the review page (/ui/).

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/runner"
)

// keysReloadTimeout bounds how long a keys reload (SIGHUP) takes to be in
// force.
const keysReloadTimeout = 30 * time.Second

// TestReviewSessionOfRemovedKey: a reviewer signs in to the review page,
// then its key is removed from the keys file and the server reloads it
// (SIGHUP). Once the API answers the key with 401, the page's session
// cookie the key got must not read a single audit record more: the page
// sends it to sign in, and keeps doing so.
//
// The test runs a sandboxd of its own (internal/e2e), whose keys file it
// may rewrite without touching the suite's server.
func TestReviewSessionOfRemovedKey(t *testing.T) {
	dir := t.TempDir()
	keysFile := filepath.Join(dir, "keys.yaml")
	agent := e2e.Key{ID: "review-agent", Tenant: "review", Roles: []string{"agent"}, Secret: e2e.NewSecret("sbxsec_")}
	reviewer := e2e.Key{ID: "review-reviewer", Tenant: "review", Roles: []string{"reviewer"}, Secret: e2e.NewSecret("sbxsec_rev_")}
	if err := e2e.WriteKeys(keysFile, agent, reviewer); err != nil {
		t.Fatal(err)
	}
	s := startReviewServer(t, dir, keysFile)
	if _, _, err := (e2e.Client{URL: s.URL, Key: agent.Secret, Gate: execGate, Retries429: e2e.Max429Retries}).
		ExecOK(context.Background(), e2e.Py("print('reviewed')"), "review-attack-run", "reviewed\n"); err != nil {
		t.Fatalf("the agent's run: %v\n%s", err, s.Log.Tail(40))
	}

	page := e2e.Client{URL: s.URL, HTTP: noRedirects}
	session := signInToReview(t, page, reviewer.Secret)
	res := reviewGet(t, page, "/ui/audit", session)
	if res.Status != http.StatusOK || !strings.Contains(string(res.Body), "review-agent") {
		t.Fatalf("the audit page signed in does not show the agent's run:\n%s", res)
	}
	m := regexp.MustCompile(`href="(/ui/audit/[^"?]+)"`).FindSubmatch(res.Body)
	if m == nil {
		t.Fatalf("the audit page links no record:\n%s", res)
	}
	record := html.UnescapeString(string(m[1]))
	if res := reviewGet(t, page, record, session); res.Status != http.StatusOK || !strings.Contains(string(res.Body), "reviewed") {
		t.Fatalf("the record page signed in does not show the run:\n%s", res)
	}

	// The reviewer's key is removed.
	if err := e2e.WriteKeys(keysFile, agent); err != nil {
		t.Fatal(err)
	}
	if err := s.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitKeyStatus(t, s, reviewer.Secret, http.StatusUnauthorized)
	for range 2 { // refused, and still refused: the session is gone
		for _, p := range []string{record, "/ui/audit", "/ui/session?id=review"} {
			res := reviewGet(t, page, p, session)
			if loc := res.Header.Get("Location"); res.Status != http.StatusSeeOther || !strings.HasPrefix(loc, "/ui/login?") ||
				strings.Contains(string(res.Body), "review-agent") || strings.Contains(string(res.Body), "reviewed") {
				t.Fatalf("the removed key's session reads on (want 303 to the sign-in page):\n%s", res)
			}
		}
	}
	if e2e.Grep(s.Log.String(), 1, "review session ended") == "" {
		t.Errorf("the server did not log that the session ended:\n%s", s.Log.Tail(20))
	}
}

// startReviewServer starts a sandboxd with its data under dir and the
// repository's profiles, which reloads keysFile on SIGHUP only; the test's
// end stops it and checks that none of its containers remain.
func startReviewServer(t *testing.T, dir, keysFile string) *e2e.Server {
	t.Helper()
	bin, err := e2e.Binary("./cmd/sandboxd")
	if err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "data")
	s, err := e2e.Start(e2e.ServerConfig{Bin: bin, DataDir: dataDir, ProfilesDir: filepath.Join(moduleRoot, "profiles"), KeysFile: keysFile,
		Flags: []string{"--profiles-poll", "0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(e2e.ShutdownTimeout); err != nil {
			t.Errorf("stopping the review test's sandboxd: %v\n%s", err, s.Log.Tail(40))
		}
		mine := func(ctx context.Context) ([]container.Summary, error) {
			return e2e.ListContainers(ctx, dockerCli, e2e.Managed, e2e.Instance(runner.InstanceID(dataDir)))
		}
		if left := e2e.WaitGone(e2e.FinalCleanupTimeout, mine, e2e.Any); len(left) > 0 {
			t.Errorf("containers of the review test's sandboxd remain after it exited: %s", strings.Join(left, ", "))
		}
	})
	if _, body, err := s.WaitReady(readyTimeout); err != nil {
		t.Logf("going on although %v (%s)", err, body) // the default profile may work without gVisor
	}
	return s
}

// waitKeyStatus waits until GET /audit with key answers want: the keys
// reload is in force.
func waitKeyStatus(t *testing.T, s *e2e.Server, key string, want int) {
	t.Helper()
	c := e2e.Client{URL: s.URL, Key: key}
	deadline := time.Now().Add(keysReloadTimeout)
	for {
		res, err := c.Get(context.Background(), "/audit?limit=1")
		if err == nil && res.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /audit with the reviewer key does not answer %d %v after the keys reload (%v):\n%s\n%s",
				want, keysReloadTimeout, err, res, e2e.Grep(s.Log.String(), 5, "keys reload"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// noRedirects is the review page's client: the tests look at redirects.
var noRedirects = &http.Client{Timeout: e2e.RequestTimeout, CheckRedirect: func(*http.Request, []*http.Request) error {
	return http.ErrUseLastResponse
}}

// browser is the header a browser sends on the page's own requests.
func browser(base string, cookies []*http.Cookie) map[string]string {
	h := map[string]string{"Origin": base, "Sec-Fetch-Site": "same-origin"}
	var parts []string
	for _, c := range cookies {
		parts = append(parts, c.Name+"="+c.Value)
	}
	if len(parts) > 0 {
		h["Cookie"] = strings.Join(parts, "; ")
	}
	return h
}

func reviewGet(t *testing.T, page e2e.Client, path string, session *http.Cookie) *e2e.Result {
	t.Helper()
	res, err := page.Do(context.Background(), e2e.Request{Method: http.MethodGet, Path: path, Header: browser(page.URL, []*http.Cookie{session})})
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return res
}

func cookies(res *e2e.Result) []*http.Cookie { return (&http.Response{Header: res.Header}).Cookies() }

// signInToReview signs in to the review page with key as its form does
// (the form's CSRF token and its cookie) and returns the session cookie.
func signInToReview(t *testing.T, page e2e.Client, key string) *http.Cookie {
	t.Helper()
	ctx := context.Background()
	form, err := page.Do(ctx, e2e.Request{Method: http.MethodGet, Path: "/ui/login", Header: browser(page.URL, nil)})
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(form.Body)
	if form.Status != http.StatusOK || m == nil {
		t.Fatalf("the sign-in form:\n%s", form)
	}
	h := browser(page.URL, cookies(form))
	h["Content-Type"] = "application/x-www-form-urlencoded"
	body := url.Values{"csrf": {html.UnescapeString(string(m[1]))}, "key": {key}}.Encode()
	res, err := page.Do(ctx, e2e.Request{Method: http.MethodPost, Path: "/ui/login", Body: []byte(body), Header: h})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cookies(res) {
		if c.Name == "sandboxd_ui_session" && c.Value != "" && res.Status == http.StatusSeeOther {
			return c
		}
	}
	// Not res.String(): the request's body holds the key.
	t.Fatalf("the sign-in gave no session: %d %q\n%s", res.Status, res.Header.Get("Location"), e2e.Clip(res.Body, 3000))
	return nil
}
