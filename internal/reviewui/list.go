package reviewui

import (
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

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
)

// ---- the audit log ----

// auditForm is the search form as typed, shown back to the reviewer.
type auditForm struct {
	Tenant, Kind, Status, Profile, Session, CodeSHA256, Host, Subject, Since, Until string
	// Range is a quick time range (15m, 1h, 24h, 7d) back from now; it
	// replaces Since and Until.
	Range string
	// Reads shows capture_read records, hidden unless asked for.
	Reads bool
	Limit int
}

// More reports whether a filter of the folded "more filters" is set.
func (f auditForm) More() bool { return f.Profile != "" || f.CodeSHA256 != "" || f.Subject != "" }

type auditData struct {
	Form   auditForm
	Admin  bool
	Tenant string // the session's tenant
	Kinds  []string
	// Statuses are the status select's groups.
	Statuses []statusGroup
	// StatusOther is the form's status when no group has it.
	StatusOther string
	Limits      []int
	Ranges      []quickRange
	Rows        []listRow
	// Skipped counts the capture reads left out of this page.
	Skipped int
	// Scanned: the page stopped after scanning this many records, most
	// of them capture reads (Older goes on).
	Scanned int
	// Newest goes back to the first page; Older to the next one ("" when
	// there is none).
	Newest, Older string
	// Query is the search's query string (no cursor), for the bundle form.
	Query string
	// Notes say how a filter value was read; Error why the search failed.
	Notes []string
	Error string
	CSRF  string
}

// listRow is one record of the list with what it is about in one line.
type listRow struct {
	audit.Record
	// What is the first line of the code, the URL fetched, or what the
	// record says happened; WhatCode marks code.
	What     string
	WhatCode bool
}

// kinds are the record kinds the kind select offers; a kind not among
// them is refused.
var kinds = []string{audit.KindExec, audit.KindFetch, audit.KindSession, audit.KindProfileReload, audit.KindKeysReload,
	audit.KindCaptureErase, audit.KindCaptureHold, audit.KindCaptureDelete, audit.KindCaptureRead, audit.KindBundle, audit.KindAdmin}

type statusGroup struct {
	Label    string
	Statuses []string
}

// statusGroups are the statuses records carry: a run's outcome, an
// answer's error code, an event's outcome.
var statusGroups = []statusGroup{
	{"Run outcomes", []string{"ok", "error", "timeout", "oom", "killed"}},
	{"Refusals and failures (error codes)", []string{
		api.CodeEgressDenied, api.CodeUpstreamTimeout, api.CodeUpstreamError, api.CodeTooLarge, api.CodeUnsupported,
		api.CodeBudgetExceeded, api.CodeRateLimited, api.CodeLoopDetected, api.CodeFrozen, api.CodeInterrupted,
		api.CodeIdempotencyMismatch, api.CodeInProgress, api.CodeAuditUnavailable, api.CodeApprovalExpired,
		api.CodeSessionBusy, api.CodeSessionEnded, api.CodeFileUnavailable,
		api.CodeValidation, api.CodeForbidden, api.CodeNotFound, api.CodeUnavailable, api.CodeInternal, api.CodeBusy, api.CodeRequestTimeout}},
	{"Events", []string{"ended", "erased", "deleted", "failed"}},
}

// canonicalStatus reads a status filter: a known status in any case is
// that status; a part of known statuses suggests them (err non-nil);
// anything else is searched as typed, with a note.
func canonicalStatus(v string) (status, note string, err error) {
	if v == "" {
		return "", "", nil
	}
	var contains []string
	for _, g := range statusGroups {
		for _, s := range g.Statuses {
			if strings.EqualFold(s, v) {
				return s, "", nil
			}
			if strings.Contains(strings.ToLower(s), strings.ToLower(v)) && !slices.Contains(contains, s) {
				contains = append(contains, s)
			}
		}
	}
	if len(contains) > 0 {
		return v, "", badRequest("No record has the status %q: a status matches whole. Did you mean %s?", v, strings.Join(contains, ", "))
	}
	return v, fmt.Sprintf("Status %q is not one this page knows; it was searched as typed (exactly, case-sensitively).", v), nil
}

