package egresstest

import (
	"testing"

	"github.com/sandboxd/sandboxd/egress"
)

// LoopbackProfile returns the compiled egress profile name that allows
// hosts on port and opens loopback (127.0.0.1/32), for a test whose
// upstream is a local server that a Resolver maps the hosts to. The
// changes, in order, adjust the profile before it is compiled.
func LoopbackProfile(t testing.TB, name string, port int, hosts []string, changes ...func(*egress.Profile)) *egress.Profile {
	t.Helper()
	p := egress.Defaults()
	p.Name = name
	p.Allow = []egress.Rule{{Hosts: hosts, Ports: []int{port}}}
	p.AllowCIDRs = []string{"127.0.0.1/32"}
	for _, change := range changes {
		change(&p)
	}
	if err := p.Compile(); err != nil {
		t.Fatal(err)
	}
	return &p
}
