package safetext

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// writer builds the output: it collapses white space, separates blocks by
// at most one blank line, writes line prefixes (list indentation, "> "),
// escapes Markdown and can capture a part of the output (code, headings,
// links) to post-process it.
type writer struct {
	buf       []byte
	md        bool
	prefix    []byte // written at the start of every line
	linePre   int    // length of the prefix of the current line
	nl        int    // newlines owed before the next content (0-2)
	space     bool   // a space is owed before the next content
	pend      bool   // nl, space or marker owed, or nothing written yet
	lineStart bool   // nothing but prefix/marker on the current line
	digits    bool   // md: the line so far is digits only (escape "1.")
	marker    string // list marker owed at the start of the next line
	markerInd int    // prefix bytes the marker stands in for
	pre       bool   // keep white space
	raw       bool   // no Markdown escaping (code)
	inline    int    // > 0: block boundaries become spaces
	marks     int    // combining marks in a row
	limit     int    // stop once buf is longer
	full      bool   // limit reached
	caps      []capture
	free      [][]byte
}

// capture saves the writer state around a captured part.
type capture struct {
	buf                                      []byte
	prefix                                   []byte
	nl, linePre                              int
	space, pend, lineStart, digits, pre, raw bool
	marker                                   string
	markerInd                                int
}

// Markdown characters escaped anywhere in text.
var mdEscape = [128]bool{'\\': true, '`': true, '*': true, '_': true, '[': true, ']': true,
	'<': true, '>': true, '|': true, '~': true}

// Markdown characters escaped at the start of a line.
var mdLineStart = [128]bool{'#': true, '-': true, '+': true, '=': true}

func (w *writer) init(md bool, limit int) {
	w.md, w.limit, w.pend, w.lineStart = md, limit, true, true
}

// block ends the current block: n is 1 for a line break, 2 for a blank line.
func (w *writer) block(n int) {
	if w.inline > 0 || w.pre {
		if w.inline > 0 {
			w.space, w.pend = true, true
		}
		return
	}
	if n > w.nl {
		w.nl = n
	}
	w.pend = true
}

// br is a line break (<br>): two in a row make a blank line.
func (w *writer) br() {
	if w.pre {
		w.put('\n', -1)
		return
	}
	if w.inline > 0 {
		w.space, w.pend = true, true
		return
	}
	w.nl = min(w.nl+1, 2)
	w.pend = true
}

// startLine writes the prefix, with the marker standing in for its end.
func (w *writer) startLine() {
	if w.marker != "" {
		w.buf = append(w.buf, w.prefix[:len(w.prefix)-w.markerInd]...)
		w.buf = append(w.buf, w.marker...)
		w.marker = ""
	} else {
		w.buf = append(w.buf, w.prefix...)
	}
	w.linePre = len(w.prefix)
	w.lineStart, w.digits = true, false
}

// flush writes what is owed before content.
func (w *writer) flush() {
	w.pend = false
	switch {
	case len(w.buf) == 0:
		if len(w.caps) == 0 {
			w.startLine()
		}
	case w.nl > 0:
		w.buf = append(w.buf, '\n')
		if w.nl > 1 {
			// A blank line belongs to what the lines around it share
			// (a quote that starts or ends here does not get it).
			w.buf = append(w.buf, bytes.TrimRight(w.prefix[:min(len(w.prefix), w.linePre)], " ")...)
			w.buf = append(w.buf, '\n')
		}
		w.startLine()
	case w.marker != "":
		// A list item whose first line is another list: the marker gets
		// a line of its own.
		w.buf = append(w.buf, '\n')
		w.startLine()
	case w.space && !w.lineStart:
		w.buf = append(w.buf, ' ')
	}
	w.nl, w.space = 0, false
}

