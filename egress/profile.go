// Package egress decides where sandbox and browse traffic may go. Security
// teams write egress profiles (profiles/egress/*.yaml); Checker.Decide
// applies one to a request (a method and a URL, or a CONNECT host:port) and
// returns a Decision that names the one checked address to dial; Dialer
// dials exactly that address. The forward proxy (egress/proxy) and the
// browse pipeline both go through Decide and Dialer, so both paths share one
// set of rules.
//
// Sub-packages: hostport normalises URLs and authorities, hostmatch parses
// and matches host patterns, netpolicy classifies addresses and names that
// are always denied, proxy is the forward proxy.
package egress

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/egress/hostmatch"
	"github.com/sandboxd/sandboxd/redact"
)

// Mode says what a profile does with a request its rules deny.
type Mode string

const (
	// ModeEnforce denies it.
	ModeEnforce Mode = "enforce"
	// ModeReport allows it and logs that enforce would have denied it, for
	// rolling out a profile. Requests that are unsafe whatever the rules
	// say (always-denied addresses and names, the proxy's own address,
	// malformed requests) are denied in report mode too.
	ModeReport Mode = "report"
	// ModeApprove denies a request to a host that matches no rule with the
	// code approval_required and files an approval request (Checker's
	// Approvals), so that a person can approve the host; an approved host
	// is allowed on the ports and methods of ApprovalPorts and
	// ApprovalMethods until the approval expires. Nothing is approved
	// without a person's decision.
	ModeApprove Mode = "approve"
)

// Modes lists the allowed values of mode.
var Modes = []Mode{ModeEnforce, ModeReport, ModeApprove}

// Rule is one allow or deny rule.
type Rule struct {
	// Name is optional; decisions name the rule as allow[i] or
	// allow[i]:name.
	Name string `yaml:"name" json:"name,omitempty"`
	// Hosts are exact names ("deb.debian.org") or wildcards
	// ("*.debian.org", subdomains only). Required.
	Hosts []string `yaml:"hosts" json:"hosts"`
	// Ports the rule applies to. Allow rules default to 80 and 443; deny
	// rules to every port.
	Ports []int `yaml:"ports" json:"ports,omitempty"`
	// Methods the rule applies to, upper case. Allow rules default to GET
	// and HEAD; deny rules to every method. CONNECT opens an HTTPS tunnel,
	// inside which the method cannot be seen.
	Methods []string `yaml:"methods" json:"methods,omitempty"`
}

// Profile is one egress profile. Build it with Defaults, fill it (the
// profiles loader decodes YAML into it) and call Compile before use; treat
// it as read-only afterwards.
type Profile struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	Mode        Mode   `yaml:"mode"`
	Allow       []Rule `yaml:"allow"`
	// Deny rules win over allow rules.
	Deny []Rule `yaml:"deny"`
	// AllowCIDRs open always-denied address ranges (netpolicy.Ranges) that
	// they contain; a metadata address only by naming exactly it (/32,
	// /128). They do not allow any host: rules still must.
	AllowCIDRs []string `yaml:"allow_cidrs"`
	// MaxResponseBytes caps a response body (and the bytes down a tunnel).
	MaxResponseBytes int64 `yaml:"max_response_bytes"`
	// MaxRequestBytes caps a request body (and the bytes up a tunnel).
	MaxRequestBytes int64 `yaml:"max_request_bytes"`
	// ConnectTimeout bounds the TCP connect to the checked address.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// TotalTimeout bounds a request from its decision to its last byte,
	// and the lifetime of a tunnel.
	TotalTimeout time.Duration `yaml:"total_timeout"`
	// RequestsPerMinute caps requests (and tunnels) per client.
	RequestsPerMinute int `yaml:"requests_per_minute"`
	// Redact adds secret patterns to the built-in ones for what POST /fetch
	// returns under this profile (redact.Rule: type, keywords, regex).
	Redact []redact.Rule `yaml:"redact"`
	// CaptureRetentionDays is how long a fetch's capture is kept; 0 keeps
	// it until it is erased.
	CaptureRetentionDays int64 `yaml:"capture_retention_days"`

	// Version is the sha256 (hex) of the normalised profile; set by Compile.
	Version string `yaml:"-"`
	// Source is the file the profile came from; set by the loader.
	Source string `yaml:"-"`

	compiled *compiled
}

