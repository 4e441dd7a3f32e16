package reviewui

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
)

// ---- the audit log ----

// auditForm is the search form as typed, shown back to the reviewer.
type auditForm struct {
	Tenant, Kind, Status, Profile, Session, CodeSHA256, Host, Subject, Since, Until string
	Limit                                                                           int
}

type auditData struct {
	Form    auditForm
	Admin   bool
	Tenant  string // the session's tenant
	Kinds   []string
	Limits  []int
	Records []audit.Record
	// Newest goes back to the first page; Older to the next one ("" when
	// there is none).
	Newest, Older string
	Error         string
}

var kinds = []string{audit.KindExec, audit.KindFetch, audit.KindProfileReload, audit.KindKeysReload,
	audit.KindCaptureErase, audit.KindCaptureHold, audit.KindCaptureDelete, audit.KindCaptureRead, audit.KindAdmin, audit.KindSession}

var (
	sha256Pattern = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)
	limits        = []int{25, 50, 100, 200, 500}
)

const defaultLimit = 50

// userError is a refusal to show on the page.
type userError struct {
	status int
	msg    string
}

func (e *userError) Error() string { return e.msg }

// otherTenant refuses a search of another tenant than the session's.
func otherTenant(s *session) error {
	return &userError{status: http.StatusForbidden, msg: fmt.Sprintf("Key %s may read the audit records of tenant %s only.", s.KeyID(), s.Tenant())}
}

func badRequest(format string, a ...any) error {
	return &userError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, a...)}
}

// timeLayouts are what the since and until fields accept: RFC 3339 and
// what a datetime-local input sends (taken as UTC).
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"}

func parseTime(v string) (time.Time, bool) {
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, v); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

// formatLocal writes t as a datetime-local input's value (UTC).
func formatLocal(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05") }

// auditFilter reads the search form with the JSON API's rules (the key's
// Scope): a reviewer or security key reads its own tenant only; an admin
// any tenant.
func auditFilter(q url.Values, s *session) (audit.Filter, auditForm, error) {
	get := func(n string) string { return strings.TrimSpace(q.Get(n)) }
	form := auditForm{Tenant: get("tenant"), Kind: get("kind"), Status: get("status"), Profile: get("profile"), Session: get("session"),
		CodeSHA256: get("code_sha256"), Host: get("host"), Subject: get("subject"), Since: get("since"), Until: get("until"), Limit: defaultLimit}
	f := audit.Filter{Tenant: form.Tenant, Kind: form.Kind, Status: form.Status, Profile: form.Profile, Session: form.Session,
		CodeSHA256: form.CodeSHA256, Host: form.Host, Subject: form.Subject, Cursor: get("cursor")}
	scoped, ok := s.key.Scope(f.Tenant)
	if !ok {
		return f, form, otherTenant(s)
	}
	f.Tenant, form.Tenant = scoped, scoped
	if f.CodeSHA256 != "" && !sha256Pattern.MatchString(f.CodeSHA256) {
		return f, form, badRequest("Code sha256 must be 64 hex digits.")
	}
	for _, p := range []struct {
		name string
		in   *string
		dst  *time.Time
	}{{"since", &form.Since, &f.Since}, {"until", &form.Until, &f.Until}} {
		if *p.in == "" {
			continue
		}
		t, ok := parseTime(*p.in)
		if !ok {
			return f, form, badRequest("%s must be a time such as 2026-11-30T12:00:00Z (a time without a zone is UTC).", strings.ToUpper(p.name[:1])+p.name[1:])
		}
		*p.dst, *p.in = t, formatLocal(t)
	}
	if v := get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > audit.MaxLimit {
			return f, form, badRequest("The page size must be 1 to %d.", audit.MaxLimit)
		}
		form.Limit = n
	}
	f.Limit = form.Limit
	if f.Cursor != "" {
		if n, err := strconv.ParseInt(f.Cursor, 10, 64); err != nil || n <= 0 {
			return f, form, badRequest("The page cursor is not one this log gave out; start again from the newest records.")
		}
	}
	return f, form, nil
}

