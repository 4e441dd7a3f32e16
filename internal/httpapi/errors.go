package httpapi

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
)

// Error codes of the JSON error body.
const (
	CodeValidation  = "VALIDATION"
	CodeAuth        = "AUTH"
	CodeForbidden   = "FORBIDDEN"
	CodeNotFound    = "NOT_FOUND"
	CodeMethod      = "METHOD_NOT_ALLOWED"
	CodeBusy        = "BUSY"
	CodeUnavailable = "UNAVAILABLE"
	CodeInternal    = "INTERNAL"
)

// Error is an error with its HTTP status and typed code; it is rendered as
// {"error": {"code": ..., "message": ..., "field": ...}}.
type Error struct {
	Status     int    `json:"-"`
	Code       string `json:"code"`
	Message    string `json:"message"`
	Field      string `json:"field,omitempty"`
	RetryAfter int    `json:"-"` // seconds; sets Retry-After when > 0
	// Budget, Limit and Used name the rate or budget a 429 ran into.
	Budget string   `json:"budget,omitempty"`
	Limit  *float64 `json:"limit,omitempty"`
	Used   *float64 `json:"used,omitempty"`
	// ContentType and Size describe content /fetch refused
	// (UNSUPPORTED_CONTENT); Size is -1 when unknown.
	ContentType string `json:"content_type,omitempty"`
	Size        *int64 `json:"size,omitempty"`
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", e.Code, e.Field, e.Message)
	}
	return e.Code + ": " + e.Message
}

// ErrorBody is the JSON shape of every error response.
type ErrorBody struct {
	Error *Error `json:"error"`
}

func validation(field, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeValidation, Field: field, Message: fmt.Sprintf(format, args...)}
}

// errorHandler renders every error as the typed JSON body. Errors that are
// not ours are logged and hidden behind INTERNAL.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var e *Error
	var he *echo.HTTPError
	switch {
	case errors.As(err, &e):
	case errors.As(err, &he):
		e = fromHTTPError(he)
	default:
		requestLogger(c, s.log).Error("internal error", "err", err)
		e = &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error; the request id in X-Request-Id helps the operator find it in the log"}
	}
	if e.RetryAfter > 0 {
		c.Response().Header().Set("Retry-After", fmt.Sprint(e.RetryAfter))
	}
	if e.Status == http.StatusUnauthorized {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="sandboxd"`)
	}
	c.Set(ctxErrorCode, e.Code)
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(e.Status)
		return
	}
	_ = c.JSON(e.Status, ErrorBody{Error: e})
}

func fromHTTPError(he *echo.HTTPError) *Error {
	msg := http.StatusText(he.Code)
	if m, ok := he.Message.(string); ok && m != "" {
		msg = m
	}
	switch he.Code {
	case http.StatusNotFound:
		return &Error{Status: he.Code, Code: CodeNotFound, Message: "no such endpoint; see the README for the API"}
	case http.StatusMethodNotAllowed:
		return &Error{Status: he.Code, Code: CodeMethod, Message: "method not allowed on this endpoint"}
	case http.StatusRequestEntityTooLarge:
		return &Error{Status: http.StatusBadRequest, Code: CodeValidation, Message: msg}
	case http.StatusUnauthorized:
		return &Error{Status: he.Code, Code: CodeAuth, Message: msg}
	}
	if he.Code >= 500 {
		return &Error{Status: he.Code, Code: CodeInternal, Message: msg}
	}
	return &Error{Status: he.Code, Code: CodeValidation, Message: msg}
}
