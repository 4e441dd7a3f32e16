package runner

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/profiles"
)

// Sandboxes with network.
//
// A sandbox whose exec profile names an egress profile other than "none"
// joins the instance's egress network: an internal Docker bridge network
// (no route out, no masquerading) with inter-container traffic off, on
// which only sandboxd's egress proxy listens, at the network's gateway
// address. The container gets HTTP_PROXY and HTTPS_PROXY pointing there. The
// proxy learns which run a connection belongs to from its source address on
// that network (see EgressClient): the runner records each container's
// address when it starts and forgets it when the container is removed. The
// sandbox holds no capability, so it can neither change its address nor
// send spoofed packets. What the engine leaves open on such a network (the
// host's own addresses, DNS) is closed by the firewall (firewall.go).
//
// A sandbox under egress "none" keeps network mode none.

// ErrEgressUnavailable means a profile needs the egress network and it is
// not set up (sandboxd could not create it, install its firewall rules or
// listen on it). Such runs are refused; they never fall back to another
// network.
var ErrEgressUnavailable = errors.New("the egress network is not available")

// Docker bridge driver options of the egress network.
const (
	optICC        = "com.docker.network.bridge.enable_icc"
	optBridgeName = "com.docker.network.bridge.name"
	optMasquerade = "com.docker.network.bridge.enable_ip_masquerade"
)

// NoProxy is the NO_PROXY value of networked sandboxes: their own loopback.
const NoProxy = "localhost,127.0.0.1,::1"

// EgressNet is the internal network that networked sandboxes join.
type EgressNet struct {
	// Name and ID of the Docker network.
	Name, ID string
	// Bridge is the host interface of the network.
	Bridge string
	// Gateway is the host's address on the network: where the proxy
	// listens. Subnet holds the sandboxes' addresses.
	Gateway netip.Addr
	Subnet  netip.Prefix
	// ProxyPort is the port the proxy listens on at Gateway.
	ProxyPort uint16
}

// ProxyAddr is where sandboxes reach the proxy.
func (n *EgressNet) ProxyAddr() netip.AddrPort { return netip.AddrPortFrom(n.Gateway, n.ProxyPort) }

// proxyEnv is the environment a networked sandbox gets: the proxy for
// http and https in both spellings, and NO_PROXY for loopback. None of it
// is secret; the proxy identifies a sandbox by its address, not by
// anything it sends.
func (n *EgressNet) proxyEnv() []string {
	u := "http://" + n.ProxyAddr().String()
	return []string{
		"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u,
		"http_proxy=" + u, "https_proxy=" + u,
		"NO_PROXY=" + NoProxy, "no_proxy=" + NoProxy,
	}
}

// Networked reports whether sandboxes of profile p join the egress network.
func Networked(p *profiles.Exec) bool {
	return p.Egress != "" && p.Egress != profiles.DefaultEgress
}

// EgressNetworkName is the name of an instance's egress network.
func EgressNetworkName(instance string) string { return "sandboxd-egress-" + instance }

// instanceTag is a short, interface-name-safe tag of an instance: 11 hex
// digits of its sha256 (instance names in tests are free text).
func instanceTag(instance string) string {
	h := sha256.Sum256([]byte(instance))
	return hex.EncodeToString(h[:])[:11]
}

// EgressBridgeName is the host interface of an instance's egress network
// (15 characters, the limit for interface names).
func EgressBridgeName(instance string) string { return "sbx-" + instanceTag(instance) }

// netClient is a networked sandbox known to the proxy.
type netClient struct {
	execID, egress, cid string
	// run is the secrets of the run the sandbox serves (nil: none).
	run *secrets.Run
}

// egressState is the runner's part of the egress network: the network in
// use and the sandboxes on it by address.
type egressState struct {
	mu  sync.RWMutex
	net *EgressNet
	// owned is set once EnsureEgressNetwork made or adopted the network:
	// Close removes it.
	owned  bool
	byAddr map[netip.Addr]netClient
	byCID  map[string]netip.Addr
}

