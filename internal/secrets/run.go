package secrets

import (
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
)

// PlaceholderPrefix starts every placeholder. A placeholder is the prefix
// and 32 random characters of [a-z2-7]: worthless anywhere but in the
// egress proxy, for the run it was made for, in the place its secret is
// applied.
const PlaceholderPrefix = "sbx_secret_"

// PlaceholderLen is the length of a placeholder.
const PlaceholderLen = len(PlaceholderPrefix) + 32

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewPlaceholder returns a fresh random placeholder.
func NewPlaceholder() string {
	var b [20]byte
	_, _ = rand.Read(b[:])
	return PlaceholderPrefix + strings.ToLower(b32.EncodeToString(b[:]))
}

// binding is one secret of a run: the secret as it was when the run
// started, and the run's placeholder for it.
type binding struct {
	secret      *Secret
	placeholder string
}

// Run is the secrets of one run: what the sandbox gets (Env) and what the
// egress proxy needs to inject them (Prepare, Intercepts, ScanBody) and to
// keep them from coming back (Literals). A run keeps the secrets as they
// were when it started: a reload of the secrets file changes nothing for
// it. It is immutable, safe for concurrent use.
type Run struct {
	// Tenant is whose run it is.
	Tenant   string
	bindings []binding
	lits     *Literals
	pats     [][]byte
	// client is the id the egress proxy knows the run's sandbox by, set
	// when the sandbox is bound to the run (Bind).
	client atomic.Pointer[string]
}

// NewRun binds secrets to a fresh run of tenant, each with a new
// placeholder. The caller has checked that the tenant may use each.
func NewRun(tenant string, secrets []*Secret) *Run {
	r := &Run{Tenant: tenant}
	for _, s := range secrets {
		r.bindings = append(r.bindings, binding{secret: s, placeholder: NewPlaceholder()})
	}
	slices.SortFunc(r.bindings, func(a, b binding) int { return strings.Compare(a.secret.Name, b.secret.Name) })
	r.lits = NewLiterals(secrets...)
	for _, b := range r.bindings {
		r.pats = append(r.pats, []byte(b.placeholder))
	}
	return r
}

// Bind records the id the egress proxy knows the run's sandbox by (its
// exec id, or a pooled sandbox's own). The proxy injects nothing for a
// client whose id is not the one bound.
func (r *Run) Bind(client string) { r.client.Store(&client) }

// Client is the id Bind recorded, or "".
func (r *Run) Client() string {
	if p := r.client.Load(); p != nil {
		return *p
	}
	return ""
}

// Names returns the names of the run's secrets, sorted.
func (r *Run) Names() []string {
	if r == nil {
		return nil
	}
	out := make([]string, len(r.bindings))
	for i, b := range r.bindings {
		out[i] = b.secret.Name
	}
	return out
}

// Env is what the run's environment gets: SANDBOXD_SECRET_<NAME> =
// placeholder for each secret.
func (r *Run) Env() map[string]string {
	out := map[string]string{}
	for _, b := range r.bindings {
		out[EnvName(b.secret.Name)] = b.placeholder
	}
	return out
}

// HTTPS reports whether any secret of the run may go over https: the
// sandbox then needs to trust the proxy's CA.
func (r *Run) HTTPS() bool {
	for _, b := range r.bindings {
		if slices.Contains(b.secret.Schemes, SchemeHTTPS) {
			return true
		}
	}
	return false
}

// Literals is what the proxy redacts from every response to the run.
func (r *Run) Literals() *Literals {
	if r == nil {
		return nil
	}
	return r.lits
}

// Intercepts reports whether the proxy must read the TLS of a CONNECT to
// host:port: some secret of the run may go to https://host:port. Every
// other tunnel stays a tunnel.
func (r *Run) Intercepts(host string, port uint16) bool {
	if r == nil {
		return false
	}
	for _, b := range r.bindings {
		if b.secret.Goes(SchemeHTTPS, host, port) {
			return true
		}
	}
	return false
}

