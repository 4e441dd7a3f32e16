package api

import (
	"net/url"
	"strconv"
	"time"
)

// AuditRecord is one record of the hash-chained audit log (GET /audit).
// The server fills what it knows; the log sets Seq, ID (when empty), Time
// (when zero), PrevHash and Hash when it appends it.
type AuditRecord struct {
	Seq  int64     `json:"seq"`
	ID   string    `json:"id"`
	Time time.Time `json:"time"`
	Kind string    `json:"kind"`
	// Action details the kind: freeze, unfreeze, approve, reject, hold, ...
	Action    string `json:"action,omitempty"`
	Tenant    string `json:"tenant,omitempty"`
	KeyID     string `json:"key_id,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	TraceID   string `json:"trace_id,omitempty"`
	Session   string `json:"session,omitempty"`
	// SandboxSession is the stateful session (ses_...) a record belongs
	// to when Session is the agent's own id (X-Session-Id): a session's
	// records are found under either.
	SandboxSession string `json:"sandbox_session,omitempty"`
	// Subject is what the record is about: an exec id, a fetch id, a
	// capture id, a profile name.
	Subject       string `json:"subject,omitempty"`
	RequestSHA256 string `json:"request_sha256,omitempty"`
	CodeSHA256    string `json:"code_sha256,omitempty"`
	// ExecProfile and EgressProfile name the profiles with their versions.
	ExecProfile   *ProfileRef `json:"exec_profile,omitempty"`
	EgressProfile *ProfileRef `json:"egress_profile,omitempty"`
	Image         string      `json:"image,omitempty"`
	Runtime       string      `json:"runtime,omitempty"`
	// Status is the outcome: a run status, ok, or an error code.
	Status   string `json:"status,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	// DurationsMS: queue, run, total (whatever applies), and for an exec
	// cpu, the CPU time its code used.
	DurationsMS map[string]int64 `json:"durations_ms,omitempty"`
	// Inputs name what the caller gave the code (input files, stdin), and
	// Outputs what was returned, by size and sha256 (never content).
	Inputs     []AuditOutput  `json:"inputs,omitempty"`
	Outputs    []AuditOutput  `json:"outputs,omitempty"`
	Redactions map[string]int `json:"redactions,omitempty"`
	CaptureIDs []string       `json:"capture_ids,omitempty"`
	// Egress lists every egress decision of a fetch (each hop).
	Egress []EgressDecision `json:"egress,omitempty"`
	// Datasets the exec mounted, with their snapshot ids.
	Datasets []DatasetRef `json:"datasets,omitempty"`
	// Hosts are the hosts the record touched (fetch hops), for filtering.
	Hosts   []string          `json:"hosts,omitempty"`
	Message string            `json:"message,omitempty"`
	Detail  map[string]string `json:"detail,omitempty"`
	// Replica names the sandboxd replica that wrote the record (a fleet
	// sharing one log; empty on a single host).
	Replica string `json:"replica,omitempty"`

	PrevHash string `json:"prev_hash"`
	Hash     string `json:"hash,omitempty"`
}

// AuditOutput names one input or returned output by size and digest.
type AuditOutput struct {
	Name   string `json:"name"` // stdin, stdout, stderr, files/<path>, content
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// EgressDecision is one egress decision (a fetch hop, a proxied request).
type EgressDecision struct {
	URL     string `json:"url,omitempty"`
	Method  string `json:"method,omitempty"`
	Host    string `json:"host"`
	Port    uint16 `json:"port,omitempty"`
	IP      string `json:"ip,omitempty"`
	Verdict string `json:"verdict"`
	Code    string `json:"code"`
	Rule    string `json:"rule,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Status  int    `json:"status,omitempty"`
	// Secret names the secret (never its value) the egress proxy injected
	// (code secret_injected) or whose placeholder got the request refused
	// (secret_elsewhere, secret_misplaced).
	Secret string `json:"secret,omitempty"`
}

// AuditQuery selects audit records (the query of GET /audit). Zero fields
// match everything.
type AuditQuery struct {
	Tenant     string
	Kind       string
	Status     string
	Profile    string // exec or egress profile name
	Session    string
	CodeSHA256 string
	Host       string
	Subject    string
	Since      time.Time // inclusive
	Until      time.Time // exclusive
	// Limit is the page size: 1 to MaxLimit (default 100).
	Limit int
	// Cursor continues a previous Query.
	Cursor string
}

// Values is the query as GET /audit's query parameters.
func (q *AuditQuery) Values() url.Values {
	v := url.Values{}
	for name, s := range map[string]string{"tenant": q.Tenant, "kind": q.Kind, "status": q.Status, "profile": q.Profile, "session": q.Session,
		"code_sha256": q.CodeSHA256, "host": q.Host, "subject": q.Subject, "cursor": q.Cursor} {
		if s != "" {
			v.Set(name, s)
		}
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}
