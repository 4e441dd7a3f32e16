// Package api is sandboxd's HTTP layer: authentication, request validation,
// admission and the JSON shapes of requests, responses and errors.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/browse"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/egress/approval"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/control/admit"
	"github.com/sandboxd/sandboxd/internal/control/budget"
	"github.com/sandboxd/sandboxd/internal/execflow"
	"github.com/sandboxd/sandboxd/internal/fetchflow"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
	"github.com/sandboxd/sandboxd/internal/metrics"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/internal/sessions"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/redact"
	"github.com/sandboxd/sandboxd/runner"
)

// Engine is what the API needs from the container runner. The real one is
// *runner.Runner; unit tests use a fake.
type Engine interface {
	Run(ctx context.Context, spec *runner.Spec) (*runner.Result, error)
	Ping(ctx context.Context) error
	ImageID(ctx context.Context, ref string) (string, error)
}

// Config is the server's configuration: what sandboxd serve wires. Keys,
// Engine, Gate, Audit, Captures and Control's Store, Limits and Metrics
// are required.
type Config struct {
	DataDir  string
	Profiles *profiles.Set
	Keys     *auth.Keyring
	Engine   Engine
	Gate     *admit.Gate
	Log      *slog.Logger
	// MaxBodyBytes caps a request body; a larger one is refused with 400.
	MaxBodyBytes int64
	// BodyTimeout bounds the time a request's body may take to arrive
	// (default 30 s); a slower one is a 408.
	BodyTimeout time.Duration
	// MaxOpenRequests caps the requests one tenant holds open at once
	// (default 64; negative: no cap); past it, 429 RATE_LIMITED.
	MaxOpenRequests int
	Version         string
	// Resolver resolves names for POST /profiles/{name}/evaluate and, when
	// Fetcher is nil, for POST /fetch; nil means the system resolver. Tests
	// use a fake (egress/egresstest).
	Resolver egress.Resolver
	// Control configures idempotency, async runs, the kill switch, budgets,
	// the loop guard and metrics.
	Control Control
	// CurrentProfiles, when set, replaces Profiles: the server reads the
	// set it points to at each use, so that a reload (sandboxd serve swaps
	// it on SIGHUP and when a file changes) applies to the next request.
	// Each request reads it once.
	CurrentProfiles *atomic.Pointer[profiles.Set]
	// Approvals holds the egress approvals (approvals.go), shared with the
	// egress proxy's Checker; nil: a service on Control's store.
	Approvals *approval.Service
	// Fetcher fetches for POST /fetch; nil: one with a Checker on Resolver
	// and Approvals.
	Fetcher *browse.Fetcher
	// Browser runs browser sandboxes for POST /fetch (render: true, PDFs);
	// a nil Runner refuses them (503).
	Browser fetchflow.BrowserConfig
	// Captures stores the captures of execs, fetches and transfers.
	Captures capture.Store
	// FleetKey signs and checks session requests replicas forward to each
	// other (forward.go); empty on a single host.
	FleetKey []byte
	// Audit is the audit log every exec, fetch and admin action is
	// appended to before its answer.
	Audit audit.Log
	// Secrets are the secrets execs may name (--secrets-file; nil: none),
	// and CA returns the egress proxy's CA certificate for runs with
	// secrets that go over https.
	Secrets *secrets.Store
	CA      func() []byte
}

// Control configures the control plane (internal/control).
type Control struct {
	// Store keeps idempotency records, async results, usage and the kill
	// switch.
	Store store.Store
	// Owner names this process in in-flight records; see store.Recover.
	Owner string
	// Limits applies the tenants file.
	Limits *budget.Limiter
	// Metrics is where the API counts.
	Metrics *metrics.Metrics
	// IdempotencyTTL, IdempotencyWait, AsyncTTL and Queue: see
	// control.Config.
	IdempotencyTTL  time.Duration
	IdempotencyWait time.Duration
	AsyncTTL        time.Duration
	Queue           int
	// Replica and Addr name this replica in a fleet: see control.Config.
	Replica string
	Addr    string
}

