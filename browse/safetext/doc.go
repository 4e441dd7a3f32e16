// Package safetext turns hostile web content into text that is safe to
// hand to a model: only what a reader of the rendered page would see, with
// nothing that can hide instructions from a human reviewer, fake the
// envelope around the content, or exfiltrate data through a URL that a
// client renders.
//
// Every byte of a page is treated as hostile. The package errs on the side
// of dropping: when it cannot tell whether something is visible, it is
// dropped.
//
// # HTML
//
// HTML parses the document with golang.org/x/net/html (the HTML5 parsing
// algorithm, so implied end tags, misnesting and foster parenting come out
// as in a browser) and walks the tree without recursion.
//
// Dropped with everything in them:
//
//   - script, style, noscript, template, iframe (and srcdoc), frame,
//     frameset, object, embed, applet, svg and math (all foreign content),
//     canvas, audio, video, source, track, map, area, progress, meter;
//   - form controls: input, textarea, select, option, optgroup, button,
//     datalist, keygen;
//   - head and everything in it (meta description, link, base...) except
//     the first title, which becomes Page.Title; title elements elsewhere;
//   - comments and doctypes; noembed, noframes, param, rp;
//   - elements with the hidden or popover attribute, aria-hidden="true",
//     dialog without open, images of width or height 0 or 1 (tracking
//     pixels);
//   - elements hidden by an inline style: display:none, visibility:hidden
//     or collapse (a descendant with visibility:visible shows again),
//     content-visibility:hidden, opacity, zoom or scale <= 0.1,
//     filter:opacity(0), font-size <= 2px or 0 in font-size and the font
//     shorthand (a descendant with an absolute font size shows again),
//     transparent text colour (transparent, rgba/hsla alpha 0, #rgba with
//     alpha 0, also -webkit-text-fill-color), text in (nearly) the same
//     colour as a background set on the element or an ancestor (style,
//     bgcolor, font color) or as the browser's white default when the page
//     links no style sheet and its own styles set no background, off-screen positioning (left, top, right, bottom, inset,
//     translate, margin or text-indent <= -500px, or a position >= 5000px),
//     transforms that
//     scale to 0 or move off-screen, clip: rect() leaving at most 1px,
//     clip-path inset(>=50%)/circle(0)/degenerate polygons, width or
//     max-width 0, and width/height <= 1px with overflow hidden or clip.
//     CSS comments and escapes are decoded first, and !important is
//     ignored;
//   - elements with a class commonly used for visually hidden text
//     (sr-only, visually-hidden, screen-reader-text and their variants,
//     hidden, d-none, hide, invisible, ...);
//   - elements matched by a rule in the page's own <style> elements
//     (HTML and SVG ones) whose declarations hide by the tests above. The
//     selector handling is a cheap over-approximation: the key compound
//     selector (tag, classes, ids, attribute tests, :not(:defined)) is
//     matched, ignoring other pseudo-classes and the ancestors; for
//     `A B` and `A > B` whose key is a bare tag, A is hidden; `A + B` and
//     `A ~ B` are matched among siblings. Rules under @media print only,
//     @font-face, @keyframes and rules for pseudo-elements are ignored;
//     other @media, @supports, @layer and CSS nesting are applied. The
//     cascade is not modelled, so a later rule that shows an element
//     again does not count: visible text may be lost, hidden text is not
//     kept because of it. External style sheets are not fetched.
//
// Kept: headings, paragraphs, lists (- and 1. markers, nested lists
// indented), tables (a row per line, cells separated by " | ", Markdown
// tables in Markdown; a table with role=presentation or with a cell that
// holds a heading, a table, a form, a sectioning element or several blocks
// is taken for layout and rendered as blocks), pre blocks (white space
// kept) and inline
// code, block quotes, definition lists, details and summary, link text,
// and the alt text of images as "[image: alt]" (at most 100 characters).
// Image URLs are never written.
//
// Links: with Options.Links "none" or "text" (the default) only the link
// text is kept. With "full" the targets are kept too — http and https
// only (javascript:, data:, vbscript:, file:, mailto: and all other
// schemes are dropped), resolved against Options.BaseURL, without user
// info, query string or fragment, and percent-encoded so they cannot break
// out of Markdown. In text format each link is followed by " [n]" and the
// numbered list "[n] URL" ends the output; in Markdown links are written
// [text](URL). Page.Links lists the targets.
//
// Markdown output keeps structure (# headings, lists, code fences and code
// spans, > quotes, tables, links in full mode) and escapes page text so
// that it cannot create structure of its own: \ ` * [ ] < > | ~ always,
// _ except inside a word, & before what could be a character reference,
// and # - + = and "1." / "1)" at the start of a line when they would start
// a block. It never contains raw HTML or image syntax.
//
// Options.Selector (CSS, parsed by cascadia) keeps only the matched
// elements; matches inside dropped or hidden elements stay dropped. An
// invalid selector, one longer than 1024 bytes, or one using :has() (which
// is quadratic on large pages) is an error matching ErrSelector and
// ErrInvalidOption.
//
// Relative links are resolved against Options.BaseURL, not against a
// <base> element of the page.
//
// # All text
//
// Clean removes invisible characters from all text: zero-width characters
// (U+200B-200D, U+2060, U+FEFF), bidirectional controls (U+061C,
// U+200E-200F, U+202A-202E, U+2066-2069), Unicode tag characters
// (U+E0000-E007F), variation selectors (U+FE00-FE0F, U+E0100-E01EF), all
// other format characters (category Cf, e.g. soft hyphen, invisible
// operators), private-use code points, noncharacters, Hangul fillers,
// combining grapheme joiners, control characters other than newline and
// tab, and combining marks beyond 8 in a row. Emoji sequences lose their
// joiners and variation selectors.
//
// White space is normalised (runs collapse to one space, at most one
// blank line between blocks, lines trimmed), and copies of the envelope
// markers and chat-template tokens (<untrusted-content, </untrusted-content,
// <|im_start|> and other <|...|> tokens, [INST], <<SYS>>, role tags such
// as <system>) are neutralised, as is the Markdown image opener ![.
// Output is capped (Options.MaxOutput, Page.Truncated).
//
// Text does the same for text/plain, JSON, XML and other text, keeping
// line structure and indentation. Wrap puts content between markers that
// carry a fresh random 128-bit nonce:
//
//	<untrusted-content source="https://example.org/x" nonce="3f9a...">
//	...
//	</untrusted-content nonce="3f9a...">
//
// # Limits
//
// x/net/html refuses documents whose stack of open elements exceeds 512;
// for those the longest prefix whose naive tag nesting stays within a
// depth limit is rendered and Page.Truncated is set (style rules from the
// whole document still apply). The walk itself never goes deeper than 600
// elements and uses an explicit stack.
package safetext
