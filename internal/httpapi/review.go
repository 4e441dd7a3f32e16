package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
)

// reviewRoutes serves investigators (roles reviewer and security; admin):
//
//	GET /audit         records, newest first, filtered, paginated
//	GET /audit/{id}    one record
//
// Reviewer and security keys see their own tenant's records; admin keys
// see every tenant's.
func (s *Server) reviewRoutes(e *echo.Echo) {
	rev := s.authenticate(auth.RoleReviewer)
	e.GET("/audit", s.listAudit, rev)
	e.GET("/audit/:id", s.getAudit, rev)
	s.captureRoutes(e)
}

var sha256Pattern = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)

// auditFilter reads GET /audit's query parameters.
func auditFilter(c echo.Context, key *auth.Key) (audit.Filter, error) {
	q := c.QueryParams()
	f := audit.Filter{Tenant: q.Get("tenant"), Kind: q.Get("kind"), Status: q.Get("status"), Profile: q.Get("profile"),
		Session: q.Get("session"), CodeSHA256: q.Get("code_sha256"), Host: q.Get("host"), Subject: q.Get("subject"), Cursor: q.Get("cursor")}
	for name := range q {
		switch name {
		case "tenant", "kind", "status", "profile", "session", "code_sha256", "host", "subject", "cursor", "since", "until", "limit":
		default:
			return f, api.Validation(name, "unknown query parameter %q; filters are tenant, kind, status, profile, session, code_sha256, host, subject, since, until (RFC 3339), limit and cursor", name)
		}
	}
	var ok bool
	if f.Tenant, ok = key.Scope(f.Tenant); !ok {
		return f, &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Field: "tenant",
			Message: fmt.Sprintf("key %q may read the audit records of tenant %s only", key.ID, key.Tenant)}
	}
	if f.CodeSHA256 != "" && !sha256Pattern.MatchString(f.CodeSHA256) {
		return f, api.Validation("code_sha256", "code_sha256 must be 64 hex digits")
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return f, api.Validation(p.name, "%s must be an RFC 3339 time such as 2026-11-30T12:00:00Z", p.name)
			}
			*p.dst = t
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > audit.MaxLimit {
			return f, api.Validation("limit", "limit must be 1 to %d", audit.MaxLimit)
		}
		f.Limit = n
	}
	if f.Cursor != "" {
		if n, err := strconv.ParseInt(f.Cursor, 10, 64); err != nil || n <= 0 {
			return f, api.Validation("cursor", "cursor must be the next_cursor of an earlier page")
		}
	}
	return f, nil
}

func (s *Server) listAudit(c echo.Context) error {
	key := reqOf(c).key
	f, err := auditFilter(c, key)
	if err != nil {
		return err
	}
	recs, next, err := s.audit.Query(c.Request().Context(), f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.AuditPage{Records: recs, NextCursor: next})
}

func (s *Server) getAudit(c echo.Context) error {
	key := reqOf(c).key
	r, err := s.audit.Get(c.Request().Context(), c.Param("id"))
	if errors.Is(err, audit.ErrNotFound) || err == nil && !key.CanSee(r.Tenant) {
		return &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound, Field: "id", Message: fmt.Sprintf("no audit record %q is visible to this key", c.Param("id"))}
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}

// captureRoutes serves captures to investigators:
//
//	GET    /captures               metadata, newest first (reviewer)
//	GET    /captures/{id}          metadata and the text parts (reviewer)
//	GET    /captures/{id}/raw      one part's bytes as an attachment (reviewer)
//	DELETE /captures/{id}          erasure: content removed, tombstone kept (security)
//	POST   /captures/{id}/hold     legal hold on or off (security)
//	POST   /holds/{tenant}         legal hold on all of a tenant's captures (security)
//
// Agents never read captures, not even their own tenant's.
func (s *Server) captureRoutes(e *echo.Echo) {
	rev, sec := s.authenticate(auth.RoleReviewer), s.authenticate(auth.RoleSecurity)
	e.GET("/captures", s.listCaptures, rev)
	e.GET("/captures/:id", s.getCapture, rev)
	e.GET("/captures/:id/raw", s.rawCapture, rev)
	e.DELETE("/captures/:id", s.eraseCapture, sec)
	e.POST("/captures/:id/hold", s.holdCapture, sec)
	e.POST("/holds/:tenant", s.holdTenant, sec)
}