// Server serves the HTTP API: it decodes, authorises, calls the flows and
// encodes their answers.
type Server struct {
	cfg  Config
	log  *slog.Logger
	echo *echo.Echo

	plane *control.Plane
	flow  *execflow.Flow
	// fleetTransport forwards session requests to their replica.
	fleetTransport *http.Transport
	fetches        *fetchflow.Flow
	sessions       *sessions.Manager
	approvals      *approval.Service
	// self is sandboxd's own listeners, as /fetch's checker knows them,
	// for the dry run of POST /profiles/{name}/evaluate.
	self      *egress.Listeners
	captures  capture.Store
	audit     audit.Log
	profilesP *atomic.Pointer[profiles.Set]
	open      *openRequests
}

// New builds the server, its flows and its routes.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Keys == nil:
		return nil, errors.New("httpapi: no keyring")
	case cfg.Engine == nil:
		return nil, errors.New("httpapi: no engine")
	case cfg.Captures == nil:
		return nil, errors.New("httpapi: no capture store")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 32 << 20
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = 30 * time.Second
	}
	if cfg.MaxOpenRequests == 0 {
		cfg.MaxOpenRequests = 64
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: cfg.Log, captures: cfg.Captures, audit: cfg.Audit, profilesP: cfg.CurrentProfiles,
		open: &openRequests{limit: max(cfg.MaxOpenRequests, 0), open: map[string]int{}}, fleetTransport: newFleetTransport()}
	if s.profilesP == nil {
		s.profilesP = &atomic.Pointer[profiles.Set]{}
		s.profilesP.Store(cfg.Profiles)
	}
	ctl := cfg.Control
	var err error
	s.plane, err = control.New(control.Config{Store: ctl.Store, Owner: ctl.Owner, Limits: ctl.Limits, Metrics: ctl.Metrics, Gate: cfg.Gate, Audit: cfg.Audit,
		Log: cfg.Log, IdempotencyTTL: ctl.IdempotencyTTL, IdempotencyWait: ctl.IdempotencyWait, AsyncTTL: ctl.AsyncTTL, Queue: ctl.Queue,
		Replica: ctl.Replica, Addr: ctl.Addr})
	if err != nil {
		return nil, err
	}
	redactors := &redact.Cache{Log: cfg.Log}
	s.flow, err = execflow.New(execflow.Config{Plane: s.plane, Engine: cfg.Engine, Captures: cfg.Captures, Profiles: s.profilesP, Redactors: redactors, Log: cfg.Log,
		Secrets: cfg.Secrets, CA: cfg.CA})
	if err != nil {
		return nil, err
	}
	s.approvals = cfg.Approvals
	if s.approvals == nil {
		s.approvals = approval.New(approval.Config{Store: ctl.Store, Log: cfg.Log})
	}
	s.approvals.SetIdentify(s.flow.Identity)
	fetcher := cfg.Fetcher
	if fetcher == nil {
		fetcher = &browse.Fetcher{Checker: &egress.Checker{Resolver: cfg.Resolver, Approvals: s.approvals}, Log: cfg.Log, UserAgent: "sandboxd/" + cfg.Version}
	}
	s.self = fetcher.Checker.Self
	s.fetches, err = fetchflow.New(fetchflow.Config{Plane: s.plane, Fetcher: fetcher, Captures: cfg.Captures, Profiles: s.profilesP, Redactors: redactors, Secrets: cfg.Secrets, Runs: s.flow, Log: cfg.Log, Browser: cfg.Browser})
	if err != nil {
		return nil, err
	}
	var sessionEngine sessions.Engine
	switch e := cfg.Engine.(type) {
	case sessions.Engine:
		sessionEngine = e
	case sessions.Starter:
		sessionEngine = sessions.Runner{Starter: e}
	}
	s.sessions, err = sessions.New(sessions.Config{Flow: s.flow, Engine: sessionEngine, Captures: cfg.Captures, Profiles: s.profilesP, Log: cfg.Log})
	if err != nil {
		return nil, err
	}

	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.errorHandler
	e.Use(s.requestID, s.observe, s.accessLog, s.recoverPanic, s.bodyDeadline)
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.POST("/exec", s.exec, s.authenticate(auth.RoleAgent))
	s.egressRoutes(e)
	s.controlRoutes(e)
	s.approvalRoutes(e)
	e.POST("/fetch", s.fetch, s.authenticate(auth.RoleAgent))
	s.agentRoutes(e) // agent.go: /tools, /openapi.yaml, /mcp
	s.reviewRoutes(e)
	s.uiRoutes(e) // ui.go: the review page at /ui/
	s.sessionRoutes(e)
	s.echo = e
	return s, nil
}

