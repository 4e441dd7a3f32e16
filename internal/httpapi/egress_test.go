package httpapi

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/egress/egresstest"
	"github.com/sandboxd/sandboxd/internal/auth/authtest"
	"github.com/sandboxd/sandboxd/profiles"
)

// Keys of the egress endpoint tests, by role.
const (
	egressKeyAgent    = "sbx_test_agent"
	egressKeySecurity = "sbx_test_security"
	egressKeyAdmin    = "sbx_test_admin"
)

type egressFixture struct {
	srv *Server
	res *egresstest.Resolver
}

func newEgressFixture(t *testing.T) *egressFixture {
	t.Helper()
	set, err := profiles.Load("../../profiles")
	if err != nil {
		t.Fatal(err)
	}
	ring := authtest.Keyring(t, "keys:\n"+
		"  - {id: agent, tenant: t, key: "+egressKeyAgent+", roles: [agent]}\n"+
		"  - {id: sec, tenant: t, key: "+egressKeySecurity+", roles: [security]}\n"+
		"  - {id: admin, tenant: t, key: "+egressKeyAdmin+", roles: [admin]}\n")
	res := egresstest.NewResolver(map[string][]string{
		"en.wikipedia.org":       {"198.35.26.96", "2620:0:863:ed1a::1"},
		"internal.wikipedia.org": {"10.1.2.3"},
		"mixed.wikipedia.org":    {"198.35.26.96", "127.0.0.1"},
	})
	srv := newServer(t, Config{
		DataDir:      t.TempDir(),
		Profiles:     set,
		Keys:         ring,
		Log:          slog.New(slog.NewJSONHandler(io.Discard, nil)),
		MaxBodyBytes: 1 << 20,
		Resolver:     res,
	})
	return &egressFixture{srv: srv, res: res}
}

func (f *egressFixture) do(t *testing.T, method, path, key, body string) (int, map[string]any) {
	t.Helper()
	rec := serve(f.srv, method, path, key, body)
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s: body is not JSON: %q", method, path, rec.Body.String())
	}
	return rec.Code, out
}

func TestProfilesEndpointsNeedSecurityRole(t *testing.T) {
	f := newEgressFixture(t)
	for _, tc := range []struct {
		method, path, body string
	}{
		{"GET", "/profiles", ""},
		{"GET", "/profiles/web-research", ""},
		{"POST", "/profiles/web-research/evaluate", `{"url":"https://en.wikipedia.org/"}`},
	} {
		if code, _ := f.do(t, tc.method, tc.path, "", tc.body); code != http.StatusUnauthorized {
			t.Errorf("%s %s without a key: %d, want 401", tc.method, tc.path, code)
		}
		if code, body := f.do(t, tc.method, tc.path, egressKeyAgent, tc.body); code != http.StatusForbidden {
			t.Errorf("%s %s as agent: %d %v, want 403", tc.method, tc.path, code, body)
		}
		for _, key := range []string{egressKeySecurity, egressKeyAdmin} {
			if code, body := f.do(t, tc.method, tc.path, key, tc.body); code != http.StatusOK {
				t.Errorf("%s %s as %s: %d %v, want 200", tc.method, tc.path, key, code, body)
			}
		}
	}
}

func TestListProfiles(t *testing.T) {
	f := newEgressFixture(t)
	code, body := f.do(t, "GET", "/profiles", egressKeySecurity, "")
	if code != 200 {
		t.Fatalf("status %d %v", code, body)
	}
	names := func(kind string) []string {
		var out []string
		for _, e := range body[kind].([]any) {
			m := e.(map[string]any)
			if len(m["version"].(string)) != 64 {
				t.Errorf("%s profile %v has no version", kind, m["name"])
			}
			out = append(out, m["name"].(string))
		}
		return out
	}
	if got := strings.Join(names("egress"), ","); got != "none,package-mirror,web-research" {
		t.Errorf("egress profiles %s", got)
	}
	if got := names("exec"); !slices.Contains(got, "default") {
		t.Errorf("exec profiles %v", got)
	}
}

func TestGetProfile(t *testing.T) {
	f := newEgressFixture(t)
	code, body := f.do(t, "GET", "/profiles/web-research", egressKeySecurity, "")
	if code != 200 || body["kinds"].([]any)[0] != "egress" || body["exec"] != nil {
		t.Fatalf("status %d %v", code, body)
	}
	eg := body["egress"].(map[string]any)
	if eg["mode"] != "enforce" || eg["connect_timeout"] != "5s" || len(eg["version"].(string)) != 64 || eg["source"] != "../../profiles/egress/web-research.yaml" {
		t.Errorf("egress view %v", eg)
	}
	rule := eg["allow"].([]any)[0].(map[string]any)
	if rule["name"] != "reference" || len(rule["hosts"].([]any)) == 0 || rule["ports"].([]any)[0] != float64(80) {
		t.Errorf("rule view %v", rule)
	}

	code, body = f.do(t, "GET", "/profiles/default", egressKeySecurity, "")
	if code != 200 || body["kinds"].([]any)[0] != "exec" || body["egress"] != nil {
		t.Fatalf("exec profile: status %d %v", code, body)
	}
	if ex := body["exec"].(map[string]any); ex["egress"] != "none" || ex["limits"].(map[string]any)["memory_mb"] == nil {
		t.Errorf("exec view %v", ex)
	}

	code, body = f.do(t, "GET", "/profiles/nope", egressKeySecurity, "")
	if code != 404 || !strings.Contains(body["error"].(map[string]any)["message"].(string), "web-research") {
		t.Errorf("unknown profile: %d %v", code, body)
	}
}

