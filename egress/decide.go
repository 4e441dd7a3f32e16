package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/egress/hostport"
	"github.com/sandboxd/sandboxd/egress/netpolicy"
)

// Code classifies a decision or the outcome of a request, for logs,
// metrics and status codes. Reason says the same in words.
type Code string

// Decision codes.
const (
	CodeAllowed Code = "allowed"

	// The request cannot be judged: 400.
	CodeBadURL    Code = "bad_url"
	CodeBadHost   Code = "bad_host"
	CodeBadPort   Code = "bad_port"
	CodeBadMethod Code = "bad_method"
	CodeUserinfo  Code = "userinfo"

	// Policy: 403.
	CodeScheme        Code = "scheme_not_allowed"
	CodeDeniedName    Code = "denied_name"
	CodeDeniedAddress Code = "denied_address"
	// CodeDeniedSelf: the request would reach one of sandboxd's own
	// listeners (Listeners), whatever the profile allows.
	CodeDeniedSelf    Code = "denied_self"
	CodeDenyRule      Code = "deny_rule"
	CodeNoRule        Code = "no_rule"
	CodePort          Code = "port_not_allowed"
	CodeMethod        Code = "method_not_allowed"
	CodeApproval      Code = "approval_required"
	CodeNoProfile     Code = "no_profile"
	CodeUnknownClient Code = "unknown_client"

	// Secrets the proxy injects (internal/secrets). secret_injected is an
	// allowed request into which the proxy wrote a secret's value (the
	// decision names the secret); the other two are requests refused for
	// the placeholder they carried: to a destination the secret may not go
	// to (or through a tunnel), or where the secret goes but in another
	// place than where it is applied.
	CodeSecretInjected  Code = "secret_injected"
	CodeSecretElsewhere Code = "secret_elsewhere"
	CodeSecretMisplaced Code = "secret_misplaced"

	// Name resolution: 502 and 504.
	CodeResolve        Code = "resolve_failed"
	CodeResolveTimeout Code = "resolve_timeout"
)

// Outcome codes, for what happened to an allowed request (used in logs by
// the proxy and the browse pipeline).
const (
	OutcomeOK            Code = "ok"
	OutcomeRateLimited   Code = "rate_limited"
	OutcomeTooMany       Code = "too_many_connections"
	OutcomeRequestCap    Code = "request_too_large"
	OutcomeResponseCap   Code = "response_too_large"
	OutcomeTimeout       Code = "timeout"
	OutcomeConnectFailed Code = "connect_failed"
	OutcomeUpstreamError Code = "upstream_error"
	OutcomeClientGone    Code = "client_gone"
	OutcomeNotProxy      Code = "not_a_proxy_request"
	OutcomeProtocol      Code = "protocol_not_supported"
	OutcomeUpgrade       Code = "upgrade_not_supported"
)

// Status returns the HTTP status a proxy answers a denied request with.
func (c Code) Status() int {
	switch c {
	case CodeAllowed, OutcomeOK, CodeSecretInjected:
		return http.StatusOK
	case CodeBadURL, CodeBadHost, CodeBadPort, CodeBadMethod, CodeUserinfo, OutcomeNotProxy:
		return http.StatusBadRequest
	case CodeResolve, OutcomeConnectFailed, OutcomeUpstreamError, OutcomeResponseCap:
		return http.StatusBadGateway
	case CodeResolveTimeout, OutcomeTimeout:
		return http.StatusGatewayTimeout
	case OutcomeRateLimited, OutcomeTooMany:
		return http.StatusTooManyRequests
	case OutcomeRequestCap:
		return http.StatusRequestEntityTooLarge
	case OutcomeProtocol:
		return http.StatusHTTPVersionNotSupported
	case OutcomeUpgrade:
		return http.StatusNotImplemented
	}
	return http.StatusForbidden
}

// BadRequest reports whether the code means the request itself was
// malformed (as opposed to refused by policy).
func (c Code) BadRequest() bool { return c.Status() == http.StatusBadRequest }

// Request is what Decide judges.
type Request struct {
	// Method is the HTTP method. "CONNECT" makes Target an authority.
	Method string
	// Target is an absolute http or https URL, or for CONNECT "host:port".
	Target string
	// Client identifies who asks (an exec id, a fetch id), for the log.
	// It is never taken from anything the sandbox sends.
	Client string
	// Tenant and KeyID, when the caller knows them, say whose request it
	// is, for the approval request a profile in approve mode files.
	Tenant string
	KeyID  string
}

