package safetext

import (
	"bytes"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// action is what to do when leaving an element.
type action uint8

const (
	actNone action = iota
	actBlock1
	actBlock2
	actHeading // Markdown heading: captured
	actList
	actItem
	actQuote
	actPre
	actCode
	actLinkMD
	actLinkText
	actTable
	actRow
	actCell
	actClose     // MathML: write ")" on leaving
	actMathSpace // MathML: a space on leaving
)

// frame is the state of one open element.
type frame struct {
	act    action
	hidden bool // text directly inside is not visible
	closed bool // a closed <details>: only its first <summary> child shows
	level  uint8
	soft   hide
	// fg and bg are the text and background colours, in the two variants
	// of colorPick.
	fg, bg [2]int32
	prefix int    // writer prefix length to restore
	mark   int    // writer buffer length at entry
	href   string // link target
}

type listState struct {
	ordered bool
	n       int
}

type tableState struct {
	node                *html.Node
	rows, cells, filled int
	cols                int
}

// attrScan is what one pass over an element's attributes found.
type attrScan struct {
	hard                    bool // hidden, aria-hidden=true, popover, 0/1px image
	style, alt, href, start string
	color, bgcolor, role    string
	hasAlt, open            bool
}

type walker struct {
	w       writer
	full    bool
	base    *url.URL
	sheet   *sheet
	stack   []frame
	lists   []listState
	tables  []tableState
	links   []string
	linkNum map[string]int
	info    elemInfo
	scan    attrScan
	classes []string
	work    colorBudget
	// script: the page has scripts, which may show what its style
	// sheets hide at first (see pageLevel).
	script   bool
	textSize map[*html.Node]int // text bytes under an element (pageLevel)
	shown    int                // page-level hides not obeyed
	warnings []Warning
	// keep, when set, restricts the output to these nodes (the main
	// content) and their ancestors: other elements are not entered, and
	// only the text nodes in keep (and white space) are written.
	keep map[*html.Node]bool
	// seen, when set, collects the elements entered and the text nodes
	// written (the visible page).
	seen map[*html.Node]bool
}

// Elements dropped with everything in them.
var skipAtoms = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true,
	atom.Iframe: true, atom.Frame: true, atom.Frameset: true, atom.Object: true,
	atom.Embed: true, atom.Applet: true, atom.Svg: true, atom.Math: true,
	atom.Canvas: true, atom.Audio: true, atom.Video: true, atom.Source: true,
	atom.Track: true, atom.Input: true, atom.Textarea: true, atom.Select: true,
	atom.Option: true, atom.Optgroup: true, atom.Button: true, atom.Datalist: true,
	atom.Head: true, atom.Title: true, atom.Meta: true, atom.Link: true,
	atom.Base: true, atom.Noembed: true, atom.Noframes: true, atom.Param: true,
	atom.Rp: true, atom.Area: true, atom.Keygen: true, atom.Progress: true,
	atom.Meter: true, atom.Map: true,
}

// Elements that end a line (1) or a paragraph (2).
var blockAtoms = map[atom.Atom]uint8{
	atom.Address: 1, atom.Article: 1, atom.Aside: 1, atom.Body: 1, atom.Center: 1,
	atom.Dd: 1, atom.Details: 1, atom.Dialog: 1, atom.Div: 1, atom.Dt: 1,
	atom.Fieldset: 1, atom.Figcaption: 1, atom.Figure: 1, atom.Footer: 1,
	atom.Form: 1, atom.Header: 1, atom.Hgroup: 1, atom.Html: 1, atom.Legend: 1,
	atom.Main: 1, atom.Nav: 1, atom.Section: 1, atom.Summary: 1, atom.Caption: 2,
	atom.Search: 1, atom.Tbody: 1, atom.Thead: 1, atom.Tfoot: 1,
	atom.P: 2, atom.Dl: 2, atom.Blockquote: 2,
}

func (wk *walker) top() *frame { return &wk.stack[len(wk.stack)-1] }