func TestEvaluate(t *testing.T) {
	f := newEgressFixture(t)
	cases := []struct {
		name, profile, body string
		status              int
		decision, code      string
		addresses           int
	}{
		{"allowed", "web-research", `{"url":"https://en.wikipedia.org/wiki/Go","method":"GET"}`, 200, "allow", "allowed", 2},
		{"method defaults to GET", "web-research", `{"url":"https://en.wikipedia.org/"}`, 200, "allow", "allowed", 2},
		{"tunnel", "web-research", `{"url":"en.wikipedia.org:443","method":"CONNECT"}`, 200, "allow", "allowed", 2},
		{"port 22", "web-research", `{"url":"en.wikipedia.org:22","method":"CONNECT"}`, 200, "deny", "port_not_allowed", 0},
		{"POST", "web-research", `{"url":"https://en.wikipedia.org/","method":"POST"}`, 200, "deny", "method_not_allowed", 0},
		{"deny rule", "web-research", `{"url":"https://gist.github.com/"}`, 200, "deny", "deny_rule", 0},
		{"private answer", "web-research", `{"url":"https://internal.wikipedia.org/"}`, 200, "deny", "denied_address", 1},
		{"mixed answer", "web-research", `{"url":"https://mixed.wikipedia.org/"}`, 200, "deny", "denied_address", 2},
		{"metadata", "web-research", `{"url":"http://169.254.169.254/latest/meta-data/"}`, 200, "deny", "denied_address", 1},
		{"no rule", "web-research", `{"url":"https://evil.example/"}`, 200, "deny", "no_rule", 0},
		{"file scheme", "web-research", `{"url":"file:///etc/passwd"}`, 200, "deny", "scheme_not_allowed", 0},
		{"none", "none", `{"url":"https://en.wikipedia.org/"}`, 200, "deny", "no_rule", 0},
		{"unparsable", "web-research", `{"url":"http://a b/"}`, 400, "", "", 0},
		{"userinfo", "web-research", `{"url":"https://en.wikipedia.org@evil.example/"}`, 400, "", "", 0},
		{"bad port", "web-research", `{"url":"https://en.wikipedia.org:0443/"}`, 400, "", "", 0},
		{"bad method", "web-research", `{"url":"https://en.wikipedia.org/","method":"G T"}`, 400, "", "", 0},
		{"no url", "web-research", `{"method":"GET"}`, 400, "", "", 0},
		{"unknown field", "web-research", `{"url":"https://en.wikipedia.org/","host":"x"}`, 400, "", "", 0},
		{"exec profile", "default", `{"url":"https://en.wikipedia.org/"}`, 404, "", "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.do(t, "POST", "/profiles/"+tc.profile+"/evaluate", egressKeySecurity, tc.body)
			if code != tc.status {
				t.Fatalf("status %d %v, want %d", code, body, tc.status)
			}
			if tc.status != 200 {
				if e, ok := body["error"].(map[string]any); !ok || e["message"] == "" {
					t.Errorf("error body %v", body)
				}
				return
			}
			if body["decision"] != tc.decision || body["code"] != tc.code || body["reason"] == "" {
				t.Errorf("decision %v", body)
			}
			if n := len(body["addresses"].([]any)); n != tc.addresses {
				t.Errorf("addresses %v, want %d", body["addresses"], tc.addresses)
			}
			if p := body["profile"].(map[string]any); p["name"] != tc.profile || len(p["version"].(string)) != 64 {
				t.Errorf("profile %v", p)
			}
		})
	}
}

