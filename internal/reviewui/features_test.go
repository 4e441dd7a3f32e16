package reviewui

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/bundle"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
)

func (f *fixture) add(r *audit.Record) *audit.Record {
	f.t.Helper()
	if err := f.log.Append(context.Background(), r); err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *fixture) put(c *capture.Capture) *capture.Capture {
	f.t.Helper()
	if err := f.caps.Put(context.Background(), c); err != nil {
		f.t.Fatal(err)
	}
	return c
}

// post sends a page form with the session's CSRF token (unless the form
// sets its own).
func (f *fixture) post(c *http.Cookie, path string, form url.Values) *httptest.ResponseRecorder {
	f.t.Helper()
	if form.Get("csrf") == "" {
		form.Set("csrf", csrfOf(f.t, f.get(c, "/ui/audit?kind=fetch", 200)))
	}
	return f.do(request{method: http.MethodPost, path: path, form: form, cookies: []*http.Cookie{c}})
}

func pngOf(w, h int) []byte {
	var b bytes.Buffer
	_ = png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h)))
	return b.Bytes()
}

// The search: selects that match whole in any case, a clear error for a
// value that is not one, quick ranges, the page size as set, capture
// reads hidden until asked for, the first line of code in each row.
func TestListFilters(t *testing.T) {
	f := newFixture(t)
	f.add(&audit.Record{Kind: audit.KindFetch, Tenant: "acme", Subject: "fe_denied", Status: "EGRESS_DENIED"})
	c := f.signIn(keyRev)
	if b := f.get(c, "/ui/audit?status=egress_denied", 200); !strings.Contains(b, "fe_denied") || strings.Contains(b, "fe_1") || !strings.Contains(b, `<option value="EGRESS_DENIED" selected>`) {
		t.Error("a status in another case does not find its records")
	}
	if b := f.get(c, "/ui/audit?status=DENIED", 400); !strings.Contains(b, "Did you mean EGRESS_DENIED") {
		t.Error("a part of a status does not suggest it")
	}
	if b := f.get(c, "/ui/audit?kind=bogus", 400); !strings.Contains(b, "is not a kind of record") {
		t.Error("an unknown kind is not an error")
	}
	if b := f.get(c, "/ui/audit?kind=EXEC", 200); !strings.Contains(b, `<option value="exec" selected>`) {
		t.Error("a kind in another case")
	}
	f.get(c, "/ui/audit?colour=red", 400)
	f.get(c, "/ui/audit?range=3w", 400)
	if b := f.get(c, "/ui/audit?limit=10", 200); !strings.Contains(b, `<option value="10" selected>`) {
		t.Error("limit=10 is not shown as the page size")
	}
	if b := f.get(c, "/ui/audit?since=2026-03-01+11:59:00", 200); !strings.Contains(b, `value="2026-03-01 11:59:00"`) {
		t.Error("a 24-hour UTC time with a space")
	}
	// The records were written now (the log's clock): two hours later.
	f.clock.Add(time.Since(f.clock.Now()) + 2*time.Hour)
	c = f.signIn(keyRev)
	if b := f.get(c, "/ui/audit?range=1h", 200); !strings.Contains(b, `id="none"`) || !strings.Contains(b, `class="on"`) {
		t.Error("the last hour holds records written two hours ago")
	}
	if b := f.get(c, "/ui/audit?range=24h", 200); !strings.Contains(b, "fe_1") {
		t.Error("the last day misses records")
	}
	// The list shows the code's first line; that read is recorded and
	// hidden from the list unless asked for.
	body := f.get(c, "/ui/audit", 200)
	if !strings.Contains(body, `<code class="line">print(&#39;&#39;&#39;&lt;script&gt;`) || !strings.Contains(body, `class="subject-link mono"`) {
		t.Error("the first line of code is not in the row")
	}
	if strings.Contains(body, "<td>capture_read") || !strings.Contains(body, `id="show-reads"`) {
		t.Error("capture reads are listed by default")
	}
	if b := f.get(c, "/ui/audit?reads=1", 200); !strings.Contains(b, "<td>capture_read") {
		t.Error("reads=1 does not list capture reads")
	}
	if b := f.get(c, "/ui/audit?kind=capture_read", 200); !strings.Contains(b, "<td>capture_read") {
		t.Error("kind=capture_read does not list them")
	}
}