type quickRange struct {
	Name, Label string
	D           time.Duration
}

var ranges = []quickRange{{"15m", "15 min", 15 * time.Minute}, {"1h", "1 h", time.Hour}, {"24h", "24 h", 24 * time.Hour}, {"7d", "7 d", 7 * 24 * time.Hour}}

var (
	sha256Pattern = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)
	limits        = []int{25, 50, 100, 200, 500}
)

const defaultLimit = 50

// maxScan bounds the records one list page reads to fill itself when it
// hides capture reads.
const maxScan = 5000

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

// timeLayouts are what the since and until fields accept: RFC 3339, and
// a date and time without a zone (UTC), with T or a space.
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"}

func parseTime(v string) (time.Time, bool) {
	v = strings.TrimSuffix(strings.TrimSpace(v), " UTC")
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, v); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

// formatUTC writes t as the time fields show it (UTC, 24-hour).
func formatUTC(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") }

// formFields are the query parameters of the search form.
var formFields = []string{"tenant", "kind", "status", "profile", "session", "code_sha256", "host", "subject", "since", "until", "range", "reads", "limit", "cursor"}

// auditFilter reads the search form with the JSON API's rules (the key's
// Scope): a reviewer or security key reads its own tenant only; an admin
// any tenant. now is the clock, for quick ranges.
func auditFilter(q url.Values, s *session, now time.Time) (audit.Filter, auditForm, []string, error) {
	get := func(n string) string { return strings.TrimSpace(q.Get(n)) }
	form := auditForm{Tenant: get("tenant"), Kind: get("kind"), Status: get("status"), Profile: get("profile"), Session: get("session"),
		CodeSHA256: get("code_sha256"), Host: get("host"), Subject: get("subject"), Since: get("since"), Until: get("until"),
		Range: get("range"), Reads: get("reads") != "", Limit: defaultLimit}
	f := audit.Filter{Tenant: form.Tenant, Kind: form.Kind, Profile: form.Profile, Session: form.Session,
		CodeSHA256: form.CodeSHA256, Host: form.Host, Subject: form.Subject, Cursor: get("cursor")}
	var notes []string
	for name := range q {
		if !slices.Contains(formFields, name) {
			return f, form, nil, badRequest("The search has no filter %q; the filters are %s.", name, strings.Join(formFields, ", "))
		}
	}
	scoped, ok := s.key.Scope(f.Tenant)
	if !ok {
		return f, form, nil, otherTenant(s)
	}
	f.Tenant, form.Tenant = scoped, scoped
	if f.Kind != "" {
		if k := strings.ToLower(f.Kind); slices.Contains(kinds, k) {
			f.Kind, form.Kind = k, k
		} else {
			return f, form, nil, badRequest("Kind %q is not a kind of record; the kinds are %s.", f.Kind, strings.Join(kinds, ", "))
		}
	}
	st, note, err := canonicalStatus(form.Status)
	if err != nil {
		return f, form, nil, err
	}
	f.Status, form.Status = st, st
	if note != "" {
		notes = append(notes, note)
	}
	if f.CodeSHA256 != "" && !sha256Pattern.MatchString(f.CodeSHA256) {
		return f, form, nil, badRequest("Code sha256 must be 64 hex digits.")
	}
	if form.Range != "" && (form.Since != "" || form.Until != "") {
		form.Range = "" // typed times win over a quick range
	}
	if form.Range != "" {
		i := slices.IndexFunc(ranges, func(r quickRange) bool { return r.Name == form.Range })
		if i < 0 {
			return f, form, nil, badRequest("Range %q is not one of 15m, 1h, 24h and 7d.", form.Range)
		}
		f.Since = now.Add(-ranges[i].D).UTC()
		form.Since, form.Until = "", ""
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
			return f, form, nil, badRequest("%s must be a UTC time such as 2026-11-30 12:00:00 (24-hour; RFC 3339 with a zone is read too).", strings.ToUpper(p.name[:1])+p.name[1:])
		}
		*p.dst, *p.in = t, formatUTC(t)
	}
	if v := get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > audit.MaxLimit {
			return f, form, nil, badRequest("The page size must be 1 to %d.", audit.MaxLimit)
		}
		form.Limit = n
	}
	f.Limit = form.Limit
	if f.Cursor != "" {
		if n, err := strconv.ParseInt(f.Cursor, 10, 64); err != nil || n <= 0 {
			return f, form, nil, badRequest("The page cursor is not one this log gave out; start again from the newest records.")
		}
	}
	return f, form, notes, nil
}