// query builds the search's URL for a cursor ("" for the first page).
func (f auditForm) query(admin bool, cursor string) string {
	v := url.Values{}
	set := func(k, val string) {
		if val != "" {
			v.Set(k, val)
		}
	}
	if admin {
		set("tenant", f.Tenant)
	}
	set("kind", f.Kind)
	set("status", f.Status)
	set("profile", f.Profile)
	set("session", f.Session)
	set("code_sha256", f.CodeSHA256)
	set("host", f.Host)
	set("subject", f.Subject)
	set("since", f.Since)
	set("until", f.Until)
	if f.Limit != defaultLimit {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	set("cursor", cursor)
	if len(v) == 0 {
		return Prefix + "audit"
	}
	return Prefix + "audit?" + v.Encode()
}

func (h *Handler) auditList(c echo.Context, s *session) error {
	r := c.Request()
	d := auditData{Admin: s.Admin(), Tenant: s.Tenant(), Kinds: kinds, Limits: limits}
	f, form, err := auditFilter(r.URL.Query(), s)
	d.Form = form
	if err != nil {
		var ue *userError
		status := http.StatusBadRequest
		if errors.As(err, &ue) {
			status = ue.status
		}
		d.Error = err.Error()
		return h.render(c, status, "audit", page{Title: "Audit log", Session: s, Data: d})
	}
	recs, next, err := h.cfg.Audit.Query(r.Context(), f)
	if err != nil {
		h.log.Error("querying the audit log failed", "err", err)
		d.Error = "The audit log could not be read; the log says why."
		return h.render(c, http.StatusInternalServerError, "audit", page{Title: "Audit log", Session: s, Data: d})
	}
	d.Records = recs
	if f.Cursor != "" {
		d.Newest = form.query(d.Admin, "")
	}
	if next != "" {
		d.Older = form.query(d.Admin, next)
	}
	return h.render(c, http.StatusOK, "audit", page{Title: "Audit log", Session: s, Data: d})
}

// ---- one record ----

type recordData struct {
	R        *audit.Record
	Captures []*captureData
	// Missing explains captures that cannot be shown.
	Missing []string
}

// visibleRecord loads a record the session may see.
func (h *Handler) visibleRecord(r *http.Request, s *session, id string) (*audit.Record, error) {
	rec, err := h.cfg.Audit.Get(r.Context(), id)
	if errors.Is(err, audit.ErrNotFound) || err == nil && !s.key.CanSee(rec.Tenant) {
		return nil, &userError{status: http.StatusNotFound, msg: fmt.Sprintf("No audit record %q is visible to key %s.", id, s.KeyID())}
	}
	if err != nil {
		h.log.Error("reading an audit record failed", "id", id, "err", err)
		return nil, &userError{status: http.StatusInternalServerError, msg: "The audit record could not be read; the log says why."}
	}
	return rec, nil
}

// visibleCapture loads a capture the session may see.
func (h *Handler) visibleCapture(r *http.Request, s *session, id string) (*capture.Capture, error) {
	if h.cfg.Captures == nil {
		return nil, &userError{status: http.StatusServiceUnavailable, msg: "No capture store is configured."}
	}
	c, err := h.cfg.Captures.Get(r.Context(), id)
	if errors.Is(err, capture.ErrNotFound) || err == nil && !s.key.CanSee(c.Tenant) {
		return nil, &userError{status: http.StatusNotFound, msg: fmt.Sprintf("No capture %q is visible to key %s (it may have been deleted when its retention ended).", id, s.KeyID())}
	}
	if err != nil {
		h.log.Error("reading a capture failed", "capture_id", id, "err", err)
		return nil, &userError{status: http.StatusInternalServerError, msg: fmt.Sprintf("Capture %s cannot be read: %v", id, err)}
	}
	return c, nil
}

// readCapture loads a capture the session may see and appends its
// capture_read record (action view, or download with the part) before any
// of its content is shown, as the JSON API does; when the record cannot be
// written the content is not shown.
func (h *Handler) readCapture(r *http.Request, s *session, id, action, part string) (*capture.Capture, error) {
	c, err := h.visibleCapture(r, s, id)
	if err != nil {
		return nil, err
	}
	if err := h.recordRead(r, s, c, action, part); err != nil {
		return nil, err
	}
	return c, nil
}

// recordRead appends the capture_read record of c (see readCapture).
func (h *Handler) recordRead(r *http.Request, s *session, c *capture.Capture, action, part string) error {
	rec := audit.CaptureRead{CaptureID: c.ID, CaptureTenant: c.Tenant, CaptureKind: c.Kind, KeyID: s.KeyID(), ReaderTenant: s.Tenant(),
		Via: "ui", Action: action, Part: part}.Record()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
	defer cancel()
	if err := h.cfg.Audit.Append(ctx, rec); err != nil {
		h.log.Error("writing a capture read's audit record failed; the capture is not shown", "capture_id", c.ID, "err", err)
		return &userError{status: http.StatusServiceUnavailable, msg: fmt.Sprintf("Capture %s is not shown: reading it could not be recorded in the audit log.", c.ID)}
	}
	return nil
}

func (h *Handler) showError(c echo.Context, s *session, err error) error {
	var ue *userError
	if errors.As(err, &ue) {
		return h.fail(c, s, ue.status, ue.msg)
	}
	return h.fail(c, s, http.StatusInternalServerError, err.Error())
}

func (h *Handler) auditRecord(c echo.Context, s *session) error {
	r := c.Request()
	rec, err := h.visibleRecord(r, s, param(c, "id"))
	if err != nil {
		return h.showError(c, s, err)
	}
	d := recordData{R: rec}
	for _, id := range rec.CaptureIDs {
		cp, err := h.readCapture(r, s, id, "view", "")
		if err != nil {
			d.Missing = append(d.Missing, err.Error())
			continue
		}
		d.Captures = append(d.Captures, viewCapture(cp))
	}
	return h.render(c, http.StatusOK, "record", page{Title: "Record " + rec.ID, Session: s, Data: d})
}

// ---- captures ----

func (h *Handler) captureView(c echo.Context, s *session) error {
	r := c.Request()
	cp, err := h.readCapture(r, s, param(c, "id"), "view", "")
	if err != nil {
		return h.showError(c, s, err)
	}
	// The records that name this capture (one, as a rule), for the way back.
	var recs []audit.Record
	if subj := cmp.Or(cp.Meta["fetch_id"], cp.Meta["exec_id"]); subj != "" {
		tenant, _ := s.key.Scope("")
		recs, _, _ = h.cfg.Audit.Query(r.Context(), audit.Filter{Subject: subj, Tenant: tenant, Limit: 20})
	}
	recs = slices.DeleteFunc(recs, func(rec audit.Record) bool { return !slices.Contains(rec.CaptureIDs, cp.ID) })
	return h.render(c, http.StatusOK, "capture", page{Title: "Capture " + cp.ID, Session: s, Data: struct {
		C       *captureData
		Records []audit.Record
	}{viewCapture(cp), recs}})
}

// capturePart sends one part's bytes as a download that never renders, as
// GET /captures/{id}/raw does.
func (h *Handler) capturePart(c echo.Context, s *session) error {
	w, r := c.Response(), c.Request()
	cp, err := h.visibleCapture(r, s, param(c, "id"))
	if err != nil {
		return h.showError(c, s, err)
	}
	name := r.URL.Query().Get("name")
	p := cp.Part(name)
	if p == nil {
		return h.fail(c, s, http.StatusNotFound, fmt.Sprintf("Capture %s has no part %q.", cp.ID, name))
	}
	if cp.Erased != nil {
		return h.fail(c, s, http.StatusGone, fmt.Sprintf("Capture %s was erased at %s by %s.", cp.ID, cp.Erased.At.UTC().Format(time.RFC3339), cp.Erased.By))
	}
	if err := h.recordRead(r, s, cp, "download", p.Name); err != nil {
		return h.showError(c, s, err)
	}
	hd := w.Header()
	hd.Set("Content-Security-Policy", csp+"; sandbox")
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s-%s.bin"`, cp.ID, p.Name))
	hd.Set("Content-Length", strconv.Itoa(len(p.Data)))
	h.log.Info("capture part downloaded", "capture_id", cp.ID, "part", p.Name, "key_id", s.KeyID())
	_, _ = w.Write(p.Data)
	return nil
}

// captureData is a capture prepared for display.
type captureData struct {
	C     *capture.Capture
	Parts []partInfo
	Exec  *execView
	Fetch *fetchView
	// Other shows the parts of any other kind of capture.
	Other []textView
}

type partInfo struct {
	capture.Part
	// Path is the file's path for input.N and output.N parts.
	Path string
}

type execView struct {
	Code, Stdin, Stdout, Stderr textView
	Inputs, Outputs             []textView
}

type fetchView struct {
	Title    string
	Returned textView
	// ReturnedJSON is the whole answer the agent got.
	ReturnedJSON textView
	Raw          textView
	Headers      textView
}

func viewCapture(c *capture.Capture) *captureData {
	d := &captureData{C: c}
	for _, p := range c.Parts {
		d.Parts = append(d.Parts, partInfo{Part: p, Path: c.Meta[p.Name]})
	}
	if c.Erased != nil {
		return d
	}
	part := func(name string) []byte {
		if p := c.Part(name); p != nil {
			return p.Data
		}
		return nil
	}
	switch {
	case c.Kind == "exec":
		e := &execView{Code: viewText("code", part("code")), Stdin: viewText("stdin", part("stdin")),
			Stdout: viewText("stdout", part("stdout")), Stderr: viewText("stderr", part("stderr"))}
		for _, p := range c.Parts {
			var dst *[]textView
			switch {
			case strings.HasPrefix(p.Name, "input."):
				dst = &e.Inputs
			case strings.HasPrefix(p.Name, "output."):
				dst = &e.Outputs
			default:
				continue
			}
			v := viewText(p.Name, p.Data)
			v.Path = c.Meta[p.Name]
			*dst = append(*dst, v)
		}
		d.Exec = e
	case c.Kind == "fetch" && c.Part("raw") != nil:
		f := &fetchView{Headers: viewText("headers", part("headers")), ReturnedJSON: viewJSON("returned.json", part("returned.json"))}
		var ret struct {
			Title   string `json:"title"`
			Content string `json:"content"`
		}
		if err := json.Unmarshal(part("returned.json"), &ret); err == nil {
			f.Title = visible(ret.Title)
			f.Returned = viewText("returned text", []byte(ret.Content))
		} else {
			f.Returned = textView{Name: "returned text", Note: "returned.json is missing or not JSON"}
		}
		f.Raw = viewRaw(part("raw"), string(part("headers")), c.Meta["charset"])
		d.Fetch = f
	default:
		for _, p := range c.Parts {
			v := viewText(p.Name, p.Data)
			v.Path = c.Meta[p.Name] // a session transfer's file names
			d.Other = append(d.Other, v)
		}
	}
	return d
}

// viewJSON indents a JSON part for reading.
func viewJSON(name string, b []byte) textView {
	var v any
	if len(b) <= textCap && json.Unmarshal(b, &v) == nil {
		if out, err := json.MarshalIndent(v, "", "  "); err == nil {
			tv := viewText(name, out)
			tv.Size = int64(len(b))
			return tv
		}
	}
	return viewText(name, b)
}

// ---- a session's timeline ----

const timelineMax = 2000

type timelineEntry struct {
	audit.Record
	// Offset is the time since the session's first record.
	Offset time.Duration
}

type timelineData struct {
	Session string
	Tenant  string
	Admin   bool
	Entries []timelineEntry
	// Cut: the session has more records than the timeline shows.
	Cut   bool
	Error string
}

func (h *Handler) sessionTimeline(c echo.Context, s *session) error {
	r := c.Request()
	q := r.URL.Query()
	d := timelineData{Session: q.Get("id"), Admin: s.Admin()}
	if d.Session == "" {
		return h.fail(c, s, http.StatusBadRequest, "Name a session: /ui/session?id=SESSION.")
	}
	var ok bool
	if d.Tenant, ok = s.key.Scope(q.Get("tenant")); !ok {
		return h.showError(c, s, otherTenant(s))
	}
	f := audit.Filter{Tenant: d.Tenant, Session: d.Session, Limit: audit.MaxLimit}
	var recs []audit.Record
	for {
		page, next, err := h.cfg.Audit.Query(r.Context(), f)
		if err != nil {
			h.log.Error("querying the audit log failed", "err", err)
			return h.fail(c, s, http.StatusInternalServerError, "The audit log could not be read; the log says why.")
		}
		recs = append(recs, page...)
		if next == "" {
			break
		}
		if len(recs) >= timelineMax {
			d.Cut = true
			break
		}
		f.Cursor = next
	}
	if len(recs) > timelineMax {
		recs, d.Cut = recs[:timelineMax], true
	}
	// Query answers newest first; a timeline reads oldest first. When cut,
	// it shows the latest records.
	slices.Reverse(recs)
	for _, rec := range recs {
		d.Entries = append(d.Entries, timelineEntry{Record: rec, Offset: rec.Time.Sub(recs[0].Time)})
	}
	return h.render(c, http.StatusOK, "session", page{Title: "Session " + d.Session, Session: s, Data: d})
}