// A page of records hidden as capture reads is filled from older ones,
// and the Older link goes on from the last record shown.
func TestListSkipsReadsAcrossPages(t *testing.T) {
	f := newFixture(t)
	for range 30 {
		f.add(audit.CaptureRead{CaptureID: f.acmeExecCap, CaptureTenant: "acme", CaptureKind: "exec", KeyID: "rev-1", ReaderTenant: "acme", Via: "ui", Action: "view"}.Record())
	}
	c := f.signIn(keyRev)
	body := f.get(c, "/ui/audit?limit=1", 200)
	if !strings.Contains(body, "fe_1") || !strings.Contains(body, "30 skipped") || !strings.Contains(body, `id="older"`) {
		t.Fatalf("the first page: %s", body)
	}
}

// The trace follows both ids: a call sent under another X-Session-Id
// stays in its sandbox session's trace and in the agent session's; a
// sandbox session shows the fetches its agent made while it ran.
func TestTraceGroupsBothIDs(t *testing.T) {
	f := newFixture(t)
	code := f.put(&capture.Capture{Kind: "exec", Tenant: "acme", KeyID: "agent-1", Meta: map[string]string{"exec_id": "ex_call2", "result.0": "table", "result.1": "image/png", "result.2": "image/png"},
		Parts: []capture.Part{{Name: "code", Data: []byte("df.describe()\nplot()")}, {Name: "stdout", Data: []byte("described\n")}, {Name: "stderr"},
			{Name: "result.0", ContentType: "text/plain", Data: []byte("   n\ncount 3")}, {Name: "result.1", ContentType: "image/png", Data: pngOf(30, 20)},
			{Name: "result.2", ContentType: "image/png", Data: []byte("<svg onload=alert(1)>")}}})
	prof := audit.ProfileRef{Name: "data", Version: "v1"}
	f.add(audit.SessionStart(audit.Who{Tenant: "acme", KeyID: "agent-1", Session: "agent-A"}, "ses_x", prof, "sha256:img", "runc", nil))
	f.add(&audit.Record{Kind: audit.KindExec, Tenant: "acme", KeyID: "agent-1", Session: "agent-A", SandboxSession: "ses_x", Subject: "ex_call1", Status: "ok", ExecProfile: &prof, DurationsMS: map[string]int64{"run": 12}})
	f.add(&audit.Record{Kind: audit.KindFetch, Tenant: "acme", KeyID: "agent-1", Session: "agent-A", Subject: "fe_during", Status: "ok", Detail: map[string]string{"url": "http://docs.test/x"}})
	f.add(&audit.Record{Kind: audit.KindExec, Tenant: "acme", KeyID: "agent-1", Session: "agent-B", SandboxSession: "ses_x", Subject: "ex_call2", Status: "error", ExecProfile: &prof,
		DurationsMS: map[string]int64{"run": 30}, Detail: map[string]string{"exception": "KeyError"}, CaptureIDs: []string{code.ID}})
	f.add(audit.SessionEnd("acme", "agent-1", "agent-A", "ses_x", "idle for 900 s", prof, "sb_1"))
	f.add(&audit.Record{Kind: audit.KindFetch, Tenant: "acme", KeyID: "agent-1", Session: "agent-A", Subject: "fe_later", Status: "ok", Time: time.Now().Add(time.Hour)})

	c := f.signIn(keyRev)
	agent := f.get(c, "/ui/session?id=agent-A", 200)
	for _, want := range []string{"ex_call1", "ex_call2", "fe_during", "fe_later", "agent session (X-Session-Id)"} {
		if !strings.Contains(agent, want) {
			t.Errorf("the agent session's trace lacks %s", want)
		}
	}
	sb := f.get(c, "/ui/session?id=ses_x", 200)
	for _, want := range []string{"ex_call1", "ex_call2", "fe_during", "sandbox session", "idle for 900 s", "agent-B", "df.describe()", "count 3", "KeyError",
		"/figure?name=result.1", "not a PNG image", "2, <span class=\"st st-bad\">1 failed</span>"} {
		if !strings.Contains(sb, want) {
			t.Errorf("the sandbox session's trace lacks %q", want)
		}
	}
	if strings.Contains(sb, "fe_later") || strings.Contains(sb, "name=result.2") {
		t.Error("the sandbox session's trace shows a fetch made after it ended, or a figure that is not a PNG")
	}
	if b := f.get(c, "/ui/session?id=agent-B", 200); !strings.Contains(b, "ex_call2") || !strings.Contains(b, "ses_x") {
		t.Error("agent-B's trace")
	}
}

