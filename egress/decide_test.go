package egress_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/egress/egresstest"
	"github.com/sandboxd/sandboxd/egress/netpolicy"
)

// The allowlist of the reference cases: allowed.com and *.mirror.test on
// ports 80 and 443, plus a few hosts for specific cases.
func testProfile(t testing.TB, mutate ...func(*egress.Profile)) *egress.Profile {
	t.Helper()
	p := egress.Defaults()
	p.Name = "test"
	p.Allow = []egress.Rule{
		{Name: "allowed", Hosts: []string{"allowed.com", "*.mirror.test"}, Methods: []string{"GET", "HEAD", "CONNECT"}},
		{Name: "lookalikes", Hosts: []string{"*.nip.io", "localtest.me", "rebind.test", "mixed.test", "dual.test", "private.test", "hang.test", "nx.test", "self.test"}, Methods: []string{"GET", "CONNECT"}},
		{Name: "idn", Hosts: []string{"bücher.example"}},
	}
	p.Deny = []egress.Rule{{Name: "blocked", Hosts: []string{"blocked.mirror.test"}}}
	for _, m := range mutate {
		m(&p)
	}
	if err := p.Compile(); err != nil {
		t.Fatalf("test profile does not compile: %v", err)
	}
	return &p
}

func testResolver() *egresstest.Resolver {
	return egresstest.NewResolver(map[string][]string{
		"allowed.com":           {"93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"},
		"www.mirror.test":       {"93.184.216.35"},
		"deep.a.mirror.test":    {"93.184.216.36"},
		"blocked.mirror.test":   {"93.184.216.37"},
		"xn--bcher-kva.example": {"93.184.216.38"},
		"127.0.0.1.nip.io":      {"127.0.0.1"},
		"localtest.me":          {"127.0.0.1", "::1"},
		"private.test":          {"10.0.0.5"},
		"mixed.test":            {"10.0.0.1", "93.184.216.34"},
		"dual.test":             {"93.184.216.34", "fd00::1"},
		"evil.com":              {"6.6.6.6"},
		"self.test":             {"127.0.0.1"},
	})
}

type decideCase struct {
	name   string
	method string // default GET
	target string
	allow  bool
	code   egress.Code
	// lookups lists the names the decision may resolve; nil means none:
	// a rejected literal or a host the rules deny is never looked up.
	lookups []string
	host    string // expected normalised host, when set
}

