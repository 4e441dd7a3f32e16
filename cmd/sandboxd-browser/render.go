package main

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

// visibilityJS removes what the browser does not show and serialises the
// document; it runs in an isolated world, so the page's script cannot
// replace the functions it calls.
//
//go:embed visibility.js
var visibilityJS string

// chromiumFlags: headless, without Chromium's own sandbox (it needs user
// namespaces or a setuid helper; the container is the boundary), GPU,
// extensions, background services, a first-run, crash reporting or a
// persistent profile (a fresh one on the container's tmpfs). The only
// proxy is the driver's tunnel, loopback included (<-loopback> drops
// Chromium's implicit bypass of localhost).
func chromiumFlags(proxy string, job *jobproto.BrowserJob) []string {
	return []string{
		"--headless",
		"--no-sandbox",
		"--disable-gpu",
		"--disable-software-rasterizer",
		"--disable-extensions",
		"--disable-component-extensions-with-background-pages",
		"--disable-background-networking",
		"--disable-component-update",
		"--disable-default-apps",
		"--disable-sync",
		"--disable-breakpad",
		"--disable-crash-reporter",
		"--disable-domain-reliability",
		"--disable-client-side-phishing-detection",
		"--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication,CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions,DialMediaRouteProvider,PrivacySandboxSettings4",
		"--dns-prefetch-disable",
		"--no-first-run",
		"--no-default-browser-check",
		"--no-pings",
		"--mute-audio",
		"--hide-scrollbars",
		"--deny-permission-prompts",
		"--password-store=basic",
		"--use-mock-keychain",
		"--user-data-dir=/tmp/profile",
		"--disk-cache-dir=/tmp/cache",
		"--disk-cache-size=1",
		"--remote-debugging-pipe",
		"--proxy-server=http://" + proxy,
		"--proxy-bypass-list=<-loopback>",
		fmt.Sprintf("--window-size=%d,%d", job.Width, job.Height),
		"about:blank",
	}
}

// page is what the events tell about the page being loaded.
type page struct {
	mu        sync.Mutex
	frameID   string
	report    jobproto.PageReport
	inflight  map[string]bool
	lastNet   time.Time
	loaded    chan struct{}
	loadOnce  sync.Once
	redirects []string
}

func (p *page) event(m cdpMsg) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch m.Method {
	case "Network.requestWillBeSent":
		var e struct {
			RequestID        string               `json:"requestId"`
			LoaderID         string               `json:"loaderId"`
			FrameID          string               `json:"frameId"`
			Type             string               `json:"type"`
			Request          struct{ URL string } `json:"request"`
			RedirectResponse json.RawMessage      `json:"redirectResponse"`
		}
		if json.Unmarshal(m.Params, &e) != nil {
			return
		}
		p.report.Requests++
		p.inflight[e.RequestID] = true
		p.lastNet = time.Now()
		if e.Type == "Document" && e.FrameID == p.frameID && e.RequestID == e.LoaderID && len(e.RedirectResponse) > 0 && len(p.redirects) < 20 {
			p.redirects = append(p.redirects, e.Request.URL)
		}
	case "Network.loadingFinished", "Network.loadingFailed":
		var e struct {
			RequestID string `json:"requestId"`
		}
		if json.Unmarshal(m.Params, &e) == nil {
			delete(p.inflight, e.RequestID)
			p.lastNet = time.Now()
		}
	case "Network.responseReceived":
		var e struct {
			RequestID string `json:"requestId"`
			LoaderID  string `json:"loaderId"`
			FrameID   string `json:"frameId"`
			Type      string `json:"type"`
			Response  struct {
				URL      string            `json:"url"`
				Status   int               `json:"status"`
				MIMEType string            `json:"mimeType"`
				Headers  map[string]string `json:"headers"`
			} `json:"response"`
		}
		if json.Unmarshal(m.Params, &e) != nil {
			return
		}
		if e.Type == "Document" && e.FrameID == p.frameID && e.RequestID == e.LoaderID {
			p.report.URL, p.report.Status, p.report.MIME = e.Response.URL, e.Response.Status, e.Response.MIMEType
			p.report.Egress = ""
			for k, v := range e.Response.Headers {
				if strings.EqualFold(k, "X-Sandboxd-Egress") {
					p.report.Egress = v
				}
			}
		}
	case "Page.loadEventFired":
		p.loadOnce.Do(func() { close(p.loaded) })
	}
}