// The evaluation reports the rules' verdict (with the pattern that
// matched) apart from the address check, so that a lookup that fails where
// sandboxd runs does not hide what the rules say; the method is taken in
// upper case.
func TestEvaluateRulesApartFromAddressCheck(t *testing.T) {
	f := newEgressFixture(t)
	cases := []struct {
		name, body               string
		decision, code           string
		rules, ruleCode, pattern string // rules "" means no rules object
		address, addressCode     string
		overall                  string
		summary                  []string
	}{
		{"allowed", `{"url":"https://en.wikipedia.org/"}`, "allow", "allowed",
			"allow", "allowed", "*.wikipedia.org", "passed", "", "allow",
			[]string{"rules: allow (allow[0]:reference, pattern *.wikipedia.org)", "address check: passed", "overall: allow"}},
		{"unresolvable allowed host", `{"url":"https://de.wikipedia.org/wiki/Go"}`, "deny", "resolve_failed",
			"allow", "allowed", "*.wikipedia.org", "unresolved", "resolve_failed", "at_connect",
			[]string{"rules: allow (allow[0]:reference, pattern *.wikipedia.org)", "address check: could not resolve de.wikipedia.org", "overall: decided at connect time"}},
		{"exact pattern", `{"url":"https://arxiv.org/abs/1"}`, "deny", "resolve_failed",
			"allow", "allowed", "arxiv.org", "unresolved", "resolve_failed", "at_connect", nil},
		{"lower-case method", `{"url":"https://en.wikipedia.org/","method":"get"}`, "allow", "allowed",
			"allow", "allowed", "*.wikipedia.org", "passed", "", "allow", nil},
		{"lower-case connect", `{"url":"en.wikipedia.org:443","method":"connect"}`, "allow", "allowed",
			"allow", "allowed", "*.wikipedia.org", "passed", "", "allow", nil},
		{"method the rule lacks", `{"url":"https://de.wikipedia.org/","method":"post"}`, "deny", "method_not_allowed",
			"deny", "method_not_allowed", "*.wikipedia.org", "not_checked", "", "deny",
			[]string{"rules: deny (allow[0]:reference, pattern *.wikipedia.org)", "address check: not checked"}},
		{"deny rule", `{"url":"https://gist.github.com/"}`, "deny", "deny_rule",
			"deny", "deny_rule", "gist.github.com", "not_checked", "", "deny", nil},
		{"no rule", `{"url":"https://evil.example/"}`, "deny", "no_rule",
			"deny", "no_rule", "", "not_checked", "", "deny", []string{"rules: deny (no_rule)"}},
		{"private answer", `{"url":"https://internal.wikipedia.org/"}`, "deny", "denied_address",
			"allow", "allowed", "*.wikipedia.org", "denied", "denied_address", "deny", []string{"address check: denied (denied_address)"}},
		{"metadata literal", `{"url":"http://169.254.169.254/latest/meta-data/"}`, "deny", "denied_address",
			"deny", "no_rule", "", "denied", "denied_address", "deny", nil},
		{"denied name", `{"url":"http://metadata.google.internal/"}`, "deny", "denied_name",
			"deny", "no_rule", "", "denied", "denied_name", "deny", nil},
		{"file scheme", `{"url":"file:///etc/passwd"}`, "deny", "scheme_not_allowed",
			"", "", "", "not_checked", "", "deny", []string{"rules: not checked"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.do(t, "POST", "/profiles/web-research/evaluate", egressKeySecurity, tc.body)
			if code != 200 {
				t.Fatalf("status %d %v", code, body)
			}
			if body["decision"] != tc.decision || body["code"] != tc.code || body["overall"] != tc.overall {
				t.Errorf("decision %v code %v overall %v, want %s %s %s", body["decision"], body["code"], body["overall"], tc.decision, tc.code, tc.overall)
			}
			rules, _ := body["rules"].(map[string]any)
			switch {
			case tc.rules == "" && rules != nil:
				t.Errorf("rules %v, want none", rules)
			case tc.rules != "" && (rules == nil || rules["verdict"] != tc.rules || rules["code"] != tc.ruleCode || (rules["pattern"] != nil && rules["pattern"] != tc.pattern) || (rules["pattern"] == nil && tc.pattern != "")):
				t.Errorf("rules %v, want %s %s pattern %q", rules, tc.rules, tc.ruleCode, tc.pattern)
			}
			ac := body["address_check"].(map[string]any)
			if ac["status"] != tc.address || (tc.addressCode != "" && ac["code"] != tc.addressCode) || ac["reason"] == "" {
				t.Errorf("address_check %v, want %s %s", ac, tc.address, tc.addressCode)
			}
			if m := body["method"].(string); m != strings.ToUpper(m) {
				t.Errorf("method %q is not upper case", m)
			}
			for _, w := range tc.summary {
				if !strings.Contains(body["summary"].(string), w) {
					t.Errorf("summary %q does not say %q", body["summary"], w)
				}
			}
		})
	}
	// A method that is not a token is refused as the method's fault.
	code, body := f.do(t, "POST", "/profiles/web-research/evaluate", egressKeySecurity, `{"url":"https://en.wikipedia.org/","method":"g t"}`)
	if e, _ := body["error"].(map[string]any); code != 400 || e["code"] != "VALIDATION" || e["field"] != "method" {
		t.Errorf("non-token method: %d %v, want 400 VALIDATION field method", code, body)
	}
}
