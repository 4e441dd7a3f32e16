package redact

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode/utf8"
)

// Rule is an extra detector, e.g. from an exec profile:
//
//   - type: acme_api_key
//     keywords: [acme_]
//     regex: '\bacme_[0-9a-f]{32}\b'
//   - type: internal_password
//     keywords: [corp_pass]
//     regex: 'corp_pass=(\S{8,64})'
//     secret_group: 1
//     min_entropy: 3
//
// The regular expression (Go RE2 syntax) only runs near an occurrence of one
// of the keywords (ASCII case ignored unless CaseSensitive), and a match
// counts only if it contains that occurrence. Matches are confined to
// MaxRuleSpan bytes on either side of the keyword. The text redacted is the
// whole match, or only capture group SecretGroup when that is not 0; with
// MinEntropy set, a value whose Shannon entropy (bits per byte) is lower is
// left alone.
type Rule struct {
	Type          string   `yaml:"type" json:"type"`
	Keywords      []string `yaml:"keywords" json:"keywords"`
	Regex         string   `yaml:"regex" json:"regex"`
	SecretGroup   int      `yaml:"secret_group,omitempty" json:"secret_group,omitempty"`
	MinEntropy    float64  `yaml:"min_entropy,omitempty" json:"min_entropy,omitempty"`
	CaseSensitive bool     `yaml:"case_sensitive,omitempty" json:"case_sensitive,omitempty"`
}

// MaxRuleSpan bounds how far a match of an extra Rule may reach before the
// start and after the end of its keyword. It also bounds the Writer's
// hold-back for such rules.
const MaxRuleSpan = 1024

// MaxKeywordLen is the longest keyword accepted.
const MaxKeywordLen = 64

var typeRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// Validate reports what is wrong with the rule, or nil.
func (r Rule) Validate() error {
	_, err := compileRule(r)
	return err
}

