package safetext

import (
	"strings"

	"github.com/andybalholm/cascadia"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// A sheet holds the hiding rules taken from a page's style sheets (its
// <style> elements and data: URL sheets), and the built-in classes that
// sites use for screen-reader-only text. It is an over-approximation of
// the cascade: a rule that hides anything is applied to every element its
// selector matches (by cascadia, ancestors and siblings included; where
// the selector cannot be matched exactly, to every element its key
// compound could match); overrides and specificity are ignored, so at
// worst visible text is dropped, hidden text never kept because of them.
//
// Colours are the exception: whether text has the colour of its
// background depends on which declaration wins, so the sheet also holds
// every rule that sets a text or background colour, matched exactly (by
// cascadia) and ranked as the cascade ranks them (see colorPick).
type sheet struct {
	rules  []sheetRule
	colors []colorRule
	index  ruleIndex
	// fold: class and id names match ASCII case-insensitively (a quirks
	// mode page); colour selectors are folded to lower case.
	fold bool
	// external: an @import of a style sheet that is not a data: URL (not
	// fetched, so backgrounds are unknown).
	external bool
	imported int // bytes of data: sheets taken from @import
	selBytes int // bytes of selectors built (nesting resolved)
	// doc is the page, for docNames; names are the class, id and
	// attribute names its elements other than html and body carry
	// (computed on first use).
	doc   *html.Node
	names map[string]bool
}

// ruleIndex finds the rules whose key compound could match an element.
// Entries are indexes into sheet.rules, or ^i for sheet.colors[i].
type ruleIndex struct {
	byClass map[string][]int32
	byID    map[string][]int32
	byTag   map[string][]int32
	other   []int32 // attribute-only, universal and custom-element rules
}

// add indexes entry i under the key compound c.
func (x *ruleIndex) add(c *compound, i int32) {
	switch {
	case len(c.classes) > 0:
		x.byClass[c.classes[0]] = append(x.byClass[c.classes[0]], i)
	case len(c.ids) > 0:
		x.byID[c.ids[0]] = append(x.byID[c.ids[0]], i)
	case c.tag != "" && len(c.attrs) == 0 && !c.custom:
		x.byTag[c.tag] = append(x.byTag[c.tag], i)
	default:
		x.other = append(x.other, i)
	}
}

// colorRule is a rule that sets a text or background colour.
type colorRule struct {
	c   compound     // the key compound: a cheap pre-filter
	sel cascadia.Sel // the whole selector; nil: c is all that is matched
	// fg and bg are the declared values (colNone: not declared).
	fg, bg       int32
	fgImp, bgImp bool
	layered      bool
	// uncertain: the rule may or may not apply (it is under @media,
	// @supports or a media attribute, or its selector is matched only
	// approximately); see colorPick.
	uncertain bool
	spec      uint32
	order     int32
	shape
}

// shape is the shape of a selector, for the cost of matching it: its
// descendant and general-sibling combinators (also inside :not()), and
// whether it counts siblings (:nth-child() and the like).
type shape struct {
	desc, sibs uint8
	nth        bool
}

// sheetRule is a hiding rule. c, its key compound, indexes it and filters
// cheaply; sel, when set, is the whole selector, matched exactly by
// cascadia when the budget affords it (otherwise c alone decides: more is
// hidden, never less). relaxed, when set, is the selector without its
// leftmost compound, a class or attribute that no element of the page
// carries: script usually sets such a class on html or body (`.js .x`),
// so the rule also applies where relaxed matches.
type sheetRule struct {
	c            compound
	eff          hide
	sel, relaxed cascadia.Sel
	shape
	// toggle: the rule hides only by display, visibility or opacity, the
	// way a page hides itself until its script shows it (see
	// walker.pageLevel).
	toggle bool
}

// compound is one compound selector, reduced to what can be matched
// cheaply. Values are lower-case; matching is ASCII case-insensitive
// (quirks-mode pages match classes that way too).
type compound struct {
	tag     string
	ids     []string
	classes []string
	attrs   []attrCond
	custom  bool // :not(:defined) — only custom elements
	nest    bool // contains & (CSS nesting)
	state   bool // a user-action or state pseudo-class (:hover, :focus...)
}

type attrCond struct {
	name, value string
	op          byte // 0 presence, '=', '~', '|', '^', '$', '*'
}

func (c *compound) constrained() bool {
	return len(c.ids) > 0 || len(c.classes) > 0 || len(c.attrs) > 0 || c.custom
}

// builtinHidden are class names commonly used for visually hidden or
// screen-reader-only text, and the usual utility classes for display:none.
var builtinHidden = []string{
	"sr-only", "sr-only-focusable", "visually-hidden", "visually-hidden-focusable",
	"visuallyhidden", "screen-reader-text", "screen-reader-only", "screenreader-only",
	"screenreader", "sr-text", "a11y-hidden", "assistive-text", "element-invisible",
	"hidden-visually", "u-visually-hidden", "vh", "hide-text", "text-hide", "offscreen",
	"hidden", "d-none", "hide", "is-hidden", "invisible", "display-none",
}

func newSheet() *sheet {
	s := &sheet{index: ruleIndex{
		byClass: make(map[string][]int32, len(builtinHidden)+16),
		byID:    map[string][]int32{},
		byTag:   map[string][]int32{},
	}}
	for _, c := range builtinHidden {
		s.add(compound{classes: []string{c}}, hideHard)
	}
	return s
}

// builtinSheet is used, read-only, for pages without style sheets.
var builtinSheet = newSheet()

func (s *sheet) add(c compound, eff hide) {
	s.addRule(sheetRule{c: c, eff: eff})
}

func (s *sheet) addRule(r sheetRule) {
	if len(s.rules)+len(s.colors) >= maxRules {
		return
	}
	s.index.add(&r.c, int32(len(s.rules)))
	s.rules = append(s.rules, r)
}

func (s *sheet) addColor(r colorRule) {
	if len(s.rules)+len(s.colors) >= maxRules {
		return
	}
	r.order = int32(len(s.colors))
	s.index.add(&r.c, ^int32(len(s.colors)))
	s.colors = append(s.colors, r)
}

// Limits on what is taken from a page's styles.
const (
	maxRules     = 20000
	maxCSSNest   = 16
	maxStyleText = 4 << 20
	maxColorSel  = 4096 // bytes of a colour rule's selector, nesting resolved
)

// scope is where a rule stands.
type scope struct {
	// cond: under a condition that may or may not hold (@media other
	// than print only, @supports, @container, a media attribute).
	cond    bool
	layered bool // in a cascade layer
	// top: at the top level of a style sheet, where @import is allowed
	// (before any other rule).
	top bool
	// parent: the selector list of the enclosing rule (CSS nesting), or
	// "*" (with approx set) when it grew too long to resolve.
	parent string
	approx bool
}

// parseCSS adds the rules of a style sheet.
func (s *sheet) parseCSS(css string) {
	if strings.Contains(css, "/*") {
		css = stripComments(css)
	}
	s.parseRules(css, 0, nil, scope{top: true})
}

func stripComments(css string) string {
	var b strings.Builder
	b.Grow(len(css))
	for {
		i := strings.Index(css, "/*")
		if i < 0 {
			b.WriteString(css)
			return b.String()
		}
		b.WriteString(css[:i])
		b.WriteByte(' ')
		j := strings.Index(css[i+2:], "*/")
		if j < 0 {
			return b.String()
		}
		css = css[i+2+j+2:]
	}
}

// scanTo returns the index of the first of the bytes in set at nesting
// level 0 outside strings, or len(s).
func scanTo(s string, set string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\'':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return len(s)
			}
			i += j + 1
		case c == '\\':
			i++
		case strings.IndexByte(set, c) >= 0:
			return i
		}
	}
	return len(s)
}

