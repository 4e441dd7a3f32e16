package redact

import (
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/viper"
	glconfig "github.com/zricethezav/gitleaks/v8/config"
)

// The provider rules of gitleaks' default configuration (MIT licence), read
// as data from the configuration its Go module embeds: a version bump of
// github.com/zricethezav/gitleaks/v8 in go.mod brings its new rules. Each
// becomes a rule of this package's engine, named after its id (snake case),
// with its keywords, expression, secret group, entropy threshold and
// allowlists (regexes and stop words; path and commit allowlists do not
// apply to a stream). Where a rule of sandboxd's own covers the same
// secret, the two are united and the secret is named after sandboxd's.

// gitleaksReplaced lists the gitleaks rules that sandboxd's own rules
// replace, with the rule that does.
var gitleaksReplaced = map[string]string{
	// The assignment rule reads more syntaxes, and filters by name.
	"generic-api-key": "password, generic_secret",
	// Whole blocks (also JSON-escaped and base64-encoded), and no block
	// without a body.
	"private-key": "private_key, openssh_private_key, pgp_private_key",
}

// gitleaksPrio: gitleaks rules of any issuer's credentials, named after
// sandboxd's rules of the same kind when both match.
var gitleaksPrio = map[string]int{
	"jwt":              prioJWT + 1,
	"jwt-base64":       prioJWT + 1,
	"curl-auth-header": prioHeader + 1,
	"curl-auth-user":   prioHeader + 1,
}

// gitleaksFamily maps sandboxd's own provider types to the gitleaks rule
// of the same tokens, whose allowlists (known public values) apply to them
// too.
var gitleaksFamily = map[string]string{
	"google_api_key":          "gcp-api-key",
	"github_pat":              "github-pat",
	"github_oauth_token":      "github-oauth",
	"github_app_token":        "github-app-token",
	"github_refresh_token":    "github-refresh-token",
	"github_fine_grained_pat": "github-fine-grained-pat",
	"gitlab_pat":              "gitlab-pat",
	"huggingface_token":       "huggingface-access-token",
	"vault_token":             "vault-service-token",
	"aws_access_key_id":       "aws-access-token",
}

// gitleaksAllowlists returns the allowlists of gitleaks rule id and the
// global ones.
func gitleaksAllowlists(id string) []allowlist {
	cfg, err := gitleaksRuleset()
	if err != nil {
		return nil
	}
	gr, ok := cfg.Rules[id]
	if !ok {
		return nil
	}
	return append(convertAllowlists(cfg.Allowlists, id), convertAllowlists(gr.Allowlists, id)...)
}

// gitleaksRuleset is the parsed default configuration.
var gitleaksRuleset = sync.OnceValues(func() (glconfig.Config, error) {
	v := viper.New()
	v.SetConfigType("toml")
	if err := v.ReadConfig(strings.NewReader(glconfig.DefaultConfig)); err != nil {
		return glconfig.Config{}, err
	}
	var vc glconfig.ViperConfig
	if err := v.Unmarshal(&vc); err != nil {
		return glconfig.Config{}, err
	}
	return vc.Translate()
})

// gitleaksType turns a gitleaks rule id into a type name.
func gitleaksType(id string) string {
	t := strings.ToLower(strings.NewReplacer("-", "_", ".", "_").Replace(id))
	if t != "" && '0' <= t[0] && t[0] <= '9' {
		t = strings.NewReplacer("1", "one", "2", "two", "3", "three").Replace(t[:1]) + t[1:]
	}
	return t
}

// gitleaksRules compiles the gitleaks rules (all but the replaced ones).
func gitleaksRules() ([]*rule, error) {
	cfg, err := gitleaksRuleset()
	if err != nil {
		return nil, fmt.Errorf("redact: gitleaks configuration: %w", err)
	}
	var out []*rule
	for _, id := range cfg.OrderedRules {
		gr := cfg.Rules[id]
		if _, ok := gitleaksReplaced[id]; ok || gr.Regex == nil || gr.SkipReport {
			continue
		}
		r, err := gitleaksRule(gr, cfg.Allowlists)
		if err != nil {
			return nil, fmt.Errorf("redact: gitleaks rule %s: %w", id, err)
		}
		if p, ok := gitleaksPrio[id]; ok {
			r.prio = p
		}
		out = append(out, r)
	}
	return out, nil
}

// allowlist is a gitleaks allowlist that can apply to text alone.
type allowlist struct {
	target    string // "", "match" or "line"
	and       bool
	regexes   []*regexp.Regexp
	stopwords []string
}