// walk renders the subtree at root, with ctx as the context around it.
// It uses an explicit stack (at most maxDepth frames) instead of recursion.
func (wk *walker) walk(root *html.Node, ctx frame) {
	wk.stack = append(wk.stack[:0], ctx)
	n := root
	for !wk.w.full {
		descend := wk.enter(n)
		if descend {
			if n.FirstChild != nil && len(wk.stack) <= maxDepth {
				n = n.FirstChild
				continue
			}
			wk.exit()
		}
		for n != root && n.NextSibling == nil {
			n = n.Parent
			wk.exit()
		}
		if n == root {
			return
		}
		n = n.NextSibling
	}
	// The output is full: close what is open, so that captured parts
	// (table rows, headings, links) are written out.
	for len(wk.stack) > 1 {
		wk.exit()
	}
}

// scanAttrs reads the attributes of n into wk.scan and wk.info.
func (wk *walker) scanAttrs(n *html.Node) {
	wk.scan = attrScan{}
	wk.classes = wk.classes[:0]
	wk.info = elemInfo{n: n, depth: len(wk.stack), work: &wk.work}
	s := &wk.scan
	for i := range n.Attr {
		a := &n.Attr[i]
		if a.Namespace != "" {
			continue
		}
		switch a.Key {
		case "hidden", "popover":
			s.hard = true
		case "aria-hidden":
			s.hard = s.hard || strings.EqualFold(strings.TrimSpace(a.Val), "true")
		case "style":
			s.style = a.Val + s.style
		case "class":
			for c := range strings.FieldsSeq(a.Val) {
				wk.classes = append(wk.classes, strings.ToLower(c))
			}
		case "id":
			wk.info.id = strings.ToLower(strings.TrimSpace(a.Val))
		case "alt":
			s.alt, s.hasAlt = a.Val, true
		case "href":
			s.href = a.Val
		case "start":
			s.start = a.Val
		case "open":
			s.open = true
		case "color":
			s.color = a.Val
		case "text":
			if n.DataAtom == atom.Body {
				s.color = a.Val
			}
		case "bgcolor":
			s.bgcolor = a.Val
		case "mathcolor", "mathbackground", "mathsize":
			// MathML's presentation attributes.
			if n.Namespace == "math" {
				switch a.Key {
				case "mathcolor":
					s.color = a.Val
				case "mathbackground":
					s.bgcolor = a.Val
				default:
					s.style += ";font-size:" + a.Val
				}
			}
		case "role":
			s.role = a.Val
		case "width", "height":
			if n.DataAtom == atom.Img {
				if px, ok := length(strings.TrimSpace(a.Val) + "px"); ok && px <= 1 {
					s.hard = true // tracking pixel
				}
			}
		}
	}
	wk.info.classes = wk.classes
}

// foldAttr lower-cases an attribute's value in place, so that the
// colour rules' selectors (folded too) match class and id names
// case-insensitively, as on a quirks mode page.
func foldAttr(a *html.Attribute) {
	for i := 0; i < len(a.Val); i++ {
		if c := a.Val[i]; c >= 'A' && c <= 'Z' {
			a.Val = strings.ToLower(a.Val)
			return
		}
	}
}

// rootFrame is the frame around the document: the default text colour
// fg and the canvas background bg.
func rootFrame(fg, bg int32) frame {
	return frame{fg: [2]int32{fg, fg}, bg: [2]int32{bg, bg}}
}