// Goes reports whether some secret of the run may go to
// scheme://host:port.
func (r *Run) Goes(scheme, host string, port uint16) bool {
	if r == nil {
		return false
	}
	for _, b := range r.bindings {
		if b.secret.Goes(scheme, host, port) {
			return true
		}
	}
	return false
}

// Denial is a request refused because of a placeholder.
type Denial struct {
	// Secret names the secret whose placeholder it carried.
	Secret string
	// Elsewhere: the request goes where the secret may not go; otherwise
	// it goes where the secret may, with the placeholder in another place
	// than where the secret is applied.
	Elsewhere bool
	Reason    string
}

func (d *Denial) Error() string { return d.Reason }

// Find returns the binding whose placeholder b holds (any case), if any.
func (r *Run) find(b []byte) *binding {
	if r == nil || len(b) < PlaceholderLen {
		return nil
	}
	low := bytes.ToLower(b)
	for i := range r.bindings {
		if bytes.Contains(low, r.pats[i]) {
			return &r.bindings[i]
		}
	}
	return nil
}

// FindIn returns the denial of a request to scheme://host:port that
// carries a placeholder of the run in s (in any case, also
// percent-encoded) at where, or nil.
func (r *Run) FindIn(s, scheme, host string, port uint16, where string) *Denial {
	if r == nil {
		return nil
	}
	for i := range r.bindings {
		if r.holds(s, i) {
			return r.bindings[i].deny(scheme, host, port, where)
		}
	}
	return nil
}

// deny builds the denial for binding b found at where in a request to
// scheme://host:port.
func (b *binding) deny(scheme, host string, port uint16, where string) *Denial {
	s := b.secret
	if !s.Goes(scheme, host, port) {
		return &Denial{Secret: s.Name, Elsewhere: true, Reason: fmt.Sprintf(
			"the request carries the placeholder of secret %q (%s) to %s://%s:%d; the secret may go only to %s. Nothing was sent",
			s.Name, where, scheme, host, port, s.Where())}
	}
	return &Denial{Secret: s.Name, Reason: fmt.Sprintf(
		"the request carries the placeholder of secret %q in %s; it is replaced only in %s. Nothing was sent",
		s.Name, where, s.Slot())}
}

// Prepare injects the run's secrets into req, a request to
// scheme://host:port (host normalised, as the egress decision has it),
// before the proxy sends it. A placeholder that stands exactly where its
// secret is applied, on a request to where the secret may go, is replaced
// by the value; a placeholder anywhere else in the URL or the headers
// denies the request. The body is checked as it is sent (ScanBody).
// Request trailers are dropped. It returns the names of the secrets it
// injected.
func (r *Run) Prepare(req *http.Request, scheme, host string, port uint16) ([]string, *Denial) {
	if r == nil || len(r.bindings) == 0 {
		return nil, nil
	}
	req.Trailer = nil
	// Every place a placeholder may stand, before any is replaced.
	type place struct {
		b     *binding
		where string
	}
	var found []place
	look := func(s, where string) {
		for i := range r.bindings {
			b := &r.bindings[i]
			if r.holds(s, i) && !slices.ContainsFunc(found, func(p place) bool { return p.b == b }) {
				found = append(found, place{b, where})
			}
		}
	}
	r.eachURLPart(req.URL, look)
	r.eachHeader(req.Header, look)
	look(req.Host, "the Host header")
	look(req.Method, "the method")
	if len(found) == 0 {
		return nil, nil
	}
	for _, p := range found {
		if !p.b.secret.Goes(scheme, host, port) {
			return nil, p.b.deny(scheme, host, port, p.where)
		}
	}
	// Replace each secret in its slot, in a copy of the headers and URL,
	// then look again: what is left is a placeholder out of place, and the
	// request is left as it came.
	h := req.Header.Clone()
	var u *url.URL
	if req.URL != nil {
		c := *req.URL
		u = &c
	}
	var injected []string
	for _, p := range found {
		ok, err := p.b.inject(h, u)
		if err != nil {
			return nil, p.b.deny(scheme, host, port, err.Error())
		}
		if ok {
			injected = append(injected, p.b.secret.Name)
		}
	}
	found = nil
	r.eachURLPart(u, look)
	r.eachHeader(h, look)
	if len(found) > 0 {
		return nil, found[0].b.deny(scheme, host, port, found[0].where)
	}
	req.Header, req.URL = h, u
	slices.Sort(injected)
	return injected, nil
}

