package runner

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// The firewall of the egress network.
//
// An internal Docker network has no route out, but the engine (measured on
// 20.10.24) still gives its containers a default route to the gateway, and
// the host accepts whatever arrives there: a container reaches every port
// of every host address (the gateway, the host's other interfaces, other
// bridges' gateways) of any service listening on all addresses. The
// firewall closes that: every packet that enters the host from the egress
// bridge goes to one chain of this instance, which accepts TCP to the
// proxy's port on the gateway and drops everything else (other ports, other
// host addresses, UDP and so DNS to the gateway, ICMP). The same chain is
// jumped to from FORWARD, so nothing is forwarded from the bridge either,
// whatever the engine's own rules say (it drops forwarding from internal
// networks itself, and inter-container traffic is off). For IPv6 the chain
// drops everything: the network has no IPv6 and containers on it have it
// switched off.
//
// The rules are installed idempotently at start (a chain left by a crashed
// process is flushed and refilled) and removed at shutdown. They are
// written with the iptables command the engine's own rules use (the
// alternatives' choice, nft or legacy), with -w to wait for the xtables
// lock.

// Firewall is the host side of one egress network.
type Firewall struct {
	// Chain is the instance's chain, in the filter table.
	Chain string
	// Bridge is the egress network's host interface.
	Bridge string
	// Proxy is the one address and port the bridge may reach.
	Proxy string
	// Port is the proxy's port.
	Port uint16
}

// NewFirewall describes the firewall of an instance's egress network n.
func NewFirewall(instance string, n *EgressNet) *Firewall {
	return &Firewall{Chain: FirewallChain(instance), Bridge: n.Bridge, Proxy: n.Gateway.String(), Port: n.ProxyPort}
}

// FirewallChain is the name of an instance's chain (at most 28 characters).
func FirewallChain(instance string) string { return "SANDBOXD-" + instanceTag(instance) }

// iptablesTimeout bounds one iptables command (-w waits for the lock).
const iptablesTimeout = 20 * time.Second

func iptables(bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), iptablesTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-w"}, args...)...)
	out, err := cmd.CombinedOutput()
	msg := strings.TrimSpace(filterWarnings(string(out)))
	if err != nil {
		return msg, fmt.Errorf("%s %s: %v: %s", bin, strings.Join(args, " "), err, msg)
	}
	return msg, nil
}

// filterWarnings drops iptables-nft's note about legacy tables.
func filterWarnings(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "# Warning:") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// rules returns the chain's rules for one family.
func (f *Firewall) rules(v6 bool) [][]string {
	if v6 {
		return [][]string{{"-j", "DROP"}}
	}
	return [][]string{
		{"-p", "tcp", "-d", f.Proxy, "--dport", strconv.Itoa(int(f.Port)), "-j", "ACCEPT"},
		{"-j", "DROP"},
	}
}

// jumps are the rules that send the bridge's traffic to the chain.
func (f *Firewall) jumps() [][]string {
	return [][]string{
		{"INPUT", "-i", f.Bridge, "-j", f.Chain},
		{"FORWARD", "-i", f.Bridge, "-j", f.Chain},
	}
}

// Install writes the rules for IPv4 and IPv6. An IPv4 failure is an
// error: networked sandboxes must not run without it. IPv6 is defence in
// depth (containers on the network have IPv6 off); its failure is
// returned as a warning.
func (f *Firewall) Install() (warning string, err error) {
	if f.Port == 0 || f.Bridge == "" || f.Proxy == "" {
		return "", errors.New("firewall: bridge, proxy address and port are required")
	}
	if err := f.install("iptables", false); err != nil {
		return "", err
	}
	if err := f.install("ip6tables", true); err != nil {
		return fmt.Sprintf("IPv6 rules not installed (containers on the egress network have IPv6 off): %v", err), nil
	}
	return "", nil
}

func (f *Firewall) install(bin string, v6 bool) error {
	if _, err := exec.LookPath(bin); err != nil {
		return fmt.Errorf("%s is not installed: %w", bin, err)
	}
	if out, err := iptables(bin, "-N", f.Chain); err != nil && !strings.Contains(out, "exists") {
		return err
	}
	if _, err := iptables(bin, "-F", f.Chain); err != nil {
		return err
	}
	for _, r := range f.rules(v6) {
		if _, err := iptables(bin, append([]string{"-A", f.Chain}, r...)...); err != nil {
			return err
		}
	}
	for _, j := range f.jumps() {
		if _, err := iptables(bin, append([]string{"-C"}, j...)...); err == nil {
			continue
		}
		if _, err := iptables(bin, append([]string{"-I", j[0], "1"}, j[1:]...)...); err != nil {
			return err
		}
	}
	return nil
}

// Remove deletes the jumps and the chain, for IPv4 and IPv6. Absent rules
// are not an error.
func (f *Firewall) Remove() error {
	var errs []error
	for _, bin := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(bin); err != nil {
			continue
		}
		errs = append(errs, RemoveChain(bin, f.Chain))
	}
	return errors.Join(errs...)
}

// RemoveChain deletes every jump to chain from INPUT and FORWARD and the
// chain itself, with the iptables command bin. A chain that does not exist
// is not an error.
func RemoveChain(bin, chain string) error {
	if _, err := iptables(bin, "-S", chain); err != nil {
		return nil // no such chain
	}
	var errs []error
	for _, parent := range []string{"INPUT", "FORWARD"} {
		out, err := iptables(bin, "-S", parent)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != "-A" || f[len(f)-1] != chain || f[len(f)-2] != "-j" {
				continue
			}
			if _, err := iptables(bin, append([]string{"-D"}, f[1:]...)...); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if _, err := iptables(bin, "-F", chain); err != nil {
		errs = append(errs, err)
	}
	if _, err := iptables(bin, "-X", chain); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
