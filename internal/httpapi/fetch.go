package httpapi

import (
	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/control/budget"
	"github.com/sandboxd/sandboxd/internal/fetchflow"
)

// fetch serves POST /fetch.
func (s *Server) fetch(c echo.Context) error {
	var req api.FetchRequest
	tc, err := s.startCall(c, budget.KindFetch, &req)
	if err != nil {
		return err
	}
	a, err := s.fetches.Fetch(c.Request().Context(), &fetchflow.Call{Key: tc.r.key, Session: tc.session, IdemKey: tc.idemKey, Req: &req,
		Who: tc.r.who(tc.session), Log: tc.r.log, Profile: func(name string) { tc.r.profile = name }})
	if err != nil {
		return err
	}
	return s.send(c, a)
}
