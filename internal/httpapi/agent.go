package httpapi

import (
	"bytes"
	"context"
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/mcpserver"
)

// agentRoutes registers what agent runtimes integrate with:
//
//	GET  /tools          tool definitions of run_python and fetch_url
//	GET  /openapi.yaml   the OpenAPI document (no key needed)
//	POST /mcp            the same tools over MCP (streamable HTTP)
func (s *Server) agentRoutes(e *echo.Echo) {
	agent := s.authenticate(auth.RoleAgent)
	e.GET("/tools", s.tools, agent)
	e.GET("/openapi.yaml", s.openAPI)
	// Stateless: every POST stands alone (no session kept), so each tool
	// call is authorised by the key of its own request; GET and DELETE,
	// which only stateful sessions use, are not routes.
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcpServer() },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true, MaxRequestBodyBytes: s.cfg.MaxBodyBytes, Logger: s.log})
	e.POST("/mcp", func(c echo.Context) error {
		// Tool calls take the request id of this request into the API
		// requests they make, so the log lines of both share it.
		c.Request().Header.Set(echo.HeaderXRequestID, reqOf(c).id)
		h.ServeHTTP(c.Response(), c.Request())
		return nil
	}, agent)
}

func (s *Server) openAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/yaml", api.OpenAPIDocument())
}

// mcpServer builds the MCP server of one /mcp request: the tools as GET
// /tools describes them now, calling this server's own handler.
func (s *Server) mcpServer() *mcp.Server {
	defs := s.ToolDefinitions()
	tools := make([]mcpserver.Tool, len(defs))
	for i, d := range defs {
		tools[i] = mcpserver.Tool{Name: d.Name, Description: d.Description, InputSchema: d.InputSchema}
	}
	srv, err := mcpserver.New(tools, mcpserver.BackendFunc(s.inProcess), &mcpserver.Options{Version: s.cfg.Version})
	if err != nil {
		panic("api: building the MCP server: " + err.Error()) // the definitions are ours
	}
	return srv
}

// inProcess serves a tool's API call with this server's own handler: the
// caller's key (forwarded from the /mcp request) is authenticated again,
// and budgets, rate limits, idempotency, the loop guard, redaction and the
// access log apply exactly as to a direct request.
func (s *Server) inProcess(ctx context.Context, call *mcpserver.Call) (*mcpserver.Reply, error) {
	req, err := http.NewRequestWithContext(ctx, call.Method, call.Path, bytes.NewReader(call.Body))
	if err != nil {
		return nil, err
	}
	for k, v := range call.Header {
		req.Header[k] = v
	}
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	req.RemoteAddr = "in-process:0"
	w := &replyWriter{header: http.Header{}}
	s.echo.ServeHTTP(w, req)
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return &mcpserver.Reply{Status: w.status, Header: w.header, Body: w.body.Bytes()}, nil
}

// replyWriter collects a response in memory.
type replyWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *replyWriter) Header() http.Header { return w.header }

func (w *replyWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *replyWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(p)
}
