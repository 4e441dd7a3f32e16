package httpapi

import (
	"context"
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
			return f, validation(name, "unknown query parameter %q; filters are tenant, kind, status, profile, session, code_sha256, host, subject, since, until (RFC 3339), limit and cursor", name)
		}
	}
	if !key.Has(auth.RoleAdmin) {
		if f.Tenant != "" && f.Tenant != key.Tenant {
			return f, &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Field: "tenant",
				Message: fmt.Sprintf("key %q may read the audit records of tenant %s only", key.ID, key.Tenant)}
		}
		f.Tenant = key.Tenant
	}
	if f.CodeSHA256 != "" && !sha256Pattern.MatchString(f.CodeSHA256) {
		return f, validation("code_sha256", "code_sha256 must be 64 hex digits")
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return f, validation(p.name, "%s must be an RFC 3339 time such as 2026-11-30T12:00:00Z", p.name)
			}
			*p.dst = t
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > audit.MaxLimit {
			return f, validation("limit", "limit must be 1 to %d", audit.MaxLimit)
		}
		f.Limit = n
	}
	if f.Cursor != "" {
		if n, err := strconv.ParseInt(f.Cursor, 10, 64); err != nil || n <= 0 {
			return f, validation("cursor", "cursor must be the next_cursor of an earlier page")
		}
	}
	return f, nil
}

func (s *Server) listAudit(c echo.Context) error {
	key := requestKey(c)
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
	key := requestKey(c)
	r, err := s.audit.Get(c.Request().Context(), c.Param("id"))
	if errors.Is(err, audit.ErrNotFound) || err == nil && !key.Has(auth.RoleAdmin) && r.Tenant != key.Tenant {
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
	key := requestKey(c)
	id := c.Param("id")
	capt, err := s.captures.Get(c.Request().Context(), id)
	if errors.Is(err, capture.ErrNotFound) || err == nil && !key.Has(auth.RoleAdmin) && capt.Tenant != key.Tenant {
		return nil, &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound, Field: "id", Message: fmt.Sprintf("no capture %q is visible to this key", id)}
	}
	if err != nil {
		requestLogger(c, s.log).Error("reading a capture failed", "capture_id", id, "err", err)
		return nil, &api.Error{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: fmt.Sprintf("capture %s cannot be read: %v", id, err)}
	}
	return capt, nil
}

func (s *Server) listCaptures(c echo.Context) error {
	f, err := s.forensics()
	if err != nil {
		return err
	}
	key := requestKey(c)
	q := c.QueryParams()
	flt := capture.Filter{Tenant: q.Get("tenant"), Kind: q.Get("kind"), Cursor: q.Get("cursor")}
	if !key.Has(auth.RoleAdmin) {
		if flt.Tenant != "" && flt.Tenant != key.Tenant {
			return &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Field: "tenant", Message: fmt.Sprintf("key %q may read the captures of tenant %s only", key.ID, key.Tenant)}
		}
		flt.Tenant = key.Tenant
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return validation("limit", "limit must be 1 to 1000")
		}
		flt.Limit = n
	}
	list, next, err := f.List(c.Request().Context(), flt)
	if errors.Is(err, capture.ErrCursor) {
		return validation("cursor", "cursor must be the next_cursor of an earlier page")
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
	m := metaOf(c)
	r := audit.CaptureRead{CaptureID: capt.ID, CaptureTenant: capt.Tenant, CaptureKind: capt.Kind, KeyID: m.keyID, ReaderTenant: m.tenant,
		Via: "api", Action: action, Part: part}.Record()
	r.RequestID, r.TraceID = m.requestID, m.traceID
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.audit.Append(ctx, r); err != nil {
		requestLogger(c, s.log).Error("writing a capture read's audit record failed; the content is withheld", "capture_id", capt.ID, "err", err)
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
		return nil, validation("on", `"on" is required: true places the hold, false lifts it`)
	}
	if strings.TrimSpace(a.Reason) == "" {
		return nil, validation("reason", "reason is required: say why (a ticket, a legal request); it goes into the audit log")
	}
	if len(a.Reason) > 500 {
		return nil, validation("reason", "reason is %d bytes; at most 500", len(a.Reason))
	}
	return &a, nil
}

