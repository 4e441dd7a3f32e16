package httpapi

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"
	"github.com/sandboxd/sandboxd/api"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// bodySchema is a compiled request schema with its parsed document, which
// gives the descriptions and allowed values quoted in error messages.
type bodySchema struct {
	raw    []byte
	doc    map[string]any
	schema *jsonschema.Schema
}

var bodySchemas = sync.OnceValue(func() map[string]*bodySchema {
	out := map[string]*bodySchema{}
	for path, raw := range map[string][]byte{"/exec": api.ExecRequestSchema(), "/fetch": api.FetchRequestSchema()} {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			panic("api: request schema of " + path + ": " + err.Error())
		}
		c := jsonschema.NewCompiler()
		loc := "https://sandboxd.invalid/schemas" + path + ".json"
		if err := c.AddResource(loc, doc); err != nil {
			panic("api: request schema of " + path + ": " + err.Error())
		}
		sch, err := c.Compile(loc)
		if err != nil {
			panic("api: request schema of " + path + ": " + err.Error())
		}
		out[path] = &bodySchema{raw: raw, doc: doc.(map[string]any), schema: sch}
	}
	return out
})

// requestBodySchema returns the schema of the body of the request's route,
// or nil for routes without one.
func requestBodySchema(c echo.Context) *bodySchema {
	if c.Request().Method != http.MethodPost {
		return nil
	}
	return bodySchemas()[c.Path()]
}

// decodeChecked decodes a body strictly into v (the errors of
// decodeBytes: malformed JSON, unknown fields, wrong types, duplicated
// keys), then checks it against the route's schema, so that a request the
// schema refuses is a 400 VALIDATION naming the field, what was wrong and
// what is allowed.
func decodeChecked(raw []byte, maxBytes int64, sch *bodySchema, v any) error {
	if err := decodeBytes(raw, maxBytes, v); err != nil {
		var e *api.Error
		if errors.As(err, &e) && e.Field != "" && strings.HasPrefix(e.Message, "unknown field ") {
			if msg := sch.unknownField(raw, e.Field); msg != "" {
				e.Message = msg
			}
		}
		return err
	}
	if e := sch.check(raw); e != nil {
		return e
	}
	return nil
}

// check validates a body that decoded; nil when it conforms.
func (b *bodySchema) check(raw []byte) *api.Error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return api.Validation("", "invalid JSON body: %v", err)
	}
	// A JSON null reads as an absent field (as the decoder takes it).
	dropNulls(inst)
	err = b.schema.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return api.Validation("", "%v", err)
	}
	return b.explain(firstLeaf(ve), inst)
}

// unknownField rewrites the decoder's unknown-field message to list the
// fields allowed where the unknown one was found.
func (b *bodySchema) unknownField(raw []byte, name string) string {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return ""
	}
	dropNulls(inst)
	err = b.schema.Validate(inst)
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return ""
	}
	var found *jsonschema.ValidationError
	walk(ve, func(e *jsonschema.ValidationError) bool {
		if k, ok := e.ErrorKind.(*kind.AdditionalProperties); ok && slices.Contains(k.Properties, name) {
			found = e
			return false
		}
		return true
	})
	if found == nil {
		return ""
	}
	return unknownFieldMessage(name, fieldName(found.InstanceLocation, inst), b.allowed(found.InstanceLocation))
}

func unknownFieldMessage(name, where string, allowed []string) string {
	in := ""
	if where != "" {
		in = " in " + where
	}
	return fmt.Sprintf("unknown field %q%s; the fields allowed there are: %s", name, in, strings.Join(allowed, ", "))
}

// walk visits e and its causes depth first until visit returns false.
func walk(e *jsonschema.ValidationError, visit func(*jsonschema.ValidationError) bool) bool {
	if !visit(e) {
		return false
	}
	for _, c := range e.Causes {
		if !walk(c, visit) {
			return false
		}
	}
	return true
}

// firstLeaf returns the error to report: the first specific error (a leaf
// of the tree, or a propertyNames error, whose cause only repeats it), an
// unknown field before any other, since it explains the rest (a field
// spelt in another case is also "missing").
func firstLeaf(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	var first, unknown *jsonschema.ValidationError
	var visit func(x *jsonschema.ValidationError)
	visit = func(x *jsonschema.ValidationError) {
		_, names := x.ErrorKind.(*kind.PropertyNames)
		if !names && len(x.Causes) > 0 {
			for _, c := range x.Causes {
				visit(c)
			}
			return
		}
		if first == nil {
			first = x
		}
		if _, ok := x.ErrorKind.(*kind.AdditionalProperties); ok && unknown == nil {
			unknown = x
		}
	}
	visit(e)
	switch {
	case unknown != nil:
		return unknown
	case first != nil:
		return first
	}
	return e
}

