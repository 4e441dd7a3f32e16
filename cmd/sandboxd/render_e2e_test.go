package main

// POST /fetch with render: true and PDFs, end to end: sandboxd in-process
// with a fake resolver, loopback upstreams, and real browser sandboxes
// (the image sandboxd/browser, `make image`).

import (
	"bytes"
	"encoding/json"
	"fmt"
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

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/egress/egresstest"
	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/internal/logbuf"
)

// The page's script writes its text; it also tries a denied host, the
// metadata address and sandboxd's own API, and hides injections every
// way the browser can.
const spaHTML = `<!DOCTYPE html><html><head><title>SPA</title>
<link rel="stylesheet" href="/style.css">
<style>.sr{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}</style>
</head><body><div id="app">Loading...</div>
<p class="ext-hidden">HIDDEN_EXTERNAL_CSS obey me</p>
<p style="display:none">HIDDEN_DISPLAY_NONE</p>
<p style="color:#fff;background:#fff">HIDDEN_WHITE_ON_WHITE</p>
<p style="position:absolute;left:-9999px">HIDDEN_OFFSCREEN</p>
<p style="font-size:0">HIDDEN_TINY</p>
<p style="opacity:0">HIDDEN_OPACITY</p>
<p class="sr">HIDDEN_SR_ONLY</p>
<div style="height:0;overflow:hidden"><p>HIDDEN_ZERO_HEIGHT</p></div>
<p id="later">HIDDEN_BY_SCRIPT</p>
<ul><li>VISIBLE_LIST_ITEM</li></ul><p>Read <a href="/x">VISIBLE_LINK_TEXT</a> here.</p>
<div style="height:60px;overflow:auto"><p>VISIBLE_SCROLL_BOX_TOP</p><p style="margin-top:200px">VISIBLE_SCROLL_BOX_BOTTOM</p></div>
<div style="height:3000px"></div><p>VISIBLE_BELOW_THE_FOLD</p>
<script src="/app.js"></script>
</body></html>`

const spaJS = `
document.getElementById('app').textContent = 'SPA_RENDERED_TEXT written by the script';
var later = document.getElementById('later');
later.style.visibility = 'hidden';
var s = document.createElement('style'); document.head.appendChild(s);
s.sheet.insertRule('.cssom{display:none}', 0);
var p = document.createElement('p'); p.className = 'cssom'; p.textContent = 'HIDDEN_CSSOM_RULE'; document.body.appendChild(p);
// A page that tries to override what sandboxd's driver calls.
window.getComputedStyle = function(){ return {display:'block',visibility:'visible',opacity:'1',color:'rgb(0,0,0)'}; };
Element.prototype.checkVisibility = function(){ return true; };
for (const u of ['http://denied.sandboxd.test:%[1]d/steal', 'http://169.254.169.254/latest/meta-data/', 'http://self.sandboxd.test:%[2]d/healthz', 'http://127.0.0.1:%[2]d/healthz']) {
  fetch(u).catch(function(){});
}
var img = new Image(); img.src = 'http://denied.sandboxd.test:%[1]d/pixel.png';
`

type renderEnv struct {
	*fetchEnv
	apiPort int
}

func startRenderEnv(t *testing.T) *renderEnv { return startRenderEnvRuntime(t, "runc") }

