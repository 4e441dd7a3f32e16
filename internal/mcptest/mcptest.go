// Package mcptest is the MCP client side of sandboxd's tests: a session
// with POST /mcp opened as an MCP host configured with a key opens it,
// and the text and structured content of a tool's result.
package mcptest

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// connectTimeout bounds the session's setup (the initialize exchange).
const connectTimeout = 30 * time.Second

// Connect opens an MCP session with the streamable HTTP endpoint
// base+"/mcp", sending key (unless "") as the bearer token and header on
// every request, without the standalone SSE stream. The session closes
// when the test ends.
func Connect(t testing.TB, base, key string, header map[string]string) (*mcp.ClientSession, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "sandboxd-tests", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Transport: headers{key: key, header: header, next: http.DefaultTransport}}}, nil)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { cs.Close() })
	return cs, nil
}

// headers adds the key and the headers to every request.
type headers struct {
	key    string
	header map[string]string
	next   http.RoundTripper
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.key != "" {
		r.Header.Set("Authorization", "Bearer "+h.key)
	}
	for k, v := range h.header {
		r.Header.Set(k, v)
	}
	return h.next.RoundTrip(r)
}

// Text returns the text content of a tool's result, its parts joined.
func Text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// Structured decodes the structured content of a tool's result into v.
func Structured(r *mcp.CallToolResult, v any) error {
	b, err := json.Marshal(r.StructuredContent)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Object returns the structured content of a tool's result as a JSON
// object; content that is not one fails the test.
func Object(t testing.TB, r *mcp.CallToolResult) map[string]any {
	t.Helper()
	var m map[string]any
	if err := Structured(r, &m); err != nil {
		t.Fatalf("structured content is not an object (%v): %v", err, r.StructuredContent)
	}
	return m
}