// bypassCases are the attempts from the reference (egress-bypass-cases.md)
// that the decision function judges, each with the expected verdict. The
// proxy-level ones (origin-form, Host header, caps, timeouts, smuggling)
// are in egress/proxy.
var bypassCases = []decideCase{
	// 1-2: IPv4 loopback in every spelling; never resolved.
	{name: "decimal loopback", target: "http://2130706433/", code: egress.CodeDeniedAddress},
	{name: "octal loopback", target: "http://0177.0.0.1/", code: egress.CodeDeniedAddress},
	{name: "hex loopback", target: "http://0x7f000001/", code: egress.CodeDeniedAddress},
	{name: "hex short loopback", target: "http://0x7f.1/", code: egress.CodeDeniedAddress},
	{name: "upper-case hex loopback", target: "http://0X7F.0X0.0X0.0X1/", code: egress.CodeDeniedAddress},
	{name: "short form 127.1", target: "http://127.1/", code: egress.CodeDeniedAddress},
	{name: "short form 127.0.1", target: "http://127.0.1/", code: egress.CodeDeniedAddress},
	{name: "zero host", target: "http://0/", code: egress.CodeDeniedAddress},
	{name: "127.127.127.127", target: "http://127.127.127.127/", code: egress.CodeDeniedAddress},
	{name: "loopback trailing dot", target: "http://127.0.0.1./", code: egress.CodeDeniedAddress},
	{name: "full-width digits loopback", target: "http://１２７.０.０.１/", code: egress.CodeDeniedAddress},
	// 3: all of 0/8.
	{name: "0.0.0.0", target: "http://0.0.0.0/", code: egress.CodeDeniedAddress},
	{name: "0.1.2.3", target: "http://0.1.2.3:443/", code: egress.CodeDeniedAddress},
	// 4-7: IPv6 loopback, mapped, compatible, NAT64, 6to4, Teredo.
	{name: "[::1]", target: "http://[::1]/", code: egress.CodeDeniedAddress},
	{name: "[0000::1]", target: "http://[0000::1]/", code: egress.CodeDeniedAddress},
	{name: "[::]", target: "http://[::]/", code: egress.CodeDeniedAddress},
	{name: "mapped loopback dotted", target: "http://[::ffff:127.0.0.1]/", code: egress.CodeDeniedAddress},
	{name: "mapped loopback hex", target: "http://[::ffff:7f00:1]/", code: egress.CodeDeniedAddress},
	{name: "mapped metadata long form", target: "http://[0:0:0:0:0:ffff:169.254.169.254]/", code: egress.CodeDeniedAddress},
	{name: "compatible loopback", target: "http://[::127.0.0.1]/", code: egress.CodeDeniedAddress},
	{name: "compatible metadata", target: "http://[::a9fe:a9fe]/", code: egress.CodeDeniedAddress},
	{name: "NAT64 metadata", target: "http://[64:ff9b::a9fe:a9fe]/", code: egress.CodeDeniedAddress},
	{name: "local NAT64 metadata", target: "http://[64:ff9b:1::a9fe:a9fe]/", code: egress.CodeDeniedAddress},
	{name: "6to4 metadata", target: "http://[2002:a9fe:a9fe::1]/", code: egress.CodeDeniedAddress},
	{name: "Teredo", target: "http://[2001::5601:5601]/", code: egress.CodeDeniedAddress},
	// 8: zone ids are malformed.
	{name: "zone id in URL", target: "http://[fe80::1%25eth0]/", code: egress.CodeBadHost},
	{name: "zone id in CONNECT", method: "CONNECT", target: "[fe80::1%eth0]:443", code: egress.CodeBadHost},
	// 9: metadata, public ones included, and by name.
	{name: "metadata 169.254.169.254", target: "http://169.254.169.254/latest/meta-data/", code: egress.CodeDeniedAddress},
	{name: "metadata decimal", target: "http://2852039166/", code: egress.CodeDeniedAddress},
	{name: "metadata hex", target: "http://0xa9fea9fe/", code: egress.CodeDeniedAddress},
	{name: "metadata octal", target: "http://0251.0376.0251.0376/", code: egress.CodeDeniedAddress},
	{name: "metadata short", target: "http://169.254.43518/", code: egress.CodeDeniedAddress},
	{name: "ECS metadata", target: "http://169.254.170.2/", code: egress.CodeDeniedAddress},
	{name: "AWS IPv6 metadata", target: "http://[fd00:ec2::254]/", code: egress.CodeDeniedAddress},
	{name: "Alibaba metadata", target: "http://100.100.100.200/", code: egress.CodeDeniedAddress},
	{name: "Azure wire server (public)", target: "http://168.63.129.16/", code: egress.CodeDeniedAddress},
	{name: "GCP metadata name", target: "http://metadata.google.internal/", code: egress.CodeDeniedName},
	{name: "GCP metadata name trailing dot", target: "http://METADATA.google.internal./", code: egress.CodeDeniedName},
	{name: "localhost", target: "http://localhost:8080/", code: egress.CodeDeniedName},
	{name: "sub.localhost", target: "http://api.localhost/", code: egress.CodeDeniedName},
	// 10-11: private, CGNAT, multicast, reserved, documentation.
	{name: "10/8", target: "http://10.1.2.3/", code: egress.CodeDeniedAddress},
	{name: "172.16/12", target: "http://172.31.255.1/", code: egress.CodeDeniedAddress},
	{name: "192.168/16", target: "http://192.168.1.1/", code: egress.CodeDeniedAddress},
	{name: "CGNAT", target: "http://100.64.0.1/", code: egress.CodeDeniedAddress},
	{name: "ULA", target: "http://[fc00::1]/", code: egress.CodeDeniedAddress},
	{name: "multicast", target: "http://224.0.0.1/", code: egress.CodeDeniedAddress},
	{name: "broadcast", target: "http://255.255.255.255/", code: egress.CodeDeniedAddress},
	{name: "IPv6 multicast", target: "http://[ff02::1]/", code: egress.CodeDeniedAddress},
	{name: "240/4", target: "http://240.0.0.1/", code: egress.CodeDeniedAddress},
	{name: "benchmarking", target: "http://198.18.0.1/", code: egress.CodeDeniedAddress},
	{name: "192.0.0.8", target: "http://192.0.0.8/", code: egress.CodeDeniedAddress},
	{name: "TEST-NET-1", target: "http://192.0.2.1/", code: egress.CodeDeniedAddress},
	{name: "site-local", target: "http://[fec0::1]/", code: egress.CodeDeniedAddress},
	{name: "IPv6 documentation", target: "http://[2001:db8::1]/", code: egress.CodeDeniedAddress},
	{name: "link-local IPv6", target: "http://[fe80::1]/", code: egress.CodeDeniedAddress},
	// 13-17: names that resolve to denied addresses.
	{name: "allowed-looking name to private", target: "http://private.test/", code: egress.CodeDeniedAddress, lookups: []string{"private.test"}},
	{name: "mixed answer denied as a whole", target: "http://mixed.test/", code: egress.CodeDeniedAddress, lookups: []string{"mixed.test"}},
	{name: "public A plus ULA AAAA", target: "http://dual.test/", code: egress.CodeDeniedAddress, lookups: []string{"dual.test"}},
	{name: "nip.io loopback", target: "http://127.0.0.1.nip.io/", code: egress.CodeDeniedAddress, lookups: []string{"127.0.0.1.nip.io"}},
	{name: "localtest.me", target: "https://localtest.me/", code: egress.CodeDeniedAddress, lookups: []string{"localtest.me"}},
	// 18: resolution failures fail closed.
	{name: "NXDOMAIN", target: "http://nx.test/", code: egress.CodeResolve, lookups: []string{"nx.test"}},
	{name: "resolver hangs", target: "http://hang.test/", code: egress.CodeResolveTimeout, lookups: []string{"hang.test"}},
	// 19: an IP literal is judged as an address; never reverse DNS.
	{name: "IP literal of allowed host", target: "http://93.184.216.34/", code: egress.CodeNoRule},
	{name: "mapped public literal", target: "http://[::ffff:93.184.216.34]/", code: egress.CodeNoRule},
	// 20: normalised spellings of an allowed host.
	{name: "allowed", target: "http://allowed.com/", allow: true, code: egress.CodeAllowed, lookups: []string{"allowed.com"}, host: "allowed.com"},
	{name: "upper case", target: "HTTP://ALLOWED.COM/", allow: true, code: egress.CodeAllowed, lookups: []string{"allowed.com"}, host: "allowed.com"},
	{name: "trailing dot", target: "https://allowed.com./x", allow: true, code: egress.CodeAllowed, lookups: []string{"allowed.com"}, host: "allowed.com"},
	{name: "explicit default port", target: "http://allowed.com:80/", allow: true, code: egress.CodeAllowed, lookups: []string{"allowed.com"}},
	{name: "https on 443", target: "https://allowed.com:443/", allow: true, code: egress.CodeAllowed, lookups: []string{"allowed.com"}},
	// 21: malformed names.
	{name: "two trailing dots", target: "http://allowed.com../", code: egress.CodeBadHost},
	{name: "leading dot", target: "http://.allowed.com/", code: egress.CodeBadHost},
	{name: "empty label", target: "http://allowed..com/", code: egress.CodeBadHost},
	{name: "five-part number", target: "http://1.2.3.4.5/", code: egress.CodeBadHost},
	{name: "numeric TLD", target: "http://example.123/", code: egress.CodeBadHost},
	{name: "octal digit 8", target: "http://08.0.0.1/", code: egress.CodeBadHost},
	{name: "underscore", target: "http://a_b.allowed.com/", code: egress.CodeBadHost},
	// 22-23: suffix confusion against the rules.
	{name: "suffix glued", target: "http://evilallowed.com/", code: egress.CodeNoRule},
	{name: "allowed as subdomain of evil", target: "http://allowed.com.evil.com/", code: egress.CodeNoRule},
	{name: "wildcard apex", target: "http://mirror.test/", code: egress.CodeNoRule},
	{name: "wildcard glued", target: "http://evilmirror.test/", code: egress.CodeNoRule},
	{name: "wildcard subdomain", target: "http://www.mirror.test/", allow: true, code: egress.CodeAllowed, lookups: []string{"www.mirror.test"}},
	{name: "wildcard deep subdomain", target: "http://deep.a.mirror.test/", allow: true, code: egress.CodeAllowed, lookups: []string{"deep.a.mirror.test"}},
	{name: "deny rule wins", target: "http://blocked.mirror.test/", code: egress.CodeDenyRule},
	// 24-25: IDN.
	{name: "Cyrillic look-alike", target: "http://аllowed.com/", code: egress.CodeNoRule, host: "xn--llowed-2nf.com"},
	{name: "Cyrillic look-alike punycode", target: "http://xn--llowed-2nf.com/", code: egress.CodeNoRule},
	{name: "full-width letters", target: "http://ａllowed.com/", allow: true, code: egress.CodeAllowed, lookups: []string{"allowed.com"}, host: "allowed.com"},
	{name: "circled letter", target: "http://ⓐllowed.com/", allow: true, code: egress.CodeAllowed, lookups: []string{"allowed.com"}, host: "allowed.com"},
	{name: "percent-encoded circled letter", target: "http://%E2%93%90llowed.com/", allow: true, code: egress.CodeAllowed, lookups: []string{"allowed.com"}, host: "allowed.com"},
	{name: "IDN rule, Unicode request", target: "http://BÜCHER.example/", allow: true, code: egress.CodeAllowed, lookups: []string{"xn--bcher-kva.example"}, host: "xn--bcher-kva.example"},
	{name: "IDN rule, punycode request", target: "http://xn--bcher-kva.example/", allow: true, code: egress.CodeAllowed, lookups: []string{"xn--bcher-kva.example"}},
	// 26: bytes that have no place in a host.
	{name: "NUL", target: "http://allowed.com%00.evil.com/", code: egress.CodeBadURL},
	{name: "raw NUL", target: "http://allowed.com\x00.evil.com/", code: egress.CodeBadURL},
	{name: "CRLF", target: "http://allowed.com\r\nHost: evil/", code: egress.CodeBadURL},
	{name: "space", target: "http://allowed .com/", code: egress.CodeBadURL},
	{name: "host over 253 bytes", target: "http://" + strings.Repeat("a.", 127) + "allowed.com/", code: egress.CodeBadHost},
	{name: "label over 63 bytes", target: "http://" + strings.Repeat("a", 64) + ".mirror.test/", code: egress.CodeBadHost},
	// 27-29: userinfo and authority confusion.
	{name: "userinfo", target: "http://allowed.com@evil.com/", code: egress.CodeUserinfo},
	{name: "empty userinfo", target: "http://@allowed.com/", code: egress.CodeUserinfo},
	{name: "userinfo with password", target: "http://allowed.com:443@evil.com/", code: egress.CodeUserinfo},
	{name: "fragment hides the real host", target: "http://evil.com#@allowed.com/", code: egress.CodeNoRule},
	{name: "backslash", target: `http://allowed.com\@evil.com/`, code: egress.CodeBadURL},
	{name: "backslash in path", target: `http://allowed.com/\\evil.com`, code: egress.CodeBadURL},
	{name: "CONNECT with userinfo", method: "CONNECT", target: "allowed.com@127.0.0.1:22", code: egress.CodeUserinfo},
	// 32: schemes other than http(s), refused before any lookup.
	{name: "file", target: "file:///etc/passwd", code: egress.CodeScheme},
	{name: "file with host", target: "file://allowed.com/etc/passwd", code: egress.CodeScheme},
	{name: "gopher", target: "gopher://allowed.com:70/_GET", code: egress.CodeScheme},
	{name: "dict", target: "dict://allowed.com:11211/stat", code: egress.CodeScheme},
	{name: "ftp", target: "ftp://allowed.com/", code: egress.CodeScheme},
	{name: "ldap", target: "ldap://allowed.com/", code: egress.CodeScheme},
	{name: "ws", target: "ws://allowed.com/", code: egress.CodeScheme},
	{name: "no scheme", target: "//allowed.com/", code: egress.CodeBadURL},
	{name: "opaque", target: "http:allowed.com", code: egress.CodeBadURL},
	// 33: port policy.
	{name: "CONNECT to allowed host port 22", method: "CONNECT", target: "allowed.com:22", code: egress.CodePort},
	{name: "CONNECT port 25", method: "CONNECT", target: "allowed.com:25", code: egress.CodePort},
	{name: "CONNECT port 6379", method: "CONNECT", target: "allowed.com:6379", code: egress.CodePort},
	{name: "GET port 6379", target: "http://allowed.com:6379/", code: egress.CodePort},
	{name: "CONNECT 443", method: "CONNECT", target: "allowed.com:443", allow: true, code: egress.CodeAllowed, lookups: []string{"allowed.com"}},
	{name: "CONNECT upper case", method: "CONNECT", target: "ALLOWED.com.:443", allow: true, code: egress.CodeAllowed, lookups: []string{"allowed.com"}, host: "allowed.com"},
	// 34: malformed ports.
	{name: "CONNECT without port", method: "CONNECT", target: "allowed.com", code: egress.CodeBadPort},
	{name: "CONNECT empty port", method: "CONNECT", target: "allowed.com:", code: egress.CodeBadPort},
	{name: "port 0", method: "CONNECT", target: "allowed.com:0", code: egress.CodeBadPort},
	{name: "port 65536", method: "CONNECT", target: "allowed.com:65536", code: egress.CodeBadPort},
	{name: "port +443", method: "CONNECT", target: "allowed.com:+443", code: egress.CodeBadPort},
	{name: "port 0443", method: "CONNECT", target: "allowed.com:0443", code: egress.CodeBadPort},
	{name: "URL port 0443", target: "http://allowed.com:0443/", code: egress.CodeBadPort},
	{name: "URL empty port", target: "http://allowed.com:/", code: egress.CodeBadPort},
	{name: "CONNECT with path", method: "CONNECT", target: "allowed.com:443/x", code: egress.CodeBadHost},
	{name: "unbracketed IPv6", method: "CONNECT", target: "::1:443", code: egress.CodeBadHost},
	{name: "bracketed IPv4", target: "http://[127.0.0.1]/", code: egress.CodeBadURL},
	{name: "bracketed IPv4 in CONNECT", method: "CONNECT", target: "[127.0.0.1]:443", code: egress.CodeBadHost},
	// Methods.
	{name: "POST not allowed", method: "POST", target: "http://allowed.com/", code: egress.CodeMethod},
	{name: "lower-case method", method: "get", target: "http://allowed.com/", code: egress.CodeMethod},
	{name: "CONNECT not listed for IDN rule", method: "CONNECT", target: "xn--bcher-kva.example:443", code: egress.CodeMethod},
	{name: "method with space", method: "GE T", target: "http://allowed.com/", code: egress.CodeBadMethod},
	{name: "unknown method token", method: "-", target: "http://allowed.com/", code: egress.CodeMethod},
	{name: "empty method", method: "", target: "http://allowed.com/", code: egress.CodeBadMethod},
}

