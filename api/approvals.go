package api

import "time"

// ApprovalView is one approval request and its decision, as the API shows it.
type ApprovalView struct {
	ID string `json:"id"`
	// Status is pending, approved, rejected or expired.
	Status         string `json:"status"`
	Profile        string `json:"profile"`
	ProfileVersion string `json:"profile_version"`
	Host           string `json:"host"`
	Port           int    `json:"port"`
	Method         string `json:"method"`
	// URL is the first request's URL without its query.
	URL string `json:"url"`
	// Tenant, KeyID and Client (exec id) name who asked first.
	Tenant    string    `json:"tenant"`
	KeyID     string    `json:"key_id"`
	Client    string    `json:"client"`
	Count     int64     `json:"count"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// DecidedBy is the key id of the person who decided, with its tenant.
	DecidedBy       string    `json:"decided_by,omitempty"`
	DecidedByTenant string    `json:"decided_by_tenant,omitempty"`
	DecidedAt       time.Time `json:"decided_at,omitzero"`
	Reason          string    `json:"reason,omitempty"`
	// ExpiresAt ends an approval.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// ApprovalList is the body of GET /approvals.
type ApprovalList struct {
	Status    string         `json:"status"`
	Approvals []ApprovalView `json:"approvals"`
}

// ApprovalDecisionRequest is the body of POST /approvals/{id}.
type ApprovalDecisionRequest struct {
	// Decision is "approve" or "reject".
	Decision string `json:"decision"`
	// TTL is how long an approval lasts ("24h", "90m", "7d"; 1m to 30
	// days); required to approve, refused with reject.
	TTL string `json:"ttl"`
	// Reason is optional, kept and logged.
	Reason string `json:"reason"`
}