// Handler returns the HTTP handler, for tests and for http.Server.
func (s *Server) Handler() http.Handler { return s.echo }

// profiles returns the profile set in force. Read it once per request and
// keep the result: a reload may swap it at any time.
func (s *Server) profiles() *profiles.Set { return s.profilesP.Load() }

// KillRuns stops every running job (their containers are killed and
// removed) and waits until their handlers have returned, at most until ctx
// ends. cause is what their answers say (execflow.ErrShutdown at
// shutdown).
func (s *Server) KillRuns(ctx context.Context, cause error) error { return s.flow.KillRuns(ctx, cause) }

// WaitRuns waits until running jobs finish on their own, at most until ctx
// ends.
func (s *Server) WaitRuns(ctx context.Context) bool { return s.flow.WaitRuns(ctx) }

// Close ends the sessions and stops the control plane's background work.
// Call it after KillRuns. The stores and the log are the caller's.
func (s *Server) Close() error {
	s.sessions.Close()
	s.plane.Close()
	return nil
}

// Frozen reports whether the kill switch is on.
func (s *Server) Frozen() bool { return s.plane.Frozen() }

// Metrics returns the metrics registry, for collectors of other packages.
func (s *Server) Metrics() *metrics.Metrics { return s.plane.Metrics() }

// Approvals returns the approval service the server uses.
func (s *Server) Approvals() *approval.Service { return s.approvals }

// RecordEgress is the egress Checker's Observe hook for the proxy: it
// keeps the decision for the audit record of the exec it was made for.
func (s *Server) RecordEgress(d *egress.Decision) { s.flow.RecordEgress(d) }

// accessLog writes one line per request: never code, output or keys.
func (s *Server) accessLog(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		r := reqOf(c)
		attrs := []any{
			"method", c.Request().Method,
			"path", c.Request().URL.Path,
			"status", c.Response().Status,
			"duration_ms", time.Since(start).Milliseconds(),
			"bytes_in", c.Request().ContentLength,
			"bytes_out", c.Response().Size,
		}
		for _, a := range [][2]string{{"profile", r.profile}, {"run_status", r.runStatus}, {"error_code", r.errorCode}} {
			if a[1] != "" {
				attrs = append(attrs, a[0], a[1])
			}
		}
		r.log.Info("request", attrs...)
		return nil
	}
}

// observe takes the trace id of a W3C traceparent header into the request's
// log lines, and counts responses by route and status.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if id := traceID(c.Request().Header.Get("traceparent")); id != "" {
			r := reqOf(c)
			r.traceID, r.log = id, r.log.With("trace_id", id)
		}
		err := next(c)
		route := c.Path()
		if route == "" || c.Response().Status == http.StatusNotFound && route == "/*" {
			route = "unmatched"
		}
		s.plane.Metrics().Requests.WithLabelValues(route, fmt.Sprint(c.Response().Status)).Inc()
		return err
	}
}

func (s *Server) recoverPanic(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		return next(c)
	}
}

