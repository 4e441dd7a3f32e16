package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/redact"
)

// literal is one spelling of a secret's value to redact.
type literal struct {
	text string
	typ  string // redact type: secret_<name>
}

// forms returns every spelling of s's value that an upstream, an error
// message or a log line could carry: the value itself, JSON- and
// URL-escaped, base64 (with and without padding, standard and URL-safe),
// and for basic auth the encoded credentials sandboxd sends.
func forms(s *Secret) []literal {
	v := s.value
	if v == "" {
		return nil
	}
	typ := RedactType(s.Name)
	set := []string{v}
	add := func(x string) {
		if x != "" && !slices.Contains(set, x) {
			set = append(set, x)
		}
	}
	add(jsonEscaped(v, true))
	add(jsonEscaped(v, false))
	add(url.QueryEscape(v))
	add(url.PathEscape(v))
	b64 := func(raw string) {
		add(base64.StdEncoding.EncodeToString([]byte(raw)))
		add(base64.RawStdEncoding.EncodeToString([]byte(raw)))
		add(base64.URLEncoding.EncodeToString([]byte(raw)))
		add(base64.RawURLEncoding.EncodeToString([]byte(raw)))
	}
	b64(v)
	if s.Apply == ApplyBasic {
		b64(render(s.Username, v) + ":" + render(s.Password, v))
	}
	out := make([]literal, len(set))
	for i, t := range set {
		out[i] = literal{text: t, typ: typ}
	}
	return out
}

// jsonEscaped is v as a JSON string without its quotes.
func jsonEscaped(v string, html bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	_ = enc.Encode(v)
	s := strings.TrimSpace(b.String())
	return s[1 : len(s)-1]
}

// render writes value where Marker stands in template.
func render(template, value string) string { return strings.Replace(template, Marker, value, 1) }

// Literals replaces secrets' values, in every spelling forms gives, with
// "[REDACTED:secret_<name>]". It is immutable and safe for concurrent use.
type Literals struct {
	lits   []literal // longest first
	maxLen int
}

// NewLiterals returns the literals of secrets.
func NewLiterals(secrets ...*Secret) *Literals {
	l := &Literals{}
	for _, s := range secrets {
		l.lits = append(l.lits, forms(s)...)
	}
	l.sort()
	return l
}

func (l *Literals) sort() {
	slices.SortStableFunc(l.lits, func(a, b literal) int { return len(b.text) - len(a.text) })
	l.maxLen = 0
	for _, x := range l.lits {
		l.maxLen = max(l.maxLen, len(x.text))
	}
}

// Empty reports whether there is nothing to redact.
func (l *Literals) Empty() bool { return l == nil || len(l.lits) == 0 }

// Bytes returns b with every literal replaced, and how many were (b
// itself when none was).
func (l *Literals) Bytes(b []byte) ([]byte, int) {
	if l.Empty() {
		return b, 0
	}
	n := 0
	for _, x := range l.lits {
		if bytes.Contains(b, []byte(x.text)) {
			c := bytes.Count(b, []byte(x.text))
			b = bytes.ReplaceAll(b, []byte(x.text), []byte(marker(x.typ)))
			n += c
		}
	}
	return b, n
}

// String is Bytes for a string.
func (l *Literals) String(s string) string {
	if l.Empty() {
		return s
	}
	for _, x := range l.lits {
		if strings.Contains(s, x.text) {
			s = strings.ReplaceAll(s, x.text, marker(x.typ))
		}
	}
	return s
}

// Contains reports whether s holds any literal.
func (l *Literals) Contains(s []byte) bool {
	if l.Empty() {
		return false
	}
	for _, x := range l.lits {
		if bytes.Contains(s, []byte(x.text)) {
			return true
		}
	}
	return false
}

func marker(typ string) string { return "[REDACTED:" + typ + "]" }