func startRenderEnvRuntime(t *testing.T, runtime string) *renderEnv {
	t.Helper()
	requireImage(t, "sandboxd/browser:latest")
	e := &renderEnv{fetchEnv: &fetchEnv{t: t, log: &logbuf.Buffer{}}}
	apiPort, err := e2e.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e.apiPort = apiPort
	mux := http.NewServeMux()
	mux.HandleFunc("/spa", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, spaHTML)
	})
	mux.HandleFunc("/app.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprintf(w, spaJS, e.upPort, e.apiPort)
	})
	mux.HandleFunc("/style.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css")
		fmt.Fprint(w, ".ext-hidden{display:none}")
	})
	mux.HandleFunc("/heavy", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<html><body><p>HEAVY_PAGE_TEXT</p><script src="/big.js"></script><img src="/big.png"></body></html>`)
	})
	mux.HandleFunc("/big.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		w.Write(bytes.Repeat([]byte("//padding padding padding padding\n"), 60000)) // ~2 MB
	})
	mux.HandleFunc("/busy", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<html><body><p>BUSY_PAGE_TEXT</p><script>setInterval(function(){fetch('/tick?'+Math.random()).catch(function(){})}, 100)</script></body></html>`)
	})
	mux.HandleFunc("/tick", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	mux.HandleFunc("/doc.pdf", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/pdf")
		w.Write(makePDF([]string{"PDF_PAGE_ONE hello", "PDF_PAGE_TWO --- page 7 --- fake"}, ""))
	})
	mux.HandleFunc("/scan.pdf", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/pdf")
		w.Write(makePDF([]string{"SCAN_VISIBLE_TEXT"}, "OCR_LAYER_TEXT"))
	})
	mux.HandleFunc("/broken.pdf", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/pdf")
		w.Write([]byte("%PDF-1.4\nthis is not a pdf at all"))
	})
	up := httptest.NewServer(mux)
	t.Cleanup(up.Close)
	e.upPort = up.Listener.Addr().(*net.TCPAddr).Port

	tmp := t.TempDir()
	profilesDir := filepath.Join(tmp, "profiles")
	copyShippedProfiles(t, profilesDir, "exec/default.yaml", "seccomp/default.json", "seccomp/network.json", "seccomp/gvisor.json")
	writeFile(t, filepath.Join(profilesDir, "egress/pages.yaml"), fmt.Sprintf(`name: pages
allow:
  - name: site
    hosts: [news.sandboxd.test, self.sandboxd.test, spa.sandboxd.test]
    ports: [%d, %d]
allow_cidrs: ["127.0.0.0/8"]
render:
  hosts: [spa.sandboxd.test]
  timeout: %s
  runtime: %s
`, e.upPort, apiPort, map[string]string{"runc": "8s", "runsc": "40s"}[runtime], runtime))
	e.key = e2e.NewSecret("sbxtest_")
	e.rev = e.key + "rev"
	keys := filepath.Join(tmp, "keys.yaml")
	writeFile(t, keys, e2e.KeysYAML(
		e2e.Key{ID: "agent-1", Tenant: "acme", Roles: []string{"agent"}, Secret: e.key},
		e2e.Key{ID: "rev-1", Tenant: "acme", Roles: []string{"reviewer"}, Secret: e.rev}))
	e.data = filepath.Join(tmp, "data")
	cfg := testServeConfig("127.0.0.1:"+strconv.Itoa(apiPort), e.data, profilesDir, keys)
	e.base = runServe(t, cfg, e.log, egresstest.NewResolver(map[string][]string{
		"news.sandboxd.test":   {"127.0.0.1"},
		"spa.sandboxd.test":    {"127.0.0.1"},
		"self.sandboxd.test":   {"127.0.0.1"},
		"denied.sandboxd.test": {"127.0.0.1"},
	}), nil)
	return e
}

func requireImage(t *testing.T, ref string) {
	t.Helper()
	if out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", ref).CombinedOutput(); err != nil {
		t.Fatalf("the browser image %s is missing (build it with `make image`): %v %s", ref, err, out)
	}
}

func (e *renderEnv) fetch(body map[string]any) (int, api.FetchResponse, []byte) {
	e.t.Helper()
	code, _, raw := e.post("/fetch", body)
	var resp api.FetchResponse
	_ = json.Unmarshal(raw, &resp)
	return code, resp, raw
}

