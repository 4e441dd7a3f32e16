package api

// AuditPage is the body of GET /audit.
type AuditPage struct {
	Records []AuditRecord `json:"records"`
	// NextCursor continues the listing (?cursor=); empty at the end.
	NextCursor string `json:"next_cursor"`
}

// CaptureView is the body of GET /captures/{id}.
type CaptureView struct {
	*Capture
	// Text holds the parts that are valid UTF-8, by name (at most 1 MiB
	// each); other parts are read with GET /captures/{id}/raw?part=NAME.
	Text map[string]string `json:"text"`
}

// CapturePage is the body of GET /captures.
type CapturePage struct {
	Captures   []Capture `json:"captures"`
	NextCursor string    `json:"next_cursor"`
}

// CaptureAction is the body of DELETE /captures/{id} (optional) and of
// the hold endpoints.
type CaptureAction struct {
	// On places (true) or lifts (false) a hold.
	On     *bool  `json:"on,omitempty"`
	Reason string `json:"reason"`
}