func TestDecideBypassCases(t *testing.T) {
	if len(bypassCases) < 40 {
		t.Fatalf("only %d bypass cases; the issue asks for at least 40", len(bypassCases))
	}
	p := testProfile(t)
	for _, tc := range bypassCases {
		t.Run(tc.name, func(t *testing.T) {
			res := testResolver()
			res.Hang["hang.test"] = true
			c := &egress.Checker{Resolver: res, DNSTimeout: 50 * time.Millisecond}
			method := tc.method
			if method == "" && tc.name != "empty method" {
				method = "GET"
			}
			d := c.Decide(context.Background(), p, egress.Request{Method: method, Target: tc.target, Client: "ex_test"})
			if d.Allow != tc.allow || d.Code != tc.code {
				t.Fatalf("Decide(%s %q) = %s/%s (%s), want allow=%v code %s", method, tc.target, d.Verdict(), d.Code, d.Reason, tc.allow, tc.code)
			}
			if d.Reason == "" {
				t.Error("decision has no reason")
			}
			if got := res.Calls(); !slices.Equal(got, tc.lookups) {
				t.Errorf("lookups = %q, want %q", got, tc.lookups)
			}
			if tc.host != "" && d.Host != tc.host {
				t.Errorf("host = %q, want %q", d.Host, tc.host)
			}
			if d.Allow {
				if !d.Dial.IsValid() || !slices.Contains(d.Addresses, d.Dial.Addr()) {
					t.Errorf("allowed decision dials %v, not one of the checked addresses %v", d.Dial, d.Addresses)
				}
			} else if d.Dial.IsValid() {
				t.Errorf("denied decision has a dial address %v", d.Dial)
			}
			if d.Profile != "test" || d.ProfileVersion != p.Version || d.Client != "ex_test" {
				t.Errorf("decision names profile %s@%s client %s", d.Profile, d.ProfileVersion, d.Client)
			}
		})
	}
}