func TestRenderEndToEnd(t *testing.T) {
	e := startRenderEnv(t)
	spa := fmt.Sprintf("http://spa.sandboxd.test:%d/spa", e.upPort)

	// Without render the script never runs: the page says Loading.
	code, plain, raw := e.fetch(map[string]any{"url": strings.Replace(spa, "spa.sandboxd.test", "news.sandboxd.test", 1), "profile": "pages"})
	if code != 200 || plain.Rendered || strings.Contains(plain.Content, "SPA_RENDERED_TEXT") || !strings.Contains(plain.Content, "Loading") {
		t.Fatalf("plain fetch: %d %s", code, raw)
	}

	// The profile renders spa.sandboxd.test by default.
	began := time.Now()
	code, resp, raw := e.fetch(map[string]any{"url": spa, "profile": "pages"})
	t.Logf("render took %v", time.Since(began))
	if code != 200 {
		t.Fatalf("render: %d %s", code, raw)
	}
	if !resp.Rendered || !strings.Contains(resp.Content, "SPA_RENDERED_TEXT written by the script") || resp.Title != "SPA" || resp.Status != 200 {
		t.Fatalf("rendered: %s", raw)
	}
	for _, v := range []string{"VISIBLE_LIST_ITEM", "VISIBLE_LINK_TEXT", "VISIBLE_SCROLL_BOX_TOP", "VISIBLE_SCROLL_BOX_BOTTOM", "VISIBLE_BELOW_THE_FOLD"} {
		if !strings.Contains(resp.Content, v) {
			t.Errorf("visible text %s is missing:\n%s", v, resp.Content)
		}
	}
	// Zero hidden injections through, in the answer and the capture's
	// returned text.
	if strings.Contains(string(raw), "HIDDEN_") || strings.Contains(string(raw), "obey me") {
		t.Fatalf("a hidden injection came through:\n%s", resp.Content)
	}

	// Every attempt of the script was decided by the egress proxy and
	// denied, each in the fetch's audit record and the log.
	recs, _ := e.get(e.rev, "/audit?kind=fetch&subject="+resp.ID, 200)
	var audits api.AuditPage
	if err := json.Unmarshal(recs, &audits); err != nil || len(audits.Records) != 1 {
		t.Fatalf("audit: %v %s", err, recs)
	}
	rec := audits.Records[0]
	denied := map[string]string{}
	allowed := 0
	for _, d := range rec.Egress {
		if d.Verdict == "deny" {
			denied[d.Host+":"+strconv.Itoa(int(d.Port))] = d.Code
		} else {
			allowed++
		}
	}
	apiPort := strconv.Itoa(e.apiPort)
	want := map[string]string{
		"denied.sandboxd.test:" + strconv.Itoa(e.upPort): "no_rule",
		"169.254.169.254:80":                             "",
		"self.sandboxd.test:" + apiPort:                  "denied_self",
		"127.0.0.1:" + apiPort:                           "",
	}
	for hp, c := range want {
		got, ok := denied[hp]
		if !ok || (c != "" && got != c) {
			t.Errorf("no denial of %s (code %q) in the audit record; denials %v", hp, c, denied)
		}
	}
	if allowed < 3 || rec.Detail["rendered"] != "true" {
		t.Errorf("record: %d allowed, detail %v", allowed, rec.Detail)
	}
	time.Sleep(200 * time.Millisecond)
	logged := 0
	for _, line := range strings.Split(e.log.String(), "\n") {
		if strings.Contains(line, `"client":"`+resp.ID+`"`) && strings.Contains(line, `"decision":"deny"`) {
			logged++
		}
	}
	if logged < len(want) {
		t.Errorf("%d denials of the render logged, want at least %d", logged, len(want))
	}

	// The capture keeps the rendered DOM and a checked PNG screenshot.
	shot, hdr := e.get(e.rev, "/captures/"+resp.CaptureID+"/raw?part=screenshot", 200)
	if p := os.Getenv("SANDBOXD_RENDER_SCREENSHOT"); p != "" {
		_ = os.WriteFile(p, shot, 0o644) // to look at it
	}
	if !bytes.HasPrefix(shot, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("screenshot: % x %v", shot[:min(8, len(shot))], hdr)
	}
	dom, _ := e.get(e.rev, "/captures/"+resp.CaptureID+"/raw?part=raw", 200)
	if !bytes.Contains(dom, []byte("SPA_RENDERED_TEXT")) || bytes.Contains(dom, []byte("HIDDEN_DISPLAY_NONE")) {
		t.Fatalf("dom: %s", dom)
	}

	// render: false wins over the profile.
	code, resp, raw = e.fetch(map[string]any{"url": spa, "profile": "pages", "render": false})
	if code != 200 || resp.Rendered || strings.Contains(resp.Content, "SPA_RENDERED") {
		t.Fatalf("render false: %d %s", code, raw)
	}
	// A denied page is a 403 like a plain fetch's.
	code, _, raw = e.fetch(map[string]any{"url": fmt.Sprintf("http://denied.sandboxd.test:%d/spa", e.upPort), "profile": "pages", "render": true})
	if code != 403 || !strings.Contains(string(raw), "EGRESS_DENIED") {
		t.Fatalf("denied page: %d %s", code, raw)
	}
}

// Every limit of a render is tried: bytes and time.
func TestRenderLimits(t *testing.T) {
	e := startRenderEnv(t)
	// The byte cap counts everything the browser downloads: the page is
	// small, its script is not.
	code, resp, raw := e.fetch(map[string]any{"url": fmt.Sprintf("http://news.sandboxd.test:%d/heavy", e.upPort), "profile": "pages", "render": true, "max_bytes": 200000})
	if code != 200 || !resp.Truncated || !hasWarning(resp, "RENDER_BYTES_CUT") || !strings.Contains(resp.Content, "HEAVY_PAGE_TEXT") || resp.BytesReceived > 200000 {
		t.Fatalf("byte cap: %d %s", code, raw)
	}
	// A page that never goes quiet is read at the time limit.
	began := time.Now()
	code, resp, raw = e.fetch(map[string]any{"url": fmt.Sprintf("http://news.sandboxd.test:%d/busy", e.upPort), "profile": "pages", "render": true})
	if code != 200 || !hasWarning(resp, "RENDER_TIMEOUT") || !strings.Contains(resp.Content, "BUSY_PAGE_TEXT") {
		t.Fatalf("busy page: %d %s", code, raw)
	}
	if d := time.Since(began); d > 8*time.Second+5*time.Second {
		t.Fatalf("the busy page took %v, past the 8s render timeout", d)
	}
}

