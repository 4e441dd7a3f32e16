package egress_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/egress"
)

// TestCIDRWarnings pins the warning of each kind of allow_cidrs entry,
// word for word: what opens the metadata service must be unmistakable,
// and a range around it must say that the metadata addresses stay shut.
func TestCIDRWarnings(t *testing.T) {
	cases := []struct{ cidr, want string }{
		{"169.254.169.254/32", "allow_cidrs[0] 169.254.169.254/32 opens the cloud metadata service (AWS, GCP, Azure, OpenStack and others) at 169.254.169.254: a host name the rules allow that resolves to it (a name under a wildcard rule, whose DNS its owner controls) reaches the instance's metadata and credentials; name it only if the sandboxes must reach it"},
		{"fd00:ec2::254/128", "allow_cidrs[0] fd00:ec2::254/128 opens the cloud metadata service (AWS IMDS over IPv6) at fd00:ec2::254: a host name the rules allow that resolves to it (a name under a wildcard rule, whose DNS its owner controls) reaches the instance's metadata and credentials; name it only if the sandboxes must reach it"},
		{"169.254.0.0/16", "allow_cidrs[0] 169.254.0.0/16 opens link-local 169.254.0.0/16 (services on the host's own network links); the cloud metadata addresses in it (169.254.169.254, 169.254.170.2, 169.254.169.253, 169.254.169.123) stay denied: each opens only when named exactly, as 169.254.169.254/32"},
		{"169.254.169.0/24", "allow_cidrs[0] 169.254.169.0/24 opens 169.254.169.0/24 of link-local 169.254.0.0/16 (services on the host's own network links); the cloud metadata addresses in it (169.254.169.254, 169.254.169.253, 169.254.169.123) stay denied: each opens only when named exactly, as 169.254.169.254/32"},
		{"fd00:ec2::/64", "allow_cidrs[0] fd00:ec2::/64 opens fd00:ec2::/64 of unique local fc00::/7 (hosts on internal networks); the cloud metadata addresses in it (fd00:ec2::254, fd00:ec2::23) stay denied: each opens only when named exactly, as fd00:ec2::254/128"},
		{"127.0.0.0/8", "allow_cidrs[0] 127.0.0.0/8 opens loopback 127.0.0.0/8 (services on the sandboxd host itself)"},
		{"10.20.30.0/24", "allow_cidrs[0] 10.20.30.0/24 opens 10.20.30.0/24 of private network 10.0.0.0/8 (hosts on internal networks)"},
		{"192.168.0.0/16", "allow_cidrs[0] 192.168.0.0/16 opens private network 192.168.0.0/16 (hosts on internal networks)"},
		{"64:ff9b::/96", "allow_cidrs[0] 64:ff9b::/96 opens NAT64 64:ff9b::/96 (IPv6 addresses that embed IPv4 ones: every IPv4 address, private and loopback included, where the host routes them; the cloud metadata service and the unspecified address stay denied)"},
		{"8.8.8.0/24", "allow_cidrs[0] 8.8.8.0/24 opens nothing: no always-denied address is in it, and public addresses need no entry; remove it"},
		{"4000::/16", "allow_cidrs[0] 4000::/16 opens 4000::/16 of IPv6 outside global unicast 2000::/3"},
		{"128.0.0.0/1", "allow_cidrs[0] 128.0.0.0/1 opens link-local 169.254.0.0/16 (services on the host's own network links); private network 172.16.0.0/12 (hosts on internal networks); IETF protocol assignments 192.0.0.0/24; documentation TEST-NET-1 192.0.2.0/24; and 11 more always-denied ranges; the cloud metadata addresses in it (169.254.169.254, 169.254.170.2, 169.254.169.253, 169.254.169.123, 168.63.129.16) stay denied: each opens only when named exactly, as 169.254.169.254/32"},
	}
	for _, tc := range cases {
		t.Run(tc.cidr, func(t *testing.T) {
			p := egress.Defaults()
			p.Name = "p"
			p.AllowCIDRs = []string{tc.cidr}
			if err := p.Compile(); err != nil {
				t.Fatal(err)
			}
			ws := p.Warnings()
			if len(ws) != 1 || ws[0].Path != "allow_cidrs[0]" {
				t.Fatalf("warnings %v, want one at allow_cidrs[0]", ws)
			}
			if ws[0].Msg != tc.want {
				t.Errorf("warning\n%s\nwant\n%s", ws[0].Msg, tc.want)
			}
		})
	}
	p := egress.Defaults()
	p.Name = "p"
	if err := p.Compile(); err != nil || len(p.Warnings()) != 0 {
		t.Errorf("a profile without allow_cidrs: %v %v, want no warnings", err, p.Warnings())
	}
}

