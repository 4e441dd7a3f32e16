package egress_test

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/sandboxd/sandboxd/egress"
)

// hostInterfaces is the fake host of the tests: loopback, an engine
// bridge's gateway, a LAN address and a link-local IPv6 address.
func hostInterfaces() ([]netip.Addr, error) {
	var out []netip.Addr
	for _, s := range []string{"127.0.0.1", "::1", "172.30.0.1", "192.168.1.10", "fe80::1%eth0", "2001:4860::10"} {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

func addrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func TestListenersReaches(t *testing.T) {
	var reads atomic.Int32
	l := &egress.Listeners{Interfaces: func() ([]netip.Addr, error) { reads.Add(1); return hostInterfaces() }}
	l.Add(addrPort("172.30.0.1:3128"), addrPort("127.0.0.1:8080"), addrPort("0.0.0.0:9090"), addrPort("[::]:9091"))
	for _, tc := range []struct {
		dst  string
		want string // the listener reached; "" none
	}{
		// Exact addresses.
		{"127.0.0.1:8080", "127.0.0.1:8080"},
		{"[::ffff:127.0.0.1]:8080", "127.0.0.1:8080"},
		{"172.30.0.1:3128", "172.30.0.1:3128"},
		// A listener on one address receives nothing on another.
		{"127.0.0.2:8080", ""},
		{"[::1]:8080", ""},
		{"192.168.1.10:3128", ""},
		// The unspecified address is this host: it reaches any listener
		// at its port, whatever address that one is on.
		{"0.0.0.0:8080", "127.0.0.1:8080"},
		{"[::]:8080", "127.0.0.1:8080"},
		{"[::ffff:0.0.0.0]:8080", "127.0.0.1:8080"},
		{"0.0.0.0:3128", "172.30.0.1:3128"},
		// A listener on 0.0.0.0 is every local address at its port.
		{"127.0.0.1:9090", "0.0.0.0:9090"},
		{"127.9.9.9:9090", "0.0.0.0:9090"},
		{"[::1]:9090", "0.0.0.0:9090"},
		{"172.30.0.1:9090", "0.0.0.0:9090"},
		{"192.168.1.10:9090", "0.0.0.0:9090"},
		{"[fe80::1%eth1]:9090", "0.0.0.0:9090"},
		{"[::ffff:192.168.1.10]:9090", "0.0.0.0:9090"},
		{"0.0.0.0:9090", "0.0.0.0:9090"},
		{"[::]:9090", "0.0.0.0:9090"},
		// ... and so is a listener on ::, IPv4 addresses included.
		{"192.168.1.10:9091", "[::]:9091"},
		{"[2001:4860::10]:9091", "[::]:9091"},
		{"127.0.0.1:9091", "[::]:9091"},
		// Addresses that are not the host's, and ports that are not ours.
		{"192.168.1.99:9090", ""},
		{"93.184.216.34:9090", ""},
		{"[2001:4860::11]:9091", ""},
		{"127.0.0.1:80", ""},
		{"0.0.0.0:80", ""},
	} {
		got, ok := l.Reaches(addrPort(tc.dst))
		if tc.want == "" {
			if ok {
				t.Errorf("%s reaches %s, want none", tc.dst, got)
			}
			continue
		}
		if !ok || got != addrPort(tc.want) {
			t.Errorf("%s reaches %v (%v), want %s", tc.dst, got, ok, tc.want)
		}
	}

	// The interfaces are read only for a port of a listener on an
	// unspecified address, and only when the address is not obviously
	// local.
	reads.Store(0)
	for _, dst := range []string{"93.184.216.34:80", "127.0.0.1:8080", "10.0.0.1:3128", "127.0.0.1:9090", "0.0.0.0:9090"} {
		l.Reaches(addrPort(dst))
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("the interfaces were read %d times for destinations that need no reading", n)
	}
	l.Reaches(addrPort("93.184.216.34:9090"))
	if n := reads.Load(); n != 1 {
		t.Errorf("the interfaces were read %d times for a destination on a wildcard port, want 1", n)
	}
}

// When the host's interfaces cannot be read, an address at the port of a
// listener on 0.0.0.0 is taken to be local: fail closed.
func TestListenersFailClosed(t *testing.T) {
	l := &egress.Listeners{Interfaces: func() ([]netip.Addr, error) { return nil, errors.New("netlink: permission denied") }}
	l.Add(addrPort("0.0.0.0:9090"))
	if _, ok := l.Reaches(addrPort("93.184.216.34:9090")); !ok {
		t.Error("with unreadable interfaces, an address at a wildcard listener's port is allowed")
	}
	if _, ok := l.Reaches(addrPort("93.184.216.34:80")); ok {
		t.Error("with unreadable interfaces, another port is refused")
	}
}

// An address added by two owners stays until both removed it.
func TestListenersAddRemove(t *testing.T) {
	l := &egress.Listeners{Interfaces: hostInterfaces}
	a := addrPort("172.30.0.1:3128")
	l.Add(a, addrPort("127.0.0.1:8080"))
	l.Add(addrPort("[::ffff:172.30.0.1]:3128"), netip.AddrPort{})
	if got := l.List(); !slices.Equal(got, []netip.AddrPort{addrPort("127.0.0.1:8080"), a}) {
		t.Fatalf("List = %v", got)
	}
	l.Remove(a)
	if _, ok := l.Reaches(a); !ok {
		t.Fatal("an address added twice is gone after one Remove")
	}
	l.Remove(a)
	if _, ok := l.Reaches(a); ok {
		t.Fatal("an address is still recorded after as many Removes as Adds")
	}
	l.Remove(a) // one too many: no effect
	if got := l.List(); !slices.Equal(got, []netip.AddrPort{addrPort("127.0.0.1:8080")}) {
		t.Fatalf("List = %v", got)
	}
}

// The zero value reads the real interfaces: each of the host's addresses
// is local to a wildcard listener, a public address is not.
func TestListenersZeroValue(t *testing.T) {
	var l egress.Listeners
	l.Add(addrPort("[::]:9090"))
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range ifaddrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, _ := netip.AddrFromSlice(n.IP)
		if _, ok := l.Reaches(netip.AddrPortFrom(ip, 9090)); !ok {
			t.Errorf("the host's address %s does not reach a listener on [::]", ip)
		}
	}
	if _, ok := l.Reaches(addrPort("93.184.216.34:9090")); ok {
		t.Error("a public address reaches a listener on [::]")
	}
}