// blockEnd returns the index of the '}' closing a block whose content
// starts at s[0], or len(s).
func blockEnd(s string) int { return scanLevel(s, '{', '}', '}') }

// statementEnd returns the index of the ';' that ends the statement at
// the start of s (outside strings and parentheses), or len(s).
func statementEnd(s string) int { return scanLevel(s, '(', ')', ';') }

// scanLevel returns the index of the first stop byte at nesting level 0
// (open and close change the level) outside strings, or len(s).
func scanLevel(s string, open, close, stop byte) int {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\'' || c == '\\':
			i = tokenEnd(s, i) - 1
		case c == stop && depth <= 0:
			return i
		case c == open:
			depth++
		case c == close:
			depth--
		}
	}
	return len(s)
}

// tokenEnd returns the end of the string or escape that starts at s[i]
// (a quote or a backslash): the index after its last byte.
func tokenEnd(s string, i int) int {
	if s[i] == '\\' {
		return min(i+2, len(s))
	}
	if j := strings.IndexByte(s[i+1:], s[i]); j >= 0 {
		return i + j + 2
	}
	return len(s)
}

func (s *sheet) parseRules(css string, depth int, parents []compound, sc scope) {
	imports := sc.top
	sc.top = false
	for css != "" {
		if imports {
			css = strings.TrimLeft(css, " \t\n\r\f")
			if atRule(css, "@import") {
				// Up to the ';' outside strings and url(): an unquoted
				// url() may hold braces.
				j := statementEnd(css)
				s.importRule(css[len("@import"):j], depth, sc)
				css = css[min(j+1, len(css)):]
				continue
			}
		}
		j := scanTo(css, "{;}")
		if j == len(css) {
			return
		}
		if css[j] != '{' {
			if stmt := strings.TrimSpace(css[:j]); !atRule(stmt, "@charset") && !atRule(stmt, "@layer") && stmt != "" {
				imports = false
			}
			css = css[j+1:]
			continue
		}
		imports = false
		prelude := strings.TrimSpace(css[:j])
		body := css[j+1:]
		k := blockEnd(body)
		block := body[:k]
		if k < len(body) {
			css = body[k+1:]
		} else {
			css = ""
		}
		if strings.HasPrefix(prelude, "@") {
			name := strings.ToLower(prelude[1:])
			if i := strings.IndexAny(name, " \t\n({"); i >= 0 {
				name = name[:i]
			}
			inner := sc
			switch name {
			case "media":
				if printOnly(prelude[len("@media"):]) {
					continue
				}
				inner.cond = true
			case "supports", "container", "document", "-moz-document", "scope", "starting-style":
				inner.cond = true
			case "layer":
				inner.layered = true
			default:
				continue // @font-face, @keyframes, @page, ...
			}
			if depth < maxCSSNest {
				s.parseRules(block, depth+1, parents, inner)
			}
			continue
		}
		s.rule(prelude, block, depth, parents, sc)
	}
}

