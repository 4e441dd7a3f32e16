package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// deleteWait bounds how long DELETE /exec/{id} waits for the killed exec to
// end before it answers with the state it has.
const deleteWait = 15 * time.Second

// getExec serves GET /exec/{id}: the state of a live exec, or the stored
// state of an async one.
func (s *Server) getExec(c echo.Context) error {
	st, err := s.flow.State(c.Request().Context(), reqOf(c).key, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

// deleteExec serves DELETE /exec/{id}: it kills a queued or running exec
// (its status becomes killed) and answers with the exec's state. Deleting an
// exec that has ended changes nothing and answers its state.
func (s *Server) deleteExec(c echo.Context) error {
	id := c.Param("id")
	r := reqOf(c)
	if s.flow.Cancel(r.key, id, fmt.Sprintf("cancelled by DELETE /exec/%s (key %s)", id, r.key.ID), deleteWait) {
		s.plane.Metrics().Cancels.WithLabelValues("delete").Inc()
		r.log.Info("exec cancelled", "exec_id", id)
	}
	st, err := s.flow.State(c.Request().Context(), r.key, id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}
