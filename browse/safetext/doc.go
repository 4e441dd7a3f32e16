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
//     frameset, object, embed, applet, svg (and all foreign content but
//     MathML, see below),
//     canvas, audio, video, source, track, map, area, progress, meter;
//   - form controls: input, textarea, select, option, optgroup, button,
//     datalist, keygen;
//   - head and everything in it (meta description, link, base...) except
//     the first title, which becomes Page.Title; title elements elsewhere;
//   - comments and doctypes; noembed, noframes, param, rp;
//   - elements with the hidden or popover attribute, aria-hidden="true",
//     dialog without open, the content of a closed details element but
//     its first summary child, images of width or height 0 or 1
//     (tracking pixels);
//   - elements hidden by an inline style: display:none, visibility:hidden
//     or collapse (a descendant with visibility:visible shows again),
//     content-visibility:hidden, opacity, zoom or scale <= 0.1,
//     filter:opacity(0), font-size <= 2px or 0 in font-size and the font
//     shorthand (a descendant with an absolute font size shows again),
//     transparent text colour (transparent, rgba/hsla alpha 0, #rgba with
//     alpha 0, also -webkit-text-fill-color), off-screen positioning
//     (left, top, right, bottom, inset, translate, margin or text-indent
//     <= -500px, or a position >= 5000px; left, right, inset, translate,
//     margin-left or text-indent >= 100vw or 100vmax; and, for an element
//     with position:fixed from any of its declarations, top, bottom or a
//     translation >= 100vh, 100% or 3000px), transforms that scale to 0 or
//     move off-screen (a translation in percent is of the element's own
//     size: sideways by 100% or more hides, up or down by 100% or more
//     hides a fixed element only; translate(-50%, -50%) centring and
//     translateY(-100%) in the flow stay on screen), clip: rect() leaving at most 1px,
//     clip-path inset(>=50%)/circle(0)/degenerate polygons, width or
//     max-width 0, and width/height <= 1px with overflow hidden or clip.
//     CSS comments and escapes are decoded first, and !important is
//     ignored (but for colours);
//   - text in (nearly) the same colour as its background (every channel
//     within 16). Colours come from the style attribute, the page's style
//     sheets and the presentational attributes (font color, bgcolor, body
//     text), and are resolved as the cascade resolves them: specificity
//     and order (selectors matched exactly, by cascadia; :is() and
//     nesting resolved), !important, cascade layers, the style attribute
//     over rules; the text colour is inherited, and where an element paints
//     no background its parent's shows. Rules that may or may not apply
//     (under @media, @supports or a media attribute; :where(); selectors
//     cascadia cannot match, matched by their last compound) can hide
//     text but never show it: text is dropped when it is invisible with
//     them or without them. A background image, var() or a translucent
//     colour makes the colour unknown (kept). Without an external style
//     sheet the canvas is the browser's white and text black; with one,
//     both are unknown unless the page's own styles set them. On a page
//     without a standards-mode doctype class and id names match
//     case-insensitively, as in a browser's quirks mode;
//   - elements with a class commonly used for visually hidden text
//     (sr-only, visually-hidden, screen-reader-text and their variants,
//     hidden, d-none, hide, invisible, ...);
//   - elements matched by a rule in the page's own style sheets whose
//     declarations hide by the tests above. The style sheets are the
//     <style> elements (HTML and SVG ones), <link rel=stylesheet> whose
//     href is a data: URL (percent-encoded or base64; the fragment is not
//     part of it) and @import of data: URLs before the other rules; a
//     media attribute applies like @media, and sheets with another type,
//     disabled or alternate ones are not applied. A rule's selector is
//     matched exactly by cascadia, ancestors and siblings included
//     (`.social-footer a span` hides spans in links of .social-footer,
//     nothing else), within the budget of the colour rules. Selectors
//     that cannot be matched that way (a pseudo-class for a state such as
//     :hover or :checked, one cascadia lacks, :has(), more than 6
//     combinators, past the budget) are over-approximated: their key
//     compound (tag, classes, ids, attribute tests, :not(:defined)) is
//     matched, and for `A B` and `A > B` whose key is a bare tag, A is
//     hidden. A leftmost compound naming a class, id or attribute that no
//     element but html and body carries (`.js .x`: script sets it on
//     html) is also tried without it, so such rules still hide. Rules under @media print only,
//     @font-face, @keyframes and rules for pseudo-elements are ignored;
//     other @media, @supports, @layer and CSS nesting are applied. For
//     hiding the cascade is not modelled, so a later rule that shows an
//     element again does not count: visible text may be lost, hidden text
//     is not kept because of it. Style sheets at other URLs are never
//     fetched.
//
// One hide is not obeyed: a page that hides itself until its script runs
// (a frame-buster's html{display:none}, an anti-flicker snippet's
// body{visibility:hidden}, an article wrapper at opacity:0 until a class
// shows it) would come back empty. When a rule of the page's style sheets
// hides html, body or an element holding at least 60% (and 200 bytes) of
// the page's text, by display, visibility or opacity alone, and the page
// has a script that runs, the element is shown and Page.Warnings says so
// (PAGE_HIDDEN_UNTIL_SCRIPT). Everything inside is judged as usual, and
// inline styles and the other techniques still hide.
//
// MathML is kept as one line of text: token elements (mi, mn, mo,
// mtext) as written, x^2 and x_1 for scripts, (a)/(b) for fractions with
// several parts, √(x) and root(x, n); display="block" makes a line of its
// own. Annotations, mphantom and all but an maction's first child are
// dropped, and mathcolor, mathbackground and mathsize count like colour
// and font size.
//
// Kept: headings, paragraphs, lists (- and 1. markers, nested lists
// indented), tables (a row per line, cells separated by " | ", Markdown
// tables in Markdown; a table with role=presentation or with a cell that
// holds a heading, a table, a form, a sectioning element or several blocks
// is taken for layout and rendered as blocks), pre blocks (white space
// kept) and inline
// code, block quotes, definition lists, details (closed: the summary
// only), link text,
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
// # Main content
//
// With Options.Content "main" only the page's main content is returned:
// the article, without navigation, share buttons, comments and related
// links. The page is rendered in full first, recording what is visible;
// a copy holding only the visible elements and text goes to a Readability
// implementation (codeberg.org/readeck/go-readability); the nodes it
// keeps (numbered on the copy, text nodes through numbered wrappers, so
// that they are found however it moves or clones them) are rendered from
// the original page with every rule above, as is the page's last visible
// h1 before them when it left no h1. The extractor's cleaned HTML is never
// rendered: it drops the style and class attributes and the style sheets
// that hide injected text. The main output is therefore always a part of
// the full output. Page.OmittedWords counts the visible words left out.
// When no main content is found, or it holds less than a tenth of the
// page's words (or fewer than 25 while the page has twice as many), the
// whole page is returned with Page.Content "full" and a
// MAIN_CONTENT_FALLBACK warning. "main" cannot be combined with Selector.
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
// Prepend adds lines of page-controlled metadata (a title, a content type)
// as the first lines inside such an envelope, so that text composed
// around the envelope need not carry any of the page's words.
//
// # Limits
//
// x/net/html refuses documents whose stack of open elements exceeds 512;
// for those the longest prefix whose naive tag nesting stays within a
// depth limit is rendered and Page.Truncated is set (style rules from the
// whole document still apply). The walk itself never goes deeper than 600
// elements and uses an explicit stack.
package safetext
