package api

// ProfileSummary is one entry of GET /profiles.
type ProfileSummary struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	Description string `json:"description"`
	// Mode is the egress mode; Egress the egress profile an exec profile names.
	Mode   string `json:"mode,omitempty"`
	Egress string `json:"egress,omitempty"`
	// Source is the file the profile was loaded from; empty for the
	// built-in "none".
	Source string `json:"source"`
}

// ProfileList is the body of GET /profiles.
type ProfileList struct {
	Exec   []ProfileSummary `json:"exec"`
	Egress []ProfileSummary `json:"egress"`
}

// ProfileDetail is the body of GET /profiles/{name}. Exec and egress
// profiles have separate namespaces: Kinds says which of them hold the
// name (both, if each defines it), and the matching fields are set, with
// every value of the profile under its YAML key.
type ProfileDetail struct {
	Name   string         `json:"name"`
	Kinds  []string       `json:"kinds"`
	Exec   map[string]any `json:"exec,omitempty"`
	Egress map[string]any `json:"egress,omitempty"`
}

// EvaluateRequest is the body of POST /profiles/{name}/evaluate.
type EvaluateRequest struct {
	// URL is an absolute http(s) URL, or host:port with method CONNECT.
	URL string `json:"url"`
	// Method defaults to GET.
	Method string `json:"method"`
}

// EvaluateProfile names the profile a decision was made under.
type EvaluateProfile struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Mode    string `json:"mode"`
}

// EvaluateResponse is the decision, as the proxy and the browse pipeline
// would make it, without connecting anywhere.
type EvaluateResponse struct {
	// Decision is "allow" or "deny".
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	// Rule names the deciding rule (allow[0]:name), if any.
	Rule string `json:"rule"`
	// Addresses are the checked addresses the host resolved to (or the literal).
	Addresses []string `json:"addresses"`
	// Code classifies the decision (allowed, no_rule, denied_address, ...).
	Code string `json:"code"`
	// WouldDeny is set in report mode when enforce would deny.
	WouldDeny bool `json:"would_deny"`
	// ApprovalID names the standing approval (or pending request) of the
	// host under a profile in approve mode.
	ApprovalID string `json:"approval_id,omitempty"`
	// Host and Port are the normalised target; Dial the address that would
	// be dialled.
	Host    string          `json:"host"`
	Port    int             `json:"port"`
	Dial    string          `json:"dial,omitempty"`
	Profile EvaluateProfile `json:"profile"`
}
