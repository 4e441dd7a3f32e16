package reviewui

import (
	"cmp"
	"encoding/json"
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

// ---- a session as a trace ----
//
// /ui/session?id=ID shows the records of a session in order, each step
// with what it ran and what came of it. ID is a sandbox session (ses_…,
// POST /sessions) or an agent's own session id (X-Session-Id); records
// carry both when they differ, and the trace groups by both: the records
// of ID, then those of every sandbox session they belong to (a call sent
// with another X-Session-Id) and, for a sandbox session, the records its
// agent sessions made while it ran (the fetches the agent made beside
// the calls).

const (
	// timelineMax bounds the records of a trace (the latest are kept).
	timelineMax = 2000
	// traceCaptures bounds the captures a trace reads; later steps show
	// their records only.
	traceCaptures = 300
	// relatedMax bounds the other sessions a trace follows.
	relatedMax = 8
	// excerptLines is how many lines of code or output a step shows
	// before it is expanded.
	excerptLines = 8
)

type traceData struct {
	ID     string
	Tenant string
	Admin  bool
	// Sandbox: ID is a sandbox session; else an agent's session id.
	Sandbox   bool
	Sandboxes []*sandboxSummary
	Agents    []agentSummary
	Steps     []*step
	// First and Last bound the trace; Keys and Profiles are every key and
	// profile its records name.
	First, Last                       time.Time
	Keys                              []string
	Profiles                          []string
	Calls, Fetches, Transfers, Failed int
	// RunMS sums the calls' run times; CPUMS their CPU when the records
	// carry it (HasCPU).
	RunMS, CPUMS int64
	HasCPU       bool
	// Cut: the trace has more records than it shows; Unread: steps past
	// the capture cap show their records only.
	Cut     bool
	Unread  int
	Missing []string
	Actions
}

// Own is the summary of the sandbox session the trace is of, or nil.
func (d *traceData) Own() *sandboxSummary {
	for _, s := range d.Sandboxes {
		if s.ID == d.ID {
			return s
		}
	}
	return nil
}

// Duration is how long the trace spans.
func (d *traceData) Duration() time.Duration { return d.Last.Sub(d.First) }

// sandboxSummary is one sandbox session of a trace.
type sandboxSummary struct {
	ID   string
	Lane int
	// Start and End are its session records (nil when not in the trace).
	Start, End *audit.Record
	Profile    string
	Image      string
	KeyID      string
	Agents     []string
	Calls      int
	Failed     int
	RunMS      int64
	CPUMS      int64
	HasCPU     bool
	First      time.Time
	Last       time.Time
}

// State says whether the session ended, and how.
func (s *sandboxSummary) State() string {
	if s.End != nil {
		return "ended"
	}
	return "no end record"
}

type agentSummary struct {
	ID      string
	Records int
}

// step is one record of a trace, with what its capture shows.
type step struct {
	R      audit.Record
	Offset time.Duration
	// Lane is the index of its sandbox session (-1: none).
	Lane int
	// Kind: call (a sandbox session's exec), exec, fetch, start, end,
	// files_put, file_get, or the record's kind.
	Kind  string
	Title string
	// Code and Out are the first lines of the code and of stdout;
	// CodeMore and OutMore the lines not shown.
	Code, Out          string
	CodeMore, OutMore  int
	Exception          string
	Stderr             string
	Results            []resultView
	Files              []audit.Output
	URL                string
	FetchTitle         string
	Denied             int
	Capture            *captureData
	Erased             bool
	Unread, NoCapture  bool
	CaptureID, Problem string
}

// Figures are the step's figures, for the thumbnails.
func (st *step) Figures() []resultView {
	var out []resultView
	for _, r := range st.Results {
		if r.Figure != nil {
			out = append(out, r)
		}
	}
	return out
}

// TextResults are the step's repr and table results.
func (st *step) TextResults() []resultView {
	var out []resultView
	for _, r := range st.Results {
		if r.Kind != "image/png" {
			out = append(out, r)
		}
	}
	return out
}

// queryAll reads every record of f, newest first, up to max (cut: more).
func (h *Handler) queryAll(r *http.Request, f audit.Filter, limit int) ([]audit.Record, bool, error) {
	f.Limit = audit.MaxLimit
	var recs []audit.Record
	for {
		page, next, err := h.cfg.Audit.Query(r.Context(), f)
		if err != nil {
			return nil, false, err
		}
		recs = append(recs, page...)
		if len(recs) >= limit {
			return recs[:limit], len(recs) > limit || next != "", nil
		}
		if next == "" {
			return recs, false, nil
		}
		f.Cursor = next
	}
}

// traceRecords collects the records of session id (see above), oldest
// first, at most limit of them (cut: the latest were kept).
func (h *Handler) traceRecords(r *http.Request, tenant, id string, limit int) ([]audit.Record, bool, error) {
	fail := func(err error) ([]audit.Record, bool, error) {
		h.log.Error("querying the audit log failed", "err", err)
		return nil, false, &userError{status: http.StatusInternalServerError, msg: "The audit log could not be read; the log says why."}
	}
	recs, cut, err := h.queryAll(r, audit.Filter{Tenant: tenant, Session: id}, limit)
	if err != nil {
		return fail(err)
	}
	seen := map[string]bool{}
	for _, rec := range recs {
		seen[rec.ID] = true
	}
	sandbox := slices.ContainsFunc(recs, func(rec audit.Record) bool { return rec.SandboxSession == id })
	var first, last time.Time
	for _, rec := range recs {
		if rec.SandboxSession == id || !sandbox {
			if first.IsZero() || rec.Time.Before(first) {
				first = rec.Time
			}
			if rec.Time.After(last) {
				last = rec.Time
			}
		}
	}
	// The sessions to follow: a record's sandbox session, or, for a
	// sandbox session, its records' agent sessions.
	var related []string
	for _, rec := range recs {
		for _, o := range []string{rec.SandboxSession, rec.Session} {
			if o != "" && o != id && !slices.Contains(related, o) && len(related) < relatedMax {
				related = append(related, o)
			}
		}
	}
	for _, o := range related {
		more, c, err := h.queryAll(r, audit.Filter{Tenant: tenant, Session: o}, limit)
		if err != nil {
			return fail(err)
		}
		cut = cut || c
		isAgent := !slices.ContainsFunc(more, func(rec audit.Record) bool { return rec.SandboxSession == o })
		for _, rec := range more {
			if seen[rec.ID] {
				continue
			}
			// An agent session followed from a sandbox session: only
			// what it did while the sandbox session ran.
			if sandbox && isAgent && (rec.Time.Before(first) || rec.Time.After(last)) {
				continue
			}
			seen[rec.ID] = true
			recs = append(recs, rec)
		}
	}
	slices.SortFunc(recs, func(a, b audit.Record) int { return cmp.Compare(a.Seq, b.Seq) })
	if len(recs) > limit {
		recs, cut = recs[len(recs)-limit:], true
	}
	return recs, cut, nil
}

func (h *Handler) sessionTimeline(c echo.Context, s *session) error {
	r := c.Request()
	q := r.URL.Query()
	d := &traceData{ID: q.Get("id"), Admin: s.Admin(), Actions: h.actions(c, s)}
	if d.ID == "" {
		return h.fail(c, s, http.StatusBadRequest, "Name a session: /ui/session?id=SESSION.")
	}
	var ok bool
	if d.Tenant, ok = s.key.Scope(q.Get("tenant")); !ok {
		return h.showError(c, s, otherTenant(s))
	}
	recs, cut, err := h.traceRecords(r, d.Tenant, d.ID, timelineMax)
	if err != nil {
		return h.showError(c, s, err)
	}
	d.Cut = cut
	h.buildTrace(r, s, d, recs)
	return h.render(c, http.StatusOK, "session", page{Title: "Session " + d.ID, Session: s, Data: d})
}

// buildTrace turns a trace's records into its summary and steps, reading
// the captures of the first traceCaptures steps (each read recorded).
func (h *Handler) buildTrace(r *http.Request, s *session, d *traceData, recs []audit.Record) {
	lanes := map[string]*sandboxSummary{}
	agents := map[string]int{}
	for _, rec := range recs {
		if rec.SandboxSession == d.ID {
			d.Sandbox = true
		}
	}
	// Captures to read: each step's first.
	var ids []string
	for _, rec := range recs {
		if len(rec.CaptureIDs) > 0 && (rec.Kind == audit.KindExec || rec.Kind == audit.KindFetch || rec.Kind == audit.KindSession) {
			if len(ids) < traceCaptures {
				ids = append(ids, rec.CaptureIDs[0])
			}
		}
	}
	caps, missing := h.readMany(r, s, ids, "view", "")
	for _, why := range missing {
		d.Missing = append(d.Missing, why)
	}
	slices.Sort(d.Missing)
	for i, rec := range recs {
		if i == 0 {
			d.First = rec.Time
		}
		d.Last = rec.Time
		if rec.KeyID != "" && !slices.Contains(d.Keys, rec.KeyID) {
			d.Keys = append(d.Keys, rec.KeyID)
		}
		for _, p := range []*audit.ProfileRef{rec.ExecProfile, rec.EgressProfile} {
			if p != nil && !slices.Contains(d.Profiles, p.Name) {
				d.Profiles = append(d.Profiles, p.Name)
			}
		}
		st := &step{R: rec, Offset: rec.Time.Sub(recs[0].Time), Lane: -1, Kind: rec.Kind}
		var sb *sandboxSummary
		if id := rec.SandboxSession; id != "" {
			sb = lanes[id]
			if sb == nil {
				sb = &sandboxSummary{ID: id, Lane: len(d.Sandboxes) % 6, First: rec.Time}
				lanes[id] = sb
				d.Sandboxes = append(d.Sandboxes, sb)
			}
			sb.Last = rec.Time
			st.Lane = sb.Lane
			if rec.Session != "" && rec.Session != id && !slices.Contains(sb.Agents, rec.Session) {
				sb.Agents = append(sb.Agents, rec.Session)
			}
		}
		if rec.Session != "" && (sb == nil || rec.Session != sb.ID) {
			agents[rec.Session]++
		}
		if sb != nil {
			if p := rec.ExecProfile; p != nil && sb.Profile == "" {
				sb.Profile = profileName(p)
			}
			if sb.KeyID == "" {
				sb.KeyID = rec.KeyID
			}
			if rec.Image != "" {
				sb.Image = rec.Image
			}
		}
		cpu, hasCPU := recordCPU(&rec)
		switch {
		case rec.Kind == audit.KindSession && rec.Action == "start":
			st.Kind, st.Title = "start", "Session started"
			if sb != nil {
				sb.Start = &recs[i]
			}
		case rec.Kind == audit.KindSession && rec.Action == "end":
			st.Kind, st.Title = "end", "Session ended"
			if sb != nil {
				sb.End = &recs[i]
			}
		case rec.Kind == audit.KindSession && (rec.Action == "files_put" || rec.Action == "file_get"):
			st.Kind, d.Transfers = rec.Action, d.Transfers+1
			st.Title, st.Files = "Files put", rec.Inputs
			if rec.Action == "file_get" {
				st.Title, st.Files = "File got", rec.Outputs
			}
		case rec.Kind == audit.KindExec:
			st.Kind, st.Title = "exec", "Exec"
			if sb != nil {
				st.Kind, st.Title = "call", "Call"
				sb.Calls++
				sb.RunMS += rec.DurationsMS["run"]
				sb.CPUMS += cpu
				sb.HasCPU = sb.HasCPU || hasCPU
				if !okStatus(rec.Status) {
					sb.Failed++
				}
			}
			d.Calls++
			d.RunMS += rec.DurationsMS["run"]
			d.CPUMS += cpu
			d.HasCPU = d.HasCPU || hasCPU
			for _, o := range rec.Outputs {
				if strings.HasPrefix(o.Name, "files/") {
					st.Files = append(st.Files, o)
				}
			}
		case rec.Kind == audit.KindFetch:
			st.Title, st.URL = "Fetch", fetchURL(&rec)
			d.Fetches++
			for _, e := range rec.Egress {
				if !strings.HasPrefix(e.Verdict, "allow") {
					st.Denied++
				}
			}
		default:
			st.Title = rec.Kind
		}
		if (st.Kind == "exec" || st.Kind == "call" || st.Kind == "fetch") && !okStatus(rec.Status) {
			d.Failed++
		}
		if len(rec.CaptureIDs) > 0 {
			st.CaptureID = rec.CaptureIDs[0]
			cp := caps[st.CaptureID]
			switch {
			case cp != nil:
				fillStep(st, cp)
			case !slices.Contains(ids, st.CaptureID):
				st.Unread = true
				d.Unread++
			default:
				st.Problem = missing[st.CaptureID]
			}
		}
		d.Steps = append(d.Steps, st)
	}
	for id, n := range agents {
		d.Agents = append(d.Agents, agentSummary{ID: id, Records: n})
	}
	slices.SortFunc(d.Agents, func(a, b agentSummary) int { return cmp.Compare(b.Records, a.Records) })
}

// fillStep adds what a step's capture shows.
func fillStep(st *step, cp *capture.Capture) {
	if cp.Erased != nil {
		st.Erased = true
		st.Capture = viewCapture(cp)
		return
	}
	st.Capture = viewCapture(cp)
	part := func(name string) []byte {
		if p := cp.Part(name); p != nil {
			return p.Data
		}
		return nil
	}
	switch cp.Kind {
	case "exec":
		st.Code, st.CodeMore = headLines(part("code"), excerptLines)
		st.Out, st.OutMore = headLines(part("stdout"), excerptLines)
		if e := st.R.Detail["exception"]; e != "" || !okStatus(st.R.Status) {
			st.Exception = e
			st.Stderr = tailLines(part("stderr"), 4)
		}
		if st.Capture.Exec != nil {
			st.Results = st.Capture.Exec.Results
		}
	case "fetch":
		var ret struct {
			Title   string `json:"title"`
			Content string `json:"content"`
		}
		if json.Unmarshal(part("returned.json"), &ret) == nil {
			st.FetchTitle = visible(clip(ret.Title, 200))
			st.Out, st.OutMore = headLines([]byte(ret.Content), 4)
		}
		if u := cp.Meta["final_url"]; u != "" && st.URL == "" {
			st.URL = u
		}
	}
}

// headLines is the first n lines of b, made visible, and how many more
// there are.
func headLines(b []byte, n int) (string, int) {
	if looksBinary(b) {
		return fmt.Sprintf("(binary, %s)", sizeOf(int64(len(b)))), 0
	}
	lines := strings.Split(strings.TrimRight(string(b[:min(len(b), 64<<10)]), "\n"), "\n")
	more := 0
	if len(lines) > n {
		more, lines = len(lines)-n, lines[:n]
	}
	for i, l := range lines {
		lines[i] = clip(l, 240)
	}
	return visible(strings.Join(lines, "\n")), more
}

// tailLines is the last n lines of b, made visible.
func tailLines(b []byte, n int) string {
	if len(b) == 0 || looksBinary(b) {
		return ""
	}
	b = b[max(0, len(b)-(16<<10)):]
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		lines[i] = clip(l, 240)
	}
	return visible(strings.Join(lines, "\n"))
}

// recordCPU is the CPU time a record says its run used, if it says.
func recordCPU(r *audit.Record) (int64, bool) {
	if v, ok := r.DurationsMS["cpu"]; ok {
		return v, true
	}
	if v, err := strconv.ParseInt(r.Detail["cpu_ms"], 10, 64); err == nil {
		return v, true
	}
	return 0, false
}

// okStatus reports whether a status is a success.
func okStatus(s string) bool { return s == "ok" || s == "" }

func profileName(p *audit.ProfileRef) string {
	if p == nil {
		return ""
	}
	if v := p.Version; v != "" {
		return p.Name + "@" + v[:min(len(v), 12)]
	}
	return p.Name
}