func convertAllowlists(as []*glconfig.Allowlist, rule string) []allowlist {
	var out []allowlist
	for _, a := range as {
		if a == nil {
			continue
		}
		and := a.MatchCondition == glconfig.AllowlistMatchAnd
		if and && (len(a.Paths) > 0 || len(a.Commits) > 0) {
			continue // needs a path or a commit: never true for a stream
		}
		if len(a.Regexes) == 0 && len(a.StopWords) == 0 {
			continue
		}
		l := allowlist{target: a.RegexTarget, and: and, stopwords: a.StopWords}
		for _, re := range a.Regexes {
			l.regexes = append(l.regexes, regexp.MustCompile(re.String()))
		}
		out = append(out, l)
	}
	return out
}

// allowed: gitleaks' allowlist semantics for a finding.
func (a *allowlist) allowed(secret, match, line []byte) bool {
	return a.allowedAt(secret, match, line, -1)
}

// allowedAt is allowed where a regex on the match must match starting
// before offset before (the name of name = value, not the value), unless
// before is negative.
func (a *allowlist) allowedAt(secret, match, line []byte, before int) bool {
	target := secret
	switch a.target {
	case "match":
		target = match
	case "line":
		target = line
	}
	if a.target == "" && len(secret) == 0 && len(a.stopwords) > 0 && len(a.regexes) == 0 {
		return false
	}
	re := false
	if len(target) > 0 {
		for _, x := range a.regexes {
			if before < 0 || a.target != "match" {
				re = x.Match(target)
			} else {
				for _, m := range x.FindAllIndex(target, -1) {
					re = re || m[0] < before
				}
			}
			if re {
				break
			}
		}
	}
	sw := false
	if len(a.stopwords) > 0 && len(secret) > 0 {
		l := strings.ToLower(string(secret))
		for _, w := range a.stopwords {
			if strings.Contains(l, w) {
				sw = true
				break
			}
		}
	}
	if a.and {
		return (len(a.regexes) == 0 || re) && (len(a.stopwords) == 0 || sw)
	}
	return re || sw
}

