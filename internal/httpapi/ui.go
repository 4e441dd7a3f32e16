package httpapi

import (
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/internal/reviewui"
)

// uiRoutes serves the review page (package reviewui) at /ui/:
// investigators sign in with a reviewer, security or admin key and read the
// audit log and captures in a browser, with the same tenant scoping as GET
// /audit and GET /captures. The page sets its own security headers (a
// strict Content-Security-Policy, nosniff, no-referrer) on every response.
func (s *Server) uiRoutes(e *echo.Echo) {
	reviewui.New(reviewui.Config{Audit: s.audit, Captures: s.captures, Keys: s.cfg.Keys, Log: s.log}).Register(e.Group(strings.TrimSuffix(reviewui.Prefix, "/")))
}
