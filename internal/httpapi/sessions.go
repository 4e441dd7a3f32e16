package httpapi

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/control/budget"
	"github.com/sandboxd/sandboxd/internal/sessions"
)

// sessionCreateBody bounds the body of POST /sessions.
const sessionCreateBody = 64 << 10

// sessionRoutes adds the session endpoints (internal/sessions).
func (s *Server) sessionRoutes(e *echo.Echo) {
	agent := s.authenticate(auth.RoleAgent)
	e.POST("/sessions", s.createSession, agent)
	// A session's own routes go to the replica it lives on (forward.go).
	e.GET("/sessions/:id", s.getSession, agent, s.sessionHome)
	e.DELETE("/sessions/:id", s.deleteSession, agent, s.sessionHome)
	e.POST("/sessions/:id/exec", s.sessionExec, agent, s.sessionHome)
	e.POST("/sessions/:id/files", s.sessionPutFiles, agent, s.sessionHome)
	e.GET("/sessions/:id/files/:path", s.sessionGetFile, agent, s.sessionHome)
}

func (s *Server) createSession(c echo.Context) error {
	r := reqOf(c)
	xs, err := sessionID(c)
	if err != nil {
		return err
	}
	var req api.SessionCreateRequest
	if err := decodeJSON(c, sessionCreateBody, &req); err != nil {
		return err
	}
	ls, err := s.sessions.Create(c.Request().Context(), &sessions.Start{Key: r.key, XSession: xs, Req: &req, Who: r.who(""), Log: r.log,
		Profile: func(name string) { r.profile = name }})
	if err != nil {
		return err
	}
	c.Response().Header().Set("Location", "/sessions/"+ls.ID())
	return c.JSON(http.StatusCreated, ls.Info())
}

// lookupSession returns the session of the request's key.
func (s *Server) lookupSession(c echo.Context) (*sessions.Session, error) {
	r := reqOf(c)
	ls, err := s.sessions.Lookup(r.key, c.Param("id"))
	if err != nil {
		return nil, err
	}
	r.log = r.log.With("session_id", ls.ID())
	return ls, nil
}

func (s *Server) getSession(c echo.Context) error {
	ls, err := s.lookupSession(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ls.Info())
}

func (s *Server) deleteSession(c echo.Context) error {
	ls, err := s.lookupSession(c)
	if err != nil {
		return err
	}
	s.sessions.End(ls, fmt.Sprintf("ended by DELETE /sessions/%s (key %s)", ls.ID(), reqOf(c).key.ID))
	return c.JSON(http.StatusOK, ls.Info())
}

// sessionExec serves POST /sessions/{id}/exec.
func (s *Server) sessionExec(c echo.Context) error {
	r := reqOf(c)
	if e := s.plane.AllowRequest(c.Request().Context(), r.key.Tenant, budget.KindExec); e != nil {
		return e
	}
	ls, err := s.lookupSession(c)
	if err != nil {
		return err
	}
	xs, err := sessionID(c)
	if err != nil {
		return err
	}
	if c.Request().Header.Get(control.HeaderIdempotencyKey) != "" {
		return api.Validation(control.HeaderIdempotencyKey, "session calls take no Idempotency-Key: a call changes the session's state, so a retry is not the same call; check the session's state with GET /sessions/{id} instead")
	}
	var req api.SessionExecRequest
	if err := decodeJSON(c, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	r.profile = ls.Profile().Name
	a, err := s.sessions.Exec(c.Request().Context(), ls, &sessions.Call{Key: r.key, XSession: xs, Req: &req, Who: r.who(""), Log: r.log})
	if err != nil {
		return err
	}
	return s.send(c, a)
}

// sessionPutFiles serves POST /sessions/{id}/files.
func (s *Server) sessionPutFiles(c echo.Context) error {
	ls, err := s.lookupSession(c)
	if err != nil {
		return err
	}
	var req api.SessionFilesRequest
	if err := decodeJSON(c, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	r := reqOf(c)
	resp, err := s.sessions.PutFiles(c.Request().Context(), ls, req.Files, &sessions.Transfer{Who: r.who(""), Log: r.log})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, resp)
}

// sessionGetFile serves GET /sessions/{id}/files/{path}.
func (s *Server) sessionGetFile(c echo.Context) error {
	ls, err := s.lookupSession(c)
	if err != nil {
		return err
	}
	// The decoded path: a nested one may come with its slashes escaped.
	path := strings.TrimPrefix(c.Request().URL.Path, "/sessions/"+ls.ID()+"/files/")
	r := reqOf(c)
	f, err := s.sessions.GetFile(c.Request().Context(), ls, path, &sessions.Transfer{Who: r.who(""), Log: r.log})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, f)
}
