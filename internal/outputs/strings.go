package outputs

import (
	"reflect"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/redact"
)

// binaryFields are the string fields of wire types that hold base64 of
// bytes, which Result, Files and Figure have checked as bytes: redacting
// their text would damage them, and find nothing.
var binaryFields = map[reflect.Type]map[string]bool{
	reflect.TypeFor[api.OutFile]():      {"Content": true},
	reflect.TypeFor[api.RichResult]():   {"Data": true},
	reflect.TypeFor[api.ExecResponse](): {"StdoutBase64": true, "StderrBase64": true},
}

// Strings redacts every string of v (a pointer to a wire response) in
// place: fields, slices, map values and nested structs, but for the
// base64 fields of binaryFields. It returns what it removed.
func Strings(r *redact.Redactor, v any) redact.Counts {
	c := redact.Counts{}
	if r != nil {
		walk(r, reflect.ValueOf(v), c)
	}
	return c
}

func walk(r *redact.Redactor, v reflect.Value, c redact.Counts) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			walk(r, v.Elem(), c)
		}
	case reflect.Struct:
		skip := binaryFields[v.Type()]
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() || skip[f.Name] {
				continue
			}
			walk(r, v.Field(i), c)
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return // bytes (raw JSON): not text to redact
		}
		for i := range v.Len() {
			walk(r, v.Index(i), c)
		}
	case reflect.Map:
		if v.Type().Elem().Kind() != reflect.String {
			return // counts, sizes: no text
		}
		for _, k := range v.MapKeys() {
			s, n := r.String(v.MapIndex(k).String())
			if n != nil {
				c.Add(n)
				v.SetMapIndex(k, reflect.ValueOf(s).Convert(v.Type().Elem()))
			}
		}
	case reflect.String:
		if !v.CanSet() {
			return
		}
		s, n := r.String(v.String())
		if n != nil {
			c.Add(n)
			v.SetString(s)
		}
	}
}
