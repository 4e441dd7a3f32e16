package auth

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/yamlfile"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

const (
	agentKey = "sbx_agent-secret-0123456789"
	adminKey = "sbx_admin-secret-9876543210"
	devKey   = "plain-dev-key-abcdef"
)

func writeKeys(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFileAndAuthenticate(t *testing.T) {
	path := writeKeys(t, `# API keys
keys:
  - id: agent-1
    tenant: acme
    key_sha256: `+sha(agentKey)+`
    roles: [agent]
  - id: admin-1
    tenant: ops
    key_sha256: `+strings.ToUpper(sha(adminKey))+`
    roles:
      - admin
  - id: dev
    tenant: acme
    key: `+devKey+`
    roles: [agent, agent]
`)
	ring, warnings, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if ring.Len() != 3 {
		t.Errorf("Len() = %d, want 3", ring.Len())
	}
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], path+":14: ") || !strings.Contains(warnings[0], `key "dev" is stored in plaintext`) {
		t.Errorf("warnings = %q, want one plaintext warning for dev at line 14", warnings)
	}
	for _, w := range warnings {
		if strings.Contains(w, devKey) {
			t.Errorf("warning %q contains the plaintext key", w)
		}
	}

	tests := []struct {
		bearer string
		want   *Key
	}{
		{agentKey, &Key{ID: "agent-1", Tenant: "acme", Roles: []string{"agent"}}},
		{adminKey, &Key{ID: "admin-1", Tenant: "ops", Roles: []string{"admin"}}},
		{devKey, &Key{ID: "dev", Tenant: "acme", Roles: []string{"agent"}}},
		{"", nil},
		{"wrong", nil},
		{agentKey + " ", nil},
		{agentKey[:len(agentKey)-1], nil},
		{sha(agentKey), nil}, // the stored hash is not a key
	}
	for _, tc := range tests {
		got, ok := ring.Authenticate(tc.bearer)
		if ok != (tc.want != nil) || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Authenticate(%q) = %+v, %v; want %+v", tc.bearer, got, ok, tc.want)
		}
	}
}

func TestAuthenticateNilRing(t *testing.T) {
	var r *Keyring
	if k, ok := r.Authenticate("x"); ok || k != nil {
		t.Errorf("nil Keyring authenticated: %+v", k)
	}
}

// TestLookupAfterReplace: Lookup finds a key by its fingerprint as the
// keyring holds it now, after a keys-file reload.
func TestLookupAfterReplace(t *testing.T) {
	load := func(content string) *Keyring {
		t.Helper()
		ring, _, err := LoadFile(writeKeys(t, content))
		if err != nil {
			t.Fatal(err)
		}
		return ring
	}
	const rotated = "sbx_agent-secret-rotated-000"
	ring := load("keys:\n  - {id: agent-1, tenant: acme, key_sha256: " + sha(agentKey) + ", roles: [agent]}\n" +
		"  - {id: admin-1, tenant: ops, key_sha256: " + sha(adminKey) + ", roles: [admin]}\n")
	agent, admin := FingerprintOf(agentKey), FingerprintOf(adminKey)
	if k, ok := ring.Lookup(agent); !ok || k.ID != "agent-1" {
		t.Fatalf("Lookup(agent) = %+v, %v", k, ok)
	}
	if k, ok := ring.Lookup(FingerprintOf("wrong")); ok {
		t.Fatalf("Lookup of an unknown fingerprint = %+v", k)
	}
	if k, ok := ring.Lookup(Fingerprint{}); ok {
		t.Fatalf("Lookup of the zero fingerprint = %+v", k)
	}

	// agent-1 rotated to a new secret; admin-1 moved and demoted.
	ring.Replace(load("keys:\n  - {id: agent-1, tenant: acme, key_sha256: " + sha(rotated) + ", roles: [agent]}\n" +
		"  - {id: admin-1, tenant: other, key_sha256: " + sha(adminKey) + ", roles: [reviewer]}\n"))
	if k, ok := ring.Lookup(agent); ok {
		t.Errorf("the rotated key's old fingerprint still finds %+v", k)
	}
	if k, ok := ring.Lookup(FingerprintOf(rotated)); !ok || k.ID != "agent-1" {
		t.Errorf("Lookup(rotated) = %+v, %v", k, ok)
	}
	want := &Key{ID: "admin-1", Tenant: "other", Roles: []string{"reviewer"}}
	if k, ok := ring.Lookup(admin); !ok || !reflect.DeepEqual(k, want) {
		t.Errorf("Lookup(admin) after the reload = %+v, %v; want %+v", k, ok, want)
	}

	// admin-1 removed.
	ring.Replace(load("keys:\n  - {id: agent-1, tenant: acme, key_sha256: " + sha(rotated) + ", roles: [agent]}\n"))
	if k, ok := ring.Lookup(admin); ok {
		t.Errorf("the removed key is still found: %+v", k)
	}
	var nilRing *Keyring
	if k, ok := nilRing.Lookup(admin); ok {
		t.Errorf("nil Keyring found %+v", k)
	}
}

