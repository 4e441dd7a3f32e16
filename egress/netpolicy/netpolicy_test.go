package netpolicy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		addr string
		want string // substring of the range name; "" means public
	}{
		{"93.184.216.34", ""},
		{"8.8.8.8", ""},
		{"2606:2800:220:1:248:1893:25c8:1946", ""},
		{"0.0.0.0", "unspecified 0.0.0.0"},
		{"::ffff:0.0.0.0", "unspecified 0.0.0.0"},
		{"0.1.2.3", "this network"},
		{"10.255.255.255", "private"},
		{"100.64.0.1", "carrier-grade"},
		{"100.127.255.255", "carrier-grade"},
		{"100.128.0.0", ""},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"169.254.0.1", "link-local"},
		{"169.254.169.254", "metadata"},
		{"169.254.170.2", "metadata"},
		{"100.100.100.200", "metadata"},
		{"168.63.129.16", "metadata"},
		{"168.63.129.17", ""},
		{"fd00:ec2::254", "metadata"},
		{"172.16.0.0", "private"},
		{"172.31.255.255", "private"},
		{"172.32.0.0", ""},
		{"192.0.0.8", "IETF"},
		{"192.0.2.1", "TEST-NET-1"},
		{"192.88.99.1", "6to4 relay"},
		{"192.168.0.1", "private"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"198.20.0.0", ""},
		{"198.51.100.1", "TEST-NET-2"},
		{"203.0.113.1", "TEST-NET-3"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.255", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "broadcast"},
		{"::", "unspecified ::"},
		{"::1", "loopback ::1"},
		{"::ffff:127.0.0.1", "loopback 127"},
		{"::ffff:169.254.169.254", "metadata"},
		{"::ffff:93.184.216.34", ""}, // the IPv4 address, public
		{"::127.0.0.1", "IPv4-compatible"},
		{"::a9fe:a9fe", "IPv4-compatible"},
		{"::ffff:0:7f00:1", "IPv4-translated"},
		{"64:ff9b::a9fe:a9fe", "NAT64"},
		{"64:ff9b::808:808", "NAT64"},
		{"64:ff9b:1::a9fe:a9fe", "local-use NAT64"},
		{"2002:a9fe:a9fe::1", "6to4"},
		{"2001::5601:5601", "Teredo"},
		{"2001:2::1", "IETF protocol assignments"},
		{"2001:db8::1", "documentation"},
		{"3fff::1", "documentation"},
		{"100::1", "discard"},
		{"fc00::1", "unique local"},
		{"fdff::1", "unique local"},
		{"fe80::1", "link-local"},
		{"fec0::1", "site-local"},
		{"ff02::1", "multicast"},
		{"4000::1", "outside global unicast"},
		{"1::1", "outside global unicast"},
	}
	for _, tc := range cases {
		rng, denied := Classify(netip.MustParseAddr(tc.addr))
		if denied != (tc.want != "") || !strings.Contains(rng.Name, tc.want) {
			t.Errorf("Classify(%s) = %q, %v; want %q", tc.addr, rng.Name, denied, tc.want)
		}
	}
}