// values is the search as query parameters, with cursor ("" for the
// first page).
func (f auditForm) values(admin bool, cursor string) url.Values {
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
	if f.Range != "" {
		set("range", f.Range)
	} else {
		set("since", f.Since)
		set("until", f.Until)
	}
	if f.Reads {
		v.Set("reads", "1")
	}
	if f.Limit != defaultLimit {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	set("cursor", cursor)
	return v
}

// query builds the search's URL for a cursor ("" for the first page).
func (f auditForm) query(admin bool, cursor string) string {
	v := f.values(admin, cursor)
	if len(v) == 0 {
		return Prefix + "audit"
	}
	return Prefix + "audit?" + v.Encode()
}

// RangeURL is the search over the last range r.
func (d auditData) RangeURL(r string) string {
	f := d.Form
	f.Range, f.Since, f.Until = r, "", ""
	return f.query(d.Admin, "")
}

// ReadsURL is the search with capture reads shown (on) or hidden.
func (d auditData) ReadsURL(on bool) string {
	f := d.Form
	f.Reads = on
	return f.query(d.Admin, "")
}

// LimitOptions are the page sizes offered, the form's among them.
func (d auditData) LimitOptions() []int {
	if slices.Contains(d.Limits, d.Form.Limit) {
		return d.Limits
	}
	out := append(slices.Clone(d.Limits), d.Form.Limit)
	slices.Sort(out)
	return out
}

// hidesReads reports whether the search leaves capture_read records out:
// unless asked for, or the kind asks for them.
func (f auditForm) hidesReads() bool { return !f.Reads && f.Kind == "" }

// queryList runs the search; when hide is set it leaves capture_read
// records out and reads on until the page is full, at most maxScan
// records, and says how many it skipped.
func (h *Handler) queryList(r *http.Request, f audit.Filter, hide bool) (recs []audit.Record, next string, skipped, scanned int, err error) {
	if !hide {
		recs, next, err = h.cfg.Audit.Query(r.Context(), f)
		return recs, next, 0, 0, err
	}
	want := f.Limit
	q := f
	q.Limit = min(audit.MaxLimit, max(want, 200))
	recs = []audit.Record{}
	for {
		page, nxt, err := h.cfg.Audit.Query(r.Context(), q)
		if err != nil {
			return nil, "", 0, 0, err
		}
		for i, rec := range page {
			if rec.Kind == audit.KindCaptureRead {
				skipped++
				continue
			}
			recs = append(recs, rec)
			if len(recs) == want {
				if i < len(page)-1 || nxt != "" {
					next = strconv.FormatInt(rec.Seq, 10)
				}
				return recs, next, skipped, 0, nil
			}
		}
		scanned += len(page)
		if nxt == "" {
			return recs, "", skipped, 0, nil
		}
		if scanned >= maxScan {
			return recs, nxt, skipped, scanned, nil
		}
		q.Cursor = nxt
	}
}

func (h *Handler) auditList(c echo.Context, s *session) error {
	r := c.Request()
	d := auditData{Admin: s.Admin(), Tenant: s.Tenant(), Kinds: kinds, Statuses: statusGroups, Limits: limits, Ranges: ranges, CSRF: s.CSRF}
	f, form, notes, err := auditFilter(r.URL.Query(), s, h.cfg.Now())
	d.Form, d.Notes = form, notes
	d.StatusOther = form.Status
	for _, g := range statusGroups {
		if slices.Contains(g.Statuses, form.Status) {
			d.StatusOther = ""
		}
	}
	if err != nil {
		var ue *userError
		status := http.StatusBadRequest
		if errors.As(err, &ue) {
			status = ue.status
		}
		d.Error = err.Error()
		return h.render(c, status, "audit", page{Title: "Audit log", Session: s, Data: d})
	}
	recs, next, skipped, scanned, err := h.queryList(r, f, form.hidesReads())
	if err != nil {
		h.log.Error("querying the audit log failed", "err", err)
		d.Error = "The audit log could not be read; the log says why."
		return h.render(c, http.StatusInternalServerError, "audit", page{Title: "Audit log", Session: s, Data: d})
	}
	d.Skipped, d.Scanned = skipped, scanned
	d.Rows = h.listRows(r, s, recs)
	d.Query = form.values(d.Admin, "").Encode()
	if f.Cursor != "" {
		d.Newest = form.query(d.Admin, "")
	}
	if next != "" {
		d.Older = form.query(d.Admin, next)
	}
	return h.render(c, http.StatusOK, "audit", page{Title: "Audit log", Session: s, Data: d})
}

// listRows says in one line what each record is about: an exec's first
// line of code (from its capture: a capture read, recorded), a fetch's
// URL, a session's files, what an event did.
func (h *Handler) listRows(r *http.Request, s *session, recs []audit.Record) []listRow {
	var ids []string
	for _, rec := range recs {
		if rec.Kind == audit.KindExec && len(rec.CaptureIDs) > 0 {
			ids = append(ids, rec.CaptureIDs[0])
		}
	}
	caps, _ := h.readMany(r, s, ids, "view", "code")
	rows := make([]listRow, len(recs))
	for i, rec := range recs {
		row := listRow{Record: rec}
		switch rec.Kind {
		case audit.KindExec:
			if len(rec.CaptureIDs) > 0 {
				if c := caps[rec.CaptureIDs[0]]; c != nil {
					if c.Erased != nil {
						row.What = "(code erased)"
					} else if p := c.Part("code"); p != nil {
						row.What, row.WhatCode = firstLine(p.Data, 160), true
					}
				}
			}
			if row.What == "" {
				row.What = rec.Message
			}
		case audit.KindFetch:
			row.What = fetchURL(&rec)
		case audit.KindSession:
			row.What = sessionWhat(&rec)
		case audit.KindBundle:
			row.What = rec.Detail["scope"] + " " + rec.Detail["query"]
		default:
			row.What = rec.Message
		}
		row.What = visible(clip(row.What, 200))
		rows[i] = row
	}
	return rows
}

// fetchURL is the URL a fetch record asked for.
func fetchURL(r *audit.Record) string {
	if u := r.Detail["url"]; u != "" {
		return u
	}
	if len(r.Egress) > 0 {
		return r.Egress[0].URL
	}
	return ""
}

// sessionWhat says what a session record did.
func sessionWhat(r *audit.Record) string {
	switch r.Action {
	case "start":
		return "started"
	case "end":
		return "ended: " + r.Message
	case "files_put", "file_get":
		list := r.Inputs
		verb := "put "
		if r.Action == "file_get" {
			list, verb = r.Outputs, "got "
		}
		names := make([]string, len(list))
		for i, o := range list {
			names[i] = strings.TrimPrefix(o.Name, "files/")
		}
		return verb + strings.Join(names, ", ")
	}
	return r.Action + " " + r.Message
}

// firstLine is the first line of b that is not blank, cut to max runes.
func firstLine(b []byte, max int) string {
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) != "" {
			return clip(strings.TrimRight(l, "\r"), max)
		}
	}
	return ""
}

// clip cuts s to max runes, with an ellipsis.
func clip(s string, max int) string {
	n := 0
	for i := range s {
		if n == max {
			return s[:i] + "…"
		}
		n++
	}
	return s
}
