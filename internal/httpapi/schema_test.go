package httpapi

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
)

// jsonFields returns the JSON names of a struct type's fields.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// checkSchemaMatchesStruct fails unless the object schema and the struct
// have the same fields, recursively, with matching JSON types.
func checkSchemaMatchesStruct(t *testing.T, where string, schema map[string]any, typ reflect.Type) {
	t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	props, _ := schema["properties"].(map[string]any)
	fields := jsonFields(typ)
	for name := range fields {
		if _, ok := props[name]; !ok {
			t.Errorf("%s: field %q of %s is not in the schema", where, name, typ)
		}
	}
	for name := range props {
		if _, ok := fields[name]; !ok {
			t.Errorf("%s: schema property %q is not a field of %s", where, name, typ)
		}
	}
	if schema["additionalProperties"] != false {
		t.Errorf("%s: the schema must refuse unknown fields (additionalProperties: false), as the decoder does", where)
	}
	for name, ft := range fields {
		p, _ := props[name].(map[string]any)
		if p == nil {
			continue
		}
		if d, _ := p["description"].(string); d == "" {
			t.Errorf("%s.%s: no description (the tools show it to models)", where, name)
		}
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		want := map[reflect.Kind]string{reflect.String: "string", reflect.Int64: "integer", reflect.Int: "integer", reflect.Float64: "number",
			reflect.Bool: "boolean", reflect.Slice: "array", reflect.Map: "object", reflect.Struct: "object"}[ft.Kind()]
		if p["type"] != want {
			t.Errorf("%s.%s: schema type %v, want %s for Go type %s", where, name, p["type"], want, ft)
		}
		switch ft.Kind() {
		case reflect.Struct:
			checkSchemaMatchesStruct(t, where+"."+name, p, ft)
		case reflect.Slice:
			if items, _ := p["items"].(map[string]any); ft.Elem().Kind() == reflect.Struct {
				checkSchemaMatchesStruct(t, where+"."+name+"[]", items, ft.Elem())
			}
		}
	}
}

func TestRequestSchemasMatchStructs(t *testing.T) {
	for _, tc := range []struct {
		raw []byte
		typ reflect.Type
	}{
		{api.ExecRequestSchema(), reflect.TypeFor[api.ExecRequest]()},
		{api.FetchRequestSchema(), reflect.TypeFor[api.FetchRequest]()},
	} {
		var schema map[string]any
		if err := json.Unmarshal(tc.raw, &schema); err != nil {
			t.Fatal(err)
		}
		checkSchemaMatchesStruct(t, tc.typ.Name(), schema, tc.typ)
	}
}

// Requests the schema refuses come back as 400 VALIDATION naming the field,
// what was wrong and what is allowed; nothing reaches the engine.
func TestSchemaValidationMessages(t *testing.T) {
	f := newFixture(t, 2, 2)
	for _, tc := range []struct {
		name, body, field string
		inMsg             []string
	}{
		{"enum", `{"language":"Python","code":"1"}`, "language", []string{`"Python"`, `allowed: "python"`}},
		{"required with description", `{"language":"python"}`, "code", []string{"code is required", "Python 3 program"}},
		{"minimum", `{"language":"python","code":"1","limits":{"cpus":0}}`, "limits.cpus", []string{"below the minimum of 0.01", "CPUs"}},
		{"negative output", `{"language":"python","code":"1","limits":{"output_bytes":-1}}`, "limits.output_bytes", []string{"minimum of 0"}},
		{"env name", `{"language":"python","code":"1","env":{"a-b":"1"}}`, "env", []string{`"a-b"`, "^[A-Z_][A-Z0-9_]*$"}},
		{"too many env", `{"language":"python","code":"1","env":{` + manyEnv(65) + `}}`, "env", []string{"65 entries", "at most 64"}},
		{"empty path", `{"language":"python","code":"1","files":[{"path":"","content":""}]}`, "files[0].path", []string{"must not be empty", "relative to /sandbox"}},
		{"path required", `{"language":"python","code":"1","files":[{"content":""}]}`, "files[0].path", []string{"files[0].path is required"}},
		{"unknown field lists the allowed ones", `{"language":"python","code":"1","timeout":5}`, "timeout", []string{`unknown field "timeout"`, "language, code, stdin, files, env, profile, limits, datasets, secrets, async"}},
		{"unknown nested field", `{"language":"python","code":"1","limits":{"disk_mb":1}}`, "disk_mb", []string{`unknown field "disk_mb" in limits`, "timeout_ms, memory_mb, cpus, pids, output_bytes, tmpfs_mb"}},
		{"duplicate dataset", `{"language":"python","code":"1","datasets":["sales","sales"]}`, "datasets", []string{"same value twice", "items 0 and 1"}},
		{"field named in another case", `{"Language":"python","code":"1"}`, "Language", []string{`unknown field "Language"`, "language, code"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := f.do(t, f.agent, tc.body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d: %v", resp.StatusCode, body)
			}
			code, field, msg := errorOf(t, body)
			if code != api.CodeValidation || field != tc.field {
				t.Fatalf("code %s field %q (%s); want VALIDATION on %q", code, field, msg, tc.field)
			}
			for _, want := range tc.inMsg {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q lacks %q", msg, want)
				}
			}
		})
	}
	if len(f.eng.specs) != 0 {
		t.Fatalf("%d refused requests reached the engine", len(f.eng.specs))
	}
}

