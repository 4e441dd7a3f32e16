package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/sandboxd/sandboxd/egress/netpolicy"
)

// ErrNotAllowed is returned by Dialer.Dial for a decision that does not
// allow a connection.
var ErrNotAllowed = errors.New("egress: the decision does not allow a connection")

// Dialer connects to the address a Decision checked, and to nothing else:
// it dials the literal address (no name, so no second lookup, so DNS
// rebinding gets nothing), checks it again against the profile's address
// policy and sandboxd's own listeners, and refuses a socket whose peer is
// anything but that address.
type Dialer struct {
	// Checker supplies sandboxd's own listeners (Checker.Self). Required.
	Checker *Checker
	// Control, when set, runs after the built-in check on the raw socket
	// (tests use it to see what is dialled).
	Control func(network, address string, c syscall.RawConn) error
}

// Dial connects to d.Dial within the profile's connect timeout (and ctx).
func (dl *Dialer) Dial(ctx context.Context, d *Decision) (net.Conn, error) {
	if d == nil || !d.Allow || !d.Dial.IsValid() || d.profile == nil || d.profile.compiled == nil {
		return nil, ErrNotAllowed
	}
	target := d.Dial
	if dl.Checker != nil {
		if own, ok := dl.Checker.self(target.Addr(), target.Port()); ok {
			return nil, fmt.Errorf("%w: %s", ErrNotAllowed, selfReason(target, own))
		}
	}
	if v := netpolicy.Check(target.Addr(), d.profile.compiled.cidrs); v.Denied {
		return nil, fmt.Errorf("%w: %s", ErrNotAllowed, v.Reason())
	}
	nd := net.Dialer{
		Timeout: d.profile.ConnectTimeout,
		Control: func(network, address string, c syscall.RawConn) error {
			got, err := netip.ParseAddrPort(address)
			if err != nil || netip.AddrPortFrom(got.Addr().Unmap(), got.Port()) != target {
				return fmt.Errorf("%w: refusing to connect to %s, the checked address is %s", ErrNotAllowed, address, target)
			}
			if dl.Control != nil {
				return dl.Control(network, address, c)
			}
			return nil
		},
	}
	network := "tcp4"
	if target.Addr().Is6() {
		network = "tcp6"
	}
	conn, err := nd.DialContext(ctx, network, target.String())
	if err != nil {
		return nil, fmt.Errorf("connecting to %s (%s): %w", d.Host, target, err)
	}
	return conn, nil
}
