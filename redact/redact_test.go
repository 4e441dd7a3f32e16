package redact

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestCorpus(t *testing.T) {
	r := Default()
	for _, s := range corpus {
		got, c := r.String(s.text())
		if got != s.want() {
			t.Errorf("%s:\n in: %q\ngot: %q\nwant %q", s.Type, s.text(), got, s.want())
			continue
		}
		if c[s.Type] != 1 || c.Total() != 1 {
			t.Errorf("%s: counts %v, want 1 %s", s.Type, c, s.Type)
		}
		if strings.Contains(got, s.Secret) {
			t.Errorf("%s: secret survives in %q", s.Type, got)
		}
	}
}

// All samples in one text, glued with newlines: each is still redacted on
// its own.
func TestCorpusTogether(t *testing.T) {
	var in, want strings.Builder
	for _, s := range corpus {
		in.WriteString(s.text() + "\n\n")
		want.WriteString(s.want() + "\n\n")
	}
	got, c := Default().String(in.String())
	if got != want.String() {
		t.Fatalf("together differs from one by one:\n%s", firstDiff(got, want.String()))
	}
	if c.Total() != len(corpus) {
		t.Fatalf("total %d, want %d", c.Total(), len(corpus))
	}
}

func TestEveryTypeHasASample(t *testing.T) {
	r := Default()
	types := r.Types()
	if len(types) < 30 {
		t.Fatalf("%d types, want at least 30", len(types))
	}
	if !slices.IsSorted(types) {
		t.Fatalf("Types not sorted: %v", types)
	}
	have := map[string]bool{}
	for _, s := range corpus {
		have[s.Type] = true
		if !slices.Contains(types, s.Type) {
			t.Errorf("sample of unknown type %s", s.Type)
		}
	}
	for _, ty := range ownTypes(r) {
		if !have[ty] {
			t.Errorf("type %s has no sample in the corpus", ty)
		}
	}
	t.Logf("%d types: %s", len(types), strings.Join(types, " "))
}

func TestLookalikesSurvive(t *testing.T) {
	r := Default()
	for _, s := range lookalikes() {
		got, c := r.String(s)
		if got != s || c != nil {
			t.Errorf("look-alike changed (%v):\n in: %q\ngot: %q", c, s, got)
		}
	}
}

// Redacting twice changes nothing more.
func TestIdempotent(t *testing.T) {
	r := Default()
	for _, s := range corpus {
		once, _ := r.String(s.text())
		twice, c := r.String(once)
		if twice != once || c != nil {
			t.Errorf("%s: second pass changed %q to %q", s.Type, once, twice)
		}
	}
}

// The windowed engine gives exactly what running every rule over the whole
// text gives.
func TestMatchesBaseline(t *testing.T) {
	r := withoutNear(Default())
	var texts []string
	for _, s := range corpus {
		texts = append(texts, s.text())
	}
	texts = append(texts, lookalikes()...)
	texts = append(texts, strings.Join(texts, "\n"))
	for _, x := range texts {
		got, gc := r.String(x)
		want, wc := baselineRedact(r, []byte(x))
		if got != string(want) || gc.Total() != wc.Total() {
			t.Errorf("engine and baseline differ on %q:\n%s", x, firstDiff(got, string(want)))
		}
	}
}

func TestBytesAndString(t *testing.T) {
	r := Default()
	clean := []byte("nothing to see here, move along")
	if out, c := r.Bytes(clean); &out[0] != &clean[0] || c != nil {
		t.Fatalf("clean Bytes should return the input itself")
	}
	s := corpus[0]
	out, c := r.Bytes([]byte(s.text()))
	if string(out) != s.want() || c[s.Type] != 1 {
		t.Fatalf("Bytes: %q %v", out, c)
	}
	if got, c := r.String(""); got != "" || c != nil {
		t.Fatal("empty")
	}
}

func TestCountsAdd(t *testing.T) {
	c := Counts{"a": 1}
	c.Add(Counts{"a": 2, "b": 1})
	c.Add(nil)
	if c["a"] != 3 || c["b"] != 1 || c.Total() != 4 {
		t.Fatalf("%v", c)
	}
}