func manyEnv(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = `"V` + strings.Repeat("X", i) + `":"1"`
	}
	return strings.Join(parts, ",")
}

// null reads as an absent field, as the decoder has always taken it.
func TestSchemaTakesNullAsAbsent(t *testing.T) {
	f := newFixture(t, 2, 2)
	resp, body := f.do(t, f.agent, `{"language":"python","code":"print(1)","stdin":null,"files":null,"env":null,"profile":null,"limits":{"timeout_ms":null},"async":null}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %v", resp.StatusCode, body)
	}
}

func TestFetchSchemaMessages(t *testing.T) {
	f := newFetchFixture(t, "")
	for _, tc := range []struct {
		body, field string
		inMsg       []string
	}{
		{`{"url":"http://pages.test/","profile":"pages","links":"all"}`, "links", []string{`"all"`, `"none", "text", "full"`}},
		{`{"url":"http://pages.test/","profile":"pages","max_bytes":-5}`, "max_bytes", []string{"minimum of 0"}},
		{`{"url":"","profile":"pages"}`, "url", []string{"must not be empty", "absolute http"}},
		{`{"url":"http://pages.test/","profile":"pages","selector":"` + strings.Repeat("p", 1025) + `"}`, "selector", []string{"1025 characters", "at most 1024"}},
		{`{"url":"http://pages.test/","profile":"pages","headers":{}}`, "headers", []string{`unknown field "headers"`, "url, profile, format, max_bytes, selector, links"}},
	} {
		r := f.fetch(tc.body)
		if r.code != 400 || r.errCode() != api.CodeValidation {
			t.Errorf("%s: %d %s", tc.body, r.code, r.raw)
			continue
		}
		e := r.body["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if e["field"] != tc.field {
			t.Errorf("%s: field %v, want %s (%s)", tc.body, e["field"], tc.field, msg)
		}
		for _, want := range tc.inMsg {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: message %q lacks %q", tc.body, msg, want)
			}
		}
	}
	if n := f.hits.Load(); n != 0 {
		t.Fatalf("refused requests reached the upstream %d times", n)
	}
}

// The schemas list the enum values the handlers accept.
func TestSchemaEnumsMatchHandlers(t *testing.T) {
	var fetch struct {
		Properties map[string]struct {
			Enum []string `json:"enum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(api.FetchRequestSchema(), &fetch); err != nil {
		t.Fatal(err)
	}
	if got := fetch.Properties["format"].Enum; !slices.Equal(got, []string{"text", "markdown"}) {
		t.Errorf("format enum %v", got)
	}
	if got := fetch.Properties["links"].Enum; !slices.Equal(got, []string{"none", "text", "full"}) {
		t.Errorf("links enum %v", got)
	}
}
