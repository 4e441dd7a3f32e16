package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/sandboxd/sandboxd/api"
)

// decodeJSON reads one JSON object from the request body into v, refusing
// unknown fields, wrong types, duplicated keys, trailing data and bodies
// over maxBytes, each with a message that says what to change.
func decodeJSON(c echo.Context, maxBytes int64, v any) error {
	// The Content-Type is not checked: agent runtimes send JSON under many
	// labels, and the body is parsed strictly as JSON whatever it says.
	req := c.Request()
	raw, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, maxBytes))
	if err != nil {
		return jsonError(err, maxBytes)
	}
	if sch := requestBodySchema(c); sch != nil {
		return decodeChecked(raw, maxBytes, sch, v) // schema.go
	}
	return decodeBytes(raw, maxBytes, v)
}

// decodeBytes decodes a whole body strictly into v: one JSON value, no
// unknown fields, no wrong types, no key twice in an object.
func decodeBytes(raw []byte, maxBytes int64, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, maxBytes)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return api.Validation("", "the body holds data after the JSON object; send exactly one object")
	}
	// After the decoder, so that malformed JSON, unknown fields and wrong
	// types get its messages; before any use of v.
	if e := duplicateKey(raw); e != nil {
		return e
	}
	return nil
}

func jsonError(err error, maxBytes int64) *api.Error {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
		mbe *http.MaxBytesError
	)
	switch {
	case errors.As(err, &mbe):
		return api.Validation("", "the request body is larger than the %d-byte limit", maxBytes)
	case errors.Is(err, io.EOF):
		return api.Validation("", "the request body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return api.Validation("", "the JSON body ends too early; send a complete JSON object")
	case errors.As(err, &syn):
		return api.Validation("", "malformed JSON at byte %d: %s", syn.Offset, syn.Error())
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return api.Validation("", "the body must be a JSON object, not %s", typ.Value)
		}
		return api.Validation(field, "%s must be %s, not %s", field, jsonTypeName(typ.Type.Kind().String()), typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return api.Validation(name, "unknown field %q; see the README for the fields this endpoint takes", name)
	}
	return api.Validation("", "invalid JSON body: %v", err)
}

func jsonTypeName(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "int", "int64", "int32", "uint32", "uint64":
		return "an integer"
	case "float64", "float32":
		return "a number"
	case "bool":
		return "a boolean"
	case "slice":
		return "an array"
	case "map", "struct":
		return "an object"
	case "ptr":
		return "a value of the right type"
	}
	return fmt.Sprintf("a %s", kind)
}
