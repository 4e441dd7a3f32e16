package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
)

// killWait bounds how long a freeze waits for killed execs to end.
const killWait = 15 * time.Second

func (s *Server) freezeState(c echo.Context) error {
	return c.JSON(http.StatusOK, api.FreezeResponse{FreezeState: *s.plane.FreezeState()})
}

// freeze serves POST /admin/freeze: every new exec answers 503 FROZEN, at
// once and after restarts, until POST /admin/unfreeze.
func (s *Server) freeze(c echo.Context) error {
	var req api.FreezeRequest
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, 64<<10))
	if err != nil {
		return api.Validation("", "the body could not be read: %v", err)
	}
	if len(body) > 0 {
		if err := decodeBytes(body, 64<<10, &req); err != nil {
			return err
		}
	}
	if len(req.Reason) > 500 {
		return api.Validation("reason", "reason is %d bytes; at most 500 are allowed", len(req.Reason))
	}
	r := reqOf(c)
	st := &api.FreezeState{Frozen: true, Since: time.Now().UTC(), By: r.key.ID, Reason: req.Reason}
	// In force at once, stored for restarts. If storing fails the freeze
	// still holds in this process (fail safe) and the caller is told.
	storeErr := s.plane.Freeze(c.Request().Context(), st)
	r.log.Warn("sandboxd frozen", "by", r.key.ID, "reason", req.Reason, "kill_running", req.KillRunning)
	resp := api.FreezeResponse{FreezeState: *st}
	if req.KillRunning {
		resp.Killed = s.flow.KillAll(fmt.Sprintf("sandboxd was frozen by an operator (key %s)%s", r.key.ID, control.ReasonSuffix(req.Reason)), killWait)
		s.plane.Metrics().Cancels.WithLabelValues("freeze").Add(float64(resp.Killed))
	}
	if storeErr != nil {
		r.log.Error("storing the kill switch failed", "err", storeErr)
		return &api.Error{Status: http.StatusInternalServerError, Code: api.CodeInternal,
			Message: "sandboxd is frozen now, but the store failed to record it, so the freeze would not survive a restart; retry the request"}
	}
	if err := s.auditAdmin(c, "freeze", "", req.Reason, map[string]string{"kill_running": fmt.Sprint(req.KillRunning), "killed": fmt.Sprint(resp.Killed)}); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, resp)
}

// unfreeze serves POST /admin/unfreeze. The stored state changes first: if
// that fails, sandboxd stays frozen.
func (s *Server) unfreeze(c echo.Context) error {
	r := reqOf(c)
	st := &api.FreezeState{Frozen: false, Since: time.Now().UTC(), By: r.key.ID}
	if err := s.plane.Unfreeze(c.Request().Context(), st); err != nil {
		r.log.Error("storing the kill switch failed", "err", err)
		return &api.Error{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: "the store failed to record the unfreeze, so sandboxd stays frozen; retry the request"}
	}
	r.log.Warn("sandboxd unfrozen", "by", r.key.ID)
	if err := s.auditAdmin(c, "unfreeze", "", "", nil); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.FreezeResponse{FreezeState: *st})
}

// auditAdmin appends the record of an admin action.
func (s *Server) auditAdmin(c echo.Context, action, subject, message string, detail map[string]string) error {
	return s.recordEvent(c, audit.Admin(reqOf(c).who(""), action, subject, message, detail), "the "+action)
}

// recordEvent appends the record of an action that has taken effect; the
// error, if any, is the 503 to answer.
func (s *Server) recordEvent(c echo.Context, r *audit.Record, what string) error {
	if e := s.plane.RecordEvent(r, what, reqOf(c).log); e != nil {
		return e
	}
	return nil
}