func (s *Server) forensics() (capture.Forensics, error) {
	f, ok := s.captures.(capture.Forensics)
	if !ok {
		return nil, &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "the capture store is not available (the log says why)"}
	}
	return f, nil
}

// visibleCapture loads a capture the key may see, or answers 404.
func (s *Server) visibleCapture(c echo.Context) (*capture.Capture, error) {
	key := reqOf(c).key
	id := c.Param("id")
	capt, err := s.captures.Get(c.Request().Context(), id)
	if errors.Is(err, capture.ErrNotFound) || err == nil && !key.CanSee(capt.Tenant) {
		return nil, &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound, Field: "id", Message: fmt.Sprintf("no capture %q is visible to this key", id)}
	}
	if err != nil {
		reqOf(c).log.Error("reading a capture failed", "capture_id", id, "err", err)
		return nil, &api.Error{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: fmt.Sprintf("capture %s cannot be read: %v", id, err)}
	}
	return capt, nil
}

func (s *Server) listCaptures(c echo.Context) error {
	f, err := s.forensics()
	if err != nil {
		return err
	}
	key := reqOf(c).key
	q := c.QueryParams()
	flt := capture.Filter{Tenant: q.Get("tenant"), Kind: q.Get("kind"), Cursor: q.Get("cursor")}
	var ok bool
	if flt.Tenant, ok = key.Scope(flt.Tenant); !ok {
		return &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Field: "tenant", Message: fmt.Sprintf("key %q may read the captures of tenant %s only", key.ID, key.Tenant)}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return api.Validation("limit", "limit must be 1 to 1000")
		}
		flt.Limit = n
	}
	list, next, err := f.List(c.Request().Context(), flt)
	if errors.Is(err, capture.ErrCursor) {
		return api.Validation("cursor", "cursor must be the next_cursor of an earlier page")
	}
	if err != nil {
		return err
	}
	page := api.CapturePage{Captures: make([]api.Capture, len(list)), NextCursor: next}
	for i := range list {
		page.Captures[i] = *list[i].View()
	}
	return c.JSON(http.StatusOK, page)
}

// auditRead appends a capture_read record (audit.CaptureRead) before a
// capture's content is sent; a failed append withholds the content.
func (s *Server) auditRead(c echo.Context, capt *capture.Capture, action, part string) error {
	rq := reqOf(c)
	r := audit.CaptureRead{CaptureID: capt.ID, CaptureTenant: capt.Tenant, CaptureKind: capt.Kind, KeyID: rq.key.ID, ReaderTenant: rq.key.Tenant,
		Via: "api", Action: action, Part: part}.Record()
	r.RequestID, r.TraceID = rq.id, rq.traceID
	if err := s.plane.Append(r); err != nil {
		reqOf(c).log.Error("writing a capture read's audit record failed; the content is withheld", "capture_id", capt.ID, "err", err)
		return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeAuditUnavailable,
			Message: fmt.Sprintf("capture %s is not sent: reading it could not be recorded in the audit log; the operator must repair the audit log", capt.ID)}
	}
	return nil
}

func (s *Server) getCapture(c echo.Context) error {
	capt, err := s.visibleCapture(c)
	if err != nil {
		return err
	}
	if err := s.auditRead(c, capt, "view", ""); err != nil {
		return err
	}
	v := api.CaptureView{Capture: capt.View(), Text: map[string]string{}}
	for _, p := range capt.Parts {
		if p.Data != nil && len(p.Data) <= 1<<20 && utf8.Valid(p.Data) {
			v.Text[p.Name] = string(p.Data)
		}
	}
	c.Response().Header().Set("X-Content-Type-Options", "nosniff")
	return c.JSON(http.StatusOK, v)
}

// rawCapture sends one part's bytes as an attachment that never renders:
// application/octet-stream, Content-Disposition: attachment, nosniff and a
// sandboxing Content-Security-Policy.
func (s *Server) rawCapture(c echo.Context) error {
	capt, err := s.visibleCapture(c)
	if err != nil {
		return err
	}
	name := c.QueryParam("part")
	if name == "" {
		name = "raw"
		if capt.Part(name) == nil && len(capt.Parts) > 0 {
			name = capt.Parts[0].Name
		}
	}
	p := capt.Part(name)
	if p == nil {
		names := make([]string, len(capt.Parts))
		for i, pp := range capt.Parts {
			names[i] = pp.Name
		}
		return &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound, Field: "part", Message: fmt.Sprintf("capture %s has no part %q; it has: %s", capt.ID, name, strings.Join(names, ", "))}
	}
	if capt.Erased != nil {
		return &api.Error{Status: http.StatusGone, Code: "ERASED", Message: fmt.Sprintf("capture %s was erased at %s by %s", capt.ID, capt.Erased.At.Format(time.RFC3339), capt.Erased.By)}
	}
	if err := s.auditRead(c, capt, "raw", p.Name); err != nil {
		return err
	}
	h := c.Response().Header()
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s-%s.bin"`, capt.ID, p.Name))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	h.Set("Cache-Control", "no-store")
	return c.Blob(http.StatusOK, "application/octet-stream", p.Data)
}