// A resolver that answers a public address first and loopback afterwards
// (DNS rebinding) gets one lookup; the decision dials the public address.
type rebinder struct {
	mu    sync.Mutex
	calls int
}

func (r *rebinder) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.calls == 1 {
		return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
	}
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

func TestDecideRebindingGetsOneLookup(t *testing.T) {
	r := &rebinder{}
	c := &egress.Checker{Resolver: r}
	d := c.Decide(context.Background(), testProfile(t), egress.Request{Method: "GET", Target: "http://rebind.test/"})
	if !d.Allow || d.Dial != netip.MustParseAddrPort("93.184.216.34:80") {
		t.Fatalf("decision = %s dial %v (%s), want allow dialling 93.184.216.34:80", d.Verdict(), d.Dial, d.Reason)
	}
	if r.calls != 1 {
		t.Fatalf("%d lookups, want exactly 1", r.calls)
	}
}

func TestDecidePrefersIPv4AndChecksEveryAnswer(t *testing.T) {
	res := egresstest.NewResolver(map[string][]string{"allowed.com": {"2606:2800:220:1::1", "93.184.216.34"}})
	c := &egress.Checker{Resolver: res}
	d := c.Decide(context.Background(), testProfile(t), egress.Request{Method: "GET", Target: "https://allowed.com/"})
	if !d.Allow || d.Dial != netip.MustParseAddrPort("93.184.216.34:443") || len(d.Addresses) != 2 {
		t.Fatalf("decision %s dial %v addresses %v", d.Verdict(), d.Dial, d.Addresses)
	}
	res.Set("allowed.com", "2606:2800:220:1::1")
	d = c.Decide(context.Background(), testProfile(t), egress.Request{Method: "GET", Target: "https://allowed.com/"})
	if !d.Allow || d.Dial != netip.MustParseAddrPort("[2606:2800:220:1::1]:443") {
		t.Fatalf("IPv6-only: decision %s dial %v", d.Verdict(), d.Dial)
	}
}

