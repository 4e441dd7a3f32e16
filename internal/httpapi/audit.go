package httpapi

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/browse"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
)

// auditMeta is what every audit record of a request carries.
type auditMeta struct {
	tenant, keyID, requestID, traceID, session string
}

func metaOf(c echo.Context) auditMeta {
	m := auditMeta{}
	if k := requestKey(c); k != nil {
		m.tenant, m.keyID = k.Tenant, k.ID
	}
	m.requestID, _ = c.Get(ctxRequestID).(string)
	m.traceID, _ = c.Get(ctxTraceID).(string)
	return m
}

func (m auditMeta) record(kind string) *audit.Record {
	return &audit.Record{Kind: kind, Tenant: m.tenant, KeyID: m.keyID, RequestID: m.requestID, TraceID: m.traceID, Session: m.session}
}

// appendAudit writes r durably; on failure the answer a is replaced by a
// 503 that says the action happened and its result is withheld (kept for
// an Idempotency-Key, so a retry does not act twice).
func (s *Server) appendAudit(r *audit.Record, a *answer, what string) *answer {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.audit.Append(ctx, r); err != nil {
		s.log.Error("writing an audit record failed; the answer is withheld", "kind", r.Kind, "subject", r.Subject, "err", err)
		e := errAnswer(&api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeAuditUnavailable,
			Message: fmt.Sprintf("%s finished, but its audit record could not be written, so its result is withheld; the operator must repair the audit log (the request id names it in the log)", what)})
		e.keep = a.keep
		return e
	}
	return a
}

// auditExec captures an exec's code, input and outputs and appends its
// audit record; it returns the answer to send.
func (s *Server) auditExec(j *execJob, a *answer) *answer {
	spec := j.spec
	r := j.meta.record(audit.KindExec)
	r.Subject = j.id
	r.RequestSHA256 = j.reqHash
	r.CodeSHA256 = audit.SHA256(spec.Job.Code)
	r.ExecProfile = &audit.ProfileRef{Name: spec.Profile.Name, Version: spec.Profile.Version}
	r.Runtime = spec.Profile.Runtime
	for _, d := range j.datasets {
		r.Datasets = append(r.Datasets, audit.DatasetRef{Name: d.Name, Snapshot: d.Snapshot})
	}
	if eg := s.profiles().Egress[spec.Profile.Egress]; eg != nil {
		r.EgressProfile = &audit.ProfileRef{Name: eg.Name, Version: eg.Version}
	}
	parts := []capture.Part{
		{Name: "code", ContentType: "text/x-python", Data: spec.Job.Code},
		{Name: "stdin", ContentType: "application/octet-stream", Data: spec.Job.Stdin},
	}
	meta := map[string]string{"exec_id": j.id, "profile": spec.Profile.Name}
	if len(spec.Job.Stdin) > 0 {
		r.Inputs = append(r.Inputs, audit.Output{Name: "stdin", Size: int64(len(spec.Job.Stdin)), SHA256: audit.SHA256(spec.Job.Stdin)})
	}
	for i, f := range spec.Job.Files {
		r.Inputs = append(r.Inputs, keepFile(&parts, meta, "input", i, f.Path, f.Content))
	}
	switch {
	case a.resp != nil:
		resp := a.resp
		if resp.ID != "" && resp.ID != j.id {
			// A pooled sandbox ran it under its own id, which the answer
			// carries: the record is found by the id the caller saw.
			r.Subject = resp.ID
			meta["handle"] = j.id
		}
		r.Status, r.Image = resp.Status, resp.Image
		ec := resp.ExitCode
		r.ExitCode = &ec
		r.DurationsMS = map[string]int64{"run": resp.DurationMS}
		r.Redactions = resp.Redactions
		out := outputBytes(resp.Stdout, resp.StdoutBase64)
		errb := outputBytes(resp.Stderr, resp.StderrBase64)
		parts = append(parts, capture.Part{Name: "stdout", ContentType: "application/octet-stream", Data: out},
			capture.Part{Name: "stderr", ContentType: "application/octet-stream", Data: errb})
		r.Outputs = append(r.Outputs, audit.Output{Name: "stdout", Size: int64(len(out)), SHA256: audit.SHA256(out)},
			audit.Output{Name: "stderr", Size: int64(len(errb)), SHA256: audit.SHA256(errb)})
		for i, f := range resp.Files {
			data, _ := base64.StdEncoding.DecodeString(f.Content)
			r.Outputs = append(r.Outputs, keepFile(&parts, meta, "output", i, f.Path, data))
		}
		if resp.Message != "" {
			r.Message = resp.Message
		}
	case a.err != nil:
		r.Status, r.Message = a.err.Code, a.err.Message
	}
	if !j.started.IsZero() {
		if r.DurationsMS == nil {
			r.DurationsMS = map[string]int64{}
		}
		r.DurationsMS["total"] = time.Since(j.started).Milliseconds()
	}
	// Every egress decision the proxy made for the run (networked profiles).
	ids := []string{j.id}
	if r.Subject != j.id {
		ids = append(ids, r.Subject)
	}
	if ds, dropped := s.egressDecisions.take(ids...); len(ds) > 0 {
		r.Egress = ds
		for _, d := range ds {
			if d.Host != "" && !slices.Contains(r.Hosts, d.Host) {
				r.Hosts = append(r.Hosts, d.Host)
			}
		}
		if dropped > 0 {
			if r.Detail == nil {
				r.Detail = map[string]string{}
			}
			r.Detail["egress_decisions_dropped"] = strconv.Itoa(dropped)
		}
	}
	if j.auditHook != nil {
		j.auditHook(r, &parts, meta)
	}
	// The code is kept as a capture whether or not it ran: it is what was
	// asked for.
	capt := &capture.Capture{Kind: "exec", Tenant: r.Tenant, KeyID: r.KeyID, RequestID: r.RequestID, Meta: meta, Parts: parts,
		Retention: days(spec.Profile.CaptureRetentionDays)}
	began := time.Now()
	err := s.captures.Put(context.Background(), capt)
	j.timing.capture = time.Since(began)
	if err != nil {
		j.log.Error("storing the exec capture failed", "err", err)
		if r.Detail == nil {
			r.Detail = map[string]string{}
		}
		r.Detail["capture_error"] = err.Error()
	} else {
		r.CaptureIDs = []string{capt.ID}
	}
	began = time.Now()
	defer func() { j.timing.audit = time.Since(began) }()
	return s.appendAudit(r, a, "the exec "+j.id)
}