// authenticate checks the bearer key and that it holds role.
func (s *Server) authenticate(role string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			bearer, ok := auth.ParseBearer(c.Request().Header.Get(echo.HeaderAuthorization))
			if !ok {
				return &api.Error{Status: http.StatusUnauthorized, Code: api.CodeAuth, Message: "missing API key: send the header Authorization: Bearer <key>"}
			}
			key, ok := s.cfg.Keys.Authenticate(bearer)
			if !ok {
				return &api.Error{Status: http.StatusUnauthorized, Code: api.CodeAuth, Message: "the API key is not valid"}
			}
			r := reqOf(c)
			r.key, r.log = key, r.log.With("tenant", key.Tenant, "key_id", key.ID)
			if !key.Has(role) {
				return &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Message: fmt.Sprintf("key %q lacks the role %q needed here", key.ID, role)}
			}
			leave, e := s.open.enter(key.Tenant)
			if e != nil {
				return s.plane.Refusal(e)
			}
			defer leave()
			return next(c)
		}
	}
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// runtimeLister is implemented by engines that can say which OCI runtimes
// they offer (*runner.Runner does).
type runtimeLister interface {
	Runtimes(ctx context.Context) ([]string, error)
}

func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 5*time.Second)
	defer cancel()
	var checks []api.ReadyCheck
	add := func(name string, err error) {
		ch := api.ReadyCheck{Name: name, OK: err == nil}
		if err != nil {
			ch.Error = err.Error()
		}
		checks = append(checks, ch)
	}
	var unavailable []string
	engineErr := s.cfg.Engine.Ping(ctx)
	add("engine", engineErr)
	if engineErr == nil {
		set := s.profiles()
		ic, iu := s.imageChecks(ctx, set)
		rc, ru := s.runtimeChecks(ctx, set)
		checks = append(append(checks, ic...), rc...)
		unavailable = append(append(unavailable, iu...), ru...)
		if ch, names := s.cellCheck(set); ch != nil {
			checks = append(checks, *ch)
			unavailable = append(unavailable, names...)
		}
		if ch, names := s.egressCheck(set); ch != nil {
			checks = append(checks, *ch)
			unavailable = append(unavailable, names...)
		}
		slices.Sort(unavailable)
		unavailable = slices.Compact(unavailable)
	}
	add("data_dir", checkWritable(s.cfg.DataDir))
	if s.plane.Shared() != nil {
		add("state", s.plane.StateError())
	}
	status, code := "ready", http.StatusOK
	for _, ch := range checks {
		if !ch.OK && !ch.Optional {
			status, code = "not ready", http.StatusServiceUnavailable
		}
	}
	body := map[string]any{"status": status, "checks": checks}
	if len(unavailable) > 0 {
		body["unavailable_profiles"] = unavailable
	}
	return c.JSON(code, body)
}

// imageChecks checks that each profile's image is present ("image REF").
// The default profile's image is required; any other is optional: while it
// is missing (not built yet, being built in the background by make run, or
// deleted), readyz stays 200 and lists its profiles as unavailable, and
// their execs answer 503 UNAVAILABLE saying how far its build is.
func (s *Server) imageChecks(ctx context.Context, set *profiles.Set) (checks []api.ReadyCheck, unavailable []string) {
	images, users := set.ProfilesByImage()
	for _, img := range images {
		ch := api.ReadyCheck{Name: "image " + img, Optional: !slices.Contains(users[img], profiles.DefaultName)}
		_, err := s.cfg.Engine.ImageID(ctx, img)
		ch.OK = err == nil
		if err != nil {
			ch.Error = fmt.Sprintf("%v; execs with profile %s answer 503 UNAVAILABLE", err, strings.Join(users[img], ", "))
			unavailable = append(unavailable, users[img]...)
		}
		checks = append(checks, ch)
	}
	return checks, unavailable
}