func gitleaksRule(gr glconfig.Rule, global []*glconfig.Allowlist) (*rule, error) {
	expr := gr.Regex.String()
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, err
	}
	als := append(convertAllowlists(global, gr.RuleID), convertAllowlists(gr.Allowlists, gr.RuleID)...)
	r := &rule{
		typ:      gitleaksType(gr.RuleID),
		keywords: slices.Clone(gr.Keywords),
		re:       re,
		prio:     prioGitleaks,
		source:   "gitleaks:" + gr.RuleID,
	}
	if len(r.keywords) == 0 {
		return nil, fmt.Errorf("no keywords")
	}
	// Glued tokens (glue.go): an anchored rule drops its leading \b and
	// checks it here, except before a distinctive prefix (glue); a window
	// rule loses each \b that stands before one (freed).
	var glue, bound []lit
	var abc alphabet
	if tail, branches, ok := anchorable(expr, gr.Keywords); ok {
		rest := tail.String()
		are, err := regexp.Compile(`^(?:` + rest + `)`)
		if err != nil {
			return nil, err
		}
		if are.NumSubexp() != re.NumSubexp() {
			return nil, fmt.Errorf("anchored form has %d groups, want %d", are.NumSubexp(), re.NumSubexp())
		}
		r.anchored, r.are, r.rest = true, are, rest
		for _, br := range branches {
			if !br.boundary {
				continue
			}
			lits, _, _ := prefixLits(br.tail)
			// Only where the token itself follows the \b: the secret is
			// the whole match, or a group that starts the branch
			// (\b(sk_live_...)), not \bcurl ... -H "Authorization: ..."
			t := br.tail
			whole := gr.SecretGroup == 0 && (!hasCapture(t) || slices.ContainsFunc(re.SubexpNames(), func(n string) bool { return n != "" }))
			token := whole || t.Op == syntax.OpCapture || t.Op == syntax.OpConcat && t.Sub[0].Op == syntax.OpCapture
			for _, l := range lits {
				if token && distinctive(l) {
					glue = append(glue, l)
				} else {
					bound = append(bound, l)
				}
			}
		}
		r.glue, r.bound = glue, bound
		abc = alphabetOf(tail)
		r.before = 0
		r.after = maxMatchLen(rest)
		if r.after < 0 {
			r.after = longSpan
		}
	} else {
		if parsed, err := syntax.Parse(expr, syntax.Perl); err == nil {
			var freed []lit
			if un := unglue(parsed, &freed); len(freed) > 0 {
				ure, err := regexp.Compile(un.String())
				if err != nil || ure.NumSubexp() != re.NumSubexp() {
					return nil, fmt.Errorf("unglued form %s: %v", un, err)
				}
				expr, re, r.re = un.String(), ure, ure
				glue, r.glue = freed, freed
				abc = alphabetOf(un)
			}
		}
		r.before, r.after = maxMatchLen(expr), maxMatchLen(expr)
		if r.before < 0 {
			// Unbounded: a match that starts too far back is missed, not
			// cut (a window-mode match may not touch a cut window edge).
			r.before, r.after = 1024, longSpan
		}
		r.need = requiredLiterals(expr)
		// A keyword that the expression does not spell (gitleaks only
		// wants it in the same file): a match near it counts.
		src := strings.ToLower(expr)
		for _, k := range r.keywords {
			if !strings.Contains(src, strings.ToLower(k)) {
				if r.near == nil {
					r.near = map[string]bool{}
				}
				r.near[strings.ToLower(k)] = true
			}
		}
		if r.near != nil {
			r.before += nearGap
			r.after += nearGap
		}
	}
	named := slices.ContainsFunc(re.SubexpNames(), func(n string) bool { return n != "" })
	group, minEntropy := gr.SecretGroup, gr.Entropy
	r.check = func(win []byte, m []int) (int, int, bool) {
		// A glued match: past a distinctive prefix, the rest must look
		// random; another prefix keeps gitleaks' \b.
		bodyFrom := -1
		if glued(win, m[0]) {
			lg, okg := gluePrefix(win, m[0], glue)
			lb, okb := gluePrefix(win, m[0], bound)
			switch {
			case okb && (!okg || len(lb.s) > len(lg.s)):
				return 0, 0, false
			case okg:
				bodyFrom = m[0] + len(lg.s)
			}
		}
		ms, me := m[0], m[1]
		for me > ms && win[me-1] == '\n' {
			me--
		}
		for ms < me && win[ms] == '\n' {
			ms++
		}
		s, e := ms, me
		// Like gitleaks, read the groups of the match on its own (it
		// may end differently there: at the end of the text).
		if g := re.FindSubmatchIndex(win[ms:me]); g != nil {
			if group > 0 && 2*group+1 < len(g) && g[2*group] >= 0 {
				s, e = ms+g[2*group], ms+g[2*group+1]
			} else if group == 0 && !named {
				for k := 1; 2*k+1 < len(g); k++ {
					if g[2*k] >= 0 && g[2*k+1] > g[2*k] {
						// A short first group is a part of the token's
						// shape (([a-z0-9]{4}-){3}), not the token: the
						// whole match is.
						if g[2*k+1]-g[2*k] >= 8 {
							s, e = ms+g[2*k], ms+g[2*k+1]
						}
						break
					}
				}
			}
		} else if group > 0 && 2*group+1 < len(m) {
			s, e = m[2*group], m[2*group+1]
		}
		if s < 0 || e <= s {
			return 0, 0, false
		}
		// The prefix must start the secret (a glued name, like the data:
		// of metadata:, is no token), and the rest look random.
		if bodyFrom >= 0 && (s != m[0] || !tokenLike(win[min(bodyFrom, e):e], abc)) {
			return 0, 0, false
		}
		secret := win[s:e]
		if minEntropy > 0 && runeEntropy(secret) <= minEntropy {
			return 0, 0, false
		}
		if len(als) > 0 {
			ls, le := ms, me
			for ls > 0 && win[ls-1] != '\n' {
				ls--
			}
			for le < len(win) && win[le] != '\n' {
				le++
			}
			for i := range als {
				if als[i].allowed(secret, win[ms:me], win[ls:le]) {
					return 0, 0, false
				}
			}
		}
		return s, e, true
	}
	return r, nil
}

func isWord(b byte) bool {
	return 'a' <= b|0x20 && b|0x20 <= 'z' || '0' <= b && b <= '9' || b == '_'
}

// anchorBranch is a branch of an anchorable expression: its tail from the
// keyword on, and whether a \b before it was dropped.
type anchorBranch struct {
	tail     *syntax.Regexp
	boundary bool
}