// atRule reports whether stmt starts with the at-keyword name.
func atRule(stmt, name string) bool {
	return len(stmt) >= len(name) && strings.EqualFold(stmt[:len(name)], name) &&
		(len(stmt) == len(name) || !isIdentByte(stmt[len(name)]))
}

// importRule handles `@import url(...) [layer] [supports()] [media];`
// (rest is what follows @import). A data: URL sheet is parsed like the
// page's own; any other URL is not fetched and marks the sheet external.
func (s *sheet) importRule(rest string, depth int, sc scope) {
	u, cond := cssURL(strings.TrimSpace(rest))
	if u == "" {
		return
	}
	css, ok := dataURL(u)
	if !ok {
		s.external = true
		return
	}
	cond = strings.TrimSpace(cond)
	low := strings.ToLower(cond)
	if strings.HasPrefix(low, "layer") {
		sc.layered = true
		if strings.HasPrefix(low, "layer(") {
			cond = cond[min(len(cond), scanSel(cond[6:], ')')+7):]
		} else {
			cond = cond[5:]
		}
		cond = strings.TrimSpace(cond)
	}
	if cond != "" {
		if printOnly(cond) {
			return
		}
		sc.cond = true
	}
	if depth >= maxCSSNest || s.imported+len(css) > maxStyleText {
		return
	}
	s.imported += len(css)
	if strings.Contains(css, "/*") {
		css = stripComments(css)
	}
	sc.top = true
	s.parseRules(css, depth+1, nil, sc)
}

// cssURL reads url(...), url("...") or a string at the start of s and
// returns it and what follows.
func cssURL(s string) (u, rest string) {
	switch {
	case len(s) > 4 && strings.EqualFold(s[:4], "url("):
		end := 4 + scanSel(s[4:], ')')
		u = strings.TrimSpace(s[4:min(end, len(s))])
		rest = s[min(end+1, len(s)):]
		if len(u) >= 2 && (u[0] == '"' || u[0] == '\'') && u[len(u)-1] == u[0] {
			u = u[1 : len(u)-1]
		}
	case len(s) > 1 && (s[0] == '"' || s[0] == '\''):
		end := strings.IndexByte(s[1:], s[0])
		if end < 0 {
			return "", ""
		}
		u, rest = s[1:1+end], s[2+end:]
	}
	if strings.IndexByte(u, '\\') >= 0 {
		u = decodeCSS(u)
	}
	return u, rest
}

// printOnly reports whether a media query list applies to print only
// (rules in it do not hide anything on screen).
func printOnly(q string) bool {
	q = strings.ToLower(strings.TrimSpace(q))
	if q == "" {
		return false
	}
	for part := range strings.SplitSeq(q, ",") {
		f := strings.Fields(part)
		if len(f) > 0 && f[0] == "only" {
			f = f[1:]
		}
		if len(f) == 0 || f[0] != "print" {
			return false
		}
	}
	return true
}

// rule handles one qualified rule.
func (s *sheet) rule(prelude, block string, depth int, parents []compound, sc scope) {
	decls := block
	nested := strings.IndexByte(block, '{') >= 0
	if nested {
		// Declarations of this rule, without the nested rules.
		var b strings.Builder
		rest := block
		for rest != "" {
			j := scanTo(rest, ";{")
			if j == len(rest) {
				b.WriteString(rest)
				break
			}
			if rest[j] == ';' {
				b.WriteString(rest[:j+1])
				rest = rest[j+1:]
				continue
			}
			k := blockEnd(rest[j+1:])
			rest = rest[min(j+1+k+1, len(rest)):]
		}
		decls = b.String()
	}
	st := evalStyle(decls)
	eff := st.set
	var targets []compound
	if eff != 0 || nested {
		targets = s.selectors(prelude, eff, st.toggle, parents, sc)
	}
	if st.fg != colNone || st.bg != colNone {
		s.colorRules(prelude, &st, sc)
	}
	if nested && depth < maxCSSNest {
		inner := sc
		if p := nestedList(prelude, sc.parent); len(p) <= maxColorSel && !sc.approx {
			inner.parent = p
		} else {
			inner.parent, inner.approx = "*", true
		}
		s.parseRules(block, depth+1, targets, inner)
	}
}