// visible computes the frame of element n (a child of the top of the
// stack) and whether it is rendered at all. It leaves the attributes of n
// in wk.scan.
func (wk *walker) visible(n *html.Node) (frame, bool) {
	if n.Namespace == "math" {
		if mathSkip[n.Data] || n.Parent != nil && n.Parent.Data == "maction" && n.Parent.Namespace == "math" && !firstElement(n) {
			return frame{}, false
		}
	} else if n.Namespace != "" || skipAtoms[n.DataAtom] {
		return frame{}, false
	}
	wk.scanAttrs(n)
	s := &wk.scan
	p := wk.top()
	if s.hard || n.DataAtom == atom.Dialog && !s.open || p.closed && !firstSummary(n) {
		return frame{}, false
	}
	f := frame{soft: p.soft, closed: n.DataAtom == atom.Details && !s.open}
	var cp colorPick
	if s.color != "" {
		if c := parseColor(strings.ToLower(strings.TrimSpace(s.color))); c != colUnknown {
			offer(&cp.fg, c, rank(tierAttr, 0, 0), false)
		}
	}
	if s.bgcolor != "" {
		if c := parseColor(strings.ToLower(strings.TrimSpace(s.bgcolor))); c >= 0 {
			offer(&cp.bg, c, rank(tierAttr, 0, 0), false)
		}
	}
	var st style
	if s.style != "" {
		st = evalStyle(s.style)
		if st.set&hideHard != 0 {
			return frame{}, false
		}
		f.soft = f.soft&^st.clear | st.set&(hideFont|hideVis)
		if st.fg != colNone {
			offer(&cp.fg, st.fg, rank(tierOf(st.fgImp, false, true), 0, 0), false)
		}
		if st.bg != colNone {
			offer(&cp.bg, st.bg, rank(tierOf(st.bgImp, false, true), 0, 0), false)
		}
	}
	toggle, eff := wk.sheet.effect(&wk.info, &cp)
	if toggle != 0 && !(wk.script && eff == 0 && st.set&^hideFixed == 0 && wk.pageLevel(n)) {
		eff |= toggle
	}
	if eff&hideHard != 0 || (eff|st.set)&hidePartial == hidePartial {
		return frame{}, false
	}
	cp.apply(&f, p)
	if (eff|st.set)&hideColor != 0 {
		// Transparent text stays hidden whatever else sets a colour.
		f.fg = [2]int32{colTransparent, colTransparent}
	}
	f.soft |= eff & (hideFont | hideVis)
	f.hidden = f.soft != 0 || f.closed || f.colorHidden()
	return f, true
}

// firstElement reports whether n is the first element child of its parent.
func firstElement(n *html.Node) bool {
	for c := n.PrevSibling; c != nil; c = c.PrevSibling {
		if c.Type == html.ElementNode {
			return false
		}
	}
	return true
}

// firstSummary reports whether n is the first <summary> child of its
// parent (the one a closed <details> shows).
func firstSummary(n *html.Node) bool {
	if n.DataAtom != atom.Summary || n.Parent == nil {
		return false
	}
	for c := n.Parent.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode && c.DataAtom == atom.Summary && c.Namespace == "" {
			return c == n
		}
	}
	return false
}

// pageLevel reports whether element n, which the page's style sheets
// hide by display, visibility or opacity alone, is the whole page (html
// or body) or the wrapper of most of its text: frame-busters
// (html{display:none}), anti-flicker snippets (body{visibility:hidden}) and
// pages that fade their content in (#app{opacity:0} until a class shows
// it) hide themselves that way until their script runs, and would come
// back empty. Such a hide is not obeyed; a warning says so. Only called
// on pages with scripts.
func (wk *walker) pageLevel(n *html.Node) bool {
	level := ""
	switch {
	case n.DataAtom == atom.Html || n.DataAtom == atom.Body:
		level = n.Data
	default:
		body := n
		for body != nil && body.DataAtom != atom.Body {
			body = body.Parent
		}
		if body == nil {
			return false
		}
		if wk.shown >= maxShown {
			return false
		}
		own, all := wk.textUnder(n), wk.textUnder(body)
		if own < minWrapperText || own*10 < all*6 {
			return false
		}
		level = "wrapper"
	}
	wk.shown++
	msg := "the page's style sheet hides its " + level + " element until the page's script shows it; it is shown here as after the script (hidden elements inside stay hidden)"
	if level == "wrapper" {
		msg = "the page's style sheet hides the element that holds most of its text until the page's script shows it; it is shown here as after the script (hidden elements inside stay hidden)"
	}
	wk.warn(WarnPageHidden, msg)
	return true
}