// put writes one ASCII content byte. next is the byte after it in the
// text, or -1 when unknown; it decides escapes that depend on what follows.
func (w *writer) put(c byte, next int) {
	if w.pend {
		w.flush()
	}
	if w.md && !w.raw {
		esc := mdEscape[c]
		boundary := next < 0 || next < 0x80 && asciiSpace[next]
		switch {
		case w.lineStart:
			// "# x", "- x", "+ x", "---", "===" would start a block.
			if mdLineStart[c] && (boundary || next == int(c)) {
				esc = true
			}
			w.digits = c >= '0' && c <= '9'
		case w.digits:
			// "1. x", "1) x" would start a list.
			if (c == '.' || c == ')') && boundary {
				esc = true
			}
			w.digits = c >= '0' && c <= '9'
		}
		// "&lt;" and "&#33;" would be decoded by a renderer.
		if c == '&' && next >= 0 && next < 0x80 && (next == '#' || isAlnum(byte(next))) {
			esc = true
		}
		// An underscore inside a word cannot start emphasis.
		if c == '_' && next >= 0 && next < 0x80 && isAlnum(byte(next)) &&
			len(w.buf) > 0 && isAlnum(w.buf[len(w.buf)-1]) && !w.lineStart {
			esc = false
		}
		if esc {
			w.buf = append(w.buf, '\\')
		}
	}
	w.buf = append(w.buf, c)
	w.lineStart = false
	if c == '\n' { // only in pre
		w.buf = append(w.buf, w.prefix...)
		w.lineStart = true
	}
}

// putRune writes one non-ASCII content rune.
func (w *writer) putRune(r rune) {
	if w.pend {
		w.flush()
	}
	w.buf = utf8.AppendRune(w.buf, r)
	w.lineStart, w.digits = false, false
}

// literal writes output structure (markers, link syntax) as is.
func (w *writer) literal(s string) {
	if s == "" {
		return
	}
	if w.pend {
		w.flush()
	}
	w.buf = append(w.buf, s...)
	w.lineStart, w.digits = false, false
}

// sep writes a separator (table cells) that swallows white space on both
// sides.
func (w *writer) sep(s string) {
	w.space = false
	if w.pend {
		w.flush()
	}
	w.buf = append(w.buf, s...)
	w.lineStart, w.digits = true, false
}

var asciiSpace = [128]bool{' ': true, '\t': true, '\n': true, '\r': true, '\f': true, '\v': true}

// Printable ASCII bytes that are written as they are (in text, and in
// Markdown when not at the start of a line).
var plainText, plainMD [256]bool

func init() {
	for c := 0x21; c < 0x7f; c++ {
		plainText[c] = true
		plainMD[c] = !mdEscape[c] && c != '&'
	}
}

