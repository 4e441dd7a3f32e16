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
	"strconv"
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
// it as read-only afterwards. The JSON names are what Version hashes:
// renaming one changes every profile's version.
type Profile struct {
	Name        string `yaml:"name" json:"name"`
	Description string `yaml:"description" json:"description"`
	Mode        Mode   `yaml:"mode" json:"mode"`
	Allow       []Rule `yaml:"allow" json:"allow"`
	// Deny rules win over allow rules.
	Deny []Rule `yaml:"deny" json:"deny"`
	// AllowCIDRs open always-denied address ranges (netpolicy.Ranges) that
	// they contain; a metadata address only by naming exactly it (/32,
	// /128). They do not allow any host: rules still must.
	AllowCIDRs []string `yaml:"allow_cidrs" json:"allow_cidrs"`
	// MaxResponseBytes caps a response body (and the bytes down a tunnel).
	MaxResponseBytes int64 `yaml:"max_response_bytes" json:"max_response_bytes"`
	// MaxRequestBytes caps a request body (and the bytes up a tunnel).
	MaxRequestBytes int64 `yaml:"max_request_bytes" json:"max_request_bytes"`
	// ConnectTimeout bounds the TCP connect to the checked address.
	ConnectTimeout time.Duration `yaml:"connect_timeout" json:"connect_timeout_ns"`
	// TotalTimeout bounds a request from its decision to its last byte,
	// and the lifetime of a tunnel.
	TotalTimeout time.Duration `yaml:"total_timeout" json:"total_timeout_ns"`
	// RequestsPerMinute caps requests (and tunnels) per client.
	RequestsPerMinute int `yaml:"requests_per_minute" json:"requests_per_minute"`
	// Redact adds secret patterns to the built-in ones for what POST /fetch
	// returns under this profile (redact.Rule: type, keywords, regex).
	Redact []redact.Rule `yaml:"redact" json:"redact"`
	// CaptureRetentionDays is how long a fetch's capture is kept; 0 keeps
	// it until it is erased.
	CaptureRetentionDays int64 `yaml:"capture_retention_days" json:"capture_retention_days"`
	// Render is how POST /fetch renders pages in a browser sandbox under
	// this profile (render: true).
	Render Render `yaml:"render" json:"render"`

	// Version is the sha256 (hex) of the normalised profile; set by Compile.
	Version string `yaml:"-" json:"-"`
	// Source is the file the profile came from; set by the loader.
	Source string `yaml:"-" json:"-"`

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

// Render is an egress profile's settings for rendered fetches: the page
// loads in headless Chromium in a browser sandbox whose every request goes
// through the egress proxy under the profile.
type Render struct {
	// Hosts are rendered when a request does not say (no render field):
	// exact names or "*.domain", as in rules. render: false still wins.
	Hosts []string `yaml:"hosts" json:"hosts"`
	// Timeout is a render's wall time, from the sandbox's start to the
	// page being read.
	Timeout time.Duration `yaml:"timeout" json:"timeout_ns"`
	// Runtime runs the browser sandbox: runc, or runsc (gVisor).
	Runtime string `yaml:"runtime" json:"runtime"`
	// MaxBytes caps the bytes the browser downloads for one render, every
	// request and tunnel together; 0: max_response_bytes.
	MaxBytes int64 `yaml:"max_bytes" json:"max_bytes"`

	patterns []hostmatch.Pattern
}

// Defaults and ranges of the render settings.
const (
	DefaultRenderTimeout = 20 * time.Second
	MinRenderTimeout     = 2 * time.Second
	MaxRenderTimeout     = 2 * time.Minute
)

// RendersByDefault reports whether a fetch of host is rendered when the
// request does not say.
func (p *Profile) RendersByDefault(host string) bool {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	for _, pat := range p.Render.patterns {
		if pat.Match(h) {
			return true
		}
	}
	return false
}

// RenderMaxBytes is the render's byte cap.
func (p *Profile) RenderMaxBytes() int64 {
	if p.Render.MaxBytes > 0 {
		return p.Render.MaxBytes
	}
	return p.MaxResponseBytes
}

// RenderTimeout is the render's wall time.
func (p *Profile) RenderTimeout() time.Duration {
	if p.Render.Timeout > 0 {
		return p.Render.Timeout
	}
	return DefaultRenderTimeout
}

func compileRender(r *Render, errs *FieldErrors) {
	r.patterns = nil
	for i, h := range r.Hosts {
		pat, err := hostmatch.Parse(h)
		if err != nil {
			errs.add(fmt.Sprintf("render.hosts[%d]", i), "%v", err)
			continue
		}
		r.patterns = append(r.patterns, pat)
	}
	if r.Timeout != 0 && (r.Timeout < MinRenderTimeout || r.Timeout > MaxRenderTimeout) {
		errs.add("render.timeout", "render.timeout is %s; allowed is %s to %s", ShortDuration(r.Timeout), ShortDuration(MinRenderTimeout), ShortDuration(MaxRenderTimeout))
	}
	switch r.Runtime {
	case "":
		r.Runtime = "runc"
	case "runc", "runsc":
	default:
		errs.add("render.runtime", "render.runtime %q is not known; use runc or runsc (gVisor)", r.Runtime)
	}
	if r.MaxBytes < 0 || r.MaxBytes > MaxResponseBytes {
		errs.add("render.max_bytes", "render.max_bytes is %d; allowed is 0 (max_response_bytes) to 1073741824 bytes (1 GiB)", r.MaxBytes)
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

// FieldErrors is every problem Compile found in a profile, in the order of
// its fields. errors.As finds its first *FieldError.
type FieldErrors []*FieldError

// Error returns the problems, one per line.
func (es FieldErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems, for errors.As.
func (es FieldErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// add records a problem.
func (es *FieldErrors) add(path, format string, args ...any) {
	*es = append(*es, fieldErr(path, format, args...))
}

// numberField is the allowed range of one numeric or duration field.
type numberField struct {
	path     string
	min, max int64
	// text is the range in words.
	text string
	get  func(*Profile) int64
}

// numberFields lists every numeric and duration field with its range, in
// file order.
var numberFields = []numberField{
	{"max_response_bytes", MinResponseBytes, MaxResponseBytes, "1 to 1073741824 bytes (1 GiB)", func(p *Profile) int64 { return p.MaxResponseBytes }},
	{"max_request_bytes", MinRequestBytes, MaxRequestBytes, "0 (no request bodies) to 1073741824 bytes (1 GiB)", func(p *Profile) int64 { return p.MaxRequestBytes }},
	{"connect_timeout", int64(MinConnectTimeout), int64(MaxConnectTimeout), "100ms to 1m", func(p *Profile) int64 { return int64(p.ConnectTimeout) }},
	{"total_timeout", int64(MinTotalTimeout), int64(MaxTotalTimeout), "1s to 1h", func(p *Profile) int64 { return int64(p.TotalTimeout) }},
	{"requests_per_minute", MinRequestsPerMinute, MaxRequestsPerMinute, "1 to 100000", func(p *Profile) int64 { return int64(p.RequestsPerMinute) }},
	{"capture_retention_days", 0, 3650, "0 (keep until erased) to 3650 days", func(p *Profile) int64 { return p.CaptureRetentionDays }},
}

// FieldRange returns the allowed range of a numeric or duration field of
// a profile in words ("1 to 1073741824 bytes (1 GiB)", "100ms to 1m"), by
// its YAML path without list indices ("max_response_bytes",
// "allow.ports"), or "" for a field that has none.
func FieldRange(path string) string {
	switch path {
	case "allow.ports", "deny.ports":
		return "1 to 65535"
	}
	for _, f := range numberFields {
		if f.path == path {
			return f.text
		}
	}
	return ""
}

// check records a problem when the field's value is out of its range.
func (f numberField) check(p *Profile, errs *FieldErrors) {
	v := f.get(p)
	if v >= f.min && v <= f.max {
		return
	}
	shown := strconv.FormatInt(v, 10)
	if strings.HasSuffix(f.path, "_timeout") {
		shown = ShortDuration(time.Duration(v))
	}
	errs.add(f.path, "%s is %s; allowed is %s", f.path, shown, f.text)
}

// ShortDuration writes d as in a profile: "1m" and "1h" rather than
// "1m0s" and "1h0m0s".
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
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
// sets Version and builds the matcher. Every problem is returned, as
// FieldErrors (errors.As finds the first *FieldError). Compile may be
// called again after p changes.
func (p *Profile) Compile() error {
	p.compiled = nil
	var errs FieldErrors
	switch {
	case p.Name == "":
		errs.add("name", "name is required")
	case !nameRe.MatchString(p.Name):
		errs.add("name", "name %q is not allowed; use 1 to 63 lowercase letters, digits and '-', starting with a letter or digit", p.Name)
	}
	if p.Mode == "" {
		p.Mode = ModeEnforce
	}
	if !slices.Contains(Modes, p.Mode) {
		errs.add("mode", "mode %q is not allowed; use enforce (deny what the rules do not allow), report (allow, but log what enforce would deny) or approve (hosts that match no rule need a person's approval)", p.Mode)
	}
	c := &compiled{
		allow: compileRules("allow", p.Allow, true, &errs),
		deny:  compileRules("deny", p.Deny, false, &errs),
	}
	if p.Name == NoneName && len(p.Allow) > 0 {
		errs.add("allow", "profile %q must deny everything: no allow rules (exec profiles use it for \"no network\"); give a profile that allows hosts another name", NoneName)
	}
	if p.Name == NoneName && p.Mode != ModeEnforce {
		errs.add("mode", "profile %q must deny everything: mode enforce (exec profiles use it for \"no network\"); give a profile in %s mode another name", NoneName, p.Mode)
	}
	c.cidrs = compileCIDRs(p.AllowCIDRs, &errs)
	for i, r := range p.Redact {
		if err := r.Validate(); err != nil {
			errs.add(fmt.Sprintf("redact[%d]", i), "%v", err)
		}
	}
	for _, f := range numberFields {
		f.check(p, &errs)
	}
	compileRender(&p.Render, &errs)
	if p.TotalTimeout < p.ConnectTimeout {
		errs.add("total_timeout", "total_timeout %s is shorter than connect_timeout %s; the total includes the connect", ShortDuration(p.TotalTimeout), ShortDuration(p.ConnectTimeout))
	}
	if len(errs) > 0 {
		return errs
	}
	p.Version = version(p)
	p.compiled = c
	return nil
}

// compileCIDRs parses and normalises allow_cidrs, recording every entry
// that is not a usable network.
func compileCIDRs(list []string, errs *FieldErrors) []netip.Prefix {
	var out []netip.Prefix
	for i, s := range list {
		path := fmt.Sprintf("allow_cidrs[%d]", i)
		pfx, err := netip.ParsePrefix(s)
		switch {
		case err != nil:
			if a, aerr := netip.ParseAddr(s); aerr == nil {
				errs.add(path, "%q is an address, not a CIDR; write %s", s, netip.PrefixFrom(a, a.BitLen()))
			} else {
				errs.add(path, "%q is not a CIDR; write a network such as 10.1.2.0/24 or fd00:1::/64", s)
			}
		case pfx.Addr().Zone() != "":
			errs.add(path, "%q has an IPv6 zone; CIDRs have none", s)
		case pfx.Masked() != pfx:
			errs.add(path, "%q has bits set past the prefix length; did you mean %s?", s, pfx.Masked())
		case pfx.Bits() == 0:
			errs.add(path, "%q opens every address; name only the ranges the profile needs", s)
		case pfx.Addr().Is4In6():
			errs.add(path, "%q is an IPv4-mapped IPv6 range; write the IPv4 range instead", s)
		default:
			if slices.Contains(out, pfx) {
				errs.add(path, "%s is listed twice (also allow_cidrs[%d])", pfx, cidrIndex(list, pfx))
				continue
			}
			out = append(out, pfx)
			list[i] = pfx.String()
		}
	}
	return out
}

// cidrIndex returns the index of the first entry of list that is pfx.
func cidrIndex(list []string, pfx netip.Prefix) int {
	for i, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil && p == pfx {
			return i
		}
	}
	return -1
}

// compileRules compiles the allow or deny rules (kind), recording every
// problem (the result is of use only when there are none).
func compileRules(kind string, rules []Rule, allow bool, errs *FieldErrors) []rule {
	var out []rule
	names := map[string]string{}
	for i := range rules {
		out = append(out, compileRule(fmt.Sprintf("%s[%d]", kind, i), &rules[i], allow, names, errs))
	}
	return out
}

// compileRule compiles one rule at path, recording its problems. names
// maps the rule names used so far to their rule's path.
func compileRule(path string, r *Rule, allow bool, names map[string]string, errs *FieldErrors) rule {
	cr := rule{id: path}
	if r.Name != "" {
		switch prev, dup := names[r.Name]; {
		case !nameRe.MatchString(r.Name):
			errs.add(path+".name", "rule name %q is not allowed; use 1 to 63 lowercase letters, digits and '-'", r.Name)
		case dup:
			errs.add(path+".name", "rule name %q is already used by %s; rule names must be unique", r.Name, prev)
		default:
			names[r.Name] = path
		}
		cr.id += ":" + r.Name
	}
	cr.patterns = compileHosts(path, r, errs)
	cr.ports = compilePorts(path, r, allow, errs)
	cr.methods = compileMethods(path, r, allow, errs)
	return cr
}

// compileHosts parses and normalises a rule's host patterns.
func compileHosts(path string, r *Rule, errs *FieldErrors) []hostmatch.Pattern {
	if len(r.Hosts) == 0 {
		errs.add(path+".hosts", "%s has no hosts; list the host names or \"*.domain\" wildcards it applies to", path)
		return nil
	}
	var out []hostmatch.Pattern
	seen := map[string]int{}
	for j, h := range r.Hosts {
		hp := fmt.Sprintf("%s.hosts[%d]", path, j)
		pat, err := hostmatch.Parse(h)
		if err != nil {
			errs.add(hp, "%v", err)
			continue
		}
		if k, dup := seen[pat.String()]; dup {
			errs.add(hp, "host pattern %q is listed twice (also hosts[%d])", pat, k)
			continue
		}
		seen[pat.String()] = j
		r.Hosts[j] = pat.String()
		out = append(out, pat)
	}
	return out
}

// compilePorts fills in the default ports of an allow rule and checks them.
func compilePorts(path string, r *Rule, allow bool, errs *FieldErrors) []uint16 {
	if r.Ports == nil && allow {
		r.Ports = slices.Clone(DefaultAllowPorts)
	}
	if r.Ports != nil && len(r.Ports) == 0 {
		errs.add(path+".ports", "ports is an empty list; remove the key for the default (%s) or list ports", defaultPortsText(allow))
	}
	var out []uint16
	for j, port := range r.Ports {
		pp := fmt.Sprintf("%s.ports[%d]", path, j)
		switch {
		case port < 1 || port > 65535:
			errs.add(pp, "port %d is not a TCP port; allowed is 1 to 65535", port)
		case slices.Contains(r.Ports[:j], port):
			errs.add(pp, "port %d is listed twice", port)
		default:
			out = append(out, uint16(port))
		}
	}
	return out
}

// compileMethods fills in the default methods of an allow rule and checks
// them: upper case, one of Methods, each once.
func compileMethods(path string, r *Rule, allow bool, errs *FieldErrors) []string {
	if r.Methods == nil && allow {
		r.Methods = slices.Clone(DefaultAllowMethods)
	}
	if r.Methods != nil && len(r.Methods) == 0 {
		errs.add(path+".methods", "methods is an empty list; remove the key for the default (%s) or list methods", defaultMethodsText(allow))
	}
	var out []string
	for j, m := range r.Methods {
		mp := fmt.Sprintf("%s.methods[%d]", path, j)
		switch {
		case !slices.Contains(Methods, m):
			hint := ""
			if slices.Contains(Methods, strings.ToUpper(m)) {
				hint = fmt.Sprintf(" (methods are upper case: %s)", strings.ToUpper(m))
			}
			errs.add(mp, "method %q is not allowed%s; use %s", m, hint, strings.Join(Methods, ", "))
		case slices.Contains(r.Methods[:j], m):
			errs.add(mp, "method %s is listed twice", m)
		default:
			out = append(out, m)
		}
	}
	return out
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

// version is the sha256 (hex) of the profile's values after defaults and
// normalisation, marshalled as JSON. YAML comments, layout, key order and
// spelling of equivalent values (upper-case hosts, a trailing dot) do not
// change it; any effective value does.
func version(p *Profile) string {
	// Render settings at their defaults are left out, so that a profile
	// that does not use them keeps the version it had before they existed.
	v := struct {
		*Profile
		Render *Render `json:"render,omitempty"`
	}{Profile: p}
	if r := p.Render; len(r.Hosts) > 0 || r.Timeout != 0 || (r.Runtime != "" && r.Runtime != "runc") || r.MaxBytes != 0 {
		v.Render = &p.Render
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic("egress: marshalling profile for its version: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
