package redact

import (
	"math/rand/v2"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"testing"
)

// glues are what a token may be glued to when printed: a letter, a digit,
// "_", the "%3D" of a URL-encoded query string (print("%3D" + token)), "=".
var glues = []string{"a", "Z", "7", "_", "%3D", "x%3d", "token%3d", "=", "key="}

// gluedCase is a token to glue, of type typ (for sandboxd's own rules) or
// found by gitleaks rule src.
type gluedCase struct {
	typ, src, tok string
}

// ownGlued: corpus tokens of sandboxd's own rules that start with their
// rule's keyword (anchored rules), and the tokens marked inside (OpenAI's
// T3BlbkFJ, Terraform's .atlasv1., Azure's Q~).
func ownGlued(r *Redactor) []gluedCase {
	anchored := map[string][]string{} // type -> keywords of its anchored rules
	for _, ru := range r.rules {
		if ru.anchored && ru.source == "" {
			anchored[ru.typ] = append(anchored[ru.typ], ru.keywords...)
		}
	}
	var out []gluedCase
	for _, s := range corpus {
		kws := anchored[s.Type]
		starts := slices.ContainsFunc(kws, func(k string) bool { return strings.HasPrefix(strings.ToLower(s.Secret), strings.ToLower(k)) })
		inside := slices.Contains([]string{"openai_api_key", "terraform_cloud_token", "azure_client_secret"}, s.Type)
		if starts || inside {
			out = append(out, gluedCase{typ: s.Type, tok: s.Secret})
		}
	}
	return out
}

