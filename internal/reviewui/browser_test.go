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
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
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
	"sync"
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
	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/internal/logbuf"
	"github.com/sandboxd/sandboxd/internal/metrics"
	"github.com/sandboxd/sandboxd/internal/sessions"
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

// fakeEngine runs nothing and answers as a finished run; its sessions
// answer as a notebook would (fakeSandbox).
type fakeEngine struct{}

func (fakeEngine) OpenSession(ctx context.Context, spec *runner.Spec, opts runner.SessionOptions) (sessions.Sandbox, error) {
	return &fakeSandbox{id: spec.ID, files: map[string][]byte{}, done: make(chan struct{})}, nil
}

// fakeSandbox answers a call by what its code says: "df.head()" gives a
// table, "plot" a bar chart (and a figure that is not a PNG), "raise" a
// ValueError; every call prints a line and its last expression's repr.
type fakeSandbox struct {
	id    string
	mu    sync.Mutex
	files map[string][]byte
	done  chan struct{}
	once  sync.Once
}

func (s *fakeSandbox) ID() string      { return s.id }
func (s *fakeSandbox) ImageID() string { return "sha256:fake" }
func (s *fakeSandbox) Exec(ctx context.Context, call *runner.SessionCall) (*runner.SessionResult, error) {
	code := string(call.Code)
	res := &runner.SessionResult{Result: runner.Result{Status: runner.StatusOK, ImageID: "sha256:fake", Duration: 42 * time.Millisecond,
		Stdout: []byte("rows: 5\n<script>document.title='PWNED-STDOUT'</script>\n")}, ChargeCPU: 30 * time.Millisecond, MemoryBytes: 40 << 20}
	switch {
	case strings.Contains(code, "raise"):
		res.Status, res.ExitCode, res.Stdout = runner.StatusError, 1, nil
		res.Stderr = []byte("Traceback (most recent call last):\n  File \"<cell>\", line 1, in <module>\nKeyError: 'revenue'\n")
		res.Exception = &jobproto.Exception{Type: "KeyError", Message: "'revenue'", Traceback: string(res.Stderr)}
	case strings.Contains(code, "df.head()"):
		res.Results = []jobproto.RichResult{{Kind: jobproto.ResultTable, Text: "   month  sales\n0    jan    120\n1    feb    135\n2    mar    160\n3    apr    150\n4    may    190\n\n[5 rows x 2 columns]"}}
	case strings.Contains(code, "plot"):
		res.Results = []jobproto.RichResult{{Kind: jobproto.ResultRepr, Text: "<Axes: title={'center': 'Sales by month'}>"},
			{Kind: jobproto.ResultPNG, Data: chartPNG()}, {Kind: jobproto.ResultPNG, Data: []byte("<html><script>alert(1)</script>")}}
	}
	return res, nil
}
func (s *fakeSandbox) PutFiles(ctx context.Context, files []jobproto.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range files {
		s.files[f.Path] = f.Content
	}
	return nil
}
func (s *fakeSandbox) GetFile(ctx context.Context, path string, maxBytes int64) (*runner.OutFile, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.files[path]
	if !ok {
		return nil, "", runner.ErrNoFile
	}
	return &runner.OutFile{Path: path, Mode: 0o644, Content: b}, "", nil
}
func (s *fakeSandbox) Close(reason string)         { s.once.Do(func() { close(s.done) }) }
func (s *fakeSandbox) Done() <-chan struct{}       { return s.done }
func (s *fakeSandbox) EndReason() (string, string) { return "", "" }
func (s *fakeSandbox) Uncharged() time.Duration    { return 0 }

// chartPNG draws a bar chart, as matplotlib would send one.
func chartPNG() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 480, 300))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	axis := image.NewUniform(color.RGBA{40, 40, 40, 255})
	draw.Draw(img, image.Rect(50, 20, 52, 262), axis, image.Point{}, draw.Src)
	draw.Draw(img, image.Rect(50, 260, 460, 262), axis, image.Point{}, draw.Src)
	bar := image.NewUniform(color.RGBA{31, 119, 180, 255})
	for i, v := range []int{120, 135, 160, 150, 190} {
		x := 70 + i*78
		draw.Draw(img, image.Rect(x, 260-v, x+50, 260), bar, image.Point{}, draw.Src)
	}
	var b bytes.Buffer
	_ = png.Encode(&b, img)
	return b.Bytes()
}

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
	return e.call(t, http.MethodPost, path, body, session, 200)
}

