package safetext

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// MarkerName is the element-like name of the envelope markers.
const MarkerName = "untrusted-content"

// maxSourceLen caps the source attribute of the opening marker.
const maxSourceLen = 2048

// Envelope is the pair of markers around one response's untrusted content.
// Nonce is 128 random bits in hex, fresh for every envelope, so a page
// cannot guess the closing marker; copies of the marker text inside the
// content are neutralised in any case.
type Envelope struct {
	Nonce string
	Open  string // <untrusted-content source="..." nonce="...">
	Close string // </untrusted-content nonce="...">
}

// NewEnvelope returns markers with a fresh nonce for content that came
// from source (usually the URL). source is cleaned, cut to 2048 bytes and
// attribute-escaped, so it cannot end the attribute or the marker.
func NewEnvelope(source string) Envelope {
	var nb [16]byte
	// crypto/rand.Read never returns an error (it panics if the system
	// random source fails).
	_, _ = rand.Read(nb[:])
	nonce := hex.EncodeToString(nb[:])
	return Envelope{
		Nonce: nonce,
		Open:  "<" + MarkerName + ` source="` + escapeAttr(source) + `" nonce="` + nonce + `">`,
		Close: "</" + MarkerName + ` nonce="` + nonce + `">`,
	}
}

// Wrap returns content between the markers, each on a line of its own.
// content is cleaned and neutralised again (both are idempotent), so Wrap
// is safe even for text that did not come from HTML or Text.
func (e Envelope) Wrap(content string) string {
	content = strings.Trim(neutralize(Clean(content)), "\n")
	var b strings.Builder
	b.Grow(len(e.Open) + len(content) + len(e.Close) + 2)
	b.WriteString(e.Open)
	b.WriteByte('\n')
	if content != "" {
		b.WriteString(content)
		b.WriteByte('\n')
	}
	b.WriteString(e.Close)
	return b.String()
}

// Wrap wraps content in a fresh envelope for source and returns the
// wrapped text and the envelope's nonce.
func Wrap(content, source string) (wrapped string, nonce string) {
	e := NewEnvelope(source)
	return e.Wrap(content), e.Nonce
}

// maxHeaderLine caps, in runes, each line that Prepend adds.
const maxHeaderLine = 300

// Prepend puts lines of page-controlled text (a title, a content type) at
// the start of the content of wrapped, an envelope made by Wrap whose
// nonce is nonce, so that nothing the page wrote stands outside the
// markers. Each line is cleaned, collapsed to one line of at most 300
// characters and neutralised; empty lines are left out. ok is false, and
// wrapped is returned unchanged, when wrapped is not exactly one such
// envelope (its first line the opening marker with nonce, its end the
// closing marker with nonce).
func Prepend(wrapped, nonce string, lines ...string) (string, bool) {
	closing := "</" + MarkerName + ` nonce="` + nonce + `">`
	nl := strings.IndexByte(wrapped, '\n')
	if nonce == "" || nl < 0 || !strings.HasPrefix(wrapped, "<"+MarkerName+" ") ||
		!strings.HasSuffix(wrapped[:nl], ` nonce="`+nonce+`">`) || !strings.HasSuffix(wrapped, closing) ||
		strings.Count(wrapped, closing) != 1 {
		return wrapped, false
	}
	var b strings.Builder
	b.Grow(len(wrapped) + 128)
	b.WriteString(wrapped[:nl+1])
	for _, l := range lines {
		if l = neutralize(collapse(l, maxHeaderLine)); l != "" {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	b.WriteString(wrapped[nl+1:])
	return b.String(), true
}

// escapeAttr makes s safe inside a double-quoted attribute: cleaned, white
// space and controls turned into spaces, cut, and `&<>"'` escaped.
func escapeAttr(s string) string {
	s = cutUTF8(Clean(s), maxSourceLen)
	var b strings.Builder
	b.Grow(len(s) + 16)
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '"':
			b.WriteString("&quot;")
		case '\'':
			b.WriteString("&#39;")
		case '\n', '\t':
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
