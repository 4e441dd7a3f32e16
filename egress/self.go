package egress

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
)

// Listeners is the one record of every address sandboxd listens on: the
// API (which serves /metrics too), the egress proxy, and any other
// listener. Every Checker of the process consults the same Listeners
// (Checker.Self), so the proxy and POST /fetch refuse the same addresses: a
// request must never loop back into sandboxd, whatever allow_cidrs opens.
//
// A listener on an unspecified address (0.0.0.0 or ::) stands for every
// local address at its port: loopback, the unspecified address itself and
// every address of the host's interfaces, read when a decision needs them
// (interfaces come and go, an engine's bridges among them). Either family's
// unspecified address covers both families: a Go listener on ":port" is
// dual-stack, and over-refusing one of our own ports is the safe mistake.
//
// The zero value is ready to use and safe for concurrent use.
type Listeners struct {
	// Interfaces lists the host's interface addresses; nil means
	// net.InterfaceAddrs. Tests set a fake.
	Interfaces func() ([]netip.Addr, error)

	mu sync.RWMutex
	// refs counts the Adds of each address not yet Removed: two owners
	// (the egress side and the proxy's Serve) may record the same one.
	refs map[netip.AddrPort]int
}

// canonical is the form addresses are compared in: IPv4-mapped addresses
// unmapped, zones dropped (a zone selects an interface, not an address).
func canonical(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap().WithZone(""), a.Port())
}

// Add records addresses sandboxd listens on. An address added twice must
// be removed twice.
func (l *Listeners) Add(addrs ...netip.AddrPort) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs == nil {
		l.refs = make(map[netip.AddrPort]int)
	}
	for _, a := range addrs {
		if a.IsValid() {
			l.refs[canonical(a)]++
		}
	}
}

// Remove forgets one Add of each address.
func (l *Listeners) Remove(addrs ...netip.AddrPort) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range addrs {
		a = canonical(a)
		if l.refs[a] <= 1 {
			delete(l.refs, a)
		} else {
			l.refs[a]--
		}
	}
}

// List returns the recorded addresses, sorted.
func (l *Listeners) List() []netip.AddrPort {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]netip.AddrPort, 0, len(l.refs))
	for a := range l.refs {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return out
}

// onPort returns the recorded listeners at port.
func (l *Listeners) onPort(port uint16) []netip.AddrPort {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []netip.AddrPort
	for a := range l.refs {
		if a.Port() == port {
			out = append(out, a)
		}
	}
	return out
}

// Reaches reports whether a connection to dst would reach one of
// sandboxd's listeners, and which. dst reaches a listener at its port when
// it is the listener's address, when it is unspecified (connecting to
// 0.0.0.0 or :: reaches the host itself: Linux turns it into loopback),
// or when the listener is on an unspecified address and dst is local. It
// reads the host's interfaces only when a listener on an unspecified
// address has dst's port; when they cannot be read, dst counts as local
// (fail closed).
func (l *Listeners) Reaches(dst netip.AddrPort) (netip.AddrPort, bool) {
	dst = canonical(dst)
	ours := l.onPort(dst.Port())
	if len(ours) == 0 {
		return netip.AddrPort{}, false
	}
	slices.SortFunc(ours, func(a, b netip.AddrPort) int { return a.Compare(b) })
	var wildcard netip.AddrPort
	for _, s := range ours {
		if s.Addr() == dst.Addr() || dst.Addr().IsUnspecified() {
			return s, true
		}
		if s.Addr().IsUnspecified() && !wildcard.IsValid() {
			wildcard = s
		}
	}
	if !wildcard.IsValid() {
		return netip.AddrPort{}, false
	}
	if dst.Addr().IsLoopback() || l.isInterfaceAddr(dst.Addr()) {
		return wildcard, true
	}
	return netip.AddrPort{}, false
}

// isInterfaceAddr reports whether a is an address of one of the host's
// interfaces; true when they cannot be read.
func (l *Listeners) isInterfaceAddr(a netip.Addr) bool {
	list := l.Interfaces
	if list == nil {
		list = hostAddrs
	}
	addrs, err := list()
	if err != nil {
		return true
	}
	for _, x := range addrs {
		if x.Unmap().WithZone("") == a {
			return true
		}
	}
	return false
}

// hostAddrs lists the addresses of the host's interfaces.
func hostAddrs() ([]netip.Addr, error) {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing the host's interface addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(ifaddrs))
	for _, a := range ifaddrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}