// SetEgressNetwork makes networked profiles run on n (nil: refuse them).
// Call it once the proxy listens on n and the firewall is installed.
func (r *Runner) SetEgressNetwork(n *EgressNet) {
	r.eg.mu.Lock()
	defer r.eg.mu.Unlock()
	r.eg.net = n
}

// EgressNetwork returns the egress network in use, or nil.
func (r *Runner) EgressNetwork() *EgressNet {
	r.eg.mu.RLock()
	defer r.eg.mu.RUnlock()
	return r.eg.net
}

// EgressClient tells the proxy which run a connection from addr belongs
// to: its exec id and the name of its exec profile's egress profile. ok is
// false for an address no running sandbox holds.
func (r *Runner) EgressClient(addr netip.Addr) (execID, egressProfile string, ok bool) {
	r.eg.mu.RLock()
	defer r.eg.mu.RUnlock()
	c, ok := r.eg.byAddr[addr.Unmap()]
	return c.execID, c.egress, ok
}

// registerClient records the address of a started networked sandbox
// (with its run's secrets, bound to execID). A later sandbox at the same
// address (the engine reuses addresses of removed containers) replaces an
// earlier one.
func (r *Runner) registerClient(addr netip.Addr, execID, egress, cid string, run *secrets.Run) {
	r.eg.mu.Lock()
	defer r.eg.mu.Unlock()
	if r.eg.byAddr == nil {
		r.eg.byAddr = make(map[netip.Addr]netClient)
		r.eg.byCID = make(map[string]netip.Addr)
	}
	if old, ok := r.eg.byAddr[addr]; ok {
		delete(r.eg.byCID, old.cid)
	}
	if run != nil {
		run.Bind(execID)
	}
	r.eg.byAddr[addr] = netClient{execID: execID, egress: egress, cid: cid, run: run}
	r.eg.byCID[cid] = addr
}

// bindSecrets gives a pooled networked sandbox (container cid), started
// before its job was known, the secrets of the job it takes, bound to the
// id the proxy knows it by (spec.ID, the pooled sandbox's own). Called
// before the job is handed over, so before any code runs.
func (r *Runner) bindSecrets(cid string, spec *Spec) {
	if spec.Secrets == nil {
		return
	}
	r.eg.mu.Lock()
	defer r.eg.mu.Unlock()
	addr, ok := r.eg.byCID[cid]
	if !ok {
		return // not networked, or gone: the proxy knows no such client
	}
	c := r.eg.byAddr[addr]
	spec.Secrets.Bind(c.execID)
	c.run = spec.Secrets
	r.eg.byAddr[addr] = c
}

// EgressSecrets tells the proxy the secrets of the run whose sandbox holds
// addr, and the exec id the sandbox is known by; nil when it has none.
func (r *Runner) EgressSecrets(addr netip.Addr) (execID string, run *secrets.Run) {
	r.eg.mu.RLock()
	defer r.eg.mu.RUnlock()
	c, ok := r.eg.byAddr[addr.Unmap()]
	if !ok {
		return "", nil
	}
	return c.execID, c.run
}

// unregisterClient forgets the address of container cid, if it still
// holds it. Called before the container is removed, on every path.
func (r *Runner) unregisterClient(cid string) {
	r.eg.mu.Lock()
	defer r.eg.mu.Unlock()
	addr, ok := r.eg.byCID[cid]
	if !ok {
		return
	}
	delete(r.eg.byCID, cid)
	if c := r.eg.byAddr[addr]; c.cid == cid {
		delete(r.eg.byAddr, addr)
	}
}

// egressClients returns how many networked sandboxes the proxy knows.
func (r *Runner) egressClients() int {
	r.eg.mu.RLock()
	defer r.eg.mu.RUnlock()
	return len(r.eg.byAddr)
}