// Compile reports every problem of a profile, not only the first.
func TestCompileReportsEveryProblem(t *testing.T) {
	p := egress.Defaults()
	p.Name = "p"
	p.Mode = "audit"
	p.Allow = []egress.Rule{{Hosts: []string{"*", "a..com"}, Ports: []int{0}, Methods: []string{"get"}}}
	p.AllowCIDRs = []string{"10.0.0.1", "10.0.0.0/8", "10.0.0.0/8"}
	p.MaxResponseBytes = 0
	p.ConnectTimeout = 2 * time.Minute
	err := p.Compile()
	var fes egress.FieldErrors
	if !errors.As(err, &fes) {
		t.Fatalf("Compile() = %v (%T), want FieldErrors", err, err)
	}
	var paths []string
	for _, fe := range fes {
		paths = append(paths, fe.Path)
	}
	want := []string{"mode", "allow[0].hosts[0]", "allow[0].hosts[1]", "allow[0].ports[0]", "allow[0].methods[0]",
		"allow_cidrs[0]", "allow_cidrs[2]", "max_response_bytes", "connect_timeout", "total_timeout"}
	if len(paths) != len(want) {
		t.Fatalf("problems at %v, want %v:\n%v", paths, want, err)
	}
	for i := range want {
		if paths[i] != want[i] {
			t.Errorf("problem %d at %s, want %s", i, paths[i], want[i])
		}
	}
	var first *egress.FieldError
	if !errors.As(err, &first) || first.Path != "mode" {
		t.Errorf("errors.As finds %v, want the first problem (mode)", first)
	}
	if p.Compiled() {
		t.Error("a profile with problems reports Compiled")
	}
	if fes[6].Msg != "10.0.0.0/8 is listed twice (also allow_cidrs[1])" {
		t.Errorf("duplicate CIDR: %q", fes[6].Msg)
	}
	if fes[8].Msg != "connect_timeout is 2m; allowed is 100ms to 1m" {
		t.Errorf("duration range: %q", fes[8].Msg)
	}
}

func TestFieldRange(t *testing.T) {
	for path, want := range map[string]string{
		"max_response_bytes":     "1 to 1073741824 bytes (1 GiB)",
		"max_request_bytes":      "0 (no request bodies) to 1073741824 bytes (1 GiB)",
		"connect_timeout":        "100ms to 1m",
		"total_timeout":          "1s to 1h",
		"requests_per_minute":    "1 to 100000",
		"capture_retention_days": "0 (keep until erased) to 3650 days",
		"allow.ports":            "1 to 65535",
		"deny.ports":             "1 to 65535",
		"name":                   "",
	} {
		if got := egress.FieldRange(path); got != want {
			t.Errorf("FieldRange(%s) = %q, want %q", path, got, want)
		}
	}
	for d, want := range map[time.Duration]string{time.Minute: "1m", time.Hour: "1h", 90 * time.Second: "1m30s", 100 * time.Millisecond: "100ms", 2*time.Hour + time.Minute: "2h1m"} {
		if got := egress.ShortDuration(d); got != want {
			t.Errorf("ShortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