// Rules returns the literals as redact rules, so that the redactor of
// runs' output and of the log knows every value: each literal is one
// case-sensitive rule whose keyword is its first bytes (a rule's keyword
// is at most redact.MaxKeywordLen) and whose expression is the whole
// value. A value longer than maxWholeLiteral is also cut into pieces of
// 32 to 64 bytes, each a rule of its own, so that any part of it that
// reaches an output (a cut, a split) is redacted too.
func (l *Literals) Rules() []redact.Rule {
	if l.Empty() {
		return nil
	}
	var out []redact.Rule
	seen := map[string]bool{}
	add := func(typ, kw, re string) {
		if strings.TrimSpace(kw) == "" || seen[typ+"\x00"+re] {
			return
		}
		seen[typ+"\x00"+re] = true
		out = append(out, redact.Rule{Type: typ, Keywords: []string{kw}, Regex: re, CaseSensitive: true})
	}
	for _, x := range l.lits {
		kw := x.text[:min(len(x.text), redact.MaxKeywordLen)]
		add(x.typ, kw, regexp.QuoteMeta(x.text))
		if len(x.text) > maxWholeLiteral {
			for _, piece := range pieces(x.text, redact.MaxKeywordLen) {
				add(x.typ, piece, regexp.QuoteMeta(piece))
			}
		}
	}
	return out
}

// maxWholeLiteral is the longest value redacted by one rule: the
// streaming redactor holds back at most about this much text.
const maxWholeLiteral = 4096

// pieces cuts s into n pieces of equal length (to a byte), each at most
// size bytes.
func pieces(s string, size int) []string {
	n := (len(s) + size - 1) / size
	if n <= 1 {
		return []string{s}
	}
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, s[i*len(s)/n:(i+1)*len(s)/n])
	}
	return out
}

// merge returns the literals of l and o together.
func (l *Literals) merge(o *Literals) *Literals {
	m := &Literals{}
	if l != nil {
		m.lits = append(m.lits, l.lits...)
	}
	if o != nil {
		for _, x := range o.lits {
			if !slices.Contains(m.lits, x) {
				m.lits = append(m.lits, x)
			}
		}
	}
	m.sort()
	return m
}

// NewReader returns a reader of r with every literal replaced. It holds
// back the last maxLen-1 bytes it has read until more arrive (or r ends),
// so that a value split across reads is replaced whole.
func (l *Literals) NewReader(r io.Reader) io.Reader {
	if l.Empty() {
		return r
	}
	return &redactReader{l: l, r: r}
}

type redactReader struct {
	l   *Literals
	r   io.Reader
	in  []byte // read, not yet released (the tail may start a literal)
	out []byte // redacted, ready to hand out
	err error
	n   int
	buf []byte
}

func (rr *redactReader) Read(p []byte) (int, error) {
	for len(rr.out) == 0 {
		if rr.err != nil {
			return 0, rr.err
		}
		if rr.buf == nil {
			rr.buf = make([]byte, 32<<10)
		}
		n, err := rr.r.Read(rr.buf)
		rr.in = append(rr.in, rr.buf[:n]...)
		if err != nil {
			rr.err = err
			red, c := rr.l.Bytes(rr.in)
			rr.n += c
			rr.out, rr.in = append(rr.out, red...), nil
			break
		}
		keep := rr.l.maxLen - 1
		if len(rr.in) <= keep {
			continue
		}
		// Release up to the last position a literal could start at that
		// is not fully inside what was read; a literal found crossing
		// that line is replaced whole and released with it.
		cut := len(rr.in) - keep
		red, end := rr.l.redactPrefix(rr.in, cut, &rr.n)
		rr.out = append(rr.out, red...)
		rr.in = append(rr.in[:0:0], rr.in[end:]...)
	}
	n := copy(p, rr.out)
	rr.out = rr.out[n:]
	return n, nil
}

// redactPrefix redacts the part of b before cut (extended to the end of a
// literal that starts before cut and ends inside b) and returns it and
// where it ended in b.
func (l *Literals) redactPrefix(b []byte, cut int, count *int) ([]byte, int) {
	var out []byte
	i := 0
	for i < cut {
		found := false
		for _, x := range l.lits {
			if bytes.HasPrefix(b[i:], []byte(x.text)) {
				out = append(out, marker(x.typ)...)
				i += len(x.text)
				*count++
				found = true
				break
			}
		}
		if !found {
			out = append(out, b[i])
			i++
		}
	}
	return out, i
}

// Count is how many literals the reader replaced so far.
func Count(r io.Reader) int {
	if rr, ok := r.(*redactReader); ok {
		return rr.n
	}
	return 0
}
