package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/sandboxd/sandboxd/api"
)

// killWait bounds how long a freeze waits for killed execs to end.
const killWait = 15 * time.Second

func (s *Server) freezeState(c echo.Context) error {
	return c.JSON(http.StatusOK, api.FreezeResponse{FreezeState: *s.ctl.frozen.Load()})
}

// freeze serves POST /admin/freeze: every new exec answers 503 FROZEN, at
// once and after restarts, until POST /admin/unfreeze.
func (s *Server) freeze(c echo.Context) error {
	var req api.FreezeRequest
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, 64<<10))
	if err != nil {
		return validation("", "the body could not be read: %v", err)
	}
	if len(body) > 0 {
		if err := decodeJSONFrom(bytes.NewReader(body), 64<<10, &req); err != nil {
			return err
		}
	}
	if len(req.Reason) > 500 {
		return validation("reason", "reason is %d bytes; at most 500 are allowed", len(req.Reason))
	}
	key := requestKey(c)
	st := &api.FreezeState{Frozen: true, Since: time.Now().UTC(), By: key.ID, Reason: req.Reason}
	// In force at once, stored for restarts. If storing fails the freeze
	// still holds in this process (fail safe) and the caller is told.
	s.ctl.frozen.Store(st)
	log := requestLogger(c, s.log)
	log.Warn("sandboxd frozen", "by", key.ID, "reason", req.Reason, "kill_running", req.KillRunning)
	resp := api.FreezeResponse{FreezeState: *st}
	if req.KillRunning {
		list := s.ctl.killAll(&stopCause{fmt.Sprintf("sandboxd was frozen by an operator (key %s)%s", key.ID, reasonSuffix(req.Reason))})
		s.ctl.metrics.Cancels.WithLabelValues("freeze").Add(float64(len(list)))
		waitDone(list, killWait)
		resp.Killed = len(list)
	}
	if err := s.storeFreeze(c.Request().Context(), st); err != nil {
		log.Error("storing the kill switch failed", "err", err)
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
	key := requestKey(c)
	st := &api.FreezeState{Frozen: false, Since: time.Now().UTC(), By: key.ID}
	if err := s.storeFreeze(c.Request().Context(), st); err != nil {
		requestLogger(c, s.log).Error("storing the kill switch failed", "err", err)
		return &api.Error{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: "the store failed to record the unfreeze, so sandboxd stays frozen; retry the request"}
	}
	s.ctl.frozen.Store(st)
	requestLogger(c, s.log).Warn("sandboxd unfrozen", "by", key.ID)
	if err := s.auditAdmin(c, "unfreeze", "", "", nil); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.FreezeResponse{FreezeState: *st})
}

func (s *Server) storeFreeze(ctx context.Context, st *api.FreezeState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return s.ctl.store.SetSetting(context.WithoutCancel(ctx), freezeSetting, string(b))
}
