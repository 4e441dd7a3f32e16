package egress_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/egress/egresstest"
	"github.com/sandboxd/sandboxd/redact"
)

func TestCompileErrors(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*egress.Profile)
		path   string
		text   string
	}{
		{"no name", func(p *egress.Profile) { p.Name = "" }, "name", "required"},
		{"bad name", func(p *egress.Profile) { p.Name = "Bad_Name" }, "name", "not allowed"},
		{"bad mode", func(p *egress.Profile) { p.Mode = "audit" }, "mode", "enforce"},
		{"rule without hosts", func(p *egress.Profile) { p.Allow = []egress.Rule{{}} }, "allow[0].hosts", "no hosts"},
		{"match-all wildcard", func(p *egress.Profile) { p.Allow = []egress.Rule{{Hosts: []string{"a.com", "*"}}} }, "allow[0].hosts[1]", "matches every host"},
		{"TLD wildcard", func(p *egress.Profile) { p.Deny = []egress.Rule{{Hosts: []string{"*.com"}}} }, "deny[0].hosts[0]", "top-level domain"},
		{"bad pattern", func(p *egress.Profile) { p.Allow = []egress.Rule{{Hosts: []string{"a..com"}}} }, "allow[0].hosts[0]", "not a valid host name"},
		{"IP pattern", func(p *egress.Profile) { p.Allow = []egress.Rule{{Hosts: []string{"10.0.0.1"}}} }, "allow[0].hosts[0]", "IP address"},
		{"duplicate pattern", func(p *egress.Profile) { p.Allow = []egress.Rule{{Hosts: []string{"a.com", "A.com."}}} }, "allow[0].hosts[1]", "twice"},
		{"port 0", func(p *egress.Profile) { p.Allow = []egress.Rule{{Hosts: []string{"a.com"}, Ports: []int{443, 0}}} }, "allow[0].ports[1]", "1 to 65535"},
		{"empty ports", func(p *egress.Profile) { p.Allow = []egress.Rule{{Hosts: []string{"a.com"}, Ports: []int{}}} }, "allow[0].ports", "empty"},
		{"lower-case method", func(p *egress.Profile) { p.Allow = []egress.Rule{{Hosts: []string{"a.com"}, Methods: []string{"get"}}} }, "allow[0].methods[0]", "upper case"},
		{"TRACE", func(p *egress.Profile) {
			p.Allow = []egress.Rule{{Hosts: []string{"a.com"}, Methods: []string{"TRACE"}}}
		}, "allow[0].methods[0]", "not allowed"},
		{"duplicate rule name", func(p *egress.Profile) {
			p.Allow = []egress.Rule{{Name: "x", Hosts: []string{"a.com"}}, {Name: "x", Hosts: []string{"b.com"}}}
		}, "allow[1].name", "already used"},
		{"bad CIDR", func(p *egress.Profile) { p.AllowCIDRs = []string{"10.0.0.0/33"} }, "allow_cidrs[0]", "not a CIDR"},
		{"address not CIDR", func(p *egress.Profile) { p.AllowCIDRs = []string{"10.0.0.1"} }, "allow_cidrs[0]", "10.0.0.1/32"},
		{"host bits", func(p *egress.Profile) { p.AllowCIDRs = []string{"10.0.0.1/8"} }, "allow_cidrs[0]", "10.0.0.0/8"},
		{"everything", func(p *egress.Profile) { p.AllowCIDRs = []string{"::/0"} }, "allow_cidrs[0]", "every address"},
		{"mapped CIDR", func(p *egress.Profile) { p.AllowCIDRs = []string{"::ffff:10.0.0.0/104"} }, "allow_cidrs[0]", "IPv4-mapped"},
		{"duplicate CIDR", func(p *egress.Profile) { p.AllowCIDRs = []string{"10.0.0.0/8", "10.0.0.0/8"} }, "allow_cidrs[1]", "twice"},
		{"response cap 0", func(p *egress.Profile) { p.MaxResponseBytes = 0 }, "max_response_bytes", "allowed is 1"},
		{"negative request cap", func(p *egress.Profile) { p.MaxRequestBytes = -1 }, "max_request_bytes", "allowed is 0"},
		{"connect timeout", func(p *egress.Profile) { p.ConnectTimeout = time.Millisecond }, "connect_timeout", "allowed is 100ms"},
		{"total timeout", func(p *egress.Profile) { p.TotalTimeout = 2 * time.Hour }, "total_timeout", "allowed is 1s"},
		{"total below connect", func(p *egress.Profile) { p.ConnectTimeout, p.TotalTimeout = 30*time.Second, 10*time.Second }, "total_timeout", "shorter"},
		{"rate", func(p *egress.Profile) { p.RequestsPerMinute = 0 }, "requests_per_minute", "allowed is 1"},
		{"none with rules", func(p *egress.Profile) { p.Name = "none"; p.Allow = []egress.Rule{{Hosts: []string{"a.com"}}} }, "allow", "must deny everything"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := egress.Defaults()
			p.Name = "p"
			tc.mutate(&p)
			err := p.Compile()
			var fe *egress.FieldError
			if !errors.As(err, &fe) || fe.Path != tc.path || !strings.Contains(fe.Msg, tc.text) {
				t.Fatalf("Compile() = %v; want a FieldError at %s containing %q", err, tc.path, tc.text)
			}
			if p.Compiled() {
				t.Error("a profile that failed to compile reports Compiled")
			}
		})
	}
}

