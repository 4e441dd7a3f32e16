package api

import "time"

// Capture is a forensic capture as GET /captures and /captures/{id} show
// it: what was kept of an exec (its code, inputs and outputs), a fetch (the
// raw page, the headers, the returned JSON) or a session's file transfer,
// described part by part (the bytes are read with /captures/{id}/raw).
type Capture struct {
	// ID is "cap_" and 32 hex digits.
	ID string `json:"id"`
	// Kind says what was captured: "fetch", "exec", "session_files".
	Kind      string    `json:"kind"`
	Tenant    string    `json:"tenant"`
	KeyID     string    `json:"key_id"`
	RequestID string    `json:"request_id,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// RetentionS is how long the capture is kept after CreatedAt, in
	// seconds (a profile's capture_retention_days times 86400); 0 (absent)
	// keeps it until it is deleted or erased. Like every duration of the
	// API it is a count of a named unit, never a Go time.Duration.
	RetentionS int64 `json:"retention_s,omitempty"`
	// ExpiresAt is CreatedAt plus RetentionS (zero when RetentionS is 0):
	// the sweeper deletes the capture after it unless it is held.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Meta holds small facts (url, final_url, status, content_type). An
	// erased capture has none.
	Meta map[string]string `json:"meta,omitempty"`
	// Parts are the captured bodies, each under a unique name.
	Parts []CapturePart `json:"parts"`
	// Hold is the legal hold on this capture, nil when there is none.
	Hold *CaptureHold `json:"hold,omitempty"`
	// TenantHold is the legal hold on the capture's tenant, nil when there
	// is none.
	TenantHold *CaptureHold `json:"tenant_hold,omitempty"`
	// Erased is set on the tombstone of an erased capture: its parts keep
	// their names, sizes and digests but have no data.
	Erased *CaptureErasure `json:"erased,omitempty"`
}

// CapturePart describes one captured body.
type CapturePart struct {
	// Name is 1 to 64 of a-z, 0-9, '.', '_' and '-' ("raw", "headers",
	// "content").
	Name        string `json:"name"`
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
	// SHA256 is the hex digest of the part's bytes.
	SHA256 string `json:"sha256"`
}

// CaptureHold is a legal hold: who placed it, when and why.
type CaptureHold struct {
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// CaptureErasure records who erased a capture, when and why.
type CaptureErasure struct {
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}