func TestDecideAllowCIDRs(t *testing.T) {
	res := egresstest.NewResolver(map[string][]string{
		"mirror.corp.test": {"10.0.0.5"},
		"meta.corp.test":   {"169.254.169.254"},
		"ll.corp.test":     {"169.254.1.1"},
	})
	c := &egress.Checker{Resolver: res}
	rules := []egress.Rule{{Hosts: []string{"*.corp.test"}}}
	cases := []struct {
		name   string
		cidrs  []string
		target string
		allow  bool
	}{
		{"private denied by default", nil, "http://mirror.corp.test/", false},
		{"opened by its range", []string{"10.0.0.0/8"}, "http://mirror.corp.test/", true},
		{"opened by a single address", []string{"10.0.0.5/32"}, "http://mirror.corp.test/", true},
		{"another range does not open it", []string{"10.0.1.0/24"}, "http://mirror.corp.test/", false},
		{"link-local opened by its range", []string{"169.254.0.0/16"}, "http://ll.corp.test/", true},
		{"metadata not opened by link-local range", []string{"169.254.0.0/16"}, "http://meta.corp.test/", false},
		{"metadata opened only by naming it", []string{"169.254.169.254/32"}, "http://meta.corp.test/", true},
		{"literal opened, but no rule names IPs", []string{"10.0.0.0/8"}, "http://10.0.0.5/", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := testProfile(t, func(p *egress.Profile) { p.Allow = rules; p.Deny = nil; p.AllowCIDRs = tc.cidrs })
			d := c.Decide(context.Background(), p, egress.Request{Method: "GET", Target: tc.target})
			if d.Allow != tc.allow {
				t.Fatalf("allow = %v (%s: %s), want %v", d.Allow, d.Code, d.Reason, tc.allow)
			}
		})
	}
}

