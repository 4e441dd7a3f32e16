package httpapi

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/control/admit"
	"github.com/sandboxd/sandboxd/internal/control/budget"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
	"github.com/sandboxd/sandboxd/internal/metrics"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/runner"
)

// newServer builds a server for a test. The dependencies sandboxd serve
// wires and cfg leaves out are the test's own: an in-memory store and
// audit log, a capture store under DataDir (or a temporary directory), no
// budgets, a fresh metrics registry, four run slots and a fake engine.
// They are closed when the test ends, after the server.
func newServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	if cfg.Control.Store == nil {
		st, err := store.OpenSQLite("")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		cfg.Control.Store = st
	}
	if cfg.Control.Limits == nil {
		cfg.Control.Limits = budget.New(nil, cfg.Control.Store, cfg.Log)
	}
	if cfg.Control.Metrics == nil {
		cfg.Control.Metrics = metrics.New()
	}
	if cfg.Audit == nil {
		l, err := audit.Open("")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		cfg.Audit = l
	}
	if cfg.Captures == nil {
		dir := cfg.DataDir
		if dir == "" {
			dir = t.TempDir()
		}
		cs, err := capture.Open(filepath.Join(dir, "captures"), capture.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		cfg.Captures = cs
	}
	if cfg.Gate == nil {
		cfg.Gate = admit.New(4, 8, time.Minute)
	}
	if cfg.Engine == nil {
		cfg.Engine = &fakeEngine{result: runner.Result{Status: runner.StatusOK, ImageID: "sha256:fake"}}
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// with rebuilds s with its configuration changed by change, over the same
// stores and logs, as a restarted process would be wired: for tests that
// swap the engine, the audit log or the profile set in force.
func (s *Server) with(t testing.TB, change func(*Config)) *Server {
	t.Helper()
	cfg := s.cfg
	change(&cfg)
	cfg.Control.Metrics = nil // a registry takes each metric once
	s.Close()
	return newServer(t, cfg)
}

// serve sends one request to srv and returns the recorded answer: key,
// unless "", as the bearer token, body, unless "", as the body, and
// headers as name, value pairs.
func serve(srv *Server, method, path, key, body string, headers ...string) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, path, rd)
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, r)
	return rec
}
