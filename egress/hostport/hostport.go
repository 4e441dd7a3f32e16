// Package hostport turns the URLs and CONNECT authorities a sandbox or the
// browse pipeline asks for into one normalised form, the only form that is
// matched against rules and dialled:
//
//   - only http and https URLs, always with an authority ("http://host/");
//   - no userinfo ("http://a@b/" is refused, never judged as either host);
//   - names lower-cased, one trailing dot removed, IDN mapped (UTS #46,
//     non-transitional, STD3 characters only) and converted to punycode;
//   - IPv4 in every spelling the C library accepts (2130706433, 0177.0.0.1,
//     0x7f.1, 127.1) recognised as an IP address, never a name, following
//     the WHATWG URL rule: a host whose last label is a number is an IPv4
//     address or invalid;
//   - IPv6 only in brackets and without zone ids;
//   - ports written as plain decimal numbers from 1 to 65535.
//
// Nothing here resolves names: that is the caller's job, once, on Host.
package hostport

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Kind says which part of a request target was refused.
type Kind string

const (
	KindURL      Kind = "url"      // not an absolute http(s) URL with an authority
	KindScheme   Kind = "scheme"   // a scheme other than http and https
	KindUserinfo Kind = "userinfo" // user:password@ in the authority
	KindHost     Kind = "host"     // an unusable host
	KindPort     Kind = "port"     // an unusable or missing port
)

// Error is a request target that cannot be used, and why.
type Error struct {
	Kind Kind
	// Input is the offending part, quoted for the log (may be cut short).
	Input string
	Msg   string
}

func (e *Error) Error() string {
	if e.Input == "" {
		return e.Msg
	}
	return fmt.Sprintf("%s: %s", quote(e.Input), e.Msg)
}

func errorf(kind Kind, input, format string, args ...any) *Error {
	return &Error{Kind: kind, Input: input, Msg: fmt.Sprintf(format, args...)}
}

// quote renders s for messages, cut to 100 bytes.
func quote(s string) string {
	if len(s) > 100 {
		s = s[:100] + "..."
	}
	return strconv.Quote(s)
}

// Limits of DNS names (RFC 1035), in bytes of the ASCII form.
const (
	MaxNameLen  = 253
	MaxLabelLen = 63
	// MaxURLLen caps the URLs ParseURL accepts.
	MaxURLLen = 8192
)

// HostPort is a normalised host and a port.
type HostPort struct {
	// Host is the normalised name ("xn--bcher-kva.example"), or the
	// canonical text of IP ("127.0.0.1", "::1", no brackets).
	Host string
	// IP is valid when the host is an IP literal.
	IP   netip.Addr
	Port uint16
}

// IsIP reports whether the host is an IP literal.
func (h HostPort) IsIP() bool { return h.IP.IsValid() }

// String returns Authority.
func (h HostPort) String() string { return h.Authority() }

