package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"

	"github.com/sandboxd/sandboxd/internal/e2e"
)

// machineDaemonJSON is the machine's engine's configuration, which the
// private engine must not read or change.
const machineDaemonJSON = "/etc/docker/daemon.json"

// TestMain runs the suite and then fails it loudly when the machine's
// network interfaces, its engine's networks or its engine's configuration
// are not what they were before: a private engine that touched them broke
// the machine for everyone using its engine.
func TestMain(m *testing.M) {
	before, err := hostState()
	if err != nil {
		fmt.Fprintf(os.Stderr, "tests/engine: recording the machine's state before the suite: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := e2e.RemoveBinaries(); err != nil {
		fmt.Fprintf(os.Stderr, "tests/engine: %v\n", err)
		code = 1
	}
	after, err := hostState()
	if err != nil {
		fmt.Fprintf(os.Stderr, "tests/engine: recording the machine's state after the suite: %v\n", err)
		os.Exit(1)
	}
	if diff := before.diff(after); diff != "" {
		fmt.Fprintf(os.Stderr, "\n!!!!! tests/engine CHANGED THE MACHINE: %s\n"+
			"The private engine must leave the machine's network and engine alone; the machine's engine may need a restart to recreate what is missing.\n\n", diff)
		os.Exit(1)
	}
	os.Exit(code)
}

// machineState is what the suite must leave as it found it.
type machineState struct {
	links      []string // interface names in the test's network namespace
	networks   []string // the machine's engine's networks, "id name"
	daemonJSON string   // machineDaemonJSON's content, "" when missing
}

// hostState records the machine's state. Interfaces and networks that
// other users of the machine's engine create and remove as they run (the
// veth ends of containers, sandboxd's egress networks and their sbx-
// bridges) are left out: they come and go during the suite without this
// suite's doing.
func hostState() (machineState, error) {
	var s machineState
	ifs, err := net.Interfaces()
	if err != nil {
		return s, fmt.Errorf("listing network interfaces: %w", err)
	}
	for _, i := range ifs {
		if !strings.HasPrefix(i.Name, "veth") && !strings.HasPrefix(i.Name, "sbx-") {
			s.links = append(s.links, i.Name)
		}
	}
	sort.Strings(s.links)

	cli, err := e2e.Docker()
	if err != nil {
		return s, fmt.Errorf("the machine's engine: %w", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nets, err := cli.NetworkList(ctx, network.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("listing the machine's engine's networks: %w", err)
	}
	for _, n := range nets {
		if n.Labels["sandboxd.managed"] != "true" {
			s.networks = append(s.networks, n.ID[:12]+" "+n.Name)
		}
	}
	sort.Strings(s.networks)

	b, err := os.ReadFile(machineDaemonJSON)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return s, fmt.Errorf("reading %s: %w", machineDaemonJSON, err)
	}
	s.daemonJSON = string(b)
	return s, nil
}

// diff describes how after differs from s, or is "" when it does not.
func (s machineState) diff(after machineState) string {
	var out []string
	if gone, added := setDiff(s.links, after.links); len(gone)+len(added) > 0 {
		out = append(out, fmt.Sprintf("network interfaces: gone %v, new %v", gone, added))
	}
	if gone, added := setDiff(s.networks, after.networks); len(gone)+len(added) > 0 {
		out = append(out, fmt.Sprintf("the machine's engine's networks: gone %v, new %v", gone, added))
	}
	if s.daemonJSON != after.daemonJSON {
		out = append(out, fmt.Sprintf("%s changed from\n%s\nto\n%s", machineDaemonJSON, s.daemonJSON, after.daemonJSON))
	}
	return strings.Join(out, "; ")
}

// setDiff returns the elements of a missing from b and those of b not in a.
func setDiff(a, b []string) (gone, added []string) {
	in := func(list []string, x string) bool {
		for _, y := range list {
			if y == x {
				return true
			}
		}
		return false
	}
	for _, x := range a {
		if !in(b, x) {
			gone = append(gone, x)
		}
	}
	for _, x := range b {
		if !in(a, x) {
			added = append(added, x)
		}
	}
	return gone, added
}

// TestMachineStateDiff checks that the suite's check of the machine sees a
// lost interface, a lost network and a changed configuration, and nothing
// when all is the same.
func TestMachineStateDiff(t *testing.T) {
	before := machineState{links: []string{"docker0", "eth0", "lo"}, networks: []string{"a bridge", "b host"}, daemonJSON: "{}"}
	if d := before.diff(before); d != "" {
		t.Errorf("the same state: want no difference, got %q", d)
	}
	for _, c := range []struct {
		name  string
		after machineState
		want  string
	}{
		{"docker0 deleted", machineState{links: []string{"eth0", "lo"}, networks: before.networks, daemonJSON: "{}"}, "gone [docker0]"},
		{"network removed", machineState{links: before.links, networks: []string{"b host"}, daemonJSON: "{}"}, "networks: gone [a bridge]"},
		{"config changed", machineState{links: before.links, networks: before.networks, daemonJSON: `{"bridge":"none"}`}, "daemon.json changed"},
	} {
		if d := before.diff(c.after); !strings.Contains(d, c.want) {
			t.Errorf("%s: want a difference naming %q, got %q", c.name, c.want, d)
		}
	}
}
