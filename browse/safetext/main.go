package safetext

import (
	"strconv"
	"unicode"
	"unicode/utf8"

	"codeberg.org/readeck/go-readability/v2"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// The main content (Options.Content "main") is chosen by Readability
// (codeberg.org/readeck/go-readability, a port of Mozilla's) on a copy of
// the page that holds only what the full rendering showed, and rendered
// from the original page with every visibility rule: the extractor's own
// cleaned HTML is never rendered, since it drops the style and class
// attributes and the style sheets that hide injected text. The output is
// therefore always a part of the full output.

// Limits and thresholds of the main content.
const (
	// maxMainElems: pages with more elements (visible ones, and a wrapper
	// per text node) are not given to the extractor.
	maxMainElems = 200000
	// A choice is thin, and the whole page returned, when it has fewer
	// than 1/thinShare of the page's words, or fewer than thinWords
	// words while the page has at least twice as many.
	thinShare = 10
	thinWords = 25
)

// idKey is the attribute that numbers the nodes of the copy given to the
// extractor. The HTML parser lower-cases attribute names, so no attribute
// of the page can be taken for it.
const idKey = "SBX-ID"

// main renders the main content of the page into page (Content,
// OmittedWords, a warning on fallback) and returns it; on fallback, the
// whole page.
func (c *converter) main(page *Page) rendered {
	seen := map[*html.Node]bool{}
	all := c.render(nil, seen)
	fallback := func(why string) rendered {
		page.Warnings = append(page.Warnings, Warning{Code: WarnMainFallback, Message: why + "; the whole page is returned"})
		return all
	}
	keep, n := mainNodes(c.doc, seen)
	switch {
	case n > maxMainElems:
		return fallback("the page is too large to choose its main content")
	case keep == nil:
		return fallback("no main content was found")
	}
	m := c.render(keep, nil)
	allWords, mainWords := countWords(all.text), countWords(m.text)
	if mainWords*thinShare < allWords || mainWords < thinWords && allWords >= 2*mainWords {
		return fallback("the main content found holds " + strconv.Itoa(mainWords) + " of the page's " + strconv.Itoa(allWords) + " words, too few to stand for it")
	}
	page.Content = "main"
	page.OmittedWords = max(allWords-mainWords, 0)
	return m
}

// mainNodes asks the extractor for the main content of doc, given a copy
// of the nodes in seen, and returns the original nodes it kept (elements
// and text), or nil when it found none. n is the number of elements of
// the copy; above maxMainElems the extractor is not asked.
func mainNodes(doc *html.Node, seen map[*html.Node]bool) (keep map[*html.Node]bool, n int) {
	clone, orig := visibleCopy(doc, seen)
	if len(orig) > maxMainElems {
		return nil, len(orig)
	}
	p := readability.NewParser()
	p.DisableJSONLD = true
	art, err := p.ParseAndMutate(clone, nil)
	if err != nil || art.Node == nil {
		return nil, len(orig)
	}
	keep = map[*html.Node]bool{}
	for x := art.Node; x != nil; x = next(x, art.Node, true) {
		if x.Type != html.ElementNode {
			continue
		}
		for _, a := range x.Attr {
			if a.Key != idKey {
				continue
			}
			if i, err := strconv.Atoi(a.Val); err == nil && i >= 0 && i < len(orig) {
				keep[orig[i]] = true
			}
			break
		}
	}
	if len(keep) == 0 {
		return nil, len(orig)
	}
	headline(doc, keep, seen)
	// The ancestors of what is kept are walked (for their structure and
	// visibility); other elements are not entered.
	for x := range keep {
		for p := x.Parent; p != nil && !keep[p]; p = p.Parent {
			keep[p] = true
		}
	}
	return keep, len(orig)
}

// headline adds to keep the page's headline when the extractor left it
// out (it takes the title apart from the text): the last visible h1
// before the first text kept, when no h1 is kept.
func headline(doc *html.Node, keep, seen map[*html.Node]bool) {
	var h1 *html.Node
	for n := doc; n != nil; n = next(n, doc, true) {
		if n.Type == html.TextNode && keep[n] {
			break
		}
		if n.Type == html.ElementNode && n.DataAtom == atom.H1 && n.Namespace == "" && seen[n] {
			h1 = n
		}
	}
	if h1 == nil {
		return
	}
	for n := doc; n != nil; n = next(n, doc, true) {
		if n.Type == html.ElementNode && n.DataAtom == atom.H1 && keep[n] {
			return
		}
	}
	for n := h1; n != nil; n = next(n, h1, true) {
		if seen[n] {
			keep[n] = true
		}
	}
}

// visibleCopy copies doc with only the elements and text nodes in seen.
// Every element of the copy carries idKey, its index in orig; every text
// node that is not white space is wrapped in a span that carries the
// index of the original text node, so that the nodes the extractor keeps
// can be found however it moves, clones or rewraps them.
func visibleCopy(doc *html.Node, seen map[*html.Node]bool) (*html.Node, []*html.Node) {
	var orig []*html.Node
	stamp := func(n *html.Node) []html.Attribute {
		orig = append(orig, n)
		return []html.Attribute{{Key: idKey, Val: strconv.Itoa(len(orig) - 1)}}
	}
	clone := &html.Node{Type: html.DocumentNode}
	type item struct{ src, dst *html.Node }
	stack := []item{{doc, clone}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		// Children are appended in order; their subtrees are copied
		// after (a stack, so last child first).
		var kids []item
		for c := it.src.FirstChild; c != nil; c = c.NextSibling {
			if !seen[c] {
				if c.Type == html.TextNode && isSpace(c.Data) {
					it.dst.AppendChild(&html.Node{Type: html.TextNode, Data: c.Data})
				}
				continue
			}
			switch c.Type {
			case html.TextNode:
				if isSpace(c.Data) {
					it.dst.AppendChild(&html.Node{Type: html.TextNode, Data: c.Data})
					continue
				}
				span := &html.Node{Type: html.ElementNode, Data: "span", DataAtom: atom.Span, Attr: stamp(c)}
				span.AppendChild(&html.Node{Type: html.TextNode, Data: c.Data})
				it.dst.AppendChild(span)
			case html.ElementNode:
				attrs := append(stamp(c), c.Attr...)
				d := &html.Node{Type: html.ElementNode, Data: c.Data, DataAtom: c.DataAtom, Namespace: c.Namespace, Attr: attrs}
				it.dst.AppendChild(d)
				kids = append(kids, item{c, d})
			}
		}
		for i := len(kids) - 1; i >= 0; i-- {
			stack = append(stack, kids[i])
		}
	}
	return clone, orig
}

func isSpace(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || !asciiSpace[c] {
			return false
		}
	}
	return true
}

// countWords counts the words of a text: runs of characters between white
// space that hold a letter or a digit.
func countWords(s string) int {
	n, in, word := 0, false, false
	for i := 0; i < len(s); {
		c := s[i]
		var space, alnum bool
		if c < utf8.RuneSelf {
			i++
			space = asciiSpace[c]
			alnum = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		} else {
			r, size := utf8.DecodeRuneInString(s[i:])
			i += size
			space = unicode.IsSpace(r)
			alnum = unicode.IsLetter(r) || unicode.IsDigit(r)
		}
		if space {
			if in && word {
				n++
			}
			in, word = false, false
			continue
		}
		in = true
		word = word || alnum
	}
	if in && word {
		n++
	}
	return n
}
