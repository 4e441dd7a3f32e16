package profiles

import (
	"context"
	"encoding/hex"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/egress/egresstest"
)

func TestLoadShippedEgressProfiles(t *testing.T) {
	set := loadShipped(t)
	if got := set.EgressNames(); !reflect.DeepEqual(got, []string{"none", "package-mirror", "web-research"}) {
		t.Fatalf("EgressNames() = %v", got)
	}
	for name, p := range set.Egress {
		if b, err := hex.DecodeString(p.Version); err != nil || len(b) != 32 {
			t.Errorf("%s: Version = %q, want 64 hex digits", name, p.Version)
		}
		if p.Source != filepath.Join("egress", name+".yaml") || !p.Compiled() || p.Description == "" {
			t.Errorf("%s: source %q compiled %v description %q", name, p.Source, p.Compiled(), p.Description)
		}
	}
	if n := set.Egress["none"]; len(n.Allow) != 0 || n.Mode != egress.ModeEnforce {
		t.Errorf("none allows %v in mode %s", n.Allow, n.Mode)
	}

	// What the shipped examples allow, through the decision function.
	res := egresstest.NewResolver(map[string][]string{
		"en.wikipedia.org": {"198.35.26.96"}, "gist.github.com": {"140.82.112.4"}, "github.com": {"140.82.112.3"},
		"mirror.example.org": {"93.184.216.34"}, "evil.example": {"6.6.6.6"},
	})
	c := &egress.Checker{Resolver: res}
	cases := []struct {
		profile, method, target string
		allow                   bool
	}{
		{"web-research", "GET", "https://en.wikipedia.org/wiki/Go", true},
		{"web-research", "CONNECT", "en.wikipedia.org:443", true},
		{"web-research", "POST", "https://en.wikipedia.org/w/api.php", false},
		{"web-research", "GET", "https://gist.github.com/", false},
		{"web-research", "GET", "http://github.com/", false}, // HTTPS only
		{"web-research", "GET", "https://evil.example/", false},
		{"package-mirror", "CONNECT", "mirror.example.org:443", true},
		{"package-mirror", "CONNECT", "mirror.example.org:22", false},
		{"package-mirror", "GET", "https://evil.example/", false},
		{"none", "GET", "https://en.wikipedia.org/", false},
	}
	for _, tc := range cases {
		d := c.Decide(context.Background(), set.Egress[tc.profile], egress.Request{Method: tc.method, Target: tc.target})
		if d.Allow != tc.allow {
			t.Errorf("%s: %s %s = %s (%s), want allow %v", tc.profile, tc.method, tc.target, d.Verdict(), d.Reason, tc.allow)
		}
	}
}

// TestShippedEgressProfilesStateEveryValue checks that each shipped egress
// profile sets every key, in every rule too, and explains it in a comment.
func TestShippedEgressProfilesStateEveryValue(t *testing.T) {
	for _, name := range []string{"none", "package-mirror", "web-research"} {
		file := filepath.Join("egress", name+".yaml")
		t.Run(name, func(t *testing.T) {
			root := parseFile(t, file)
			seen := map[string]bool{}
			checkComments(t, file, root, "", seen)
			for _, k := range yamlLeafPaths(reflect.TypeFor[egress.Profile](), "") {
				if !seen[k] {
					t.Errorf("%s does not state %s", file, k)
				}
			}
		})
	}
}

// checkComments requires a comment on every key of a mapping, walking into
// lists of mappings (rules); it records the top-level keys seen.
func checkComments(t *testing.T, file string, n *yaml.Node, prefix string, seen map[string]bool) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if prefix == "" {
			seen[k.Value] = true
		}
		comment := k.HeadComment + k.LineComment + v.LineComment
		if i == 0 && prefix != "" {
			comment += n.HeadComment // a list item's first key carries the item's comment
		}
		if strings.TrimSpace(comment) == "" {
			t.Errorf("%s:%d: %s%s has no comment explaining it", file, k.Line, prefix, k.Value)
		}
		if v.Kind == yaml.MappingNode && prefix == "" {
			// A nested mapping (render:): its keys are leaves of their own.
			for j := 0; j+1 < len(v.Content); j += 2 {
				seen[k.Value+"."+v.Content[j].Value] = true
			}
			checkComments(t, file, v, k.Value+".", map[string]bool{})
		}
		if v.Kind == yaml.SequenceNode {
			for j, item := range v.Content {
				if item.Kind == yaml.MappingNode {
					checkComments(t, file, item, prefix+k.Value+"["+string(rune('0'+j))+"].", seen)
				}
			}
		}
	}
}

