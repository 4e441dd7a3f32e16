package security

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/e2e"
)

// TestDuplicateKeysAreRefused sends bodies that hold a key twice to the
// real sandboxd: parsers disagree on which value counts (Go's decoder took
// the last), so a body a reviewer, a proxy or a policy engine reads one way
// would run another. Each is a 400 VALIDATION naming the field, at any
// depth, spelt with an escape or in another case, on /exec, /fetch, a
// session and a tool call over /mcp; and nothing runs.
func TestDuplicateKeysAreRefused(t *testing.T) {
	ctx := context.Background()
	session := "contract-dup-" + e2e.RandHex(6)
	hdr := map[string]string{"Content-Type": "application/json", "X-Session-Id": session}
	post := func(path, body string) *e2e.Result {
		t.Helper()
		res, err := api.Do(ctx, e2e.Request{Method: http.MethodPost, Path: path, Body: []byte(body), Header: hdr})
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		return res
	}
	refused := func(res *e2e.Result, field string) {
		t.Helper()
		var body struct {
			Error struct{ Code, Field, Message string }
		}
		_ = json.Unmarshal(res.Body, &body)
		if res.Status != http.StatusBadRequest || body.Error.Code != "VALIDATION" || body.Error.Field != field ||
			!(strings.Contains(body.Error.Message, "twice") || strings.Contains(body.Error.Message, "name the same field")) {
			t.Errorf("want 400 VALIDATION field %s saying the key is repeated:\n%s", field, res)
		}
	}

	refused(post("/exec", `{"language":"python","code":"print('FIRST')","code":"print('SECOND')"}`), "code")
	refused(post("/exec", `{"language":"python","code":"print('FIRST')","\u0063ode":"print('SECOND')"}`), "code")
	refused(post("/exec", `{"language":"python","code":"print(1)","limits":{"timeout_ms":50,"timeout_ms":5000}}`), "limits.timeout_ms")
	refused(post("/exec", `{"language":"python","code":"print(1)","env":{"A":"x","A":"y"}}`), "env.A")
	refused(post("/fetch", `{"url":"http://127.0.0.1:9/a","url":"http://127.0.0.1:9/b","profile":"web-research"}`), "url")

	// A session: its calls are decoded without a schema, where Go's decoder
	// matches field names regardless of case.
	res := post("/sessions", `{}`)
	var ses struct {
		ID    string
		Usage struct{ Calls int }
	}
	if res.Status != http.StatusCreated || json.Unmarshal(res.Body, &ses) != nil || ses.ID == "" {
		t.Fatalf("creating a session:\n%s", res)
	}
	t.Cleanup(func() { _, _ = api.Do(ctx, e2e.Request{Method: http.MethodDelete, Path: "/sessions/" + ses.ID}) })
	refused(post("/sessions", `{"profile":"default","profile":"data"}`), "profile")
	refused(post("/sessions/"+ses.ID+"/exec", `{"code":"print('FIRST')","CODE":"print('SECOND')"}`), "code")
	refused(post("/sessions/"+ses.ID+"/files", `{"files":[{"path":"a.txt","content":"","path":"b.txt"}]}`), "files[0].path")

	// run_python over MCP: the arguments reach /exec as sent, and the
	// refusal is a tool error naming the field.
	mcpHdr := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "X-Session-Id": session}
	res, err := api.Do(ctx, e2e.Request{Method: http.MethodPost, Path: "/mcp", Header: mcpHdr, Body: []byte(
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_python","arguments":{"language":"python","code":"print('FIRST')","code":"print('SECOND')"}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != http.StatusOK || !strings.Contains(string(res.Body), `"isError":true`) || !strings.Contains(string(res.Body), "VALIDATION (field code)") ||
		!strings.Contains(string(res.Body), "appears twice") {
		t.Errorf("tools/call with code twice: want a tool error naming code:\n%s", res)
	}

	// Nothing ran: the agent session counted no exec, the sandbox session
	// no call.
	res, err = api.Get(ctx, "/usage?session="+session)
	var usage struct{ Used struct{ Execs int } }
	if err != nil || res.Status != http.StatusOK || json.Unmarshal(res.Body, &usage) != nil {
		t.Fatalf("usage of session %s: %v\n%s", session, err, res)
	}
	if usage.Used.Execs != 0 {
		t.Errorf("%d execs ran for refused bodies:\n%s", usage.Used.Execs, res)
	}
	res, err = api.Get(ctx, "/sessions/"+ses.ID)
	if err != nil || res.Status != http.StatusOK || json.Unmarshal(res.Body, &ses) != nil || ses.Usage.Calls != 0 {
		t.Errorf("the session ran %d calls for refused bodies: %v\n%s", ses.Usage.Calls, err, res)
	}
}
