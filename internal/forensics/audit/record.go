// Package audit is sandboxd's append-only, hash-chained audit log: one
// record per /exec, /fetch, profile and key reload, capture deletion and
// admin action, answering "who ran what code, under which profile and
// image, on which data, and what did the agent read before it did that?".
//
// Each record carries the hash of the one before it (PrevHash) and its own
// (Hash = sha256 of its canonical JSON, which includes PrevHash), so a
// changed, deleted, inserted or reordered record breaks the chain; Verify
// walks it and reports the first break. Append returns once the record is
// durably on disk (a group commit with SQLite's synchronous=FULL), so a
// caller that appends before it answers loses no record it answered for,
// whatever kills the process.
//
// Records never hold code, output or secrets: code and outputs are named
// by their sha256 and kept as captures (package capture).
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// Kinds of records.
const (
	KindExec          = "exec"
	KindFetch         = "fetch"
	KindProfileReload = "profile_reload"
	KindKeysReload    = "keys_reload"
	KindCaptureDelete = "capture_delete" // retention sweeper
	KindCaptureErase  = "capture_erase"  // erasure request (tombstone)
	KindCaptureHold   = "capture_hold"
	KindCaptureRead   = "capture_read" // a reviewer read a capture's content (API or review page)
	KindAdmin         = "admin"        // freeze, unfreeze, approval decisions
	KindSession       = "session"      // a stateful session started or ended, or a file transfer of one (its calls are exec records)
)

// Record is one audit record. The API fills what it knows; Append sets Seq,
// ID (when empty), Time (when zero), PrevHash and Hash.
type Record struct {
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
	// DurationsMS: queue, run, total (whatever applies).
	DurationsMS map[string]int64 `json:"durations_ms,omitempty"`
	// Inputs name what the caller gave the code (input files, stdin), and
	// Outputs what was returned, by size and sha256 (never content).
	Inputs     []Output       `json:"inputs,omitempty"`
	Outputs    []Output       `json:"outputs,omitempty"`
	Redactions map[string]int `json:"redactions,omitempty"`
	CaptureIDs []string       `json:"capture_ids,omitempty"`
	// Egress lists every egress decision of a fetch (each hop).
	Egress []Decision `json:"egress,omitempty"`
	// Datasets the exec mounted, with their snapshot ids.
	Datasets []DatasetRef `json:"datasets,omitempty"`
	// Hosts are the hosts the record touched (fetch hops), for filtering.
	Hosts   []string          `json:"hosts,omitempty"`
	Message string            `json:"message,omitempty"`
	Detail  map[string]string `json:"detail,omitempty"`

	PrevHash string `json:"prev_hash"`
	Hash     string `json:"hash,omitempty"`
}

// CaptureRead describes one read of a capture's content, through the API
// or the review page.
type CaptureRead struct {
	CaptureID, CaptureTenant, CaptureKind string
	// KeyID and ReaderTenant are the reader's.
	KeyID, ReaderTenant string
	// Via is api or ui; Action view, raw or download; Part the part read,
	// if one.
	Via, Action, Part string
}

// Record is the read's audit record. It belongs to the capture's tenant,
// so that its reviewers see who read their data (the reader's tenant is in
// Detail when it differs), and names the capture as its subject only, so
// that opening the record shows no content.
func (c CaptureRead) Record() *Record {
	r := &Record{Kind: KindCaptureRead, Tenant: c.CaptureTenant, KeyID: c.KeyID, Subject: c.CaptureID, Action: c.Action, Status: "ok",
		Detail: map[string]string{"kind": c.CaptureKind, "via": c.Via}}
	if c.Part != "" {
		r.Detail["part"] = c.Part
	}
	if c.ReaderTenant != c.CaptureTenant {
		r.Detail["reader_tenant"] = c.ReaderTenant
	}
	return r
}

// ProfileRef names a profile version.
type ProfileRef struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Output is one input or returned output.
type Output struct {
	Name   string `json:"name"` // stdin, stdout, stderr, files/<path>, content
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Decision is one egress decision.
type Decision struct {
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
}

// DatasetRef is a dataset an exec mounted.
type DatasetRef struct {
	Name     string `json:"name"`
	Snapshot string `json:"snapshot"`
}

// SHA256 returns the hex sha256 of b (for code and output digests).
func SHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// canonical returns the bytes the hash covers: the record's JSON with Hash
// empty. Field order is the struct's and map keys are sorted, so the same
// record always gives the same bytes.
func canonical(r *Record) ([]byte, error) {
	c := *r
	c.Hash = ""
	return json.Marshal(&c)
}

// hashOf is sha256(canonical) in hex.
func hashOf(body []byte) string { return SHA256(body) }
