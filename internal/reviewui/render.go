package reviewui

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/hex"
	"fmt"
	"html/template"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/andybalholm/brotli"
	"golang.org/x/net/html/charset"

	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
)

// Display limits.
const (
	// textCap is the most of one part shown as text.
	textCap = 512 << 10
	// hexCap is the most of a binary part shown as a hex dump.
	hexCap = 4 << 10
	// decodeCap is the most a compressed body is inflated to for display.
	decodeCap = 2 << 20
)

// textView is one body prepared for display: as (escaped, made visible)
// text, or as a hex dump excerpt when it is binary.
type textView struct {
	Name string
	// Path is the file's path, for exec inputs and outputs.
	Path string
	Size int64
	// Text is the body as text with control, format and bidi characters
	// made visible; set when Binary is false.
	Text string
	// Binary: Hex holds a hex dump of the first hexCap bytes.
	Binary bool
	Hex    string
	// Truncated: only the first part is shown.
	Truncated bool
	// Note says how the body was decoded, or why it could not be.
	Note string
}

// Empty reports whether there is nothing to show.
func (v textView) Empty() bool { return v.Size == 0 && v.Note == "" }

// viewText prepares b for display.
func viewText(name string, b []byte) textView {
	v := textView{Name: name, Size: int64(len(b))}
	if looksBinary(b) {
		v.Binary = true
		v.Hex = hex.Dump(b[:min(len(b), hexCap)])
		v.Truncated = len(b) > hexCap
		return v
	}
	if len(b) > textCap {
		b, v.Truncated = cutUTF8(b[:textCap]), true
	}
	if !utf8.Valid(b) {
		v.Note = "not valid UTF-8: invalid bytes are shown as \uFFFD"
	}
	v.Text = visible(string(b))
	return v
}

// cutUTF8 drops an incomplete character at the end of b.
func cutUTF8(b []byte) []byte {
	for i := 0; i < utf8.UTFMax-1 && len(b) > 0; i++ {
		r, size := utf8.DecodeLastRune(b)
		if r != utf8.RuneError || size != 1 {
			break
		}
		b = b[:len(b)-1]
	}
	return b
}

// looksBinary reports whether b is not text: it holds a NUL, or more than
// one control character in twenty in its first 8 KiB.
func looksBinary(b []byte) bool {
	sample := b[:min(len(b), 8<<10)]
	if bytes.IndexByte(sample, 0) >= 0 {
		return true
	}
	ctrl := 0
	for _, c := range sample {
		if c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != '\f' && c != 0x1b || c == 0x7f {
			ctrl++
		}
	}
	return ctrl*20 > len(sample)
}

// visible makes characters that hide or reorder text visible: control
// characters become their control pictures (␀, ␛, ...) and format
// characters (bidi overrides, zero-width characters, tag characters, ...)
// become ⟨U+XXXX⟩, so a reviewer sees what the bytes hold. Invalid UTF-8
// becomes U+FFFD. Escaping for HTML is html/template's job, not this one's.
func visible(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteRune(utf8.RuneError)
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r == '\r':
			if i+1 < len(s) && s[i+1] == '\n' {
				break // CRLF reads as a line end
			}
			b.WriteRune('\u240d')
		case r < 0x20:
			b.WriteRune(0x2400 + r)
		case r == 0x7f:
			b.WriteRune('\u2421')
		case unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Co, r) ||
			r == '\u2028' || r == '\u2029':
			fmt.Fprintf(&b, "⟨U+%04X⟩", r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}

// contentEncodings returns the Content-Encoding codings of a capture's
// headers part ("HTTP 200 OK\r\nName: value\r\n..."), in the order they
// were applied.
func contentEncodings(headers string) []string {
	var out []string
	for _, line := range strings.Split(headers, "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "Content-Encoding") {
			continue
		}
		for _, c := range strings.Split(value, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				out = append(out, c)
			}
		}
	}
	return out
}

// decodeBody undoes the content codings (the last applied first),
// inflating to at most decodeCap bytes. It returns what it could decode
// and a note that says what was done or what failed.
func decodeBody(raw []byte, codings []string) ([]byte, string) {
	body := raw
	var notes []string
	for i := len(codings) - 1; i >= 0; i-- {
		c := codings[i]
		var rd io.Reader
		var err error
		switch c {
		case "gzip", "x-gzip":
			rd, err = gzip.NewReader(bytes.NewReader(body))
		case "deflate":
			// Properly zlib-wrapped; some servers send raw DEFLATE.
			if rd, err = zlib.NewReader(bytes.NewReader(body)); err != nil {
				rd, err = flate.NewReader(bytes.NewReader(body)), nil
			}
		case "br":
			rd = brotli.NewReader(bytes.NewReader(body))
		default:
			notes = append(notes, fmt.Sprintf("Content-Encoding %s is not decoded here: shown as received", c))
			return body, strings.Join(notes, "; ")
		}
		if err != nil {
			notes = append(notes, fmt.Sprintf("Content-Encoding %s did not decode (%v): shown as received", c, err))
			return body, strings.Join(notes, "; ")
		}
		out, err := io.ReadAll(io.LimitReader(rd, decodeCap+1))
		switch {
		case len(out) > decodeCap:
			out = out[:decodeCap]
			notes = append(notes, fmt.Sprintf("decoded from %s, first %s shown", c, sizeOf(decodeCap)))
		case err != nil:
			notes = append(notes, fmt.Sprintf("decoded from %s until %v (the body may have been cut at the profile's size limit)", c, err))
		default:
			notes = append(notes, fmt.Sprintf("decoded from %s: %s received, %s decoded", c, sizeOf(int64(len(body))), sizeOf(int64(len(out)))))
		}
		body = out
	}
	return body, strings.Join(notes, "; ")
}

