// Package browse fetches web pages for agents (POST /fetch): every hop of
// a fetch goes through the egress decision function and dials the one
// checked address, bodies are cut at a cap before and after decompression, the
// charset is decoded to UTF-8, and only HTML, plain-text kinds and PDFs are
// passed on (to browse/safetext, which turns them into safe text; a PDF is
// read in a browser sandbox, never in sandboxd).
package browse

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/andybalholm/brotli"
	"golang.org/x/net/html/charset"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/egress"
)

// Error codes of a failed fetch.
const (
	// CodeDenied: the egress profile refused a hop (403).
	CodeDenied = api.CodeEgressDenied
	// CodeBadURL: the URL (or a redirect's Location) cannot be fetched as
	// written (400 for the request's own URL).
	CodeBadURL = api.CodeValidation
	// CodeTimeout: the upstream did not answer within the profile's
	// total_timeout (502).
	CodeTimeout = api.CodeUpstreamTimeout
	// CodeUpstream: connecting, TLS, the HTTP exchange, too many redirects,
	// a broken encoding (502).
	CodeUpstream = api.CodeUpstreamError
	// CodeTooLarge is no longer returned by Fetch: a body over the cap is
	// cut there and the result marked Truncated. Kept for the API's
	// error table.
	CodeTooLarge = api.CodeTooLarge
	// CodeUnsupported: the content is neither HTML nor text (422).
	CodeUnsupported = api.CodeUnsupported
)