// colorRules adds a colour rule for each selector of list.
func (s *sheet) colorRules(list string, st *style, sc scope) {
	for len(list) > 0 {
		j := scanSel(list, ',')
		sel := strings.TrimSpace(list[:j])
		if j < len(list) {
			list = list[j+1:]
		} else {
			list = ""
		}
		if sel == "" {
			continue
		}
		if len(s.rules)+len(s.colors) >= maxRules {
			return
		}
		r := colorRule{fg: st.fg, bg: st.bg, fgImp: st.fgImp, bgImp: st.bgImp, layered: sc.layered, uncertain: sc.cond || sc.approx}
		// Past a page's worth of selector text, nesting is not resolved
		// and selectors are matched by their key compound only.
		exact := s.selBytes+len(sel)+len(sc.parent) <= maxStyleText
		if exact {
			if sc.parent != "" {
				sel = nestSelector(sel, sc.parent)
			}
			s.selBytes += len(sel)
		}
		text, approx := s.colorSelector(sel)
		r.uncertain = r.uncertain || approx
		r.shape = selectorShape(text)
		if cs, err := cascadia.Parse(text); exact && err == nil && len(text) <= maxColorSel && r.desc+r.sibs <= maxColorComb &&
			!strings.Contains(strings.ToLower(text), ":has(") {
			sp := cs.Specificity()
			r.sel, r.spec = cs, packSpec(sp[0], sp[1], sp[2])
		} else {
			r.uncertain = true
		}
		comps, _, ok := parseSelector(text)
		if !ok || len(comps) == 0 {
			continue
		}
		r.c = comps[len(comps)-1]
		if r.sel == nil {
			// Matched by its key compound alone: never for a state
			// (:hover) or when the key is only `&`.
			if r.c.state || r.c.nest {
				continue
			}
			r.spec = packSpec(len(r.c.ids), len(r.c.classes)+len(r.c.attrs), min(len(r.c.tag), 1))
		}
		r.c.nest = false
		s.addColor(r)
	}
}

// colorSelector rewrites a selector for cascadia: :is(), :matches() and
// :any() become :not(:not()), which match and count the same; :where()
// too, but its specificity is then too high, so approx is set. On a
// quirks mode page, class and id names are folded to lower case.
func (s *sheet) colorSelector(sel string) (text string, approx bool) {
	low := strings.ToLower(sel)
	if strings.Contains(low, ":where(") {
		approx = true
	}
	if strings.Contains(low, ":is(") || strings.Contains(low, ":where(") || strings.Contains(low, "any(") || strings.Contains(low, ":matches(") {
		sel = rewriteIs(sel)
	}
	if s.fold {
		sel = foldNames(sel)
	}
	return sel, approx
}

// isAliases are the pseudo-classes that mean :is().
var isAliases = []string{":is(", ":where(", ":matches(", ":any(", ":-webkit-any(", ":-moz-any("}

