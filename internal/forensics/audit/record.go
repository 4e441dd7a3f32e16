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

	"github.com/sandboxd/sandboxd/api"
)

// Record is one audit record: the API's wire type, which is also the form
// the chain hashes. Append sets Seq, ID (when empty), Time (when zero),
// PrevHash and Hash.
type Record = api.AuditRecord

// Output, Decision and ProfileRef are parts of a Record.
type (
	Output     = api.AuditOutput
	Decision   = api.EgressDecision
	ProfileRef = api.ProfileRef
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