// Figures are served as PNGs the page encodes, after their read is
// recorded; anything else is refused.
func TestFigures(t *testing.T) {
	f := newFixture(t)
	trailing := append(pngOf(4, 3), []byte("<html><script>alert(1)</script></html>")...)
	cp := f.put(&capture.Capture{Kind: "exec", Tenant: "acme", KeyID: "agent-1", Meta: map[string]string{"result.0": "image/png", "result.1": "image/png"},
		Parts: []capture.Part{{Name: "code", Data: []byte("plot()")}, {Name: "result.0", ContentType: "image/png", Data: trailing},
			{Name: "result.1", ContentType: "image/png", Data: []byte("GIF89a not a png")}}})
	huge := f.put(&capture.Capture{Kind: "exec", Tenant: "acme", KeyID: "agent-1", Parts: []capture.Part{{Name: "result.0", ContentType: "image/png", Data: hugePNGHeader()}}})
	c := f.signIn(keyRev)
	rec := f.do(request{path: "/ui/captures/" + cp.ID + "/figure?name=result.0", cookies: []*http.Cookie{c}})
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "image/png" || !strings.Contains(rec.Header().Get("Content-Security-Policy"), "sandbox") {
		t.Fatalf("figure: %d %v", rec.Code, rec.Header())
	}
	img, err := png.Decode(bytes.NewReader(rec.Body.Bytes()))
	if err != nil || img.Bounds().Dx() != 4 || bytes.Contains(rec.Body.Bytes(), []byte("<script")) {
		t.Fatalf("the figure served is not the clean PNG: %v", err)
	}
	reads := f.reads(cp.ID)
	if len(reads) != 1 || reads[0].Detail["part"] != "result.0" {
		t.Fatalf("figure reads: %+v", reads)
	}
	f.get(c, "/ui/captures/"+cp.ID+"/figure?name=result.1", http.StatusUnsupportedMediaType)
	f.get(c, "/ui/captures/"+huge.ID+"/figure?name=result.0", http.StatusUnsupportedMediaType)
	f.get(c, "/ui/captures/"+cp.ID+"/figure?name=code", http.StatusNotFound)
	f.get(c, "/ui/captures/"+f.otherCap+"/figure?name=result.0", http.StatusNotFound)
	if n := len(f.reads(cp.ID)); n != 1 {
		t.Errorf("refused figures were recorded as reads: %d", n)
	}
	if err := f.caps.Erase(context.Background(), cp.ID, "sec", "gone"); err != nil {
		t.Fatal(err)
	}
	f.get(c, "/ui/captures/"+cp.ID+"/figure?name=result.0", http.StatusGone)
}

// hugePNGHeader is a PNG header that claims 100000×100000 pixels.
func hugePNGHeader() []byte {
	b := pngOf(1, 1)
	// IHDR's width and height follow the 8-byte signature, the chunk's
	// length and type; the CRC no longer matches, DecodeConfig does not
	// check it.
	copy(b[16:24], []byte{0, 1, 0x86, 0xa0, 0, 1, 0x86, 0xa0})
	return b
}