func TestCompileNormalisesAndVersions(t *testing.T) {
	a := egress.Defaults()
	a.Name = "p"
	a.Allow = []egress.Rule{{Hosts: []string{"Example.COM.", "*.Bücher.example"}}}
	a.AllowCIDRs = []string{"fd00:0::/8"}
	if err := a.Compile(); err != nil {
		t.Fatal(err)
	}
	if got := a.Allow[0].Hosts; !slices.Equal(got, []string{"example.com", "*.xn--bcher-kva.example"}) {
		t.Errorf("hosts = %q", got)
	}
	if !slices.Equal(a.Allow[0].Ports, []int{80, 443}) || !slices.Equal(a.Allow[0].Methods, []string{"GET", "HEAD"}) {
		t.Errorf("defaults not filled: %+v", a.Allow[0])
	}
	if a.AllowCIDRs[0] != "fd00::/8" {
		t.Errorf("CIDR = %q", a.AllowCIDRs[0])
	}
	b := egress.Defaults()
	b.Name = "p"
	b.Allow = []egress.Rule{{Hosts: []string{"example.com", "*.xn--bcher-kva.example"}, Ports: []int{80, 443}, Methods: []string{"GET", "HEAD"}}}
	b.AllowCIDRs = []string{"fd00::/8"}
	if err := b.Compile(); err != nil {
		t.Fatal(err)
	}
	if a.Version != b.Version || len(a.Version) != 64 {
		t.Errorf("equivalent profiles have versions %s and %s", a.Version, b.Version)
	}
	b.RequestsPerMinute++
	if err := b.Compile(); err != nil {
		t.Fatal(err)
	}
	if a.Version == b.Version {
		t.Error("a changed value kept the version")
	}
}

func TestLimiter(t *testing.T) {
	l := egress.NewLimiter()
	for i := range 3 {
		if ok, _ := l.Allow("a", 3); !ok {
			t.Fatalf("request %d of 3 refused", i+1)
		}
	}
	ok, wait := l.Allow("a", 3)
	if ok || wait < time.Second || wait > 20*time.Second {
		t.Fatalf("4th request: ok=%v wait=%v; want refused with a wait of about 20s", ok, wait)
	}
	if ok, _ := l.Allow("b", 3); !ok {
		t.Error("another client shares the first one's budget")
	}
}

func TestDialerDialsTheCheckedAddressOnly(t *testing.T) {
	port := uint16(egresstest.Upstream(t, func(c net.Conn) { c.Close() }))
	res := testResolver()
	res.Set("up.mirror.test", "127.0.0.1")
	checker := &egress.Checker{Resolver: res}
	p := testProfile(t, func(p *egress.Profile) {
		p.AllowCIDRs = []string{"127.0.0.0/8"}
		p.Allow = []egress.Rule{{Hosts: []string{"*.mirror.test"}, Ports: []int{int(port)}}}
	})
	var dialled []string
	dl := &egress.Dialer{Checker: checker, Control: func(network, address string, _ syscall.RawConn) error {
		dialled = append(dialled, address)
		return nil
	}}
	d := checker.Decide(context.Background(), p, egress.Request{Method: "GET", Target: fmt.Sprintf("http://up.mirror.test:%d/", port)})
	if !d.Allow {
		t.Fatalf("decision: %s", d.Reason)
	}
	c, err := dl.Dial(context.Background(), &d)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if want := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port).String(); !slices.Equal(dialled, []string{want}) {
		t.Errorf("dialled %v, want [%s]", dialled, want)
	}
	// A tampered decision is refused: its address is re-checked.
	bad := d
	bad.Dial = netip.MustParseAddrPort("169.254.169.254:80")
	if _, err := dl.Dial(context.Background(), &bad); !errors.Is(err, egress.ErrNotAllowed) {
		t.Errorf("dial of a tampered decision: %v", err)
	}
	denied := checker.Decide(context.Background(), p, egress.Request{Method: "GET", Target: "http://evil.com/"})
	if _, err := dl.Dial(context.Background(), &denied); !errors.Is(err, egress.ErrNotAllowed) {
		t.Errorf("dial of a denied decision: %v", err)
	}
	// The proxy's own address is refused at dial time too.
	checker.AddSelf(d.Dial)
	if _, err := dl.Dial(context.Background(), &d); !errors.Is(err, egress.ErrNotAllowed) {
		t.Errorf("dial of the proxy's own address: %v", err)
	}
	if len(dialled) != 1 {
		t.Errorf("refused dials reached the socket: %v", dialled)
	}
}