// sandboxd's own listeners are refused whatever the profile opens: here
// every always-denied range they are in, and every name and port. The
// listeners: the proxy on a bridge gateway, the API on loopback, and two
// on unspecified addresses (every local address at their ports).
func TestDecideSelf(t *testing.T) {
	self := &egress.Listeners{Interfaces: hostInterfaces}
	self.Add(addrPort("172.30.0.1:3128"), addrPort("127.0.0.1:8080"), addrPort("0.0.0.0:9090"), addrPort("[::]:9091"))
	res := egresstest.NewResolver(map[string][]string{
		"api.test":      {"127.0.0.1"},
		"loop2.test":    {"127.0.0.2"},
		"loop6.test":    {"::1"},
		"zero.test":     {"0.0.0.0"},
		"zero6.test":    {"::"},
		"zeromap.test":  {"::ffff:0.0.0.0"},
		"gw.test":       {"172.30.0.1"},
		"hostip.test":   {"192.168.1.10"},
		"lanpeer.test":  {"192.168.1.99"},
		"public.test":   {"93.184.216.34"},
		"mixedown.test": {"93.184.216.34", "127.0.0.1"},
	})
	c := &egress.Checker{Resolver: res, Self: self}
	var names []string
	for n := range res.Names {
		names = append(names, n)
	}
	profile := func(mode egress.Mode) *egress.Profile {
		return testProfile(t, func(p *egress.Profile) {
			p.Mode = mode
			p.AllowCIDRs = []string{"127.0.0.0/8", "0.0.0.0/8", "::1/128", "172.16.0.0/12", "192.168.0.0/16", "fe80::/10"}
			p.Allow = []egress.Rule{{Hosts: names, Ports: []int{80, 3128, 8080, 9090, 9091}, Methods: []string{"GET", "CONNECT"}}}
			p.Deny = nil
		})
	}
	enforce := profile(egress.ModeEnforce)
	for _, tc := range []struct {
		host string // host:port, sent as GET http://host/metrics and as CONNECT host
		code egress.Code
	}{
		// The API on 127.0.0.1, by name, literal and mapped literal.
		{"api.test:8080", egress.CodeDeniedSelf},
		{"127.0.0.1:8080", egress.CodeDeniedSelf},
		{"[::ffff:127.0.0.1]:8080", egress.CodeDeniedSelf},
		{"mixedown.test:8080", egress.CodeDeniedSelf}, // any address of a name
		// The unspecified address reaches the listener on 127.0.0.1.
		{"zero.test:8080", egress.CodeDeniedSelf},
		{"zero6.test:8080", egress.CodeDeniedSelf},
		{"zeromap.test:8080", egress.CodeDeniedSelf},
		{"0.0.0.0:8080", egress.CodeDeniedSelf},
		{"[::]:8080", egress.CodeDeniedSelf},
		// ... and is never dialled elsewhere either, allow_cidrs or not.
		{"zero.test:80", egress.CodeDeniedAddress},
		{"zero6.test:80", egress.CodeDeniedAddress},
		// Other loopback addresses do not reach a listener on 127.0.0.1.
		{"loop2.test:8080", egress.CodeAllowed},
		{"loop6.test:8080", egress.CodeAllowed},
		{"api.test:80", egress.CodeAllowed},
		// The proxy on the gateway, and nothing else at its port.
		{"gw.test:3128", egress.CodeDeniedSelf},
		{"172.30.0.1:3128", egress.CodeDeniedSelf},
		{"hostip.test:3128", egress.CodeAllowed},
		// A listener on 0.0.0.0: loopback, the host's addresses and the
		// unspecified address, not other hosts.
		{"api.test:9090", egress.CodeDeniedSelf},
		{"loop2.test:9090", egress.CodeDeniedSelf},
		{"loop6.test:9090", egress.CodeDeniedSelf},
		{"gw.test:9090", egress.CodeDeniedSelf},
		{"hostip.test:9090", egress.CodeDeniedSelf},
		{"zero.test:9090", egress.CodeDeniedSelf},
		{"[fe80::1]:9090", egress.CodeDeniedSelf},
		{"lanpeer.test:9090", egress.CodeAllowed},
		{"public.test:9090", egress.CodeAllowed},
		// A listener on :: covers IPv4 as well.
		{"hostip.test:9091", egress.CodeDeniedSelf},
		{"api.test:9091", egress.CodeDeniedSelf},
		{"public.test:9091", egress.CodeAllowed},
	} {
		for _, req := range []egress.Request{
			{Method: "GET", Target: "http://" + tc.host + "/metrics"},
			{Method: "CONNECT", Target: tc.host},
		} {
			d := c.Decide(context.Background(), enforce, req)
			if d.Code != tc.code {
				t.Errorf("%s %s: %s (%s), want %s", req.Method, req.Target, d.Code, d.Reason, tc.code)
				continue
			}
			if d.Code == egress.CodeDeniedSelf && (d.Allow || d.Dial.IsValid() || !strings.Contains(d.Reason, "sandboxd's own listener")) {
				t.Errorf("%s %s: allow %v, dial %v, reason %q", req.Method, req.Target, d.Allow, d.Dial, d.Reason)
			}
		}
	}

	// Report mode allows what enforce would deny, never sandboxd itself.
	for _, target := range []string{"http://api.test:8080/metrics", "http://zero.test:8080/metrics", "http://0.0.0.0:8080/"} {
		if d := c.Decide(context.Background(), profile(egress.ModeReport), egress.Request{Method: "GET", Target: target}); d.Allow || d.Code != egress.CodeDeniedSelf {
			t.Errorf("report mode, %s: allow %v, %s", target, d.Allow, d.Code)
		}
	}

	// A listener that stops is no longer refused.
	self.Remove(addrPort("127.0.0.1:8080"))
	if d := c.Decide(context.Background(), enforce, egress.Request{Method: "GET", Target: "http://api.test:8080/"}); !d.Allow {
		t.Errorf("after Remove: %s (%s)", d.Code, d.Reason)
	}
}