func TestCheckAllowCIDRs(t *testing.T) {
	pfx := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, x := range s {
			out = append(out, netip.MustParsePrefix(x))
		}
		return out
	}
	cases := []struct {
		addr   string
		allow  []netip.Prefix
		denied bool
	}{
		{"10.0.0.5", nil, true},
		{"10.0.0.5", pfx("10.0.0.0/8"), false},
		{"10.0.0.5", pfx("10.0.1.0/24"), true},
		{"::ffff:10.0.0.5", pfx("10.0.0.0/8"), false},
		{"127.0.0.1", pfx("127.0.0.0/8"), false},
		{"169.254.169.254", pfx("169.254.0.0/16"), true},
		{"169.254.169.254", pfx("169.254.169.254/32"), false},
		{"fd00:ec2::254", pfx("fd00::/8"), true},
		{"fd00:ec2::254", pfx("fd00:ec2::254/128"), false},
		{"::a9fe:a9fe", pfx("169.254.0.0/16"), true}, // compatible form needs its own entry
		{"93.184.216.34", nil, false},
		// The unspecified addresses reach this host: nothing opens them,
		// though the rest of their blocks opens as usual.
		{"0.0.0.0", pfx("0.0.0.0/8"), true},
		{"0.0.0.0", pfx("0.0.0.0/1"), true},
		{"0.0.0.0", pfx("0.0.0.0/32"), true},
		{"::ffff:0.0.0.0", pfx("0.0.0.0/8"), true},
		{"0.0.0.1", pfx("0.0.0.0/8"), false},
		{"::", pfx("::/8"), true},
		{"::", pfx("::/128"), true},
		// A range of a translator's block (NAT64, 6to4, Teredo) does not
		// open the metadata service, or the unspecified address, through
		// it; naming the address exactly does; other addresses open.
		{"64:ff9b::a9fe:a9fe", pfx("64:ff9b::/96"), true},
		{"64:ff9b::a9fe:a9fe", pfx("64:ff9b::a9fe:a9fe/128"), false},
		{"64:ff9b::808:808", pfx("64:ff9b::/96"), false},
		{"64:ff9b:1:a9fe:a9:fe00::", pfx("64:ff9b:1::/48"), true},
		{"2002:a9fe:a9fe::1", pfx("2002::/16"), true},
		{"2002:808:808::1", pfx("2002::/16"), false},
		{"64:ff9b::", pfx("64:ff9b::/96"), true},
	}
	for _, tc := range cases {
		v := Check(netip.MustParseAddr(tc.addr), tc.allow)
		if v.Denied != tc.denied {
			t.Errorf("Check(%s, %v) denied = %v (%s), want %v", tc.addr, tc.allow, v.Denied, v.Reason(), tc.denied)
		}
		if v.Reason() == "" {
			t.Errorf("Check(%s) has no reason", tc.addr)
		}
		if v.Range.Never && !strings.Contains(v.Reason(), "no allow_cidrs entry opens it") {
			t.Errorf("Check(%s) reason %q does not say that nothing opens it", tc.addr, v.Reason())
		}
	}
}

func TestEmbedded4(t *testing.T) {
	for in, want := range map[string]string{
		"::ffff:127.0.0.1":                     "127.0.0.1",
		"::a9fe:a9fe":                          "169.254.169.254",
		"64:ff9b::a9fe:a9fe":                   "169.254.169.254",
		"64:ff9b:1:a9fe:a9:fe00::":             "169.254.169.254",
		"2002:a9fe:a9fe::1":                    "169.254.169.254",
		"2001:0:4136:e378:8000:63bf:3fff:fdd2": "192.0.2.45", // RFC 4380 example
	} {
		got, ok := Embedded4(netip.MustParseAddr(in))
		if !ok || got.String() != want {
			t.Errorf("Embedded4(%s) = %v, %v; want %s", in, got, ok, want)
		}
	}
	if _, ok := Embedded4(netip.MustParseAddr("2606:2800::1")); ok {
		t.Error("Embedded4 found an IPv4 address in a plain global address")
	}
	v := Check(netip.MustParseAddr("2002:a9fe:a9fe::1"), nil)
	if !strings.Contains(v.Reason(), "169.254.169.254") {
		t.Errorf("reason %q does not name the embedded address", v.Reason())
	}
}

func TestDeniedName(t *testing.T) {
	for name, want := range map[string]bool{
		"localhost": true, "a.localhost": true, "metadata.google.internal": true, "metadata": true,
		"instance-data": true, "example.com": false, "localhost.example.com": false, "notlocalhost": false,
	} {
		if _, got := DeniedName(name); got != want {
			t.Errorf("DeniedName(%q) = %v, want %v", name, got, want)
		}
	}
}

// Every range of the table must be in canonical form, so that a typo does
// not silently widen or narrow it.
func TestRangesCanonical(t *testing.T) {
	for _, r := range Ranges {
		if r.Prefix.Masked() != r.Prefix || r.Name == "" {
			t.Errorf("range %v (%q) is not canonical or has no name", r.Prefix, r.Name)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	a := netip.MustParseAddr("93.184.216.34")
	for b.Loop() {
		Check(a, nil)
	}
}
