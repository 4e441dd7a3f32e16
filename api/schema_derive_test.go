package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestRunPythonInputSchemaIsExecWithoutAsync: the tool's schema is the
// exec schema, key for key and in the same order, less async and secrets.
func TestRunPythonInputSchemaIsExecWithoutAsync(t *testing.T) {
	tool := RunPythonInputSchema()
	var got, want map[string]any
	if err := json.Unmarshal(tool, &got); err != nil {
		t.Fatalf("the run_python schema is not JSON: %v\n%s", err, tool)
	}
	if err := json.Unmarshal(ExecRequestSchema(), &want); err != nil {
		t.Fatal(err)
	}
	props := want["properties"].(map[string]any)
	if _, ok := props["async"]; !ok {
		t.Fatal("the exec schema has no async: this test no longer tests anything")
	}
	if _, ok := props["secrets"]; !ok {
		t.Fatal("the exec schema has no secrets: this test no longer tests anything")
	}
	delete(props, "async")
	delete(props, "secrets")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the run_python schema is not the exec schema without async and secrets:\n%s", tool)
	}
	if strings.Contains(string(tool), `"async"`) || strings.Contains(string(tool), `"secrets"`) {
		t.Errorf("the run_python schema still names async or secrets:\n%s", tool)
	}
	if i, j := strings.Index(string(tool), `"language"`), strings.Index(string(tool), `"datasets"`); i < 0 || j < i {
		t.Errorf("the property order is lost:\n%s", tool)
	}
}

// TestWithoutProperty cuts a property wherever it stands, and refuses what
// it cannot cut.
func TestWithoutProperty(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"type":"object","properties":{"a":{"type":"string"},"b":{},"c":{"x":[1,{"y":2}]}}}`, `{"type":"object","properties":{"b":{},"c":{"x":[1,{"y":2}]}}}`},
		{`{"type":"object","properties":{"b":{},"a":{"type":"string"},"c":{}}}`, `{"type":"object","properties":{"b":{},"c":{}}}`},
		{`{"properties":{"b":{}, "c":{},  "a":true}, "type":"object"}`, `{"properties":{"b":{}, "c":{}}, "type":"object"}`},
		{"{\"properties\": {\n  \"a\": {}\n}}", "{\"properties\": {\n  \n}}"},
		{`{"title":"has \"a\": in it","properties":{"z":{"properties":{"a":{}}},"a":{}}}`, `{"title":"has \"a\": in it","properties":{"z":{"properties":{"a":{}}}}}`},
	} {
		got, err := withoutProperty([]byte(c.in), "a")
		if err != nil || string(got) != c.want {
			t.Errorf("withoutProperty(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{
		`{"properties":{"b":{}}}`,
		`{"type":"object"}`,
		`{"required":["a"],"properties":{"a":{}}}`,
		`[1]`,
		`{"properties":{"a":`,
	} {
		if got, err := withoutProperty([]byte(in), "a"); err == nil {
			t.Errorf("withoutProperty(%s) = %s, want an error", in, got)
		}
	}
}