// Authority returns "host:port" with brackets around an IPv6 host. It is
// what is matched, logged and sent as the Host header.
func (h HostPort) Authority() string {
	host := h.Host
	if h.IP.Is6() {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(int(h.Port))
}

// Target is a normalised absolute URL's scheme, host and port.
type Target struct {
	// Scheme is "http" or "https"; empty for a CONNECT authority.
	Scheme string
	HostPort
	// DefaultPort is true when the URL named no port.
	DefaultPort bool
}

// HostHeader returns the Host header for the target: the host, with the
// port only when the URL named a non-default one.
func (t Target) HostHeader() string {
	if t.DefaultPort {
		if t.IP.Is6() {
			return "[" + t.Host + "]"
		}
		return t.Host
	}
	return t.Authority()
}

// defaultPorts of the allowed schemes.
var defaultPorts = map[string]uint16{"http": 80, "https": 443}

// ParseURL parses an absolute http or https URL and normalises its host and
// port. It refuses, before any name is resolved: other schemes, URLs without
// "//authority", userinfo, backslashes, spaces and control characters
// anywhere in the URL, bad hosts and bad ports.
func ParseURL(raw string) (Target, error) {
	if len(raw) > MaxURLLen {
		return Target{}, errorf(KindURL, raw, "URL is %d bytes long; at most %d are accepted", len(raw), MaxURLLen)
	}
	if i := strings.IndexFunc(raw, badURLRune); i >= 0 {
		r, _ := utf8.DecodeRuneInString(raw[i:])
		return Target{}, errorf(KindURL, raw, "URL holds %s at byte %d; percent-encode it or remove it", runeName(r), i)
	}
	// Decide the scheme before url.Parse so that "file:", "gopher:" and
	// friends are refused as schemes whatever else is wrong with them.
	if scheme, _, ok := strings.Cut(raw, ":"); ok && validScheme(scheme) {
		if s := strings.ToLower(scheme); s != "http" && s != "https" {
			return Target{}, errorf(KindScheme, raw, "scheme %q is not allowed; only http and https are", s)
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if strings.Contains(err.Error(), "userinfo") {
			return Target{}, errorf(KindUserinfo, raw, "URL has user information before the host (user@host); it is never accepted")
		}
		return Target{}, errorf(KindURL, raw, "URL cannot be parsed: %v", err)
	}
	return FromURL(u)
}

// FromURL normalises a URL parsed by net/url (ParseURL calls it; so does a
// proxy, on the URL net/http parsed from the request line).
func FromURL(u *url.URL) (Target, error) {
	scheme := strings.ToLower(u.Scheme)
	switch {
	case scheme == "":
		return Target{}, errorf(KindURL, u.String(), "URL has no scheme; write an absolute URL such as https://example.com/")
	case scheme != "http" && scheme != "https":
		return Target{}, errorf(KindScheme, u.String(), "scheme %q is not allowed; only http and https are", scheme)
	case u.Opaque != "" || u.Host == "":
		return Target{}, errorf(KindURL, u.String(), "URL has no host; write it as %s://host/path", scheme)
	case u.User != nil:
		return Target{}, errorf(KindUserinfo, u.Redacted(), "URL has user information before the host (user@host); it is never accepted")
	}
	hp, explicit, err := split(u.Host, defaultPorts[scheme])
	if err != nil {
		return Target{}, err
	}
	return Target{Scheme: scheme, HostPort: hp, DefaultPort: !explicit}, nil
}

// ParseAuthority parses a CONNECT request target "host:port". The port is
// required: a proxy must not guess one.
func ParseAuthority(s string) (HostPort, error) {
	if len(s) > MaxNameLen+16 {
		return HostPort{}, errorf(KindHost, s, "authority is %d bytes long; a host is at most %d", len(s), MaxNameLen)
	}
	if i := strings.IndexFunc(s, badURLRune); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return HostPort{}, errorf(KindHost, s, "authority holds %s; CONNECT takes host:port only", runeName(r))
	}
	if strings.Contains(s, "@") {
		return HostPort{}, errorf(KindUserinfo, s, "authority has user information (user@host); CONNECT takes host:port only")
	}
	if strings.ContainsAny(s, "/?#") {
		return HostPort{}, errorf(KindHost, s, "authority holds a path, query or fragment; CONNECT takes host:port only")
	}
	hp, explicit, err := split(s, 0)
	if err != nil {
		return HostPort{}, err
	}
	if !explicit {
		return HostPort{}, errorf(KindPort, s, "CONNECT needs a port; write host:443")
	}
	return hp, nil
}

// split separates and normalises host and port. defaultPort 0 means the
// port is required (the caller checks explicit).
func split(authority string, defaultPort uint16) (hp HostPort, explicit bool, err error) {
	host, port := authority, ""
	if strings.HasPrefix(authority, "[") {
		end := strings.IndexByte(authority, ']')
		if end < 0 {
			return HostPort{}, false, errorf(KindHost, authority, "IPv6 address has no closing ']'")
		}
		host, port = authority[:end+1], authority[end+1:]
		if port != "" && port[0] != ':' {
			return HostPort{}, false, errorf(KindHost, authority, "unexpected text after the IPv6 address; write [addr]:port")
		}
	} else if i := strings.LastIndexByte(authority, ':'); i >= 0 {
		host, port = authority[:i], authority[i:]
	}
	if port != "" {
		explicit = true
		p, err := ParsePort(port[1:])
		if err != nil {
			return HostPort{}, false, err
		}
		hp.Port = p
	} else {
		hp.Port = defaultPort
	}
	hp.Host, hp.IP, err = NormalizeHost(host)
	return hp, explicit, err
}

// ParsePort parses a port written as a plain decimal number from 1 to
// 65535: no sign, no leading zero, no spaces.
func ParsePort(s string) (uint16, error) {
	if s == "" {
		return 0, errorf(KindPort, s, "port is empty; write host:port with a number, or leave out the colon")
	}
	if len(s) > 5 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, errorf(KindPort, s, "port must be a decimal number from 1 to 65535")
	}
	if s[0] == '0' {
		return 0, errorf(KindPort, s, "port must be a decimal number from 1 to 65535 without leading zeros")
	}
	n, _ := strconv.Atoi(s)
	if n > 65535 {
		return 0, errorf(KindPort, s, "port must be a decimal number from 1 to 65535")
	}
	return uint16(n), nil
}

