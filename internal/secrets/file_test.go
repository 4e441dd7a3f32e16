package secrets

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/yamlfile"
)

// testValue is a value no message may ever show.
const testValue = "sk_live_THE-REAL-VALUE-0123456789"

func testEnv(vals map[string]string) Env {
	return func(name string) (string, bool) { v, ok := vals[name]; return v, ok }
}

var stdEnv = testEnv(map[string]string{"STRIPE_KEY": testValue, "SHORT": "abc", "SEARCH_KEY": "search-key-abcdefgh", "CTRL": "abcdefgh\x01ijk"})

func TestParseIssueExample(t *testing.T) {
	src := `secrets: [{name: stripe, tenants: [acme], hosts: ["api.stripe.com"], ports: [443], header: "Authorization: Bearer {secret}", value_env: STRIPE_KEY}]`
	set, err := Parse("s.yaml", []byte(src), stdEnv)
	if err != nil {
		t.Fatal(err)
	}
	s := set.Get("stripe")
	if s == nil || s.Value() != testValue || s.Header != "Authorization" || s.Template != "Bearer {secret}" || s.Source != "env STRIPE_KEY" {
		t.Fatalf("%+v", s)
	}
	if !s.Goes("https", "api.stripe.com", 443) || s.Goes("http", "api.stripe.com", 443) || s.Goes("https", "api.stripe.com", 8443) || s.Goes("https", "evil.com", 443) {
		t.Error("Goes")
	}
	if !s.Allows("acme") || s.Allows("globex") {
		t.Error("Allows")
	}
	if EnvName("stripe") != "SANDBOXD_SECRET_STRIPE" {
		t.Error(EnvName("stripe"))
	}
}

