// Package netpolicy classifies IP addresses and host names that egress must
// never reach unless a profile opens them explicitly: private, loopback,
// link-local, CGNAT, multicast, unspecified, documentation and reserved
// ranges of IPv4 and IPv6, the IPv6 ranges that embed an IPv4 address
// (IPv4-compatible, NAT64, 6to4, Teredo), and the cloud metadata services,
// whose addresses are denied even where they are public.
//
// The tables go further than smokescreen's: all of 0.0.0.0/8, 240.0.0.0/4,
// 198.18.0.0/15, 192.0.0.0/24, the TEST-NETs, ::/96, 64:ff9b:1::/48,
// fec0::/10 and 2001:db8::/32 are denied, and so is every IPv6 address
// outside global unicast 2000::/3.
package netpolicy

import (
	"fmt"
	"net/netip"
	"strings"
)

// Range is one always-denied block of addresses.
type Range struct {
	Prefix netip.Prefix
	// Name says what the block is, for decisions and logs.
	Name string
	// Metadata marks cloud metadata services. Such an address is opened
	// only by an allow_cidrs entry that names exactly that address
	// (a /32 or /128), never by a wider block around it.
	Metadata bool
	// Embeds4 marks IPv6 blocks that carry an IPv4 address inside.
	Embeds4 bool
	// Never marks addresses no allow_cidrs entry opens: the unspecified
	// addresses, which a connection turns into the host itself.
	Never bool
}

func r(cidr, name string) Range { return Range{Prefix: netip.MustParsePrefix(cidr), Name: name} }

func metadata(cidr, name string) Range {
	x := r(cidr, name)
	x.Metadata = true
	return x
}

// never is a block no allow_cidrs entry opens.
func never(cidr, name string) Range {
	x := r(cidr, name)
	x.Never = true
	return x
}

func embeds(cidr, name string) Range {
	x := r(cidr, name)
	x.Embeds4 = true
	return x
}