// Error is a failed fetch: a typed code, the HTTP status sandboxd answers
// with, and a message that says what failed and what to do.
type Error struct {
	Code    string
	Status  int
	Message string
	// URL is the hop that failed (the request's URL or a redirect target).
	URL string
	// Reason is the egress decision's reason for a denied hop.
	Reason string
	// ContentType and Size describe refused content (Size -1: unknown).
	ContentType string
	Size        int64
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// DefaultMaxRedirects is how many redirects a fetch follows.
const DefaultMaxRedirects = 5

// maxHeaderBytes caps a response's headers.
const maxHeaderBytes = 64 << 10

// Fetcher fetches URLs under egress profiles. Safe for concurrent use.
type Fetcher struct {
	// Checker decides every hop. Required.
	Checker *egress.Checker
	// Dialer dials the checked address; nil: &egress.Dialer{Checker: Checker}.
	Dialer *egress.Dialer
	// Log receives one egress decision line per hop (egress.Log, via
	// "fetch"); nil: none.
	Log *slog.Logger
	// UserAgent is sent upstream.
	UserAgent string
	// MaxRedirects bounds the redirects followed (0: DefaultMaxRedirects).
	MaxRedirects int
	// TLSConfig, when set, is the TLS client configuration (tests give
	// their loopback server's root CA). nil: the system roots, TLS 1.2+.
	TLSConfig *tls.Config
}

// Request is one fetch.
type Request struct {
	URL     string
	Profile *egress.Profile
	// MaxBytes, when positive and below the profile's max_response_bytes,
	// lowers the cap. Reading stops at the cap, raw and decompressed, and
	// the result is Truncated: a page over the cap comes back cut there.
	MaxBytes int64
	// Client names the fetch in decision lines; Tenant and KeyID say whose
	// it is (for approvals).
	Client, Tenant, KeyID string
}

// Hop is one request of a fetch and its decision.
type Hop struct {
	URL      string
	Status   int
	Decision egress.Decision
	// Bytes counts the body bytes received on this hop.
	Bytes int64
}

// Kind is what the fetched content is, for the converter.
type Kind int

// Kinds of content a fetch passes on.
const (
	KindHTML Kind = iota + 1
	KindText
	// KindPDF is a PDF: Body holds its bytes (decompressed, not decoded),
	// for a browser sandbox to read; sandboxd never parses it.
	KindPDF
)

// Result is a completed fetch.
type Result struct {
	URL      string
	FinalURL string
	// Redirects are the redirect targets followed, in order.
	Redirects []string
	Hops      []Hop
	// Status is the final upstream status (a 404 page is still a result).
	Status int
	// ContentType is the final response's Content-Type as sent (or as
	// sniffed when it sent none); MediaType its lower-case type/subtype.
	ContentType string
	MediaType   string
	Kind        Kind
	Header      http.Header
	// Raw is the final body as received, before decompression (capped).
	Raw []byte
	// Body is the decompressed body decoded to UTF-8 (capped).
	Body []byte
	// Charset names the encoding Body was decoded from.
	Charset string
	// Truncated: the cap (the profile's max_response_bytes, or a lower
	// Request.MaxBytes) cut the body, raw or decompressed.
	Truncated bool
	// Cap is the cap in force: the most raw and the most decompressed
	// bytes kept of the final body.
	Cap int64
	// BytesReceived counts body bytes received over every hop.
	BytesReceived int64
}

// Fetch fetches req.URL, following at most MaxRedirects redirects, each
// hop decided and dialled anew. The whole fetch, redirects included, must
// end within the profile's total_timeout.
func (f *Fetcher) Fetch(ctx context.Context, req Request) (*Result, error) {
	p := req.Profile
	if p == nil {
		return nil, &Error{Code: CodeDenied, Status: http.StatusForbidden, URL: req.URL, Reason: "no egress profile", Message: "no egress profile applies to this fetch; nothing is allowed"}
	}
	capBytes := p.MaxResponseBytes
	if req.MaxBytes > 0 && req.MaxBytes < capBytes {
		capBytes = req.MaxBytes
	}
	timeout := p.TotalTimeout
	if timeout <= 0 {
		timeout = egress.DefaultTotalTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	maxRedirects := f.MaxRedirects
	if maxRedirects <= 0 {
		maxRedirects = DefaultMaxRedirects
	}

	res := &Result{URL: req.URL, Cap: capBytes}
	target := req.URL
	for hop := 0; ; hop++ {
		resp, d, err := f.do(ctx, req, target, timeout)
		h := Hop{URL: target, Decision: d}
		if err != nil {
			res.Hops = append(res.Hops, h)
			return res, f.fail(ctx, err, &h, timeout)
		}
		h.Status = resp.StatusCode
		loc := resp.Header.Get("Location")
		if isRedirect(resp.StatusCode) && loc != "" {
			// Redirect bodies are not read beyond a small drain.
			n, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			h.Bytes = n
			res.BytesReceived += n
			f.logHop(ctx, &d, egress.Outcome{Code: egress.OutcomeOK, Status: resp.StatusCode, BytesDown: n, Via: "fetch"})
			res.Hops = append(res.Hops, h)
			next, err := resolveLocation(target, loc)
			if err != nil {
				return res, &Error{Code: CodeUpstream, Status: http.StatusBadGateway, URL: target,
					Message: fmt.Sprintf("%s redirected to a Location that cannot be followed (%q): %v", target, truncate(loc, 200), err)}
			}
			if hop+1 > maxRedirects {
				return res, &Error{Code: CodeUpstream, Status: http.StatusBadGateway, URL: next,
					Message: fmt.Sprintf("more than %d redirects (the last to %s); fetch the final URL directly if it is the one you want", maxRedirects, next)}
			}
			res.Redirects = append(res.Redirects, next)
			target = next
			continue
		}
		err = f.read(resp, res, capBytes, &h)
		resp.Body.Close()
		res.Hops = append(res.Hops, h)
		if err != nil {
			return res, f.fail(ctx, err, &h, timeout)
		}
		res.FinalURL = target
		res.Status = resp.StatusCode
		res.Header = resp.Header
		f.logHop(ctx, &d, egress.Outcome{Code: egress.OutcomeOK, Status: resp.StatusCode, BytesDown: h.Bytes, Via: "fetch"})
		return res, nil
	}
}

// hopError carries a hop's failure to fail, which logs it and types it.
type hopError struct {
	outcome egress.Code
	err     error
}

func (e *hopError) Error() string { return e.err.Error() }
func (e *hopError) Unwrap() error { return e.err }

// do decides one hop and sends its GET. A denied decision is returned as an
// *Error (already logged).
func (f *Fetcher) do(ctx context.Context, req Request, target string, timeout time.Duration) (*http.Response, egress.Decision, error) {
	d := f.Checker.Decide(ctx, req.Profile, egress.Request{Method: http.MethodGet, Target: target, Client: req.Client, Tenant: req.Tenant, KeyID: req.KeyID})
	if !d.Allow {
		f.logHop(ctx, &d, egress.Outcome{Via: "fetch"})
		return nil, d, deniedError(&d, target)
	}
	u, err := url.Parse(target)
	if err != nil { // Decide parsed it already; kept for safety
		return nil, d, &Error{Code: CodeBadURL, Status: http.StatusBadRequest, URL: target, Message: err.Error()}
	}
	u.Host = d.HostHeader
	u.Fragment, u.RawFragment = "", ""
	dialer := f.Dialer
	if dialer == nil {
		dialer = &egress.Dialer{Checker: f.Checker}
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.TLSConfig != nil {
		tlsConf = f.TLSConfig.Clone()
	}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.Dial(ctx, &d)
		},
		TLSClientConfig:        tlsConf,
		TLSHandshakeTimeout:    10 * time.Second,
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxHeaderBytes,
		ResponseHeaderTimeout:  timeout,
	}
	client := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, d, &Error{Code: CodeBadURL, Status: http.StatusBadRequest, URL: target, Message: err.Error()}
	}
	hreq.Host = d.HostHeader
	ua := f.UserAgent
	if ua == "" {
		ua = "sandboxd-fetch"
	}
	hreq.Header.Set("User-Agent", ua)
	hreq.Header.Set("Accept", "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,application/xml;q=0.8,application/pdf;q=0.8,*/*;q=0.1")
	hreq.Header.Set("Accept-Encoding", "gzip, deflate, br")
	resp, err := client.Do(hreq)
	if err != nil {
		outcome := egress.OutcomeUpstreamError
		if errors.Is(err, egress.ErrNotAllowed) || isDialError(err) {
			outcome = egress.OutcomeConnectFailed
		}
		return nil, d, &hopError{outcome: outcome, err: err}
	}
	return resp, d, nil
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func deniedError(d *egress.Decision, target string) *Error {
	switch st := d.Code.Status(); {
	case st == http.StatusBadRequest:
		return &Error{Code: CodeBadURL, Status: http.StatusBadRequest, URL: target, Reason: d.Reason,
			Message: fmt.Sprintf("%s cannot be fetched: %s", target, d.Reason)}
	case d.Code == egress.CodeResolveTimeout:
		return &Error{Code: CodeTimeout, Status: http.StatusBadGateway, URL: target, Reason: d.Reason,
			Message: fmt.Sprintf("resolving the host of %s timed out: %s", target, d.Reason)}
	case d.Code == egress.CodeResolve:
		return &Error{Code: CodeUpstream, Status: http.StatusBadGateway, URL: target, Reason: d.Reason,
			Message: fmt.Sprintf("the host of %s could not be resolved: %s", target, d.Reason)}
	}
	rule := ""
	if d.Rule != "" {
		rule = " (rule " + d.Rule + ")"
	}
	return &Error{Code: CodeDenied, Status: http.StatusForbidden, URL: target, Reason: d.Reason,
		Message: fmt.Sprintf("egress profile %s denies %s%s: %s", d.Profile, target, rule, d.Reason)}
}

// fail logs a failed hop and turns its error into an *Error.
func (f *Fetcher) fail(ctx context.Context, err error, h *Hop, timeout time.Duration) error {
	var fe *Error
	if errors.As(err, &fe) {
		if fe.Code != CodeDenied && fe.Code != CodeBadURL && h.Decision.Allow {
			f.logHop(ctx, &h.Decision, egress.Outcome{Code: outcomeOf(fe.Code), Detail: fe.Message, Status: h.Status, BytesDown: h.Bytes, Via: "fetch"})
		}
		return fe
	}
	oc := egress.OutcomeUpstreamError
	var he *hopError
	if errors.As(err, &he) {
		oc = he.outcome
	}
	if ctx.Err() == context.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		f.logHop(ctx, &h.Decision, egress.Outcome{Code: egress.OutcomeTimeout, Detail: err.Error(), Status: h.Status, BytesDown: h.Bytes, Via: "fetch"})
		return &Error{Code: CodeTimeout, Status: http.StatusBadGateway, URL: h.URL,
			Message: fmt.Sprintf("%s did not answer within the egress profile's total_timeout of %s", h.URL, timeout)}
	}
	f.logHop(ctx, &h.Decision, egress.Outcome{Code: oc, Detail: err.Error(), Status: h.Status, BytesDown: h.Bytes, Via: "fetch"})
	return &Error{Code: CodeUpstream, Status: http.StatusBadGateway, URL: h.URL,
		Message: fmt.Sprintf("fetching %s failed: %v", h.URL, err)}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func outcomeOf(code string) egress.Code {
	switch code {
	case CodeTooLarge:
		return egress.OutcomeResponseCap
	case CodeTimeout:
		return egress.OutcomeTimeout
	case CodeUnsupported:
		return egress.OutcomeOK
	}
	return egress.OutcomeUpstreamError
}

func (f *Fetcher) logHop(ctx context.Context, d *egress.Decision, o egress.Outcome) {
	egress.Log(ctx, f.Log, d, o)
}

func isRedirect(code int) bool {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// resolveLocation resolves a redirect's Location against the URL that sent it.
func resolveLocation(base, loc string) (string, error) {
	b, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	l, err := url.Parse(strings.TrimSpace(loc))
	if err != nil {
		return "", err
	}
	next := b.ResolveReference(l)
	if next.Fragment == "" && b.Fragment != "" && l.Fragment == "" {
		next.Fragment = b.Fragment // RFC 9110 15.4: the fragment carries over
	}
	return next.String(), nil
}

// read reads the final body: raw bytes capped at capBytes (+1 to notice
// more), decompressed bytes capped the same, then decoded to UTF-8. A
// body over the cap, raw or decompressed, is cut there and the result
// marked Truncated; nothing past capBytes+1 bytes is read or decompressed.
func (f *Fetcher) read(resp *http.Response, res *Result, capBytes int64, h *Hop) error {
	ct := resp.Header.Get("Content-Type")
	media := ""
	if ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err == nil {
			media = strings.ToLower(mt)
		} else {
			media = strings.ToLower(strings.TrimSpace(strings.SplitN(ct, ";", 2)[0]))
		}
	}
	declared := resp.ContentLength // -1 when unknown
	if media != "" && kindOf(media) == 0 {
		// Refused by its declared type: read nothing more than the
		// headers, report the declared size.
		res.ContentType, res.MediaType = ct, media
		return unsupported(ct, declared)
	}

	// Raw: as received, capped.
	var raw bytes.Buffer
	n, err := io.Copy(&raw, io.LimitReader(resp.Body, capBytes+1))
	h.Bytes = n
	res.BytesReceived += n
	if err != nil {
		return &hopError{outcome: egress.OutcomeUpstreamError, err: fmt.Errorf("reading the body: %w", err)}
	}
	rawOver := n > capBytes
	rawBytes := raw.Bytes()
	if rawOver {
		rawBytes = rawBytes[:capBytes]
	}
	res.Raw = rawBytes

	// Decompressed: capped the same, so a compression bomb stops at the cap.
	body, over, err := decode(resp.Header.Get("Content-Encoding"), rawBytes, capBytes, rawOver)
	if err != nil {
		return &Error{Code: CodeUpstream, Status: http.StatusBadGateway, URL: h.URL, Message: fmt.Sprintf("the body of %s cannot be decoded: %v", h.URL, err)}
	}
	if over {
		body = body[:capBytes]
	}
	res.Truncated = rawOver || over

	if media == "" {
		ct = http.DetectContentType(body)
		media, _, _ = mime.ParseMediaType(ct)
	}
	res.ContentType, res.MediaType = ct, media
	res.Kind = kindOf(media)
	if res.Kind == 0 {
		return unsupported(ct, int64(len(body)))
	}
	if res.Kind == KindPDF {
		res.Body = body
		return nil
	}
	text, name, err := toUTF8(body, ct, res.Kind, res.Truncated)
	if err != nil {
		return &Error{Code: CodeUpstream, Status: http.StatusBadGateway, URL: h.URL, Message: fmt.Sprintf("the body of %s cannot be decoded from its charset: %v", h.URL, err)}
	}
	res.Body, res.Charset = text, name
	return nil
}

func unsupported(ct string, size int64) *Error {
	sz := "of unknown size"
	if size >= 0 {
		sz = strconv.FormatInt(size, 10) + " bytes"
	}
	return &Error{Code: CodeUnsupported, Status: http.StatusUnprocessableEntity, ContentType: ct, Size: size,
		Message: fmt.Sprintf("the content is %s (%s); /fetch returns HTML, plain text, JSON, XML and PDF only", ct, sz)}
}

// kindOf classifies a media type: HTML, text, or 0 (refused).
func kindOf(media string) Kind {
	switch media {
	case "text/html", "application/xhtml+xml":
		return KindHTML
	case "application/pdf", "application/x-pdf":
		return KindPDF
	case "text/plain", "text/markdown", "text/x-markdown", "text/csv", "text/xml",
		"application/json", "application/xml", "application/x-ndjson":
		return KindText
	}
	if strings.HasPrefix(media, "application/") && (strings.HasSuffix(media, "+json") || strings.HasSuffix(media, "+xml")) {
		return KindText
	}
	return 0
}

// maxEncodings bounds stacked Content-Encodings ("gzip, br").
const maxEncodings = 3

// decode undoes the Content-Encoding, reading at most capBytes+1 decoded
// bytes; over reports that there were more. A raw body cut by the cap
// may end mid-stream: what decoded until then is kept.
func decode(encoding string, raw []byte, capBytes int64, cut bool) (body []byte, over bool, err error) {
	var codings []string
	for _, c := range strings.Split(encoding, ",") {
		if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
			codings = append(codings, c)
		}
	}
	if len(codings) == 0 {
		return raw, int64(len(raw)) > capBytes, nil
	}
	if len(codings) > maxEncodings {
		return nil, false, fmt.Errorf("%d stacked content encodings (%s); at most %d are accepted", len(codings), encoding, maxEncodings)
	}
	var r io.Reader = bytes.NewReader(raw)
	// Applied in the order listed, so undone in reverse.
	for i := len(codings) - 1; i >= 0; i-- {
		switch codings[i] {
		case "gzip", "x-gzip":
			zr, err := gzip.NewReader(r)
			if err != nil {
				return nil, false, fmt.Errorf("gzip: %w", err)
			}
			zr.Multistream(true)
			r = zr
		case "deflate":
			r = newDeflateReader(r)
		case "br":
			r = brotli.NewReader(r)
		default:
			return nil, false, fmt.Errorf("content encoding %q is not supported (gzip, deflate and br are)", codings[i])
		}
	}
	var out bytes.Buffer
	_, err = io.Copy(&out, io.LimitReader(r, capBytes+1))
	if err != nil && !(cut && out.Len() > 0) {
		// A stream cut by the cap ends early; what decoded is kept.
		return nil, false, err
	}
	b := out.Bytes()
	if int64(len(b)) > capBytes {
		return b, true, nil
	}
	return b, false, nil
}

