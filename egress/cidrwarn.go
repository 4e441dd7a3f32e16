package egress

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/sandboxd/sandboxd/egress/netpolicy"
)

// Warnings returns what deserves a second look in a compiled profile, as
// warnings that do not stop it from loading: every allow_cidrs entry,
// with what it opens of the always-denied ranges (the cloud metadata
// service above all) or that it opens nothing. Path names the entry
// ("allow_cidrs[0]"). A profile that did not compile has none.
func (p *Profile) Warnings() []*FieldError {
	if !p.Compiled() {
		return nil
	}
	var out []*FieldError
	for i, s := range p.AllowCIDRs {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			continue // Compile refuses it; unreachable once compiled
		}
		out = append(out, fieldErr(fmt.Sprintf("allow_cidrs[%d]", i), "allow_cidrs[%d] %s %s", i, pfx, cidrOpens(pfx)))
	}
	return out
}

// maxNamed bounds the ranges a warning names one by one.
const maxNamed = 4

// cidrOpens says what the allow_cidrs entry pfx opens, as netpolicy.Check
// applies it: the always-denied ranges it overlaps, except the cloud
// metadata addresses, which it opens only when it is exactly one of them.
func cidrOpens(pfx netip.Prefix) string {
	var metaOpen, opened []string
	var metaShut []netip.Addr
	for _, r := range netpolicy.Ranges {
		switch {
		case !pfx.Overlaps(r.Prefix):
		case r.Metadata && pfx == r.Prefix:
			metaOpen = append(metaOpen, r.Name)
		case r.Metadata:
			metaShut = append(metaShut, r.Prefix.Addr())
		default:
			opened = append(opened, overlap(pfx, r))
		}
	}
	if len(metaOpen) > 0 {
		return fmt.Sprintf("opens the %s at %s: a host name the rules allow that resolves to it (a name under a wildcard rule, whose DNS its owner controls) reaches the instance's metadata and credentials; name it only if the sandboxes must reach it",
			metaOpen[0], pfx.Addr())
	}
	if len(opened) == 0 {
		if r, denied := netpolicy.Classify(pfx.Addr()); denied {
			opened = append(opened, overlap(pfx, r))
		}
	}
	if len(opened) == 0 {
		return "opens nothing: no always-denied address is in it, and public addresses need no entry; remove it"
	}
	msg := "opens " + namedList(opened)
	if len(metaShut) > 0 {
		addrs := make([]string, len(metaShut))
		for i, a := range metaShut {
			addrs[i] = a.String()
		}
		msg += fmt.Sprintf("; the cloud metadata addresses in it (%s) stay denied: each opens only when named exactly, as %s",
			strings.Join(addrs, ", "), netip.PrefixFrom(metaShut[0], metaShut[0].BitLen()))
	}
	return msg
}

// overlap names what pfx opens of the always-denied range r, with what
// such addresses reach.
func overlap(pfx netip.Prefix, r netpolicy.Range) string {
	s := r.Name
	if pfx.Bits() > r.Prefix.Bits() {
		s = fmt.Sprintf("%s of %s", pfx, r.Name)
	}
	switch {
	case r.Embeds4:
		s += " (IPv6 addresses that embed IPv4 ones: every IPv4 address, private and loopback included, where the host routes them; the cloud metadata service and the unspecified address stay denied)"
	case strings.Contains(r.Name, "loopback"):
		s += " (services on the sandboxd host itself)"
	case strings.Contains(r.Name, "link-local"):
		s += " (services on the host's own network links)"
	case strings.Contains(r.Name, "private"), strings.Contains(r.Name, "unique local"), strings.Contains(r.Name, "carrier-grade"), strings.Contains(r.Name, "site-local"):
		s += " (hosts on internal networks)"
	}
	return s
}

// namedList joins the first maxNamed names and counts the rest.
func namedList(names []string) string {
	if len(names) <= maxNamed {
		return strings.Join(names, "; ")
	}
	return fmt.Sprintf("%s; and %d more always-denied ranges", strings.Join(names[:maxNamed], "; "), len(names)-maxNamed)
}