// Holds and erasures: security and admin keys only, CSRF-checked, each
// an audit record; the record page shows the forms to them only.
func TestHoldAndErase(t *testing.T) {
	f := newFixture(t)
	rev, adm := f.signIn(keyRev), f.signIn(keyAdmin)
	if b := f.get(rev, "/ui/captures/"+f.acmeExecCap, 200); strings.Contains(b, "/erase") {
		t.Error("a reviewer sees the erase form")
	}
	if b := f.get(adm, "/ui/captures/"+f.acmeExecCap, 200); !strings.Contains(b, "/ui/captures/"+f.acmeExecCap+"/erase") || !strings.Contains(b, "Place a legal hold") {
		t.Error("an admin lacks the forms")
	}
	path := "/ui/captures/" + f.acmeExecCap
	if rec := f.post(rev, path+"/hold", url.Values{"reason": {"x"}}); rec.Code != http.StatusForbidden {
		t.Errorf("a reviewer's hold: %d", rec.Code)
	}
	if rec := f.post(adm, path+"/hold", url.Values{"reason": {"x"}, "csrf": {"forged"}}); rec.Code != http.StatusForbidden {
		t.Errorf("a hold with a forged token: %d", rec.Code)
	}
	tok := csrfOf(t, f.get(adm, "/ui/audit?kind=fetch", 200))
	if rec := f.do(request{method: http.MethodPost, path: path + "/hold", form: url.Values{"reason": {"x"}, "csrf": {tok}}, cookies: []*http.Cookie{adm},
		headers: map[string]string{"Origin": "http://evil.test", "Sec-Fetch-Site": "cross-site"}}); rec.Code != http.StatusForbidden {
		t.Errorf("a cross-site hold: %d", rec.Code)
	}
	if rec := f.post(adm, path+"/hold", url.Values{"reason": {""}}); rec.Code != http.StatusBadRequest {
		t.Errorf("a hold without a reason: %d", rec.Code)
	}
	rec := f.post(adm, path+"/hold", url.Values{"reason": {"case 42"}, "on": {"1"}, "back": {"/ui/audit/" + f.acmeExec}})
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/ui/audit/"+f.acmeExec+"?done=held" {
		t.Fatalf("hold: %d %s %s", rec.Code, rec.Header().Get("Location"), rec.Body)
	}
	if cp, _ := f.caps.Get(context.Background(), f.acmeExecCap); cp.Hold == nil || cp.Hold.By != "ops-1" {
		t.Fatal("the hold is not on")
	}
	if b := f.get(adm, "/ui/audit/"+f.acmeExec+"?done=held", 200); !strings.Contains(b, "legal hold is on") || !strings.Contains(b, "Lift the legal hold") {
		t.Error("the outcome or the release form")
	}
	if rec := f.post(adm, path+"/erase", url.Values{"reason": {"gdpr"}, "confirm": {"erase"}}); rec.Code != http.StatusConflict {
		t.Errorf("erasing a held capture: %d", rec.Code)
	}
	f.post(adm, path+"/hold", url.Values{"reason": {"case closed"}, "on": {"0"}})
	if rec := f.post(adm, path+"/erase", url.Values{"reason": {"gdpr"}}); rec.Code != http.StatusBadRequest {
		t.Errorf("an erasure without the confirmation: %d", rec.Code)
	}
	if rec := f.post(adm, path+"/erase", url.Values{"reason": {"gdpr"}, "confirm": {"erase"}}); rec.Code != http.StatusSeeOther {
		t.Fatalf("erase: %d %s", rec.Code, rec.Body)
	}
	if cp, _ := f.caps.Get(context.Background(), f.acmeExecCap); cp.Erased == nil || cp.Erased.By != "ops-1" {
		t.Fatal("not erased")
	}
	var kinds []string
	recs, _, _ := f.log.Query(context.Background(), audit.Filter{Subject: f.acmeExecCap})
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Kind != audit.KindCaptureRead {
			kinds = append(kinds, recs[i].Kind+"/"+recs[i].Action)
		}
	}
	if strings.Join(kinds, ",") != "capture_hold/hold,capture_hold/release,capture_erase/" {
		t.Errorf("records: %v", kinds)
	}
}

