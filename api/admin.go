package api

import "time"

// FreezeRequest is the optional body of POST /admin/freeze.
type FreezeRequest struct {
	// KillRunning also kills every queued and running exec.
	KillRunning bool `json:"kill_running"`
	// Reason is shown in the FROZEN refusals and the log.
	Reason string `json:"reason"`
}

// FreezeResponse answers the freeze endpoints.
type FreezeResponse struct {
	FreezeState
	// Killed is how many execs a freeze with kill_running stopped.
	Killed int `json:"killed"`
}

// FreezeState is the kill switch's state, stored as the "freeze" setting.
type FreezeState struct {
	Frozen bool      `json:"frozen"`
	Since  time.Time `json:"since,omitzero"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
}