// Defaults of the optional fields.
const (
	DefaultMaxResponseBytes  = 10 << 20
	DefaultMaxRequestBytes   = 1 << 20
	DefaultConnectTimeout    = 5 * time.Second
	DefaultTotalTimeout      = 30 * time.Second
	DefaultRequestsPerMinute = 60
)

// DefaultAllowPorts and DefaultAllowMethods apply to allow rules that list none.
var (
	DefaultAllowPorts   = []int{80, 443}
	DefaultAllowMethods = []string{"GET", "HEAD"}
)

// Methods lists the methods a rule may name.
var Methods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT"}

// Ranges of the numeric fields, inclusive.
const (
	MinResponseBytes, MaxResponseBytes         = 1, 1 << 30
	MinRequestBytes, MaxRequestBytes           = 0, 1 << 30
	MinConnectTimeout, MaxConnectTimeout       = 100 * time.Millisecond, time.Minute
	MinTotalTimeout, MaxTotalTimeout           = time.Second, time.Hour
	MinRequestsPerMinute, MaxRequestsPerMinute = 1, 100_000
)

// Defaults returns a profile holding the default of every optional field
// and no rules (it denies everything).
func Defaults() Profile {
	return Profile{
		Mode:                 ModeEnforce,
		MaxResponseBytes:     DefaultMaxResponseBytes,
		MaxRequestBytes:      DefaultMaxRequestBytes,
		ConnectTimeout:       DefaultConnectTimeout,
		TotalTimeout:         DefaultTotalTimeout,
		RequestsPerMinute:    DefaultRequestsPerMinute,
		CaptureRetentionDays: DefaultCaptureRetentionDays,
	}
}

// DefaultCaptureRetentionDays is how long fetch captures are kept when a
// profile does not say.
const DefaultCaptureRetentionDays = 30

// None returns the compiled built-in profile "none": no rules, deny
// everything. Exec profiles use it by default.
func None() *Profile {
	p := Defaults()
	p.Name = NoneName
	p.Description = "No network: every request is denied."
	if err := p.Compile(); err != nil {
		panic("egress: built-in profile none: " + err.Error())
	}
	return &p
}

// NoneName is the name of the profile that denies everything.
const NoneName = "none"

// FieldError is a problem with one field of a profile. Path is the YAML
// path ("allow[1].hosts[0]"), so that the loader can point at its line.
type FieldError struct {
	Path string
	Msg  string
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

func fieldErr(path, format string, args ...any) *FieldError {
	return &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)}
}

var nameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// compiled is the matcher built from a profile.
type compiled struct {
	allow, deny []rule
	cidrs       []netip.Prefix
}

type rule struct {
	id       string // allow[0] or allow[0]:name
	patterns []hostmatch.Pattern
	ports    []uint16 // nil: every port
	methods  []string // nil: every method
}

