package safetext

import (
	"strings"

	"golang.org/x/net/html"
)

// A sheet holds the hiding rules taken from a page's <style> elements, and
// the built-in classes that sites use for screen-reader-only text. It is a
// cheap over-approximation of the cascade: a rule that hides anything is
// applied to every element its key selector could match; overrides,
// specificity and most pseudo-classes are ignored, so at worst visible text
// is dropped, hidden text never kept because of them.
type sheet struct {
	rules   []sheetRule
	byClass map[string][]int32
	byID    map[string][]int32
	byTag   map[string][]int32
	other   []int32 // attribute-only, universal and custom-element rules
	sibling []sibRule
}

type sheetRule struct {
	c   compound
	eff hide
}

// sibRule hides elements matching right that follow (adjacent: right
// after) an element sibling matching left: `.a + p`, `.a ~ p`.
type sibRule struct {
	left, right compound
	adjacent    bool
	eff         hide
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
	s := &sheet{
		byClass: make(map[string][]int32, len(builtinHidden)+16),
		byID:    map[string][]int32{},
		byTag:   map[string][]int32{},
	}
	for _, c := range builtinHidden {
		s.add(compound{classes: []string{c}}, hideHard)
	}
	return s
}

// builtinSheet is used, read-only, for pages without <style> elements.
var builtinSheet = newSheet()

func (s *sheet) add(c compound, eff hide) {
	if len(s.rules) >= maxRules {
		return
	}
	i := int32(len(s.rules))
	s.rules = append(s.rules, sheetRule{c: c, eff: eff})
	switch {
	case len(c.classes) > 0:
		s.byClass[c.classes[0]] = append(s.byClass[c.classes[0]], i)
	case len(c.ids) > 0:
		s.byID[c.ids[0]] = append(s.byID[c.ids[0]], i)
	case c.tag != "" && len(c.attrs) == 0 && !c.custom:
		s.byTag[c.tag] = append(s.byTag[c.tag], i)
	default:
		s.other = append(s.other, i)
	}
}

// Limits on what is taken from a page's styles.
const (
	maxRules     = 20000
	maxSibRules  = 64
	maxCSSNest   = 16
	maxStyleText = 4 << 20
)

// parseCSS adds the hiding rules of a style sheet.
func (s *sheet) parseCSS(css string) {
	if strings.Contains(css, "/*") {
		css = stripComments(css)
	}
	s.parseRules(css, 0, nil)
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
func blockEnd(s string) int {
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
		case '{':
			depth++
		case '}':
			if depth == 0 {
				return i
			}
			depth--
		}
	}
	return len(s)
}

func (s *sheet) parseRules(css string, depth int, parents []compound) {
	for css != "" {
		j := scanTo(css, "{;}")
		if j == len(css) {
			return
		}
		if css[j] != '{' {
			css = css[j+1:]
			continue
		}
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
			switch name {
			case "media":
				if printOnly(prelude[len("@media"):]) {
					continue
				}
				fallthrough
			case "supports", "layer", "container", "document", "-moz-document", "scope", "starting-style":
				if depth < maxCSSNest {
					s.parseRules(block, depth+1, parents)
				}
			}
			continue // @font-face, @keyframes, @page, ...
		}
		s.rule(prelude, block, depth, parents)
	}
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
func (s *sheet) rule(prelude, block string, depth int, parents []compound) {
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
	eff := evalStyle(decls).set
	var targets []compound
	if eff != 0 || nested {
		targets = s.selectors(prelude, eff, parents)
	}
	if nested && depth < maxCSSNest {
		s.parseRules(block, depth+1, targets)
	}
}

// selectors parses a selector list, adds a rule for each selector when eff
// is not zero, and returns the key compounds (the parents of nested rules).
func (s *sheet) selectors(list string, eff hide, parents []compound) []compound {
	var keys []compound
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
				if eff != 0 && len(s.sibling) < maxSibRules {
					s.sibling = append(s.sibling, sibRule{left: l, right: r, adjacent: combs[len(combs)-1] == '+', eff: eff})
					continue
				}
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
		for _, t := range targets {
			if eff != 0 {
				s.add(t, eff)
			}
			keys = append(keys, t)
		}
	}
	return keys
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
	classes []string // lower-case
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

// effect returns the union of the effects of the rules matching e.
func (s *sheet) effect(e *elemInfo) hide {
	var h hide
	check := func(idx []int32) {
		for _, i := range idx {
			r := &s.rules[i]
			if h&r.eff != r.eff && r.c.match(e) {
				h |= r.eff
			}
		}
	}
	for _, c := range e.classes {
		if idx, ok := s.byClass[c]; ok {
			check(idx)
		}
	}
	if e.id != "" {
		if idx, ok := s.byID[e.id]; ok {
			check(idx)
		}
	}
	if len(s.byTag) > 0 {
		if idx, ok := s.byTag[e.n.Data]; ok {
			check(idx)
		}
	}
	check(s.other)
	return h
}
