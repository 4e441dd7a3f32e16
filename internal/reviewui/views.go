package reviewui

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
)

// ---- one record ----

type recordData struct {
	R        *audit.Record
	Captures []*captureData
	// Missing explains captures that cannot be shown.
	Missing []string
	// Prev is the record before this one in the chain when the session
	// may see it; PrevSeq its number either way.
	Prev    *audit.Record
	PrevSeq int64
	// Request are the other records of the same request (found among
	// the records of the quarter hour before this one).
	Request []audit.Record
	Actions
}

// Actions are what a capture section offers beside its content: the
// hold and erase forms for security and admin keys, the bundle form, and
// the outcome of the last action.
type Actions struct {
	CanAct bool
	CSRF   string
	// Back is where the forms return to.
	Back string
	Done string
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
	d := recordData{R: rec, PrevSeq: rec.Seq - 1, Actions: h.actions(c, s)}
	got, missing := h.readMany(r, s, rec.CaptureIDs, "view", "")
	for _, id := range rec.CaptureIDs {
		if cp := got[id]; cp != nil {
			d.Captures = append(d.Captures, viewCapture(cp))
		} else if why := missing[id]; why != "" {
			d.Missing = append(d.Missing, why)
		}
	}
	if rec.Seq > 1 {
		// The record before in the chain: any tenant's, shown only when
		// the key may see it.
		if prev, _, err := h.cfg.Audit.Query(r.Context(), audit.Filter{Cursor: strconv.FormatInt(rec.Seq, 10), Limit: 1}); err == nil && len(prev) == 1 && s.key.CanSee(prev[0].Tenant) {
			d.Prev = &prev[0]
		}
	}
	d.Request = h.sameRequest(r, s, rec)
	return h.render(c, http.StatusOK, "record", page{Title: rec.Kind + " record " + rec.ID, Session: s, Data: d})
}

// sameRequest finds the other records of rec's request: the log has no
// index of request ids, so it looks among the tenant's records of the 15
// minutes up to a minute after rec (a request's records are written
// while it runs), at most two pages.
func (h *Handler) sameRequest(r *http.Request, s *session, rec *audit.Record) []audit.Record {
	if rec.RequestID == "" {
		return nil
	}
	tenant := rec.Tenant
	if !s.key.CanSee(tenant) {
		return nil
	}
	f := audit.Filter{Tenant: tenant, Since: rec.Time.Add(-15 * time.Minute), Until: rec.Time.Add(time.Minute), Limit: audit.MaxLimit}
	var out []audit.Record
	for range 2 {
		recs, next, err := h.cfg.Audit.Query(r.Context(), f)
		if err != nil {
			return out
		}
		for _, o := range recs {
			if o.RequestID == rec.RequestID && o.ID != rec.ID {
				out = append(out, o)
			}
		}
		if next == "" {
			break
		}
		f.Cursor = next
	}
	slices.Reverse(out)
	return out
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
		Actions
	}{viewCapture(cp), recs, h.actions(c, s)}})
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
	// Results are a session call's results: repr and table text, figures.
	Results []resultView
}

// resultView is one result of a session call (part result.N).
type resultView struct {
	// N is the result's index; Kind repr, table or image/png.
	N    int
	Kind string
	// Text holds a text result; Figure a figure that is a PNG image.
	Text   textView
	Figure *figureView
	// Note says why a figure is not shown.
	Note string
}

// figureView is a PNG part served as an image by the page itself.
type figureView struct {
	URL           string
	Width, Height int
	Size          int64
	// Alt describes it for the img element.
	Alt string
}

type fetchView struct {
	Title string
	// Screenshot is the rendered page, when the fetch rendered it.
	Screenshot     *figureView
	ScreenshotNote string
	Returned       textView
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
			case strings.HasPrefix(p.Name, "result."):
				e.Results = append(e.Results, viewResult(c, &p))
				continue
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
		if p := c.Part("screenshot"); p != nil {
			f.Screenshot, f.ScreenshotNote = viewFigure(c, p, "the rendered page")
		}
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

// viewResult prepares result part p of capture c.
func viewResult(c *capture.Capture, p *capture.Part) resultView {
	n, _ := strconv.Atoi(strings.TrimPrefix(p.Name, "result."))
	v := resultView{N: n, Kind: cmp.Or(c.Meta[p.Name], p.ContentType)}
	if v.Kind == "image/png" || p.ContentType == "image/png" {
		v.Kind = "image/png"
		v.Figure, v.Note = viewFigure(c, p, fmt.Sprintf("figure %d of %s", n, cmp.Or(c.Meta["exec_id"], c.ID)))
		return v
	}
	v.Text = viewText(v.Kind, p.Data)
	return v
}

// viewFigure checks that part p is a PNG image the page may show (its
// header decodes, and it is not too large to decode) and returns where
// the page serves it, or why it is not shown.
func viewFigure(c *capture.Capture, p *capture.Part, alt string) (*figureView, string) {
	w, hgt, err := checkPNGConfig(p.Data)
	if err != nil {
		return nil, err.Error()
	}
	return &figureView{URL: figureURL(c.ID, p.Name), Width: w, Height: hgt, Size: p.Size, Alt: alt}, ""
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