// Checkers sharing one Listeners refuse the same listeners, whoever added
// them; a checker without Self keeps its own (AddSelf).
func TestDecideSelfShared(t *testing.T) {
	self := &egress.Listeners{Interfaces: hostInterfaces}
	res := egresstest.NewResolver(map[string][]string{"api.test": {"127.0.0.1"}})
	proxyChecker := &egress.Checker{Resolver: res, Self: self}
	fetchChecker := &egress.Checker{Resolver: res, Self: self}
	alone := &egress.Checker{Resolver: res}
	p := testProfile(t, func(p *egress.Profile) {
		p.AllowCIDRs = []string{"127.0.0.0/8"}
		p.Allow = []egress.Rule{{Hosts: []string{"api.test"}, Ports: []int{8080, 3128}}}
	})
	fetchChecker.AddSelf(addrPort("127.0.0.1:8080")) // the API
	proxyChecker.AddSelf(addrPort("127.0.0.1:3128")) // the proxy's Serve
	alone.AddSelf(addrPort("127.0.0.1:3128"))
	for _, port := range []string{"8080", "3128"} {
		for name, c := range map[string]*egress.Checker{"proxy": proxyChecker, "fetch": fetchChecker} {
			if d := c.Decide(context.Background(), p, egress.Request{Method: "GET", Target: "http://api.test:" + port + "/"}); d.Code != egress.CodeDeniedSelf {
				t.Errorf("%s checker, port %s: %s, want %s", name, port, d.Code, egress.CodeDeniedSelf)
			}
		}
	}
	if d := alone.Decide(context.Background(), p, egress.Request{Method: "GET", Target: "http://api.test:3128/"}); d.Code != egress.CodeDeniedSelf {
		t.Errorf("a checker's own set: %s", d.Code)
	}
	if d := alone.Decide(context.Background(), p, egress.Request{Method: "GET", Target: "http://api.test:8080/"}); !d.Allow {
		t.Errorf("a checker's own set holds another's listener: %s", d.Code)
	}
}

func TestDecideModes(t *testing.T) {
	res := testResolver()
	c := &egress.Checker{Resolver: res}
	report := testProfile(t, func(p *egress.Profile) { p.Mode = egress.ModeReport })
	approve := testProfile(t, func(p *egress.Profile) { p.Mode = egress.ModeApprove })
	cases := []struct {
		name      string
		p         *egress.Profile
		method    string
		target    string
		allow     bool
		wouldDeny bool
		code      egress.Code
	}{
		{"report: no rule is allowed and flagged", report, "GET", "http://evil.com/", true, true, egress.CodeNoRule},
		{"report: port is allowed and flagged", report, "CONNECT", "allowed.com:22", true, true, egress.CodePort},
		{"report: deny rule is allowed and flagged", report, "GET", "http://blocked.mirror.test/", true, true, egress.CodeDenyRule},
		{"report: allowed stays plain", report, "GET", "http://allowed.com/", true, false, egress.CodeAllowed},
		{"report: metadata is still denied", report, "GET", "http://169.254.169.254/", false, false, egress.CodeDeniedAddress},
		{"report: private answer is still denied", report, "GET", "http://private.test/", false, false, egress.CodeDeniedAddress},
		{"report: metadata name is still denied", report, "GET", "http://metadata.google.internal/", false, false, egress.CodeDeniedName},
		{"report: malformed is still denied", report, "GET", "http://allowed.com@evil.com/", false, false, egress.CodeUserinfo},
		{"approve: unknown host needs approval", approve, "GET", "http://evil.com/", false, false, egress.CodeApproval},
		{"approve: wrong port is a plain deny", approve, "CONNECT", "allowed.com:22", false, false, egress.CodePort},
		{"approve: allowed host", approve, "GET", "http://allowed.com/", true, false, egress.CodeAllowed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := c.Decide(context.Background(), tc.p, egress.Request{Method: tc.method, Target: tc.target})
			if d.Allow != tc.allow || d.WouldDeny != tc.wouldDeny || d.Code != tc.code {
				t.Fatalf("= allow %v would_deny %v code %s (%s); want %v %v %s", d.Allow, d.WouldDeny, d.Code, d.Reason, tc.allow, tc.wouldDeny, tc.code)
			}
		})
	}
}

