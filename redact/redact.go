package redact

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"unsafe"
)

// Counts is the number of redactions per type.
type Counts map[string]int

// Add adds o's counts to c (c must not be nil unless o is empty).
func (c Counts) Add(o Counts) {
	for k, v := range o {
		c[k] += v
	}
}

// Total is the number of redactions of all types.
func (c Counts) Total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// Redactor finds and replaces secrets. It is immutable after New and safe for
// concurrent use.
type Redactor struct {
	rules []*rule
	ac    *automaton
	kws   []keyword
	lens  []int32
	// back: no match found from a keyword occurrence at p starts before
	// p-back; maxKw: the longest keyword; blockBack: how far before its
	// block the evaluation of a rule that runs per block reads.
	back, maxKw, blockBack int
	holdBack               int
	types                  []string
}

type keyword struct {
	text string // lower-cased
	refs []kwRef
}

type kwRef struct {
	rule   *rule
	exacts []string // case-sensitive spellings; nil: any case
}

// New returns a Redactor with the built-in rules and extra.
func New(extra []Rule) (*Redactor, error) {
	var rules []*rule
	for _, s := range builtinSpecs() {
		r, err := s.compile()
		if err != nil {
			return nil, fmt.Errorf("redact: built-in rule %s: %w", s.typ, err)
		}
		rules = append(rules, r)
	}
	gl, err := gitleaksRules()
	if err != nil {
		return nil, err
	}
	rules = append(rules, gl...)
	var errs []string
	for i, x := range extra {
		r, err := compileRule(x)
		if err != nil {
			errs = append(errs, fmt.Sprintf("extra rule %d: %v", i, err))
			continue
		}
		rules = append(rules, r)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return build(rules), nil
}

var defaultRedactor = sync.OnceValue(func() *Redactor {
	r, err := New(nil)
	if err != nil {
		panic(err)
	}
	return r
})

// Default returns the Redactor with the built-in rules only; it is built once.
func Default() *Redactor { return defaultRedactor() }

func build(rules []*rule) *Redactor {
	r := &Redactor{rules: rules}
	for _, ru := range rules {
		if id, ok := gitleaksFamily[ru.typ]; ok && ru.source == "" && ru.allow == nil {
			ru.allow = gitleaksAllowlists(id)
		}
	}
	index := map[string]int{}
	typeSet := map[string]bool{}
	for i, ru := range rules {
		ru.idx = i
		ru.setMode()
		typeSet[ru.typ] = true
		for _, k := range ru.keywords {
			lk := asciiLower(k)
			ki, ok := index[lk]
			if !ok {
				ki = len(r.kws)
				index[lk] = ki
				r.kws = append(r.kws, keyword{text: lk})
			}
			kw := &r.kws[ki]
			j := slices.IndexFunc(kw.refs, func(x kwRef) bool { return x.rule == ru })
			if j < 0 {
				kw.refs = append(kw.refs, kwRef{rule: ru})
				j = len(kw.refs) - 1
				if ru.cs {
					kw.refs[j].exacts = []string{}
				}
			}
			if ru.cs && kw.refs[j].exacts != nil && !slices.Contains(kw.refs[j].exacts, k) {
				kw.refs[j].exacts = append(kw.refs[j].exacts, k)
			}
			back := ru.before + 1
			reach := ru.after + ru.ext + 1
			r.back = max(r.back, back)
			r.maxKw = max(r.maxKw, len(lk))
			held := back + len(lk) + reach
			if ru.block {
				// Held until the block is complete.
				held = back + blockSize + ru.maxK + reach
				r.blockBack = max(r.blockBack, back)
			}
			r.holdBack = max(r.holdBack, held)
		}
	}
	// A redacted range lies inside one window; the Writer writes past it
	// once a keyword starting maxKw-1 bytes before the end could no longer
	// reach back into it.
	r.holdBack += r.maxKw + r.back
	texts := make([]string, len(r.kws))
	r.lens = make([]int32, len(r.kws))
	for i, k := range r.kws {
		texts[i] = k.text
		r.lens[i] = int32(len(k.text))
	}
	r.ac = newAutomaton(texts)
	for t := range typeSet {
		r.types = append(r.types, t)
	}
	sort.Strings(r.types)
	return r
}

// Types returns every type name the Redactor can report, sorted.
func (r *Redactor) Types() []string { return slices.Clone(r.types) }

// HoldBack is the most text a Writer keeps back while it waits to see
// whether a secret continues (not counting overlapping secrets chained
// together, see Writer).
func (r *Redactor) HoldBack() int { return r.holdBack }

// String returns s with every secret replaced by [REDACTED:<type>], and the
// counts; s itself and nil counts when there is nothing to redact.
func (r *Redactor) String(s string) (string, Counts) {
	b := unsafe.Slice(unsafe.StringData(s), len(s)) // read only
	out, c := r.redact(b)
	if c == nil {
		return s, nil
	}
	return string(out), c
}

// Bytes is String for a byte slice. It returns b itself (not a copy) and nil
// counts when there is nothing to redact.
func (r *Redactor) Bytes(b []byte) ([]byte, Counts) {
	out, c := r.redact(b)
	if c == nil {
		return b, nil
	}
	return out, c
}

func (r *Redactor) redact(b []byte) ([]byte, Counts) {
	ivs := r.find(b)
	if len(ivs) == 0 {
		return b, nil
	}
	c := Counts{}
	out := make([]byte, 0, len(b))
	pos := int64(0)
	for _, iv := range ivs {
		out = append(out, b[pos:iv.start]...)
		out = r.appendMarker(out, iv, c)
		pos = iv.end
	}
	out = append(out, b[pos:]...)
	return out, c
}

func (r *Redactor) appendMarker(out []byte, iv cand, c Counts) []byte {
	t := r.rules[iv.rule].typ
	c[t]++
	out = append(out, "[REDACTED:"...)
	out = append(out, t...)
	return append(out, ']')
}

// cand is a range to redact, in absolute offsets.
type cand struct {
	start, end int64
	prio       int
	rule       int
}

// merge sorts cands and unites overlapping ones; each union is named after
// its member with the lowest priority number (the earliest on a tie).
func merge(cs []cand) []cand {
	sort.Slice(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if a.start != b.start {
			return a.start < b.start
		}
		if a.end != b.end {
			return a.end > b.end
		}
		if a.prio != b.prio {
			return a.prio < b.prio
		}
		return a.rule < b.rule
	})
	out := cs[:0:0]
	for _, c := range cs {
		if n := len(out); n > 0 && c.start < out[n-1].end {
			last := &out[n-1]
			last.end = max(last.end, c.end)
			if c.prio < last.prio || (c.prio == last.prio && c.rule < last.rule) {
				last.prio, last.rule = c.prio, c.rule
			}
			continue
		}
		out = append(out, c)
	}
	return out
}

