package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/store"
)

// deleteWait bounds how long DELETE /exec/{id} waits for the killed exec to
// end before it answers with the state it has.
const deleteWait = 15 * time.Second

// getExec serves GET /exec/{id}: the state of a live exec, or the stored
// state of an async one.
func (s *Server) getExec(c echo.Context) error {
	st, err := s.execState(c, c.Param("id"))
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
	key := requestKey(c)
	if l := s.ctl.lookup(id); l != nil && canSee(key, l.tenant) {
		l.cancel(&stopCause{fmt.Sprintf("cancelled by DELETE /exec/%s (key %s)", id, key.ID)})
		s.ctl.metrics.Cancels.WithLabelValues("delete").Inc()
		requestLogger(c, s.log).Info("exec cancelled", "exec_id", id)
		select {
		case <-l.done:
		case <-time.After(deleteWait):
		}
	}
	st, err := s.execState(c, id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

func (s *Server) execState(c echo.Context, id string) (*api.ExecState, error) {
	key := requestKey(c)
	notFound := &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound,
		Message: fmt.Sprintf("no exec %q visible to this key: ids of async execs are kept for %s, those of synchronous ones only while they run", id, s.ctl.cfg.AsyncTTL)}
	if l := s.ctl.lookup(id); l != nil {
		if !canSee(key, l.tenant) {
			return nil, notFound
		}
		st := &api.ExecState{ID: id, Status: stateQueued, CreatedAt: l.created}
		if t := l.startedAt(); !t.IsZero() {
			st.Status, st.StartedAt = stateRunning, &t
		}
		if !l.async || st.Status == stateRunning {
			return st, nil
		}
	}
	rec, err := s.ctl.store.GetExec(c.Request().Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound
	}
	if err != nil {
		return nil, err
	}
	if !canSee(key, rec.Tenant) {
		return nil, notFound
	}
	var st api.ExecState
	if err := json.Unmarshal(rec.Body, &st); err != nil {
		return nil, fmt.Errorf("stored state of exec %s: %w", id, err)
	}
	if rec.State == store.ExecInterrupted {
		st.Status = stateInterrupted
		st.Message = "sandboxd stopped (crash, kill or restart) before this exec finished; the code may have run in part or in full, and it is not run again"
		t := rec.UpdatedAt
		st.FinishedAt = &t
	}
	return &st, nil
}