// minWrapperText is the text, in bytes, that a wrapper must hold to be
// taken for the page's content by pageLevel; maxShown bounds the wrappers
// shown (each costs a walk of its subtree).
const (
	minWrapperText = 200
	maxShown       = 8
)

// textUnder returns the bytes of text under n, but in script, style and
// template elements.
func (wk *walker) textUnder(n *html.Node) int {
	if t, ok := wk.textSize[n]; ok {
		return t
	}
	t := 0
	for c := n; c != nil; {
		skip := c.Type == html.ElementNode && (c.DataAtom == atom.Script || c.DataAtom == atom.Style || c.DataAtom == atom.Template)
		if c.Type == html.TextNode {
			t += len(strings.TrimSpace(c.Data))
		}
		c = next(c, n, !skip)
	}
	if wk.textSize == nil {
		wk.textSize = map[*html.Node]int{}
	}
	wk.textSize[n] = t
	return t
}

// warn adds a warning, once per code.
func (wk *walker) warn(code, msg string) {
	for _, w := range wk.warnings {
		if w.Code == code {
			return
		}
	}
	wk.warnings = append(wk.warnings, Warning{Code: code, Message: msg})
}

// context computes the frame of ancestor a of a selected element.
func (wk *walker) context(a *html.Node) (frame, bool) {
	f, ok := wk.visible(a)
	if !ok || a.DataAtom == atom.Head {
		return frame{}, false
	}
	return f, true
}