// rewriteIs replaces every :is(X) (and its aliases) by :not(:not(X)).
func rewriteIs(sel string) string {
	var b strings.Builder
	var closes []bool // for each open parenthesis: does it close an alias?
	for i := 0; i < len(sel); i++ {
		c := sel[i]
		switch c {
		case '"', '\'', '\\':
			end := tokenEnd(sel, i)
			b.WriteString(sel[i:end])
			i = end - 1
			continue
		case ':':
			if a := isAlias(sel[i:]); a > 0 {
				b.WriteString(":not(:not(")
				closes = append(closes, true)
				i += a - 1
				continue
			}
		case '(':
			closes = append(closes, false)
		case ')':
			if n := len(closes); n > 0 {
				if closes[n-1] {
					b.WriteByte(')')
				}
				closes = closes[:n-1]
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

// isAlias returns the length of the :is() alias s starts with, or 0.
func isAlias(s string) int {
	for _, a := range isAliases {
		if len(s) >= len(a) && strings.EqualFold(s[:len(a)], a) {
			return len(a)
		}
	}
	return 0
}

// foldNames lower-cases the class and id names of a selector.
func foldNames(sel string) string {
	b := []byte(sel)
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"', '\'', '\\':
			i = tokenEnd(sel, i) - 1
		case '[':
			i += scanSel(sel[i+1:], ']')
		case '.', '#':
			for i+1 < len(b) && isIdentByte(b[i+1]) {
				i++
				if b[i] >= 'A' && b[i] <= 'Z' {
					b[i] += 'a' - 'A'
				}
			}
		}
	}
	return string(b)
}

// nestedList returns the selector list of a nested rule's parent: the
// rule's own list with & resolved against the enclosing parent list.
func nestedList(list, parent string) string {
	if parent == "" {
		return list
	}
	var out []string
	size := 0
	for len(list) > 0 && size <= maxColorSel {
		j := scanSel(list, ',')
		if sel := strings.TrimSpace(list[:j]); sel != "" {
			out = append(out, nestSelector(sel, parent))
			size += len(out[len(out)-1]) + 2
		}
		if j < len(list) {
			list = list[j+1:]
		} else {
			list = ""
		}
	}
	return strings.Join(out, ", ")
}

// nestSelector resolves a nested selector against its parent list: &
// stands for :is(parent), and a selector without & is relative to it.
func nestSelector(sel, parent string) string {
	is := ":is(" + parent + ")"
	var b strings.Builder
	amp := false
	for i := 0; i < len(sel); i++ {
		switch c := sel[i]; c {
		case '"', '\'', '\\':
			end := tokenEnd(sel, i)
			b.WriteString(sel[i:end])
			i = end - 1
		case '&':
			b.WriteString(is)
			amp = true
		default:
			b.WriteByte(c)
		}
	}
	if !amp {
		return is + " " + sel
	}
	return b.String()
}

// selectors parses a selector list, adds a hiding rule for each selector
// when eff is not zero, and returns the key compounds (the parents of
// nested rules when nesting cannot be resolved exactly).
//
// A selector is matched exactly (see exactRule) when it can be; otherwise
// it is over-approximated by a compound: its key compound, or for `A B`
// and `A > B` whose key is a bare tag, A. The parents' keys are added at
// most once, however many selectors of the list stand for them: otherwise
// nested lists would multiply them at every level.
func (s *sheet) selectors(list string, eff hide, toggle bool, parents []compound, sc scope) []compound {
	var keys []compound
	withParents := false
	for len(list) > 0 {
		j := scanSel(list, ',')
		sel := list[:j]
		if j < len(list) {
			list = list[j+1:]
		} else {
			list = ""
		}
		comps, combs, ok := parseSelector(sel)
		if !ok || len(comps) == 0 {
			continue
		}
		r := comps[len(comps)-1]
		var targets []compound
		switch {
		case r.nest && len(parents) > 0:
			// `&:hover`, `&.x`: over-approximated by the parent's keys.
			targets = parents
		case r.constrained() || len(comps) == 1:
			r.nest = false
			targets = []compound{r}
		default:
			l := comps[len(comps)-2]
			switch combs[len(combs)-1] {
			case '+', '~':
				r.nest = false
				targets = []compound{r}
			default:
				// `.a p`, `.a > *`: hiding all of .a covers them.
				if l.nest && len(parents) > 0 {
					targets = parents
				} else {
					l.nest = false
					targets = []compound{l}
				}
			}
		}
		exact := false
		if eff != 0 {
			if x, ok := s.exactRule(sel, comps, combs, sc); ok {
				x.eff, x.toggle = eff, toggle
				s.addRule(x)
				exact = true
			}
		}
		if len(targets) > 0 && len(parents) > 0 && &targets[0] == &parents[0] {
			if withParents {
				continue
			}
			withParents = true
		}
		for _, t := range targets {
			if eff != 0 && !exact {
				s.addRule(sheetRule{c: t, eff: eff, toggle: toggle})
			}
			keys = append(keys, t)
		}
	}
	return keys
}

// exactRule builds the hiding rule of one selector (comps and combs are
// its parse) matched by cascadia: ok is false when it cannot be matched
// exactly (nesting not resolved, a pseudo-class for a state or one
// cascadia lacks, too long or too costly a selector).
func (s *sheet) exactRule(sel string, comps []compound, combs []byte, sc scope) (sheetRule, bool) {
	sel = strings.TrimSpace(sel)
	if sc.approx || s.selBytes+len(sel)+len(sc.parent) > maxStyleText {
		return sheetRule{}, false
	}
	if sc.parent != "" {
		sel = nestSelector(sel, sc.parent)
	}
	s.selBytes += len(sel)
	text, _ := s.colorSelector(sel)
	if len(text) > maxColorSel || !structuralOnly(text) {
		return sheetRule{}, false
	}
	sh := selectorShape(text)
	if sh.desc+sh.sibs > maxColorComb {
		return sheetRule{}, false
	}
	cs, err := cascadia.Parse(text)
	if err != nil {
		return sheetRule{}, false
	}
	kc, _, ok := parseSelector(text)
	if !ok || len(kc) == 0 || kc[len(kc)-1].nest {
		return sheetRule{}, false
	}
	r := sheetRule{c: kc[len(kc)-1], sel: cs, shape: sh}
	// `.js .x`, `html.loaded > body .x`: the leftmost compound names a
	// class, id or attribute that no element carries, which script
	// usually sets on html or body; the rule applies without it too.
	if sc.parent == "" && len(comps) > 1 && (combs[0] == ' ' || combs[0] == '>') {
		if l := &comps[0]; (l.tag == "" || l.tag == "html" || l.tag == "body") && l.constrained() && !l.custom && s.absent(l) {
			if rest := strings.TrimSpace(afterFirstCompound(text)); rest != "" {
				rest = strings.TrimSpace(strings.TrimPrefix(rest, ">"))
				if rs, err := cascadia.Parse(rest); err == nil && rest != "" {
					r.relaxed = rs
				}
			}
		}
	}
	return r, true
}

// structuralOnly reports whether every pseudo-class of a selector depends
// on the document alone (not on a state such as :hover or :checked), so
// that cascadia's verdict is the browser's.
func structuralOnly(sel string) bool {
	for i := 0; i < len(sel); i++ {
		switch sel[i] {
		case '"', '\'', '\\':
			i = tokenEnd(sel, i) - 1
		case '[':
			i += scanSel(sel[i+1:], ']')
		case ':':
			if i+1 < len(sel) && sel[i+1] == ':' {
				return false
			}
			name, _ := ident(sel, i+1)
			if !structuralPseudo[name] {
				return false
			}
		}
	}
	return true
}

var structuralPseudo = map[string]bool{
	"not": true, "nth-child": true, "nth-last-child": true, "nth-of-type": true,
	"nth-last-of-type": true, "first-child": true, "last-child": true, "only-child": true,
	"first-of-type": true, "last-of-type": true, "only-of-type": true, "root": true, "lang": true,
}

// afterFirstCompound returns sel without its first compound selector.
func afterFirstCompound(sel string) string {
	sel = strings.TrimLeft(sel, " \t\n\r\f")
	for i := 0; i < len(sel); i++ {
		switch c := sel[i]; c {
		case '"', '\'', '\\':
			i = tokenEnd(sel, i) - 1
		case '(':
			i += scanSel(sel[i+1:], ')') + 1
		case '[':
			i += scanSel(sel[i+1:], ']') + 1
		case ' ', '\t', '\n', '\r', '\f', '>', '+', '~':
			return sel[i:]
		}
	}
	return ""
}

// absent reports whether some class, id or attribute that compound c
// requires is carried by no element of the page but html and body.
func (s *sheet) absent(c *compound) bool {
	if s.doc == nil {
		return false
	}
	if s.names == nil {
		s.names = docNames(s.doc, s.fold)
	}
	for _, v := range c.classes {
		if !s.names["."+v] {
			return true
		}
	}
	for _, v := range c.ids {
		if !s.names["#"+v] {
			return true
		}
	}
	for _, a := range c.attrs {
		if !s.names["["+a.name] {
			return true
		}
	}
	return false
}

// docNames collects the class names (".x"), ids ("#x") and attribute
// names ("[x") of the elements of doc other than html and body,
// lower-cased.
func docNames(doc *html.Node, fold bool) map[string]bool {
	names := map[string]bool{}
	for n := doc; n != nil; n = next(n, doc, true) {
		if n.Type != html.ElementNode || n.DataAtom == atom.Html || n.DataAtom == atom.Body {
			continue
		}
		for _, a := range n.Attr {
			names["["+a.Key] = true
			switch a.Key {
			case "class":
				for c := range strings.FieldsSeq(a.Val) {
					names["."+strings.ToLower(c)] = true
				}
			case "id":
				names["#"+strings.ToLower(strings.TrimSpace(a.Val))] = true
			}
		}
	}
	return names
}

// next returns the node after n in document order within root, entering
// n's children when descend is set; nil at the end.
func next(n, root *html.Node, descend bool) *html.Node {
	if descend && n.FirstChild != nil {
		return n.FirstChild
	}
	for n != root && n.NextSibling == nil {
		n = n.Parent
	}
	if n == root {
		return nil
	}
	return n.NextSibling
}

// scanSel returns the index of c at parenthesis/bracket level 0 outside
// strings, or len(s).
func scanSel(s string, c byte) int {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"', '\'':
			j := strings.IndexByte(s[i+1:], s[i])
			if j < 0 {
				return len(s)
			}
			i += j + 1
		case '\\':
			i++
		case c:
			if depth <= 0 {
				return i
			}
			depth--
		case '(', '[':
			depth++
		case ')', ']':
			depth--
		}
	}
	return len(s)
}

func isIdentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c >= 0x80 || c == '\\'
}

// ident reads a CSS identifier (escapes resolved, lower-cased) at s[i:].
func ident(s string, i int) (string, int) {
	j := i
	for j < len(s) && isIdentByte(s[j]) {
		if s[j] == '\\' && j+1 < len(s) {
			j++
			if isHex(s[j]) {
				// \68 or \000068, then one optional white space
				k := j
				for k < len(s) && k < j+6 && isHex(s[k]) {
					k++
				}
				j = k
				if j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n') {
					j++
				}
				continue
			}
		}
		j++
	}
	id := s[i:j]
	if strings.IndexByte(id, '\\') >= 0 {
		id = decodeCSS(id)
	}
	return strings.ToLower(id), j
}

// parseSelector splits one complex selector into compounds and the
// combinators between them (' ', '>', '+', '~'). ok is false for selectors
// that cannot hide an element's content: pseudo-elements and :empty.
func parseSelector(sel string) (comps []compound, combs []byte, ok bool) {
	var cur compound
	has := false
	comb := byte(0)
	push := func() {
		if !has {
			return
		}
		if len(comps) > 0 {
			if comb == 0 {
				comb = ' '
			}
			combs = append(combs, comb)
		}
		comps = append(comps, cur)
		cur, has, comb = compound{}, false, 0
	}
	for i := 0; i < len(sel); {
		c := sel[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			push()
			i++
		case c == '>' || c == '+' || c == '~':
			push()
			comb = c
			i++
		case c == '*':
			has = true
			i++
		case c == '&':
			cur.nest, has = true, true
			i++
		case c == '#':
			var id string
			id, i = ident(sel, i+1)
			cur.ids = append(cur.ids, id)
			has = true
		case c == '.':
			var cl string
			cl, i = ident(sel, i+1)
			cur.classes = append(cur.classes, cl)
			has = true
		case c == '[':
			end := i + 1 + scanSel(sel[i+1:], ']')
			cur.attrs = append(cur.attrs, parseAttrSel(sel[i+1:min(end, len(sel))]))
			has = true
			i = end + 1
		case c == ':':
			i++
			element := false
			if i < len(sel) && sel[i] == ':' {
				element = true
				i++
			}
			var name string
			name, i = ident(sel, i)
			var arg string
			if i < len(sel) && sel[i] == '(' {
				end := i + 1 + scanSel(sel[i+1:], ')')
				arg = strings.ToLower(strings.TrimSpace(sel[i+1 : min(end, len(sel))]))
				i = end + 1
			}
			switch name {
			case "before", "after", "first-line", "first-letter", "marker", "placeholder", "selection", "backdrop":
				element = true
			case "empty":
				return nil, nil, false
			case "hover", "active", "focus", "focus-within", "focus-visible", "visited", "target",
				"target-within", "checked", "-moz-focusring", "autofill", "-webkit-autofill":
				cur.state = true
			case "not":
				if arg == ":defined" {
					cur.custom = true
				}
			}
			if element {
				return nil, nil, false
			}
			has = true
		case isIdentByte(c):
			var t string
			t, i = ident(sel, i)
			cur.tag = t
			has = true
		default:
			i++ // '|' namespaces and anything unknown: ignored
		}
	}
	push()
	return comps, combs, true
}

