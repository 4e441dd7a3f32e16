package mcptest

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestTextAndStructured(t *testing.T) {
	r := &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: "status: ok\n"}, &mcp.ImageContent{MIMEType: "image/png"}, &mcp.TextContent{Text: "42"}},
		StructuredContent: json.RawMessage(`{"status":"ok","stdout":"42\n"}`),
	}
	if got := Text(r); got != "status: ok\n42" {
		t.Errorf("Text = %q: want the text parts joined, the image left out", got)
	}
	var v struct{ Status, Stdout string }
	if err := Structured(r, &v); err != nil || v.Status != "ok" || v.Stdout != "42\n" {
		t.Errorf("Structured: %+v %v", v, err)
	}
	if m := Object(t, r); m["status"] != "ok" {
		t.Errorf("Object = %v", m)
	}
	if err := Structured(&mcp.CallToolResult{StructuredContent: []int{1}}, &v); err == nil {
		t.Error("an array decoded into a struct")
	}
}
