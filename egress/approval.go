package egress

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/egress/hostport"
)

// CodeApprovalRejected denies a request to a host a person rejected for
// the profile (403, like CodeApproval).
const CodeApprovalRejected Code = "approval_rejected"

// An approval covers its host on these ports and methods only: the
// defaults of an allow rule, plus CONNECT to port 443, so that a sandbox
// behind the proxy can reach an approved host over HTTPS (its tunnel). A
// request in approve mode for a host no rule matches, on another port or
// with another method, is denied outright and files no approval request,
// since approving the host would not allow it.
var (
	ApprovalPorts   = []uint16{80, 443}
	ApprovalMethods = []string{http.MethodGet, http.MethodHead, http.MethodConnect}
)

// approvable reports whether an approval can cover method on port.
func approvable(method string, port uint16) bool {
	if method == http.MethodConnect {
		return port == 443
	}
	return slices.Contains(ApprovalMethods, method)
}

// Approval states, as Approvals reports them.
const (
	ApprovalNone     = ""
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalRejected = "rejected"
)

// ApprovalQuery asks for the approval of a host under a profile in approve
// mode, for one request that matched no rule.
type ApprovalQuery struct {
	Profile        string
	ProfileVersion string
	// Host is the normalised host name (never an IP address), Port and
	// Method those of the request.
	Host   string
	Port   uint16
	Method string
	// URL is the request's URL without userinfo, query and fragment (for
	// CONNECT, host:port).
	URL string
	// Client, Tenant and KeyID say who asked (Tenant and KeyID may be
	// empty: the implementation may find them from Client).
	Client string
	Tenant string
	KeyID  string
}

// ApprovalStatus is the standing approval of a host under a profile.
type ApprovalStatus struct {
	// ID names the approval record; empty with State ApprovalNone.
	ID string
	// State is ApprovalApproved (allowed until ExpiresAt), ApprovalPending
	// (filed, waiting for a person), ApprovalRejected, or ApprovalNone (a
	// read-only check found nothing).
	State     string
	DecidedBy string
	ExpiresAt time.Time
	// Created is true when this query filed the request.
	Created bool
}

// Approvals holds the people's answers for profiles in approve mode. The
// Checker asks it about requests to hosts no rule matches; an
// implementation files a pending request for a host it has no standing
// answer for (a read-only one, for dry runs, files nothing). It never
// approves anything by itself: only a person's decision makes a host
// approved, until it expires.
type Approvals interface {
	CheckApproval(ctx context.Context, q ApprovalQuery) (ApprovalStatus, error)
}

// approval decides a request in approve mode whose host matched no rule.
// It returns CodeAllowed with the approval as the rule when a person
// approved the host (the caller then resolves and checks every address as
// for any allowed host: an approval never opens an always-denied address),
// and otherwise the denial: approval_required with the id of the pending
// request, approval_rejected, or a plain denial for what no approval can
// allow.
func (c *Checker) approval(ctx context.Context, p *Profile, d *Decision, t hostport.Target, req Request, reason string) (Code, string, string) {
	if t.IsIP() {
		return CodeNoRule, "", reason + "; approvals, like rules, name hosts, not addresses, so an IP address cannot be approved"
	}
	if !slices.Contains(ApprovalPorts, t.Port) {
		return CodePort, "", fmt.Sprintf("%s; in approve mode a host can be approved for ports %s only, so port %d stays denied (add an allow rule to open it)",
			reason, portsText(ApprovalPorts), t.Port)
	}
	if !approvable(d.Method, t.Port) {
		return CodeMethod, "", fmt.Sprintf("%s; in approve mode a host can be approved for GET and HEAD on ports 80 and 443 and CONNECT to 443 only, so %s to port %d stays denied (add an allow rule to allow it)",
			reason, d.Method, t.Port)
	}
	if c.Approvals == nil {
		return CodeApproval, "", reason + "; the profile is in approve mode, so the host needs a person's approval, and approvals are not set up here: it stays denied"
	}
	st, err := c.Approvals.CheckApproval(ctx, ApprovalQuery{
		Profile: p.Name, ProfileVersion: p.Version,
		Host: t.Host, Port: t.Port, Method: d.Method,
		URL:    approvalURL(t, req.Target),
		Client: req.Client, Tenant: req.Tenant, KeyID: req.KeyID,
	})
	if err != nil {
		return CodeApproval, "", fmt.Sprintf("%s; the profile is in approve mode and the approvals could not be read (%v): denied", reason, err)
	}
	d.ApprovalID = st.ID
	switch st.State {
	case ApprovalApproved:
		return CodeAllowed, "approval:" + st.ID, fmt.Sprintf("%s %s port %d matches no rule, but approval %s by %s allows it until %s",
			d.Method, t.Host, t.Port, st.ID, st.DecidedBy, st.ExpiresAt.UTC().Format(time.RFC3339))
	case ApprovalRejected:
		return CodeApprovalRejected, "approval:" + st.ID, fmt.Sprintf("%s; %s rejected it for profile %s (approval %s)", reason, st.DecidedBy, p.Name, st.ID)
	case ApprovalPending:
		return CodeApproval, "", fmt.Sprintf("%s; the profile is in approve mode: approval request %s waits for a person (role security) to approve the host; until then it stays denied", reason, st.ID)
	}
	return CodeApproval, "", reason + "; the profile is in approve mode and nobody has approved the host (nothing was filed: a dry run)"
}

// approvalURL is the URL of a request as an approval records it: scheme,
// normalised authority and path, without userinfo, query or fragment;
// host:port for CONNECT.
func approvalURL(t hostport.Target, raw string) string {
	if t.Scheme == "" {
		return t.Authority()
	}
	path := "/"
	if u, err := url.Parse(raw); err == nil && u.EscapedPath() != "" {
		path = u.EscapedPath()
	}
	if len(path) > 1024 {
		path = path[:1024]
	}
	return t.Scheme + "://" + t.HostHeader() + path
}
