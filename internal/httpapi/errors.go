package httpapi

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/sandboxd/sandboxd/api"
)

// errorHandler renders every error as the typed JSON body. Errors that are
// not ours are logged and hidden behind INTERNAL.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var e *api.Error
	var he *echo.HTTPError
	switch {
	case errors.As(err, &e):
	case errors.As(err, &he):
		e = fromHTTPError(he, c)
	default:
		reqOf(c).log.Error("internal error", "err", err)
		e = &api.Error{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: "internal error; the request id in X-Request-Id helps the operator find it in the log"}
	}
	if e.RetryAfter > 0 {
		c.Response().Header().Set("Retry-After", fmt.Sprint(e.RetryAfter))
	}
	if e.Status == http.StatusUnauthorized {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="sandboxd"`)
	}
	reqOf(c).errorCode = e.Code
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(e.Status)
		return
	}
	_ = c.JSON(e.Status, api.ErrorBody{Error: e})
}

// fromHTTPError types an error of echo's own (no route, no such method on
// a route, a body over echo's limit).
func fromHTTPError(he *echo.HTTPError, c echo.Context) *api.Error {
	msg := http.StatusText(he.Code)
	if m, ok := he.Message.(string); ok && m != "" {
		msg = m
	}
	switch he.Code {
	case http.StatusNotFound:
		return &api.Error{Status: he.Code, Code: api.CodeNotFound, Message: "no such endpoint; see the README for the API"}
	case http.StatusMethodNotAllowed:
		return &api.Error{Status: he.Code, Code: api.CodeMethod,
			Message: fmt.Sprintf("%s is not served on this path; it serves %s (the Allow header lists them)", c.Request().Method, c.Response().Header().Get(echo.HeaderAllow))}
	case http.StatusRequestEntityTooLarge:
		return &api.Error{Status: http.StatusBadRequest, Code: api.CodeValidation, Message: msg}
	case http.StatusUnauthorized:
		return &api.Error{Status: he.Code, Code: api.CodeAuth, Message: msg}
	}
	if he.Code >= 500 {
		return &api.Error{Status: he.Code, Code: api.CodeInternal, Message: msg}
	}
	return &api.Error{Status: he.Code, Code: api.CodeValidation, Message: msg}
}
