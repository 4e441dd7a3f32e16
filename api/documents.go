package api

import (
	"bytes"
	_ "embed"
	"encoding/json"
)

// The JSON Schemas (draft 2020-12) of the request bodies of POST /exec and
// POST /fetch. They are also the input schemas of the run_python and
// fetch_url tools (GET /tools, /mcp) and the request schemas of
// openapi.yaml: one definition, so that what a model is told and what the
// API accepts cannot differ.
var (
	//go:embed schemas/exec_request.json
	execRequestSchema []byte
	//go:embed schemas/fetch_request.json
	fetchRequestSchema []byte
	// The OpenAPI 3.1 document of the HTTP API, served at GET
	// /openapi.yaml. The server's tests drive every route and validate the
	// answers against it.
	//
	//go:embed openapi.yaml
	openAPIDocument []byte
)

// ExecRequestSchema returns the JSON Schema of ExecRequest (the body of
// POST /exec and the input of the run_python tool).
func ExecRequestSchema() json.RawMessage { return bytes.Clone(execRequestSchema) }

// RunPythonInputSchema returns the input schema of the run_python tool:
// ExecRequestSchema without the async and secrets properties. A tool call
// waits for its result, so background runs (POST /exec with "async": true,
// then GET /exec/{id}) are the HTTP API's alone; and a model, steered by
// whatever it read, never chooses the credentials a run may use: the exec
// profile (or the HTTP caller) does. The schema is derived from the exec
// schema, keeping its key order, so that the two cannot drift apart.
func RunPythonInputSchema() json.RawMessage {
	out, err := withoutProperties(execRequestSchema, ToolOnlyHTTPFields...)
	if err != nil {
		panic("api: deriving the run_python input schema: " + err.Error())
	}
	return out
}

// ToolOnlyHTTPFields are the fields of ExecRequest that POST /exec takes
// and the run_python tool does not.
var ToolOnlyHTTPFields = []string{"async", "secrets"}

// FetchRequestSchema returns the JSON Schema of FetchRequest (the body of
// POST /fetch and the input of the fetch_url tool).
func FetchRequestSchema() json.RawMessage { return bytes.Clone(fetchRequestSchema) }

// OpenAPIDocument returns the OpenAPI 3.1 document of the HTTP API (YAML).
func OpenAPIDocument() []byte { return bytes.Clone(openAPIDocument) }