// Ranges lists the always-denied blocks. More specific entries come first,
// so that the first match names an address best (169.254.169.254 is
// "cloud metadata", not just "link-local").
var Ranges = []Range{
	// Cloud metadata services, including the public ones.
	metadata("169.254.169.254/32", "cloud metadata service (AWS, GCP, Azure, OpenStack and others)"),
	metadata("169.254.170.2/32", "cloud metadata service (AWS ECS task credentials)"),
	metadata("169.254.169.253/32", "cloud metadata service (AWS VPC DNS)"),
	metadata("169.254.169.123/32", "cloud metadata service (AWS time sync)"),
	metadata("100.100.100.200/32", "cloud metadata service (Alibaba Cloud)"),
	metadata("168.63.129.16/32", "cloud metadata service (Azure wire server)"),
	metadata("fd00:ec2::254/128", "cloud metadata service (AWS IMDS over IPv6)"),
	metadata("fd00:ec2::23/128", "cloud metadata service (AWS VPC DNS over IPv6)"),

	// The unspecified addresses. Connecting to one reaches the host
	// itself (Linux dials loopback instead), so it is never a remote
	// destination: no profile opens them, whatever its allow_cidrs say.
	never("0.0.0.0/32", "unspecified 0.0.0.0 (a connection to it reaches this host)"),
	never("::/128", "unspecified :: (a connection to it reaches this host)"),

	// IPv4 (RFC 6890 and the IANA special-purpose registry).
	r("0.0.0.0/8", "\"this network\" 0.0.0.0/8"),
	r("10.0.0.0/8", "private network 10.0.0.0/8"),
	r("100.64.0.0/10", "carrier-grade NAT 100.64.0.0/10"),
	r("127.0.0.0/8", "loopback 127.0.0.0/8"),
	r("169.254.0.0/16", "link-local 169.254.0.0/16"),
	r("172.16.0.0/12", "private network 172.16.0.0/12"),
	r("192.0.0.0/24", "IETF protocol assignments 192.0.0.0/24"),
	r("192.0.2.0/24", "documentation TEST-NET-1 192.0.2.0/24"),
	r("192.31.196.0/24", "AS112 192.31.196.0/24"),
	r("192.52.193.0/24", "AMT 192.52.193.0/24"),
	r("192.88.99.0/24", "6to4 relay anycast 192.88.99.0/24"),
	r("192.168.0.0/16", "private network 192.168.0.0/16"),
	r("192.175.48.0/24", "AS112 192.175.48.0/24"),
	r("198.18.0.0/15", "benchmarking 198.18.0.0/15"),
	r("198.51.100.0/24", "documentation TEST-NET-2 198.51.100.0/24"),
	r("203.0.113.0/24", "documentation TEST-NET-3 203.0.113.0/24"),
	r("224.0.0.0/4", "multicast 224.0.0.0/4"),
	r("255.255.255.255/32", "broadcast 255.255.255.255"),
	r("240.0.0.0/4", "reserved 240.0.0.0/4"),

	r("::1/128", "loopback ::1"),

	// IPv6 blocks that embed an IPv4 address: reaching them may reach
	// that IPv4 address through a translator or tunnel.
	embeds("::/96", "IPv4-compatible IPv6 ::/96"),
	embeds("::ffff:0:0/96", "IPv4-mapped IPv6 ::ffff:0:0/96"),
	embeds("::ffff:0:0:0/96", "IPv4-translated IPv6 ::ffff:0:0:0/96"),
	embeds("64:ff9b::/96", "NAT64 64:ff9b::/96"),
	embeds("64:ff9b:1::/48", "local-use NAT64 64:ff9b:1::/48"),
	embeds("2002::/16", "6to4 2002::/16"),
	embeds("2001::/32", "Teredo 2001::/32"),

	// Other IPv6.
	r("100::/64", "discard-only 100::/64"),
	r("2001::/23", "IETF protocol assignments 2001::/23"),
	r("2001:db8::/32", "documentation 2001:db8::/32"),
	r("3fff::/20", "documentation 3fff::/20"),
	r("5f00::/16", "SRv6 SIDs 5f00::/16"),
	r("fc00::/7", "unique local fc00::/7"),
	r("fe80::/10", "link-local fe80::/10"),
	r("fec0::/10", "site-local fec0::/10"),
	r("ff00::/8", "multicast ff00::/8"),
}

// notGlobal6 names IPv6 addresses outside global unicast, which are all
// denied even when no entry of Ranges names them.
var notGlobal6 = Range{Prefix: netip.MustParsePrefix("::/0"), Name: "IPv6 outside global unicast 2000::/3"}

var global6 = netip.MustParsePrefix("2000::/3")

// Classify returns the always-denied block a belongs to, if any. An
// IPv4-mapped IPv6 address (::ffff:a.b.c.d) is the IPv4 address for every
// socket that reaches it, and is classified as that IPv4 address.
func Classify(a netip.Addr) (Range, bool) {
	a = a.WithZone("")
	if a.Is4In6() {
		a = a.Unmap()
	}
	for _, x := range Ranges {
		if x.Prefix.Contains(a) {
			return x, true
		}
	}
	if a.Is6() && !global6.Contains(a) {
		return notGlobal6, true
	}
	return Range{}, false
}

// Verdict is the outcome of Check for one address.
type Verdict struct {
	Addr netip.Addr
	// Denied is true when the address must not be dialled.
	Denied bool
	// Range is the always-denied block the address is in, if any (also
	// when an allow CIDR opened it).
	Range Range
	// OpenedBy is the allow CIDR that opened Range, if any.
	OpenedBy netip.Prefix
}

// Reason says why an address is denied or opened, for decisions and logs.
func (v Verdict) Reason() string {
	switch {
	case v.Denied:
		s := fmt.Sprintf("address %s is in the always-denied range %s", v.Addr, v.Range.Name)
		if e, ok := Embedded4(v.Addr); ok {
			s += fmt.Sprintf(" (it embeds the IPv4 address %s)", e)
		}
		if v.Range.Never {
			return s + "; no allow_cidrs entry opens it"
		}
		if v.Range.Metadata {
			return s + "; only an allow_cidrs entry naming exactly " + single(v.Addr) + " opens it"
		}
		return s + "; a profile opens it only by naming it in allow_cidrs"
	case v.OpenedBy.IsValid():
		return fmt.Sprintf("address %s is in %s, opened by allow_cidrs entry %s", v.Addr, v.Range.Name, v.OpenedBy)
	}
	return fmt.Sprintf("address %s is public", v.Addr)
}

