package execflow

import (
	"context"
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
)

// auditExec captures an exec's code, input and outputs and appends its
// audit record; it returns the answer to send.
func (f *Flow) audit(j *Job, a *control.Answer) *control.Answer {
	spec := j.Spec
	r := j.Who.Record(audit.KindExec)
	r.Subject = j.ID
	r.RequestSHA256 = j.ReqHash
	r.CodeSHA256 = audit.SHA256(spec.Job.Code)
	r.ExecProfile = &audit.ProfileRef{Name: spec.Profile.Name, Version: spec.Profile.Version}
	r.Runtime = spec.Profile.Runtime
	r.Datasets = append(r.Datasets, j.Datasets...)
	if eg := f.profiles().Egress[spec.Profile.Egress]; eg != nil {
		r.EgressProfile = &audit.ProfileRef{Name: eg.Name, Version: eg.Version}
	}
	parts := []capture.Part{
		{Name: "code", ContentType: "text/x-python", Data: spec.Job.Code},
		{Name: "stdin", ContentType: "application/octet-stream", Data: spec.Job.Stdin},
	}
	meta := map[string]string{"exec_id": j.ID, "profile": spec.Profile.Name}
	if len(spec.Job.Stdin) > 0 {
		r.Inputs = append(r.Inputs, audit.Output{Name: "stdin", Size: int64(len(spec.Job.Stdin)), SHA256: audit.SHA256(spec.Job.Stdin)})
	}
	for i, f := range spec.Job.Files {
		if reservedFile(f.Path) {
			continue // sandboxd's own (the proxy's CA), not the caller's input
		}
		r.Inputs = append(r.Inputs, KeepFile(&parts, meta, "input", i, f.Path, f.Content))
	}
	if spec.Secrets != nil {
		if r.Detail == nil {
			r.Detail = map[string]string{}
		}
		r.Detail["secrets"] = strings.Join(spec.Secrets.Names(), ",")
	}
	switch {
	case a.Resp != nil:
		resp := a.Resp
		if resp.ID != "" && resp.ID != j.ID {
			// A pooled sandbox ran it under its own id, which the answer
			// carries: the record is found by the id the caller saw.
			r.Subject = resp.ID
			meta["handle"] = j.ID
		}
		r.Status, r.Image = resp.Status, resp.Image
		ec := resp.ExitCode
		r.ExitCode = &ec
		// run: wall time; cpu: the CPU the code used (user and system).
		r.DurationsMS = map[string]int64{"run": resp.DurationMS, "cpu": resp.Usage.UserCPUMS + resp.Usage.SysCPUMS}
		r.Redactions = resp.Redactions
		out := outputBytes(resp.Stdout, resp.StdoutBase64)
		errb := outputBytes(resp.Stderr, resp.StderrBase64)
		parts = append(parts, capture.Part{Name: "stdout", ContentType: "application/octet-stream", Data: out},
			capture.Part{Name: "stderr", ContentType: "application/octet-stream", Data: errb})
		r.Outputs = append(r.Outputs, audit.Output{Name: "stdout", Size: int64(len(out)), SHA256: audit.SHA256(out)},
			audit.Output{Name: "stderr", Size: int64(len(errb)), SHA256: audit.SHA256(errb)})
		for i, f := range resp.Files {
			data, _ := base64.StdEncoding.DecodeString(f.Content)
			r.Outputs = append(r.Outputs, KeepFile(&parts, meta, "output", i, f.Path, data))
		}
		if resp.Message != "" {
			r.Message = resp.Message
		}
	case a.Err != nil:
		r.Status, r.Message = a.Err.Code, a.Err.Message
	}
	if !j.Started.IsZero() {
		if r.DurationsMS == nil {
			r.DurationsMS = map[string]int64{}
		}
		r.DurationsMS["total"] = time.Since(j.Started).Milliseconds()
	}
	// Every egress decision the proxy made for the run (networked profiles).
	ids := []string{j.ID}
	if r.Subject != j.ID {
		ids = append(ids, r.Subject)
	}
	if ds, dropped := f.decisions.take(ids...); len(ds) > 0 {
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
	if j.AuditHook != nil {
		j.AuditHook(r, &parts, meta)
	}
	// The code is kept as a capture whether or not it ran: it is what was
	// asked for.
	capt := &capture.Capture{Kind: "exec", Tenant: r.Tenant, KeyID: r.KeyID, RequestID: r.RequestID, Meta: meta, Parts: parts,
		Retention: capture.Days(spec.Profile.CaptureRetentionDays)}
	began := time.Now()
	err := f.cfg.Captures.Put(context.Background(), capt)
	j.timing.capture = time.Since(began)
	if err != nil {
		j.Log.Error("storing the exec capture failed", "err", err)
		if r.Detail == nil {
			r.Detail = map[string]string{}
		}
		r.Detail["capture_error"] = err.Error()
	} else {
		r.CaptureIDs = []string{capt.ID}
	}
	began = time.Now()
	defer func() { j.timing.audit = time.Since(began) }()
	return f.plane.Recorded(r, a, "the exec "+j.ID)
}

// KeepFile adds a file to a capture, as part prefix.i with its path in
// meta, and returns its digest for the audit record (files/<path>).
func KeepFile(parts *[]capture.Part, meta map[string]string, prefix string, i int, path string, data []byte) audit.Output {
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

// execDecisions keeps the egress proxy's decisions for each running exec
// (by the id the proxy knows it by), so that the exec's audit record lists
// every egress decision. Bounded: at most maxPerExec decisions per exec
// (the record notes how many more there were) and maxExecs execs; entries
// nobody collects are dropped after decisionTTL.
type execDecisions struct {
	mu   sync.Mutex
	byID map[string]*decisionList
}

type decisionList struct {
	list    []audit.Decision
	dropped int
	last    time.Time
}

const (
	maxPerExec  = 200
	maxExecs    = 4096
	decisionTTL = time.Hour
)

// RecordEgress is the egress Checker's Observe hook for the proxy: it keeps
// the decision for the audit record of the exec named by d.Client.
func (f *Flow) RecordEgress(d *egress.Decision) {
	if d.Client == "" {
		return
	}
	ip := ""
	if d.Dial.IsValid() {
		ip = d.Dial.Addr().String()
	}
	rec := audit.Decision{Method: d.Method, Host: d.Host, Port: d.Port, IP: ip, Verdict: d.Verdict(), Code: string(d.Code), Rule: d.Rule, Reason: d.Reason, Secret: d.Secret}
	ed := &f.decisions
	ed.mu.Lock()
	defer ed.mu.Unlock()
	if ed.byID == nil {
		ed.byID = map[string]*decisionList{}
	}
	l := ed.byID[d.Client]
	if l == nil {
		if len(ed.byID) >= maxExecs {
			ed.sweepLocked(time.Now())
			if len(ed.byID) >= maxExecs {
				return
			}
		}
		l = &decisionList{}
		ed.byID[d.Client] = l
	}
	l.last = time.Now()
	if len(l.list) >= maxPerExec {
		l.dropped++
		return
	}
	l.list = append(l.list, rec)
}

// take removes and returns the decisions recorded for any of ids.
func (ed *execDecisions) take(ids ...string) ([]audit.Decision, int) {
	ed.mu.Lock()
	defer ed.mu.Unlock()
	var out []audit.Decision
	dropped := 0
	for _, id := range ids {
		if l := ed.byID[id]; l != nil {
			out = append(out, l.list...)
			dropped += l.dropped
			delete(ed.byID, id)
		}
	}
	return out, dropped
}

func (ed *execDecisions) sweepLocked(now time.Time) {
	for id, l := range ed.byID {
		if now.Sub(l.last) > decisionTTL {
			delete(ed.byID, id)
		}
	}
}
