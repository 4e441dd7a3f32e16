package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Error is an error answer of the API: its HTTP status and the fields of
// {"error": {"code", "message", "field", ...}}. Code is one of the api
// package's Code constants (api.CodeValidation, api.CodeRateLimited, ...).
type Error struct {
	Status  int
	Code    string
	Message string
	// Field names the request field, header or parameter at fault
	// (limits.memory_mb, files[0].path, Idempotency-Key).
	Field string
	// Budget, Limit and Used name the rate or budget a 429 ran into.
	Budget string
	Limit  *float64
	Used   *float64
	// ContentType and Size describe a page /fetch refused
	// (UNSUPPORTED_CONTENT); Size is -1 when unknown.
	ContentType string
	Size        *int64
	// RetryAfter is the Retry-After header: how long to wait before the
	// same request may succeed (0: not given).
	RetryAfter time.Duration
	// RequestID is X-Request-Id: it finds the request in the server's log.
	RequestID string
	// Body is the answer's body as received.
	Body []byte
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sandboxd: HTTP %d", e.Status)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, " (field %s)", e.Field)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

// Temporary reports whether the same request may succeed later: the
// service was busy, rate limited, still running an earlier request with
// the same Idempotency-Key, unavailable, or the upstream of a fetch failed.
func (e *Error) Temporary() bool {
	switch e.Code {
	case api.CodeBusy, api.CodeRateLimited, api.CodeInProgress, api.CodeUnavailable, api.CodeUpstreamTimeout, api.CodeUpstreamError:
		return true
	case api.CodeBudgetExceeded:
		return e.RetryAfter > 0
	}
	return false
}

// AsError returns the *Error in err's chain.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// IsCode reports whether err is an API error with one of the codes.
func IsCode(err error, codes ...string) bool {
	e, ok := AsError(err)
	return ok && slices.Contains(codes, e.Code)
}

// StatusOf returns the HTTP status of an API error, or 0.
func StatusOf(err error) int {
	if e, ok := AsError(err); ok {
		return e.Status
	}
	return 0
}

// RetryAfter returns the Retry-After of an API error, or 0.
func RetryAfter(err error) time.Duration {
	if e, ok := AsError(err); ok {
		return e.RetryAfter
	}
	return 0
}

// errorOf builds the *Error of an answer that is not a success. A body
// that is not the API's error JSON (a proxy's page) keeps its first bytes
// as the message.
func errorOf(resp *http.Response, raw []byte) *Error {
	e := &Error{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id"), Body: raw}
	if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	var body api.ErrorBody
	if err := json.Unmarshal(raw, &body); err == nil && body.Error != nil && body.Error.Code != "" {
		a := body.Error
		e.Code, e.Message, e.Field = a.Code, a.Message, a.Field
		e.Budget, e.Limit, e.Used = a.Budget, a.Limit, a.Used
		e.ContentType, e.Size = a.ContentType, a.Size
		return e
	}
	msg := strings.TrimSpace(string(raw))
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	e.Message = msg
	return e
}