// holds reports whether s holds the placeholder of binding i, in any case,
// percent-encoded or not.
func (r *Run) holds(s string, i int) bool {
	if len(s) < PlaceholderLen {
		return false
	}
	low := strings.ToLower(s)
	if strings.Contains(low, r.bindings[i].placeholder) {
		return true
	}
	if strings.Contains(s, "%") {
		return strings.Contains(strings.ToLower(unescape(s)), r.bindings[i].placeholder)
	}
	return false
}

// unescape decodes every valid %XX of s and keeps the rest as it is (a
// stray '%' does not hide what follows it).
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && ishex(s[i+1]) && ishex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// eachURLPart calls look with every part of u where a placeholder could
// hide.
func (r *Run) eachURLPart(u *url.URL, look func(s, where string)) {
	if u == nil {
		return
	}
	look(u.Host, "the URL's host")
	look(u.Path, "the URL's path")
	look(u.RawPath, "the URL's path")
	look(u.Opaque, "the URL")
	look(u.RawQuery, "the URL's query")
	look(u.Fragment, "the URL's fragment")
	if u.User != nil {
		look(u.User.String(), "the URL's userinfo")
	}
}

// eachHeader calls look with every header name and value, and with the
// credentials of a basic Authorization decoded.
func (r *Run) eachHeader(h http.Header, look func(s, where string)) {
	for name, vs := range h {
		look(name, "a header name")
		for _, v := range vs {
			where := "the header " + name
			look(v, where)
			if scheme, cred, ok := strings.Cut(strings.TrimSpace(v), " "); ok && strings.EqualFold(scheme, "basic") {
				if dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil {
					look(string(dec), where+" (basic credentials)")
				}
			}
		}
	}
}

var errNotInSlot = errors.New("not where it is applied")

// inject replaces the binding's placeholder in its slot with the value.
// ok false when the placeholder is not in the slot (it is elsewhere: the
// caller finds it when it looks again); an error when the slot holds it in
// a form that cannot be replaced.
func (b *binding) inject(h http.Header, u *url.URL) (bool, error) {
	s, ph := b.secret, b.placeholder
	switch s.Apply {
	case ApplyHeader:
		vs := h.Values(s.Header)
		if len(vs) != 1 {
			return false, nil
		}
		if v := strings.TrimSpace(vs[0]); v == render(s.Template, ph) || v == ph {
			h.Set(s.Header, render(s.Template, s.value))
			return true, nil
		}
		return false, nil
	case ApplyBasic:
		vs := h.Values("Authorization")
		if len(vs) != 1 {
			return false, nil
		}
		scheme, cred, ok := strings.Cut(strings.TrimSpace(vs[0]), " ")
		if !ok || !strings.EqualFold(scheme, "basic") {
			return false, nil
		}
		dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
		if err != nil || string(dec) != render(s.Username, ph)+":"+render(s.Password, ph) {
			return false, nil
		}
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(render(s.Username, s.value)+":"+render(s.Password, s.value))))
		return true, nil
	case ApplyQuery:
		if u == nil {
			return false, nil
		}
		parts := strings.Split(u.RawQuery, "&")
		at := -1
		for i, kv := range parts {
			k, v, _ := strings.Cut(kv, "=")
			key, err1 := url.QueryUnescape(k)
			val, err2 := url.QueryUnescape(v)
			if err1 != nil || err2 != nil || key != s.Param {
				continue
			}
			if at >= 0 || val != ph {
				return false, nil // twice, or another value: not in the slot
			}
			at = i
		}
		if at < 0 {
			return false, nil
		}
		k, _, _ := strings.Cut(parts[at], "=")
		parts[at] = k + "=" + url.QueryEscape(s.value)
		u.RawQuery = strings.Join(parts, "&")
		return true, nil
	}
	return false, errNotInSlot
}

