package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/sandboxd/sandboxd/api"
)

// usage serves GET /usage?session=ID (the caller's tenant's session; an
// admin may add tenant=) and GET /usage?tenant=ID (an admin, or a key of
// that tenant): what was used against each budget.
func (s *Server) usage(c echo.Context) error {
	key := requestKey(c)
	session, tenant := c.QueryParam("session"), c.QueryParam("tenant")
	if tenant == "" {
		tenant = key.Tenant
	} else if !canSee(key, tenant) {
		return &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Message: "a key sees only its own tenant's usage unless it has the admin role"}
	}
	ctx := c.Request().Context()
	switch {
	case session != "":
		if !sessionPattern.MatchString(session) {
			return validation("session", "session must be 1 to 128 letters, digits, '.', '_', ':', '@' or '-'")
		}
		r, err := s.ctl.limits.SessionUsage(ctx, tenant, session)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, r)
	case c.QueryParam("tenant") != "":
		r, err := s.ctl.limits.TenantUsage(ctx, tenant)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, r)
	}
	return validation("", "name what to report: GET /usage?session=ID or GET /usage?tenant=ID")
}
