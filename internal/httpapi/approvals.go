package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/egress/approval"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/store"
)

// approvalRoutes registers the approval endpoints, for security teams:
//
//	GET  /approvals?status=pending   approval requests and decisions
//	GET  /approvals/{id}             one of them
//	POST /approvals/{id}             approve (with a ttl) or reject it
func (s *Server) approvalRoutes(e *echo.Echo) {
	sec := s.authenticate(auth.RoleSecurity)
	e.GET("/approvals", s.listApprovals, sec)
	e.GET("/approvals/:id", s.getApproval, sec)
	e.POST("/approvals/:id", s.decideApproval, sec)
}

func approvalView(a *store.Approval, now time.Time) api.ApprovalView {
	return api.ApprovalView{
		ID: a.ID, Status: a.Status(now), Profile: a.Profile, ProfileVersion: a.ProfileVersion,
		Host: a.Host, Port: a.Port, Method: a.Method, URL: a.URL,
		Tenant: a.Tenant, KeyID: a.KeyID, Client: a.Client, Count: a.Count, FirstSeen: a.FirstSeen, LastSeen: a.LastSeen,
		DecidedBy: a.DecidedBy, DecidedByTenant: a.DecidedTenant, DecidedAt: a.DecidedAt, Reason: a.Reason, ExpiresAt: a.ExpiresAt,
	}
}

const maxApprovalList = 1000

func (s *Server) listApprovals(c echo.Context) error {
	q := c.QueryParams()
	for name := range q {
		switch name {
		case "status", "profile", "host", "limit":
		default:
			return api.Validation(name, "unknown query parameter %q; use status, profile, host and limit", name)
		}
	}
	f := store.ApprovalFilter{Status: q.Get("status"), Profile: q.Get("profile"), Host: q.Get("host")}
	switch f.Status {
	case "":
		f.Status = store.ApprovalPending
	case "all":
		f.Status = ""
	case store.ApprovalPending, store.ApprovalApproved, store.ApprovalRejected, store.ApprovalExpired:
	default:
		return api.Validation("status", "status %q is not allowed; use pending (the default), approved, rejected, expired or all", f.Status)
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxApprovalList {
			return api.Validation("limit", "limit must be a number from 1 to %d", maxApprovalList)
		}
		f.Limit = n
	}
	list, err := s.approvals.List(c.Request().Context(), f)
	if err != nil {
		return err
	}
	now := s.approvals.Now()
	out := api.ApprovalList{Status: q.Get("status"), Approvals: make([]api.ApprovalView, 0, len(list))}
	if out.Status == "" {
		out.Status = store.ApprovalPending
	}
	for _, a := range list {
		out.Approvals = append(out.Approvals, approvalView(a, now))
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) getApproval(c echo.Context) error {
	a, err := s.approvals.Get(c.Request().Context(), c.Param("id"))
	if err != nil {
		return approvalError(c.Param("id"), err)
	}
	return c.JSON(http.StatusOK, approvalView(a, s.approvals.Now()))
}

func (s *Server) decideApproval(c echo.Context) error {
	var body api.ApprovalDecisionRequest
	if err := decodeJSON(c, 16<<10, &body); err != nil {
		return err
	}
	key := reqOf(c).key
	id := c.Param("id")
	_, after, err := s.approvals.Decide(c.Request().Context(), id, approval.Decision{
		Decision: body.Decision, TTL: body.TTL, Reason: body.Reason, By: key.ID, ByTenant: key.Tenant,
	})
	if err != nil {
		return approvalError(id, err)
	}
	if err := s.auditAdmin(c, "approval_"+body.Decision, id, body.Reason, map[string]string{"ttl": body.TTL}); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, approvalView(after, s.approvals.Now()))
}

func approvalError(id string, err error) error {
	var ve *approval.ValidationError
	switch {
	case errors.As(err, &ve):
		return api.Validation(ve.Field, "%s", ve.Msg)
	case errors.Is(err, store.ErrNotFound):
		return &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound, Field: "id",
			Message: fmt.Sprintf("no approval request is named %q; GET /approvals?status=all lists them", id)}
	case errors.Is(err, store.ErrApprovalExpired):
		return &api.Error{Status: http.StatusConflict, Code: api.CodeApprovalExpired, Field: "id",
			Message: err.Error() + "; it allows nothing now, and the next request to its host files a new approval request to decide instead"}
	}
	return err
}