// Decision is the verdict on one request.
type Decision struct {
	// Allow is the verdict: dial Dial, or refuse.
	Allow bool
	// Code classifies the verdict; in report mode, what enforce would have
	// decided (WouldDeny is then true).
	Code Code
	// Reason says why, in words a security team can act on.
	Reason string
	// Rule names the rule that decided (allow[0], deny[1]:name), if any.
	Rule string
	// WouldDeny is set in report mode when enforce would have denied.
	WouldDeny bool
	// ApprovalID names the approval (approve mode) that allowed the
	// request, or the request for one that it filed or found.
	ApprovalID string

	Profile        string
	ProfileVersion string
	Mode           Mode
	Client         string
	Method         string
	// Scheme is http or https, empty for CONNECT.
	Scheme string
	// Host is the normalised host (name or canonical IP), Port the port.
	Host string
	Port uint16
	// HostHeader is the Host header to send upstream.
	HostHeader string
	// Addresses are every address the host resolved to (or the literal),
	// each checked.
	Addresses []netip.Addr
	// Dial is the one checked address to connect to; valid only when Allow.
	Dial netip.AddrPort
	// Secret names the secret (never its value) the proxy injected into
	// the request (CodeSecretInjected) or whose placeholder got it refused
	// (CodeSecretElsewhere, CodeSecretMisplaced).
	Secret string

	profile *Profile
}

// Verdict returns "allow" or "deny".
func (d *Decision) Verdict() string {
	if d.Allow {
		return "allow"
	}
	return "deny"
}

// ProfileRef returns the profile the decision was made under (nil for
// decisions without one).
func (d *Decision) ProfileRef() *Profile { return d.profile }

// Resolver resolves names; *net.Resolver satisfies it. Tests use a fake:
// nothing in the tests may query real DNS.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DefaultDNSTimeout bounds a lookup when Checker.DNSTimeout is zero.
const DefaultDNSTimeout = 5 * time.Second

// Checker decides requests. The zero value uses net.DefaultResolver; it is
// safe for concurrent use.
type Checker struct {
	// Resolver resolves names, once per decision (A and AAAA together).
	Resolver Resolver
	// DNSTimeout bounds a lookup; zero means DefaultDNSTimeout.
	DNSTimeout time.Duration
	// Approvals answers for hosts no rule matches under a profile in
	// approve mode; nil denies them all (approval_required).
	Approvals Approvals

	// Observe, when set, is called with every decision Decide and
	// DecideTarget return (metrics count them by profile and code).
	Observe func(d *Decision)

	// Self is sandboxd's own listeners, shared by every checker of the
	// process (the proxy's and /fetch's); a request that would reach one
	// is denied (denied_self), whatever allow_cidrs says. Nil: the checker
	// keeps a set of its own, which AddSelf fills.
	Self *Listeners

	mu  sync.Mutex
	own *Listeners
}

