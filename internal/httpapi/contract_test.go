package httpapi

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sandboxd/sandboxd/api"
)

// TestMethodNotAllowedOnEveryPath: every path of openapi.yaml answers a
// method it does not serve with 405 METHOD_NOT_ALLOWED, an Allow header
// naming what it serves, and the body of the document's MethodNotAllowed
// response; OPTIONS answers 204 with the same Allow.
func TestMethodNotAllowedOnEveryPath(t *testing.T) {
	f := newFixture(t, 1, 1)
	doc := loadKinDocument(t)
	resp := doc.Components.Responses["MethodNotAllowed"]
	if resp == nil || resp.Value.Content.Get("application/json") == nil || resp.Value.Headers["Allow"] == nil {
		t.Fatal("openapi.yaml has no components.responses.MethodNotAllowed with a JSON body and an Allow header")
	}
	bodySchema := resp.Value.Content.Get("application/json").Schema.Value
	served := map[string][]string{} // path -> methods
	for _, op := range docOperations(t) {
		method, path, _ := strings.Cut(op, " ")
		served[path] = append(served[path], method)
	}
	param := regexp.MustCompile(`\{[^}]+\}`)
	for path, methods := range served {
		target := param.ReplaceAllString(path, "x")
		allow := allowHeader(methods)
		for _, method := range []string{http.MethodPatch, http.MethodPut, unservedOf(methods)} {
			rec := httptest.NewRecorder()
			f.srv.Handler().ServeHTTP(rec, httptest.NewRequest(method, target, nil))
			if rec.Code != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: %d, want 405: %s", method, target, rec.Code, rec.Body)
				continue
			}
			if got := rec.Header().Get("Allow"); got != allow {
				t.Errorf("%s %s: Allow %q, want %q", method, target, got, allow)
			}
			if rec.Header().Get("X-Request-Id") == "" {
				t.Errorf("%s %s: no X-Request-Id", method, target)
			}
			if method == http.MethodHead {
				continue // no body
			}
			var body any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("%s %s: %v: %s", method, target, err, rec.Body)
			}
			if err := bodySchema.VisitJSON(body, openapi3.EnableJSONSchema2020()); err != nil {
				t.Errorf("%s %s: the 405 body does not match the MethodNotAllowed response: %v\n%s", method, target, err, rec.Body)
			}
			if msg := rec.Body.String(); !strings.Contains(msg, method+" is not served") || !strings.Contains(msg, allow) {
				t.Errorf("%s %s: the message does not name the method and what is served: %s", method, target, msg)
			}
		}
		rec := httptest.NewRecorder()
		f.srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodOptions, target, nil))
		if rec.Code != http.StatusNoContent || rec.Header().Get("Allow") != allow {
			t.Errorf("OPTIONS %s: %d Allow %q, want 204 and %q", target, rec.Code, rec.Header().Get("Allow"), allow)
		}
	}
}

// allowHeader is the Allow header of a path serving methods, in echo's
// order: OPTIONS, then the others alphabetically.
func allowHeader(methods []string) string {
	m := slices.Clone(methods)
	slices.Sort(m)
	return strings.Join(append([]string{http.MethodOptions}, m...), ", ")
}

// unservedOf returns GET, or POST for a path that serves GET.
func unservedOf(methods []string) string {
	if slices.Contains(methods, http.MethodGet) {
		if slices.Contains(methods, http.MethodPost) {
			return http.MethodHead
		}
		return http.MethodPost
	}
	return http.MethodGet
}

// TestEveryErrorCodeIsDocumented: each error code constant of package api
// is a code of an error schema in openapi.yaml and a row of the error table
// in docs/api.md, so that a client can know every code it may get.
func TestEveryErrorCodeIsDocumented(t *testing.T) {
	codes := apiErrorCodes(t)
	if len(codes) < 10 {
		t.Fatalf("found only %d error codes in api/: %v", len(codes), codes)
	}
	doc := string(api.OpenAPIDocument())
	md, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	enum := regexp.MustCompile(`code: \{enum: \[([^\]]*)\]\}`)
	var documented []string
	for _, m := range enum.FindAllStringSubmatch(doc, -1) {
		for c := range strings.SplitSeq(m[1], ",") {
			documented = append(documented, strings.TrimSpace(c))
		}
	}
	for _, c := range codes {
		if !slices.Contains(documented, c) {
			t.Errorf("error code %s is in no error schema of api/openapi.yaml", c)
		}
		if !strings.Contains(string(md), "| `"+c+"` |") {
			t.Errorf("error code %s is not in the error table of docs/api.md", c)
		}
	}
}

// apiErrorCodes returns the values of package api's Code* constants.
func apiErrorCodes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../api/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in api/: %v", err)
	}
	var codes []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 || !strings.HasPrefix(vs.Names[0].Name, "Code") {
				return true
			}
			if lit, ok := vs.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				v, _ := strconv.Unquote(lit.Value)
				codes = append(codes, v)
			}
			return true
		})
	}
	slices.Sort(codes)
	return codes
}
