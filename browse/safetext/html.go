package safetext

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/PuerkitoBio/goquery"
	"github.com/andybalholm/cascadia"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// DefaultMaxOutput is the output cap when Options.MaxOutput is 0.
const DefaultMaxOutput = 1 << 20

// Other limits.
const (
	maxTitle    = 300  // runes of Page.Title
	maxAlt      = 100  // runes of image alt text
	maxSelector = 1024 // bytes of Options.Selector
	// maxDepth bounds the element depth that is walked. x/net/html
	// refuses documents whose open-element stack exceeds 512; see parse.
	maxDepth = 600
)

// Options control HTML.
type Options struct {
	// Format is "text" (the default when empty) or "markdown".
	Format string
	// Links is "none", "text" (the default when empty) or "full". With
	// none and text only the link text is kept. With full, link targets
	// are kept too: in text, each link is followed by a number and the
	// numbered list of targets ends the output; in Markdown, links are
	// written [text](target). Targets are http(s) only, resolved against
	// BaseURL, without query string or fragment. Page.Links lists them.
	Links string
	// Selector, a CSS selector, keeps only the elements it matches (and
	// what is in them). Hidden elements stay dropped even when matched.
	Selector string
	// BaseURL resolves relative links (usually the final URL of the page).
	// Without it, relative links are dropped in full mode.
	BaseURL *url.URL
	// MaxOutput caps Page.Text in bytes; 0 means DefaultMaxOutput.
	MaxOutput int
	// Content is "full" (the default when empty): the whole visible page,
	// or "main": only its main content (see the package documentation).
	// "main" cannot be combined with Selector.
	Content string
}

// Page is the safe text of an HTML document.
type Page struct {
	// Title is the text of the first <title> element: cleaned, white
	// space collapsed, markers neutralised, at most 300 characters. It is
	// page-controlled text like the rest.
	Title string
	// Text is the visible text, in the requested format.
	Text string
	// Truncated reports that Text was cut at MaxOutput, or that the
	// document was nested too deeply and content after that point was
	// ignored.
	Truncated bool
	// Links are the link targets in full mode, numbered from 1 in order.
	Links []string
	// Content is what Text holds: "full" (the whole visible page, or the
	// parts Selector chose) or "main" (the main content). With
	// Options.Content "main" it is "full" when no main content was found
	// or the choice looked too thin; a warning then says so.
	Content string
	// Words counts the words of Text; OmittedWords, with Options.Content
	// "main", the visible words of the page that Text leaves out.
	Words, OmittedWords int
	// Warnings say where the text may differ from what a reader sees.
	// They are sandboxd's words: they hold no text of the page.
	Warnings []Warning
}

// Warning is a remark about a converted page: a stable code and a
// message in sandboxd's words (never the page's).
type Warning struct {
	Code    string
	Message string
}

// Warning codes.
const (
	// WarnPageHidden: the page's style sheet hides the whole page (html,
	// body, or the wrapper of most of its text) until its script shows it;
	// it was shown.
	WarnPageHidden = "PAGE_HIDDEN_UNTIL_SCRIPT"
	// WarnMainFallback: Options.Content was "main" but no main content was
	// found, or the choice looked too thin: the whole page was returned.
	WarnMainFallback = "MAIN_CONTENT_FALLBACK"
)

// ErrInvalidOption is matched (errors.Is) by every error about Options:
// an unknown Format or Links value, a negative MaxOutput, or a bad
// Selector. The HTTP API maps it to a 400 validation error.
var ErrInvalidOption = errors.New("safetext: invalid option")

// ErrSelector is matched (errors.Is) by errors about Options.Selector.
var ErrSelector = errors.New("safetext: invalid selector")

// OptionError reports an invalid Options field.
type OptionError struct {
	Field string // "Format", "Links", "MaxOutput", "Content"
	Value string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("safetext: invalid %s %q", e.Field, e.Value)
}

// Is makes errors.Is(err, ErrInvalidOption) true.
func (e *OptionError) Is(target error) bool { return target == ErrInvalidOption }

// SelectorError reports a selector that cannot be parsed.
type SelectorError struct {
	Selector string
	Err      error // the parser's error, nil when the selector is too long
}

func (e *SelectorError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("safetext: invalid selector: longer than %d bytes", maxSelector)
	}
	return fmt.Sprintf("safetext: invalid selector %q: %v", e.Selector, e.Err)
}