// anchorable reports whether every match of expr, once a leading \b and a
// leading optional run (gitleaks' `[\w.-]{0,50}?` before an identifier)
// are dropped, starts with one of keywords (ASCII case ignored); rest is
// the expression without them. An alternation at the top is taken branch
// by branch (A|B: each branch must be anchorable).
func anchorable(expr string, keywords []string) (rest *syntax.Regexp, branches []anchorBranch, ok bool) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, nil, false
	}
	alts := []*syntax.Regexp{re}
	if re.Op == syntax.OpAlternate {
		alts = re.Sub
	}
	var tails []*syntax.Regexp
	for _, a := range alts {
		b, ok := anchorableBranch(a, keywords)
		if !ok {
			return nil, nil, false
		}
		branches = append(branches, b)
		tails = append(tails, b.tail)
	}
	if len(tails) == 1 {
		return tails[0], branches, true
	}
	return &syntax.Regexp{Op: syntax.OpAlternate, Flags: re.Flags, Sub: tails}, branches, true
}

func anchorableBranch(re *syntax.Regexp, keywords []string) (anchorBranch, bool) {
	var b anchorBranch
	subs := []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		subs = re.Sub
	}
	i := 0
	for i < len(subs) {
		s := subs[i]
		switch {
		case s.Op == syntax.OpWordBoundary:
			b.boundary = true
		case (s.Op == syntax.OpRepeat && s.Min == 0 || s.Op == syntax.OpStar || s.Op == syntax.OpQuest) && !hasCapture(s):
		default:
			goto done
		}
		i++
	}
done:
	if i >= len(subs) {
		return b, false
	}
	b.tail = &syntax.Regexp{Op: syntax.OpConcat, Sub: subs[i:]}
	if len(subs[i:]) == 1 {
		b.tail = subs[i]
	}
	pre, ok := literalPrefixes(b.tail)
	if !ok || len(pre) == 0 {
		return b, false
	}
	for _, p := range pre {
		if !slices.ContainsFunc(keywords, func(k string) bool { return strings.HasPrefix(p, strings.ToLower(k)) }) {
			return b, false
		}
	}
	return b, true
}

func hasCapture(re *syntax.Regexp) bool {
	if re.Op == syntax.OpCapture {
		return true
	}
	return slices.ContainsFunc(re.Sub, hasCapture)
}

// literalPrefixes returns, lower-cased, literal strings one of which starts
// every match of re; ok is false when there are none.
func literalPrefixes(re *syntax.Regexp) ([]string, bool) {
	p, _, ok := prefixLits(re)
	var out []string
	for _, l := range p {
		if s := strings.ToLower(l.s); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, ok && len(out) > 0 && !slices.Contains(out, "")
}

// runeEntropy is gitleaks' Shannon entropy: counts per rune, divided by
// the length in bytes.
func runeEntropy(v []byte) float64 {
	if len(v) == 0 {
		return 0
	}
	for _, b := range v {
		if b >= 0x80 {
			return runeEntropySlow(string(v))
		}
	}
	return entropy(v)
}

func runeEntropySlow(s string) float64 {
	n := map[rune]int{}
	for _, r := range s {
		n[r]++
	}
	h, l := 0.0, float64(len(s))
	for _, c := range n {
		p := float64(c) / l
		h -= p * math.Log2(p)
	}
	return h
}

// nearGap is how far from a keyword that the expression does not spell a
// match may be.
const nearGap = 256

// requiredLiterals returns literal strings (lower case) that every match of
// expr contains.
func requiredLiterals(expr string) []string {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil
	}
	return required(re)
}

func required(re *syntax.Regexp) []string {
	switch re.Op {
	case syntax.OpLiteral:
		if len(re.Rune) >= 3 {
			return []string{strings.ToLower(string(re.Rune))}
		}
	case syntax.OpCapture, syntax.OpPlus:
		return required(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min > 0 {
			return required(re.Sub[0])
		}
	case syntax.OpConcat:
		var out []string
		for _, s := range re.Sub {
			out = append(out, required(s)...)
		}
		return out
	case syntax.OpAlternate:
		out := required(re.Sub[0])
		for _, s := range re.Sub[1:] {
			r := required(s)
			out = slices.DeleteFunc(out, func(l string) bool { return !slices.Contains(r, l) })
		}
		return out
	}
	return nil
}

// containsFold: s (lower case ASCII) occurs in b, ASCII case ignored.
func containsFold(b []byte, s string) bool {
	if len(s) == 0 {
		return true
	}
	c0, C0 := s[0], s[0]
	if 'a' <= c0 && c0 <= 'z' {
		C0 = c0 - 'a' + 'A'
	}
	for i := 0; i+len(s) <= len(b); i++ {
		if b[i] != c0 && b[i] != C0 {
			continue
		}
		j := 1
		for j < len(s) && lower(b[i+j]) == s[j] {
			j++
		}
		if j == len(s) {
			return true
		}
	}
	return false
}