func TestHas(t *testing.T) {
	tests := []struct {
		roles []string
		role  string
		want  bool
	}{
		{[]string{RoleAgent}, RoleAgent, true},
		{[]string{RoleAgent}, RoleAdmin, false},
		{[]string{RoleAgent}, "billing", false},
		{[]string{RoleAdmin}, RoleAgent, true},
		{[]string{RoleAdmin}, RoleAdmin, true},
		{[]string{RoleAdmin}, "anything-later", true},
		{nil, RoleAgent, false},
	}
	for _, tc := range tests {
		k := &Key{ID: "k", Tenant: "t", Roles: tc.roles}
		if got := k.Has(tc.role); got != tc.want {
			t.Errorf("Key{Roles: %v}.Has(%q) = %v, want %v", tc.roles, tc.role, got, tc.want)
		}
	}
}

func TestKeysFileErrors(t *testing.T) {
	h := sha("k1")
	entry := func(extra string) string { return "keys:\n  - id: a\n    tenant: t\n    roles: [agent]\n" + extra }
	tests := []struct {
		name    string
		content string
		line    int
		want    []string
	}{
		{"empty file", "", 0, []string{"the keys file is empty"}},
		{"only comments", "# nothing\n", 0, []string{"the keys file is empty"}},
		{"syntax", "keys:\n  - id: a: b\n", 2, []string{"invalid YAML: mapping values are not allowed"}},
		{"two documents", entry("    key_sha256: "+h+"\n") + "---\nkeys: []\n", 6, []string{"more than one YAML document"}},
		{"top-level list", "- id: a\n", 1, []string{"top level must be a mapping"}},
		{"unknown top key", "keys: []\nusers: []\n", 2, []string{`unknown top-level key "users"`}},
		{"no keys list", "{}\n", 0, []string{"no keys: list"}},
		{"keys not a list", "keys: {id: a}\n", 1, []string{"keys must be a list", "got a mapping"}},
		{"keys empty", "keys: []\n", 1, []string{"keys is empty"}},
		{"keys null", "keys:\n", 1, []string{"keys must be a list", "got no value"}},
		{"entry not a mapping", "keys:\n  - agent-1\n", 2, []string{"keys[0] must be a mapping", `got the string "agent-1"`}},
		{"unknown entry key", entry("    key_sha256: " + h + "\n    role: [admin]\n"), 6, []string{`unknown key "role" in keys[0]`, "allowed keys: id, tenant, key_sha256, key, roles"}},
		{"repeated entry key", entry("    key_sha256: " + h + "\n    tenant: u\n"), 6, []string{`key "tenant" in keys[0] is repeated (first on line 3)`}},
		{"missing id", "keys:\n  - tenant: t\n    key_sha256: " + h + "\n    roles: [agent]\n", 2, []string{"keys[0] has no id"}},
		{"empty id", "keys:\n  - id: ''\n    tenant: t\n", 2, []string{"keys[0] has no id"}},
		{"id not a string", "keys:\n  - id: [a]\n", 2, []string{"id of keys[0] must be a string, got a list"}},
		{"bad id", "keys:\n  - id: a b\n", 2, []string{`id "a b" is not allowed`}},
		{"missing tenant", "keys:\n  - id: a\n    key_sha256: " + h + "\n    roles: [agent]\n", 2, []string{`key "a" has no tenant`}},
		{"bad tenant", "keys:\n  - id: a\n    tenant: ../x\n", 3, []string{`tenant "../x" is not allowed`}},
		{"missing roles", "keys:\n  - id: a\n    tenant: t\n    key_sha256: " + h + "\n", 2, []string{`key "a" has no roles`, "allowed roles: admin, agent"}},
		{"roles empty", "keys:\n  - id: a\n    tenant: t\n    roles: []\n", 4, []string{`roles of key "a" is empty`}},
		{"roles a string", "keys:\n  - id: a\n    tenant: t\n    roles: agent\n", 4, []string{`roles of key "a" must be a list`}},
		{"unknown role", "keys:\n  - id: a\n    tenant: t\n    roles: [agent, root]\n", 4, []string{`role "root" of key "a" is unknown; allowed roles: admin, agent`}},
		{"role not a string", "keys:\n  - id: a\n    tenant: t\n    roles: [1]\n", 4, []string{"roles of key \"a\" must be strings"}},
		{"no key at all", entry(""), 2, []string{`key "a" has no key_sha256`}},
		{"both key and hash", entry("    key_sha256: " + h + "\n    key: k1\n"), 6, []string{`key "a" sets both key and key_sha256`}},
		{"short hash", entry("    key_sha256: abc123\n"), 5, []string{`key_sha256 of key "a" is not 64 hex digits (got 6 characters)`}},
		{"non-hex hash", entry("    key_sha256: " + strings.Repeat("g", 64) + "\n"), 5, []string{"is not 64 hex digits (got 64 characters)"}},
		{"hash not a string", entry("    key_sha256: 12345\n"), 5, []string{"must be a string of 64 hex digits, got a number"}},
		{"empty plaintext", entry("    key: ''\n"), 5, []string{`key of key "a" must be non-empty`}},
		{"plaintext with space", entry("    key: 'a b'\n"), 5, []string{"without spaces"}},
		{"plaintext not a string", entry("    key: 123456\n"), 5, []string{`key of key "a" must be a string, got a number`}},
		{"duplicate id", entry("    key_sha256: "+h+"\n") + "  - id: a\n    tenant: t\n    key_sha256: " + sha("k2") + "\n    roles: [agent]\n", 6, []string{`id "a" is already used on line 2`}},
		{"duplicate key", entry("    key_sha256: "+h+"\n") + "  - id: b\n    tenant: t\n    key: k1\n    roles: [agent]\n", 6, []string{`key "b" has the same key as "a"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := writeKeys(t, tc.content)
			ring, warnings, err := LoadFile(path)
			if err == nil {
				t.Fatalf("LoadFile succeeded (%d keys, warnings %q), want an error", ring.Len(), warnings)
			}
			var aerr *yamlfile.Error
			if !errors.As(err, &aerr) {
				t.Fatalf("error = %v (%T), want *yamlfile.Error", err, err)
			}
			if aerr.File != path || aerr.Line != tc.line {
				t.Errorf("error at %s:%d, want %s:%d (%v)", aerr.File, aerr.Line, path, tc.line, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(aerr.Msg, w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if ring != nil || warnings != nil {
				t.Errorf("LoadFile returned a keyring or warnings along with an error")
			}
		})
	}
}

// TestErrorsNeverEchoKeys puts a secret in each place a key can be and
// checks that no error or warning repeats it.
func TestErrorsNeverEchoKeys(t *testing.T) {
	const secret = "sbx_TOPSECRETVALUE"
	contents := []string{
		"keys:\n  - id: a\n    tenant: t\n    roles: [agent]\n    key_sha256: " + secret + "\n",
		"keys:\n  - id: a\n    tenant: t\n    roles: [agent]\n    key_sha256: [" + secret + "]\n",
		"keys:\n  - id: a\n    tenant: t\n    roles: [agent]\n    key: [" + secret + "]\n",
		"keys:\n  - id: a\n    tenant: t\n    roles: [agent]\n    key: " + secret + "\n    key_sha256: " + sha(secret) + "\n",
		"keys:\n  - id: a\n    tenant: t\n    roles: [agent]\n    key: " + secret + "\n  - id: b\n    tenant: t\n    roles: [agent]\n    key: " + secret + "\n",
		"keys:\n  - id: a\n    tenant: t\n    roles: [agent]\n    key: " + secret + "\n",
		"keys:\n  - id: a\n    tenant: t\n    roles: [agent]\n    key: " + sha(secret) + "\n",
	}
	for _, c := range contents {
		_, warnings, err := LoadFile(writeKeys(t, c))
		msgs := warnings
		if err != nil {
			msgs = append(msgs, err.Error())
		}
		if len(msgs) == 0 {
			t.Errorf("no error or warning for:\n%s", c)
		}
		for _, m := range msgs {
			if strings.Contains(m, "TOPSECRET") || strings.Contains(m, sha(secret)) {
				t.Errorf("message repeats the key: %q", m)
			}
		}
	}
}

func TestPlaintextThatLooksLikeAHash(t *testing.T) {
	path := writeKeys(t, "keys:\n  - id: a\n    tenant: t\n    roles: [agent]\n    key: "+sha("x")+"\n")
	_, warnings, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 2 || !strings.Contains(warnings[1], "looks like a sha256") {
		t.Errorf("warnings = %q, want the plaintext warning and a looks-like-a-hash warning", warnings)
	}
}

func TestLoadFileMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, _, err := LoadFile(path)
	var aerr *yamlfile.Error
	if !errors.As(err, &aerr) || aerr.File != path || !strings.Contains(aerr.Msg, "cannot read the keys file: no such file or directory") {
		t.Errorf("LoadFile(missing) = %v", err)
	}
	if got, want := err.Error(), path+": cannot read the keys file: no such file or directory"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestGenerate(t *testing.T) {
	k1, ring := Generate("dev", "dev", RoleAdmin)
	k2, _ := Generate("dev", "dev", RoleAdmin)
	if k1 == k2 {
		t.Error("two generated keys are equal")
	}
	if !strings.HasPrefix(k1, "sbx_") {
		t.Errorf("key %q lacks the sbx_ prefix", k1)
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(k1, "sbx_"))
	if err != nil || len(raw) != 32 {
		t.Errorf("key body is not 32 bytes of base64url: %d bytes, %v", len(raw), err)
	}
	if bearer, ok := ParseBearer("Bearer " + k1); !ok || bearer != k1 {
		t.Errorf("generated key does not survive ParseBearer: %q %v", bearer, ok)
	}
	got, ok := ring.Authenticate(k1)
	if !ok || !reflect.DeepEqual(got, &Key{ID: "dev", Tenant: "dev", Roles: []string{"admin"}}) {
		t.Errorf("Authenticate(generated) = %+v, %v", got, ok)
	}
	if _, ok := ring.Authenticate(k2); ok {
		t.Error("a key from another Generate call authenticates")
	}
	if ring.Len() != 1 {
		t.Errorf("Len() = %d, want 1", ring.Len())
	}

	roles := []string{RoleAgent}
	_, ring = Generate("a", "t", roles...)
	roles[0] = RoleAdmin
	if ring.entries[0].key.Roles[0] != RoleAgent {
		t.Error("Generate keeps the caller's roles slice")
	}
}

func TestGeneratePanicsOnBadInput(t *testing.T) {
	tests := []struct {
		name       string
		id, tenant string
		roles      []string
	}{
		{"empty id", "", "t", []string{RoleAgent}},
		{"bad tenant", "a", "t t", []string{RoleAgent}},
		{"no roles", "a", "t", nil},
		{"unknown role", "a", "t", []string{"root"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("Generate did not panic")
				}
			}()
			Generate(tc.id, tc.tenant, tc.roles...)
		})
	}
}

func TestParseBearer(t *testing.T) {
	tests := []struct {
		header string
		want   string
		ok     bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BEARER abc", "abc", true},
		{"  Bearer    abc  ", "abc", true},
		{"Bearer\tabc", "abc", true},
		{"Bearer sbx_a-b_c=", "sbx_a-b_c=", true},
		{"", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Bearer    ", "", false},
		{"Bearerabc", "", false},
		{"Basic dXNlcjpwYXNz", "", false},
		{"abc", "", false},
		{"Bearer a b", "", false},
		{"Bearer a\x00b", "", false},
		{"Token abc", "", false},
		{"Bear abc", "", false},
	}
	for _, tc := range tests {
		got, ok := ParseBearer(tc.header)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseBearer(%q) = %q, %v; want %q, %v", tc.header, got, ok, tc.want, tc.ok)
		}
	}
}

func TestErrorString(t *testing.T) {
	if got := (&yamlfile.Error{File: "k.yaml", Line: 3, Msg: "bad"}).Error(); got != "k.yaml:3: bad" {
		t.Errorf("got %q", got)
	}
	if got := (&yamlfile.Error{File: "k.yaml", Msg: "bad"}).Error(); got != "k.yaml: bad" {
		t.Errorf("got %q", got)
	}
}

// FuzzParseKeys feeds arbitrary bytes to the keys-file parser. It must not
// panic; failures are *yamlfile.Error naming the file; an accepted file yields a
// non-empty keyring of valid, unique keys.
func FuzzParseKeys(f *testing.F) {
	for _, seed := range []string{
		"keys:\n  - id: a\n    tenant: t\n    key_sha256: " + sha("k") + "\n    roles: [agent]\n",
		"keys:\n  - {id: a, tenant: t, key: k, roles: [admin, agent]}\n  - {id: b, tenant: t, key: k2, roles: [agent]}\n",
		"keys: [",
		"keys: &a [*a]\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ring, warnings, err := parse("keys.yaml", data)
		if err != nil {
			var aerr *yamlfile.Error
			if !errors.As(err, &aerr) || aerr.File != "keys.yaml" || aerr.Line < 0 || aerr.Msg == "" {
				t.Fatalf("error %v (%T) is not a well-formed *yamlfile.Error", err, err)
			}
			return
		}
		if ring.Len() == 0 {
			t.Fatal("accepted a file with no keys")
		}
		ids := make(map[string]bool)
		for _, e := range ring.entries {
			k := e.key
			if checkName("id", k.ID) != "" || checkName("tenant", k.Tenant) != "" || len(k.Roles) == 0 || ids[k.ID] {
				t.Fatalf("accepted an invalid or duplicate key %+v", k)
			}
			ids[k.ID] = true
		}
		for _, w := range warnings {
			if !strings.HasPrefix(w, "keys.yaml:") {
				t.Fatalf("warning %q does not name the file", w)
			}
		}
	})
}
