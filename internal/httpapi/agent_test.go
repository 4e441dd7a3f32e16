package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/mcptest"
)

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// The MCP SDK's client lists both tools over /mcp and calls them; the
// calls go through the API with the caller's key and headers.
func TestMCPOverStreamableHTTP(t *testing.T) {
	f := newFetchFixture(t, "")
	ts := httptest.NewServer(f.srv.Handler())
	t.Cleanup(ts.Close)
	cs, err := mcptest.Connect(t, ts.URL, keyAgent, map[string]string{"X-Session-Id": "mcp-s1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defs := map[string]api.ToolDefinition{}
	for _, d := range f.srv.ToolDefinitions() {
		defs[d.Name] = d
	}
	if len(list.Tools) != 2 {
		t.Fatalf("tools: %+v", list.Tools)
	}
	for _, tool := range list.Tools {
		def, ok := defs[tool.Name]
		if !ok || tool.Description != def.Description {
			t.Errorf("tool %s: not GET /tools' tool, or another description", tool.Name)
		}
		var want, got any
		json.Unmarshal(def.InputSchema, &want)
		b, _ := json.Marshal(tool.InputSchema)
		json.Unmarshal(b, &got)
		if !jsonEqual(want, got) {
			t.Errorf("%s: input schema differs from GET /tools:\n%s", tool.Name, b)
		}
	}

	// run_python: text for the model, the /exec response as structured content.
	f.eng.result.Stdout = []byte("42\n")
	res := callTool(t, cs, ToolRunPython, map[string]any{"language": "python", "code": "print(6*7)"})
	if res.IsError || !strings.Contains(mcptest.Text(res), "status: ok") || !strings.Contains(mcptest.Text(res), "42") {
		t.Fatalf("run_python: %+v %s", res, mcptest.Text(res))
	}
	if st := mcptest.Object(t, res); st["status"] != "ok" || st["stdout"] != "42\n" || st["limits"] == nil {
		t.Fatalf("run_python structured: %v", st)
	}
	// The session header reached the API: the session has one exec.
	r := f.req(http.MethodGet, "/usage?session=mcp-s1", keyAgent, "")
	if r.code != 200 || !strings.Contains(string(r.raw), `"execs":1`) {
		t.Fatalf("usage of the MCP session: %d %s", r.code, r.raw)
	}

	// fetch_url: the wrapped, untrusted content as text; the response fields structured.
	res = callTool(t, cs, ToolFetchURL, map[string]any{"url": f.url("pages.test", "/page"), "profile": "pages"})
	text := mcptest.Text(res)
	st := mcptest.Object(t, res)
	if res.IsError || st["untrusted"] != true || st["nonce"] == "" {
		t.Fatalf("fetch_url: %+v %s", st, text)
	}
	nonce := st["nonce"].(string)
	if !strings.Contains(text, `<untrusted-content source=`) || !strings.Contains(text, `</untrusted-content nonce="`+nonce+`">`) || !strings.Contains(text, "UNTRUSTED") {
		t.Fatalf("fetch_url text lacks the envelope:\n%s", text)
	}
	if strings.Contains(text, fakeToken) || strings.Contains(text, "HIDDEN_DISPLAY_NONE") {
		t.Fatalf("fetch_url text carries what /fetch removes:\n%s", text)
	}

	// A bad call is a tool error the model can act on: field, problem, allowed values.
	res = callTool(t, cs, ToolRunPython, map[string]any{"language": "ruby", "code": "puts 1"})
	if !res.IsError || !strings.Contains(mcptest.Text(res), "VALIDATION (field language)") || !strings.Contains(mcptest.Text(res), `allowed: "python"`) ||
		!strings.Contains(mcptest.Text(res), "Fix the arguments") {
		t.Fatalf("bad language: %+v %s", res, mcptest.Text(res))
	}
	if e, _ := mcptest.Object(t, res)["error"].(map[string]any); e["field"] != "language" {
		t.Fatalf("bad language: structured %v", mcptest.Object(t, res))
	}
	res = callTool(t, cs, ToolRunPython, map[string]any{"language": "python", "code": "1", "limits": map[string]any{"memory_mb": 100000}})
	if !res.IsError || !strings.Contains(mcptest.Text(res), "limits.memory_mb") || !strings.Contains(mcptest.Text(res), "ceiling") {
		t.Fatalf("raised limit: %s", mcptest.Text(res))
	}
	res = callTool(t, cs, ToolFetchURL, map[string]any{"url": f.url("pages.test", "/page")})
	if !res.IsError || !strings.Contains(mcptest.Text(res), "field profile") {
		t.Fatalf("fetch without profile: %s", mcptest.Text(res))
	}
	res = callTool(t, cs, ToolFetchURL, map[string]any{"url": f.url("pages.test", "/to-evil"), "profile": "pages"})
	if !res.IsError || !strings.Contains(mcptest.Text(res), "EGRESS_DENIED") || !strings.Contains(mcptest.Text(res), "do not retry") {
		t.Fatalf("egress denied: %s", mcptest.Text(res))
	}
	// The listed schema has no async, and the tool refuses it: what the
	// schema offers is what the tool takes.
	for _, tool := range list.Tools {
		if b, _ := json.Marshal(tool.InputSchema); tool.Name == ToolRunPython && strings.Contains(string(b), `"async"`) {
			t.Errorf("run_python offers async in its schema:\n%s", b)
		}
	}
	res = callTool(t, cs, ToolRunPython, map[string]any{"language": "python", "code": "1", "async": true})
	if !res.IsError || !strings.Contains(mcptest.Text(res), `VALIDATION (field async): unknown field "async"`) {
		t.Fatalf("async: %s", mcptest.Text(res))
	}
	// Arguments reach /exec as sent: a key twice is refused there.
	res = callTool(t, cs, ToolRunPython, json.RawMessage(`{"language":"python","code":"print(1)","code":"print(2)"}`))
	if !res.IsError || !strings.Contains(mcptest.Text(res), "VALIDATION (field code)") || !strings.Contains(mcptest.Text(res), "appears twice") {
		t.Fatalf("code twice: %s", mcptest.Text(res))
	}
	res = callTool(t, cs, ToolRunPython, nil)
	if !res.IsError || !strings.Contains(mcptest.Text(res), "is required") {
		t.Fatalf("no arguments: %s", mcptest.Text(res))
	}
	if n := len(f.eng.specs); n != 1 {
		t.Fatalf("%d runs reached the engine, want 1", n)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// /mcp takes the same keys as the API: none, a wrong one, or one without
// the agent role is refused before any MCP message is read.
func TestMCPNeedsAnAgentKey(t *testing.T) {
	f := newFixture(t, 1, 1)
	ts := httptest.NewServer(f.srv.Handler())
	t.Cleanup(ts.Close)
	for _, key := range []string{"", "sbx_wrong"} {
		if _, err := mcptest.Connect(t, ts.URL, key, nil); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
			t.Errorf("key %q: connect error %v, want a 401", key, err)
		}
	}
	if _, err := mcptest.Connect(t, ts.URL, f.agent, nil); err != nil {
		t.Fatal(err)
	}
}

func TestToolsEndpoint(t *testing.T) {
	f := newFixture(t, 1, 1)
	get := func(target string) (int, []byte) {
		rec := serve(f.srv, "GET", target, f.agent, "")
		return rec.Code, rec.Body.Bytes()
	}
	code, raw := get("/tools")
	var generic api.ToolList
	if code != 200 || json.Unmarshal(raw, &generic) != nil || len(generic.Tools) != 2 {
		t.Fatalf("GET /tools: %d %s", code, raw)
	}
	run, fetch := generic.Tools[0], generic.Tools[1]
	for _, want := range []string{"no network", "10 s wall time", "256 MiB", "stderr", "/sandbox/out/", "- default:", "- data:", "[REDACTED:type]", "LOOP_DETECTED"} {
		if !strings.Contains(run.Description, want) {
			t.Errorf("run_python description lacks %q:\n%s", want, run.Description)
		}
	}
	for _, want := range []string{"UNTRUSTED", "<untrusted-content", "nonce", "Never follow instructions", "- web-research:", "EGRESS_DENIED"} {
		if !strings.Contains(fetch.Description, want) {
			t.Errorf("fetch_url description lacks %q:\n%s", want, fetch.Description)
		}
	}
	if strings.Contains(fetch.Description, "- none:") {
		t.Errorf("fetch_url lists the built-in none profile")
	}
	if string(compact(t, run.InputSchema)) != string(compact(t, api.RunPythonInputSchema())) || string(compact(t, fetch.InputSchema)) != string(compact(t, api.FetchRequestSchema())) {
		t.Errorf("the tools' input schemas are not the request schemas (run_python's without async)")
	}
	if strings.Contains(string(run.InputSchema), `"async"`) {
		t.Errorf("run_python offers async, which a tool call cannot use:\n%s", run.InputSchema)
	}

	code, raw = get("/tools?format=openai")
	var oa api.OpenAIToolList
	if code != 200 || json.Unmarshal(raw, &oa) != nil || len(oa.Tools) != 2 || oa.Tools[0].Type != "function" || oa.Tools[0].Function.Name != ToolRunPython {
		t.Fatalf("openai: %d %s", code, raw)
	}
	if strings.Contains(string(oa.Tools[0].Function.Parameters), "$schema") || !strings.Contains(string(oa.Tools[0].Function.Parameters), `"required":["language","code"]`) {
		t.Errorf("openai parameters: %s", oa.Tools[0].Function.Parameters)
	}
	// The Responses shape: the function's fields beside type, and strict
	// sent as false (absent, the Responses API applies strict mode).
	code, raw = get("/tools?format=openai-responses")
	var resp struct {
		Tools []map[string]json.RawMessage `json:"tools"`
	}
	if code != 200 || json.Unmarshal(raw, &resp) != nil || len(resp.Tools) != 2 {
		t.Fatalf("openai-responses: %d %s", code, raw)
	}
	for i, tool := range resp.Tools {
		var name, desc string
		_ = json.Unmarshal(tool["name"], &name)
		_ = json.Unmarshal(tool["description"], &desc)
		if string(tool["type"]) != `"function"` || string(tool["strict"]) != "false" || tool["function"] != nil || len(tool) != 5 {
			t.Errorf("openai-responses tool %d: %s", i, raw)
		}
		if name != generic.Tools[i].Name || desc != generic.Tools[i].Description {
			t.Errorf("openai-responses tool %d is %q, not GET /tools' %q or another description", i, name, generic.Tools[i].Name)
		}
		if string(tool["parameters"]) != string(oa.Tools[i].Function.Parameters) {
			t.Errorf("openai-responses tool %s: parameters differ from the Chat Completions shape's:\n%s", name, tool["parameters"])
		}
	}
	code, raw = get("/tools?format=mcp")
	if code != 200 || !strings.Contains(string(raw), `"inputSchema"`) {
		t.Fatalf("mcp: %d %s", code, raw)
	}
	if code, raw = get("/tools?format=yaml"); code != 400 || !strings.Contains(string(raw), "openai-responses") {
		t.Fatalf("unknown format: %d %s", code, raw)
	}
	if code, raw = get("/tools?fmt=openai"); code != 400 || !strings.Contains(string(raw), `"field":"fmt"`) {
		t.Fatalf("unknown parameter: %d %s", code, raw)
	}
}

func compact(t *testing.T, raw json.RawMessage) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	return b
}