// minimalEgress is an egress profile with only the required keys.
const minimalEgress = "name: web\nallow:\n  - hosts: [example.com]\n"

func TestEgressDefaultsAndBuiltinNone(t *testing.T) {
	set, err := Load(writeTree(t, map[string]string{"exec/default.yaml": minimal, "egress/web.yaml": minimalEgress}))
	if err != nil {
		t.Fatal(err)
	}
	p := set.Egress["web"]
	want := egress.Defaults()
	if p.Mode != want.Mode || p.MaxResponseBytes != want.MaxResponseBytes || p.MaxRequestBytes != want.MaxRequestBytes ||
		p.ConnectTimeout != want.ConnectTimeout || p.TotalTimeout != want.TotalTimeout || p.RequestsPerMinute != want.RequestsPerMinute {
		t.Errorf("defaults not applied: %+v", p)
	}
	if r := p.Allow[0]; !reflect.DeepEqual(r.Ports, []int{80, 443}) || !reflect.DeepEqual(r.Methods, []string{"GET", "HEAD"}) {
		t.Errorf("rule defaults not applied: %+v", r)
	}
	if n := set.Egress["none"]; n == nil || !n.Compiled() || len(n.Allow) != 0 {
		t.Errorf("built-in none missing or not empty: %+v", n)
	}
	// No egress/ dir at all: only the built-in none.
	set, err = Load(writeTree(t, map[string]string{"exec/default.yaml": minimal}))
	if err != nil {
		t.Fatal(err)
	}
	if got := set.EgressNames(); !reflect.DeepEqual(got, []string{"none"}) {
		t.Errorf("EgressNames() without egress/ = %v, want [none]", got)
	}
}

func TestEgressVersionIgnoresLayout(t *testing.T) {
	a := "name: web\nallow:\n  - hosts: [example.com]\n    ports: [443]\nconnect_timeout: 5s\n"
	b := "# comment\nconnect_timeout: 5000ms\nallow:\n  - ports:\n      - 443\n    hosts:\n      - EXAMPLE.com.\nname: web\n"
	c := "name: web\nallow:\n  - hosts: [example.com]\n    ports: [8443]\n"
	version := func(content string) string {
		set, err := Load(writeTree(t, map[string]string{"exec/default.yaml": minimal, "egress/web.yaml": content}))
		if err != nil {
			t.Fatal(err)
		}
		return set.Egress["web"].Version
	}
	if va, vb := version(a), version(b); va != vb {
		t.Errorf("equivalent files have versions %s and %s", va, vb)
	}
	if version(a) == version(c) {
		t.Error("a changed port kept the version")
	}
}

