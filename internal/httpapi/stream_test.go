package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/runner"
)

// streamEngine sends output through OnOutput as the real runner does, a
// secret split across two chunks.
type streamEngine struct{ *fakeEngine }

func (e streamEngine) Run(ctx context.Context, spec *runner.Spec) (*runner.Result, error) {
	key := "AKIA" + "QYLPMN5HKRW7TXZ4"
	if spec.OnOutput != nil {
		spec.OnOutput("stdout", []byte("line one\nkey "+key[:10]))
		spec.OnOutput("stdout", []byte(key[10:]+"\n"))
		spec.OnOutput("stderr", []byte("warn\n"))
	}
	return e.fakeEngine.Run(ctx, spec)
}

func TestExecStreamEvents(t *testing.T) {
	f := newCtl(t, "", 0)
	f.srv = f.srv.with(t, func(c *Config) { c.Engine = streamEngine{f.eng} })
	r := f.req(http.MethodPost, "/exec", keyAgent, code1, "Accept", "text/event-stream")
	if r.code != 200 || r.header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %v %s", r.code, r.header, r.raw)
	}
	body := string(r.raw)
	for _, want := range []string{"event: stdout\ndata: {\"text\":\"line one\\n", "[REDACTED:aws_access_key_id]", "event: stderr\ndata: {\"text\":\"warn\\n\"}", "event: result\ndata: {\"id\":"} {
		if !strings.Contains(body, want) {
			t.Errorf("stream lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "QYLPMN5HKR") || !strings.HasSuffix(body, "\n\n") || strings.Index(body, "event: result") < strings.LastIndex(body, "event: stdout") {
		t.Fatalf("stream:\n%s", body)
	}
	// Refused before any output: the ordinary JSON error and status.
	for _, c := range []struct {
		body, hdr string
		code      int
	}{
		{`{"language":"python","code":"1","async":true}`, "", 400},
		{code1, "k-1", 400},
		{`{"language":"cobol","code":"1"}`, "", 400},
	} {
		h := []string{"Accept", "text/event-stream"}
		if c.hdr != "" {
			h = append(h, "Idempotency-Key", c.hdr)
		}
		r := f.req(http.MethodPost, "/exec", keyAgent, c.body, h...)
		if r.code != c.code || r.errCode() != api.CodeValidation {
			t.Errorf("%s: %d %s", c.body, r.code, r.raw)
		}
	}
	f.req(http.MethodPost, "/admin/freeze", keyAdmin, "")
	if r := f.req(http.MethodPost, "/exec", keyAgent, code1, "Accept", "text/event-stream"); r.code != 503 || r.errCode() != api.CodeFrozen {
		t.Fatalf("frozen stream: %d %s", r.code, r.raw)
	}
}
