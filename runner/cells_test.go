package runner

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/profiles"
)

func TestUserNamespaceCheckNamesTheSetting(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string // in the error; "" for none
	}{
		{"allowed", map[string]string{"user/max_user_namespaces": "15000\n", "kernel/unprivileged_userns_clone": "1\n"}, ""},
		{"no knobs at all", nil, ""},
		{"none allowed", map[string]string{"user/max_user_namespaces": "0\n"}, "user.max_user_namespaces = 0"},
		{"debian off", map[string]string{"user/max_user_namespaces": "15000", "kernel/unprivileged_userns_clone": "0"}, "kernel.unprivileged_userns_clone = 0"},
		{"apparmor", map[string]string{"kernel/apparmor_restrict_unprivileged_userns": "1"}, "kernel.apparmor_restrict_unprivileged_userns = 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, v := range tc.files {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := userNamespaceCheckIn(dir)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrCellsUnavailable)):
				t.Fatalf("error %v, want ErrCellsUnavailable naming %q", err, tc.want)
			}
		})
	}
}

func TestHostSeccompAddsOnlyCellSetup(t *testing.T) {
	set, err := profiles.Load("../profiles")
	if err != nil {
		t.Fatal(err)
	}
	p := set.Exec["default"]
	host, err := hostSeccomp(p.SeccompJSON)
	if err != nil {
		t.Fatal(err)
	}
	type rule struct {
		Names  []string          `json:"names"`
		Action string            `json:"action"`
		Args   []json.RawMessage `json:"args"`
	}
	var before, after struct {
		DefaultAction string `json:"defaultAction"`
		Syscalls      []rule `json:"syscalls"`
	}
	if err := json.Unmarshal(p.SeccompJSON, &before); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(host, &after); err != nil {
		t.Fatal(err)
	}
	if after.DefaultAction != before.DefaultAction || len(after.Syscalls) != len(before.Syscalls)+1 {
		t.Fatalf("default %q, %d rules; want %q and %d", after.DefaultAction, len(after.Syscalls), before.DefaultAction, len(before.Syscalls)+1)
	}
	for i, r := range before.Syscalls {
		a := after.Syscalls[i]
		if !slices.Equal(a.Names, r.Names) || a.Action != r.Action {
			t.Errorf("rule %d changed: %v %s -> %v %s", i, r.Names, r.Action, a.Names, a.Action)
		}
		if slices.Contains(r.Names, "clone") != (len(a.Args) == 0 && len(r.Args) > 0) && len(r.Args) > 0 {
			t.Errorf("rule %d (%v): args %d -> %d; only clone's condition goes", i, r.Names, len(r.Args), len(a.Args))
		}
	}
	last := after.Syscalls[len(after.Syscalls)-1]
	if last.Action != "SCMP_ACT_ALLOW" || !slices.Equal(last.Names, cellSetupSyscalls) {
		t.Errorf("the added rule is %v %s, want %v allowed", last.Names, last.Action, cellSetupSyscalls)
	}
}

// A cell host's pids limit is the run's plus the launcher's, the cell's
// set-up and, under runsc, room for a long-lived Sentry.
func TestCellHostPidsLimit(t *testing.T) {
	set, err := profiles.Load("../profiles")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int64{
		"default": pidsOverhead + cellPidsOverhead,
		"strict":  pidsOverhead + runscPidsOverhead + cellPidsOverhead + runscCellPidsOverhead,
	} {
		p := set.Exec[name]
		spec := &Spec{ID: "ex_host", Tenant: "acme", Profile: p, Limits: p.Limits}
		_, hc, err := hostOptions(spec, "sha256:img", "unit", "ex_host", cellFilter{host: []byte("{}")})
		if err != nil {
			t.Fatal(err)
		}
		if got := *hc.PidsLimit - p.Limits.Pids; got != want {
			t.Errorf("%s: the host's pids limit is the run's + %d, want + %d", name, got, want)
		}
	}
}
