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
	key := reqOf(c).key
	session, tenant := c.QueryParam("session"), c.QueryParam("tenant")
	if tenant == "" {
		tenant = key.Tenant
	} else if !key.CanSee(tenant) {
		return &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Message: "a key sees only its own tenant's usage unless it has the admin role"}
	}
	ctx := c.Request().Context()
	limits := s.plane.Limits()
	switch {
	case session != "":
		if !sessionPattern.MatchString(session) {
			return api.Validation("session", "session must be 1 to 128 letters, digits, '.', '_', ':', '@' or '-'")
		}
		r, err := limits.SessionUsage(ctx, tenant, session)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, r)
	case c.QueryParam("tenant") != "":
		r, err := limits.TenantUsage(ctx, tenant)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, r)
	}
	return api.Validation("", "name what to report: GET /usage?session=ID or GET /usage?tenant=ID")
}