// explain turns one schema error into a VALIDATION error that says which
// field, what was wrong and what is allowed.
func (b *bodySchema) explain(e *jsonschema.ValidationError, inst any) *api.Error {
	loc := e.InstanceLocation
	if _, ok := e.ErrorKind.(*kind.PropertyNames); ok {
		// jsonschema v6.0.3 gives a propertyNames error a location that
		// later validation overwrites; its schema location is reliable.
		loc = objectLocation(e.SchemaURL)
	}
	field := fieldName(loc, inst)
	got := valueAt(inst, loc)
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		sub := append(slices.Clone(loc), k.Missing[0])
		name := fieldName(sub, inst)
		return api.Validation(name, "%s is required%s", name, b.hint(sub))
	case *kind.AdditionalProperties:
		name := k.Properties[0]
		return api.Validation(fieldName(append(slices.Clone(loc), name), inst), "%s", unknownFieldMessage(name, field, b.allowed(loc)))
	case *kind.Type:
		return api.Validation(field, "%s must be %s, not %s%s", field, strings.Join(k.Want, " or "), k.Got, b.hint(loc))
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = jsonText(w)
		}
		return api.Validation(field, "%s is %s; allowed: %s%s", field, jsonText(got), strings.Join(want, ", "), b.hint(loc))
	case *kind.Const:
		return api.Validation(field, "%s is %s; it must be %s", field, jsonText(got), jsonText(k.Want))
	case *kind.Minimum:
		return api.Validation(field, "%s is %s, below the minimum of %s%s", field, jsonText(got), ratText(k.Want), b.hint(loc))
	case *kind.Maximum:
		return api.Validation(field, "%s is %s, above the maximum of %s%s", field, jsonText(got), ratText(k.Want), b.hint(loc))
	case *kind.MinLength:
		if k.Want == 1 {
			return api.Validation(field, "%s must not be empty%s", field, b.hint(loc))
		}
		return api.Validation(field, "%s is %d characters long; at least %d are needed", field, k.Got, k.Want)
	case *kind.MaxLength:
		return api.Validation(field, "%s is %d characters long; at most %d are accepted", field, k.Got, k.Want)
	case *kind.Pattern:
		return api.Validation(field, "%s %q does not match the pattern %s%s", field, k.Got, k.Want, b.hint(loc))
	case *kind.PropertyNames:
		pattern := ""
		if s, ok := b.schemaAt(loc)["propertyNames"].(map[string]any); ok {
			pattern, _ = s["pattern"].(string)
		}
		return api.Validation(field, "%s has the name %q, which is not allowed: names must match %s%s", field, k.Property, pattern, b.hint(loc))
	case *kind.MaxProperties:
		return api.Validation(field, "%s has %d entries; at most %d are allowed", field, k.Got, k.Want)
	case *kind.MinItems:
		return api.Validation(field, "%s has %d items; at least %d are needed", field, k.Got, k.Want)
	case *kind.MaxItems:
		return api.Validation(field, "%s has %d items; at most %d are allowed", field, k.Got, k.Want)
	case *kind.UniqueItems:
		return api.Validation(field, "%s has the same value twice (items %d and %d); name each once", field, k.Duplicates[0], k.Duplicates[1])
	}
	if field == "" {
		return api.Validation("", "the body is not valid: %s", e.Error())
	}
	return api.Validation(field, "%s is not valid: %s%s", field, e.Error(), b.hint(loc))
}

// objectLocation derives the instance location of an object from the
// schema location of one of its keywords ("...#/properties/env/propertyNames"
// is the object at env). Only properties are followed: none of the request
// schemas has a propertyNames keyword under items.
func objectLocation(schemaURL string) []string {
	_, frag, _ := strings.Cut(schemaURL, "#")
	segs := strings.Split(strings.Trim(frag, "/"), "/")
	var loc []string
	for i := 0; i+1 < len(segs); i++ {
		if segs[i] == "properties" {
			loc = append(loc, segs[i+1])
			i++
		}
	}
	return loc
}

// hint is ". <the description>." of the schema at an instance location.
func (b *bodySchema) hint(loc []string) string {
	d, _ := b.schemaAt(loc)["description"].(string)
	if d == "" {
		return ""
	}
	return ". " + strings.TrimSuffix(d, ".") + "."
}

// allowed lists the properties the schema allows at an object location.
func (b *bodySchema) allowed(loc []string) []string {
	props, _ := b.schemaAt(loc)["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	// In the schema's own order, which is the README's.
	// In the schema's own order (the README's): where each name is first
	// written as a key.
	pos := func(name string) int { return bytes.Index(b.raw, []byte(strconv.Quote(name)+":")) }
	slices.SortFunc(names, func(x, y string) int { return pos(x) - pos(y) })
	return names
}

// schemaAt returns the subschema that applies at an instance location
// (through properties, items and additionalProperties), or nil.
func (b *bodySchema) schemaAt(loc []string) map[string]any {
	s := b.doc
	for _, seg := range loc {
		if s == nil {
			return nil
		}
		if props, ok := s["properties"].(map[string]any); ok {
			if p, ok := props[seg].(map[string]any); ok {
				s = p
				continue
			}
		}
		if items, ok := s["items"].(map[string]any); ok {
			s = items
			continue
		}
		s, _ = s["additionalProperties"].(map[string]any)
	}
	return s
}

// fieldName renders an instance location as the API names fields:
// limits.memory_mb, files[0].path, env.NAME.
func fieldName(loc []string, inst any) string {
	var b strings.Builder
	cur := inst
	for _, seg := range loc {
		switch v := cur.(type) {
		case []any:
			b.WriteString("[" + seg + "]")
			if i, err := strconv.Atoi(seg); err == nil && i >= 0 && i < len(v) {
				cur = v[i]
			} else {
				cur = nil
			}
			continue
		case map[string]any:
			cur = v[seg]
		default:
			cur = nil
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(seg)
	}
	return b.String()
}

func valueAt(inst any, loc []string) any {
	cur := inst
	for _, seg := range loc {
		switch v := cur.(type) {
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(v) {
				return nil
			}
			cur = v[i]
		case map[string]any:
			cur = v[seg]
		default:
			return nil
		}
	}
	return cur
}

// dropNulls removes object members whose value is null, at every depth.
func dropNulls(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, m := range x {
			if m == nil {
				delete(x, k)
				continue
			}
			dropNulls(m)
		}
	case []any:
		for _, m := range x {
			dropNulls(m)
		}
	}
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}

func ratText(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}
