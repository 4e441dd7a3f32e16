package httpapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

func TestDuplicateKey(t *testing.T) {
	for _, c := range []struct {
		body, field, msg string // field "": no duplicate
	}{
		{`{"code":"print(1)","code":"print(2)"}`, "code", `the key "code" appears twice in the body`},
		{`{"language":"python","code":"1","limits":{"cpus":1,"memory_mb":64,"cpus":0.5}}`, "limits.cpus", `the key "cpus" appears twice in limits`},
		{`{"files":[{"path":"a"},{"path":"b","content":"","path":"c"}]}`, "files[1].path", `appears twice in files[1]`},
		{`{"env":{"A":"1","B":"2","A":"3"}}`, "env.A", `"A" appears twice in env`},
		{`{"code":"1","\u0063ode":"2"}`, "code", `the key "code" appears twice`},
		{`{"code":"1","Code":"2"}`, "code", `the keys "code" and "Code" in the body name the same field`},
		{`{"reason":"a","REASON":"b"}`, "reason", `regardless of case`},
		{`{"a":[[{"x":{"k":1,"K":2}}]]}`, "a[0][0].x.k", `in a[0][0].x`},
		{`{"ſ":1,"S":2}`, "ſ", `name the same field`}, // U+017F folds to s, as in encoding/json
		{`{"K":1,"k":2}`, "K", `name the same field`}, // the Kelvin sign
		// No duplicate: the same key in different objects, keys equal to
		// values, arrays of alike objects, nesting, empty containers.
		{`{"a":{"x":1},"b":{"x":1},"x":"a"}`, "", ""},
		{`[{"path":"a"},{"path":"a"}]`, "", ""},
		{`{"a":"b","b":"a","c":["a","a"],"d":{},"e":[],"f":null,"g":true,"h":-1.5e3}`, "", ""},
		{`{"a":{"b":{"c":{"a":1,"b":2}}},"b":1}`, "", ""},
		{`"code"`, "", ""},
		// Not JSON: the decoder reports it, not this.
		{`{"a":1,`, "", ""},
		{`{"a" 1, "a": 2}`, "", ""},
	} {
		e := duplicateKey([]byte(c.body))
		switch {
		case c.field == "" && e != nil:
			t.Errorf("%s: %v, want no duplicate", c.body, e)
		case c.field == "":
		case e == nil:
			t.Errorf("%s: no duplicate found, want field %s", c.body, c.field)
		case e.Status != 400 || e.Code != "VALIDATION" || e.Field != c.field || !strings.Contains(e.Message, c.msg):
			t.Errorf("%s: %d %s field %q: %s; want field %q, message with %q", c.body, e.Status, e.Code, e.Field, e.Message, c.field, c.msg)
		}
	}
}

// TestDuplicateKeyLargeBodies scans bodies near the 32 MiB /exec takes: a
// million keys in one object, and a million small objects, each beside a
// 16 MiB string, once without a duplicate and once with one at the end.
func TestDuplicateKeyLargeBodies(t *testing.T) {
	if testing.Short() {
		t.Skip("large bodies (-short)")
	}
	for _, body := range largeBodies() {
		if e := duplicateKey([]byte(body + "}")); e != nil {
			t.Fatalf("a duplicate in a body without one: %v", e)
		}
		if e := duplicateKey([]byte(body + `,"code":""}`)); e == nil || e.Field != "code" {
			t.Fatalf("the duplicate at the end was not found: %v", e)
		}
	}
}

// BenchmarkDuplicateKey scans the bodies of TestDuplicateKeyLargeBodies.
func BenchmarkDuplicateKey(b *testing.B) {
	for i, body := range largeBodies() {
		raw := []byte(body + "}")
		b.Run([]string{"many-keys", "many-objects"}[i], func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if duplicateKey(raw) != nil {
					b.Fatal("a duplicate")
				}
			}
		})
	}
}

// largeBodies are two open JSON objects (the closing brace left out) of
// about 30 MiB: a million keys in env, and a million objects in files,
// each with a 16 MiB code.
func largeBodies() []string {
	var keys, objs strings.Builder
	keys.WriteString(`{"env":{`)
	objs.WriteString(`{"files":[`)
	for i := range 1_000_000 {
		if i > 0 {
			keys.WriteByte(',')
			objs.WriteByte(',')
		}
		keys.WriteString(`"K` + strconv.Itoa(i) + `":""`)
		objs.WriteString(`{"path":"p","content":""}`)
	}
	code := `,"code":"` + strings.Repeat("x", 16<<20) + `"`
	return []string{keys.String() + "}" + code, objs.String() + "]" + code}
}

// FuzzDuplicateKey checks duplicateKey against a reference built on
// another parser (jsontext, of the encoding/json v2 work): for every text
// jsontext accepts when duplicates are allowed, duplicateKey finds a
// duplicate exactly when some object has two keys equal under
// strings.EqualFold (which is how encoding/json matches field names), and
// an exact duplicate whenever jsontext's own check finds one.
func FuzzDuplicateKey(f *testing.F) {
	for _, s := range []string{
		`{"code":"print(1)","code":"print(2)"}`, `{"a":{"b":1},"b":{"a":1}}`, `{"code":"1","\u0063ode":"2"}`,
		`{"Code":1,"code":2}`, `[{"a":1},{"a":1}]`, `{"files":[{"path":"a","path":"b"}]}`, `{"ſ":1,"s":2}`,
		`{"a":[1,{"b":[{"c":1,"C":2}]}]}`, `{}`, `[]`, `"x"`, `{"a":1,`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		e := duplicateKey(raw) // must not panic on anything
		if !jsontext.Value(raw).IsValid(jsontext.AllowDuplicateNames(true)) {
			return // not JSON (or not valid Unicode): the decoder refuses it first
		}
		want, err := foldedDuplicate(raw)
		if err != nil {
			t.Fatalf("reference: %v", err)
		}
		if (e != nil) != want {
			t.Fatalf("%q: duplicateKey says %v, the reference says duplicate=%v", raw, e, want)
		}
		if !jsontext.Value(raw).IsValid() && e == nil {
			t.Fatalf("%q: jsontext finds an exact duplicate, duplicateKey none", raw)
		}
	})
}