// enter handles the start of node n and reports whether its children are
// to be visited (then exit(n) follows).
func (wk *walker) enter(n *html.Node) bool {
	w := &wk.w
	switch n.Type {
	case html.TextNode:
		if !wk.top().hidden && (wk.keep == nil || wk.keep[n] || isSpace(n.Data)) {
			if wk.seen != nil {
				wk.seen[n] = true
			}
			w.text(n.Data)
		}
		return false
	case html.DocumentNode:
		f := *wk.top()
		f.act = actNone
		wk.stack = append(wk.stack, f)
		return true
	case html.ElementNode:
	default:
		return false // comments, doctype
	}
	f, ok := wk.visible(n)
	if !ok {
		return false
	}
	if wk.seen != nil {
		wk.seen[n] = true
	}
	if wk.keep != nil && !wk.keep[n] && n.DataAtom != atom.Br {
		// Holds nothing of the main content. (Line breaks are kept:
		// the extractor turns runs of them into paragraphs.)
		return false
	}
	s := &wk.scan
	if n.Namespace == "math" {
		wk.mathEnter(n, &f)
		wk.stack = append(wk.stack, f)
		return true
	}
	switch n.DataAtom {
	case atom.Br:
		if !f.hidden {
			w.br()
		}
		return false
	case atom.Wbr:
		return false
	case atom.Img:
		if !f.hidden && s.hasAlt {
			if alt := collapse(s.alt, maxAlt); alt != "" {
				w.literal("[image: ")
				w.text(alt)
				w.literal("]")
			}
		}
		return false
	case atom.Hr:
		w.block(2)
		if w.md && w.inline == 0 && !w.pre {
			w.literal("* * *")
			w.block(2)
		}
		return false
	case atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6:
		f.level = uint8(n.Data[1] - '0')
		w.block(2)
		if w.md && w.inline == 0 && !w.pre {
			f.act = actHeading
			w.beginCapture(false, false)
			w.inline++
		} else {
			f.act = actBlock2
		}
	case atom.Ul, atom.Ol, atom.Menu, atom.Dir:
		f.act = actList
		l := listState{ordered: n.DataAtom == atom.Ol}
		if l.ordered && s.start != "" {
			if v, err := strconv.Atoi(strings.TrimSpace(s.start)); err == nil && v > -1e6 && v < 1e6 {
				l.n = v - 1
			}
		}
		wk.lists = append(wk.lists, l)
		if len(wk.lists) > 1 {
			w.block(1)
		} else {
			w.block(2)
		}
	case atom.Li:
		f.act = actItem
		f.prefix = len(w.prefix)
		w.block(1)
		if w.inline == 0 && !w.pre {
			marker := "- "
			if k := len(wk.lists); k > 0 && wk.lists[k-1].ordered {
				wk.lists[k-1].n++
				marker = strconv.Itoa(wk.lists[k-1].n) + ". "
			}
			w.setMarker(marker)
		}
	case atom.Blockquote:
		f.act = actQuote
		f.prefix = len(w.prefix)
		w.block(2)
		if w.md && w.inline == 0 && !w.pre && len(w.prefix) < maxPrefix {
			w.prefix = append(w.prefix, "> "...)
		}
	case atom.Pre, atom.Xmp, atom.Listing, atom.Plaintext:
		if w.inline == 0 && !w.pre && !w.raw {
			f.act = actPre
			w.beginCapture(true, true)
		} else {
			f.act = actBlock1
		}
	case atom.Code, atom.Kbd, atom.Samp, atom.Tt:
		if w.md && !w.raw {
			f.act = actCode
			w.beginCapture(false, true)
			w.inline++
		}
	case atom.A:
		if wk.full && !w.raw && s.href != "" && len(wk.links) < maxLinks {
			if u := linkTarget(s.href, wk.base); u != "" {
				f.href = u
				if w.md {
					f.act = actLinkMD
					w.beginCapture(false, false)
					w.inline++
				} else {
					f.act = actLinkText
					f.mark = len(w.buf)
				}
			}
		}
	case atom.Table:
		if w.inline > 0 || w.pre || layoutTable(n, s.role) {
			f.act = actBlock1
			w.block(1)
			break
		}
		f.act = actTable
		wk.tables = append(wk.tables, tableState{node: n})
		w.block(2)
	case atom.Tr:
		if len(wk.tables) == 0 || w.inline > 0 || w.pre || tableOf(n) != wk.tables[len(wk.tables)-1].node {
			f.act = actBlock1
			w.block(1)
			break
		}
		f.act = actRow
		t := &wk.tables[len(wk.tables)-1]
		t.cells, t.filled = 0, 0
		w.beginCapture(false, false)
		w.inline++
	case atom.Td, atom.Th:
		if len(wk.tables) == 0 || n.Parent == nil || n.Parent.DataAtom != atom.Tr || wk.stack[len(wk.stack)-1].act != actRow {
			f.act = actBlock1
			w.block(1)
			break
		}
		f.act = actCell
		t := &wk.tables[len(wk.tables)-1]
		if t.cells > 0 {
			w.sep(" | ")
		}
		t.cells++
		f.mark = len(w.buf)
	default:
		if b := blockAtoms[n.DataAtom]; b > 0 {
			f.act = action(b) // actBlock1 or actBlock2
			w.block(int(b))
		}
	}
	wk.stack = append(wk.stack, f)
	return true
}

// maxPrefix caps the indentation of nested lists and quotes.
const maxPrefix = 40

// tableOf returns the table element a row belongs to, or nil.
func tableOf(tr *html.Node) *html.Node {
	p := tr.Parent
	if p != nil && (p.DataAtom == atom.Tbody || p.DataAtom == atom.Thead || p.DataAtom == atom.Tfoot) {
		p = p.Parent
	}
	if p != nil && p.DataAtom == atom.Table {
		return p
	}
	return nil
}

