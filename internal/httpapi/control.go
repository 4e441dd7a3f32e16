package httpapi

import (
	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/internal/auth"
)

// controlRoutes adds the control plane's endpoints.
func (s *Server) controlRoutes(e *echo.Echo) {
	agent := s.authenticate(auth.RoleAgent)
	admin := s.authenticate(auth.RoleAdmin)
	e.GET("/exec/:id", s.getExec, agent)
	e.DELETE("/exec/:id", s.deleteExec, agent)
	e.GET("/usage", s.usage, agent)
	e.GET("/admin/freeze", s.freezeState, admin)
	e.POST("/admin/freeze", s.freeze, admin)
	e.POST("/admin/unfreeze", s.unfreeze, admin)
	e.GET("/metrics", echo.WrapHandler(s.plane.Metrics().Handler()))
}