// Compile validates p, fills in rule defaults, normalises hosts and CIDRs,
// sets Version and builds the matcher. The first problem is returned as a
// *FieldError. Compile may be called again after p changes.
func (p *Profile) Compile() error {
	p.compiled = nil
	switch {
	case p.Name == "":
		return fieldErr("name", "name is required")
	case !nameRe.MatchString(p.Name):
		return fieldErr("name", "name %q is not allowed; use 1 to 63 lowercase letters, digits and '-', starting with a letter or digit", p.Name)
	}
	if p.Mode == "" {
		p.Mode = ModeEnforce
	}
	if !slices.Contains(Modes, p.Mode) {
		return fieldErr("mode", "mode %q is not allowed; use enforce (deny what the rules do not allow), report (allow, but log what enforce would deny) or approve (hosts that match no rule need a person's approval)", p.Mode)
	}
	c := &compiled{}
	var err error
	if c.allow, err = compileRules("allow", p.Allow, true); err != nil {
		return err
	}
	if c.deny, err = compileRules("deny", p.Deny, false); err != nil {
		return err
	}
	if p.Name == NoneName && len(p.Allow) > 0 {
		return fieldErr("allow", "profile %q must deny everything: no allow rules (exec profiles use it for \"no network\"); give a profile that allows hosts another name", NoneName)
	}
	if p.Name == NoneName && p.Mode != ModeEnforce {
		return fieldErr("mode", "profile %q must deny everything: mode enforce (exec profiles use it for \"no network\"); give a profile in %s mode another name", NoneName, p.Mode)
	}
	for i, s := range p.AllowCIDRs {
		path := fmt.Sprintf("allow_cidrs[%d]", i)
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			if a, aerr := netip.ParseAddr(s); aerr == nil {
				return fieldErr(path, "%q is an address, not a CIDR; write %s", s, netip.PrefixFrom(a, a.BitLen()))
			}
			return fieldErr(path, "%q is not a CIDR; write a network such as 10.1.2.0/24 or fd00:1::/64", s)
		}
		if pfx.Addr().Zone() != "" {
			return fieldErr(path, "%q has an IPv6 zone; CIDRs have none", s)
		}
		if pfx.Masked() != pfx {
			return fieldErr(path, "%q has bits set past the prefix length; did you mean %s?", s, pfx.Masked())
		}
		if pfx.Bits() == 0 {
			return fieldErr(path, "%q opens every address; name only the ranges the profile needs", s)
		}
		if pfx.Addr().Is4In6() {
			return fieldErr(path, "%q is an IPv4-mapped IPv6 range; write the IPv4 range instead", s)
		}
		for j, prev := range c.cidrs {
			if prev == pfx {
				return fieldErr(path, "%s is listed twice (also allow_cidrs[%d])", pfx, j)
			}
		}
		c.cidrs = append(c.cidrs, pfx)
		p.AllowCIDRs[i] = pfx.String()
	}
	for i, r := range p.Redact {
		if err := r.Validate(); err != nil {
			return fieldErr(fmt.Sprintf("redact[%d]", i), "%v", err)
		}
	}
	if v := p.CaptureRetentionDays; v < 0 || v > 3650 {
		return fieldErr("capture_retention_days", "capture_retention_days is %d; allowed is 0 (keep until erased) to 3650", v)
	}
	if v := p.MaxResponseBytes; v < MinResponseBytes || v > MaxResponseBytes {
		return fieldErr("max_response_bytes", "max_response_bytes is %d; allowed is %d to %d (1 GiB)", v, MinResponseBytes, MaxResponseBytes)
	}
	if v := p.MaxRequestBytes; v < MinRequestBytes || v > MaxRequestBytes {
		return fieldErr("max_request_bytes", "max_request_bytes is %d; allowed is %d (no request bodies) to %d (1 GiB)", v, MinRequestBytes, MaxRequestBytes)
	}
	if v := p.ConnectTimeout; v < MinConnectTimeout || v > MaxConnectTimeout {
		return fieldErr("connect_timeout", "connect_timeout is %s; allowed is %s to %s", v, MinConnectTimeout, MaxConnectTimeout)
	}
	if v := p.TotalTimeout; v < MinTotalTimeout || v > MaxTotalTimeout {
		return fieldErr("total_timeout", "total_timeout is %s; allowed is %s to %s", v, MinTotalTimeout, MaxTotalTimeout)
	}
	if p.TotalTimeout < p.ConnectTimeout {
		return fieldErr("total_timeout", "total_timeout %s is shorter than connect_timeout %s; the total includes the connect", p.TotalTimeout, p.ConnectTimeout)
	}
	if v := p.RequestsPerMinute; v < MinRequestsPerMinute || v > MaxRequestsPerMinute {
		return fieldErr("requests_per_minute", "requests_per_minute is %d; allowed is %d to %d", v, MinRequestsPerMinute, MaxRequestsPerMinute)
	}
	p.Version = version(p)
	p.compiled = c
	return nil
}