// listeners returns Self, or the checker's own set.
func (c *Checker) listeners() *Listeners {
	if c.Self != nil {
		return c.Self
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.own == nil {
		c.own = &Listeners{}
	}
	return c.own
}

// AddSelf records addresses sandboxd listens on (Listeners.Add). A request
// that would reach one of them is denied (no loops into sandboxd),
// whatever allow_cidrs says. An unspecified address (0.0.0.0, ::) stands
// for every local address at that port.
func (c *Checker) AddSelf(addrs ...netip.AddrPort) { c.listeners().Add(addrs...) }

// RemoveSelf forgets one AddSelf of each address.
func (c *Checker) RemoveSelf(addrs ...netip.AddrPort) { c.listeners().Remove(addrs...) }

// self returns the listener of sandboxd's that dialling a:port would
// reach, if any.
func (c *Checker) self(a netip.Addr, port uint16) (netip.AddrPort, bool) {
	return c.listeners().Reaches(netip.AddrPortFrom(a, port))
}

func (c *Checker) resolver() Resolver {
	if c.Resolver != nil {
		return c.Resolver
	}
	return net.DefaultResolver
}

// Decide judges one request under profile p. It never connects anywhere.
// It resolves the host at most once, and only when the rules allow it (or
// the profile is in report mode): IP literals, malformed hosts and names
// the rules deny are never looked up.
//
// The checks, in order: the method; the URL or authority (only http and
// https; no userinfo; hosts normalised; IP literals in every spelling
// recognised); names refused whatever they resolve to (localhost, metadata
// service names); an IP literal against sandboxd's own listeners (Self)
// and the always-denied ranges; deny rules, then allow rules (host, port,
// method), and in approve mode, for a host no rule matches, the approval
// (Approvals; approval.go); one lookup, every address checked the same
// way, any denied address denying the name as a whole (an approved host
// too); the address to dial (the first IPv4 answer, else the first
// answer).
func (c *Checker) Decide(ctx context.Context, p *Profile, req Request) Decision {
	d := c.decideRequest(ctx, p, req)
	if c.Observe != nil {
		c.Observe(&d)
	}
	return d
}

func (c *Checker) decideRequest(ctx context.Context, p *Profile, req Request) Decision {
	d := Decision{Client: req.Client, Method: req.Method, profile: p}
	if p == nil || p.compiled == nil {
		return d.deny(CodeNoProfile, "", "no compiled egress profile applies to this client; nothing is allowed")
	}
	d.Profile, d.ProfileVersion, d.Mode = p.Name, p.Version, p.Mode
	if !validMethod(req.Method) {
		return d.deny(CodeBadMethod, "", fmt.Sprintf("method %q is not an HTTP method token", req.Method))
	}
	t, err := parseTarget(req)
	if err != nil {
		return d.denyParse(err)
	}
	return c.decide(ctx, p, d, t, req)
}

// parseTarget normalises the target of req: an authority for CONNECT, an
// absolute URL otherwise.
func parseTarget(req Request) (hostport.Target, error) {
	if req.Method == http.MethodConnect {
		hp, err := hostport.ParseAuthority(req.Target)
		return hostport.Target{HostPort: hp}, err
	}
	return hostport.ParseURL(req.Target)
}

// DecideTarget is Decide for a target already normalised by hostport (a
// CONNECT target has an empty Scheme).
func (c *Checker) DecideTarget(ctx context.Context, p *Profile, method string, t hostport.Target, client string) Decision {
	d := c.decideTarget(ctx, p, method, t, client)
	if c.Observe != nil {
		c.Observe(&d)
	}
	return d
}

func (c *Checker) decideTarget(ctx context.Context, p *Profile, method string, t hostport.Target, client string) Decision {
	d := Decision{Client: client, Method: method, profile: p}
	if p == nil || p.compiled == nil {
		return d.deny(CodeNoProfile, "", "no compiled egress profile applies to this client; nothing is allowed")
	}
	d.Profile, d.ProfileVersion, d.Mode = p.Name, p.Version, p.Mode
	if !validMethod(method) {
		return d.deny(CodeBadMethod, "", fmt.Sprintf("method %q is not an HTTP method token", method))
	}
	return c.decide(ctx, p, d, t, Request{Method: method, Client: client})
}

func (c *Checker) decide(ctx context.Context, p *Profile, d Decision, t hostport.Target, req Request) Decision {
	d.Scheme, d.Host, d.Port = t.Scheme, t.Host, t.Port
	d.HostHeader = t.HostHeader()
	if t.Scheme == "" {
		d.HostHeader = t.Authority()
	}
	comp := p.compiled

	if !t.IsIP() {
		if why, bad := netpolicy.DeniedName(t.Host); bad {
			return d.deny(CodeDeniedName, "", fmt.Sprintf("host %s is refused by name (%s), whatever it resolves to", t.Host, why))
		}
	}
	if t.IsIP() {
		v := netpolicy.Check(t.IP, comp.cidrs)
		d.Addresses = []netip.Addr{v.Addr}
		if own, ok := c.self(v.Addr, t.Port); ok {
			return d.deny(CodeDeniedSelf, "", selfReason(netip.AddrPortFrom(v.Addr, t.Port), own))
		}
		if v.Denied {
			return d.deny(CodeDeniedAddress, "", v.Reason())
		}
	}

	rv := c.rules(ctx, p, &d, t, req)
	code, ruleID, reason := rv.Code, rv.Rule, rv.Reason
	d.Rule = ruleID
	if code != CodeAllowed {
		if p.Mode != ModeReport {
			return d.deny(code, ruleID, reason)
		}
		d.WouldDeny, d.Code, d.Reason = true, code, "report mode: allowed, but enforce would deny: "+reason
	}

	if !t.IsIP() {
		addrs, code, err := c.lookup(ctx, t.Host)
		if err != nil {
			return d.deny(code, d.Rule, err.Error())
		}
		d.Addresses = addrs
		for _, a := range addrs {
			if own, ok := c.self(a, t.Port); ok {
				return d.deny(CodeDeniedSelf, d.Rule, fmt.Sprintf("%s resolved to %s; %s", t.Host, joinAddrs(addrs), selfReason(netip.AddrPortFrom(a, t.Port), own)))
			}
			v := netpolicy.Check(a, comp.cidrs)
			if v.Denied {
				msg := fmt.Sprintf("%s resolved to %s; %s", t.Host, joinAddrs(addrs), v.Reason())
				if len(addrs) > 1 {
					msg += "; a name with any denied address is denied as a whole"
				}
				return d.deny(CodeDeniedAddress, d.Rule, msg)
			}
		}
	}

	d.Allow = true
	d.Dial = netip.AddrPortFrom(pickAddr(d.Addresses), t.Port)
	if !d.WouldDeny {
		d.Code = CodeAllowed
		d.Reason = reason + "; dialling " + d.Dial.String()
	}
	return d
}

// selfReason says that dst reaches sandboxd's own listener own.
func selfReason(dst, own netip.AddrPort) string {
	how := "is"
	if dst != own {
		how = "reaches"
	}
	return fmt.Sprintf("%s %s sandboxd's own listener %s (its API and metrics, or its egress proxy): a request must not loop back into sandboxd, whatever the profile allows", dst, how, own)
}

func (d Decision) deny(code Code, rule, reason string) Decision {
	d.Allow, d.WouldDeny, d.Code, d.Rule, d.Reason = false, false, code, rule, reason
	d.Dial = netip.AddrPort{}
	return d
}

func (d Decision) denyParse(err error) Decision {
	code := CodeBadURL
	var he *hostport.Error
	if errors.As(err, &he) {
		switch he.Kind {
		case hostport.KindScheme:
			code = CodeScheme
		case hostport.KindUserinfo:
			code = CodeUserinfo
		case hostport.KindHost:
			code = CodeBadHost
		case hostport.KindPort:
			code = CodeBadPort
		}
	}
	return d.deny(code, "", err.Error())
}

// lookup resolves host once, A and AAAA, within the DNS timeout.
func (c *Checker) lookup(ctx context.Context, host string) ([]netip.Addr, Code, error) {
	timeout := c.DNSTimeout
	if timeout <= 0 {
		timeout = DefaultDNSTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	raw, err := c.resolver().LookupNetIP(ctx, "ip", host)
	if err != nil {
		var de *net.DNSError
		if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &de) && de.IsTimeout) {
			return nil, CodeResolveTimeout, fmt.Errorf("looking up %s timed out after %s; the request fails closed", host, timeout)
		}
		return nil, CodeResolve, fmt.Errorf("looking up %s failed: %v", host, err)
	}
	var addrs []netip.Addr
	for _, a := range raw {
		a = a.Unmap().WithZone("")
		if a.IsValid() && !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, CodeResolve, fmt.Errorf("%s has no A or AAAA records", host)
	}
	return addrs, "", nil
}

