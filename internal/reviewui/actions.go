package reviewui

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
)

// Holds and erasures from the page: security and admin keys get a hold
// (or release) and an erase form on every capture they may see. Each is
// a POST with the session's CSRF token and the same-origin check of the
// sign-in, does what DELETE /captures/{id} and POST /captures/{id}/hold
// do, and writes the same audit record.

// doneMessages are the outcomes an action redirects with (?done=...).
var doneMessages = map[string]string{
	"held":     "The legal hold is on: the capture is kept past its retention and cannot be erased until it is lifted.",
	"released": "The legal hold is lifted.",
	"erased":   "The capture's content is erased; its tombstone and its digests stay, and it is left out of future bundles.",
}

// actions returns what a page's capture sections offer the session.
func (h *Handler) actions(c echo.Context, s *session) Actions {
	_, ok := h.cfg.Captures.(capture.Forensics)
	return Actions{CanAct: ok && s.key.Has(auth.RoleSecurity), CSRF: s.CSRF, Back: c.Request().URL.RequestURI(),
		Done: doneMessages[c.QueryParam("done")]}
}

// checkPost checks a page form's origin and CSRF token and parses it;
// a refusal is returned as the page to show.
func (h *Handler) checkPost(c echo.Context, s *session, what string) error {
	w, r := c.Response(), c.Request()
	if err := h.checkOrigin(r); err != nil {
		h.log.Warn(what+" refused: cross-origin request", "remote", r.RemoteAddr, "key_id", s.KeyID(), "reason", err.Error())
		return &userError{status: http.StatusForbidden, msg: fmt.Sprintf("The %s was refused: it did not come from this page.", what)}
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil || subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(s.CSRF)) != 1 {
		h.log.Warn(what+" refused: missing or wrong CSRF token", "remote", r.RemoteAddr, "key_id", s.KeyID())
		return &userError{status: http.StatusForbidden, msg: fmt.Sprintf("The %s was refused: its form did not come from this page. Reload the page and try again.", what)}
	}
	return nil
}

// captureAction reads a hold or erase form: the store, the capture (one
// the key may see) and the reason.
func (h *Handler) captureAction(c echo.Context, s *session, what string) (capture.Forensics, *capture.Capture, string, error) {
	if err := h.checkPost(c, s, what); err != nil {
		return nil, nil, "", err
	}
	f, ok := h.cfg.Captures.(capture.Forensics)
	if !ok {
		return nil, nil, "", &userError{status: http.StatusServiceUnavailable, msg: "The capture store does not hold or erase captures."}
	}
	if !s.key.Has(auth.RoleSecurity) {
		return nil, nil, "", &userError{status: http.StatusForbidden, msg: fmt.Sprintf("Key %s may not %s captures: that takes the security or admin role.", s.KeyID(), what)}
	}
	cp, err := h.visibleCapture(c.Request(), s, param(c, "id"))
	if err != nil {
		return nil, nil, "", err
	}
	reason := strings.TrimSpace(c.Request().PostForm.Get("reason"))
	switch {
	case reason == "":
		return nil, nil, "", badRequest("Say why (a ticket, a legal request): the reason goes into the audit log.")
	case len(reason) > 500 || !utf8.ValidString(reason):
		return nil, nil, "", badRequest("The reason must be at most 500 bytes of text.")
	}
	return f, cp, reason, nil
}

// after sends the reviewer back to the form's page with the outcome.
func (h *Handler) after(c echo.Context, id, done string) error {
	back := safeNext(c.Request().PostForm.Get("back"))
	if back == "" {
		back = Prefix + "captures/" + url.PathEscape(id)
	}
	u, err := url.Parse(back)
	if err != nil {
		return redirect(c, Prefix+"captures/"+url.PathEscape(id)+"?done="+done)
	}
	q := u.Query()
	q.Set("done", done)
	u.RawQuery = q.Encode()
	return redirect(c, u.String())
}

// appendEvent writes an action's audit record; the action has happened,
// so a failure says so.
func (h *Handler) appendEvent(r *http.Request, rec *audit.Record, what string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
	defer cancel()
	if err := h.cfg.Audit.Append(ctx, rec); err != nil {
		h.log.Error("writing the audit record of "+what+" failed", "subject", rec.Subject, "err", err)
		return &userError{status: http.StatusServiceUnavailable, msg: fmt.Sprintf("The %s was done, but its audit record could not be written; the operator must repair the audit log.", what)}
	}
	return nil
}

func (h *Handler) holdCapture(c echo.Context, s *session) error {
	f, cp, reason, err := h.captureAction(c, s, "hold")
	if err != nil {
		return h.showError(c, s, err)
	}
	r := c.Request()
	on := r.PostForm.Get("on") != "0"
	if err := f.SetHold(r.Context(), cp.ID, on, s.KeyID(), reason); err != nil {
		h.log.Error("setting a hold failed", "capture_id", cp.ID, "err", err)
		return h.fail(c, s, http.StatusInternalServerError, "The hold could not be set; the log says why.")
	}
	if err := h.appendEvent(r, audit.CaptureHold(h.who(s), cp.Tenant, cp.ID, on, reason), "hold"); err != nil {
		return h.showError(c, s, err)
	}
	h.log.Info("capture hold set from the review page", "capture_id", cp.ID, "on", on, "key_id", s.KeyID())
	done := "held"
	if !on {
		done = "released"
	}
	return h.after(c, cp.ID, done)
}

func (h *Handler) eraseCapture(c echo.Context, s *session) error {
	f, cp, reason, err := h.captureAction(c, s, "erasure")
	if err != nil {
		return h.showError(c, s, err)
	}
	r := c.Request()
	if r.PostForm.Get("confirm") != "erase" {
		return h.fail(c, s, http.StatusBadRequest, "Tick the box that says the content goes for good, then erase.")
	}
	switch err := f.Erase(r.Context(), cp.ID, s.KeyID(), reason); {
	case errors.Is(err, capture.ErrHeld):
		return h.fail(c, s, http.StatusConflict, fmt.Sprintf("Capture %s is under a legal hold: lift the hold first.", cp.ID))
	case errors.Is(err, capture.ErrErased):
		return h.fail(c, s, http.StatusGone, fmt.Sprintf("Capture %s was already erased.", cp.ID))
	case err != nil:
		h.log.Error("erasing a capture failed", "capture_id", cp.ID, "err", err)
		return h.fail(c, s, http.StatusInternalServerError, "The capture could not be erased; the log says why.")
	}
	if err := h.appendEvent(r, audit.CaptureErase(h.who(s), cp.Tenant, cp.ID, cp.Kind, reason), "erasure"); err != nil {
		return h.showError(c, s, err)
	}
	h.log.Info("capture erased from the review page", "capture_id", cp.ID, "key_id", s.KeyID())
	return h.after(c, cp.ID, "erased")
}

// who is the identity of the page's records.
func (h *Handler) who(s *session) audit.Who { return audit.Who{Tenant: s.Tenant(), KeyID: s.KeyID()} }