// Is makes errors.Is true for ErrSelector and ErrInvalidOption.
func (e *SelectorError) Is(target error) bool {
	return target == ErrSelector || target == ErrInvalidOption
}

func (e *SelectorError) Unwrap() error { return e.Err }

// check validates the options.
func (o *Options) check() (md, full, main bool, err error) {
	switch o.Format {
	case "", "text":
	case "markdown":
		md = true
	default:
		return false, false, false, &OptionError{Field: "Format", Value: o.Format}
	}
	switch o.Links {
	case "", "none", "text":
	case "full":
		full = true
	default:
		return false, false, false, &OptionError{Field: "Links", Value: o.Links}
	}
	if o.MaxOutput < 0 {
		return false, false, false, &OptionError{Field: "MaxOutput", Value: strconv.Itoa(o.MaxOutput)}
	}
	switch o.Content {
	case "", "full":
	case "main":
		if strings.TrimSpace(o.Selector) != "" {
			return false, false, false, &OptionError{Field: "Content", Value: o.Content + " with a selector"}
		}
		main = true
	default:
		return false, false, false, &OptionError{Field: "Content", Value: o.Content}
	}
	return md, full, main, nil
}

// compileSelector parses Options.Selector.
func compileSelector(s string) (cascadia.Selector, error) {
	if len(s) > maxSelector {
		return nil, &SelectorError{Selector: s[:64] + "...", Err: nil}
	}
	sel, err := cascadia.Compile(s)
	if err != nil {
		return nil, &SelectorError{Selector: s, Err: err}
	}
	// :has() searches the subtree of every element: quadratic on large
	// pages.
	if strings.Contains(strings.ToLower(s), ":has(") {
		return nil, &SelectorError{Selector: s, Err: errors.New(":has() is not supported")}
	}
	return sel, nil
}

// HTML reads an HTML document (already decoded to UTF-8) and returns its
// visible text, stripped of everything that a reader of the rendered page
// would not see and of everything that could steer or exfiltrate through
// a model. See the package documentation for what is dropped and kept.
// The only errors are invalid options (matching ErrInvalidOption) and
// errors reading r.
func HTML(r io.Reader, opts Options) (Page, error) {
	md, full, main, err := opts.check()
	if err != nil {
		return Page{}, err
	}
	var sel cascadia.Selector
	if strings.TrimSpace(opts.Selector) != "" {
		if sel, err = compileSelector(opts.Selector); err != nil {
			return Page{}, err
		}
	}
	data, err := readAll(r)
	if err != nil {
		return Page{}, err
	}
	limit := opts.MaxOutput
	if limit == 0 {
		limit = DefaultMaxOutput
	}

	doc, cutCSS, deep := parse(data)
	size := len(data)
	putBuf(data)
	title, css, extCSS, script := prepass(doc)
	if deep {
		css = cutCSS // the styles of the whole document, not only the prefix
	}
	sh := builtinSheet
	if len(css) > 0 {
		sh = newSheet()
		sh.doc = doc
		if sh.fold = quirks(doc); sh.fold {
			foldDoc(doc)
		}
		for _, c := range css {
			sh.parseCSS(c)
		}
		extCSS = extCSS || sh.external
	}
	// Without external style sheets the canvas is the browser's white and
	// text is black (the page's own rules may paint them otherwise;
	// colorPick sees those). With one, both are unknown unless the page's
	// own styles set them.
	root := rootFrame(colUnknown, colUnknown)
	if !extCSS {
		root = rootFrame(0, 0xffffff)
	}
	conv := converter{doc: doc, sel: sel, root: root, size: size,
		proto: walker{full: full, base: opts.BaseURL, sheet: sh, script: script}, md: md, limit: limit}

	page := Page{Title: neutralize(collapse(title, maxTitle)), Content: "full"}
	var out rendered
	if main {
		out = conv.main(&page)
	} else {
		out = conv.render(nil, nil)
	}
	page.Truncated = deep || out.truncated
	page.Links = out.links
	page.Warnings = append(out.warnings, page.Warnings...)
	text := neutralize(out.text)
	if len(text) > limit {
		text, page.Truncated = cutUTF8(text, limit), true
	}
	page.Text = text
	page.Words = countWords(text)
	return page, nil
}

