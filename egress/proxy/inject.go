package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/elazarl/goproxy"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/secrets"
)

// runOf returns the secrets of the client's run, if it has any and they
// are bound to that client id.
func (p *Proxy) runOf(remote netip.Addr, client string) *secrets.Run {
	if p.cfg.Secrets == nil {
		return nil
	}
	run := p.cfg.Secrets(remote, client)
	if run == nil || run.Client() != client || len(run.Names()) == 0 {
		return nil
	}
	return run
}

// targetHost is the host a request names: the CONNECT authority's or the
// URL's, as sent.
func targetHost(r *http.Request) string {
	if r.Method == http.MethodConnect {
		if h, _, err := net.SplitHostPort(r.RequestURI); err == nil {
			return h
		}
		return r.RequestURI
	}
	if r.URL != nil {
		return r.URL.Host
	}
	return ""
}

// observe hands a decision the proxy made on its own (an injection, a
// placeholder refused) to the Checker's observer, like Decide's: metrics
// and the run's audit record.
func (p *Proxy) observe(d *egress.Decision) {
	if p.cfg.Checker.Observe != nil {
		p.cfg.Checker.Observe(d)
	}
}

// secretDenial turns a placeholder refused for request st into its
// decision.
func secretDenial(d egress.Decision, den *secrets.Denial) egress.Decision {
	d.Allow, d.WouldDeny = false, false
	d.Code = egress.CodeSecretMisplaced
	if den.Elsewhere {
		d.Code = egress.CodeSecretElsewhere
	}
	d.Reason, d.Secret = den.Reason, den.Secret
	d.Dial = netip.AddrPort{}
	return d
}

// denySecret records that st was refused for a placeholder: the decision
// is observed (audit, metrics) and replaces st's in its log line.
func (p *Proxy) denySecret(st *state, den *secrets.Denial) {
	st.mu.Lock()
	if st.denied != nil {
		st.mu.Unlock()
		return
	}
	d := secretDenial(st.d, den)
	st.denied = &d
	st.mu.Unlock()
	st.setOutcome("", "", d.Code.Status())
	p.observe(&d)
}

// inject writes the run's secrets into req where their placeholders stand
// in their slots, or answers the refusal of a request that carries one
// anywhere else. Each injection is observed as a decision of its own,
// naming the secret, and the request's log line names them too.
func (p *Proxy) inject(req *http.Request, st *state) *http.Response {
	injected, den := st.run.Prepare(req, st.d.Scheme, st.d.Host, st.d.Port)
	if den != nil {
		p.denySecret(st, den)
		return denyResponse(req, st.decision())
	}
	p.injected(st, injected)
	prepareEncoding(req, st)
	return nil
}

// denyResponse is the answer to a request refused for a placeholder.
func denyResponse(req *http.Request, d egress.Decision) *http.Response {
	resp := goproxy.NewResponse(req, goproxy.ContentTypeText, d.Code.Status(), "sandboxd egress proxy: deny: "+d.Reason+"\n")
	resp.Header.Set("X-Sandboxd-Egress", string(d.Code))
	return resp
}

// injected records the secrets written into st's request.
func (p *Proxy) injected(st *state, names []string) {
	if len(names) == 0 {
		return
	}
	for _, name := range names {
		d := st.d
		d.Code, d.Secret = egress.CodeSecretInjected, name
		d.Reason = fmt.Sprintf("secret %q injected into the request to %s:%d (%s)", name, d.Host, d.Port, d.Reason)
		p.observe(&d)
	}
	st.mu.Lock()
	st.d.Code, st.d.Secret = egress.CodeSecretInjected, strings.Join(names, ",")
	st.mu.Unlock()
}

// scanBody wraps a request body of st so that a placeholder in it stops
// the request before any byte of the placeholder is sent.
func (p *Proxy) scanBody(body io.ReadCloser, st *state) io.ReadCloser {
	if body == nil || body == http.NoBody {
		return body
	}
	return &denyBody{ReadCloser: st.run.ScanBody(body, st.d.Scheme, st.d.Host, st.d.Port), p: p, st: st}
}

// denyBody records the refusal a scanned body read ends with.
type denyBody struct {
	io.ReadCloser
	p  *Proxy
	st *state
}

func (b *denyBody) Read(buf []byte) (int, error) {
	n, err := b.ReadCloser.Read(buf)
	var den *secrets.Denial
	if errors.As(err, &den) {
		b.p.denySecret(b.st, den)
	}
	return n, err
}

// errEncoded refuses a compressed answer to a request that carried a
// secret: the proxy could not check it for the value.
var errEncoded = errors.New("the upstream answered a request that carried a secret with a compressed body (Content-Encoding), which the proxy cannot check for the secret's value; it asked for identity")

// prepareEncoding asks an upstream a secret of the run may go to for an
// uncompressed answer, so that the answer can be checked for the value
// (cleanResponse refuses a compressed one).
func prepareEncoding(req *http.Request, st *state) {
	st.encodingChecked = st.run.Goes(st.d.Scheme, st.d.Host, st.d.Port)
	if st.encodingChecked {
		req.Header.Set("Accept-Encoding", "identity")
	}
}

// cleanResponse removes every spelling of the run's secrets from an
// upstream's answer before it reaches the run: header values, the body
// (streamed, so Content-Length goes) and trailers (dropped). An answer to a
// request that carried a secret must be uncompressed.
func (p *Proxy) cleanResponse(req *http.Request, resp *http.Response, st *state) (*http.Response, error) {
	lits := st.run.Literals()
	resp.Trailer = nil
	if st.encodingChecked && bodyAllowed(req.Method, resp.StatusCode) {
		if ce := strings.TrimSpace(resp.Header.Get("Content-Encoding")); ce != "" && !strings.EqualFold(ce, "identity") {
			resp.Body.Close()
			return nil, errEncoded
		}
	}
	for name, vs := range resp.Header {
		for i, v := range vs {
			vs[i] = lits.String(v)
		}
		if n := lits.String(name); n != name {
			delete(resp.Header, name)
		}
	}
	if resp.Body != nil && bodyAllowed(req.Method, resp.StatusCode) && !lits.Empty() {
		resp.Body = readCloser{Reader: lits.NewReader(resp.Body), Closer: resp.Body}
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	}
	return resp, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}