// newDeflateReader reads "deflate", which RFC 9110 defines as zlib, and
// which some servers send as raw DEFLATE: the first two bytes tell which.
func newDeflateReader(r io.Reader) io.Reader {
	var hdr [2]byte
	n, _ := io.ReadFull(r, hdr[:])
	rest := io.MultiReader(bytes.NewReader(hdr[:n]), r)
	if n == 2 && hdr[0]&0x0f == 8 && (uint16(hdr[0])<<8|uint16(hdr[1]))%31 == 0 {
		zr, err := zlib.NewReader(rest)
		if err == nil {
			return zr
		}
	}
	return flate.NewReader(rest)
}

// toUTF8 decodes body from its charset: the BOM, the Content-Type's
// charset, an HTML meta element; then UTF-8 if the bytes are valid UTF-8,
// else windows-1252 (the web's default).
func toUTF8(body []byte, contentType string, kind Kind, cut bool) ([]byte, string, error) {
	head := body
	if len(head) > 1024 {
		head = head[:1024]
	}
	ct := contentType
	if kind != KindHTML {
		// The meta prescan is for HTML only.
		ct = textContentType(contentType)
	}
	enc, name, certain := charset.DetermineEncoding(head, ct)
	if !certain && !hasCharset(contentType) && (kind != KindHTML || name == "windows-1252") {
		if cut {
			body = trimPartialRune(body)
		}
		if utf8.Valid(body) {
			return body, "utf-8", nil
		}
	}
	if name == "utf-8" {
		if cut {
			body = trimPartialRune(body)
		}
		return bytes.ToValidUTF8(body, []byte("\uFFFD")), name, nil
	}
	out, err := enc.NewDecoder().Bytes(body)
	if err != nil {
		return nil, name, err
	}
	return out, name, nil
}

// textContentType keeps a text type's charset but names it text/plain, so
// that DetermineEncoding does no HTML meta prescan.
func textContentType(ct string) string {
	_, params, err := mime.ParseMediaType(ct)
	if err != nil || params["charset"] == "" {
		return "text/plain"
	}
	return "text/plain; charset=" + params["charset"]
}

func hasCharset(ct string) bool {
	_, params, err := mime.ParseMediaType(ct)
	return err == nil && params["charset"] != ""
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of a cut body.
func trimPartialRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < 0x80 {
			return b
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