func readAction(c echo.Context, needOn bool) (*api.CaptureAction, error) {
	var a api.CaptureAction
	if c.Request().ContentLength != 0 {
		if err := decodeJSON(c, 16<<10, &a); err != nil {
			return nil, err
		}
	}
	if needOn && a.On == nil {
		return nil, api.Validation("on", `"on" is required: true places the hold, false lifts it`)
	}
	if strings.TrimSpace(a.Reason) == "" {
		return nil, api.Validation("reason", "reason is required: say why (a ticket, a legal request); it goes into the audit log")
	}
	if len(a.Reason) > 500 {
		return nil, api.Validation("reason", "reason is %d bytes; at most 500", len(a.Reason))
	}
	return &a, nil
}

func (s *Server) eraseCapture(c echo.Context) error {
	f, a, capt, err := s.captureAction(c, false)
	if err != nil {
		return err
	}
	key := reqOf(c).key
	switch err := f.Erase(c.Request().Context(), capt.ID, key.ID, a.Reason); {
	case errors.Is(err, capture.ErrHeld):
		return &api.Error{Status: http.StatusConflict, Code: "HELD", Message: fmt.Sprintf("capture %s is under a legal hold; lift the hold first", capt.ID)}
	case errors.Is(err, capture.ErrErased):
		return &api.Error{Status: http.StatusGone, Code: "ERASED", Message: fmt.Sprintf("capture %s was already erased", capt.ID)}
	case err != nil:
		return err
	}
	// The record belongs to the capture's tenant.
	if err := s.recordEvent(c, audit.CaptureErase(reqOf(c).who(""), capt.Tenant, capt.ID, capt.Kind, a.Reason), "the erasure"); err != nil {
		return err
	}
	return s.captureAfter(c, capt.ID)
}

// captureAction starts an erasure or a hold of one capture: the store, the
// body and the capture, if the key may see it.
func (s *Server) captureAction(c echo.Context, needOn bool) (capture.Forensics, *api.CaptureAction, *capture.Capture, error) {
	f, err := s.forensics()
	if err != nil {
		return nil, nil, nil, err
	}
	a, err := readAction(c, needOn)
	if err != nil {
		return nil, nil, nil, err
	}
	capt, err := s.visibleCapture(c)
	if err != nil {
		return nil, nil, nil, err
	}
	return f, a, capt, nil
}

func (s *Server) holdCapture(c echo.Context) error {
	f, a, capt, err := s.captureAction(c, true)
	if err != nil {
		return err
	}
	key := reqOf(c).key
	if err := f.SetHold(c.Request().Context(), capt.ID, *a.On, key.ID, a.Reason); err != nil {
		return err
	}
	if err := s.recordEvent(c, audit.CaptureHold(reqOf(c).who(""), capt.Tenant, capt.ID, *a.On, a.Reason), "the hold"); err != nil {
		return err
	}
	return s.captureAfter(c, capt.ID)
}

func (s *Server) holdTenant(c echo.Context) error {
	f, err := s.forensics()
	if err != nil {
		return err
	}
	a, err := readAction(c, true)
	if err != nil {
		return err
	}
	key := reqOf(c).key
	tenant := c.Param("tenant")
	if !key.CanSee(tenant) {
		return &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Field: "tenant", Message: fmt.Sprintf("key %q may hold the captures of tenant %s only", key.ID, key.Tenant)}
	}
	if err := f.SetTenantHold(c.Request().Context(), tenant, *a.On, key.ID, a.Reason); err != nil {
		return err
	}
	if err := s.recordEvent(c, audit.TenantHold(reqOf(c).who(""), tenant, *a.On, a.Reason), "the tenant hold"); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"tenant": tenant, "hold": *a.On})
}

// captureAfter answers with a capture as it is after an erasure or a
// hold.
func (s *Server) captureAfter(c echo.Context, id string) error {
	after, err := s.captures.Get(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, after.View())
}
