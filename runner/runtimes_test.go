package runner

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/profiles"
)

func strictProfile(t *testing.T) *profiles.Exec {
	t.Helper()
	set, err := profiles.Load("../profiles")
	if err != nil {
		t.Fatal(err)
	}
	p := set.Exec["strict"]
	if p == nil {
		t.Fatal("no strict profile in ../profiles")
	}
	return p
}

func TestCreateOptionsRuntimeIsTheProfiles(t *testing.T) {
	for _, p := range []*profiles.Exec{defaultProfile(t), strictProfile(t)} {
		_, hc, err := createOptions(&Spec{ID: "ex_1", Profile: p, Limits: p.Limits}, "sha256:abc", "inst", nil)
		if err != nil {
			t.Fatal(err)
		}
		if hc.Runtime != p.Runtime || hc.Runtime == "" {
			t.Errorf("profile %s: HostConfig.Runtime = %q, want %q", p.Name, hc.Runtime, p.Runtime)
		}
		want := p.Limits.Pids + pidsOverhead
		if p.Runtime == profiles.RuntimeRunsc {
			want += runscPidsOverhead
		}
		if hc.PidsLimit == nil || *hc.PidsLimit != want {
			t.Errorf("profile %s: PidsLimit = %v, want %d", p.Name, hc.PidsLimit, want)
		}
	}
	if p := strictProfile(t); p.Runtime != "runsc" {
		t.Errorf("strict profile runtime = %q, want runsc", p.Runtime)
	}
}

func TestCreateErrorMapsUnknownRuntime(t *testing.T) {
	strict := strictProfile(t)
	spec := &Spec{ID: "ex_1", Profile: strict, Limits: strict.Limits}
	cases := []struct {
		engine  string
		missing bool
	}{
		{"Error response from daemon: Unknown runtime specified runsc", true},                 // engine 20.10
		{"Error response from daemon: unknown or invalid runtime name: runsc", true},          // later engines
		{"Error response from daemon: Unknown runtime specified runsc-debug", false},          // another runtime
		{"Error response from daemon: Unknown runtime specified runs", false},                 // a prefix of it
		{"Error response from daemon: Conflict. The container name is already in use", false}, // anything else
		{"Cannot connect to the Docker daemon at unix:///var/run/docker.sock", false},
	}
	for _, c := range cases {
		err := createError(errors.New(c.engine), spec)
		if got := errors.Is(err, ErrRuntimeMissing); got != c.missing {
			t.Errorf("%q: ErrRuntimeMissing = %v, want %v (err %v)", c.engine, got, c.missing, err)
			continue
		}
		if !c.missing {
			if !errors.Is(err, ErrEngine) {
				t.Errorf("%q: err %v is not ErrEngine", c.engine, err)
			}
			continue
		}
		if errors.Is(err, ErrEngine) {
			t.Errorf("%q: a missing runtime must not read as a generic engine failure", c.engine)
		}
		msg := err.Error()
		for _, want := range []string{`profile "strict"`, `runtime "runsc"`, "make gvisor", "no fallback"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q lacks %q", msg, want)
			}
		}
	}
	var rerr *RuntimeError
	if err := createError(errors.New("Unknown runtime specified runsc"), spec); !errors.As(err, &rerr) || rerr.Runtime != "runsc" || rerr.Profile != "strict" {
		t.Errorf("createError = %#v, want a *RuntimeError for runsc and strict", err)
	}
}

// A profile naming a runtime the engine lacks fails with ErrRuntimeMissing
// through the real engine, and leaves no container behind. The runtime name
// is one no engine has, so this holds with or without gVisor installed.
func TestRunUnknownRuntimeIsRefused(t *testing.T) {
	instance := "test-" + t.Name()
	r := newTestRunner(t, instance)
	p := *strictProfile(t)
	p.Runtime = "sandboxd-no-such-runtime"
	p.Isolation = profiles.IsolationContainer // a container of its own, created through the engine
	_, err := r.Run(context.Background(), &Spec{ID: "ex_noruntime", Profile: &p, Limits: p.Limits, Job: job("print(1)", 1000)})
	if !errors.Is(err, ErrRuntimeMissing) || !strings.Contains(err.Error(), `"sandboxd-no-such-runtime"`) {
		t.Fatalf("err = %v, want ErrRuntimeMissing naming the runtime", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := managedContainers(t, instance); len(left) != 0 {
		t.Fatalf("%d containers left after a refused run", len(left))
	}
}

func TestRuntimesListsRunc(t *testing.T) {
	r := newTestRunner(t, "test-runtimes")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names, err := r.Runtimes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, "runc") {
		t.Errorf("engine runtimes %v lack runc", names)
	}
	t.Logf("engine runtimes: %v", names)
}