// foldedDuplicate reports whether an object of raw has two keys equal
// under strings.EqualFold, reading raw with jsontext.
func foldedDuplicate(raw []byte) (bool, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(raw), jsontext.AllowDuplicateNames(true))
	var keys [][]string // per open object or array (nil for arrays)
	for {
		tok, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		depth := dec.StackDepth()
		kind, length := dec.StackIndex(depth)
		switch tok.Kind() {
		case '{':
			keys = append(keys, []string{})
			continue
		case '[':
			keys = append(keys, nil)
			continue
		case '}', ']':
			keys = keys[:len(keys)-1]
			continue
		}
		if kind == '{' && length%2 == 1 { // a name: odd count after reading it
			name := tok.String()
			top := keys[len(keys)-1]
			for _, k := range top {
				if strings.EqualFold(k, name) {
					return true, nil
				}
			}
			keys[len(keys)-1] = append(top, name)
		}
	}
}

// TestDuplicateKeysRefusedOnEveryBody: each route that reads a JSON body
// refuses one with a key twice (or twice but for case) with 400
// VALIDATION naming the field, and acts on nothing: no run, no session,
// no freeze, no decision, no hold.
func TestDuplicateKeysRefusedOnEveryBody(t *testing.T) {
	f := newFetchFixture(t, "")
	page := f.url("pages.test", "/page")
	r := f.req(http.MethodPost, "/sessions", keyAgent, `{"profile":"default"}`)
	if r.code != http.StatusCreated {
		t.Fatalf("creating a session: %d %s", r.code, r.raw)
	}
	sid, _ := r.body["id"].(string)
	for _, c := range []struct {
		method, path, key, body, field string
	}{
		{"POST", "/exec", keyAgent, `{"language":"python","code":"print(1)","code":"print(2)"}`, "code"},
		{"POST", "/exec", keyAgent, `{"language":"python","code":"print(1)","CODE":"print(2)"}`, "code"},
		{"POST", "/exec", keyAgent, `{"language":"python","code":"1","limits":{"timeout_ms":100,"timeout_ms":9000}}`, "limits.timeout_ms"},
		{"POST", "/exec", keyAgent, `{"language":"python","code":"1","files":[{"path":"a","content":"","path":"../x"}]}`, "files[0].path"},
		{"POST", "/fetch", keyAgent, `{"url":"` + page + `","profile":"pages","profile":"web-research"}`, "profile"},
		{"POST", "/sessions", keyAgent, `{"profile":"default","idle_timeout_s":60,"idle_timeout_s":600}`, "idle_timeout_s"},
		{"POST", "/sessions/" + sid + "/exec", keyAgent, `{"code":"x = 1","code":"x = 2"}`, "code"},
		{"POST", "/sessions/" + sid + "/files", keyAgent, `{"files":[{"path":"a","path":"b","content":""}]}`, "files[0].path"},
		{"POST", "/admin/freeze", keyAdmin, `{"reason":"drill","kill_running":false,"kill_running":true}`, "kill_running"},
		{"POST", "/profiles/pages/evaluate", keyAdmin, `{"url":"` + page + `","url":"http://127.0.0.1/"}`, "url"},
		{"POST", "/approvals/apr_1", keyAdmin, `{"decision":"reject","decision":"approve","ttl":"1h"}`, "decision"},
		{"POST", "/captures/cap_1/hold", keyAdmin, `{"on":true,"reason":"case 1","on":false}`, "on"},
		{"DELETE", "/captures/cap_1", keyAdmin, `{"reason":"a","Reason":"b"}`, "reason"},
		{"POST", "/holds/acme", keyAdmin, `{"on":true,"reason":"x","reason":"y"}`, "reason"},
	} {
		r := f.req(c.method, c.path, c.key, c.body)
		e, _ := r.body["error"].(map[string]any)
		if r.code != http.StatusBadRequest || e["code"] != "VALIDATION" || e["field"] != c.field {
			t.Errorf("%s %s %s: %d %s; want 400 VALIDATION field %s", c.method, c.path, c.body, r.code, r.raw, c.field)
			continue
		}
		if msg, _ := e["message"].(string); !strings.Contains(msg, "twice") && !strings.Contains(msg, "name the same field") {
			t.Errorf("%s %s: the message does not say the key is repeated: %s", c.method, c.path, msg)
		}
	}
	if n := f.runs(); n != 0 {
		t.Errorf("%d runs reached the engine", n)
	}
	if r := f.req(http.MethodGet, "/admin/freeze", keyAdmin, ""); r.body["frozen"] != false {
		t.Errorf("a refused freeze froze sandboxd: %s", r.raw)
	}
	if f.hits.Load() != 0 {
		t.Errorf("a refused fetch reached the page")
	}
}
