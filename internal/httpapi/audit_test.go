package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/runner"
)

func auditPage(t *testing.T, r *reply) api.AuditPage {
	t.Helper()
	if r.code != 200 {
		t.Fatalf("GET /audit: %d %s", r.code, r.raw)
	}
	var p api.AuditPage
	if err := json.Unmarshal(r.raw, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExecIsAuditedBeforeTheAnswer(t *testing.T) {
	f := newCtl(t, "", 0)
	f.eng.result = runner.Result{Status: runner.StatusOK, Stdout: []byte("hello\n"), ImageID: "sha256:img",
		Files: []runner.OutFile{{Path: "a.txt", Content: []byte("x")}}}
	r := f.exec(`{"language":"python","code":"print('hello')","stdin":"in","files":[{"path":"d/in.csv","content":"YSxi"}]}`, "X-Session-Id", "s-1",
		"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if r.code != 200 {
		t.Fatalf("exec: %d %s", r.code, r.raw)
	}
	id := r.body["id"].(string)
	// The record is there as soon as the answer is: it was written first.
	p := auditPage(t, f.req(http.MethodGet, "/audit?kind=exec&subject="+id, keyRev, ""))
	if len(p.Records) != 1 {
		t.Fatalf("want one record for %s, got %d", id, len(p.Records))
	}
	rec := p.Records[0]
	if rec.Tenant != "acme" || rec.KeyID != "agent-1" || rec.Session != "s-1" || rec.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		rec.CodeSHA256 != audit.SHA256([]byte("print('hello')")) || rec.Status != "ok" || rec.Image != "sha256:img" ||
		rec.ExecProfile == nil || rec.ExecProfile.Name != "default" || rec.ExecProfile.Version == "" || len(rec.CaptureIDs) != 1 || rec.Hash == "" {
		t.Fatalf("record: %+v", rec)
	}
	if len(rec.Outputs) != 3 || rec.Outputs[0].SHA256 != audit.SHA256([]byte("hello\n")) || rec.Outputs[2].Name != "files/a.txt" {
		t.Fatalf("outputs: %+v", rec.Outputs)
	}
	if len(rec.Inputs) != 2 || rec.Inputs[0] != (audit.Output{Name: "stdin", Size: 2, SHA256: audit.SHA256([]byte("in"))}) ||
		rec.Inputs[1] != (audit.Output{Name: "files/d/in.csv", Size: 3, SHA256: audit.SHA256([]byte("a,b"))}) {
		t.Fatalf("inputs: %+v", rec.Inputs)
	}
	if strings.Contains(string(mustJSON(rec)), "print('hello')") {
		t.Fatal("the record holds the code itself")
	}
	// The code and outputs are in the capture.
	capt, err := f.srv.captures.Get(context.Background(), rec.CaptureIDs[0])
	if err != nil || string(capt.Part("code").Data) != "print('hello')" || string(capt.Part("stdin").Data) != "in" || string(capt.Part("stdout").Data) != "hello\n" {
		t.Fatalf("capture: %v %+v", err, capt)
	}
	// A refusal is audited too.
	f.req(http.MethodPost, "/admin/freeze", keyAdmin, `{"reason":"drill"}`)
	if r := f.exec(code1); r.code != 503 {
		t.Fatalf("frozen exec: %d", r.code)
	}
	p = auditPage(t, f.req(http.MethodGet, "/audit?status=FROZEN", keyRev, ""))
	if len(p.Records) != 1 || p.Records[0].Kind != audit.KindExec {
		t.Fatalf("frozen refusal not audited: %+v", p.Records)
	}
	// The freeze itself is an admin record (tenant ops: visible to admin).
	p = auditPage(t, f.req(http.MethodGet, "/audit?kind=admin", keyAdmin, ""))
	if len(p.Records) != 1 || p.Records[0].Action != "freeze" || p.Records[0].Message != "drill" || p.Records[0].KeyID != "ops-1" {
		t.Fatalf("freeze record: %+v", p.Records)
	}
	rep, err := f.srv.audit.Verify(context.Background())
	if err != nil || !rep.OK || rep.Records != 3 {
		t.Fatalf("verify: %v %+v", err, rep)
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func TestAuditRolesAndTenants(t *testing.T) {
	f := newCtl(t, "", 0)
	f.exec(code1)
	f.req(http.MethodPost, "/exec", keyOther, code1)
	cases := []struct {
		key, query string
		code, n    int
	}{
		{keyAgent, "", 403, 0}, // agents never read the audit log
		{keyRev, "", 200, 1},   // a reviewer sees its tenant
		{keyRev, "?tenant=other", 403, 0},
		{keySec, "", 200, 1},   // security holds reviewer
		{keyAdmin, "", 200, 2}, // admin sees every tenant
		{keyAdmin, "?tenant=other", 200, 1},
		{keyRev, "?limit=0", 400, 0},
		{keyRev, "?since=yesterday", 400, 0},
		{keyRev, "?code_sha256=abc", 400, 0},
		{keyRev, "?bogus=1", 400, 0},
		{"", "", 401, 0},
	}
	for _, c := range cases {
		r := f.req(http.MethodGet, "/audit"+c.query, c.key, "")
		if r.code != c.code {
			t.Errorf("%s %s: %d %s", c.key, c.query, r.code, r.raw)
			continue
		}
		if c.code == 200 {
			if p := auditPage(t, r); len(p.Records) != c.n {
				t.Errorf("%s %s: %d records, want %d", c.key, c.query, len(p.Records), c.n)
			}
		}
	}
	// One record by id: another tenant's is not found.
	p := auditPage(t, f.req(http.MethodGet, "/audit?tenant=other", keyAdmin, ""))
	id := p.Records[0].ID
	if r := f.req(http.MethodGet, "/audit/"+id, keyRev, ""); r.code != 404 {
		t.Fatalf("reviewer read another tenant's record: %d", r.code)
	}
	if r := f.req(http.MethodGet, "/audit/"+id, keySec, ""); r.code != 200 || r.body["id"] != id {
		t.Fatalf("security key of the tenant: %d %s", r.code, r.raw)
	}
}

func TestAuditFailureWithholdsTheResult(t *testing.T) {
	f := newCtl(t, "", 0)
	f.audit.failing.Store(true)
	r := f.exec(code1, "Idempotency-Key", "audit-k")
	if r.code != 503 || r.errCode() != api.CodeAuditUnavailable || strings.Contains(string(r.raw), `"stdout"`) {
		t.Fatalf("exec with a failing audit log: %d %s", r.code, r.raw)
	}
	// The retry does not run the code again.
	r = f.exec(code1, "Idempotency-Key", "audit-k")
	if r.code != 503 || f.runs() != 1 {
		t.Fatalf("retry: %d, %d runs", r.code, f.runs())
	}
}

// A session's file read whose record cannot be written is withheld; an
// upload says it happened but the answer is a 503.
func TestAuditFailureWithholdsASessionFile(t *testing.T) {
	f := newCtl(t, "", 0)
	id := f.newSession(keyAgent, `{}`)
	secret := base64.StdEncoding.EncodeToString([]byte("held back"))
	if r := f.req(http.MethodPost, "/sessions/"+id+"/files", keyAgent, `{"files":[{"path":"a.txt","content":"`+secret+`"}]}`); r.code != 200 {
		t.Fatalf("put: %d %s", r.code, r.raw)
	}
	f.audit.failing.Store(true)
	if r := f.req(http.MethodGet, "/sessions/"+id+"/files/a.txt", keyAgent, ""); r.code != 503 || r.errCode() != api.CodeAuditUnavailable || strings.Contains(string(r.raw), secret) {
		t.Fatalf("get with a failing audit log: %d %s", r.code, r.raw)
	}
	if r := f.req(http.MethodPost, "/sessions/"+id+"/files", keyAgent, `{"files":[{"path":"b.txt","content":"`+secret+`"}]}`); r.code != 503 || r.errCode() != api.CodeAuditUnavailable {
		t.Fatalf("put with a failing audit log: %d %s", r.code, r.raw)
	}
}

// A capture whose read cannot be recorded is not sent.
func TestAuditFailureWithholdsACapture(t *testing.T) {
	f := newCtl(t, "", 0)
	f.exec(`{"language":"python","code":"print('kept back')"}`)
	capID := auditPage(t, f.req(http.MethodGet, "/audit?kind=exec", keyRev, "")).Records[0].CaptureIDs[0]
	f.audit.failing.Store(true)
	for _, p := range []string{"/captures/" + capID, "/captures/" + capID + "/raw?part=code"} {
		if r := f.req(http.MethodGet, p, keyRev, ""); r.code != 503 || r.errCode() != api.CodeAuditUnavailable || strings.Contains(string(r.raw), "kept back") {
			t.Errorf("GET %s with a failing audit log: %d %s", p, r.code, r.raw)
		}
	}
}