func compileRule(r Rule) (*rule, error) {
	var errs []error
	name := r.Type
	if name == "" {
		name = "(no type)"
	}
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("redact: rule %s: "+format, append([]any{name}, args...)...))
	}
	if r.Type == "" {
		fail("type is missing")
	} else if !typeRE.MatchString(r.Type) {
		fail("type %q must be snake_case: a lower-case letter, then lower-case letters, digits or _ (at most 64)", r.Type)
	}
	if len(r.Keywords) == 0 {
		fail("keywords are missing: at least one literal that every match contains is needed")
	}
	for i, k := range r.Keywords {
		switch {
		case strings.TrimSpace(k) == "":
			fail("keyword %d is empty", i)
		case len(k) > MaxKeywordLen:
			fail("keyword %q is longer than %d bytes", k, MaxKeywordLen)
		case !utf8.ValidString(k):
			fail("keyword %d is not valid UTF-8", i)
		}
	}
	if r.MinEntropy < 0 || r.MinEntropy > 8 {
		fail("min_entropy %v is out of range [0, 8] (bits per byte)", r.MinEntropy)
	}
	if r.SecretGroup < 0 {
		fail("secret_group %d is negative", r.SecretGroup)
	}
	var re *regexp.Regexp
	if strings.TrimSpace(r.Regex) == "" {
		fail("regex is missing")
	} else {
		var err error
		re, err = regexp.Compile(r.Regex)
		if err != nil {
			fail("bad regex: %v", err)
		} else {
			if r.SecretGroup > re.NumSubexp() {
				fail("secret_group %d but the regex has only %d capture groups", r.SecretGroup, re.NumSubexp())
			}
			if re.MatchString("") {
				fail("regex %q matches the empty string", r.Regex)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	span := maxMatchLen(r.Regex)
	if span < 0 || span > MaxRuleSpan {
		span = MaxRuleSpan
	}
	return &rule{
		typ:        r.Type,
		keywords:   r.Keywords,
		cs:         r.CaseSensitive,
		re:         re,
		group:      r.SecretGroup,
		minEntropy: r.MinEntropy,
		before:     span,
		after:      span,
		prio:       prioExtra,
	}, nil
}

// Priorities: when matches of several rules overlap, the union is redacted
// once and named after the rule with the lowest number.
const (
	prioKey      = 10 // private key blocks
	prioProvider = 20 // provider token formats
	prioGitleaks = 25 // gitleaks' provider rules
	prioExtra    = 30 // rules given to New
	prioJWT      = 40
	prioURL      = 50
	prioHeader   = 60
	prioGeneric  = 70
)

// rule is a compiled detector.
type rule struct {
	typ      string
	keywords []string
	cs       bool // keywords match case-sensitively
	re       *regexp.Regexp
	// anchored rules: every match starts with the keyword, so only the
	// anchored form are runs, at the keyword.
	anchored bool
	are      *regexp.Regexp
	group    int
	// minEntropy applies to the redacted range.
	minEntropy float64
	// before: how far before the keyword's start a match may begin; after:
	// how far after the keyword's end the regex match may end; ext: how
	// much further check may extend the redacted range (key blocks).
	before, after, ext int
	prio               int
	// pre is a cheap test on the window (kw at win[ks:ke]) before any
	// regex runs; it must reject only hits that the regex and check would
	// reject too.
	pre func(win []byte, ks, ke int) bool
	// check returns the range to redact for match m (indices into win),
	// or ok=false to drop the match.
	check func(win []byte, m []int) (start, end int, ok bool)
	idx   int
	// near lists keywords (lower case) that a match need not contain: a
	// match anywhere in such a keyword's window counts.
	near map[string]bool
	// allow: gitleaks allowlists of the same family (sandboxd's own
	// rules), applied to the redacted text.
	allow []allowlist
	// source names where a rule that is not sandboxd's own comes from
	// ("gitleaks:<id>").
	source string
	// glue: the distinctive prefixes after a \b of a gitleaks rule, that
	// match glued to a word (glue.go); bound: its other prefixes after a
	// \b, which keep it.
	glue, bound []lit
	// rest is the anchored expression (are without ^); ure, rest
	// compiled, runs a block of an anchored rule (eval.go). block: the
	// rule runs per block of text; maxK: its longest keyword; need:
	// literals (lower case) that its window must hold.
	rest   string
	ure    *regexp.Regexp
	block  bool
	maxK   int
	need   []string
	sparse int // up to this many tasks in a block run one by one
	maxLen int // of an anchored rule's matches; -1: unbounded
}

// maxMatchLen returns an upper bound of the length in bytes of any match of
// expr, or -1 when it is unbounded (or expr does not parse).
func maxMatchLen(expr string) int {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return -1
	}
	return maxLen(re)
}

// unbounded is maxLen's answer for an expression whose matches have no
// bound.
const unbounded = -1

// maxLen is maxMatchLen of a parsed expression.
func maxLen(re *syntax.Regexp) int {
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText,
		syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary, syntax.OpNoMatch:
		return 0
	case syntax.OpLiteral:
		n := 0
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				n += utf8.UTFMax // a fold may be longer (k -> U+212A)
			} else {
				n += utf8.RuneLen(r)
			}
		}
		return n
	case syntax.OpCharClass:
		hi := rune(0)
		for i := 1; i < len(re.Rune); i += 2 {
			hi = max(hi, re.Rune[i])
		}
		if hi > utf8.MaxRune {
			hi = utf8.MaxRune
		}
		return max(utf8.RuneLen(hi), 1)
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		return utf8.UTFMax
	case syntax.OpCapture:
		return maxLen(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus:
		return unbounded
	case syntax.OpQuest:
		return maxLen(re.Sub[0])
	case syntax.OpRepeat:
		if re.Max < 0 {
			return unbounded
		}
		n := maxLen(re.Sub[0])
		if n < 0 {
			return unbounded
		}
		return n * re.Max
	case syntax.OpConcat:
		return maxLenOf(re.Sub, func(n, m int) int { return n + m })
	case syntax.OpAlternate:
		return maxLenOf(re.Sub, func(n, m int) int { return max(n, m) })
	}
	return unbounded
}

// maxLenOf folds the maxLen of each of subs with join (a sum for a
// concatenation, the largest for an alternation); unbounded when one is.
func maxLenOf(subs []*syntax.Regexp, join func(n, m int) int) int {
	n := 0
	for _, s := range subs {
		m := maxLen(s)
		if m < 0 {
			return unbounded
		}
		n = join(n, m)
	}
	return n
}