func parseAttrSel(s string) attrCond {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && isIdentByte(s[i]) {
		i++
	}
	a := attrCond{name: strings.ToLower(s[:i])}
	rest := strings.TrimSpace(s[i:])
	if rest == "" {
		return a
	}
	op := rest[0]
	switch {
	case op == '=':
		rest = rest[1:]
	case len(rest) > 1 && rest[1] == '=' && strings.IndexByte("~|^$*", op) >= 0:
		rest = rest[2:]
	default:
		return a // unknown: treated as presence
	}
	rest = strings.TrimSpace(rest)
	if rest != "" && (rest[0] == '"' || rest[0] == '\'') {
		if j := strings.IndexByte(rest[1:], rest[0]); j >= 0 {
			rest = rest[1 : j+1]
		} else {
			rest = rest[1:]
		}
	} else if j := strings.IndexAny(rest, " \t"); j >= 0 {
		rest = rest[:j] // drop an " i" / " s" flag
	}
	if strings.IndexByte(rest, '\\') >= 0 {
		rest = decodeCSS(rest)
	}
	a.op, a.value = op, strings.ToLower(rest)
	return a
}

// elemInfo is what matching needs to know about an element.
type elemInfo struct {
	n       *html.Node
	id      string
	classes []string     // lower-case
	depth   int          // of n in the walk
	work    *colorBudget // for matching colour rules
}

func (c *compound) match(e *elemInfo) bool {
	n := e.n
	if c.tag != "" && c.tag != n.Data {
		return false
	}
	if c.custom && strings.IndexByte(n.Data, '-') < 0 {
		return false
	}
	for _, id := range c.ids {
		if id != e.id {
			return false
		}
	}
outer:
	for _, want := range c.classes {
		for _, have := range e.classes {
			if have == want {
				continue outer
			}
		}
		return false
	}
	for i := range c.attrs {
		if !c.attrs[i].match(n) {
			return false
		}
	}
	return true
}

func (a *attrCond) match(n *html.Node) bool {
	for _, at := range n.Attr {
		if at.Namespace != "" || at.Key != a.name {
			continue
		}
		if a.op == 0 {
			return true
		}
		v := strings.ToLower(at.Val)
		switch a.op {
		case '=':
			return v == a.value
		case '~':
			for _, w := range strings.Fields(v) {
				if w == a.value {
					return true
				}
			}
			return false
		case '|':
			return v == a.value || strings.HasPrefix(v, a.value+"-")
		case '^':
			return a.value != "" && strings.HasPrefix(v, a.value)
		case '$':
			return a.value != "" && strings.HasSuffix(v, a.value)
		case '*':
			return a.value != "" && strings.Contains(v, a.value)
		}
		return true
	}
	return false
}

// effect returns the union of the effects of the hiding rules matching e
// (toggle: of those that hide only as a page hides itself until its
// script shows it; other: of the rest), and offers the colour rules
// matching e to cp.
func (s *sheet) effect(e *elemInfo, cp *colorPick) (toggle, other hide) {
	check := func(idx []int32) {
		for _, i := range idx {
			if i < 0 {
				s.color(&s.colors[^i], e, cp)
				continue
			}
			r := &s.rules[i]
			h := &other
			if r.toggle {
				h = &toggle
			}
			if *h&r.eff != r.eff && r.c.match(e) && s.matches(r, e) {
				*h |= r.eff
			}
		}
	}
	x := &s.index
	for _, c := range e.classes {
		if idx, ok := x.byClass[c]; ok {
			check(idx)
		}
	}
	if e.id != "" {
		if idx, ok := x.byID[e.id]; ok {
			check(idx)
		}
	}
	if len(x.byTag) > 0 {
		if idx, ok := x.byTag[e.n.Data]; ok {
			check(idx)
		}
	}
	check(x.other)
	return toggle, other
}

// matches reports whether hiding rule r, whose key compound matches e,
// applies to e: by its whole selector (or the relaxed one) when it has
// one and the budget affords matching it; otherwise it does.
func (s *sheet) matches(r *sheetRule, e *elemInfo) bool {
	if r.sel == nil || !e.work.afford(&r.shape, e) {
		return true
	}
	if r.sel.Match(e.n) {
		return true
	}
	if r.relaxed == nil {
		return false
	}
	return !e.work.afford(&r.shape, e) || r.relaxed.Match(e.n)
}