func TestDecideWithoutProfile(t *testing.T) {
	c := &egress.Checker{Resolver: testResolver()}
	for _, p := range []*egress.Profile{nil, {Name: "uncompiled"}} {
		d := c.Decide(context.Background(), p, egress.Request{Method: "GET", Target: "http://allowed.com/"})
		if d.Allow || d.Code != egress.CodeNoProfile {
			t.Errorf("profile %v: %s %s", p, d.Verdict(), d.Code)
		}
	}
	none := egress.None()
	d := c.Decide(context.Background(), none, egress.Request{Method: "GET", Target: "http://allowed.com/"})
	if d.Allow || d.Code != egress.CodeNoRule {
		t.Errorf("none: %s %s", d.Verdict(), d.Code)
	}
}

func TestCodeStatus(t *testing.T) {
	for code, want := range map[egress.Code]int{
		egress.CodeBadHost: 400, egress.CodeUserinfo: 400, egress.CodeScheme: 403, egress.CodeNoRule: 403,
		egress.CodeDeniedAddress: 403, egress.CodeResolve: 502, egress.CodeResolveTimeout: 504,
		egress.OutcomeRateLimited: 429, egress.OutcomeTimeout: 504, egress.OutcomeRequestCap: 413,
	} {
		if got := code.Status(); got != want {
			t.Errorf("%s.Status() = %d, want %d", code, got, want)
		}
	}
}

// staticResolver answers from a map without recording anything.
type staticResolver map[string][]netip.Addr

func (r staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return r[host], nil
}

// BenchmarkDecide measures the decision time per request, with a resolver
// that answers from memory (so the numbers are the rules and checks alone).
func BenchmarkDecide(b *testing.B) {
	p := testProfile(b)
	c := &egress.Checker{Resolver: staticResolver{
		"allowed.com":     {netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("2606:2800:220:1::1")},
		"www.mirror.test": {netip.MustParseAddr("93.184.216.35")},
	}}
	cases := []struct{ name, method, target string }{
		{"allow exact name", "GET", "https://allowed.com/index.html"},
		{"allow wildcard", "GET", "http://www.mirror.test/pool/main/x.deb"},
		{"allow CONNECT", "CONNECT", "allowed.com:443"},
		{"allow IDN spelling", "GET", "http://ＡＬＬＯＷＥＤ.com./"},
		{"deny no rule", "GET", "https://evil.example/"},
		{"deny metadata literal", "GET", "http://0xa9fea9fe/"},
		{"deny userinfo", "GET", "http://allowed.com@evil.example/"},
	}
	ctx := context.Background()
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			req := egress.Request{Method: tc.method, Target: tc.target, Client: "ex_bench"}
			b.ReportAllocs()
			for b.Loop() {
				c.Decide(ctx, p, req)
			}
		})
	}
}

// FuzzDecide checks the decision function's invariants on any method and
// target: an allowed request dials one of its checked addresses, never an
// always-denied one, on the port asked for, for a host an allow rule names;
// a denied one dials nothing and says why.
func FuzzDecide(f *testing.F) {
	for _, tc := range bypassCases {
		m := tc.method
		if m == "" {
			m = "GET"
		}
		f.Add(m, tc.target)
	}
	p := testProfile(f)
	res := testResolver()
	c := &egress.Checker{}
	allowed := []string{"allowed.com", "www.mirror.test", "deep.a.mirror.test", "xn--bcher-kva.example"}
	f.Fuzz(func(t *testing.T, method, target string) {
		c.Resolver = res
		d := c.Decide(context.Background(), p, egress.Request{Method: method, Target: target})
		if !d.Allow {
			if d.Dial.IsValid() || d.Reason == "" || d.Code == egress.CodeAllowed {
				t.Fatalf("denied %s %q: dial %v code %s reason %q", method, target, d.Dial, d.Code, d.Reason)
			}
			return
		}
		if !slices.Contains(d.Addresses, d.Dial.Addr()) || d.Dial.Port() != d.Port {
			t.Fatalf("allowed %s %q dials %v, not a checked address of %v port %d", method, target, d.Dial, d.Addresses, d.Port)
		}
		for _, a := range d.Addresses {
			if v := netpolicy.Check(a, nil); v.Denied {
				t.Fatalf("allowed %s %q with an always-denied address: %s", method, target, v.Reason())
			}
		}
		if !slices.Contains(allowed, d.Host) || d.Code != egress.CodeAllowed {
			t.Fatalf("allowed %s %q for host %q (%s)", method, target, d.Host, d.Reason)
		}
	})
}