// call sends an agent's request and fails on any status but want.
func (e *env) call(t *testing.T, method, path, body, session string, want int) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(method, e.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.agent)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-Id", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
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
	// A notebook session: a file, a table, a fetch between calls, a
	// figure, a call sent under another X-Session-Id that fails, a file
	// read back, the end.
	ses, _ := e.call(t, http.MethodPost, "/sessions", `{"profile":"data"}`, session, 201)["id"].(string)
	e.post(t, "/sessions/"+ses+"/files", `{"files":[{"path":"sales.csv","content":"bW9udGgsc2FsZXMKamFuLDEyMApmZWIsMTM1Cg=="}]}`, session)
	e.post(t, "/sessions/"+ses+"/exec", `{"code":"import pandas as pd\ndf = pd.read_csv(\"sales.csv\")\nprint(\"rows:\", len(df))\ndf.head()"}`, session)
	e.post(t, "/fetch", fmt.Sprintf(`{"url":"http://%s/article","profile":"pages"}`, e.hostP), session)
	e.post(t, "/sessions/"+ses+"/exec", `{"code":"import matplotlib.pyplot as plt\nax = df.plot.bar(x=\"month\", y=\"sales\", title=\"Sales by month\")\nplt.savefig(\"out/sales.png\")\nax"}`, session)
	e.post(t, "/sessions/"+ses+"/exec", `{"code":"df[\"revenue\"].sum()  # raise"}`, "agent-run-8")
	e.call(t, http.MethodGet, "/sessions/"+ses+"/files/sales.csv", "", session, 200)
	e.call(t, http.MethodDelete, "/sessions/"+ses, "", session, 200)

	var chromeOut logbuf.Buffer
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		// CI runs the tests as root, and Chromium refuses to start as root
		// with its sandbox on; the sandbox only guards against pages that
		// exploit the browser, and this browser only opens sandboxd's own
		// page on loopback. Only this test browser runs without it.
		chromedp.NoSandbox,
		chromedp.WindowSize(1280, 1000),
		chromedp.CombinedOutput(&chromeOut),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The browser lives as long as ctx, so the whole test is bounded by
	// a timer rather than a deadline on ctx (see chromedp.Run).
	began := time.Now()
	guard := time.AfterFunc(150*time.Second, cancel)
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
		t.Logf("screenshot: %s (%s into the test)", p, time.Since(began).Round(time.Millisecond))
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

	// The list fits 1280 px: no horizontal scroll.
	if !eval(`document.documentElement.scrollWidth <= window.innerWidth`) {
		t.Errorf("the list is wider than the window: %s", text("#records thead"))
	}
	screenshot("ui-list.png")

	// Filter: fetches from news.test.
	do("filtering", chromedp.SetValue(chromedp.CSS("#kind"), "fetch"), chromedp.SendKeys(chromedp.CSS("#host"), "news.test"), chromedp.Click(chromedp.CSS("#search")))
	waitURL("host=news.test")
	do("the results", chromedp.WaitVisible(chromedp.CSS("#records")))
	if !eval(`document.querySelectorAll("#records tbody tr").length === 2`) {
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

	// The agent session's trace, oldest first: the exec, the fetch, the
	// sandbox session's steps (those sent under agent-run-8 too).
	do("back to the record", chromedp.Click(chromedp.CSS("a.record-link")))
	waitURL("/ui/audit/")
	do("the timeline", chromedp.WaitVisible(chromedp.CSS("#timeline")), chromedp.Click(chromedp.CSS("a#timeline")))
	waitURL("/ui/session?")
	do("the trace", chromedp.WaitVisible(chromedp.CSS("ol#timeline")))
	if !eval(`(() => { const li = document.querySelectorAll("ol#timeline li.step"); return li.length === 10 && li[0].classList.contains("kind-exec") && li[1].classList.contains("kind-fetch") && li[2].classList.contains("kind-start") })()`) {
		t.Fatalf("trace: %q", text("ol#timeline"))
	}
	if tl := text("ol#timeline"); !strings.Contains(tl, "agent-run-8") || !strings.Contains(tl, "KeyError") {
		t.Errorf("the call sent under agent-run-8 is not in the trace: %q", tl)
	}

	// The sandbox session's trace: header, steps with code, output,
	// table, thumbnails, the fetch made while it ran.
	do("the sandbox session", chromedp.Click(chromedp.CSS("#sandboxes a")))
	waitURL("/ui/session?id=ses_")
	do("the trace", chromedp.WaitVisible(chromedp.CSS("ol#timeline")), chromedp.WaitVisible(chromedp.CSS("img.thumb")))
	head := text("#trace-head")
	for _, want := range []string{"ended", "acme", "agent-1", "data", "Calls", "3, 1 failed", "1 fetch", "2 file transfers", "agent-run-7", "agent-run-8", "Agent sessions"} {
		if !strings.Contains(head, want) {
			t.Errorf("the trace's header lacks %q: %q", want, head)
		}
	}
	tl := text("ol#timeline")
	for _, want := range []string{"df = pd.read_csv", "rows: 5", "month  sales", "Sales by month", "KeyError: 'revenue'", "sales.csv", "Harbour news", "news.test"} {
		if !strings.Contains(tl, want) {
			t.Errorf("the trace lacks %q", want)
		}
	}
	waitImages := func(sel string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !eval(`[...document.querySelectorAll("` + sel + `")].every(i => i.complete && i.naturalWidth > 0)`) {
			if time.Now().After(deadline) {
				t.Fatalf("the figures %s did not load", sel)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitImages("img.thumb")
	if !eval(`document.querySelectorAll("img.thumb").length === 1 && document.documentElement.scrollWidth <= window.innerWidth`) {
		t.Errorf("thumbnails or width of the trace")
	}
	if title, _ := chromedp.Run(ctx, chromedp.Title()); strings.Contains(title, "PWNED") {
		t.Errorf("title %q", title)
	}
	screenshot("ui-trace.png")

	// A step expands in place: the figure at full size.
	do("expanding the figure's call", chromedp.Click(chromedp.CSS("li.kind-call:has(img.thumb) details.expand summary")),
		chromedp.WaitVisible(chromedp.CSS("li.kind-call:has(img.thumb) details[open] img.figure")))
	waitImages("details[open] img.figure")
	do("scrolling to the figure", chromedp.ScrollIntoView(chromedp.CSS("details[open] img.figure")))
	screenshot("ui-figure.png")
	if !eval(`document.querySelectorAll("script").length === 0 && typeof window.__pwned === "undefined"`) {
		t.Error("a script ran on the trace")
	}

	// The agent session's trace again, for the exec record.
	do("back to the agent session", chromedp.Navigate(e.base+"/ui/session?id="+session))
	do("the trace", chromedp.WaitVisible(chromedp.CSS("ol#timeline")))

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
