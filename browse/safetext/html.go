package safetext

import (
	"bytes"
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
}

// ErrInvalidOption is matched (errors.Is) by every error about Options:
// an unknown Format or Links value, a negative MaxOutput, or a bad
// Selector. The HTTP API maps it to a 400 validation error.
var ErrInvalidOption = errors.New("safetext: invalid option")

// ErrSelector is matched (errors.Is) by errors about Options.Selector.
var ErrSelector = errors.New("safetext: invalid selector")

// OptionError reports an invalid Options field.
type OptionError struct {
	Field string // "Format", "Links", "MaxOutput"
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
func (o *Options) check() (md, full bool, err error) {
	switch o.Format {
	case "", "text":
	case "markdown":
		md = true
	default:
		return false, false, &OptionError{Field: "Format", Value: o.Format}
	}
	switch o.Links {
	case "", "none", "text":
	case "full":
		full = true
	default:
		return false, false, &OptionError{Field: "Links", Value: o.Links}
	}
	if o.MaxOutput < 0 {
		return false, false, &OptionError{Field: "MaxOutput", Value: strconv.Itoa(o.MaxOutput)}
	}
	return md, full, nil
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
	md, full, err := opts.check()
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
	title, css, extCSS := prepass(doc)
	if deep {
		css = cutCSS // the styles of the whole document, not only the prefix
	}
	// Without external style sheets and without backgrounds in the page's
	// own styles, the background is the browser's white: white text is
	// invisible. Otherwise the background is unknown unless set inline.
	bg := int32(colUnknown)
	if !extCSS && !mentions(css, "background", "@import") {
		bg = 0xffffff
	}

	wk := walker{full: full, base: opts.BaseURL, sheet: builtinSheet}
	if len(css) > 0 {
		wk.sheet = newSheet()
		for _, c := range css {
			wk.sheet.parseCSS(c)
		}
	}
	wk.w.init(md, limit)
	wk.w.buf = getBuf(min(len(data)/2, limit) + 1024)
	if sel == nil {
		wk.walk(doc, frame{fg: colUnknown, bg: bg})
	} else {
		wk.selected(doc, sel, bg)
	}

	text := wk.finish()
	putBuf(wk.w.buf)
	putBuf(data)
	page := Page{
		Title:     neutralize(collapse(title, maxTitle)),
		Truncated: deep || wk.w.full,
		Links:     wk.links,
	}
	text = neutralize(text)
	if len(text) > limit {
		text, page.Truncated = cutUTF8(text, limit), true
	}
	page.Text = text
	return page, nil
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
// naively), and the text of every <style> element.
func depthCuts(data []byte, limits []int) (cuts []int, css []string) {
	cuts = make([]int, len(limits))
	for i := range cuts {
		cuts[i] = len(data)
	}
	z := html.NewTokenizer(bytes.NewReader(data))
	depth, off, inStyle, total := 0, 0, false, 0
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			return cuts, css
		}
		raw := len(z.Raw())
		switch tt {
		case html.StartTagToken, html.SelfClosingTagToken:
			name, _ := z.TagName()
			a := atom.Lookup(name)
			inStyle = a == atom.Style
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
			if inStyle && total < maxStyleText {
				t := string(z.Text())
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

// mentions reports whether any of the style sheets contains one of words
// (ASCII case-insensitively).
func mentions(css []string, words ...string) bool {
	for _, c := range css {
		c = strings.ToLower(c)
		for _, w := range words {
			if strings.Contains(c, w) {
				return true
			}
		}
	}
	return false
}

// prepass finds the title, the text of the style elements (HTML and SVG
// ones; those inside <template> are inert and skipped) and whether the page
// links an external style sheet.
func prepass(doc *html.Node) (title string, css []string, extCSS bool) {
	total := 0
	foundTitle := false
	for n := doc; n != nil; {
		descend := true
		if n.Type == html.ElementNode {
			switch {
			case n.DataAtom == atom.Template:
				descend = false
			case n.DataAtom == atom.Style && (n.Namespace == "" || n.Namespace == "svg"):
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					if c.Type == html.TextNode && total < maxStyleText {
						total += len(c.Data)
						css = append(css, c.Data)
					}
				}
				descend = false
			case n.DataAtom == atom.Link && n.Namespace == "":
				for _, a := range n.Attr {
					if a.Key == "rel" && strings.Contains(strings.ToLower(a.Val), "stylesheet") {
						extCSS = true
					}
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
	return title, css, extCSS
}

// selected renders the elements matched by sel (outermost matches only),
// each in the context of its ancestors: a match inside a hidden or dropped
// element stays dropped.
func (wk *walker) selected(doc *html.Node, sel cascadia.Selector, bg int32) {
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
		wk.stack = append(wk.stack[:0], frame{fg: colUnknown, bg: bg})
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
		wk.armSiblings(n)
		ctx := wk.stack[len(wk.stack)-1]
		ctx.act = actNone
		wk.w.block(2)
		wk.walk(n, ctx)
		wk.w.block(2)
	}
}