func (p *page) idleFor() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.inflight) > 0 {
		return 0
	}
	return time.Since(p.lastNet)
}

// render loads job.URL and reports what the browser shows.
func render(job *jobproto.BrowserJob, in *bufio.Reader, out *sealed, rp *reaper, deadline time.Time) jobproto.BrowserDone {
	tn, err := newTunnel(out)
	if err != nil {
		return jobproto.BrowserDone{Error: "listening for the browser: " + err.Error(), Code: "browser"}
	}
	defer tn.close()
	go tn.demux(in)

	// The DevTools pipe: Chromium reads commands on fd 3, writes on fd 4.
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		return jobproto.BrowserDone{Error: err.Error(), Code: "browser"}
	}
	resR, resW, err := os.Pipe()
	if err != nil {
		return jobproto.BrowserDone{Error: err.Error(), Code: "browser"}
	}
	chrome := exec.Command("chromium", chromiumFlags(tn.addr(), job)...)
	chrome.ExtraFiles = []*os.File{cmdR, resW}
	logf, _ := os.Create("/tmp/chromium.log")
	chrome.Stdout, chrome.Stderr = logf, logf
	chrome.Env = []string{"HOME=/sandbox", "PATH=/usr/bin:/bin", "LANG=C.UTF-8", "TMPDIR=/tmp", "XDG_CONFIG_HOME=/tmp/xdg", "XDG_CACHE_HOME=/tmp/xdg-cache"}
	chrome.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	exited, err := rp.start(chrome)
	cmdR.Close()
	resW.Close()
	if logf != nil {
		logf.Close()
	}
	if err != nil {
		return jobproto.BrowserDone{Error: "starting chromium: " + err.Error(), Code: "browser"}
	}
	pg := &page{inflight: map[string]bool{}, loaded: make(chan struct{}), lastNet: time.Now()}
	var sessionMu sync.Mutex
	session := ""
	c := newCDP(cmdW, resR, func(m cdpMsg) {
		sessionMu.Lock()
		s := session
		sessionMu.Unlock()
		if m.SessionID != "" && m.SessionID == s {
			pg.event(m)
		}
	})
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	fail := func(err error) jobproto.BrowserDone {
		code := "browser"
		msg := err.Error()
		if ctx.Err() != nil && time.Now().After(deadline) {
			code = "timeout"
		} else if ctx.Err() != nil {
			b, _ := os.ReadFile("/tmp/chromium.log")
			msg += "; chromium exited: " + lastLines(string(b), 5)
		}
		return jobproto.BrowserDone{Error: msg, Code: code}
	}

	if err := c.call(ctx, "", "Browser.setDownloadBehavior", map[string]any{"behavior": "deny"}, nil); err != nil {
		return fail(err)
	}
	var tgt struct {
		TargetID string `json:"targetId"`
	}
	if err := c.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &tgt); err != nil {
		return fail(err)
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": tgt.TargetID, "flatten": true}, &att); err != nil {
		return fail(err)
	}
	sessionMu.Lock()
	session = att.SessionID
	sessionMu.Unlock()
	s := att.SessionID
	pg.mu.Lock()
	pg.frameID = tgt.TargetID // a page target's id is its main frame's
	pg.mu.Unlock()
	for _, step := range []struct {
		method string
		params any
	}{
		{"Page.enable", nil},
		{"Network.enable", map[string]any{"maxTotalBufferSize": 0, "maxResourceBufferSize": 0}},
		{"Network.setCacheDisabled", map[string]any{"cacheDisabled": true}},
		{"Emulation.setDeviceMetricsOverride", map[string]any{"width": job.Width, "height": job.Height, "deviceScaleFactor": 1, "mobile": false}},
	} {
		if err := c.call(ctx, s, step.method, step.params, nil); err != nil {
			return fail(err)
		}
	}
	if job.UserAgent != "" {
		if err := c.call(ctx, s, "Emulation.setUserAgentOverride", map[string]any{"userAgent": job.UserAgent}, nil); err != nil {
			return fail(err)
		}
	}
	began := time.Now()
	var nav struct {
		FrameID   string `json:"frameId"`
		LoaderID  string `json:"loaderId"`
		ErrorText string `json:"errorText"`
	}
	// Reading the page needs time of its own: the load gets the rest.
	readBy := deadline.Add(-min(3*time.Second, time.Until(deadline)/3))
	navCtx, navCancel := context.WithDeadline(ctx, readBy)
	err = c.call(navCtx, s, "Page.navigate", map[string]any{"url": job.URL, "transitionType": "typed"}, &nav)
	navCancel()
	if err != nil && ctx.Err() != nil {
		return fail(err)
	}
	timedOut := err != nil
	if nav.ErrorText != "" {
		pg.mu.Lock()
		pg.report.Error = nav.ErrorText
		pg.mu.Unlock()
	}
	if !timedOut && nav.ErrorText == "" {
		timedOut = !settle(pg, readBy, time.Duration(job.SettleMS)*time.Millisecond)
	}

	// The screenshot shows the viewport as a reader sees it.
	var shot struct {
		Data string `json:"data"`
	}
	if err := c.call(ctx, s, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": false}, &shot); err != nil {
		out.note("screenshot failed: %v", err)
	} else if png, err := base64.StdEncoding.DecodeString(shot.Data); err == nil && int64(len(png)) <= job.MaxShotBytes {
		_ = out.frame(jobproto.TypeBrowserShot, png)
	} else if err == nil {
		out.note("screenshot of %d bytes over the cap of %d", len(png), job.MaxShotBytes)
	}

	var world struct {
		ContextID int `json:"executionContextId"`
	}
	if err := c.call(ctx, s, "Page.createIsolatedWorld", map[string]any{"frameId": tgt.TargetID, "worldName": "sandboxd", "grantUniveralAccess": false}, &world); err != nil {
		return fail(err)
	}
	var ev struct {
		Result struct {
			Value struct {
				HTML   string `json:"html"`
				Title  string `json:"title"`
				Hidden int    `json:"hidden"`
			} `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := c.call(ctx, s, "Runtime.evaluate", map[string]any{"expression": visibilityJS, "contextId": world.ContextID, "returnByValue": true, "awaitPromise": false}, &ev); err != nil {
		return fail(err)
	}
	if ev.ExceptionDetails != nil {
		return jobproto.BrowserDone{Error: "reading the page failed: " + ev.ExceptionDetails.Text, Code: "browser"}
	}
	pg.mu.Lock()
	rep := pg.report
	rep.Redirects = pg.redirects
	pg.mu.Unlock()
	rep.Title = ev.Result.Value.Title
	rep.Hidden = ev.Result.Value.Hidden
	rep.TimedOut = timedOut
	rep.LoadMS = time.Since(began).Milliseconds()
	dom := []byte(ev.Result.Value.HTML)
	if int64(len(dom)) > job.MaxDOMBytes {
		dom = dom[:job.MaxDOMBytes]
		rep.DOMTruncated = true
	}
	if err := out.json(jobproto.TypeBrowserPage, rep); err != nil {
		return jobproto.BrowserDone{Error: err.Error(), Code: "browser"}
	}
	if err := out.frame(jobproto.TypeBrowserDOM, dom); err != nil {
		return jobproto.BrowserDone{Error: err.Error(), Code: "browser"}
	}
	_ = c.call(ctx, "", "Browser.close", nil, nil)
	return jobproto.BrowserDone{}
}

// settle waits for the load event, then for the network to be idle for
// quiet, until by. It reports whether the page settled.
func settle(pg *page, by time.Time, quiet time.Duration) bool {
	select {
	case <-pg.loaded:
	case <-time.After(time.Until(by)):
		return false
	}
	for time.Now().Before(by) {
		if pg.idleFor() >= quiet {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := strings.Join(lines, " | ")
	if len(out) > 1000 {
		out = out[len(out)-1000:]
	}
	return out
}