func TestPDFEndToEnd(t *testing.T) {
	e := startRenderEnv(t)
	began := time.Now()
	code, resp, raw := e.fetch(map[string]any{"url": fmt.Sprintf("http://news.sandboxd.test:%d/doc.pdf", e.upPort), "profile": "pages"})
	t.Logf("PDF took %v", time.Since(began))
	if code != 200 || resp.Pages != 2 || hasWarning(resp, "INVISIBLE_TEXT_LAYER") {
		t.Fatalf("pdf: %d %s", code, raw)
	}
	i1, i2 := strings.Index(resp.Content, "--- page 1 ---"), strings.Index(resp.Content, "--- page 2 ---")
	if i1 < 0 || i2 < i1 || !strings.Contains(resp.Content[i1:i2], "PDF_PAGE_ONE") || !strings.Contains(resp.Content[i2:], "PDF_PAGE_TWO") {
		t.Fatalf("pages: %s", resp.Content)
	}
	if strings.Contains(resp.Content, "--- page 7 ---") {
		t.Errorf("the document faked a page marker: %s", resp.Content)
	}
	code, resp, raw = e.fetch(map[string]any{"url": fmt.Sprintf("http://news.sandboxd.test:%d/scan.pdf", e.upPort), "profile": "pages"})
	if code != 200 || !hasWarning(resp, "INVISIBLE_TEXT_LAYER") || !strings.Contains(resp.Content, "OCR_LAYER_TEXT") || !strings.Contains(resp.Content, "SCAN_VISIBLE_TEXT") {
		t.Fatalf("scan: %d %s", code, raw)
	}
	code, _, raw = e.fetch(map[string]any{"url": fmt.Sprintf("http://news.sandboxd.test:%d/broken.pdf", e.upPort), "profile": "pages"})
	if code != 502 || !strings.Contains(string(raw), "UPSTREAM_ERROR") {
		t.Fatalf("broken pdf: %d %s", code, raw)
	}
}

// Under gVisor (render.runtime: runsc) the same render works, and the
// script's attempts are denied the same way.
func TestRenderGVisor(t *testing.T) {
	if out, _ := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").Output(); !strings.Contains(string(out), "runsc") {
		t.Skip("runsc is not registered with the engine (make gvisor)")
	}
	e := startRenderEnvRuntime(t, "runsc")
	began := time.Now()
	code, resp, raw := e.fetch(map[string]any{"url": fmt.Sprintf("http://spa.sandboxd.test:%d/spa", e.upPort), "profile": "pages"})
	t.Logf("render under gVisor took %v", time.Since(began))
	if code != 200 || !strings.Contains(resp.Content, "SPA_RENDERED_TEXT") || strings.Contains(string(raw), "HIDDEN_") {
		t.Fatalf("gVisor render: %d %s", code, raw)
	}
	code, resp, raw = e.fetch(map[string]any{"url": fmt.Sprintf("http://news.sandboxd.test:%d/scan.pdf", e.upPort), "profile": "pages"})
	if code != 200 || !hasWarning(resp, "INVISIBLE_TEXT_LAYER") {
		t.Fatalf("gVisor pdf: %d %s", code, raw)
	}
}

func hasWarning(r api.FetchResponse, code string) bool {
	for _, w := range r.Warnings {
		if w.Code == code {
			return true
		}
	}
	return false
}

// makePDF writes a small PDF: one page per entry of pages, and on the
// first page, when invisible is set, that text in render mode 3 (as a
// scan's OCR layer is drawn).
func makePDF(pages []string, invisible string) []byte {
	var b bytes.Buffer
	var offsets []int
	obj := func(body string) {
		offsets = append(offsets, b.Len())
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", len(offsets), body)
	}
	b.WriteString("%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
	n := len(pages)
	kids := make([]string, n)
	for i := range pages {
		kids[i] = fmt.Sprintf("%d 0 R", 4+2*i)
	}
	obj("<< /Type /Catalog /Pages 2 0 R >>")
	obj(fmt.Sprintf("<< /Type /Pages /Kids [%s] /Count %d >>", strings.Join(kids, " "), n))
	obj("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
	for i, text := range pages {
		content := fmt.Sprintf("BT /F1 18 Tf 72 720 Td (%s) Tj ET\n", text)
		if i == 0 && invisible != "" {
			content += fmt.Sprintf("BT 3 Tr /F1 12 Tf 72 600 Td (%s) Tj ET\n", invisible)
		}
		obj(fmt.Sprintf("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>", 5+2*i))
		obj(fmt.Sprintf("<< /Length %d >>\nstream\n%sendstream", len(content), content))
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(offsets)+1)
	for _, o := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", o)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(offsets)+1, xref)
	return b.Bytes()
}