func TestRuleValidate(t *testing.T) {
	good := Rule{Type: "acme_key", Keywords: []string{"acme_"}, Regex: `acme_[0-9a-f]{8}`}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		r    Rule
		want string
	}{
		{Rule{Keywords: []string{"x"}, Regex: "x"}, "type is missing"},
		{Rule{Type: "Acme Key", Keywords: []string{"x"}, Regex: "x"}, "snake_case"},
		{Rule{Type: "acme", Regex: "acme"}, "keywords are missing"},
		{Rule{Type: "acme", Keywords: []string{" "}, Regex: "acme"}, "keyword 0 is empty"},
		{Rule{Type: "acme", Keywords: []string{strings.Repeat("k", 65)}, Regex: "k"}, "longer than 64"},
		{Rule{Type: "acme", Keywords: []string{"acme"}}, "regex is missing"},
		{Rule{Type: "acme", Keywords: []string{"acme"}, Regex: "acme_(["}, "bad regex"},
		{Rule{Type: "acme", Keywords: []string{"acme"}, Regex: "acme_(x)", SecretGroup: 2}, "only 1 capture groups"},
		{Rule{Type: "acme", Keywords: []string{"acme"}, Regex: "(acme)?"}, "matches the empty string"},
		{Rule{Type: "acme", Keywords: []string{"acme"}, Regex: "acme", MinEntropy: 9}, "min_entropy"},
		{Rule{Type: "acme", Keywords: []string{"acme"}, Regex: "acme", SecretGroup: -1}, "negative"},
	} {
		err := tc.r.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want it to mention %q", tc.r, err, tc.want)
		}
	}
	if _, err := New([]Rule{good, {Type: "bad"}}); err == nil || !strings.Contains(err.Error(), "extra rule 1") {
		t.Errorf("New with a bad rule: %v", err)
	}
}

func TestExtraRules(t *testing.T) {
	src := `
- type: acme_api_key
  keywords: [acme_]
  regex: '\bacme_[0-9a-f]{32}\b'
- type: corp_pin
  keywords: [corp_pin]
  regex: 'corp_pin=(\S{8,64})'
  secret_group: 1
  min_entropy: 3
- type: ticket
  keywords: [TKT-]
  case_sensitive: true
  regex: 'TKT-[0-9]{6}'
`
	var rules []Rule
	if err := yaml.Unmarshal([]byte(src), &rules); err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(rules)
	var back []Rule
	if err := json.Unmarshal(js, &back); err != nil || !slices.EqualFunc(rules, back, func(a, b Rule) bool {
		return a.Type == b.Type && a.Regex == b.Regex && a.SecretGroup == b.SecretGroup && a.MinEntropy == b.MinEntropy && a.CaseSensitive == b.CaseSensitive
	}) {
		t.Fatalf("json round trip: %s %v", js, err)
	}
	r, err := New(rules)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(r.Types(), "acme_api_key") || !slices.Contains(r.Types(), "github_pat") {
		t.Fatalf("types %v", r.Types())
	}
	key := "acme_" + rnd(hexd, 32)
	pass := rnd(alnum, 20)
	in := "k=" + key + " corp_pin=" + pass + " corp_pin=aaaaaaaaaa TKT-123456 tkt-123456"
	want := "k=[REDACTED:acme_api_key] corp_pin=[REDACTED:corp_pin] corp_pin=aaaaaaaaaa [REDACTED:ticket] tkt-123456"
	got, c := r.String(in)
	if got != want || c["acme_api_key"] != 1 || c["corp_pin"] != 1 || c["ticket"] != 1 {
		t.Fatalf("got %q %v\nwant %q", got, c, want)
	}
	// Keywords fold ASCII case only; a non-ASCII keyword matches as given.
	u, err := New([]Rule{{Type: "umlaut", Keywords: []string{"GRÜN-"}, Regex: `(?i)GRÜN-[0-9]{4}`}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := u.String("a grün-1234 GRÜN-5678"); got != "a grün-1234 [REDACTED:umlaut]" {
		t.Fatalf("non-ASCII keyword: %q", got)
	}
	// The default Redactor knows none of them.
	if got, _ := Default().String(in); got != in {
		t.Fatalf("default redacted %q", got)
	}
	// Stream equality holds for extra rules too.
	checkSplits(t, r, in)
}

func firstDiff(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	lo := max(0, i-80)
	return "at " + itoa(i) + ":\n got: " + quoteClip(a[lo:]) + "\nwant: " + quoteClip(b[lo:])
}

func quoteClip(s string) string {
	if len(s) > 240 {
		s = s[:240] + "…"
	}
	return strings.ReplaceAll(s, "\n", `\n`)
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// ownTypes are the types of sandboxd's own rules (the gitleaks rules are
// named after their ids, and tested on gitleaks' own examples and on
// testdata/).
func ownTypes(r *Redactor) []string {
	var out []string
	for _, ru := range r.rules {
		if ru.source == "" && !slices.Contains(out, ru.typ) {
			out = append(out, ru.typ)
		}
	}
	return out
}

// The package doc names every type of sandboxd's own rules.
func TestDocListsTypes(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, ty := range ownTypes(Default()) {
		if !regexp.MustCompile(`\b` + ty + `\b`).Match(doc) {
			t.Errorf("doc.go does not mention %s", ty)
		}
	}
}
