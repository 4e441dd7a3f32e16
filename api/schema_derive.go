package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// withoutProperty returns a JSON Schema of type object without one of its
// top-level properties (and without it in required), keeping the bytes,
// key order and layout of everything else.
func withoutProperty(schema []byte, name string) (json.RawMessage, error) {
	start, end, err := propertySpan(schema, name)
	if err != nil {
		return nil, err
	}
	out := append(bytes.Clone(schema[:start]), schema[end:]...)
	var doc struct {
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("the schema without %q is not JSON: %w", name, err)
	}
	for _, r := range doc.Required {
		if r == name {
			return nil, fmt.Errorf("property %q is required: it cannot be left out", name)
		}
	}
	return out, nil
}

// withoutProperties is withoutProperty for each of names in turn.
func withoutProperties(schema []byte, names ...string) (json.RawMessage, error) {
	out := json.RawMessage(schema)
	for _, name := range names {
		var err error
		if out, err = withoutProperty(out, name); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// propertySpan finds the member "name": {...} of the schema's top-level
// properties object and returns the byte range to cut: the member and the
// comma that separates it from its neighbour.
func propertySpan(schema []byte, name string) (start, end int, err error) {
	dec := json.NewDecoder(bytes.NewReader(schema))
	if err := expectDelim(dec, '{'); err != nil {
		return 0, 0, err
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return 0, 0, err
		}
		if key != "properties" {
			if err := dec.Decode(new(json.RawMessage)); err != nil {
				return 0, 0, err
			}
			continue
		}
		if err := expectDelim(dec, '{'); err != nil {
			return 0, 0, err
		}
		first := true
		for dec.More() {
			before := int(dec.InputOffset()) // after '{' or after the previous value
			k, err := dec.Token()
			if err != nil {
				return 0, 0, err
			}
			if err := dec.Decode(new(json.RawMessage)); err != nil {
				return 0, 0, err
			}
			after := int(dec.InputOffset())
			if k != name {
				first = false
				continue
			}
			if !first {
				return before, after, nil // ', "name": {...}'
			}
			// The first member: cut it and the comma after it, if any.
			if !dec.More() {
				return before, after, nil
			}
			comma := bytes.IndexByte(schema[after:], ',')
			if comma < 0 {
				return 0, 0, errors.New("no comma after the first property")
			}
			return before, after + comma + 1, nil
		}
		return 0, 0, fmt.Errorf("the schema has no property %q", name)
	}
	return 0, 0, errors.New("the schema has no properties")
}

func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != d {
		return fmt.Errorf("want %v, got %v", d, tok)
	}
	return nil
}