// viewRaw prepares a fetch's raw body: decoded from its content coding and
// its charset for display, always shown as source text (or a hex dump),
// never rendered.
func viewRaw(raw []byte, headers, cs string) textView {
	body, note := decodeBody(raw, contentEncodings(headers))
	if !looksBinary(body) && !utf8.Valid(cutUTF8(body[:min(len(body), textCap)])) && cs != "" {
		if enc, name := charset.Lookup(cs); enc != nil && name != "utf-8" {
			if dec, err := enc.NewDecoder().Bytes(body); err == nil {
				body = dec
				note = strings.TrimPrefix(note+"; converted from "+name, "; ")
			}
		}
	}
	v := viewText("raw", body)
	v.Size = int64(len(raw))
	v.Note = strings.TrimPrefix(v.Note+"; "+note, "; ")
	v.Note = strings.TrimSuffix(v.Note, "; ")
	return v
}

func sizeOf(n int64) string {
	switch {
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}

// actionsFor is the actions template's data.
type actionsFor struct {
	A Actions
	C *capture.Capture
}

// statusClass is the CSS class of a status: good, bad or neutral.
func statusClass(s string) string {
	switch s {
	case "ok":
		return "st st-ok"
	case "", "ended", "deleted", "erased", "start":
		return "st st-neutral"
	}
	return "st st-bad"
}

// durationOf is a record's duration (total, else run), or "".
func durationOf(m map[string]int64) string {
	v, ok := m["total"]
	if !ok {
		v, ok = m["run"]
	}
	if !ok {
		return ""
	}
	return fmtDuration(time.Duration(v) * time.Millisecond)
}

// fmtDuration writes d for reading: 340 ms, 1.2 s, 3 min 4 s, 2 h 5 min.
func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	case d < time.Hour:
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
}

// funcs are the templates' helpers. Each returns plain strings:
// html/template escapes them for where they appear.
var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"offset": func(d time.Duration) string { return "+" + d.Round(time.Millisecond).String() },
	"short": func(s string) string {
		if len(s) > 12 {
			return s[:12] + "…"
		}
		return s
	},
	"size": sizeOf,
	"profile": func(p *audit.ProfileRef) string {
		if p == nil {
			return ""
		}
		v := p.Version
		if len(v) > 12 {
			v = v[:12]
		}
		if v == "" {
			return p.Name
		}
		return p.Name + "@" + v
	},
	"join":       func(s []string) string { return strings.Join(s, ", ") },
	"recordURL":  func(id string) string { return Prefix + "audit/" + url.PathEscape(id) },
	"captureURL": func(id string) string { return Prefix + "captures/" + url.PathEscape(id) },
	"partURL": func(id, name string) string {
		return Prefix + "captures/" + url.PathEscape(id) + "/part?" + url.Values{"name": {name}}.Encode()
	},
	"sessionURL": func(session, tenant string) string {
		v := url.Values{"id": {session}}
		if tenant != "" {
			v.Set("tenant", tenant)
		}
		return Prefix + "session?" + v.Encode()
	},
	// search links to the audit log filtered on pairs of name and value.
	"search": func(pairs ...string) string {
		v := url.Values{}
		for i := 0; i+1 < len(pairs); i += 2 {
			if pairs[i+1] != "" {
				v.Set(pairs[i], pairs[i+1])
			}
		}
		return Prefix + "audit?" + v.Encode()
	},
	"exit": func(p *int) string {
		if p == nil {
			return ""
		}
		return strconv.Itoa(*p)
	},
	"visible":     visible,
	"figureURL":   figureURL,
	"statusClass": statusClass,
	"durationOf":  durationOf,
	"ms":          func(n int64) string { return fmtDuration(time.Duration(n) * time.Millisecond) },
	"dur":         fmtDuration,
	"durs": func(m map[string]int64) string {
		keys := slices.Sorted(maps.Keys(m))
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + " " + fmtDuration(time.Duration(m[k])*time.Millisecond)
		}
		return strings.Join(parts, ", ")
	},
	"lane": func(i int) string {
		if i < 0 {
			return "lane-none"
		}
		return "lane-" + strconv.Itoa(i)
	},
	"trimFiles": func(s string) string { return strings.TrimPrefix(s, "files/") },
	// act pairs a page's actions with a capture for the actions template.
	"act": func(a Actions, c *capture.Capture) actionsFor { return actionsFor{A: a, C: c} },
	"has": func(list []string, s string) bool { return slices.Contains(list, s) },
}