// converter renders one parsed page, once or (for the main content) more.
type converter struct {
	doc   *html.Node
	sel   cascadia.Selector
	root  frame
	proto walker // the options and the sheet
	md    bool
	limit int
	size  int // bytes of the page
}

// rendered is the output of one walk of the page.
type rendered struct {
	text      string
	truncated bool
	links     []string
	warnings  []Warning
}

// render walks the page and returns its text: all of it, or only the
// nodes in keep; seen, when set, collects the elements entered and the
// text nodes written.
func (c *converter) render(keep, seen map[*html.Node]bool) rendered {
	wk := c.proto
	wk.keep, wk.seen = keep, seen
	wk.w.init(c.md, c.limit)
	wk.w.buf = getBuf(min(c.size/2, c.limit) + 1024)
	if c.sel == nil {
		wk.walk(c.doc, c.root)
	} else {
		wk.selected(c.doc, c.sel, c.root)
	}
	text := wk.finish()
	putBuf(wk.w.buf)
	return rendered{text: text, truncated: wk.w.full, links: wk.links, warnings: wk.warnings}
}

// foldDoc lower-cases the class and id attributes of every element, so
// that selectors (folded too) match them case-insensitively, as on a
// quirks mode page.
func foldDoc(doc *html.Node) {
	for n := doc; n != nil; n = next(n, doc, true) {
		if n.Type != html.ElementNode {
			continue
		}
		for i := range n.Attr {
			if a := &n.Attr[i]; a.Namespace == "" && (a.Key == "class" || a.Key == "id") {
				foldAttr(a)
			}
		}
	}
}

// readAll is io.ReadAll into a pooled buffer, sized at once when r knows
// its length (strings.Reader, bytes.Reader, bytes.Buffer).
func readAll(r io.Reader) ([]byte, error) {
	n := 64 << 10
	if l, ok := r.(interface{ Len() int }); ok {
		n = l.Len() + 1
	}
	b := getBuf(n)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// Buffers for the input and the output are reused across calls; the
// parse tree and the results never point into them.
var bufPool sync.Pool // of *[]byte

const maxPooledBuf = 8 << 20

func getBuf(n int) []byte {
	if p, ok := bufPool.Get().(*[]byte); ok && cap(*p) >= n {
		return (*p)[:0]
	}
	return make([]byte, 0, n)
}

func putBuf(b []byte) {
	if cap(b) > 0 && cap(b) <= maxPooledBuf {
		bufPool.Put(&b)
	}
}

// parse parses data. x/net/html refuses documents whose stack of open
// elements grows beyond 512; for those the longest prefix that parses,
// cut where the tag nesting first exceeds a depth, is used instead (deep
// is set), and css returns the style sheets of the whole document so that
// rules placed after the cut still hide what they hide.
func parse(data []byte) (doc *html.Node, css []string, deep bool) {
	doc, err := html.Parse(bytes.NewReader(data))
	if err == nil {
		return doc, nil, false
	}
	cuts, css := depthCuts(data, []int{500, 400, 256, 128, 32})
	for _, cut := range cuts {
		if doc, err = html.Parse(bytes.NewReader(data[:cut])); err == nil {
			return doc, css, true
		}
	}
	return &html.Node{Type: html.DocumentNode}, css, true
}

// depthCuts returns, for each limit, the offset of the first tag that
// opens an element deeper than the limit (counting start and end tags
// naively), and the page's style sheets (see prepass).
func depthCuts(data []byte, limits []int) (cuts []int, css []string) {
	cuts = make([]int, len(limits))
	for i := range cuts {
		cuts[i] = len(data)
	}
	z := html.NewTokenizer(bytes.NewReader(data))
	depth, off, total := 0, 0, 0
	inStyle, media, skipStyle := false, "", false
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			return cuts, css
		}
		raw := len(z.Raw())
		switch tt {
		case html.StartTagToken, html.SelfClosingTagToken:
			name, more := z.TagName()
			a := atom.Lookup(name)
			inStyle = a == atom.Style
			if a == atom.Style || a == atom.Link {
				var attrs []html.Attribute
				for more {
					var k, v []byte
					k, v, more = z.TagAttr()
					attrs = append(attrs, html.Attribute{Key: string(k), Val: string(v)})
				}
				if a == atom.Style {
					media, skipStyle = sheetMedia(attrs)
				} else if c, _ := linkSheet(attrs); c != "" && total < maxStyleText {
					total += len(c)
					css = append(css, c)
				}
			}
			if !voidElements[a] {
				depth++
				for i, l := range limits {
					if depth > l && cuts[i] == len(data) {
						cuts[i] = off
					}
				}
			}
		case html.EndTagToken:
			inStyle = false
			if depth > 0 {
				depth--
			}
		case html.TextToken:
			if inStyle && !skipStyle && total < maxStyleText {
				t := withMedia(string(z.Text()), media)
				total += len(t)
				css = append(css, t)
			}
		}
		off += raw
	}
}