// lookup is the IDNA profile used for every name: UTS #46 mapping for
// lookup (upper case, full-width and other compatibility forms map to their
// plain form), non-transitional (ß stays ß), STD3 characters only, the
// bidi and joiner rules, and labels checked to be valid. Lengths and
// hyphen positions are checked by checkName, so that the trailing dot and
// names such as r3---sn-x.example are handled the way resolvers do.
var lookup = idna.New(
	idna.MapForLookup(),
	idna.Transitional(false),
	idna.StrictDomainName(true),
	idna.BidiRule(),
	idna.CheckJoiners(true),
	idna.ValidateLabels(true),
	idna.CheckHyphens(false),
	idna.VerifyDNSLength(false),
)

// NormalizeHost normalises the host part of an authority. An IPv6 literal
// must be in brackets; the returned host has none. It returns the
// normalised name, or for an IP literal its canonical text and the address
// (IPv4-mapped IPv6 stays IPv6 here; the address policy unmaps it).
func NormalizeHost(host string) (string, netip.Addr, error) {
	if host == "" {
		return "", netip.Addr{}, errorf(KindHost, host, "host is empty")
	}
	if strings.HasPrefix(host, "[") {
		if !strings.HasSuffix(host, "]") {
			return "", netip.Addr{}, errorf(KindHost, host, "IPv6 address has no closing ']'")
		}
		inner := host[1 : len(host)-1]
		if strings.Contains(inner, "%") {
			return "", netip.Addr{}, errorf(KindHost, host, "IPv6 zone ids (%%eth0) are not accepted")
		}
		a, err := netip.ParseAddr(inner)
		if err != nil || !a.Is6() {
			return "", netip.Addr{}, errorf(KindHost, host, "brackets must hold an IPv6 address")
		}
		return a.String(), a, nil
	}
	if len(host) > 4*MaxNameLen {
		return "", netip.Addr{}, errorf(KindHost, host, "host is %d bytes long; a name is at most %d", len(host), MaxNameLen)
	}
	if i := strings.IndexFunc(host, badHostRune); i >= 0 {
		r, _ := utf8.DecodeRuneInString(host[i:])
		return "", netip.Addr{}, errorf(KindHost, host, "host holds %s; a host is a name or an IP address", runeName(r))
	}
	ascii, err := lookup.ToASCII(host)
	if err != nil {
		return "", netip.Addr{}, errorf(KindHost, host, "not a valid host name: %v", idnaReason(err))
	}
	// The mapping above lower-cases ASCII; do it again so that the result
	// never depends on the IDNA tables for plain names.
	ascii = strings.ToLower(ascii)
	// One trailing dot names the root and is dropped; "a.." is invalid.
	ascii = strings.TrimSuffix(ascii, ".")
	if a, numeric, err := parseIPv4(ascii); numeric {
		if err != nil {
			return "", netip.Addr{}, errorf(KindHost, host, "%v", err)
		}
		return a.String(), a, nil
	}
	if err := checkName(ascii); err != nil {
		return "", netip.Addr{}, errorf(KindHost, host, "%v", err)
	}
	return ascii, netip.Addr{}, nil
}

// NormalizeName normalises a DNS name as NormalizeHost does, so that it
// compares equal to normalised hosts, and refuses an IP literal.
func NormalizeName(name string) (string, error) {
	h, ip, err := NormalizeHost(name)
	if err != nil {
		return "", err
	}
	if ip.IsValid() {
		return "", errorf(KindHost, name, "is an IP address, not a name")
	}
	return h, nil
}