func TestEgressErrors(t *testing.T) {
	cases := []struct {
		name    string
		content string
		line    int
		want    []string
	}{
		{"unknown key", "name: web\nallow:\n  - hosts: [example.com]\n    port: [443]\n", 4, []string{`unknown key "port" in allow[0]`, "ports"}},
		{"unknown top key", "name: web\nallowed: []\n", 2, []string{`unknown key "allowed"`}},
		{"match-all wildcard", "name: web\nallow:\n  - hosts:\n      - example.com\n      - \"*\"\n", 5, []string{"allow[0].hosts[1]", "matches every host"}},
		{"TLD wildcard", "name: web\ndeny:\n  - hosts: [\"*.com\"]\n", 3, []string{"top-level domain"}},
		{"bad pattern", "name: web\nallow:\n  - hosts:\n      - exa..mple.com\n", 4, []string{"not a valid host name"}},
		{"unquoted wildcard", "name: web\nallow:\n  - hosts:\n      - *.example.com\n", 4, []string{"invalid YAML", "must be quoted"}},
		{"bad CIDR", "name: web\nallow_cidrs:\n  - 10.0.0.0/8\n  - 10.0.0.300/32\n", 4, []string{"allow_cidrs[1]", "not a CIDR"}},
		{"CIDR host bits", "name: web\nallow_cidrs: [192.168.1.1/16]\n", 2, []string{"192.168.0.0/16"}},
		{"open everything", "name: web\nallow_cidrs: [0.0.0.0/0]\n", 2, []string{"every address"}},
		{"empty ports", "name: web\nallow:\n  - hosts: [a.com]\n    ports: []\n", 4, []string{"allow[0].ports is an empty list"}},
		{"ports not a list", "name: web\nallow:\n  - hosts: [a.com]\n    ports: 443\n", 4, []string{"allow[0].ports must be a list of whole numbers", "[80, 443]"}},
		{"port as string", "name: web\nallow:\n  - hosts: [a.com]\n    ports: [\"443\"]\n", 4, []string{"allow[0].ports[0] must be a whole number"}},
		{"port out of range", "name: web\nallow:\n  - hosts: [a.com]\n    ports:\n      - 443\n      - 70000\n", 6, []string{"allow[0].ports[1]", "1 to 65535"}},
		{"lower-case method", "name: web\nallow:\n  - hosts: [a.com]\n    methods: [get]\n", 4, []string{"upper case"}},
		{"rule not a mapping", "name: web\nallow:\n  - example.com\n", 3, []string{"allow[0] must be a mapping"}},
		{"allow not a list", "name: web\nallow:\n  hosts: [a.com]\n", 3, []string{"allow must be a list of mappings"}},
		{"bad duration", "name: web\nconnect_timeout: 5 seconds\n", 2, []string{"connect_timeout", "not a duration", "5s"}},
		{"duration as number", "name: web\ntotal_timeout: 30\n", 2, []string{"total_timeout must be a duration", "the number 30"}},
		{"timeout out of range", "name: web\ntotal_timeout: 2h\n", 2, []string{"total_timeout is 2h; allowed is 1s to 1h"}},
		{"bad mode", "name: web\nmode: audit\n", 2, []string{`mode "audit"`, "enforce", "report"}},
		{"rate", "name: web\nrequests_per_minute: 0\n", 2, []string{"requests_per_minute is 0"}},
		{"name mismatch", "name: other\n", 1, []string{`"other" does not match the file name`}},
		{"no name", "mode: enforce\n", 0, []string{"name is required"}},
		{"alias", "name: web\nallow:\n  - hosts: &h [a.com]\n  - hosts: *h\n", 4, []string{"alias"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeTree(t, map[string]string{"exec/default.yaml": minimal, "egress/web.yaml": tc.content})
			_, err := Load(dir)
			wantErr(t, err, filepath.Join(dir, "egress", "web.yaml"), tc.line, tc.want...)
		})
	}
}

func TestEgressNoneMustDenyEverything(t *testing.T) {
	dir := writeTree(t, map[string]string{"exec/default.yaml": minimal, "egress/none.yaml": "name: none\nallow:\n  - hosts: [a.com]\n"})
	_, err := Load(dir)
	wantErr(t, err, filepath.Join(dir, "egress", "none.yaml"), 3, "must deny everything", "no allow rules")
	dir = writeTree(t, map[string]string{"exec/default.yaml": minimal, "egress/none.yaml": "name: none\nmode: report\n"})
	_, err = Load(dir)
	wantErr(t, err, filepath.Join(dir, "egress", "none.yaml"), 2, "must deny everything", "mode enforce")
}

func TestEgressYmlRefused(t *testing.T) {
	dir := writeTree(t, map[string]string{"exec/default.yaml": minimal, "egress/web.yml": minimalEgress})
	_, err := Load(dir)
	wantErr(t, err, filepath.Join(dir, "egress", "web.yml"), 0, "rename it to web.yaml")
}

// An exec profile may name any loaded egress profile; one it names that
// does not exist is refused at the line of its egress key.
func TestExecProfileNamesEgressProfile(t *testing.T) {
	netProfile := "name: net\nimage: img:1\nseccomp: default.json\negress: web\n"
	set, err := Load(writeTree(t, map[string]string{"exec/default.yaml": minimal, "exec/net.yaml": netProfile, "egress/web.yaml": minimalEgress}))
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Exec["net"].Egress; got != "web" {
		t.Errorf("egress = %q, want web", got)
	}
	dir := writeTree(t, map[string]string{"exec/default.yaml": minimal, "exec/net.yaml": netProfile})
	_, err = Load(dir)
	wantErr(t, err, filepath.Join(dir, "exec", "net.yaml"), 4, `egress "web" names no egress profile`, "add egress/web.yaml")
}
