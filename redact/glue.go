package redact

import (
	"regexp/syntax"
	"slices"
	"strings"
)

// Glued tokens. A token is often printed glued to what comes before it: a
// letter, a digit, "_", or the "%3D" of a URL-encoded query string
// (print("%3D" + token)). A word boundary before the token would let that
// prefix hide it, so a rule whose expression puts a word boundary (\b)
// before a distinctive literal prefix (sk_live_, AIza, hvs., glpat-, ...)
// matches the token glued as well. Generic rules, and prefixes that turn up
// inside ordinary words or hashes (s., ey, LTAI, EAAA, 4b1d), keep the
// boundary.
//
// A glued match has a second test, against the words and identifiers that
// happen to end in a prefix (task_test_environment, GSSAPI-VIRHEKAP...):
// the part after the prefix must have what a random token of its alphabet
// has (tokenLike), and the prefix must start the secret (a glued name, like
// the data: of metadata:, is no token).

// lit is a literal that starts matches.
type lit struct {
	s    string
	fold bool // matched in any case; s is lower case
}

// distinctive: a literal prefix that marks a token by itself, so that text
// glued before it cannot make it part of another word. It has at least 3
// bytes, is not made of hex digits only (those turn up inside hashes), and
// has 6 or more bytes, a byte other than a letter or a digit (sk_live_,
// hvs., A3-), letters and digits (A3T), both cases in a case-sensitive
// literal (AIza, AKCp, cmVmd), or 4 letters without "AA" (LTAI, EZAK: "AA"
// is how zero bytes look in base64, EAAA and EAAC turn up there).
func distinctive(l lit) bool {
	p := l.s
	if len(p) < 3 {
		return false
	}
	hexOnly := true
	var letter, digit, upper, lowerc, other bool
	for i := 0; i < len(p); i++ {
		b := p[i]
		switch {
		case '0' <= b && b <= '9':
			digit = true
		case 'a' <= b && b <= 'z':
			letter, lowerc = true, true
			hexOnly = hexOnly && b <= 'f'
		case 'A' <= b && b <= 'Z':
			letter, upper = true, true
			hexOnly = hexOnly && b <= 'F'
		default:
			other, hexOnly = true, false
		}
	}
	switch {
	case hexOnly:
		return false
	case len(p) >= 6 || other || letter && digit:
		return true
	case !l.fold && upper && lowerc:
		return true
	}
	return len(p) >= 4 && !strings.Contains(strings.ToUpper(p), "AA")
}

// glued: the match that starts at win[i] continues a word.
func glued(win []byte, i int) bool {
	return i > 0 && i < len(win) && isWord(win[i-1]) && isWord(win[i])
}

// tokenLike: the random part of a glued token is not a word or an
// identifier that happens to follow the prefix (task_test_environment,
// GSSAPI-VIRHEKAPSELOINTIMERKKIJONO). a is the token's alphabet: when it
// has both cases (base62 and the like) a real token has both; when it has
// digits and one case, or cases folded, a real token has a digit (or both
// cases).
func tokenLike(body []byte, a alphabet) bool {
	var up, lo, dig bool
	for _, b := range body {
		switch {
		case '0' <= b && b <= '9':
			dig = true
		case 'A' <= b && b <= 'Z':
			up = true
		case 'a' <= b && b <= 'z':
			lo = true
		}
	}
	switch {
	case a.mixed:
		return up && lo
	case a.digits && a.letters:
		return dig || up && lo
	}
	return true
}

// gluePrefix returns the longest of lits that starts win[i:] (ASCII case
// ignored: the regex has checked the case already).
func gluePrefix(win []byte, i int, lits []lit) (lit, bool) {
	var best lit
	found := false
	for _, l := range lits {
		if len(l.s) > len(best.s) && i+len(l.s) <= len(win) && equalFold(win[i:i+len(l.s)], l.s) {
			best, found = l, true
		}
	}
	return best, found
}

func equalFold(b []byte, s string) bool {
	for i := range b {
		if lower(b[i]) != lower(s[i]) {
			return false
		}
	}
	return true
}

// alphabet is what the character classes of a token's expression hold.
type alphabet struct {
	mixed   bool // both cases, matched case-sensitively ([0-9A-Za-z])
	letters bool
	digits  bool
}

func alphabetOf(re *syntax.Regexp) alphabet {
	var a alphabet
	var walk func(re *syntax.Regexp)
	walk = func(re *syntax.Regexp) {
		if re.Op == syntax.OpCharClass {
			var lo, up bool
			for i := 0; i+1 < len(re.Rune); i += 2 {
				x, y := re.Rune[i], re.Rune[i+1]
				lo = lo || x <= 'z' && y >= 'a'
				up = up || x <= 'Z' && y >= 'A'
				a.digits = a.digits || x <= '9' && y >= '0'
			}
			a.letters = a.letters || lo || up
			a.mixed = a.mixed || lo && up && re.Flags&syntax.FoldCase == 0
		}
		for _, s := range re.Sub {
			walk(s)
		}
	}
	walk(re)
	return a
}