// color offers the declarations of r to cp when r matches e. r's whole
// selector is matched when e.work affords it; otherwise its key compound
// alone decides and the rule counts as uncertain (it can hide text, not
// show it).
func (s *sheet) color(r *colorRule, e *elemInfo, cp *colorPick) {
	if !r.c.match(e) {
		return
	}
	uncertain := r.uncertain
	if r.sel != nil {
		if e.work.afford(&r.shape, e) {
			if !r.sel.Match(e.n) {
				return
			}
		} else {
			uncertain = true
		}
	}
	if r.fg != colNone {
		offer(&cp.fg, r.fg, rank(tierOf(r.fgImp, r.layered, false), r.spec, r.order), uncertain)
	}
	if r.bg != colNone {
		offer(&cp.bg, r.bg, rank(tierOf(r.bgImp, r.layered, false), r.spec, r.order), uncertain)
	}
}

// Bounds on matching selectors (of colour and hiding rules): cascadia searches ancestors for
// each descendant combinator and siblings for each ~ (so a hostile page
// could make one match take depth^n steps), and counts siblings for
// :nth-child().
const (
	maxColorComb  = 6       // combinators of a selector matched exactly
	maxColorMatch = 1 << 17 // worst-case steps of one exact match
	maxColorWork  = 1 << 26 // worst-case steps of all exact matches of a page
)

// colorBudget is what one HTML call may spend on matching the selectors
// of colour and hiding rules exactly, by their worst case; past it they
// are matched by their key compound (colours count as uncertain, hiding
// rules hide). It is deterministic: the same page gives the same
// output whatever the machine's load.
type colorBudget struct {
	spent    int64
	siblings map[*html.Node]int64 // element children, by parent
}

// afford reports whether a selector of shape r may be matched exactly at
// e, and charges its worst case.
func (b *colorBudget) afford(r *shape, e *elemInfo) bool {
	if b == nil {
		return false
	}
	cost := int64(1)
	if r.desc > 0 || r.sibs > 0 || r.nth {
		sib := b.siblingsOf(e.n)
		for range r.desc {
			if cost *= int64(max(e.depth, 1)); cost > maxColorMatch {
				return false
			}
		}
		for range r.sibs {
			if cost *= sib; cost > maxColorMatch {
				return false
			}
		}
		if r.nth {
			cost += sib
		}
	}
	if cost > maxColorMatch || b.spent+cost > maxColorWork {
		return false
	}
	b.spent += cost
	return true
}

// siblingsOf returns how many element children n's parent has.
func (b *colorBudget) siblingsOf(n *html.Node) int64 {
	p := n.Parent
	if p == nil {
		return 1
	}
	if c, ok := b.siblings[p]; ok {
		return c
	}
	var c int64
	for k := p.FirstChild; k != nil; k = k.NextSibling {
		if k.Type == html.ElementNode {
			c++
		}
	}
	if b.siblings == nil {
		b.siblings = map[*html.Node]int64{}
	}
	b.siblings[p] = c
	return c
}

// selectorShape returns, for the costliest alternative of a selector
// list, how many descendant and general-sibling combinators one match
// may have to search through (those in :not() add to those around it),
// and whether the selector counts siblings (:nth-child() and the like).
func selectorShape(sel string) shape {
	low := strings.ToLower(sel)
	nth := strings.Contains(low, "nth-") || strings.Contains(low, "-child") || strings.Contains(low, "-of-type")
	d, g := listShape(sel, 0)
	return shape{desc: uint8(min(d, 255)), sibs: uint8(min(g, 255)), nth: nth}
}

// listShape is selectorShape's count for a selector list: the most of its
// alternatives.
func listShape(list string, level int) (desc, sibs int) {
	for len(list) > 0 {
		j := scanSel(list, ',')
		d, g := chainShape(list[:j], level)
		desc, sibs = max(desc, d), max(sibs, g)
		if j == len(list) {
			break
		}
		list = list[j+1:]
	}
	return desc, sibs
}

// chainShape counts the searching combinators of one complex selector,
// with those of the selector lists in its parentheses.
func chainShape(sel string, level int) (desc, sibs int) {
	prev := byte(0) // the last byte that is not white space
	space := false
	for i := 0; i < len(sel); i++ {
		c := sel[i]
		switch c {
		case '"', '\'', '\\':
			i = tokenEnd(sel, i) - 1
			c = 'a'
		case '[':
			i += scanSel(sel[i+1:], ']') + 1
			c = 'a'
		case '(':
			end := i + 1 + scanSel(sel[i+1:], ')')
			if level >= maxCSSNest {
				return 255, 255 // too deep to judge: never matched exactly
			}
			d, g := listShape(sel[i+1:min(end, len(sel))], level+1)
			desc, sibs = desc+d, sibs+g
			i, c = end, 'a'
		case ' ', '\t', '\n', '\r', '\f':
			space = true
			continue
		case '~':
			sibs++
		}
		if space && prev != 0 && strings.IndexByte(">+~,", prev) < 0 && strings.IndexByte(">+~,", c) < 0 {
			desc++
		}
		space, prev = false, c
	}
	return desc, sibs
}
