package reviewui_test

// The review page in a real browser: sandboxd's API server runs in-process
// (a fake container engine; a real fetcher, audit log and capture store),
// an agent fetches a loopback page whose scripts would change the title
// and plant a marker if they ran, and headless Chromium, driven by
// chromedp, signs in, filters the audit log, opens the fetch record and
// its capture, checks that nothing of the page ran and that its source is
// shown as text, follows the session's timeline and signs out. Screenshots
// are kept under $SANDBOXD_TEST_ARTIFACTS (default: the system temp
// directory's sandboxd-artifacts).

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/sandboxd/sandboxd/browse"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/egress/egresstest"
	"github.com/sandboxd/sandboxd/internal/auth/authtest"
	"github.com/sandboxd/sandboxd/internal/control/admit"
	"github.com/sandboxd/sandboxd/internal/control/budget"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
	"github.com/sandboxd/sandboxd/internal/httpapi"
	"github.com/sandboxd/sandboxd/internal/logbuf"
	"github.com/sandboxd/sandboxd/internal/metrics"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/runner"
)

// hostileArticle is the page the agent fetches. Each script would leave a
// trace (the title, window.__pwned, an element #pwned) if it ran.
const hostileArticle = `<!DOCTYPE html><html><head><title>Harbour news</title>
<script>document.title="PWNED";window.__pwned=1;document.addEventListener("DOMContentLoaded",function(){var d=document.createElement("div");d.id="pwned";d.textContent="PWNED";document.body.appendChild(d)})</script>
</head><body><h1>Harbour opens</h1><p>The new harbour opens today.</p>
<img src=x onerror="document.title='PWNED-IMG';window.__pwned=3">
<p>"><img src=x onerror=alert(1)> and </textarea><script>window.__pwned=2</script></p>
</body></html>`

// fakeEngine runs nothing and answers as a finished run.
type fakeEngine struct{}

func (fakeEngine) Run(ctx context.Context, spec *runner.Spec) (*runner.Result, error) {
	return &runner.Result{Status: runner.StatusOK, Stdout: []byte("<script>document.title='PWNED-EXEC'</script>\n"), ImageID: "sha256:fake"}, nil
}
func (fakeEngine) Ping(context.Context) error                      { return nil }
func (fakeEngine) ImageID(context.Context, string) (string, error) { return "sha256:fake", nil }

// chromiumPath finds the browser, or fails the test saying how to install
// it: this test is never skipped.
func chromiumPath(t *testing.T) string {
	if p := os.Getenv("SANDBOXD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("headless Chromium is needed for the review page's browser test and is not on the PATH: " +
		"install it with `apt-get update && apt-get install -y chromium` (Debian's package; .ci/run does this), " +
		"or set SANDBOXD_CHROMIUM to the browser's path")
	return ""
}

