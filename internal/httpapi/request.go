package httpapi

import (
	"context"
	"log/slog"
	"regexp"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
)

// request is what the middleware learns of a request and what the access
// log reports of it; it lives in the request's context under a private key
// (reqOf), never in echo's string-keyed store.
type request struct {
	id      string
	traceID string
	key     *auth.Key // once authenticated
	log     *slog.Logger

	// For the access log.
	profile, runStatus, errorCode string
}

type requestKey struct{}

// reqOf returns the request's state; the requestID middleware puts it in
// place first, so handlers always find one.
func reqOf(c echo.Context) *request {
	if r, ok := c.Request().Context().Value(requestKey{}).(*request); ok {
		return r
	}
	r := &request{log: slog.New(slog.DiscardHandler)}
	c.SetRequest(c.Request().WithContext(context.WithValue(c.Request().Context(), requestKey{}, r)))
	return r
}

// who is the identity the request's audit records carry.
func (r *request) who(session string) audit.Who {
	w := audit.Who{RequestID: r.id, TraceID: r.traceID, Session: session}
	if r.key != nil {
		w.Tenant, w.KeyID = r.key.Tenant, r.key.ID
	}
	return w
}

// note records an answer's error code or run status for the access log.
func (r *request) note(a *control.Answer) {
	if a.Code != "" {
		r.errorCode = a.Code
	}
	if a.RunStatus != "" {
		r.runStatus = a.RunStatus
	}
}

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// requestID takes the caller's X-Request-Id when it is well-formed, or
// makes one, and starts the request's state with its logger.
func (s *Server) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if !requestIDPattern.MatchString(id) {
			id = uuid.NewString()
		}
		r := &request{id: id, log: s.log.With("request_id", id)}
		c.SetRequest(c.Request().WithContext(context.WithValue(c.Request().Context(), requestKey{}, r)))
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		if rep := s.plane.Replica(); rep != "" {
			c.Response().Header().Set(HeaderReplica, rep)
		}
		return next(c)
	}
}

// HeaderReplica names the replica that answered (every answer, when the
// replica has a name).
const HeaderReplica = "X-Sandboxd-Replica"

// traceparent is the W3C Trace Context header: version-traceid-parentid-flags.
var traceparentPattern = regexp.MustCompile(`^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$`)

// traceID returns the trace id of a valid traceparent header, or "".
func traceID(h string) string {
	m := traceparentPattern.FindStringSubmatch(strings.TrimSpace(h))
	if m == nil || m[1] == "ff" || (m[1] == "00" && m[5] != "") ||
		m[2] == strings.Repeat("0", 32) || m[3] == strings.Repeat("0", 16) {
		return ""
	}
	return m[2]
}

var sessionPattern = regexp.MustCompile(`^[A-Za-z0-9._:@-]{1,128}$`)

// sessionID returns the X-Session-Id header, checked.
func sessionID(c echo.Context) (string, error) {
	v := c.Request().Header.Get("X-Session-Id")
	if v == "" {
		return "", nil
	}
	if !sessionPattern.MatchString(v) {
		return "", api.Validation("X-Session-Id", "X-Session-Id must be 1 to 128 letters, digits, '.', '_', ':', '@' or '-'")
	}
	return v, nil
}

var idemKeyPattern = regexp.MustCompile(`^[\x21-\x7e]{1,255}$`)

// idempotencyKey returns the Idempotency-Key header, checked.
func idempotencyKey(c echo.Context) (string, error) {
	vals := c.Request().Header.Values(control.HeaderIdempotencyKey)
	switch {
	case len(vals) == 0:
		return "", nil
	case len(vals) > 1:
		return "", api.Validation(control.HeaderIdempotencyKey, "send one Idempotency-Key header, not %d", len(vals))
	case !idemKeyPattern.MatchString(vals[0]):
		return "", api.Validation(control.HeaderIdempotencyKey, "the Idempotency-Key must be 1 to 255 visible ASCII characters (a UUID is a good choice)")
	}
	return vals[0], nil
}

// send writes an answer.
func (s *Server) send(c echo.Context, a *control.Answer) error {
	reqOf(c).note(a)
	for k, v := range a.Header {
		c.Response().Header().Set(k, v)
	}
	return c.Blob(a.Status, echo.MIMEApplicationJSON, a.Body)
}
