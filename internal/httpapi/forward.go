package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/store"
)

// A session lives where its sandbox lives: on one replica's engine. In a
// fleet, a session request that reaches another replica is forwarded to
// the owner named in the shared session directory, signed with the
// fleet's key so that the owner knows a replica sent it (and never
// forwards it again). The client's own credentials travel with it: the
// owner authenticates and authorises the key as for any request. When the
// owner is gone (it stopped beating), the session answers 409
// SESSION_ENDED with the reason, at once.

// Fleet forwarding headers.
const (
	// HeaderForwarded carries "replica=NAME;t=UNIX;sig=HEX" on a request
	// one replica forwards to another.
	HeaderForwarded = "X-Sandboxd-Forwarded"
	// HeaderForwardedBy names, on the answer, the replica the client
	// reached when another one (X-Sandboxd-Replica) served it.
	HeaderForwardedBy = "X-Sandboxd-Forwarded-By"
)

// forwardSkew bounds how old (or early) a forwarded request's signature
// may be.
const forwardSkew = 2 * time.Minute

// forwardDial bounds connecting to the owner: a replica that is gone is
// found out quickly, never waited on.
const forwardDial = 3 * time.Second

// signForward is the HMAC of a forwarded request's replica, time, method
// and path under the fleet key.
func signForward(key []byte, replica string, t int64, method, path string) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s\n%d\n%s\n%s", replica, t, method, path)
	return hex.EncodeToString(m.Sum(nil))
}

// forwardedBy checks a request's X-Sandboxd-Forwarded header: "" when it
// has none, the forwarding replica's name when the signature holds, and
// an error when it does not.
func (s *Server) forwardedBy(r *http.Request) (string, error) {
	h := r.Header.Get(HeaderForwarded)
	if h == "" {
		return "", nil
	}
	if len(s.cfg.FleetKey) == 0 {
		return "", errors.New("this replica has no fleet key")
	}
	var replica, sig string
	var t int64
	for _, part := range strings.Split(h, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "replica":
			replica = v
		case "t":
			t, _ = strconv.ParseInt(v, 10, 64)
		case "sig":
			sig = v
		}
	}
	if d := time.Since(time.Unix(t, 0)); replica == "" || d > forwardSkew || d < -forwardSkew {
		return "", errors.New("the forwarding header is malformed or stale")
	}
	want := signForward(s.cfg.FleetKey, replica, t, r.Method, r.URL.EscapedPath())
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return "", errors.New("the forwarding signature does not hold")
	}
	return replica, nil
}

// sessionHome sends a request for a session that lives on another
// replica there (in a fleet). It runs after authentication, before the
// handler reads the body.
func (s *Server) sessionHome(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		from, err := s.forwardedBy(c.Request())
		if err != nil {
			reqOf(c).log.Warn("refused a forwarded request", "err", err)
			return &api.Error{Status: http.StatusUnauthorized, Code: api.CodeAuth, Message: "the request claims to come from another replica, but " + err.Error()}
		}
		sh := s.plane.Shared()
		r := reqOf(c)
		id := c.Param("id")
		if sh == nil || from != "" {
			return next(c)
		}
		if _, err := s.sessions.Lookup(r.key, id); err == nil {
			return next(c)
		}
		ctx := c.Request().Context()
		e, err := sh.GetSession(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return next(c) // the handler answers 404 as for any unknown id
		case err != nil:
			return s.plane.Refusal(control.StateUnavailable("look the session up in the fleet's directory", err))
		case e.Tenant != r.key.Tenant || e.KeyID != r.key.ID || e.Owner == s.plane.Owner():
			return next(c)
		}
		m, alive, err := sh.Member(ctx, e.Owner)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return s.plane.Refusal(control.StateUnavailable("find the session's replica", err))
		}
		if !alive {
			return s.ownerGone(ctx, e)
		}
		return s.forward(c, e, m.Addr)
	}
}

// ownerGone ends a session whose replica stopped answering and says so.
func (s *Server) ownerGone(ctx context.Context, e *store.SessionEntry) error {
	reason := e.EndReason
	if e.State != store.SessionEnded {
		reason = fmt.Sprintf("its replica %s stopped answering", e.Replica)
		e.State, e.EndReason = store.SessionEnded, reason
		if err := s.plane.Shared().PutSession(context.WithoutCancel(ctx), e); err != nil {
			s.log.Error("marking a dead replica's session ended failed", "session_id", e.ID, "err", err)
		}
	}
	return &api.Error{Status: http.StatusConflict, Code: api.CodeSessionEnded,
		Message: fmt.Sprintf("session %s has ended: %s; start a new one with POST /sessions", e.ID, reason)}
}

// forward proxies the request to the replica at addr, signed.
func (s *Server) forward(c echo.Context, e *store.SessionEntry, addr string) error {
	if len(s.cfg.FleetKey) == 0 {
		return control.Unavailable(fmt.Sprintf("session %s lives on replica %s, and this replica has no fleet key to forward with (--fleet-key-file)", e.ID, e.Replica))
	}
	target, err := url.Parse(addr)
	if err != nil || target.Host == "" {
		return control.Unavailable(fmt.Sprintf("session %s lives on replica %s, whose address %q is not a URL", e.ID, e.Replica, addr))
	}
	r := reqOf(c)
	r.log.Info("forwarding a session request to its replica", "session_id", e.ID, "replica", e.Replica, "addr", addr)
	var proxyErr error
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			t := time.Now().Unix()
			pr.Out.Header.Set(HeaderForwarded, fmt.Sprintf("replica=%s;t=%d;sig=%s", s.plane.Replica(), t,
				signForward(s.cfg.FleetKey, s.plane.Replica(), t, pr.Out.Method, pr.Out.URL.EscapedPath())))
			pr.Out.Header.Set(echo.HeaderXRequestID, r.id)
		},
		Transport:     s.fleetTransport,
		FlushInterval: -1, // streamed answers go through as they come
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Set(HeaderForwardedBy, s.plane.Replica())
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) { proxyErr = err },
	}
	// The owner's answer names the owner.
	c.Response().Header().Del(HeaderReplica)
	c.Response().Header().Del(echo.HeaderXRequestID)
	p.ServeHTTP(c.Response(), c.Request())
	if proxyErr == nil {
		return nil
	}
	c.Response().Header().Set(HeaderReplica, s.plane.Replica())
	c.Response().Header().Set(echo.HeaderXRequestID, r.id)
	if c.Response().Committed {
		return nil
	}
	// Not reached: gone for good, or only for now?
	ctx := c.Request().Context()
	if _, alive, err := s.plane.Shared().Member(ctx, e.Owner); err == nil && !alive || errors.Is(err, store.ErrNotFound) {
		return s.ownerGone(ctx, e)
	}
	r.log.Warn("forwarding a session request failed", "session_id", e.ID, "replica", e.Replica, "err", proxyErr)
	return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, RetryAfter: 1,
		Message: fmt.Sprintf("session %s lives on replica %s, which did not answer; retry after the Retry-After seconds", e.ID, e.Replica)}
}

// newFleetTransport is the client replicas forward with.
func newFleetTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: forwardDial, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // a session call runs as long as its limit
	}
}