// text writes page text: cleaned, white space collapsed (kept in pre),
// escaped for Markdown.
func (w *writer) text(s string) {
	if w.full {
		return
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			if c < 0x20 && !asciiSpace[c] || c == 0x7f {
				continue // removed; does not end a run of marks
			}
			w.marks = 0
			if asciiSpace[c] {
				if w.pre {
					switch c {
					case '\n':
						w.put('\n', -1)
					case '\t':
						w.put('\t', -1)
					case '\r':
					default:
						w.put(' ', -1)
					}
				} else {
					w.space, w.pend = true, true
				}
				continue
			}
			// A run of bytes that need no escaping is copied at once
			// after its first byte (which may start a line).
			j := i
			if w.md && !w.raw {
				for j < len(s) && plainMD[s[j]] {
					j++
				}
			} else {
				for j < len(s) && plainText[s[j]] {
					j++
				}
			}
			w.put(c, nextByte(s, i))
			if w.digits {
				for ; i < j; i++ {
					w.put(s[i], nextByte(s, i+1))
				}
			} else {
				w.buf = append(w.buf, s[i:j]...)
				i = j
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if size == 1 { // invalid UTF-8
			w.marks = 0
			w.putRune(utf8.RuneError)
			continue
		}
		if removed(r) {
			continue
		}
		if isSpaceRune(r) {
			w.marks = 0
			switch {
			case w.pre && (r == 0x2028 || r == 0x2029 || r == 0x85):
				w.put('\n', -1)
			case w.pre:
				w.put(' ', -1)
			default:
				w.space, w.pend = true, true
			}
			continue
		}
		if isMark(r) {
			if w.marks++; w.marks > maxMarks {
				continue
			}
		} else {
			w.marks = 0
		}
		w.putRune(r)
	}
	if len(w.buf) > w.limit {
		w.full = true
	}
}

// nextByte returns s[i], or -1 past the end.
func nextByte(s string, i int) int {
	if i < len(s) {
		return int(s[i])
	}
	return -1
}

// beginCapture redirects output to a fresh buffer.
func (w *writer) beginCapture(pre, raw bool) {
	w.caps = append(w.caps, capture{
		buf: w.buf, prefix: w.prefix, nl: w.nl, linePre: w.linePre, space: w.space, pend: w.pend,
		lineStart: w.lineStart, digits: w.digits, pre: w.pre, raw: w.raw,
		marker: w.marker, markerInd: w.markerInd,
	})
	var nb []byte
	if n := len(w.free); n > 0 {
		nb, w.free = w.free[n-1][:0], w.free[:n-1]
	}
	w.buf, w.prefix, w.nl, w.space, w.pend = nb, nil, 0, false, true
	w.lineStart, w.digits, w.marker, w.markerInd = true, false, "", 0
	w.pre = w.pre || pre
	w.raw = w.raw || raw
}

// endCapture restores the state saved by beginCapture and returns what
// was written in between (valid until the next beginCapture) and whether
// a space was owed at its end.
func (w *writer) endCapture() (content []byte, space bool) {
	c := w.caps[len(w.caps)-1]
	w.caps = w.caps[:len(w.caps)-1]
	content, space = w.buf, w.space
	w.free = append(w.free, content)
	w.buf, w.prefix, w.nl, w.space, w.pend = c.buf, c.prefix, c.nl, c.space, c.pend
	w.linePre = c.linePre
	w.lineStart, w.digits, w.pre, w.raw = c.lineStart, c.digits, c.pre, c.raw
	w.marker, w.markerInd = c.marker, c.markerInd
	if len(w.buf)+len(content) > w.limit {
		w.full = true
	}
	return content, space
}

// codeBlock writes the content of a <pre> element.
func (w *writer) codeBlock(content []byte) {
	lines := strings.Split(strings.Trim(string(content), "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	for len(lines) > 0 && lines[0] == "" {
		lines = lines[1:]
	}
	if len(lines) == 0 {
		return
	}
	w.block(2)
	fence := ""
	if w.md {
		fence = strings.Repeat("`", max(3, longestRun(content, '`')+1))
		w.literal(fence)
	}
	for i, l := range lines {
		if i > 0 || w.md {
			w.buf = append(w.buf, '\n')
			if l == "" {
				w.buf = append(w.buf, bytes.TrimRight(w.prefix, " ")...)
			} else {
				w.buf = append(w.buf, w.prefix...)
			}
		}
		w.literal(l)
	}
	if w.md {
		w.buf = append(w.buf, '\n')
		w.buf = append(w.buf, w.prefix...)
		w.literal(fence)
	}
	w.block(2)
}

// inlineCode writes the content of a <code> element as a Markdown code
// span (the content was captured raw and white-space collapsed).
func (w *writer) inlineCode(content []byte) {
	if len(bytes.TrimSpace(content)) == 0 {
		return
	}
	fence := strings.Repeat("`", longestRun(content, '`')+1)
	pad := ""
	if content[0] == '`' || content[len(content)-1] == '`' {
		pad = " "
	}
	w.literal(fence + pad)
	w.buf = append(w.buf, content...)
	w.literal(pad + fence)
}

func longestRun(b []byte, c byte) int {
	best, run := 0, 0
	for _, x := range b {
		if x == c {
			run++
			best = max(best, run)
		} else {
			run = 0
		}
	}
	return best
}

// setMarker makes marker (a list bullet or number) the start of the next
// line; following lines of the item are indented by its width.
func (w *writer) setMarker(marker string) {
	if w.marker != "" {
		// The previous item has no content yet (its first line is this
		// nested list): its marker gets a line of its own.
		w.flush()
	}
	ind := len(marker)
	if len(w.prefix)+ind > maxPrefix {
		ind = 0 // deep nesting: no more indentation
	}
	w.prefix = append(w.prefix, "          "[:min(ind, 10)]...)
	w.marker, w.markerInd = marker, min(ind, 10)
	w.pend = true
}
