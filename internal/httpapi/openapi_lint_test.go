package httpapi

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/api"
)

// TestOpenAPIValidUnderKinOpenAPI loads openapi.yaml with kin-openapi, the
// loader and validator client generators such as oapi-codegen use, and
// validates it: a second validator, independent of the conformance test's
// libopenapi, so that what one accepts and the other refuses is caught.
func TestOpenAPIValidUnderKinOpenAPI(t *testing.T) {
	doc := loadKinDocument(t)
	if !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi.yaml declares OpenAPI %s; kin-openapi should read it as 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not valid under kin-openapi: %v", err)
	}
}

// loadKinDocument loads the embedded document with kin-openapi.
func loadKinDocument(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPIDocument())
	if err != nil {
		t.Fatalf("kin-openapi cannot load openapi.yaml: %v", err)
	}
	return doc
}

// TestOpenAPINoStrayKeys fails on a key of openapi.yaml that no OpenAPI
// 3.1 or JSON Schema 2020-12 keyword explains. The typical cause is a YAML
// flow mapping whose unquoted description holds a comma:
//
//	{type: string, description: Octal bits, such as 0644.}
//
// makes "such as 0644." a key of its own (with a null value) and cuts the
// description short. Both validators used to accept that; this test names
// the line.
func TestOpenAPINoStrayKeys(t *testing.T) {
	var root yaml.Node
	if err := yaml.Unmarshal(api.OpenAPIDocument(), &root); err != nil {
		t.Fatal(err)
	}
	for _, p := range strayKeys(&root) {
		t.Errorf("api/openapi.yaml:%s", p)
	}
}

// TestStrayKeysFindsFlowMappingAccidents: the walker of
// TestOpenAPINoStrayKeys flags the accident in a component schema, a
// nested property, an items schema and a parameter, and passes a clean
// document, so that a clean openapi.yaml means something.
func TestStrayKeysFindsFlowMappingAccidents(t *testing.T) {
	bad := `
openapi: 3.1.0
paths:
  /x:
    get:
      parameters:
        - {name: a, in: query, description: One, two, schema: {type: string}}
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema:
                type: array
                items: {type: string, description: Red, green}
components:
  schemas:
    A:
      type: object
      properties:
        mode: {type: string, description: Octal bits, such as 0644.}
        deep:
          type: object
          properties:
            x: {type: integer, descripton: typo}
`
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(bad), &root); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(strayKeys(&root), "\n")
	for _, want := range []string{`"two"`, `"green"`, `"such as 0644."`, `"descripton"`} {
		if !strings.Contains(got, want) {
			t.Errorf("stray key %s not flagged; flagged:\n%s", want, got)
		}
	}
	good := strings.NewReplacer("One, two", `"One, two"`, "Red, green", `"Red, green"`,
		"Octal bits, such as 0644.", `"Octal bits, such as 0644."`, "descripton", "description").Replace(bad)
	if err := yaml.Unmarshal([]byte(good), &root); err != nil {
		t.Fatal(err)
	}
	if got := strayKeys(&root); len(got) > 0 {
		t.Errorf("a clean document is flagged: %v", got)
	}
}

// schemaKeywords are the keywords of a Schema Object: JSON Schema 2020-12
// (core, applicator, unevaluated, validation, meta-data, format, content)
// and OpenAPI 3.1's own. Names starting with x- are extensions.
var schemaKeywords = map[string]bool{
	"$schema": true, "$id": true, "$ref": true, "$anchor": true, "$dynamicRef": true, "$dynamicAnchor": true,
	"$vocabulary": true, "$comment": true, "$defs": true,
	"allOf": true, "anyOf": true, "oneOf": true, "not": true, "if": true, "then": true, "else": true,
	"dependentSchemas": true, "prefixItems": true, "items": true, "contains": true, "properties": true,
	"patternProperties": true, "additionalProperties": true, "propertyNames": true,
	"unevaluatedItems": true, "unevaluatedProperties": true,
	"type": true, "enum": true, "const": true, "multipleOf": true, "maximum": true, "exclusiveMaximum": true,
	"minimum": true, "exclusiveMinimum": true, "maxLength": true, "minLength": true, "pattern": true,
	"maxItems": true, "minItems": true, "uniqueItems": true, "maxContains": true, "minContains": true,
	"maxProperties": true, "minProperties": true, "required": true, "dependentRequired": true,
	"title": true, "description": true, "default": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"examples": true, "format": true, "contentEncoding": true, "contentMediaType": true, "contentSchema": true,
	"discriminator": true, "xml": true, "externalDocs": true, "example": true,
}

// Subschema positions of a schema: keywords whose value is a schema, a
// list of schemas, or a map of names to schemas.
var (
	oneSchema   = []string{"not", "if", "then", "else", "items", "contains", "additionalProperties", "propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema"}
	listSchemas = []string{"allOf", "anyOf", "oneOf", "prefixItems"}
	mapSchemas  = []string{"properties", "patternProperties", "$defs", "dependentSchemas"}
)

// strayKeys walks an OpenAPI document and describes ("LINE: ...") every
// key with a null value (what a flow mapping makes of the text after an
// unquoted comma) and every key of a schema object that is not a keyword.
func strayKeys(root *yaml.Node) []string {
	var out []string
	var walk func(n *yaml.Node, inComponentsSchemas bool)
	walk = func(n *yaml.Node, inComponentsSchemas bool) {
		switch n.Kind {
		case yaml.DocumentNode, yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, false)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				switch {
				case inComponentsSchemas:
					out = append(out, checkSchema(v)...)
				case k.Value == "schema" && v.Kind == yaml.MappingNode:
					out = append(out, checkSchema(v)...)
				case isNull(v):
					out = append(out, nullKey(k))
				default:
					walk(v, k.Value == "schemas" && n == componentsNode(root))
				}
			}
		}
	}
	walk(root, false)
	return out
}

// componentsNode returns the mapping under the document's components key.
func componentsNode(root *yaml.Node) *yaml.Node {
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return nil
	}
	top := root.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == "components" {
			return top.Content[i+1]
		}
	}
	return nil
}

// checkSchema describes the stray keys of a schema object and its
// subschemas.
func checkSchema(s *yaml.Node) []string {
	if s.Kind != yaml.MappingNode {
		return nil // true, false, or a list where a schema is due (the validators catch that)
	}
	var out []string
	for i := 0; i+1 < len(s.Content); i += 2 {
		k, v := s.Content[i], s.Content[i+1]
		switch {
		case isNull(v) && !slices.Contains([]string{"default", "const", "example"}, k.Value):
			out = append(out, nullKey(k))
		case !schemaKeywords[k.Value] && !strings.HasPrefix(k.Value, "x-"):
			out = append(out, fmt.Sprintf("%d: %q is not a JSON Schema or OpenAPI keyword (a typo, or the rest of a description cut at an unquoted comma in a flow mapping: quote it)", k.Line, k.Value))
		case slices.Contains(oneSchema, k.Value):
			out = append(out, checkSchema(v)...)
		case slices.Contains(listSchemas, k.Value) && v.Kind == yaml.SequenceNode:
			for _, c := range v.Content {
				out = append(out, checkSchema(c)...)
			}
		case slices.Contains(mapSchemas, k.Value) && v.Kind == yaml.MappingNode:
			for j := 0; j+1 < len(v.Content); j += 2 {
				out = append(out, checkSchema(v.Content[j+1])...)
			}
		}
	}
	return out
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func nullKey(k *yaml.Node) string {
	return fmt.Sprintf("%d: key %q has no value (the rest of a description cut at an unquoted comma in a flow mapping? quote the description)", k.Line, k.Value)
}