// networkOptions adds the egress network to a container's configuration:
// the network instead of mode none, the proxy environment, the gateway as
// the only DNS server (the firewall drops DNS to it, so names outside the
// network never resolve) and IPv6 off (the network has none; this keeps
// link-local IPv6 from reaching the host past IPv4 rules).
func networkOptions(cfg *container.Config, hc *container.HostConfig, p *profiles.Exec, n *EgressNet) {
	cfg.NetworkDisabled = false
	cfg.Env = append(cfg.Env, n.proxyEnv()...)
	hc.NetworkMode = container.NetworkMode(n.Name)
	hc.DNS = []string{n.Gateway.String()}
	if p.Runtime != profiles.RuntimeRunsc {
		hc.Sysctls = map[string]string{
			"net.ipv6.conf.all.disable_ipv6":     "1",
			"net.ipv6.conf.default.disable_ipv6": "1",
		}
	}
}

// boxName is the container name of a new sandbox. A networked sandbox gets
// a random one: the engine's DNS on the network answers container names
// (and reverse lookups), so the name must not carry the exec id.
func boxName(spec *Spec) string {
	if !Networked(spec.Profile) {
		return "sandboxd-" + spec.ID
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "sandboxd-n-" + hex.EncodeToString(b[:])
}

// joinEgress records the address of a started networked container for the
// proxy. The launcher has no job yet, so no code has run.
func (r *Runner) joinEgress(ctx context.Context, spec *Spec, cid string, n *EgressNet) error {
	info, err := r.cli.ContainerInspect(ctx, cid)
	if err != nil {
		return fmt.Errorf("%w: inspecting a networked container: %v", ErrEngine, err)
	}
	var ep *network.EndpointSettings
	if info.NetworkSettings != nil {
		ep = info.NetworkSettings.Networks[n.Name]
	}
	if ep == nil {
		return fmt.Errorf("%w: the container did not join the egress network %s", ErrEngine, n.Name)
	}
	addr, err := netip.ParseAddr(ep.IPAddress)
	if err != nil || !n.Subnet.Contains(addr) {
		return fmt.Errorf("%w: the container's address %q is not in the egress network's %s", ErrEngine, ep.IPAddress, n.Subnet)
	}
	r.registerClient(addr, spec.ID, spec.Profile.Egress, cid, spec.Secrets)
	return nil
}

// EnsureEgressNetwork returns the instance's egress network, creating it
// when it does not exist. A network of that name left by an earlier
// process is reused when it has the settings below (labelled as ours,
// internal, inter-container traffic off, an IPv4 gateway); otherwise it is
// removed and made again. Remove the instance's leftover containers first
// (Cleanup), so that nothing is attached to it.
func (r *Runner) EnsureEgressNetwork(ctx context.Context) (*EgressNet, error) {
	name := EgressNetworkName(r.instance)
	if info, err := r.cli.NetworkInspect(ctx, name, network.InspectOptions{}); err == nil {
		n, why := egressNetFrom(info, r.instance)
		if why == "" {
			r.own()
			return n, nil
		}
		r.log.Warn("removing an egress network with unexpected settings", "network", name, "why", why)
		if err := r.cli.NetworkRemove(ctx, info.ID); err != nil && !cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("removing the egress network %s (%s): %w", name, why, err)
		}
	} else if !cerrdefs.IsNotFound(err) {
		return nil, fmt.Errorf("inspecting the egress network %s: %w", name, err)
	}
	off := false
	_, err := r.cli.NetworkCreate(ctx, name, network.CreateOptions{
		Driver:     "bridge",
		Internal:   true,
		EnableIPv6: &off,
		Options: map[string]string{
			optICC:        "false",
			optBridgeName: EgressBridgeName(r.instance),
			optMasquerade: "false",
		},
		Labels: map[string]string{LabelManaged: "true", LabelInstance: r.instance},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the egress network %s: %w", name, err)
	}
	info, err := r.cli.NetworkInspect(ctx, name, network.InspectOptions{})
	if err != nil {
		return nil, fmt.Errorf("inspecting the new egress network %s: %w", name, err)
	}
	r.own()
	n, why := egressNetFrom(info, r.instance)
	if why != "" {
		return nil, fmt.Errorf("the new egress network %s is not usable: %s", name, why)
	}
	return n, nil
}

func (r *Runner) own() {
	r.eg.mu.Lock()
	r.eg.owned = true
	r.eg.mu.Unlock()
}

// closeEgress removes the egress network at Close, once every container
// is gone.
func (r *Runner) closeEgress(ctx context.Context) {
	r.eg.mu.Lock()
	owned := r.eg.owned
	r.eg.net, r.eg.owned = nil, false
	r.eg.mu.Unlock()
	if !owned {
		return
	}
	if err := r.RemoveEgressNetwork(ctx); err != nil {
		r.log.Warn("removing the egress network failed; the next start reuses it", "err", err)
	}
}

// egressNetFrom reads an egress network from its inspection, or says why
// it is not one sandboxd may use.
func egressNetFrom(info network.Inspect, instance string) (*EgressNet, string) {
	switch {
	case info.Labels[LabelManaged] != "true" || info.Labels[LabelInstance] != instance:
		return nil, "it is not labelled as this instance's"
	case info.Driver != "bridge":
		return nil, "its driver is " + info.Driver + ", not bridge"
	case !info.Internal:
		return nil, "it is not internal"
	case info.Options[optICC] != "false":
		return nil, "inter-container traffic is not off"
	case info.EnableIPv6:
		return nil, "it has IPv6"
	}
	n := &EgressNet{Name: info.Name, ID: info.ID, Bridge: info.Options[optBridgeName]}
	if n.Bridge == "" {
		n.Bridge = "br-" + info.ID[:12]
	}
	for _, c := range info.IPAM.Config {
		sub, err1 := netip.ParsePrefix(c.Subnet)
		gw, err2 := netip.ParseAddr(c.Gateway)
		if err1 == nil && err2 == nil && sub.Addr().Is4() && sub.Contains(gw) {
			n.Subnet, n.Gateway = sub.Masked(), gw
			break
		}
	}
	if !n.Gateway.IsValid() {
		return nil, "it has no IPv4 subnet with a gateway"
	}
	return n, ""
}

// CheckBridge verifies that this process sees the network's bridge with
// the gateway address, which it must to listen there: sandboxd has to run
// in the engine host's network namespace to serve networked sandboxes.
func (n *EgressNet) CheckBridge() error {
	ifc, err := net.InterfaceByName(n.Bridge)
	if err != nil {
		return fmt.Errorf("the egress network's bridge %s is not visible to sandboxd (%v); sandboxd must run in the engine host's network namespace (e.g. docker run --network host) to serve networked sandboxes", n.Bridge, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return fmt.Errorf("reading the addresses of %s: %w", n.Bridge, err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap() == n.Gateway {
				return nil
			}
		}
	}
	return fmt.Errorf("the bridge %s does not carry the egress network's gateway %s", n.Bridge, n.Gateway)
}

// RemoveEgressNetwork removes the instance's egress network, if it exists.
// Containers still attached to it (of this instance) are removed first.
func (r *Runner) RemoveEgressNetwork(ctx context.Context) error {
	name := EgressNetworkName(r.instance)
	info, err := r.cli.NetworkInspect(ctx, name, network.InspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspecting the egress network %s: %w", name, err)
	}
	if info.Labels[LabelManaged] != "true" || info.Labels[LabelInstance] != r.instance {
		return fmt.Errorf("the network %s is not labelled as this instance's; leaving it", name)
	}
	list, err := r.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("network", info.ID),
		filters.Arg("label", LabelManaged+"=true"),
		filters.Arg("label", LabelInstance+"="+r.instance),
	)})
	if err == nil {
		for _, c := range list {
			_ = r.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
		}
	}
	if err := r.cli.NetworkRemove(ctx, info.ID); err != nil && !cerrdefs.IsNotFound(err) {
		if strings.Contains(err.Error(), "active endpoints") {
			return fmt.Errorf("removing the egress network %s: containers are still attached: %w", name, err)
		}
		return fmt.Errorf("removing the egress network %s: %w", name, err)
	}
	return nil
}