// downloadBundle posts a bundle form and reads the archive.
func (f *fixture) downloadBundle(c *http.Cookie, form url.Values, want int) *bundle.Bundle {
	f.t.Helper()
	rec := f.post(c, "/ui/bundle", form)
	if rec.Code != want {
		f.t.Fatalf("bundle %v: %d %s", form, rec.Code, rec.Body)
	}
	if want != 200 {
		return nil
	}
	if rec.Header().Get("Content-Type") != "application/gzip" || !strings.HasPrefix(rec.Header().Get("Content-Disposition"), `attachment; filename="bnd_`) {
		f.t.Fatalf("bundle headers %v", rec.Header())
	}
	b, err := bundle.Read(bytes.NewReader(rec.Body.Bytes()), bundle.Limits{})
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// A record, a session and a search download as bundles that verify; the
// download is recorded first; an erased capture goes as its tombstone.
func TestBundles(t *testing.T) {
	f := newFixture(t)
	code, out := []byte("print(6*7)\n"), []byte("42\n")
	cp := f.put(&capture.Capture{Kind: "exec", Tenant: "acme", KeyID: "agent-1", Meta: map[string]string{"exec_id": "ex_b"},
		Parts: []capture.Part{{Name: "code", Data: code}, {Name: "stdin"}, {Name: "stdout", Data: out}, {Name: "stderr"}}})
	exec := f.add(&audit.Record{Kind: audit.KindExec, Tenant: "acme", KeyID: "agent-1", Session: "sess-b", Subject: "ex_b", Status: "ok", CodeSHA256: audit.SHA256(code),
		Outputs: []audit.Output{{Name: "stdout", Size: 3, SHA256: audit.SHA256(out)}, {Name: "stderr", SHA256: audit.SHA256(nil)}}, CaptureIDs: []string{cp.ID}})
	f.add(&audit.Record{Kind: audit.KindFetch, Tenant: "acme", KeyID: "agent-1", Session: "sess-b", Subject: "fe_b", Status: "ok"})
	c := f.signIn(keyRev)
	b := f.downloadBundle(c, url.Values{"scope": {"record"}, "id": {exec.ID}}, 200)
	rep := bundle.Verify(b)
	if !rep.OK || rep.Captures != 1 || rep.Parts != 4 || rep.PartsChained != 3 || rep.Records != 2 || len(rep.ExportRecords) != 1 || !rep.HeadInBundle {
		t.Fatalf("record bundle: %+v", rep)
	}
	if b.Records[0].Record.ID != exec.ID || b.Records[1].Record.Kind != audit.KindBundle || b.Records[1].Record.Detail["scope"] != "record" {
		t.Fatalf("records: %+v", b.Records)
	}
	// The fixture's exec record names digests its capture does not have:
	// the bundle says so.
	b = f.downloadBundle(c, url.Values{"scope": {"record"}, "id": {f.acmeExec}}, 200)
	if rep := bundle.Verify(b); rep.OK || !strings.Contains(strings.Join(rep.Problems, " "), "but record 1 names") {
		t.Fatalf("a capture that does not match its record: %+v", rep.Problems)
	}
	reads := f.reads(f.acmeExecCap)
	if last := reads[len(reads)-1]; last.Action != "bundle" || last.Detail["bundle"] != b.Manifest.ID || last.Seq > b.Records[1].Record.Seq {
		t.Errorf("the bundle's capture read: %+v", last)
	}

	b = f.downloadBundle(c, url.Values{"scope": {"session"}, "id": {"sess-b"}}, 200)
	if rep := bundle.Verify(b); !rep.OK || rep.Records != 3 || rep.Captures != 1 || len(rep.Segments) != 2 {
		t.Fatalf("session bundle: %+v", rep)
	}
	b = f.downloadBundle(c, url.Values{"scope": {"session"}, "id": {"sess-1"}}, 200)
	for _, l := range b.Records {
		if l.Record.Tenant != "acme" {
			t.Fatalf("another tenant's record in a reviewer's bundle: %+v", l.Record)
		}
	}
	b = f.downloadBundle(c, url.Values{"scope": {"search"}, "q": {"kind=fetch"}}, 200)
	if rep := bundle.Verify(b); !rep.OK || rep.Records != 3 || b.Manifest.Query != "kind=fetch" {
		t.Fatalf("search bundle: %+v", rep)
	}

	// Erased: the tombstone, no content.
	if err := f.caps.Erase(context.Background(), cp.ID, "sec", "gdpr"); err != nil {
		t.Fatal(err)
	}
	b = f.downloadBundle(c, url.Values{"scope": {"record"}, "id": {exec.ID}}, 200)
	if rep := bundle.Verify(b); !rep.OK || rep.Erased != 1 || rep.Parts != 0 || len(b.Parts) != 0 {
		t.Fatalf("erased capture in a bundle: %+v", rep)
	}

	// Refusals: another tenant's record, a forged token, an audit log
	// that cannot record the download.
	f.downloadBundle(c, url.Values{"scope": {"record"}, "id": {f.otherExec}}, http.StatusNotFound)
	f.downloadBundle(c, url.Values{"scope": {"record"}, "id": {f.acmeFetch}, "csrf": {"forged"}}, http.StatusForbidden)
	f.downloadBundle(c, url.Values{"scope": {"everything"}}, http.StatusBadRequest)
	f.h = mount(New(Config{Audit: failingAudit{f.log}, Captures: f.caps, Keys: keyring(t), Now: f.clock.Now, Origins: []string{origin}}))
	c = f.signIn(keyRev)
	rec := f.post(c, "/ui/bundle", url.Values{"scope": {"record"}, "id": {f.acmeFetch}})
	if rec.Code != http.StatusServiceUnavailable || strings.Contains(rec.Body.String(), "Visible words") {
		t.Fatalf("a bundle whose download could not be recorded: %d", rec.Code)
	}
}