// keepFile adds a file to a capture, as part prefix.i with its path in
// meta, and returns its digest for the audit record (files/<path>).
func keepFile(parts *[]capture.Part, meta map[string]string, prefix string, i int, path string, data []byte) audit.Output {
	name := prefix + "." + strconv.Itoa(i)
	*parts = append(*parts, capture.Part{Name: name, ContentType: "application/octet-stream", Data: data})
	meta[name] = path
	return audit.Output{Name: "files/" + path, Size: int64(len(data)), SHA256: audit.SHA256(data)}
}

func outputBytes(text, b64 string) []byte {
	if b64 != "" {
		if b, err := base64.StdEncoding.DecodeString(b64); err == nil {
			return b
		}
	}
	return []byte(text)
}

// auditFetch appends a fetch's audit record: every hop's decision, the
// hosts, the capture and what was returned.
func (s *Server) auditFetch(j *fetchJob, res *browse.Result, a *answer, resp *api.FetchResponse, captureID string) *answer {
	r := j.meta.record(audit.KindFetch)
	r.Subject = j.id
	r.RequestSHA256 = j.reqHash
	r.EgressProfile = &audit.ProfileRef{Name: j.profile.Name, Version: j.profile.Version}
	r.Detail = map[string]string{"url": redactString(s.redactor(j.profile), j.req.URL)}
	if res != nil {
		for _, h := range res.Hops {
			d := h.Decision
			ip := ""
			if d.Dial.IsValid() {
				ip = d.Dial.Addr().String()
			}
			r.Egress = append(r.Egress, audit.Decision{URL: redactString(s.redactor(j.profile), h.URL), Method: d.Method, Host: d.Host, Port: d.Port, IP: ip,
				Verdict: d.Verdict(), Code: string(d.Code), Rule: d.Rule, Reason: d.Reason, Status: h.Status})
			if d.Host != "" && !slices.Contains(r.Hosts, d.Host) {
				r.Hosts = append(r.Hosts, d.Host)
			}
		}
	}
	if len(r.Hosts) == 0 {
		if u, err := url.Parse(j.req.URL); err == nil && u.Hostname() != "" {
			r.Hosts = []string{u.Hostname()}
		}
	}
	switch {
	case resp != nil:
		r.Status = "ok"
		r.Detail["upstream_status"] = strconv.Itoa(resp.Status)
		r.Detail["content_type"] = resp.ContentType
		r.Redactions = resp.Redactions
		r.Outputs = []audit.Output{{Name: "content", Size: int64(len(resp.Content)), SHA256: audit.SHA256([]byte(resp.Content))}}
		if res != nil {
			r.Outputs = append(r.Outputs, audit.Output{Name: "raw", Size: int64(len(res.Raw)), SHA256: audit.SHA256(res.Raw)})
		}
	case a.err != nil:
		r.Status, r.Message = a.err.Code, a.err.Message
	}
	if captureID != "" {
		r.CaptureIDs = []string{captureID}
	}
	r.DurationsMS = map[string]int64{"total": time.Since(j.started).Milliseconds()}
	return s.appendAudit(r, a, "the fetch "+j.id)
}

// AuditEvent appends a record for something that happened outside a
// request (a profile reload, a retention deletion). It returns the error.
func (s *Server) AuditEvent(ctx context.Context, r *audit.Record) error {
	return s.audit.Append(ctx, r)
}

// Audit returns the audit log the server writes.
func (s *Server) Audit() audit.Log { return s.audit }

// auditAdmin appends the record of an admin action.
func (s *Server) auditAdmin(c echo.Context, action, subject, message string, detail map[string]string) error {
	r := metaOf(c).record(audit.KindAdmin)
	r.Action, r.Subject, r.Message, r.Detail, r.Status = action, subject, message, detail, "ok"
	return s.auditEvent(c, r, "the "+action)
}

// days converts a profile's retention in days (0: keep until erased).
func days(n int64) time.Duration { return time.Duration(n) * 24 * time.Hour }
