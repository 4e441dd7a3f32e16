package runner

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/secrets"
)

func testEgressNet() *EgressNet {
	return &EgressNet{Name: "sandboxd-egress-inst", ID: "abc", Bridge: "sbx-0123456789a",
		Gateway: netip.MustParseAddr("172.30.0.1"), Subnet: netip.MustParsePrefix("172.30.0.0/16"), ProxyPort: 3128}
}

// A networked profile joins the egress network with the proxy in its
// environment, the gateway as its only DNS server and IPv6 off; the rest
// of the lockdown is unchanged. Without a network it is refused.
func TestCreateOptionsNetworked(t *testing.T) {
	base := defaultProfile(t)
	p := *base
	p.Name, p.Egress = "mirror", "package-mirror"
	spec := &Spec{ID: "ex_1", Profile: &p, Limits: p.Limits}

	if _, _, err := createOptions(spec, "sha256:abc", "inst", nil); !errors.Is(err, ErrEgressUnavailable) {
		t.Fatalf("no egress network: err %v, want ErrEgressUnavailable", err)
	}
	cfg, hc, err := createOptions(spec, "sha256:abc", "inst", testEgressNet())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NetworkDisabled || hc.NetworkMode != "sandboxd-egress-inst" {
		t.Errorf("network: disabled %v mode %q", cfg.NetworkDisabled, hc.NetworkMode)
	}
	want := []string{
		"HTTP_PROXY=http://172.30.0.1:3128", "HTTPS_PROXY=http://172.30.0.1:3128",
		"http_proxy=http://172.30.0.1:3128", "https_proxy=http://172.30.0.1:3128",
		"NO_PROXY=" + NoProxy, "no_proxy=" + NoProxy,
	}
	if !slices.Equal(cfg.Env, want) {
		t.Errorf("env %v, want %v", cfg.Env, want)
	}
	if !slices.Equal(hc.DNS, []string{"172.30.0.1"}) {
		t.Errorf("dns %v", hc.DNS)
	}
	if hc.Sysctls["net.ipv6.conf.all.disable_ipv6"] != "1" {
		t.Errorf("sysctls %v", hc.Sysctls)
	}
	if len(hc.CapDrop) != 1 || hc.CapDrop[0] != "ALL" || !hc.ReadonlyRootfs || len(hc.Binds) != 0 || hc.Privileged {
		t.Error("the lockdown changed for a networked profile")
	}
	if name := boxName(spec); strings.Contains(name, spec.ID) || !strings.HasPrefix(name, "sandboxd-n-") {
		t.Errorf("networked container name %q carries the exec id", name)
	}

	// egress none: unchanged, whatever network is set up.
	cfg, hc, err = createOptions(&Spec{ID: "ex_2", Profile: base, Limits: base.Limits}, "sha256:abc", "inst", testEgressNet())
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.NetworkDisabled || hc.NetworkMode != "none" || len(cfg.Env) != 0 || len(hc.DNS) != 0 {
		t.Errorf("egress none: disabled %v mode %q env %v dns %v", cfg.NetworkDisabled, hc.NetworkMode, cfg.Env, hc.DNS)
	}
	if boxName(&Spec{ID: "ex_2", Profile: base}) != "sandboxd-ex_2" {
		t.Error("a container without network is not named by its exec id")
	}
}

// The proxy's view: an address maps to the run that holds it until its
// container is removed; a later container at the same address replaces
// it, and removing the earlier one then does not unmap the later one.
func TestEgressClients(t *testing.T) {
	r := &Runner{}
	a := netip.MustParseAddr("172.30.0.2")
	if _, _, ok := r.EgressClient(a); ok {
		t.Fatal("an unknown address is known")
	}
	r.registerClient(a, "ex_1", "package-mirror", "c1", nil)
	if id, eg, ok := r.EgressClient(netip.MustParseAddr("::ffff:172.30.0.2")); !ok || id != "ex_1" || eg != "package-mirror" {
		t.Fatalf("lookup: %s %s %v", id, eg, ok)
	}
	r.registerClient(a, "ex_2", "web-research", "c2", nil)
	r.unregisterClient("c1")
	if id, _, ok := r.EgressClient(a); !ok || id != "ex_2" {
		t.Fatalf("after the earlier container's removal: %s %v, want ex_2", id, ok)
	}
	r.unregisterClient("c2")
	if _, _, ok := r.EgressClient(a); ok || r.egressClients() != 0 {
		t.Fatal("the address is still mapped after its container's removal")
	}
	r.unregisterClient("c3") // unknown: no-op
}

// A run's secrets follow its sandbox: bound to a cold sandbox's exec id
// when it registers, to a pooled sandbox's own id when it takes the job,
// and gone with the sandbox.
func TestEgressSecrets(t *testing.T) {
	r := &Runner{}
	a, b := netip.MustParseAddr("172.30.0.2"), netip.MustParseAddr("172.30.0.3")
	cold := secrets.NewRun("acme", nil)
	r.registerClient(a, "ex_cold", "mirror", "c1", cold)
	if id, run := r.EgressSecrets(a); id != "ex_cold" || run != cold || cold.Client() != "ex_cold" {
		t.Fatalf("cold: %s %v %s", id, run, cold.Client())
	}
	r.registerClient(b, "ex_pooled", "mirror", "c2", nil)
	if _, run := r.EgressSecrets(b); run != nil {
		t.Fatal("a pooled sandbox has secrets before its job")
	}
	warm := secrets.NewRun("acme", nil)
	r.bindSecrets("c2", &Spec{ID: "ex_pooled", Secrets: warm})
	if id, run := r.EgressSecrets(b); id != "ex_pooled" || run != warm || warm.Client() != "ex_pooled" {
		t.Fatalf("pooled: %s %v %s", id, run, warm.Client())
	}
	r.unregisterClient("c2")
	if _, run := r.EgressSecrets(b); run != nil {
		t.Fatal("the secrets outlive the sandbox")
	}
	r.bindSecrets("c9", &Spec{Secrets: warm}) // unknown: no-op
}

func TestEgressNames(t *testing.T) {
	for _, inst := range []string{"0123456789ab", "test-pool-once", strings.Repeat("x", 100)} {
		if b := EgressBridgeName(inst); len(b) > 15 {
			t.Errorf("bridge name %q is longer than an interface name may be", b)
		}
		if c := FirewallChain(inst); len(c) > 28 {
			t.Errorf("chain name %q is longer than iptables allows", c)
		}
	}
	if EgressBridgeName("a") == EgressBridgeName("b") || FirewallChain("a") == FirewallChain("b") {
		t.Error("instances share names")
	}
}