func TestParseKinds(t *testing.T) {
	dir := t.TempDir()
	vf := filepath.Join(dir, "search")
	if err := os.WriteFile(vf, []byte("file-value-0123456\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := `secrets:
  - name: basic_one
    description: basic auth
    tenants: [acme, globex]
    hosts: ["*.example.com"]
    schemes: [https, http]
    basic_auth: {username: "{secret}", password: ""}
    value_env: STRIPE_KEY
  - name: q
    tenants: [acme]
    hosts: [api.search.test]
    query: api_key
    value_file: ` + vf + `
  - name: h
    tenants: [acme]
    hosts: [a.test]
    header: "x-api-key: {secret}"
    value_env: SEARCH_KEY
`
	set, err := Parse("s.yaml", []byte(src), stdEnv)
	if err != nil {
		t.Fatal(err)
	}
	b := set.Get("basic_one")
	if b.Apply != ApplyBasic || b.Username != "{secret}" || len(b.Ports) != 2 || !b.Goes("http", "x.example.com", 80) || b.Goes("https", "example.com", 443) {
		t.Errorf("basic: %+v", b)
	}
	q := set.Get("q")
	if q.Apply != ApplyQuery || q.Param != "api_key" || q.Value() != "file-value-0123456" || q.Source != "file "+vf {
		t.Errorf("query: %+v", q)
	}
	if h := set.Get("h"); h.Header != "X-Api-Key" {
		t.Errorf("header: %+v", h)
	}
	if got := strings.Join(set.Names(), ","); got != "basic_one,h,q" {
		t.Errorf("names %s", got)
	}
	empty, err := Parse("s.yaml", []byte("secrets:\n"), stdEnv)
	if err != nil || empty.Len() != 0 {
		t.Errorf("an empty list: %v %v", empty, err)
	}
}

func TestParseErrors(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte(testValue), 0o644); err != nil {
		t.Fatal(err)
	}
	entry := func(extra string) string {
		return "secrets:\n  - name: s\n    tenants: [acme]\n    hosts: [a.test]\n" + extra
	}
	cases := []struct{ src, want string }{
		{"", "s.yaml: the secrets file is empty"},
		{"keys: []\n", `s.yaml:1:1: unknown top-level key "keys"`},
		{"secret: []\n", "did you mean secrets?"},
		{"secrets: 3\n", "s.yaml:1:10: secrets must be a list"},
		{"secrets:\n\t- name: x\n", "s.yaml:2:1: tabs are not allowed"},
		{"secrets:\n  - tenants: [a]\n    hosts: [a.test]\n    header: 'A: {secret}'\n    value_env: STRIPE_KEY\n", "s.yaml:2:5: secrets[0] has no name"},
		{"secrets:\n  - name: Bad-Name\n", `s.yaml:2:11: name "Bad-Name" is not allowed`},
		{entry("    header: 'A: {secret}'\n    value_env: STRIPE_KEY\n    hots: [x]\n"), `s.yaml:7:5: unknown key "hots" in secret "s"; did you mean hosts?`},
		{entry("    header: 'A: {secret}'\n    value_env: STRIPE_KEY\n    tenants: [b]\n"), `s.yaml:7:5: key "tenants" in secret "s" is repeated (first on line 3)`},
		{"secrets:\n  - name: s\n    tenants: []\n    hosts: [a.test]\n    header: 'A: {secret}'\n    value_env: STRIPE_KEY\n", `s.yaml:3:14: tenants of secret "s" is empty`},
		{"secrets:\n  - name: s\n    tenants: [\"a b\"]\n    hosts: [a.test]\n    header: 'A: {secret}'\n    value_env: STRIPE_KEY\n", `tenant "a b" of secret "s" is not a tenant name`},
		{"secrets:\n  - name: s\n    tenants: [a]\n    hosts: [\"*\"]\n    header: 'A: {secret}'\n    value_env: STRIPE_KEY\n", `s.yaml:4:13: hosts[0] of secret "s": host pattern "*" matches every host`},
		{"secrets:\n  - name: s\n    tenants: [a]\n    hosts: [10.0.0.1]\n    header: 'A: {secret}'\n    value_env: STRIPE_KEY\n", "is an IP address"},
		{entry("    header: 'A: {secret}'\n    value_env: STRIPE_KEY\n    ports: [0]\n"), `ports of secret "s" must be TCP ports 1 to 65535, got the number 0`},
		{entry("    header: 'A: {secret}'\n    value_env: STRIPE_KEY\n    schemes: [ftp]\n"), `scheme "ftp" of secret "s" is not allowed`},
		{entry("    value_env: STRIPE_KEY\n"), `s.yaml:2:5: secret "s" does not say how it is applied`},
		{entry("    header: 'A: {secret}'\n    query: k\n    value_env: STRIPE_KEY\n"), `s.yaml:6:12: secret "s" sets header and query`},
		{entry("    header: 'Host: {secret}'\n    value_env: STRIPE_KEY\n"), `header Host of secret "s" frames the message`},
		{entry("    header: 'Authorization: Bearer'\n    value_env: STRIPE_KEY\n"), `must hold {secret} exactly once`},
		{entry("    header: 'A {secret}'\n    value_env: STRIPE_KEY\n"), `must be "Name: value"`},
		{entry("    basic_auth: {username: '{secret}', password: '{secret}'}\n    value_env: STRIPE_KEY\n"), `must hold {secret} exactly once, in username or password`},
		{entry("    basic_auth: {usrname: '{secret}'}\n    value_env: STRIPE_KEY\n"), `unknown key "usrname" in basic_auth of secret "s"; did you mean username?`},
		{entry("    query: 'a b'\n    value_env: STRIPE_KEY\n"), `query of secret "s" must be a parameter name`},
		{entry("    header: 'A: {secret}'\n"), `s.yaml:2:5: secret "s" has no value; set value_env`},
		{entry("    header: 'A: {secret}'\n    value_env: NOPE\n"), `s.yaml:6:16: value_env of secret "s" names NOPE, which is not set`},
		{entry("    header: 'A: {secret}'\n    value_env: SHORT\n"), `the value of secret "s" (env SHORT) is 3 bytes; allowed is 8 to 8192`},
		{entry("    header: 'A: {secret}'\n    value_env: CTRL\n"), `holds control characters`},
		{entry("    header: 'A: {secret}'\n    value_env: STRIPE_KEY\n    value_file: /x\n"), `sets both value_env and value_file`},
		{entry("    header: 'A: {secret}'\n    value_file: rel/path\n"), `must be an absolute path`},
		{entry("    header: 'A: {secret}'\n    value_file: " + open + "\n"), `has mode 0644; group and others must have no access`},
		{entry("    header: 'A: {secret}'\n    value_file: " + dir + "/missing\n"), `cannot read`},
		{entry("    header: 'A: {secret}'\n    value_env: STRIPE_KEY\n") + "  - name: s\n    tenants: [a]\n    hosts: [b.test]\n    query: k\n    value_env: STRIPE_KEY\n", `s.yaml:7:5: secret "s" is already declared on line 2`},
	}
	for _, c := range cases {
		_, err := Parse("s.yaml", []byte(c.src), stdEnv)
		if err == nil {
			t.Errorf("%q parsed", c.src)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.src, err, c.want)
		}
		if strings.Contains(err.Error(), testValue) || strings.Contains(err.Error(), "abcdefgh") {
			t.Errorf("an error shows a value: %v", err)
		}
		var ye *yamlfile.Error
		if !errors.As(err, &ye) {
			t.Errorf("%v is not a yamlfile.Error", err)
		}
	}
}

// Every problem of a file is reported at once.
func TestParseEveryProblem(t *testing.T) {
	src := "secrets:\n  - name: a\n    tenants: [x]\n    hosts: [a.test]\n    header: 'A: {secret}'\n    value_env: NOPE\n  - name: b\n    tenants: []\n    hosts: [b.test]\n    query: k\n    value_env: STRIPE_KEY\n"
	_, err := Parse("s.yaml", []byte(src), stdEnv)
	var es yamlfile.Errors
	if !errors.As(err, &es) || len(es) != 2 {
		t.Fatalf("%v", err)
	}
}

func TestLoadFile(t *testing.T) {
	t.Setenv("SANDBOXD_TEST_SECRET", testValue)
	f := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(f, []byte("secrets:\n  - {name: s, tenants: [a], hosts: [a.test], header: 'A: {secret}', value_env: SANDBOXD_TEST_SECRET}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := LoadFile(f)
	if err != nil || set.Get("s").Value() != testValue || set.File != f {
		t.Fatalf("%v %v", set, err)
	}
	if _, err := LoadFile(f + ".missing"); err == nil || !strings.Contains(err.Error(), "cannot read the secrets file") {
		t.Errorf("missing file: %v", err)
	}
}