func artifactDir(t *testing.T) string {
	dir := os.Getenv("SANDBOXD_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "sandboxd-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

type env struct {
	base                   string
	agent, reviewer, hostP string
}

// startServer runs sandboxd's API in-process with an egress profile
// "pages" that allows the loopback upstream as news.test.
func startServer(t *testing.T) *env {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/article", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		io.WriteString(zw, hostileArticle)
		zw.Close()
	})
	up := httptest.NewServer(mux)
	t.Cleanup(up.Close)
	_, portS, _ := net.SplitHostPort(up.Listener.Addr().String())
	port, _ := strconv.Atoi(portS)

	set, err := profiles.Load("../../profiles")
	if err != nil {
		t.Fatal(err)
	}
	set.Egress["pages"] = egresstest.LoopbackProfile(t, "pages", port, []string{"news.test"})

	dir := t.TempDir()
	e := &env{agent: "sbx_agent_" + strconv.FormatInt(time.Now().UnixNano(), 36), hostP: "news.test:" + portS}
	e.reviewer = e.agent + "_reviewer"
	sum := func(k string) string { s := sha256.Sum256([]byte(k)); return hex.EncodeToString(s[:]) }
	keys := authtest.Keyring(t, fmt.Sprintf(`keys:
  - {id: agent-1, tenant: acme, key_sha256: %s, roles: [agent]}
  - {id: rev-1, tenant: acme, key_sha256: %s, roles: [reviewer]}
`, sum(e.agent), sum(e.reviewer)))
	alog, err := audit.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	caps, err := capture.Open(filepath.Join(dir, "captures"), capture.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	st, err := store.OpenSQLite("")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.New(httpapi.Config{
		DataDir: dir, Profiles: set, Keys: keys, Engine: fakeEngine{}, Gate: admit.New(2, 4, time.Minute), Log: log, MaxBodyBytes: 1 << 20,
		Control:  httpapi.Control{Store: st, Limits: budget.New(nil, st, log), Metrics: metrics.New()},
		Fetcher:  &browse.Fetcher{Checker: &egress.Checker{Resolver: egresstest.NewResolver(map[string][]string{"news.test": {"127.0.0.1"}})}, Log: log},
		Captures: caps, Audit: alog,
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
		alog.Close()
		caps.Close()
		st.Close()
	})
	e.base = ts.URL
	return e
}

// post sends an agent's request and fails on anything but 200.
func (e *env) post(t *testing.T, path, body, session string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.agent)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-Id", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, raw)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestBrowserReview(t *testing.T) {
	chrome := chromiumPath(t)
	e := startServer(t)
	const session = "agent-run-7"
	e.post(t, "/exec", `{"language":"python","code":"print(\"<script>document.title='PWNED-EXEC'</script>\")"}`, session)
	fetched := e.post(t, "/fetch", fmt.Sprintf(`{"url":"http://%s/article","profile":"pages"}`, e.hostP), session)
	if fetched["capture_id"] == nil {
		t.Fatalf("the fetch has no capture: %v", fetched)
	}

	var chromeOut logbuf.Buffer
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		// CI runs the tests as root, and Chromium refuses to start as root
		// with its sandbox on; the sandbox only guards against pages that
		// exploit the browser, and this browser only opens sandboxd's own
		// page on loopback. Only this test browser runs without it.
		chromedp.NoSandbox,
		chromedp.WindowSize(1400, 1000),
		chromedp.CombinedOutput(&chromeOut),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The browser lives as long as ctx, so the whole test is bounded by
	// a timer rather than a deadline on ctx (see chromedp.Run).
	guard := time.AfterFunc(90*time.Second, cancel)
	defer guard.Stop()
	defer func() {
		if t.Failed() {
			t.Logf("chromium output:\n%s", chromeOut.String())
		}
	}()

	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	eval := func(js string) bool {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		if err != nil {
			t.Fatalf("evaluating %s: %v", js, err)
		}
		return v
	}
	// waitURL waits until the tab's address contains part (after a click
	// that navigates).
	waitURL := func(part string) string {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			loc, err := chromedp.Run(ctx, chromedp.Location())
			if err == nil && strings.Contains(loc, part) {
				return loc
			}
			if time.Now().After(deadline) {
				t.Fatalf("the browser is at %q, not at a page with %q (%v)", loc, part, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	screenshot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		p := filepath.Join(artifactDir(t), name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", p)
	}

	// An agent key is refused.
	do("opening the page", chromedp.Navigate(e.base+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#key")))
	waitURL("/ui/login")
	do("signing in as an agent", chromedp.SendKeys(chromedp.CSS("#key"), e.agent), chromedp.Click(chromedp.CSS("#signin")))
	waitURL("/ui/login")
	do("the refusal", chromedp.WaitVisible(chromedp.CSS("#error")))
	if msg := text("#error"); !strings.Contains(msg, "may not sign in") {
		t.Fatalf("agent sign-in: %q", msg)
	}

	// The reviewer signs in.
	do("signing in", chromedp.SendKeys(chromedp.CSS("#key"), e.reviewer), chromedp.Click(chromedp.CSS("#signin")))
	waitURL("/ui/audit")
	do("the audit log", chromedp.WaitVisible(chromedp.CSS("#records")))
	if who := text("#who"); !strings.Contains(who, "rev-1") {
		t.Fatalf("signed in as %q", who)
	}
	cookies, err := chromedp.Run(ctx, func(ctx context.Context, t *chromedp.Target) ([]*network.Cookie, error) {
		r, err := cdp.Call(ctx, t, network.GetCookies, network.GetCookiesParams{URLs: []string{e.base + "/ui/"}})
		return r.Cookies, err
	})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, c := range cookies {
		if strings.Contains(c.Value, e.reviewer) {
			t.Errorf("cookie %s holds the key", c.Name)
		}
		if c.Name == "sandboxd_ui_session" {
			found = true
			if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict || c.Path != "/ui/" {
				t.Errorf("session cookie: httpOnly %v, sameSite %q, path %q", c.HTTPOnly, c.SameSite, c.Path)
			}
		}
	}
	if !found {
		t.Fatalf("no session cookie in the browser: %v", cookies)
	}

	// Filter: fetches from news.test.
	do("filtering", chromedp.SetValue(chromedp.CSS("#kind"), "fetch"), chromedp.SendKeys(chromedp.CSS("#host"), "news.test"), chromedp.Click(chromedp.CSS("#search")))
	waitURL("host=news.test")
	do("the results", chromedp.WaitVisible(chromedp.CSS("#records")))
	if !eval(`document.querySelectorAll("#records tbody tr").length === 1`) {
		t.Fatalf("filtered list: %s", text("#records"))
	}
	if rows := text("#records tbody"); !strings.Contains(rows, "fetch") || !strings.Contains(rows, session) {
		t.Fatalf("filtered list: %q", rows)
	}
	screenshot("ui-audit.png")

	// The fetch record: every egress decision.
	do("opening the record", chromedp.Click(chromedp.CSS("#records a.record-link")))
	waitURL("/ui/audit/")
	do("the record", chromedp.WaitVisible(chromedp.CSS("#egress")))
	if eg := text("#egress"); !strings.Contains(eg, "allow") || !strings.Contains(eg, "news.test") || !strings.Contains(eg, "127.0.0.1") {
		t.Fatalf("egress decisions: %q", eg)
	}
	screenshot("ui-record.png")

	// The capture: the returned text beside the raw source.
	do("opening the capture", chromedp.Click(chromedp.CSS("a.capture-link")))
	waitURL("/ui/captures/")
	do("the capture", chromedp.WaitVisible(chromedp.CSS("#raw")), chromedp.WaitVisible(chromedp.CSS("#returned")))
	raw := text("#raw")
	for _, want := range []string{`<script>document.title="PWNED";window.__pwned=1;`, `<img src=x onerror="document.title='PWNED-IMG'`, "</textarea><script>window.__pwned=2</script>", "decoded from gzip"} {
		if !strings.Contains(raw, want) {
			t.Errorf("the raw source does not show %q as text:\n%s", want, raw)
		}
	}
	if ret := text("#returned"); !strings.Contains(ret, "The new harbour opens today.") || strings.Contains(ret, "document.title") {
		t.Errorf("returned text: %q", ret)
	}
	title, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(title, "Capture cap_") || strings.Contains(title, "PWNED") {
		t.Errorf("the title is %q: a captured script ran", title)
	}
	if !eval(`document.getElementById("pwned") === null && typeof window.__pwned === "undefined"`) {
		t.Error("a captured script ran: the marker is set")
	}
	if !eval(`document.querySelectorAll("script, img, iframe, object, embed, svg").length === 0`) {
		t.Error("captured markup became elements of the page")
	}
	screenshot("ui-capture.png")

	// The session's timeline, oldest first: the exec, then the fetch.
	do("back to the record", chromedp.Click(chromedp.CSS("a.record-link")))
	waitURL("/ui/audit/")
	do("the timeline", chromedp.WaitVisible(chromedp.CSS("#timeline")), chromedp.Click(chromedp.CSS("a#timeline")))
	waitURL("/ui/session?")
	do("the timeline", chromedp.WaitVisible(chromedp.CSS("ol#timeline")))
	if !eval(`(() => { const li = document.querySelectorAll("ol#timeline li"); return li.length === 2 && li[0].classList.contains("kind-exec") && li[1].classList.contains("kind-fetch") })()`) {
		t.Fatalf("timeline: %q", text("ol#timeline"))
	}
	screenshot("ui-timeline.png")

	// The exec record shows its code and output as text.
	do("opening the exec", chromedp.Click(chromedp.CSS("ol#timeline li.kind-exec a.record-link")))
	waitURL("/ui/audit/")
	do("the exec record", chromedp.WaitVisible(chromedp.CSS("section.capture")))
	if body := text("section.capture"); !strings.Contains(body, `print("<script>document.title='PWNED-EXEC'</script>")`) {
		t.Errorf("exec capture: %q", body)
	}
	if title, _ := chromedp.Run(ctx, chromedp.Title()); strings.Contains(title, "PWNED") {
		t.Errorf("title %q", title)
	}

	// Sign out: the session ends.
	do("signing out", chromedp.Click(chromedp.CSS("#signout")))
	waitURL("/ui/login")
	do("the sign-in page", chromedp.WaitVisible(chromedp.CSS("#key")), chromedp.Navigate(e.base+"/ui/audit"))
	waitURL("/ui/login")
	if err := ctx.Err(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