// prefixLits: the literal prefixes of re's matches, case kept; exact when
// re matches exactly those strings; ok false when there are none.
func prefixLits(re *syntax.Regexp) (set []lit, exact, ok bool) {
	switch re.Op {
	case syntax.OpLiteral:
		l := lit{s: string(re.Rune), fold: re.Flags&syntax.FoldCase != 0}
		if l.fold {
			l.s = strings.ToLower(l.s)
		}
		return []lit{l}, true, true
	case syntax.OpCapture:
		return prefixLits(re.Sub[0])
	case syntax.OpConcat:
		acc := []lit{{}}
		for _, s := range re.Sub {
			switch s.Op {
			case syntax.OpBeginText, syntax.OpBeginLine, syntax.OpEmptyMatch:
				continue
			}
			p, ex, ok := prefixLits(s)
			if !ok || len(acc)*len(p) > 64 {
				return acc, false, true
			}
			var next []lit
			for _, a := range acc {
				for _, b := range p {
					c := lit{s: a.s + b.s, fold: a.fold || b.fold}
					if !slices.Contains(next, c) {
						next = append(next, c)
					}
				}
			}
			acc = next
			if !ex {
				return acc, false, true
			}
		}
		return acc, true, true
	case syntax.OpAlternate:
		var out []lit
		exact = true
		for _, s := range re.Sub {
			p, ex, ok := prefixLits(s)
			if !ok || len(p) == 0 || slices.ContainsFunc(p, func(l lit) bool { return l.s == "" }) {
				return nil, false, false
			}
			out = append(out, p...)
			exact = exact && ex
		}
		return out, exact, true
	case syntax.OpQuest:
		// An optional part, like [_-]? in linked[_-]?in: with and
		// without it.
		p, ex, ok := prefixLits(re.Sub[0])
		if !ok || len(p) > 8 {
			return nil, false, false
		}
		return append(p, lit{}), ex, true
	case syntax.OpPlus:
		p, _, ok := prefixLits(re.Sub[0])
		return p, false, ok
	case syntax.OpRepeat:
		if re.Min > 0 {
			p, _, ok := prefixLits(re.Sub[0])
			return p, false, ok
		}
	case syntax.OpCharClass:
		// A small class, like [Aa]: each character.
		var out []lit
		for i := 0; i+1 < len(re.Rune); i += 2 {
			for c := re.Rune[i]; c <= re.Rune[i+1]; c++ {
				if len(out) >= 8 {
					return nil, false, false
				}
				if l := (lit{s: string(c)}); !slices.Contains(out, l) {
					out = append(out, l)
				}
			}
		}
		return out, true, len(out) > 0
	}
	return nil, false, false
}

// allDistinctive: re has literal prefixes, each distinctive.
func allDistinctive(re *syntax.Regexp) ([]lit, bool) {
	p, _, ok := prefixLits(re)
	if !ok || len(p) == 0 {
		return nil, false
	}
	for _, l := range p {
		if !distinctive(l) {
			return nil, false
		}
	}
	return p, true
}

// unglue rewrites re so that no \b at the start of a match stands before
// a token with a distinctive literal prefix: \b(A|B) becomes (A|\bB) when
// A's prefixes are distinctive and B's are not. Only a \b before a capture
// group (the token: \b(sgp_...)) is dropped, or any when re has no groups;
// a \b before a name (\bdata:) stays. It appends the prefixes set free to
// freed; the groups are kept as they are.
func unglue(re *syntax.Regexp, freed *[]lit) *syntax.Regexp {
	groups := hasCapture(re)
	var walk func(x *syntax.Regexp) *syntax.Regexp
	walk = func(x *syntax.Regexp) *syntax.Regexp {
		switch x.Op {
		case syntax.OpCapture:
			c := *x
			c.Sub = []*syntax.Regexp{walk(x.Sub[0])}
			return &c
		case syntax.OpAlternate:
			c := *x
			c.Sub = nil
			for _, b := range x.Sub {
				c.Sub = append(c.Sub, walk(b))
			}
			return &c
		case syntax.OpConcat:
			if len(x.Sub) == 0 {
				return x
			}
			c := *x
			c.Sub = slices.Clone(x.Sub)
			if x.Sub[0].Op == syntax.OpWordBoundary && len(x.Sub) > 1 && (!groups || x.Sub[1].Op == syntax.OpCapture) {
				if next, ok := pushBoundary(x.Sub[1], freed); ok {
					c.Sub = c.Sub[1:]
					c.Sub[0] = next
				}
				return &c
			}
			c.Sub[0] = walk(x.Sub[0])
			return &c
		}
		return x
	}
	return walk(re)
}

// pushBoundary returns an expression for \b followed by x in which the
// branches of x that start with a distinctive literal have no \b; ok is
// false when there are none (x is then unchanged).
func pushBoundary(x *syntax.Regexp, freed *[]lit) (*syntax.Regexp, bool) {
	if p, ok := allDistinctive(x); ok {
		*freed = append(*freed, p...)
		return x, true
	}
	switch x.Op {
	case syntax.OpCapture:
		if sub, ok := pushBoundary(x.Sub[0], freed); ok {
			c := *x
			c.Sub = []*syntax.Regexp{sub}
			return &c, true
		}
	case syntax.OpAlternate:
		var subs []*syntax.Regexp
		changed := false
		for _, b := range x.Sub {
			nb, ok := pushBoundary(b, freed)
			if !ok {
				nb = &syntax.Regexp{Op: syntax.OpConcat, Flags: b.Flags,
					Sub: []*syntax.Regexp{{Op: syntax.OpWordBoundary, Flags: b.Flags}, b}}
			}
			changed = changed || ok
			subs = append(subs, nb)
		}
		if changed {
			c := *x
			c.Sub = subs
			return &c, true
		}
	case syntax.OpConcat:
		if len(x.Sub) == 0 {
			break
		}
		if x.Sub[0].Op == syntax.OpWordBoundary { // \b\b y = \b y
			c := *x
			c.Sub = x.Sub[1:]
			if len(c.Sub) == 1 {
				return pushBoundary(c.Sub[0], freed)
			}
			return pushBoundary(&c, freed)
		}
		if first, ok := pushBoundary(x.Sub[0], freed); ok {
			c := *x
			c.Sub = slices.Clone(x.Sub)
			c.Sub[0] = first
			return &c, true
		}
	}
	return x, false
}