var redactedPrefix = []byte("[REDACTED")

func (r *Redactor) accept(win []byte, ws int64, m []int, ru *rule, out []cand) []cand {
	s, e := m[0], m[1]
	if ru.group > 0 {
		s, e = m[2*ru.group], m[2*ru.group+1]
	}
	if ru.check != nil {
		var ok bool
		if s, e, ok = ru.check(win, m); !ok {
			return out
		}
	}
	if s < 0 || e <= s {
		return out
	}
	v := win[s:e]
	if ru.minEntropy > 0 && entropy(v) < ru.minEntropy {
		return out
	}
	if bytes.HasPrefix(v, redactedPrefix) {
		return out
	}
	if ru.prio == prioProvider && ru.source == "" && placeholderToken(v) {
		return out
	}
	for i := range ru.allow {
		if ru.allow[i].allowed(v, v, nil) {
			return out
		}
	}
	return append(out, cand{start: ws + int64(s), end: ws + int64(e), prio: ru.prio, rule: ru.idx})
}

// compile turns a built-in spec into a rule.
func (s spec) compile() (*rule, error) {
	expr := s.re
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, err
	}
	ml := maxMatchLen(expr)
	kmin := MaxKeywordLen
	for _, k := range s.kw {
		kmin = min(kmin, len(k))
	}
	r := &rule{
		typ: s.typ, keywords: s.kw, cs: s.cs, re: re, group: s.group,
		minEntropy: s.minEntropy, prio: s.prio, pre: s.pre, check: s.check,
		anchored: s.anchored, ext: s.ext,
	}
	if r.prio == 0 {
		r.prio = prioProvider
	}
	span := ml - kmin
	if ml < 0 {
		span = -1
	}
	r.before, r.after = span, span
	if s.anchored {
		r.before = 0
		r.rest = expr
		r.are, err = regexp.Compile(`^(?:` + expr + `)`)
		if err != nil {
			return nil, err
		}
	}
	if s.before > 0 {
		r.before = s.before
	}
	if s.after > 0 {
		r.after = s.after
	}
	if r.before < 0 || r.after < 0 {
		return nil, fmt.Errorf("regex %q is unbounded: give before/after", expr)
	}
	return r, nil
}

// asciiLower lower-cases ASCII letters only, as the automaton folds them.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		b[i] = lower(c)
	}
	return string(b)
}
