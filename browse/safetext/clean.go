package safetext

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxMarks is how many combining marks in a row are kept after a base
// character; longer runs ("Zalgo" text) only cost tokens.
const maxMarks = 8

// removed reports whether Clean drops r. See the package documentation for
// the list.
func removed(r rune) bool {
	switch {
	case r < 0x20:
		return r != '\n' && r != '\t'
	case r < 0x7f:
		return false
	case r <= 0x9f: // DEL and the C1 controls
		return true
	case r < 0x300:
		return r == 0xad // soft hyphen (Cf)
	}
	switch {
	case r >= 0xfe00 && r <= 0xfe0f, // variation selectors
		r >= 0xe0100 && r <= 0xe01ef,                       // variation selectors supplement
		r >= 0xe0000 && r <= 0xe007f,                       // tag characters (ASCII in disguise)
		r >= 0xe000 && r <= 0xf8ff,                         // private use
		r >= 0xf0000,                                       // supplementary private use areas
		r >= 0xfdd0 && r <= 0xfdef,                         // noncharacters
		r&0xfffe == 0xfffe,                                 // noncharacters U+xFFFE, U+xFFFF
		r == 0x034f,                                        // combining grapheme joiner
		r == 0x115f, r == 0x1160, r == 0x3164, r == 0xffa0, // Hangul fillers
		r == 0x17b4, r == 0x17b5: // Khmer inherent vowels (invisible)
		return true
	}
	// Format characters: zero-width space/joiners (U+200B-200D), word
	// joiner and invisible operators (U+2060-2064), BOM (U+FEFF), bidi
	// marks, embeddings, overrides and isolates (U+200E/F, U+202A-202E,
	// U+2066-2069, U+061C), interlinear annotation, U+180E, ...
	return unicode.Is(unicode.Cf, r)
}

// isMark reports whether r is a combining mark (counted for maxMarks).
func isMark(r rune) bool {
	return r >= 0x300 && unicode.Is(unicode.Mn, r)
}

// needsClean reports the index of the first byte of s that the ASCII fast
// path cannot pass through unchanged, or -1.
func needsClean(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x7f || (c < 0x20 && c != '\n' && c != '\t') {
			return i
		}
	}
	return -1
}

// Clean removes invisible and control characters from s: zero-width
// characters, bidirectional controls, Unicode tag characters, variation
// selectors, every other format character (category Cf), private-use and
// noncharacter code points, C0/C1 controls except newline and tab, and
// combining marks beyond maxMarks in a row. Line and paragraph separators
// (U+2028, U+2029) become newlines and invalid UTF-8 becomes U+FFFD. Text
// that needs no change is returned as is, without allocating.
func Clean(s string) string {
	i := needsClean(s)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	b.WriteString(s[:i])
	marks := 0
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			if c >= 0x20 && c != 0x7f || c == '\n' || c == '\t' {
				marks = 0 // removed characters do not end a run of marks
				b.WriteByte(c)
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
			marks = 0
			continue
		}
		if removed(r) {
			continue
		}
		if r == 0x2028 || r == 0x2029 {
			b.WriteByte('\n')
			marks = 0
			continue
		}
		if isMark(r) {
			if marks++; marks > maxMarks {
				continue
			}
		} else {
			marks = 0
		}
		b.WriteRune(r)
	}
	return b.String()
}

// isSpaceRune reports whether r is white space for the purpose of
// collapsing (ASCII white space, NBSP and the other Unicode spaces).
func isSpaceRune(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\f', '\v', 0x85, 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// collapse cleans s and collapses every run of white space to one space,
// trimming both ends. Used for titles, alt text and similar short fields.
func collapse(s string, maxRunes int) string {
	s = Clean(s)
	var b strings.Builder
	space := false
	n := 0
	for _, r := range s {
		if isSpaceRune(r) {
			space = b.Len() > 0
			continue
		}
		if n >= maxRunes {
			b.WriteRune('…')
			break
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}

// maxSpaceRun caps a run of spaces/tabs inside a line in Text output.
const maxSpaceRun = 64

// Text prepares non-HTML text (text/plain, JSON, XML, CSV, ...) for a
// model: the same cleaning as Clean, CRLF and CR turned into LF, trailing
// white space removed from every line, at most one blank line in a row,
// runs of blanks inside a line capped, leading and trailing blank lines
// removed, and copies of the envelope markers and chat-template tokens
// neutralised. Indentation is kept so JSON and YAML stay readable. The
// result is cut to maxOutput bytes (0 means DefaultMaxOutput) on a rune
// boundary; truncated reports whether anything was cut.
func Text(s string, maxOutput int) (out string, truncated bool) {
	if maxOutput <= 0 {
		maxOutput = DefaultMaxOutput
	}
	if strings.IndexByte(s, '\r') >= 0 {
		s = strings.ReplaceAll(s, "\r\n", "\n")
		s = strings.ReplaceAll(s, "\r", "\n")
	}
	s = Clean(s)
	var b strings.Builder
	b.Grow(min(len(s), maxOutput) + 16)
	blank := 0 // newlines owed before the next non-blank line
	first := true
	for line := range strings.Lines(s) {
		line = strings.TrimRightFunc(line, isSpaceRune)
		if line == "" {
			if !first {
				blank++
			}
			continue
		}
		if !first {
			b.WriteByte('\n')
			if blank > 0 {
				b.WriteByte('\n')
			}
		}
		first, blank = false, 0
		run := 0
		for _, r := range line {
			if r == ' ' || r == '\t' || isSpaceRune(r) {
				if run++; run > maxSpaceRun {
					continue
				}
				if r != '\t' {
					r = ' '
				}
			} else {
				run = 0
			}
			b.WriteRune(r)
		}
		if b.Len() > maxOutput+len(line) {
			// Far enough past the cap: the rest cannot matter.
			truncated = true
			break
		}
	}
	out = neutralize(b.String())
	if len(out) > maxOutput {
		out, truncated = cutUTF8(out, maxOutput), true
	}
	return out, truncated
}

// cutUTF8 returns the longest prefix of s not longer than n bytes that ends
// on a rune boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
