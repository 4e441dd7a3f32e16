package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
)

// Captures: who may read, hold and erase them; erasure leaves a tombstone
// and an audit record; a hold stops erasure and retention; the sweeper
// deletes expired captures and audits each deletion.
func TestCaptureRoutes(t *testing.T) {
	f := newCtl(t, "", 0)
	r := f.exec(`{"language":"python","code":"print('cap me')"}`)
	if r.code != 200 {
		t.Fatalf("exec: %d %s", r.code, r.raw)
	}
	p := auditPage(t, f.req(http.MethodGet, "/audit?kind=exec", keyRev, ""))
	capID := p.Records[0].CaptureIDs[0]
	path := "/captures/" + capID

	// Reading: reviewers of the tenant and admins; never agents.
	for _, c := range []struct {
		key  string
		code int
	}{{keyAgent, 403}, {keyRev, 200}, {keyAdmin, 200}, {keySec, 404}, {"", 401}} {
		if g := f.req(http.MethodGet, path, c.key, ""); g.code != c.code {
			t.Errorf("GET %s with %q: %d, want %d", path, c.key, g.code, c.code)
		}
	}
	g := f.req(http.MethodGet, path, keyRev, "")
	if text, _ := g.body["text"].(map[string]any); text["code"] != "print('cap me')" {
		t.Fatalf("capture text: %s", g.raw)
	}
	raw := f.req(http.MethodGet, path+"/raw?part=code", keyRev, "")
	if raw.code != 200 || string(raw.raw) != "print('cap me')" || raw.header.Get("Content-Type") != "application/octet-stream" ||
		!strings.HasPrefix(raw.header.Get("Content-Disposition"), "attachment") || raw.header.Get("X-Content-Type-Options") != "nosniff" ||
		!strings.Contains(raw.header.Get("Content-Security-Policy"), "sandbox") {
		t.Fatalf("raw: %d %v %q", raw.code, raw.header, raw.raw)
	}
	if l := f.req(http.MethodGet, "/captures", keyRev, ""); l.code != 200 || !strings.Contains(string(l.raw), capID) {
		t.Fatalf("list: %d %s", l.code, l.raw)
	}
	if l := f.req(http.MethodGet, "/captures?cursor=bogus", keyRev, ""); l.code != 400 || l.errCode() != api.CodeValidation {
		t.Fatalf("a bad cursor: %d %s", l.code, l.raw)
	}

	// Holds and erasure: security and admin only, with a reason.
	if d := f.req(http.MethodDelete, path, keyRev, `{"reason":"x"}`); d.code != 403 {
		t.Fatalf("reviewer erased: %d", d.code)
	}
	if d := f.req(http.MethodDelete, path, keySec, `{"reason":"x"}`); d.code != 404 {
		t.Fatalf("another tenant's security key erased: %d", d.code)
	}
	if h := f.req(http.MethodPost, path+"/hold", keyAdmin, `{"on":true}`); h.code != 400 {
		t.Fatalf("hold without a reason: %d", h.code)
	}
	if h := f.req(http.MethodPost, path+"/hold", keyAdmin, `{"on":true,"reason":"case 7"}`); h.code != 200 {
		t.Fatalf("hold: %d %s", h.code, h.raw)
	}
	if d := f.req(http.MethodDelete, path, keyAdmin, `{"reason":"gdpr"}`); d.code != 409 || d.errCode() != "HELD" {
		t.Fatalf("erase under a hold: %d %s", d.code, d.raw)
	}
	if n, err := f.sweep(time.Now().Add(400 * 24 * time.Hour)); err != nil || n != 0 {
		t.Fatalf("the sweeper deleted a held capture: %d %v", n, err)
	}
	f.req(http.MethodPost, path+"/hold", keyAdmin, `{"on":false,"reason":"case closed"}`)
	if d := f.req(http.MethodDelete, path, keyAdmin, `{"reason":"gdpr request 12"}`); d.code != 200 || !strings.Contains(string(d.raw), `"erased"`) {
		t.Fatalf("erase: %d %s", d.code, d.raw)
	}
	if raw := f.req(http.MethodGet, path+"/raw?part=code", keyRev, ""); raw.code != 410 || strings.Contains(string(raw.raw), "cap me") {
		t.Fatalf("raw after erasure: %d %s", raw.code, raw.raw)
	}
	a := auditPage(t, f.req(http.MethodGet, "/audit?subject="+capID, keyAdmin, ""))
	kinds := []string{}
	for _, rec := range a.Records {
		kinds = append(kinds, rec.Kind+"/"+rec.Action)
	}
	// Every read of its content is a record too (the reviewer's two views
	// and download, the admin's view), written before the content went out.
	if strings.Join(kinds, ",") != "capture_erase/,capture_hold/release,capture_hold/hold,capture_read/raw,capture_read/view,capture_read/view,capture_read/view" {
		t.Fatalf("audit of the capture: %v", kinds)
	}
	raw0, byAdmin := a.Records[3], a.Records[5]
	if raw0.Tenant != "acme" || raw0.KeyID != "rev-1" || raw0.Detail["part"] != "code" || raw0.Detail["reader_tenant"] != "" || len(raw0.CaptureIDs) != 0 {
		t.Fatalf("the reviewer's download record: %+v", raw0)
	}
	if byAdmin.Tenant != "acme" || byAdmin.KeyID != "ops-1" || byAdmin.Detail["reader_tenant"] != "ops" {
		t.Fatalf("the admin's read of another tenant's capture: %+v", byAdmin)
	}

	// Retention: a second exec's capture expires after the profile's 30 days.
	f.exec(`{"language":"python","code":"print(2)"}`)
	if n, err := f.sweep(time.Now().Add(29 * 24 * time.Hour)); err != nil || n != 0 {
		t.Fatalf("swept before expiry: %d %v", n, err)
	}
	if n, err := f.sweep(time.Now().Add(31 * 24 * time.Hour)); err != nil || n != 1 {
		t.Fatalf("sweep after expiry: %d %v", n, err)
	}
	del := auditPage(t, f.req(http.MethodGet, "/audit?kind="+audit.KindCaptureDelete, keyRev, ""))
	if len(del.Records) != 1 || del.Records[0].Tenant != "acme" {
		t.Fatalf("retention deletion not audited: %+v", del.Records)
	}
	rep, err := f.srv.audit.Verify(context.Background())
	if err != nil || !rep.OK {
		t.Fatalf("verify: %v %+v", err, rep)
	}
}

// sweep runs the retention sweeper over the server's captures at now.
func (f *ctlFixture) sweep(now time.Time) (int, error) {
	w := &capture.Sweeper{Store: f.srv.captures.(capture.Forensics), Audit: f.srv.audit, Log: f.srv.log}
	return w.Sweep(context.Background(), now)
}
