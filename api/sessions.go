package api

import "time"

// SessionCreateRequest is the body of POST /sessions.
type SessionCreateRequest struct {
	Profile string         `json:"profile"`
	Limits  *LimitsRequest `json:"limits"`
	// IdleTimeoutS and MaxLifetimeS lower the profile's
	// session_idle_timeout_s and session_max_lifetime_s.
	IdleTimeoutS *int64 `json:"idle_timeout_s"`
	MaxLifetimeS *int64 `json:"max_lifetime_s"`
}

// SessionExecRequest is the body of POST /sessions/{id}/exec.
type SessionExecRequest struct {
	Code  *string  `json:"code"`
	Stdin string   `json:"stdin"`
	Files []InFile `json:"files"`
	// TimeoutMS lowers the session's limits.timeout_ms for this call.
	TimeoutMS *int64 `json:"timeout_ms"`
}

// SessionFilesRequest is the body of POST /sessions/{id}/files.
type SessionFilesRequest struct {
	Files []InFile `json:"files"`
}

// SessionFilesResponse answers POST /sessions/{id}/files.
type SessionFilesResponse struct {
	Files []SessionFileRef `json:"files"`
}

// SessionFileRef names a file written into a session.
type SessionFileRef struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// SessionInfo is the body of POST /sessions (201), GET and DELETE
// /sessions/{id}.
type SessionInfo struct {
	ID    string `json:"id"`
	State string `json:"state"` // ready, busy or ended
	// SandboxID is the sandboxd.exec-id label of the session's container.
	SandboxID    string     `json:"sandbox_id"`
	Profile      ProfileRef `json:"profile"`
	Limits       Limits     `json:"limits"`
	Image        string     `json:"image"`
	IdleTimeoutS int64      `json:"idle_timeout_s"`
	MaxLifetimeS int64      `json:"max_lifetime_s"`
	CreatedAt    time.Time  `json:"created_at"`
	LastUsedAt   time.Time  `json:"last_used_at"`
	// ExpiresAt is when the session ends if it is not used before;
	// EndsBy when it ends whatever happens.
	ExpiresAt time.Time    `json:"expires_at"`
	EndsBy    time.Time    `json:"ends_by"`
	EndedAt   *time.Time   `json:"ended_at,omitempty"`
	EndReason string       `json:"end_reason,omitempty"`
	Usage     SessionUsage `json:"usage"`
}

// SessionUsage is what a session has used so far.
type SessionUsage struct {
	Calls int64 `json:"calls"`
	// CPUMS is the CPU charged to the budgets (threads left running
	// between calls included); WallMS the calls' wall time.
	CPUMS  int64 `json:"cpu_ms"`
	WallMS int64 `json:"wall_ms"`
	// MemoryBytes is the container's memory use after the last call.
	MemoryBytes int64 `json:"memory_bytes"`
	// Restarts counts the calls after which the interpreter was replaced.
	Restarts int64 `json:"restarts"`
}

// SessionExecResponse is the body of a 200 from POST /sessions/{id}/exec:
// an exec response and the call's results.
type SessionExecResponse struct {
	ExecResponse
	Results []RichResult `json:"results"`
	// Exception describes an uncaught exception (status error); its
	// traceback is also in stderr.
	Exception *SessionException `json:"exception,omitempty"`
	// StateLost: the interpreter was replaced; what earlier calls defined
	// is gone.
	StateLost    bool   `json:"state_lost"`
	SessionID    string `json:"session_id"`
	SessionState string `json:"session_state"`
}

// RichResult is a result of a session call besides its output.
type RichResult struct {
	// Type is repr (the final expression), table (a pandas DataFrame as
	// text) or image/png (a matplotlib figure).
	Type      string `json:"type"`
	Text      string `json:"text,omitempty"`
	Data      string `json:"data,omitempty"` // base64 PNG
	Width     int    `json:"width,omitempty"`
	Height    int    `json:"height,omitempty"`
	Size      int    `json:"size,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	// Omitted says why a figure's data is not included.
	Omitted string `json:"omitted,omitempty"`
}

// SessionException is an uncaught exception of a call.
type SessionException struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback"`
}