func (s *Server) eraseCapture(c echo.Context) error {
	f, a, capt, err := s.captureAction(c, false)
	if err != nil {
		return err
	}
	key := requestKey(c)
	switch err := f.Erase(c.Request().Context(), capt.ID, key.ID, a.Reason); {
	case errors.Is(err, capture.ErrHeld):
		return &api.Error{Status: http.StatusConflict, Code: "HELD", Message: fmt.Sprintf("capture %s is under a legal hold; lift the hold first", capt.ID)}
	case errors.Is(err, capture.ErrErased):
		return &api.Error{Status: http.StatusGone, Code: "ERASED", Message: fmt.Sprintf("capture %s was already erased", capt.ID)}
	case err != nil:
		return err
	}
	r := metaOf(c).record(audit.KindCaptureErase)
	r.Tenant = capt.Tenant // the record belongs to the capture's tenant
	r.Subject, r.Status, r.Message, r.CaptureIDs = capt.ID, "erased", a.Reason, []string{capt.ID}
	r.Detail = map[string]string{"by_tenant": key.Tenant, "kind": capt.Kind}
	if err := s.auditEvent(c, r, "the erasure"); err != nil {
		return err
	}
	after, _ := s.captures.Get(c.Request().Context(), capt.ID)
	return c.JSON(http.StatusOK, after)
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
	key := requestKey(c)
	if err := f.SetHold(c.Request().Context(), capt.ID, *a.On, key.ID, a.Reason); err != nil {
		return err
	}
	r := metaOf(c).record(audit.KindCaptureHold)
	r.Tenant = capt.Tenant
	r.Subject, r.Action, r.Status, r.Message, r.CaptureIDs = capt.ID, holdAction(*a.On), "ok", a.Reason, []string{capt.ID}
	if err := s.auditEvent(c, r, "the hold"); err != nil {
		return err
	}
	after, _ := s.captures.Get(c.Request().Context(), capt.ID)
	return c.JSON(http.StatusOK, after)
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
	key := requestKey(c)
	tenant := c.Param("tenant")
	if !key.Has(auth.RoleAdmin) && tenant != key.Tenant {
		return &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Field: "tenant", Message: fmt.Sprintf("key %q may hold the captures of tenant %s only", key.ID, key.Tenant)}
	}
	if err := f.SetTenantHold(c.Request().Context(), tenant, *a.On, key.ID, a.Reason); err != nil {
		return err
	}
	r := metaOf(c).record(audit.KindCaptureHold)
	r.Tenant = tenant
	r.Subject, r.Action, r.Status, r.Message = "tenant:"+tenant, holdAction(*a.On), "ok", a.Reason
	if err := s.auditEvent(c, r, "the tenant hold"); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"tenant": tenant, "hold": *a.On})
}

func holdAction(on bool) string {
	if on {
		return "hold"
	}
	return "release"
}

// auditEvent appends a record of a reviewer's or operator's action.
func (s *Server) auditEvent(c echo.Context, r *audit.Record, what string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.audit.Append(ctx, r); err != nil {
		requestLogger(c, s.log).Error("writing an audit record failed", "kind", r.Kind, "err", err)
		return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeAuditUnavailable,
			Message: fmt.Sprintf("%s took effect, but its audit record could not be written; the operator must repair the audit log", what)}
	}
	return nil
}

// SweepCaptures deletes the captures whose retention ended and writes one
// audit record per deletion. sandboxd serve runs it periodically.
func (s *Server) SweepCaptures(ctx context.Context, now time.Time) (int, error) {
	f, ok := s.captures.(capture.Forensics)
	if !ok {
		return 0, nil
	}
	swept, err := f.Sweep(ctx, now)
	for _, sw := range swept {
		r := &audit.Record{Kind: audit.KindCaptureDelete, Tenant: sw.Tenant, Subject: sw.ID, Status: "deleted", CaptureIDs: []string{sw.ID},
			Message: "retention ended", Detail: map[string]string{"kind": sw.Kind, "created_at": sw.CreatedAt.Format(time.RFC3339), "expires_at": sw.ExpiresAt.Format(time.RFC3339)}}
		if aerr := s.audit.Append(ctx, r); aerr != nil {
			s.log.Error("writing a retention deletion's audit record failed", "capture_id", sw.ID, "err", aerr)
			if err == nil {
				err = aerr
			}
		}
	}
	if len(swept) > 0 {
		s.log.Info("retention: deleted expired captures", "count", len(swept))
	}
	// Blobs no capture references any more (a crash between a deletion's
	// commit and its file removal leaves some) go too.
	if gc, ok := s.captures.(interface {
		GC(context.Context) (int, error)
	}); ok {
		if n, gerr := gc.GC(ctx); gerr != nil {
			s.log.Warn("capture blob GC failed", "err", gerr)
		} else if n > 0 {
			s.log.Info("capture blob GC removed orphans", "count", n)
		}
	}
	return len(swept), err
}