// pickAddr returns the first IPv4 address, else the first address.
func pickAddr(addrs []netip.Addr) netip.Addr {
	for _, a := range addrs {
		if a.Is4() {
			return a
		}
	}
	return addrs[0]
}

func joinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// RuleVerdict is what a profile's rules say of a request on their own:
// deny rules, then allow rules, and in approve mode, for a host no rule
// matches, the host's approval. It needs no name lookup.
type RuleVerdict struct {
	// Code is CodeAllowed or why the rules deny (deny_rule, no_rule,
	// port_not_allowed, method_not_allowed, approval_required, ...).
	Code Code
	// Rule names the deciding rule (allow[0]:name, deny[1],
	// approval:ID), if any.
	Rule string
	// Pattern is the host pattern of Rule that matched the host
	// ("*.wikipedia.org"), if a rule matched it.
	Pattern string
	// Reason says the same in words.
	Reason string
}

// Allow reports whether the rules allow the request.
func (v RuleVerdict) Allow() bool { return v.Code == CodeAllowed }

// rules applies p's rules to the normalised target, and in approve mode
// asks for the approval of a host no rule matches (which sets
// d.ApprovalID).
func (c *Checker) rules(ctx context.Context, p *Profile, d *Decision, t hostport.Target, req Request) RuleVerdict {
	v := p.compiled.judge(t.Host, t.IsIP(), t.Port, d.Method)
	if v.Code == CodeNoRule && p.Mode == ModeApprove {
		v.Code, v.Rule, v.Reason = c.approval(ctx, p, d, t, req, v.Reason)
	}
	return v
}