func compileRules(kind string, rules []Rule, allow bool) ([]rule, error) {
	var out []rule
	names := map[string]string{}
	for i := range rules {
		r := &rules[i]
		path := fmt.Sprintf("%s[%d]", kind, i)
		cr := rule{id: path}
		if r.Name != "" {
			if !nameRe.MatchString(r.Name) {
				return nil, fieldErr(path+".name", "rule name %q is not allowed; use 1 to 63 lowercase letters, digits and '-'", r.Name)
			}
			if prev, dup := names[r.Name]; dup {
				return nil, fieldErr(path+".name", "rule name %q is already used by %s; rule names must be unique", r.Name, prev)
			}
			names[r.Name] = path
			cr.id += ":" + r.Name
		}
		if len(r.Hosts) == 0 {
			return nil, fieldErr(path+".hosts", "%s has no hosts; list the host names or \"*.domain\" wildcards it applies to", path)
		}
		seen := map[string]int{}
		for j, h := range r.Hosts {
			hp := fmt.Sprintf("%s.hosts[%d]", path, j)
			pat, err := hostmatch.Parse(h)
			if err != nil {
				return nil, fieldErr(hp, "%v", err)
			}
			if k, dup := seen[pat.String()]; dup {
				return nil, fieldErr(hp, "host pattern %q is listed twice (also hosts[%d])", pat, k)
			}
			seen[pat.String()] = j
			r.Hosts[j] = pat.String()
			cr.patterns = append(cr.patterns, pat)
		}
		if r.Ports == nil && allow {
			r.Ports = slices.Clone(DefaultAllowPorts)
		}
		if r.Ports != nil && len(r.Ports) == 0 {
			return nil, fieldErr(path+".ports", "ports is an empty list; remove the key for the default (%s) or list ports", defaultPortsText(allow))
		}
		for j, port := range r.Ports {
			if port < 1 || port > 65535 {
				return nil, fieldErr(fmt.Sprintf("%s.ports[%d]", path, j), "port %d is not a TCP port; allowed is 1 to 65535", port)
			}
			if slices.Contains(r.Ports[:j], port) {
				return nil, fieldErr(fmt.Sprintf("%s.ports[%d]", path, j), "port %d is listed twice", port)
			}
			cr.ports = append(cr.ports, uint16(port))
		}
		if r.Methods == nil && allow {
			r.Methods = slices.Clone(DefaultAllowMethods)
		}
		if r.Methods != nil && len(r.Methods) == 0 {
			return nil, fieldErr(path+".methods", "methods is an empty list; remove the key for the default (%s) or list methods", defaultMethodsText(allow))
		}
		for j, m := range r.Methods {
			mp := fmt.Sprintf("%s.methods[%d]", path, j)
			if !slices.Contains(Methods, m) {
				hint := ""
				if slices.Contains(Methods, strings.ToUpper(m)) {
					hint = fmt.Sprintf(" (methods are upper case: %s)", strings.ToUpper(m))
				}
				return nil, fieldErr(mp, "method %q is not allowed%s; use %s", m, hint, strings.Join(Methods, ", "))
			}
			if slices.Contains(r.Methods[:j], m) {
				return nil, fieldErr(mp, "method %s is listed twice", m)
			}
			cr.methods = append(cr.methods, m)
		}
		out = append(out, cr)
	}
	return out, nil
}

func defaultPortsText(allow bool) string {
	if allow {
		return "80, 443"
	}
	return "every port"
}

func defaultMethodsText(allow bool) string {
	if allow {
		return "GET, HEAD"
	}
	return "every method"
}

// Compiled reports whether Compile succeeded on p.
func (p *Profile) Compiled() bool { return p != nil && p.compiled != nil }

// profileCanon has exactly the fields of Profile (the conversion in version
// does not compile otherwise, so a new field cannot be left out of the
// version) with JSON names fixed here.
type profileCanon struct {
	Name                 string        `json:"name"`
	Description          string        `json:"description"`
	Mode                 Mode          `json:"mode"`
	Allow                []Rule        `json:"allow"`
	Deny                 []Rule        `json:"deny"`
	AllowCIDRs           []string      `json:"allow_cidrs"`
	MaxResponseBytes     int64         `json:"max_response_bytes"`
	MaxRequestBytes      int64         `json:"max_request_bytes"`
	ConnectTimeout       time.Duration `json:"connect_timeout_ns"`
	TotalTimeout         time.Duration `json:"total_timeout_ns"`
	RequestsPerMinute    int           `json:"requests_per_minute"`
	Redact               []redact.Rule `json:"redact"`
	CaptureRetentionDays int64         `json:"capture_retention_days"`
	Version              string        `json:"-"`
	Source               string        `json:"-"`
	compiled             *compiled
}

// version is the sha256 (hex) of the profile's values after defaults and
// normalisation, marshalled as JSON. YAML comments, layout, key order and
// spelling of equivalent values (upper-case hosts, a trailing dot) do not
// change it; any effective value does.
func version(p *Profile) string {
	c := profileCanon(*p)
	b, err := json.Marshal(c)
	if err != nil {
		panic("egress: marshalling profile for its version: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