// checkName checks an ASCII name: 1 to 253 bytes, labels of 1 to 63 letters,
// digits and hyphens that neither start nor end with a hyphen.
func checkName(name string) error {
	if name == "" {
		return errors.New("host is empty")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("name is %d bytes long; at most %d are allowed", len(name), MaxNameLen)
	}
	for label := range strings.SplitSeq(name, ".") {
		switch {
		case label == "":
			return errors.New("name has an empty label (a leading dot, two dots in a row, or more than one trailing dot)")
		case len(label) > MaxLabelLen:
			return fmt.Errorf("label %q is %d bytes long; at most %d are allowed", label, len(label), MaxLabelLen)
		case label[0] == '-' || label[len(label)-1] == '-':
			return fmt.Errorf("label %q starts or ends with a hyphen", label)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("label %q holds %q; names use letters, digits and hyphens", label, c)
			}
		}
	}
	return nil
}

// parseIPv4 implements the WHATWG URL IPv4 parser. numeric reports whether
// the last label is a number (decimal, 0x hex or 0-prefixed octal), which
// makes the host an IPv4 address or an error, never a name: the C library
// (inet_aton) and browsers read such hosts as addresses.
func parseIPv4(s string) (addr netip.Addr, numeric bool, err error) {
	parts := strings.Split(s, ".")
	if !isNumber(parts[len(parts)-1]) {
		return netip.Addr{}, false, nil
	}
	if len(parts) > 4 {
		return netip.Addr{}, true, errors.New("looks like an IPv4 address but has more than four parts")
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, ok := parseIPv4Number(p)
		if !ok {
			return netip.Addr{}, true, fmt.Errorf("looks like an IPv4 address but part %q is not a number", p)
		}
		nums[i] = n
	}
	for _, n := range nums[:len(nums)-1] {
		if n > 255 {
			return netip.Addr{}, true, errors.New("looks like an IPv4 address but a part is above 255")
		}
	}
	last := nums[len(nums)-1]
	if last >= 1<<(8*(5-len(nums))) {
		return netip.Addr{}, true, errors.New("looks like an IPv4 address but is out of range")
	}
	v := last
	for i, n := range nums[:len(nums)-1] {
		v += n << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true, nil
}

// isNumber reports whether a label is an IPv4 number in the WHATWG sense:
// all decimal digits, or 0x followed by hex digits (possibly none).
func isNumber(p string) bool {
	if p == "" {
		return false
	}
	if strings.HasPrefix(p, "0x") {
		return strings.TrimLeft(p[2:], "0123456789abcdef") == ""
	}
	return strings.TrimLeft(p, "0123456789") == ""
}

func parseIPv4Number(p string) (uint64, bool) {
	if p == "" {
		return 0, false
	}
	base := 10
	switch {
	case strings.HasPrefix(p, "0x"):
		p, base = p[2:], 16
		if p == "" {
			return 0, true
		}
	case len(p) > 1 && p[0] == '0':
		p, base = p[1:], 8
	}
	// Anything above 2^32 is out of range whatever its length; cap the
	// digits so that ParseUint cannot overflow on huge inputs.
	p = strings.TrimLeft(p, "0")
	if p == "" {
		return 0, true
	}
	if len(p) > 12 {
		return 1 << 40, strings.TrimLeft(p, "0123456789abcdef"[:base]) == ""
	}
	n, err := strconv.ParseUint(p, base, 64)
	return n, err == nil
}

func validScheme(s string) bool {
	if s == "" || !isAlpha(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isAlpha(c) && !(c >= '0' && c <= '9') && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// badURLRune: characters never accepted anywhere in a URL or authority.
func badURLRune(r rune) bool {
	return r <= ' ' || r == 0x7f || r == '\\' || r == utf8.RuneError || (r >= 0x80 && r <= 0x9f)
}

// badHostRune: characters never accepted in a host, before IDNA mapping.
func badHostRune(r rune) bool {
	return badURLRune(r) || strings.ContainsRune("%/?#@[]:<>^|\"'`{}", r) || r == 0x3000 || r == 0xa0
}

func runeName(r rune) string {
	switch {
	case r == ' ':
		return "a space"
	case r == '\\':
		return "a backslash"
	case r == utf8.RuneError:
		return "invalid UTF-8"
	case r < ' ' || r == 0x7f || (r >= 0x80 && r <= 0x9f):
		return fmt.Sprintf("the control character %U", r)
	}
	return fmt.Sprintf("%q", r)
}

// idnaReason strips the package prefix from an idna error.
func idnaReason(err error) string {
	return strings.TrimPrefix(err.Error(), "idna: ")
}