// layoutTable guesses that a table is used for page layout rather than
// data: role=presentation, or a cell holding a heading, a table, a form,
// a sectioning element or several blocks. Such tables are rendered as
// blocks instead of rows of cells.
func layoutTable(t *html.Node, role string) bool {
	if role == "presentation" || role == "none" {
		return true
	}
	seen := 0
	for sec := t.FirstChild; sec != nil; sec = sec.NextSibling {
		rows := sec
		if sec.DataAtom == atom.Tr {
			rows = t
		} else if sec.DataAtom != atom.Tbody && sec.DataAtom != atom.Thead && sec.DataAtom != atom.Tfoot {
			continue
		}
		for tr := rows.FirstChild; tr != nil; tr = tr.NextSibling {
			if tr.DataAtom != atom.Tr {
				continue
			}
			for td := tr.FirstChild; td != nil; td = td.NextSibling {
				blocks := 0
				for c := td.FirstChild; c != nil; c = c.NextSibling {
					if seen++; seen > 2000 {
						return false
					}
					switch c.DataAtom {
					case atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6, atom.Table,
						atom.Form, atom.Section, atom.Article, atom.Nav, atom.Header,
						atom.Footer, atom.Main, atom.Aside:
						return true
					case atom.P, atom.Div, atom.Ul, atom.Ol, atom.Dl, atom.Pre, atom.Blockquote:
						if blocks++; blocks > 1 {
							return true
						}
					}
				}
			}
		}
		if rows == t {
			break
		}
	}
	return false
}

// exit handles the end of the element whose frame is on top of the stack.
func (wk *walker) exit() {
	f := wk.stack[len(wk.stack)-1]
	wk.stack = wk.stack[:len(wk.stack)-1]
	w := &wk.w
	switch f.act {
	case actBlock1:
		w.block(1)
	case actBlock2:
		w.block(2)
	case actHeading:
		content, _ := w.endCapture()
		w.inline--
		if c := bytes.TrimSpace(content); len(c) > 0 {
			w.block(2)
			w.literal("######"[:f.level] + " ")
			w.buf = append(w.buf, c...)
			w.block(2)
		}
	case actList:
		wk.lists = wk.lists[:len(wk.lists)-1]
		if len(wk.lists) > 0 {
			w.block(1)
		} else {
			w.block(2)
		}
	case actItem:
		if w.marker != "" {
			w.marker = "" // empty item
		}
		w.prefix = w.prefix[:f.prefix]
		w.block(1)
	case actQuote:
		w.prefix = w.prefix[:f.prefix]
		w.block(2)
	case actPre:
		content, _ := w.endCapture()
		w.codeBlock(content)
	case actCode:
		content, sp := w.endCapture()
		w.inline--
		w.inlineCode(content)
		if sp {
			w.space, w.pend = true, true
		}
	case actLinkMD:
		content, sp := w.endCapture()
		w.inline--
		if len(bytes.TrimSpace(content)) > 0 {
			w.literal("[")
			w.buf = append(w.buf, content...)
			w.literal("](" + f.href + ")")
			wk.linkNumber(f.href)
		}
		if sp {
			w.space, w.pend = true, true
		}
	case actLinkText:
		if len(w.buf) > f.mark {
			num := wk.linkNumber(f.href)
			w.space, w.pend = true, true
			w.literal("[" + strconv.Itoa(num) + "]")
		}
	case actTable:
		wk.tables = wk.tables[:len(wk.tables)-1]
		w.block(2)
	case actRow:
		content, _ := w.endCapture()
		w.inline--
		t := &wk.tables[len(wk.tables)-1]
		if t.filled == 0 {
			break
		}
		w.block(1)
		if w.md {
			w.literal("| ")
			w.buf = append(w.buf, content...)
			w.literal(" |")
			if t.rows == 0 {
				t.cols = t.cells
				w.buf = append(w.buf, '\n')
				w.buf = append(w.buf, w.prefix...)
				w.literal("|" + strings.Repeat(" --- |", t.cols))
			}
		} else {
			w.literal(string(bytes.TrimSpace(content)))
		}
		t.rows++
		w.block(1)
	case actCell:
		if len(w.buf) > f.mark {
			wk.tables[len(wk.tables)-1].filled++
		}
	case actClose:
		w.text(")")
	case actMathSpace:
		w.space, w.pend = true, true
	}
}

// linkNumber returns the number of a link target, adding it to the list.
func (wk *walker) linkNumber(u string) int {
	if wk.linkNum == nil {
		wk.linkNum = make(map[string]int)
	}
	if n, ok := wk.linkNum[u]; ok {
		return n
	}
	wk.links = append(wk.links, u)
	wk.linkNum[u] = len(wk.links)
	return len(wk.links)
}