// gitleaksGlued: for every gitleaks rule with a word boundary before a
// distinctive prefix, a token made from its expression for each such
// prefix, that the rule finds standing alone.
func gitleaksGlued(t *testing.T, r *Redactor) []gluedCase {
	var out []gluedCase
	for _, ru := range r.rules {
		if len(ru.glue) == 0 {
			continue
		}
		src := ru.re.String()
		if ru.anchored {
			src = ru.are.String()
		}
		re, err := syntax.Parse(src, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		todo := slices.Clone(ru.glue)
		var seed [32]byte
		copy(seed[:], ru.source)
		g := rand.New(rand.NewChaCha8(seed))
		for try := 0; try < 2000 && len(todo) > 0; try++ {
			var b strings.Builder
			sampleRE(g, re, &b)
			tok := b.String()
			l, ok := gluePrefix([]byte(tok), 0, todo)
			if !ok {
				continue
			}
			// The rule finds it standing alone (entropy and
			// allowlists pass), and the token is what it redacts.
			in := "out " + tok + " end"
			if got, _ := r.String(in); !regexpMatch(`^out \[REDACTED:[a-z0-9_]+\] ?end$`, got) {
				continue
			}
			out = append(out, gluedCase{src: ru.source, tok: tok})
			todo = slices.DeleteFunc(todo, func(x lit) bool { return x == l })
		}
		for _, l := range todo {
			t.Errorf("%s: no token made for prefix %q", ru.source, l.s)
		}
	}
	return out
}

// A token glued to what comes before it is redacted in full: no prefix may
// hide a token. This holds for every rule of sandboxd's own with a literal
// prefix (github, Stripe, Google, ...) or a distinctive mark inside, and for
// every gitleaks rule with a word boundary before a distinctive prefix;
// through the Writer at every split point too.
func TestGluedTokensAreRedacted(t *testing.T) {
	r := Default()
	own := ownGlued(r)
	gl := gitleaksGlued(t, r)
	if len(own) < 50 || len(gl) < 60 {
		t.Fatalf("only %d own and %d gitleaks tokens", len(own), len(gl))
	}
	for i, c := range append(own, gl...) {
		for j, glue := range glues {
			in := "out " + glue + c.tok + " end"
			got, counts := r.String(in)
			name := c.typ + c.src
			if survives(got, c.tok) {
				t.Errorf("%s glued to %q survives: %q", name, glue, got)
				continue
			}
			if c.typ != "" && counts[c.typ] == 0 {
				t.Errorf("%s glued to %q: counted as %v", name, glue, counts)
			}
			if (i+j)%len(glues) == 0 {
				checkSplits(t, r, in)
			}
		}
	}
	// The security suite's attack (tests/security): a GitHub token
	// printed after each of these.
	tok := "ghp_" + strings.Repeat("aB3dE6gH9jK2", 3)[:36]
	for _, p := range []string{"%3D", "x", "_", "7", "token%3d"} {
		if got, c := r.String(p + tok + "\n"); strings.Contains(got, tok[4:20]) || c["github_pat"] != 1 {
			t.Errorf("attack secret-glued-to-text, %q: %q %v", p, got, c)
		}
	}
}

// survives: some 8 bytes of tok's last 16 are still in out.
func survives(out, tok string) bool {
	tail := tok[max(0, len(tok)-16):]
	for i := 0; i+8 <= len(tail); i++ {
		if strings.Contains(out, tail[i:i+8]) {
			return true
		}
	}
	return strings.Contains(out, tok)
}

// The prefixes that keep a word boundary: they turn up inside words, hashes
// and base64 (doc.go and docs/redaction.md list them).
func TestGlueBoundaryKept(t *testing.T) {
	var kept []string
	for _, ru := range Default().rules {
		for _, l := range ru.bound {
			kept = append(kept, l.s)
		}
	}
	slices.Sort(kept)
	// curl starts no token: the credential comes later.
	want := []string{"4b1d", "ACCA", "EAAA", "EAAC", "EAAM", "curl", "curl", "ey", "s."}
	if !slices.Equal(kept, want) {
		t.Errorf("prefixes that keep \\b: %q, want %q", kept, want)
	}
}

// Words and identifiers that end in a prefix are not tokens: the part after
// the prefix must look random.
func TestGluedLookalikesSurvive(t *testing.T) {
	r := Default()
	for _, s := range []string{
		"nonMatchingToken := \"task_test_" + rnd("abcdefghijklmnopqrstuvwxyz", 30) + "\"",
		"desk_test_environment and disk_live_configuration",
		`msgstr "GSSAPI-VIRHEKAPSELOINTIMERKKIJONO"`,
		"key = adf4b1d" + rnd(alnum, 38),
		"options.abcdefghijklmnopqrstuvwx = 1",
		"metadata:\n  name: x\n",
		"bb_eeeeegfgffhiiiiiiiiiiihiiiiicgafhf_eefghihhiiiifhifhhdhifhiiii\n",
	} {
		if got, _ := r.String(s); got != s {
			t.Errorf("look-alike changed:\n in: %q\ngot: %q", s, got)
		}
	}
}

func TestDistinctive(t *testing.T) {
	for p, want := range map[lit]bool{
		{s: "sk_live_"}: true, {s: "AIza"}: true, {s: "hvs."}: true, {s: "A3-"}: true, {s: "A3T"}: true,
		{s: "cmVmd"}: true, {s: "LTAI"}: true, {s: "eyjrijoi", fold: true}: true,
		{s: "s."}: false, {s: "ey"}: false, {s: "4b1d"}: false, {s: "EAAA"}: false, {s: "EAAC"}: false,
		{s: "aiza", fold: true}: true, {s: "pat"}: false, {s: "deadbeef"}: false,
	} {
		if got := distinctive(p); got != want {
			t.Errorf("distinctive(%q, fold %v) = %v", p.s, p.fold, got)
		}
	}
	b62 := alphabet{mixed: true, letters: true, digits: true}
	upperDigits := alphabet{letters: true, digits: true}
	for _, tc := range []struct {
		body string
		a    alphabet
		want bool
	}{
		{rnd(alnum, 24), b62, true},
		{"b37ucz5808ng7wb5mvdl4xm7i63etg", b62, false}, // task_test_…
		{"environment", b62, false},
		{"VIRHEKAP5ELOINTIMERKKIJONO", upperDigits, true},
		{"VIRHEKAPSELOINTIMERKKIJONO", upperDigits, false}, // GSSAPI-…
		{"abcdefghijklmnop", alphabet{letters: true}, true},
	} {
		if got := tokenLike([]byte(tc.body), tc.a); got != tc.want {
			t.Errorf("tokenLike(%q, %+v) = %v", tc.body, tc.a, got)
		}
	}
}

func regexpMatch(expr, s string) bool { return regexp.MustCompile(expr).MatchString(s) }

// sampleRE writes random ASCII text that re matches: nothing for optional
// parts, a zero-width branch of an alternation when there is one (the end
// of text after a token), a random one otherwise, and repeats of a random
// count up to 64 more than the least.
func sampleRE(g *rand.Rand, re *syntax.Regexp, b *strings.Builder) {
	switch re.Op {
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			b.WriteRune(r)
		}
	case syntax.OpCharClass:
		var in []rune
		for i := 0; i+1 < len(re.Rune); i += 2 {
			for c := max(re.Rune[i], 0x21); c <= min(re.Rune[i+1], 0x7e); c++ {
				in = append(in, c)
			}
		}
		if len(in) == 0 {
			b.WriteByte(' ')
			return
		}
		b.WriteRune(in[g.IntN(len(in))])
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		b.WriteByte(alnum[g.IntN(len(alnum))])
	case syntax.OpCapture:
		sampleRE(g, re.Sub[0], b)
	case syntax.OpConcat:
		for _, s := range re.Sub {
			sampleRE(g, s, b)
		}
	case syntax.OpAlternate:
		for _, s := range re.Sub {
			if maxLen(s) == 0 {
				return
			}
		}
		sampleRE(g, re.Sub[g.IntN(len(re.Sub))], b)
	case syntax.OpQuest, syntax.OpStar:
	case syntax.OpPlus:
		sampleRE(g, re.Sub[0], b)
	case syntax.OpRepeat:
		n := re.Min
		if re.Max > re.Min {
			n += g.IntN(min(re.Max-re.Min, 64) + 1)
		} else if re.Max < 0 {
			n += g.IntN(64)
		}
		for range n {
			sampleRE(g, re.Sub[0], b)
		}
	}
}
