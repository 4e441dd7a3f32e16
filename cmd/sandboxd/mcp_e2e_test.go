package main

// The MCP tools end to end: sandboxd runs in-process (startFetchEnv) with
// the real engine; run_python runs code in a real container and fetch_url
// reads a loopback page, through /mcp (streamable HTTP) and through
// `sandboxd mcp` (stdio, calling the service with the client package).

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/internal/logbuf"
	"github.com/sandboxd/sandboxd/internal/mcptest"
)

// exerciseTools lists the tools and calls them as a model would, on a
// session connected to either transport.
func exerciseTools(t *testing.T, cs *mcp.ClientSession, e *fetchEnv) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tool := range list.Tools {
		names[tool.Name] = true
		if !strings.Contains(tool.Description, "- default:") && tool.Name == "run_python" {
			t.Errorf("run_python's description does not list the service's profiles:\n%s", tool.Description)
		}
	}
	if !names["run_python"] || !names["fetch_url"] || len(names) != 2 {
		t.Fatalf("tools: %v", names)
	}
	call := func(name string, args any) *mcp.CallToolResult {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}

	// Real code in a real container.
	r := call("run_python", map[string]any{"language": "python", "code": "import sys, platform\nprint(sum(range(10)))\nprint('py', platform.python_version_tuple()[0], file=sys.stderr)\nopen('/sandbox/out/r.txt','w').write('result 45\\n')"})
	text := mcptest.Text(r)
	if r.IsError || !strings.Contains(text, "status: ok") || !strings.Contains(text, "45") || !strings.Contains(text, "py 3") || !strings.Contains(text, "r.txt (10 bytes):\nresult 45") {
		t.Fatalf("run_python:\n%s", text)
	}
	if st := mcptest.Object(t, r); st["stdout"] != "45\n" || st["status"] != "ok" || st["image"] == "" {
		t.Fatalf("run_python structured: %v", st)
	}
	// An exception is a result (the code ran), with the traceback to read.
	r = call("run_python", map[string]any{"language": "python", "code": "raise ValueError('bad input')"})
	if text := mcptest.Text(r); r.IsError || !strings.Contains(text, "status: error (exit code 1") || !strings.Contains(text, "ValueError: bad input") {
		t.Fatalf("exception:\n%s", text)
	}
	// A bad call is a tool error a model can correct.
	r = call("run_python", map[string]any{"language": "python", "code": "print(1)", "limits": map[string]any{"memory_mb": 99999}})
	if text := mcptest.Text(r); !r.IsError || !strings.Contains(text, "field limits.memory_mb") || !strings.Contains(text, "ceiling of 256") || !strings.Contains(text, "Fix the arguments") {
		t.Fatalf("raised limit:\n%s", text)
	}
	r = call("run_python", map[string]any{"code": "print(1)"})
	if text := mcptest.Text(r); !r.IsError || !strings.Contains(text, "language is required") {
		t.Fatalf("missing language:\n%s", text)
	}

	// A loopback page through the egress profile, marked untrusted.
	page := fmt.Sprintf("http://news.sandboxd.test:%d/article", e.upPort)
	r = call("fetch_url", map[string]any{"url": page, "profile": "pages"})
	text = mcptest.Text(r)
	st := mcptest.Object(t, r)
	nonce, _ := st["nonce"].(string)
	if r.IsError || st["untrusted"] != true || nonce == "" || !strings.Contains(text, "Café opens") ||
		!strings.Contains(text, `</untrusted-content nonce="`+nonce+`">`) || !strings.Contains(text, "UNTRUSTED") {
		t.Fatalf("fetch_url:\n%s\n%v", text, st)
	}
	for _, bad := range []string{e2eToken, "HIDDEN_", "SCRIPT_X"} {
		if strings.Contains(text, bad) {
			t.Fatalf("fetch_url returns %q:\n%s", bad, text)
		}
	}
	r = call("fetch_url", map[string]any{"url": fmt.Sprintf("http://news.sandboxd.test:%d/redirect-evil", e.upPort), "profile": "pages"})
	if text := mcptest.Text(r); !r.IsError || !strings.Contains(text, "EGRESS_DENIED") {
		t.Fatalf("redirect to the metadata address:\n%s", text)
	}
}

func TestMCPEndToEnd(t *testing.T) {
	e := startFetchEnv(t)

	t.Run("streamable HTTP", func(t *testing.T) {
		cs, err := mcptest.Connect(t, e.base, e.key, nil)
		if err != nil {
			t.Fatal(err)
		}
		exerciseTools(t, cs, e)
	})

	t.Run("stdio", func(t *testing.T) {
		keyFile := filepath.Join(t.TempDir(), "key")
		if err := os.WriteFile(keyFile, []byte(e.key+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		var stderr logbuf.Buffer
		done := make(chan int, 1)
		go func() {
			done <- mcpCmd([]string{"--url", e.base, "--key-file", keyFile, "--session", "stdio-e2e"}, inR, outW, &stderr)
			outW.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := mcp.NewClient(&mcp.Implementation{Name: "e2e-stdio", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr.String())
		}
		exerciseTools(t, cs, e)
		cs.Close()
		inW.Close()
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("sandboxd mcp exited %d:\n%s", code, stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("sandboxd mcp did not exit when stdin closed")
		}
		// The --session header reached the service.
		_, body := e.status(e.key, "/usage?session=stdio-e2e")
		if !strings.Contains(string(body), `"execs":2`) {
			t.Fatalf("usage of the stdio session: %s", body)
		}
	})
}

func TestMCPCommandNeedsAKey(t *testing.T) {
	t.Setenv("SANDBOXD_KEY", "")
	var stderr logbuf.Buffer
	if code := mcpCmd([]string{"--url", "http://127.0.0.1:1"}, io.NopCloser(strings.NewReader("")), nopWriteCloser{io.Discard}, &stderr); code != 2 || !strings.Contains(stderr.String(), "SANDBOXD_KEY") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if code := mcpCmd([]string{"--key-file", filepath.Join(t.TempDir(), "missing")}, io.NopCloser(strings.NewReader("")), nopWriteCloser{io.Discard}, &stderr); code != 2 {
		t.Fatalf("missing key file: exit %d", code)
	}
}