// finish returns the output: lines without trailing white space and, in
// text format with full links, the numbered list of link targets.
func (wk *walker) finish() string {
	buf := wk.w.buf
	out := ""
	if bytes.Contains(buf, []byte(" \n")) || bytes.Contains(buf, []byte("\t\n")) {
		out = trimLines(buf)
	} else {
		out = strings.TrimRight(string(bytes.TrimRight(buf, " \t")), "\n")
	}
	if len(wk.links) > 0 && !wk.w.md {
		var lb strings.Builder
		lb.WriteString(out)
		lb.WriteString("\n\nLinks:")
		for i, u := range wk.links {
			lb.WriteString("\n[")
			lb.WriteString(strconv.Itoa(i + 1))
			lb.WriteString("] ")
			lb.WriteString(u)
		}
		out = lb.String()
	}
	return out
}

// trimLines removes trailing white space from every line.
func trimLines(buf []byte) string {
	var b strings.Builder
	b.Grow(len(buf))
	for line := range bytes.Lines(buf) {
		end := bytes.HasSuffix(line, []byte{'\n'})
		line = bytes.TrimRight(line, " \t\n")
		b.Write(line)
		if end {
			b.WriteByte('\n')
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// MathML elements that show nothing: annotations (another encoding of the
// formula), mphantom (invisible by definition) and layout markers.
var mathSkip = map[string]bool{
	"annotation": true, "annotation-xml": true, "mphantom": true, "none": true,
	"mprescripts": true, "mspace": true, "mglyph": true, "maligngroup": true, "malignmark": true,
}

// mathScripts are the MathML elements whose children are written with a
// separator before each but the first: x^2, x_i, a/b, root(x, n).
var mathScripts = map[string][]string{
	"msup": {"", "^"}, "msub": {"", "_"}, "msubsup": {"", "_", "^"}, "mfrac": {"", "/"},
	"mroot": {"", ", "}, "munder": {"", "_"}, "mover": {"", "^"}, "munderover": {"", "_", "^"},
}

// mathEnter writes MathML as one line of text: token elements (mi, mn,
// mo, mtext) as they are, scripts and fractions with ^, _ and /,
// parentheses around groups of several parts, roots as √(x) and
// root(x, n); display="block" makes a line of its own. maction shows its
// first child only, as a browser does.
func (wk *walker) mathEnter(n *html.Node, f *frame) {
	w := &wk.w
	out := !f.hidden
	if n.Data == "math" {
		for _, a := range n.Attr {
			if a.Key == "display" && strings.EqualFold(strings.TrimSpace(a.Val), "block") {
				f.act = actBlock1
				w.block(1)
			}
		}
		return
	}
	p := n.Parent
	if p == nil || p.Namespace != "math" {
		return
	}
	k := 0
	for c := p.FirstChild; c != nil && c != n; c = c.NextSibling {
		if c.Type == html.ElementNode {
			k++
		}
	}
	if seps, ok := mathScripts[p.Data]; ok && out {
		if k < len(seps) && seps[k] != "" {
			w.text(seps[k])
		}
		if mathGroup(n) {
			w.text("(")
			f.act = actClose
		}
	}
	switch n.Data {
	case "msqrt":
		if out {
			w.text("√(")
			f.act = actClose
		}
	case "mroot":
		if out {
			w.text("root(")
			f.act = actClose
		}
	case "mtext", "mtd", "mtr":
		w.space, w.pend = true, true
		f.act = actMathSpace
	}
}

// mathGroup reports whether a MathML element is made of several parts
// (and needs parentheses as a script or a fraction's part).
func mathGroup(n *html.Node) bool {
	switch n.Data {
	case "mi", "mn", "mo", "mtext", "ms", "msqrt", "mroot":
		return false
	}
	parts := 0
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode {
			if parts++; parts > 1 {
				return true
			}
		}
	}
	return false
}