var voidElements = map[atom.Atom]bool{
	atom.Area: true, atom.Base: true, atom.Br: true, atom.Col: true, atom.Embed: true,
	atom.Hr: true, atom.Img: true, atom.Input: true, atom.Link: true, atom.Meta: true,
	atom.Source: true, atom.Track: true, atom.Wbr: true, atom.Param: true, atom.Keygen: true,
}

// prepass finds the title, the page's style sheets in document order and
// whether the page links an external style sheet. The style sheets are
// the text of the style elements (HTML and SVG ones; those inside
// <template> are inert and skipped) and the data: URL sheets of
// <link rel=stylesheet>; a media attribute becomes an @media around the
// sheet, and sheets that are not applied (another type, disabled,
// alternate) are left out. script reports a script element.
func prepass(doc *html.Node) (title string, css []string, extCSS, script bool) {
	total := 0
	foundTitle := false
	for n := doc; n != nil; {
		descend := true
		if n.Type == html.ElementNode {
			switch {
			case n.DataAtom == atom.Template:
				descend = false
			case n.DataAtom == atom.Script:
				script = script || n.Namespace == "" && runs(n.Attr)
				descend = false
			case n.DataAtom == atom.Style && (n.Namespace == "" || n.Namespace == "svg"):
				media, skip := sheetMedia(n.Attr)
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					if c.Type == html.TextNode && total < maxStyleText && !skip {
						t := withMedia(c.Data, media)
						total += len(t)
						css = append(css, t)
					}
				}
				descend = false
			case n.DataAtom == atom.Link && n.Namespace == "":
				c, ext := linkSheet(n.Attr)
				extCSS = extCSS || ext
				if c != "" && total < maxStyleText {
					total += len(c)
					css = append(css, c)
				}
			case n.DataAtom == atom.Title && n.Namespace == "" && !foundTitle:
				foundTitle = true
				var b strings.Builder
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					if c.Type == html.TextNode {
						b.WriteString(c.Data)
					}
				}
				title = b.String()
				descend = false
			}
		}
		if descend && n.FirstChild != nil {
			n = n.FirstChild
			continue
		}
		for n != doc && n.NextSibling == nil {
			n = n.Parent
		}
		if n == doc {
			break
		}
		n = n.NextSibling
	}
	return title, css, extCSS, script
}

// runs reports whether a script element with these attributes is one a
// browser runs: JavaScript or a module, not data such as JSON-LD.
func runs(attrs []html.Attribute) bool {
	for _, a := range attrs {
		if a.Namespace == "" && a.Key == "type" {
			switch t := strings.ToLower(strings.TrimSpace(a.Val)); t {
			case "", "module", "text/javascript", "application/javascript", "text/ecmascript",
				"application/ecmascript", "text/jscript", "text/livescript", "application/x-javascript":
				return true
			default:
				return strings.HasPrefix(t, "text/javascript;")
			}
		}
	}
	return true
}

// sheetMedia reads the attributes of a <style> or <link> element: the
// media query it applies under ("" for all), and skip when it is not
// applied at all (a type other than text/css, a disabled link, a media
// attribute that cannot be a query).
func sheetMedia(attrs []html.Attribute) (media string, skip bool) {
	for _, a := range attrs {
		if a.Namespace != "" {
			continue
		}
		v := strings.ToLower(strings.TrimSpace(a.Val))
		switch a.Key {
		case "type":
			skip = skip || v != "" && v != "text/css"
		case "disabled":
			skip = true
		case "media":
			if strings.ContainsAny(v, "{};") {
				skip = true
			} else if v != "all" {
				media = v
			}
		}
	}
	return media, skip
}

