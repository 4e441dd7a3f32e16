package main

// sandboxd mcp: the run_python and fetch_url tools over MCP on stdin and
// stdout, for MCP hosts that start their servers as commands. Each tool
// call is a request to a running sandboxd through the client package, so
// the service's keys, budgets, idempotency and redaction apply.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/httpapi"
	"github.com/sandboxd/sandboxd/mcpserver"
)

const mcpUsage = `usage: sandboxd mcp [--url URL] [--key-file FILE] [--session ID]

Serves the run_python and fetch_url tools over the Model Context Protocol on
stdin and stdout. Every tool call goes to the sandboxd at --url with the key
of --key-file or, without it, of the environment variable SANDBOXD_KEY.
Diagnostics go to stderr.

`

// mcpCmd runs `sandboxd mcp`.
func mcpCmd(args []string, stdin io.ReadCloser, stdout io.WriteCloser, stderr io.Writer) int {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	baseURL := fs.String("url", envDefault("URL", "http://127.0.0.1:8080"), "base URL of the running sandboxd (SANDBOXD_URL)")
	keyFile := fs.String("key-file", "", "file holding the API key (default: the environment variable SANDBOXD_KEY)")
	session := fs.String("session", "", "X-Session-Id sent with every call: the agent session that session budgets and the loop guard count")
	if done, code := parseFlags(fs, args, mcpUsage, stdout, stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sandboxd mcp: unexpected arguments %q\n", fs.Args())
		return 2
	}
	key, err := mcpKey(*keyFile)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd mcp: %v\n", err)
		return 2
	}
	opts := []client.Option{client.WithUserAgent("sandboxd-mcp/" + version)}
	if *session != "" {
		opts = append(opts, client.WithSession(*session))
	}
	c, err := client.New(*baseURL, key, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd mcp: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := stdioMCPServer(ctx, c, log)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd mcp: %v\n", err)
		return 1
	}
	t := &mcp.IOTransport{Reader: stdin, Writer: stdout, MaxLineLength: 64 << 20}
	if err := srv.Run(ctx, t); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		fmt.Fprintf(stderr, "sandboxd mcp: %v\n", err)
		return 1
	}
	return 0
}

// mcpKey reads the key from a file (trimmed) or SANDBOXD_KEY.
func mcpKey(file string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("reading the key: %w", err)
		}
		if k := strings.TrimSpace(string(b)); k != "" {
			return k, nil
		}
		return "", fmt.Errorf("the key file %s is empty", file)
	}
	if k := strings.TrimSpace(os.Getenv("SANDBOXD_KEY")); k != "" {
		return k, nil
	}
	return "", errors.New("no API key: set SANDBOXD_KEY or give --key-file")
}

// stdioMCPServer builds the MCP server of `sandboxd mcp`: the tools as the
// running service describes them (GET /tools, so descriptions name its
// profiles and limits), or, when it cannot be reached yet, as this binary
// knows them; calls go through c.
func stdioMCPServer(ctx context.Context, c *client.Client, log *slog.Logger) (*mcp.Server, error) {
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	defs, err := c.Tools(tctx)
	if err != nil {
		if client.IsCode(err, api.CodeAuth, api.CodeForbidden) {
			return nil, fmt.Errorf("the key is refused by sandboxd: %w", err)
		}
		log.Warn("GET /tools failed; serving the tools as this binary describes them", "err", err)
		defs = httpapi.ToolDefinitionsFor(nil)
	}
	tools := make([]mcpserver.Tool, len(defs))
	for i, d := range defs {
		tools[i] = mcpserver.Tool{Name: d.Name, Description: d.Description, InputSchema: d.InputSchema}
	}
	return mcpserver.New(tools, clientBackend{c}, &mcpserver.Options{Version: version, Logger: log})
}

// clientBackend sends the tools' API calls through the client, with its
// key and session.
type clientBackend struct{ c *client.Client }

func (b clientBackend) Do(ctx context.Context, call *mcpserver.Call) (*mcpserver.Reply, error) {
	var opts []client.CallOption
	for name, vals := range call.Header {
		if len(vals) > 0 && !strings.EqualFold(name, "Authorization") {
			opts = append(opts, client.Header(name, vals[0]))
		}
	}
	r, err := b.c.Raw(ctx, call.Method, call.Path, call.Body, opts...)
	if err != nil {
		return nil, err
	}
	return &mcpserver.Reply{Status: r.Status, Header: r.Header, Body: r.Body}, nil
}

// nopWriteCloser gives a Writer the Close the transport calls.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
