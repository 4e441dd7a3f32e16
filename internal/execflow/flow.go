// Package execflow is the exec orchestration both POST /exec and session
// calls go through: a request becomes a runner.Spec (validated against its
// profile), is admitted by the control plane (kill switch, loop guard,
// budgets, run slots), runs in the engine or a session's sandbox, is
// charged, captured and audited, and becomes the answer the HTTP layer
// sends.
package execflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/dataset"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/redact"
	"github.com/sandboxd/sandboxd/runner"
)

// Engine runs a spec in a fresh sandbox. *runner.Runner is one; unit tests
// use a fake.
type Engine interface {
	Run(ctx context.Context, spec *runner.Spec) (*runner.Result, error)
}

// Config configures the flow; every field but Log is required.
type Config struct {
	Plane    *control.Plane
	Engine   Engine
	Captures capture.Store
	// Profiles is the profile set in force, read once per request (a
	// reload swaps it).
	Profiles *atomic.Pointer[profiles.Set]
	// Redactors compiles each profile's redact rules once.
	Redactors *redact.Cache
	Log       *slog.Logger
	// Secrets are the secrets runs may name (nil: none); every value is
	// also a literal of every run's redactor.
	Secrets *secrets.Store
	// CA returns the egress proxy's CA certificate (PEM), which runs with
	// secrets that go over https trust; nil or nil result: none.
	CA func() []byte
}

// Flow runs execs.
type Flow struct {
	cfg       Config
	plane     *control.Plane
	live      live
	snapshots *dataset.Registry
	// decisions holds the proxy's decisions of running execs for their
	// audit records.
	decisions execDecisions

	// runCtx is the parent of every run; cancelling it kills running code.
	runCtx    context.Context
	cancelRun context.CancelCauseFunc
	runs      sync.WaitGroup
}

// New returns a flow.
func New(cfg Config) (*Flow, error) {
	switch {
	case cfg.Plane == nil:
		return nil, errors.New("execflow: no control plane")
	case cfg.Engine == nil:
		return nil, errors.New("execflow: no engine")
	case cfg.Captures == nil:
		return nil, errors.New("execflow: no capture store")
	case cfg.Profiles == nil || cfg.Profiles.Load() == nil:
		return nil, errors.New("execflow: no profiles")
	case cfg.Redactors == nil:
		return nil, errors.New("execflow: no redactor cache")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	f := &Flow{cfg: cfg, plane: cfg.Plane, live: live{byID: map[string]*Live{}}, snapshots: dataset.NewRegistry()}
	f.runCtx, f.cancelRun = context.WithCancelCause(context.Background())
	return f, nil
}

// profiles is the profile set in force.
func (f *Flow) profiles() *profiles.Set { return f.cfg.Profiles.Load() }

// Plane is the control plane the flow admits through.
func (f *Flow) Plane() *control.Plane { return f.plane }

// Redactor returns the redactor of an exec profile: the built-in rules,
// the profile's own and every secret's value (secrets.Store.Rules),
// compiled once per profile version and secrets load. It redacts every
// output of a run (stdout, stderr, returned files) as it is read.
func (f *Flow) Redactor(p *profiles.Exec) *redact.Redactor {
	key, rules := f.cfg.Secrets.Rules()
	if len(rules) == 0 {
		return f.cfg.Redactors.For("exec:"+p.Version, p.Name, p.Redact)
	}
	return f.cfg.Redactors.For("exec:"+p.Version+"|"+key, p.Name, append(slices.Clip(p.Redact), rules...))
}

// marshalLine is v as one line of JSON.
func marshalLine(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("execflow: marshalling a response: %v", err))
	}
	return append(b, '\n')
}
