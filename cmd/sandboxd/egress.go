package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/egress/proxy"
	"github.com/sandboxd/sandboxd/internal/metrics"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/runner"
)

// egressSide runs what networked sandboxes need: the instance's internal
// egress network, the firewall that closes the host to it except the
// proxy's port, and the egress proxy listening on the network's gateway.
// It is brought up when the loaded profiles first need it (at start, or at
// a reload that adds a networked exec profile) and torn down at shutdown.
// When it cannot come up, networked profiles are refused (503) and the
// rest of the service runs on.
type egressSide struct {
	eng      *runner.Runner
	cur      *atomic.Pointer[profiles.Set]
	log      *slog.Logger
	instance string
	port     int
	// resolver resolves names for the proxy's decisions; nil means the
	// system resolver. Tests set a fake.
	resolver egress.Resolver
	// approvals answers for hosts no rule matches under profiles in
	// approve mode; nil denies them.
	approvals egress.Approvals
	// metrics counts egress decisions (sandboxd_egress_decisions_total).
	metrics *metrics.Metrics
	// self is sandboxd's own listeners, shared with /fetch's checker: the
	// proxy's checker refuses them all, and the proxy's address is added
	// to them before it serves.
	self      *egress.Listeners
	proxyAddr netip.AddrPort
	// record, once set, keeps the proxy's decisions for the audit record
	// of the exec they belong to (api.Server.RecordEgress).
	record atomic.Pointer[func(*egress.Decision)]
	// ca is the proxy's CA for the HTTPS it reads to inject secrets (nil:
	// no secrets file); rootCAs verifies upstreams (nil: system roots).
	ca      *secrets.CA
	rootCAs *x509.CertPool

	mu      sync.Mutex
	up      bool
	lastErr string
	fw      *runner.Firewall
	proxy   *proxy.Proxy
	served  chan struct{}
}

// needsEgress reports whether any exec profile of set has network egress.
func needsEgress(set *profiles.Set) bool {
	for _, p := range set.Exec {
		if runner.Networked(p) {
			return true
		}
	}
	return false
}

// ensure brings the egress side up when set needs it and it is not up.
// Failures are logged (once per distinct error) and leave it down.
func (e *egressSide) ensure(ctx context.Context, set *profiles.Set) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.up || !needsEgress(set) {
		return
	}
	if err := e.startLocked(ctx); err != nil {
		if msg := err.Error(); msg != e.lastErr {
			e.lastErr = msg
			e.log.Error("the egress network could not be set up; execs with networked profiles answer 503 UNAVAILABLE until a profile reload succeeds in setting it up", "err", msg)
		}
		return
	}
	e.lastErr = ""
}

// removeLeftovers removes an egress network and firewall chain of this
// instance that an earlier process left, when the profiles need none.
func (e *egressSide) removeLeftovers(ctx context.Context, set *profiles.Set) {
	if needsEgress(set) {
		return // ensure reuses them
	}
	if err := e.eng.RemoveEgressNetwork(ctx); err != nil {
		e.log.Warn("removing a leftover egress network failed", "err", err)
	}
	for _, bin := range []string{"iptables", "ip6tables"} {
		_ = runner.RemoveChain(bin, runner.FirewallChain(e.instance))
	}
}

func (e *egressSide) startLocked(ctx context.Context) (err error) {
	n, err := e.eng.EnsureEgressNetwork(ctx)
	if err != nil {
		return err
	}
	if err := n.CheckBridge(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(n.Gateway, uint16(e.port)).String())
	if err != nil {
		return fmt.Errorf("the egress proxy cannot listen on the egress network's gateway: %w", err)
	}
	n.ProxyPort = uint16(ln.Addr().(*net.TCPAddr).Port)
	fw := runner.NewFirewall(e.instance, n)
	defer func() {
		if err != nil {
			ln.Close()
			_ = fw.Remove()
		}
	}()
	warning, err := fw.Install()
	if err != nil {
		return fmt.Errorf("closing the host to the egress network (iptables, needs root or CAP_NET_ADMIN in the host's network namespace): %w", err)
	}
	if warning != "" {
		e.log.Warn("egress firewall", "warning", warning)
	}
	px, err := proxy.New(proxy.Config{
		Lookup:  e.lookup,
		Checker: &egress.Checker{Resolver: e.resolver, Approvals: e.approvals, Observe: e.observe, Self: e.self},
		Log:     e.log,
		Secrets: e.secretsOf,
		CA:      e.ca,
		RootCAs: e.rootCAs,
	})
	if err != nil {
		return err
	}
	// Recorded before the proxy serves: connections queue on the listener
	// already, and a fetch must not reach it in between.
	e.proxyAddr = n.ProxyAddr()
	e.self.Add(e.proxyAddr)
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := px.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error("the egress proxy stopped", "err", err)
		}
	}()
	e.fw, e.proxy, e.served, e.up = fw, px, served, true
	e.eng.SetEgressNetwork(n)
	e.log.Info("egress network up", "network", n.Name, "bridge", n.Bridge, "subnet", n.Subnet.String(),
		"proxy", n.ProxyAddr().String(), "firewall_chain", fw.Chain)
	return nil
}

// count counts a decision of the proxy or of /fetch.
func (e *egressSide) count(d *egress.Decision) {
	if e.metrics != nil {
		e.metrics.EgressDecisions.WithLabelValues(d.Profile, d.Verdict(), string(d.Code)).Inc()
	}
}

// observe counts a decision of the proxy and keeps it for its exec's
// audit record.
func (e *egressSide) observe(d *egress.Decision) {
	e.count(d)
	if f := e.record.Load(); f != nil {
		(*f)(d)
	}
}

// lookup identifies a proxy client by its source address: the run that
// holds the address and the egress profile its exec profile names, read
// from the profile set in force now (a reload that tightens a profile
// applies to the next request). An egress profile that is gone yields no
// profile, which the proxy denies.
func (e *egressSide) lookup(addr netip.Addr) (string, *egress.Profile, bool) {
	id, name, ok := e.eng.EgressClient(addr)
	if !ok {
		return "", nil, false
	}
	return id, e.cur.Load().Egress[name], true
}

// secretsOf gives the proxy the secrets of the run whose sandbox holds
// addr, when it is the client the proxy identified.
func (e *egressSide) secretsOf(addr netip.Addr, client string) *secrets.Run {
	id, run := e.eng.EgressSecrets(addr)
	if id != client {
		return nil
	}
	return run
}

// stop closes the proxy and removes the firewall rules. Call it after the
// runner closed (the runner removes the network with its containers).
func (e *egressSide) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.up {
		return
	}
	e.eng.SetEgressNetwork(nil)
	_ = e.proxy.Close()
	<-e.served
	e.self.Remove(e.proxyAddr)
	if err := e.fw.Remove(); err != nil {
		e.log.Error("removing the egress firewall rules failed", "chain", e.fw.Chain, "err", err)
	}
	e.up = false
}

// proxyPortFlag checks the --egress-port value.
func proxyPortFlag(v int) error {
	if v < 0 || v > 65535 {
		return errors.New("--egress-port must be 0 (any free port) to 65535, not " + strconv.Itoa(v))
	}
	return nil
}