// withMedia puts css under @media when the sheet has a media attribute.
func withMedia(css, media string) string {
	if media == "" {
		return css
	}
	return "@media " + media + " {\n" + css + "\n}"
}

// linkSheet reads a <link> element: for a style sheet in a data: URL its
// text (under its media attribute); external is set for a style sheet at
// any other URL, which is never fetched.
func linkSheet(attrs []html.Attribute) (css string, external bool) {
	sheetRel, href := false, ""
	for _, a := range attrs {
		switch {
		case a.Namespace != "":
		case a.Key == "rel":
			for r := range strings.FieldsSeq(strings.ToLower(a.Val)) {
				switch r {
				case "stylesheet":
					sheetRel = true
				case "alternate":
					return "", false // not applied unless chosen
				}
			}
		case a.Key == "href":
			href = a.Val
		}
	}
	if !sheetRel {
		return "", false
	}
	media, skip := sheetMedia(attrs)
	if skip {
		return "", false
	}
	text, ok := dataURL(href)
	if !ok {
		return "", true
	}
	return withMedia(text, media), false
}

// dataURL decodes a data: URL (percent-encoded or base64), as a browser
// does: without the fragment, with white space in base64 ignored. ok is
// false when u is not a data: URL or its base64 is broken.
func dataURL(u string) (string, bool) {
	u = strings.TrimSpace(u)
	if len(u) < 5 || !strings.EqualFold(u[:5], "data:") {
		return "", false
	}
	if i := strings.IndexByte(u, '#'); i >= 0 {
		u = u[:i]
	}
	comma := strings.IndexByte(u, ',')
	if comma < 0 {
		return "", false
	}
	meta, body := strings.ToLower(u[5:comma]), percentDecode(u[comma+1:])
	if !strings.HasSuffix(strings.TrimRight(meta, " "), ";base64") {
		return body, true
	}
	body = strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\f' {
			return -1
		}
		return r
	}, body)
	b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(body, "="))
	if err != nil {
		return "", false
	}
	return string(b), true
}

// percentDecode decodes %XX escapes, leaving malformed ones as they are.
func percentDecode(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			x, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			b = append(b, byte(x))
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

// quirks reports whether the document may be rendered in quirks mode,
// where class and id selectors match case-insensitively: it has no
// doctype, one not named html, or a transitional or frameset one
// (approximately the HTML standard's list).
func quirks(doc *html.Node) bool {
	for c := doc.FirstChild; c != nil; c = c.NextSibling {
		if c.Type != html.DoctypeNode {
			continue
		}
		if !strings.EqualFold(c.Data, "html") {
			return true
		}
		for _, a := range c.Attr {
			v := strings.ToLower(a.Val)
			if a.Key == "public" && (strings.Contains(v, "transitional") || strings.Contains(v, "frameset") ||
				strings.Contains(v, "html 3") || strings.Contains(v, "html 2") || strings.HasPrefix(v, "-//ietf//")) {
				return true
			}
		}
		return false
	}
	return true
}

// selected renders the elements matched by sel (outermost matches only),
// each in the context of its ancestors: a match inside a hidden or dropped
// element stays dropped.
func (wk *walker) selected(doc *html.Node, sel cascadia.Selector, root frame) {
	nodes := goquery.NewDocumentFromNode(doc).FindMatcher(sel).Nodes
	matched := make(map[*html.Node]bool, len(nodes))
	for _, n := range nodes {
		matched[n] = true
	}
	var chain []*html.Node
outer:
	for _, n := range nodes {
		if wk.w.full {
			return
		}
		chain = chain[:0]
		for p := n.Parent; p != nil; p = p.Parent {
			if matched[p] {
				continue outer
			}
			chain = append(chain, p)
		}
		// Replay the ancestors from the top to get the context of n.
		wk.stack = append(wk.stack[:0], root)
		for i := len(chain) - 1; i >= 0; i-- {
			a := chain[i]
			if a.Type != html.ElementNode {
				continue
			}
			f, ok := wk.context(a)
			if !ok {
				continue outer
			}
			wk.stack = append(wk.stack, f)
		}
		ctx := wk.stack[len(wk.stack)-1]
		ctx.act = actNone
		wk.w.block(2)
		wk.walk(n, ctx)
		wk.w.block(2)
	}
}
