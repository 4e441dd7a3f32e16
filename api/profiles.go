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
	// Method defaults to GET; it is taken in upper case ("get" is GET).
	Method string `json:"method"`
}

// EvaluateProfile names the profile a decision was made under.
type EvaluateProfile struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Mode    string `json:"mode"`
}

// EvaluateRules is what the profile's rules say of the request on their
// own (deny rules, allow rules, and in approve mode the host's approval),
// which needs no name lookup.
type EvaluateRules struct {
	// Verdict is "allow" or "deny".
	Verdict string `json:"verdict"`
	// Code is allowed, deny_rule, no_rule, port_not_allowed,
	// method_not_allowed, approval_required, approval_rejected.
	Code string `json:"code"`
	// Rule names the deciding rule (allow[0]:name, approval:ID), if any.
	Rule string `json:"rule,omitempty"`
	// Pattern is the host pattern of Rule that matched ("*.wikipedia.org").
	Pattern string `json:"pattern,omitempty"`
	Reason  string `json:"reason"`
}

// EvaluateAddressCheck is the check of the host's addresses, apart from
// the rules.
type EvaluateAddressCheck struct {
	// Status is passed, denied (by name, or an always-denied or
	// sandboxd's own address), unresolved (the name could not be
	// resolved where sandboxd runs; the proxy checks the addresses when it
	// connects) or not_checked (refused before: the rules deny a name,
	// which is then never resolved, or the request is malformed).
	Status string `json:"status"`
	// Code is the decision code that ended the check (denied_name,
	// denied_address, denied_self, resolve_failed, resolve_timeout).
	Code   string `json:"code,omitempty"`
	Reason string `json:"reason"`
}

// EvaluateResponse is the decision, as the proxy and the browse pipeline
// would make it, without connecting anywhere.
type EvaluateResponse struct {
	// Decision is "allow" or "deny": what the proxy would do now. A name
	// that cannot be resolved is denied (resolve_failed); Rules and
	// AddressCheck say what was decided apart from that, and Overall
	// what follows.
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
	// Method is the method evaluated, in upper case.
	Method string `json:"method"`
	// Rules is the rules' verdict on their own; absent when the request
	// was refused before the rules (a scheme other than http and https).
	Rules *EvaluateRules `json:"rules,omitempty"`
	// AddressCheck is the check of the addresses, apart from the rules.
	AddressCheck EvaluateAddressCheck `json:"address_check"`
	// Overall is "allow", "deny", or "at_connect" when the rules allow but
	// the name could not be resolved here: the proxy decides when it
	// resolves the name at connect time (allowed if every address is then
	// outside the always-denied ranges).
	Overall string `json:"overall"`
	// Summary says the above in one line: "rules: allow (allow[0]:reference,
	// pattern *.wikipedia.org); address check: ...; overall: ...".
	Summary string `json:"summary"`
}
