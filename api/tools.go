package api

import "encoding/json"

// ToolDefinition is a tool in the generic form LLM tool-calling APIs take
// ({name, description, input_schema}; Anthropic's Messages API takes it
// as is). InputSchema is the JSON Schema that also validates the body of
// the endpoint the tool calls.
type ToolDefinition struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// ToolList is the body of GET /tools (and ?format=generic or anthropic).
type ToolList struct {
	Tools []ToolDefinition `json:"tools"`
}

// OpenAITool is a tool in the form of OpenAI's Chat Completions API
// (GET /tools?format=openai).
type OpenAITool struct {
	Type     string         `json:"type"`
	Function OpenAIFunction `json:"function"`
}

// OpenAIFunction is the function of an OpenAITool.
type OpenAIFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// OpenAIToolList is the body of GET /tools?format=openai.
type OpenAIToolList struct {
	Tools []OpenAITool `json:"tools"`
}

// OpenAIResponsesTool is a function tool in the form of OpenAI's
// Responses API (GET /tools?format=openai-responses): the function's
// fields at the top level, beside type. Strict is always sent, false: the
// Responses API takes an absent strict as strict mode, which requires
// every property and rewrites optional ones as required, while the tools'
// arguments are mostly optional.
type OpenAIResponsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      bool            `json:"strict"`
}

// OpenAIResponsesToolList is the body of GET /tools?format=openai-responses.
type OpenAIResponsesToolList struct {
	Tools []OpenAIResponsesTool `json:"tools"`
}

// MCPTool is a tool as an MCP tools/list result gives it
// (GET /tools?format=mcp).
type MCPTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// MCPToolList is the body of GET /tools?format=mcp.
type MCPToolList struct {
	Tools []MCPTool `json:"tools"`
}