// runtimeChecks checks that the engine offers each OCI runtime a profile
// names ("runtime runc", "runtime runsc"). A runtime the default profile
// needs is required: without it the service cannot serve plain requests. Any
// other is optional: when it is missing, readyz stays 200 and lists the
// profiles that need it as unavailable, and their execs answer 503
// UNAVAILABLE (so a host without gVisor still serves the default profile).
func (s *Server) runtimeChecks(ctx context.Context, set *profiles.Set) (checks []api.ReadyCheck, unavailable []string) {
	lister, ok := s.cfg.Engine.(runtimeLister)
	if !ok {
		return nil, nil
	}
	users := map[string][]string{} // runtime -> profile names
	var order []string
	for _, name := range set.Names() {
		rt := set.Exec[name].Runtime
		if users[rt] == nil {
			order = append(order, rt)
		}
		users[rt] = append(users[rt], name)
	}
	have, listErr := lister.Runtimes(ctx)
	for _, rt := range order {
		ch := api.ReadyCheck{Name: "runtime " + rt, OK: listErr == nil && slices.Contains(have, rt)}
		ch.Optional = !slices.Contains(users[rt], profiles.DefaultName)
		switch {
		case listErr != nil:
			ch.Error = fmt.Sprintf("listing the engine's runtimes: %v", listErr)
		case !ch.OK:
			ch.Error = fmt.Sprintf("the engine does not offer the runtime %q (engine runtimes: %s), so execs with profile %s answer 503 UNAVAILABLE; to fix it, %s",
				rt, strings.Join(slices.Sorted(slices.Values(have)), ", "), strings.Join(users[rt], ", "), runner.RuntimeHint(rt))
		}
		if !ch.OK {
			unavailable = append(unavailable, users[rt]...)
		}
		checks = append(checks, ch)
	}
	slices.Sort(unavailable)
	return checks, unavailable
}

// egressNetworker is implemented by engines that run networked sandboxes
// (*runner.Runner does).
type egressNetworker interface {
	EgressNetwork() *runner.EgressNet
}

// egressCheck checks, when a profile needs network egress, that the egress
// network is up ("egress network"). It is optional unless the default
// profile needs it; the profiles that need it are unavailable without it
// (their execs answer 503 UNAVAILABLE).
func (s *Server) egressCheck(set *profiles.Set) (*api.ReadyCheck, []string) {
	var users []string
	for _, name := range set.Names() {
		if runner.Networked(set.Exec[name]) {
			users = append(users, name)
		}
	}
	if len(users) == 0 {
		return nil, nil
	}
	ch := &api.ReadyCheck{Name: "egress network", Optional: !slices.Contains(users, profiles.DefaultName)}
	if en, ok := s.cfg.Engine.(egressNetworker); ok && en.EgressNetwork() != nil {
		ch.OK = true
		return ch, nil
	}
	ch.Error = fmt.Sprintf("the egress network is not set up (the log says why), so execs with profile %s answer 503 UNAVAILABLE", strings.Join(users, ", "))
	return ch, users
}

// cellChecker is the engine's word on cells (runner.Runner has it).
type cellChecker interface{ CellsUnavailable() error }

// cellCheck reports whether the profiles with isolation: cell can run.
func (s *Server) cellCheck(set *profiles.Set) (*api.ReadyCheck, []string) {
	var users []string
	for _, name := range set.Names() {
		if set.Exec[name].Isolation == profiles.IsolationCell {
			users = append(users, name)
		}
	}
	if len(users) == 0 {
		return nil, nil
	}
	ch := &api.ReadyCheck{Name: "cells", Optional: !slices.Contains(users, profiles.DefaultName), OK: true}
	cc, ok := s.cfg.Engine.(cellChecker)
	if !ok {
		return ch, nil // an engine without cells runs them its own way (tests' fakes)
	}
	if err := cc.CellsUnavailable(); err != nil {
		ch.OK = false
		ch.Error = fmt.Sprintf("%v; execs with profile %s answer 503 UNAVAILABLE", err, strings.Join(users, ", "))
		return ch, users
	}
	return ch, nil
}

func checkWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".readyz-*")
	if err != nil {
		return fmt.Errorf("data dir %s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(filepath.Clean(name))
}