// On Linux a connection to 0.0.0.0 reaches a listener on 127.0.0.1. The
// dialer refuses a decision (a tampered one: Decide never allows it) to
// the unspecified address at any port, allow_cidrs or not, and names
// sandboxd's listener when the port is one of its own.
func TestDialerRefusesUnspecified(t *testing.T) {
	var accepted atomic.Int32
	port := uint16(egresstest.Upstream(t, func(c net.Conn) {
		accepted.Add(1)
		c.Close()
	}))
	zero := netip.AddrPortFrom(netip.IPv4Unspecified(), port)
	// The threat: a plain dial of 0.0.0.0 reaches the loopback listener.
	if c, err := net.DialTimeout("tcp4", zero.String(), 2*time.Second); err == nil {
		c.Close()
		for deadline := time.Now().Add(5 * time.Second); accepted.Load() == 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	} else {
		t.Logf("this kernel does not connect 0.0.0.0 to loopback (%v); the refusal is checked all the same", err)
	}
	before := accepted.Load()

	res := testResolver()
	res.Set("up.mirror.test", "127.0.0.2")
	checker := &egress.Checker{Resolver: res}
	p := testProfile(t, func(p *egress.Profile) {
		p.AllowCIDRs = []string{"127.0.0.0/8", "0.0.0.0/8"}
		p.Allow = []egress.Rule{{Hosts: []string{"*.mirror.test"}, Ports: []int{int(port)}}}
	})
	d := checker.Decide(context.Background(), p, egress.Request{Method: "GET", Target: fmt.Sprintf("http://up.mirror.test:%d/", port)})
	if !d.Allow {
		t.Fatalf("decision: %s", d.Reason)
	}
	dl := &egress.Dialer{Checker: checker}
	for _, addr := range []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified(), netip.MustParseAddr("::ffff:0.0.0.0")} {
		bad := d
		bad.Dial = netip.AddrPortFrom(addr, port)
		if _, err := dl.Dial(context.Background(), &bad); !errors.Is(err, egress.ErrNotAllowed) || !strings.Contains(err.Error(), "unspecified") {
			t.Errorf("dial of %s: %v", bad.Dial, err)
		}
	}
	checker.AddSelf(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port))
	bad := d
	bad.Dial = zero
	if _, err := dl.Dial(context.Background(), &bad); !errors.Is(err, egress.ErrNotAllowed) || !strings.Contains(err.Error(), "own listener 127.0.0.1") {
		t.Errorf("dial of %s with sandboxd on 127.0.0.1: %v", zero, err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := accepted.Load() - before; n != 0 {
		t.Errorf("refused dials reached the listener %d times", n)
	}
}

// The version of a profile is its JSON encoding's hash; audit records and
// decisions carry it, so the encoding (field names included) must not
// change by accident. Every field is set here, defaults aside.
func TestVersionEncodingIsStable(t *testing.T) {
	p := egress.Profile{
		Name: "pin", Description: "pinned", Mode: egress.ModeReport,
		Allow:      []egress.Rule{{Name: "a", Hosts: []string{"a.example"}, Ports: []int{443}, Methods: []string{"GET"}}},
		Deny:       []egress.Rule{{Hosts: []string{"b.example"}}},
		AllowCIDRs: []string{"10.1.0.0/16"}, MaxResponseBytes: 1000, MaxRequestBytes: 10,
		ConnectTimeout: time.Second, TotalTimeout: 2 * time.Second, RequestsPerMinute: 7,
		Redact:               []redact.Rule{{Type: "ticket", Keywords: []string{"tkt-"}, Regex: `TKT-[0-9]{6}`}},
		CaptureRetentionDays: 3,
	}
	if err := p.Compile(); err != nil {
		t.Fatal(err)
	}
	if want := "c3c8270552c3f1d1cffa45b01e42ff27201eb56a1a307e962d6424bf3977990d"; p.Version != want {
		t.Errorf("version %s, want %s", p.Version, want)
	}
}