// Scan looks for the run's placeholders in a stream (a tunnel's bytes
// up), in any case, across the boundaries of the chunks it is fed.
type Scan struct {
	r            *Run
	scheme, host string
	port         uint16
	tail         []byte
}

// NewScan starts a scan of a stream to scheme://host:port (scheme empty
// for a tunnel).
func (r *Run) NewScan(scheme, host string, port uint16) *Scan {
	return &Scan{r: r, scheme: scheme, host: host, port: port}
}

// Feed scans the next chunk and returns the denial for a placeholder that
// ends in it (begun in an earlier chunk or in this one), or nil.
func (s *Scan) Feed(p []byte) *Denial {
	if s == nil || s.r == nil || len(s.r.bindings) == 0 {
		return nil
	}
	win := append(s.tail, p...)
	b := s.r.find(win)
	keep := min(len(win), PlaceholderLen-1)
	s.tail = append(s.tail[:0:0], win[len(win)-keep:]...)
	if b == nil {
		return nil
	}
	d := b.deny(s.scheme, s.host, s.port, "a tunnel's bytes")
	if s.scheme == "" {
		d.Elsewhere = true
		d.Reason = fmt.Sprintf("the placeholder of secret %q was sent through a tunnel to %s:%d, which the proxy does not read; the secret is injected only into requests the proxy reads, to %s. The tunnel was closed",
			b.secret.Name, s.host, s.port, b.secret.Where())
	}
	return d
}

// ScanBody returns body wrapped so that a placeholder in it fails the read
// with the denial (a *Denial, for a request to scheme://host:port) before
// any byte of the placeholder is handed on: the last PlaceholderLen-1
// bytes read are held back until more arrive or the body ends.
func (r *Run) ScanBody(body io.ReadCloser, scheme, host string, port uint16) io.ReadCloser {
	if r == nil || len(r.bindings) == 0 || body == nil || body == http.NoBody {
		return body
	}
	return &scanBody{rc: body, r: r, scheme: scheme, host: host, port: port}
}

type scanBody struct {
	rc      io.ReadCloser
	r       *Run
	scheme  string
	host    string
	port    uint16
	pending []byte // read and checked, not yet handed on
	held    int    // how many bytes at the end of pending are held back
	err     error
	buf     []byte
}

func (sb *scanBody) Read(p []byte) (int, error) {
	for len(sb.pending)-sb.held == 0 {
		if sb.err != nil {
			if sb.held > 0 && errors.Is(sb.err, io.EOF) {
				sb.held = 0 // the end: the held bytes start no placeholder
				break
			}
			return 0, sb.err
		}
		if sb.buf == nil {
			sb.buf = make([]byte, 32<<10)
		}
		n, err := sb.rc.Read(sb.buf)
		sb.pending = append(sb.pending, sb.buf[:n]...)
		if b := sb.r.find(sb.pending); b != nil {
			sb.pending, sb.held = nil, 0
			sb.err = b.deny(sb.scheme, sb.host, sb.port, "the request body")
			return 0, sb.err
		}
		if err != nil {
			sb.err = err
		}
		sb.held = min(len(sb.pending), PlaceholderLen-1)
		if sb.err != nil && errors.Is(sb.err, io.EOF) {
			sb.held = 0
		}
	}
	n := copy(p, sb.pending[:len(sb.pending)-sb.held])
	sb.pending = sb.pending[n:]
	return n, nil
}

func (sb *scanBody) Close() error { return sb.rc.Close() }