// judge applies the rules to a normalised host, port and method: deny
// rules first (deny wins), then allow rules. It returns CodeAllowed or why
// not, with the deciding rule, the pattern that matched and a reason.
func (c *compiled) judge(host string, isIP bool, port uint16, method string) RuleVerdict {
	for _, r := range c.deny {
		pat, ok := r.matchHost(host, isIP)
		if ok && r.matchPort(port) && r.matchMethod(method) {
			return RuleVerdict{CodeDenyRule, r.id, pat, fmt.Sprintf("host %s matches deny rule %s (pattern %s); deny rules win over allow rules", host, r.id, pat)}
		}
	}
	var portMiss, methodMiss *rule
	var portPat, methodPat string
	for i := range c.allow {
		r := &c.allow[i]
		pat, ok := r.matchHost(host, isIP)
		if !ok {
			continue
		}
		switch {
		case !r.matchPort(port):
			if portMiss == nil {
				portMiss, portPat = r, pat
			}
		case !r.matchMethod(method):
			if methodMiss == nil {
				methodMiss, methodPat = r, pat
			}
		default:
			return RuleVerdict{CodeAllowed, r.id, pat, fmt.Sprintf("%s %s port %d matches allow rule %s (pattern %s)", method, host, port, r.id, pat)}
		}
	}
	switch {
	case methodMiss != nil:
		msg := fmt.Sprintf("method %s is not allowed to %s port %d: rule %s allows %s", method, host, port, methodMiss.id, strings.Join(methodMiss.methods, ", "))
		if method == http.MethodConnect {
			msg += " (add CONNECT to the rule's methods to allow HTTPS tunnels)"
		}
		return RuleVerdict{CodeMethod, methodMiss.id, methodPat, msg}
	case portMiss != nil:
		return RuleVerdict{CodePort, portMiss.id, portPat, fmt.Sprintf("port %d is not allowed for %s: rule %s allows ports %s", port, host, portMiss.id, portsText(portMiss.ports))}
	case isIP:
		return RuleVerdict{Code: CodeNoRule, Reason: fmt.Sprintf("%s is an IP address; rules match host names only, so no allow rule matches it", host)}
	}
	return RuleVerdict{Code: CodeNoRule, Reason: fmt.Sprintf("host %s matches no allow rule", host)}
}

func (r *rule) matchHost(host string, isIP bool) (string, bool) {
	if isIP {
		return "", false
	}
	for _, p := range r.patterns {
		if p.Match(host) {
			return p.String(), true
		}
	}
	return "", false
}

func (r *rule) matchPort(port uint16) bool { return r.ports == nil || slices.Contains(r.ports, port) }

func (r *rule) matchMethod(m string) bool { return r.methods == nil || slices.Contains(r.methods, m) }

func portsText(ports []uint16) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ", ")
}

// validMethod reports whether m is an HTTP token of at most 32 bytes.
func validMethod(m string) bool {
	if m == "" || len(m) > 32 {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// Refuse returns a denial of req under p (which may be nil) with code and
// reason, filled in as far as req parses, for the log line of a request
// refused before any decision (an unknown client, a rate limit). It never
// resolves anything.
func Refuse(p *Profile, req Request, code Code, reason string) Decision {
	d := Decision{Client: req.Client, Method: req.Method, profile: p}
	if p != nil {
		d.Profile, d.ProfileVersion, d.Mode = p.Name, p.Version, p.Mode
	}
	if req.Method == http.MethodConnect {
		if hp, err := hostport.ParseAuthority(req.Target); err == nil {
			d.Host, d.Port = hp.Host, hp.Port
		}
	} else if t, err := hostport.ParseURL(req.Target); err == nil {
		d.Scheme, d.Host, d.Port = t.Scheme, t.Host, t.Port
	}
	return d.deny(code, "", reason)
}