func single(a netip.Addr) string {
	return netip.PrefixFrom(a, a.BitLen()).String()
}

// Check decides one address against the always-denied blocks and a
// profile's allow CIDRs. An allow CIDR opens an always-denied address when
// it contains it, except a metadata address, which only a CIDR naming
// exactly that address opens, and an unspecified address, which none
// opens.
func Check(a netip.Addr, allow []netip.Prefix) Verdict {
	a = a.WithZone("")
	if a.Is4In6() {
		a = a.Unmap()
	}
	v := Verdict{Addr: a}
	rng, denied := Classify(a)
	if !denied {
		return v
	}
	v.Range = rng
	if rng.Never {
		v.Denied = true
		return v
	}
	// An IPv6 address that embeds an IPv4 one (NAT64, 6to4, Teredo, ...)
	// reaches that address through a translator: a range that opens the
	// IPv6 block does not open a metadata service, or what is never
	// opened, inside it; only naming the address exactly does.
	exact := rng.Metadata
	if v4, ok := Embedded4(a); ok {
		if r4, denied := Classify(v4); denied && (r4.Metadata || r4.Never) {
			v.Range = r4
			exact = true
		}
	}
	for _, p := range allow {
		if !p.Contains(a) {
			continue
		}
		if exact && p.Bits() != a.BitLen() {
			continue
		}
		v.OpenedBy = p
		return v
	}
	v.Denied = true
	return v
}

var (
	compat     = netip.MustParsePrefix("::/96")
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour  = netip.MustParsePrefix("2002::/16")
	teredo     = netip.MustParsePrefix("2001::/32")
)

// Embedded4 returns the IPv4 address inside an IPv6 address of a block that
// embeds one (IPv4-mapped or -compatible, NAT64, 6to4, Teredo), for
// messages that say what the address really points at.
func Embedded4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	var v4 [4]byte
	switch {
	case a.Is4In6(), compat.Contains(a), nat64.Contains(a):
		copy(v4[:], b[12:])
	case nat64Local.Contains(a):
		// RFC 6052 /48: the address sits in bytes 6-7 and 9-10 (byte 8 is u).
		v4 = [4]byte{b[6], b[7], b[9], b[10]}
	case sixToFour.Contains(a):
		copy(v4[:], b[2:6])
	case teredo.Contains(a):
		// Teredo: the client's address is stored inverted in the last 4 bytes.
		for i := range v4 {
			v4[i] = ^b[12+i]
		}
	default:
		return netip.Addr{}, false
	}
	return netip.AddrFrom4(v4), true
}

// deniedNames are names that point at the host itself or at a metadata
// service; they are refused before any lookup.
var deniedNames = map[string]string{
	"localhost":                    "localhost names the machine itself",
	"metadata":                     "a cloud metadata service name",
	"metadata.google.internal":     "the GCP metadata service name",
	"metadata.goog":                "the GCP metadata service name",
	"metadata.azure.com":           "the Azure metadata service name",
	"instance-data":                "the AWS metadata service name",
	"instance-data.ec2.internal":   "the AWS metadata service name",
	"metadata.tencentyun.com":      "the Tencent Cloud metadata service name",
	"metadata.platformequinix.com": "the Equinix Metal metadata service name",
}

// DeniedName reports whether a normalised host name is refused by name,
// whatever it resolves to: localhost and its subdomains (RFC 6761) and the
// cloud metadata service names. It says why.
func DeniedName(host string) (string, bool) {
	if why, ok := deniedNames[host]; ok {
		return why, true
	}
	if strings.HasSuffix(host, ".localhost") {
		return "*.localhost names the machine itself (RFC 6761)", true
	}
	return "", false
}
