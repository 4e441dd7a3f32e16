// Package egresstest holds test doubles for egress: a resolver that answers
// from a table and never queries real DNS, and a loopback upstream.
package egresstest

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"sync"
)

// Resolver answers lookups from Names. A name that is not in Names is
// NXDOMAIN; a name in Hang blocks until the context ends. It records every
// lookup, so tests can assert that a host was never resolved, or resolved
// exactly once. Safe for concurrent use.
type Resolver struct {
	mu    sync.Mutex
	Names map[string][]netip.Addr
	Hang  map[string]bool
	calls []string
}

// NewResolver returns a resolver for names given as name -> addresses.
func NewResolver(names map[string][]string) *Resolver {
	r := &Resolver{Names: make(map[string][]netip.Addr), Hang: make(map[string]bool)}
	for n, addrs := range names {
		r.Set(n, addrs...)
	}
	return r
}

// Set makes name resolve to addrs (none: NXDOMAIN).
func (r *Resolver) Set(name string, addrs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []netip.Addr
	for _, a := range addrs {
		out = append(out, netip.MustParseAddr(a))
	}
	r.Names[name] = out
}

// LookupNetIP implements egress.Resolver.
func (r *Resolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	r.calls = append(r.calls, host)
	addrs, ok := r.Names[host]
	hang := r.Hang[host]
	r.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, &net.DNSError{Err: "i/o timeout", Name: host, IsTimeout: true}
	}
	if !ok || len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, a := range addrs {
		switch {
		case network == "ip4" && !a.Is4():
		case network == "ip6" && !a.Is6():
		default:
			out = append(out, a)
		}
	}
	return out, nil
}

// Calls returns the names looked up so far, in order.
func (r *Resolver) Calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// Reset forgets the recorded lookups.
func (r *Resolver) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = nil
}
