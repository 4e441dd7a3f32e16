package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/runner"
)

// runtimeEngine is a fakeEngine that lists runtimes and can fail runs the
// way the runner does when a profile's runtime is missing.
type runtimeEngine struct {
	*fakeEngine
	runtimes []string
	listErr  error
	runErr   error
}

func (e *runtimeEngine) Runtimes(context.Context) ([]string, error) { return e.runtimes, e.listErr }

func (e *runtimeEngine) Run(ctx context.Context, spec *runner.Spec) (*runner.Result, error) {
	if e.runErr != nil {
		return nil, e.runErr
	}
	return e.fakeEngine.Run(ctx, spec)
}

type readyBody struct {
	Status      string           `json:"status"`
	Checks      []api.ReadyCheck `json:"checks"`
	Unavailable []string         `json:"unavailable_profiles"`
}

func readyzWith(t *testing.T, eng Engine) (int, readyBody) {
	t.Helper()
	f := newFixture(t, 1, 1)
	f.srv = f.srv.with(t, func(c *Config) { c.Engine = eng })
	rec := httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var b readyBody
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
		t.Fatalf("readyz body %q: %v", rec.Body.String(), err)
	}
	return rec.Code, b
}

func check(b readyBody, name string) *api.ReadyCheck {
	for i := range b.Checks {
		if b.Checks[i].Name == name {
			return &b.Checks[i]
		}
	}
	return nil
}

func TestReadyzRuntimes(t *testing.T) {
	t.Run("all present", func(t *testing.T) {
		code, b := readyzWith(t, &runtimeEngine{fakeEngine: &fakeEngine{}, runtimes: []string{"runsc", "runc"}})
		if code != 200 || b.Status != "ready" || len(b.Unavailable) != 0 {
			t.Fatalf("readyz %d %+v", code, b)
		}
		for _, name := range []string{"runtime runc", "runtime runsc"} {
			if c := check(b, name); c == nil || !c.OK {
				t.Errorf("check %q = %+v, want ok", name, c)
			}
		}
	})
	t.Run("runsc missing: still ready, strict unavailable", func(t *testing.T) {
		code, b := readyzWith(t, &runtimeEngine{fakeEngine: &fakeEngine{}, runtimes: []string{"runc"}})
		if code != 200 || b.Status != "ready" {
			t.Fatalf("readyz %d %+v, want 200 ready", code, b)
		}
		c := check(b, "runtime runsc")
		if c == nil || c.OK || !c.Optional {
			t.Fatalf("runtime runsc check = %+v, want failed and optional", c)
		}
		for _, want := range []string{`"runsc"`, "strict", "make gvisor", "503 UNAVAILABLE"} {
			if !strings.Contains(c.Error, want) {
				t.Errorf("runsc check error %q lacks %q", c.Error, want)
			}
		}
		if len(b.Unavailable) != 1 || b.Unavailable[0] != "strict" {
			t.Errorf("unavailable_profiles = %v, want [strict]", b.Unavailable)
		}
		if c := check(b, "runtime runc"); c == nil || !c.OK || c.Optional {
			t.Errorf("runtime runc check = %+v, want ok and required", c)
		}
	})
	t.Run("runc missing: not ready", func(t *testing.T) {
		code, b := readyzWith(t, &runtimeEngine{fakeEngine: &fakeEngine{}, runtimes: []string{"runsc"}})
		if code != 503 || b.Status != "not ready" {
			t.Fatalf("readyz %d %+v, want 503: the default profile needs runc", code, b)
		}
	})
	t.Run("listing fails", func(t *testing.T) {
		code, b := readyzWith(t, &runtimeEngine{fakeEngine: &fakeEngine{}, listErr: errors.New("boom")})
		if code != 503 {
			t.Fatalf("readyz %d %+v, want 503", code, b)
		}
		if c := check(b, "runtime runc"); c == nil || c.OK || !strings.Contains(c.Error, "boom") {
			t.Errorf("runtime runc check = %+v", c)
		}
	})
}

// A strict exec whose runtime the engine lacks is a 503 UNAVAILABLE that
// names the runtime and the fix.
func TestExecRuntimeMissingIsUnavailable(t *testing.T) {
	f := newFixture(t, 1, 1)
	eng := &runtimeEngine{fakeEngine: f.eng, runtimes: []string{"runc"},
		runErr: &runner.RuntimeError{Runtime: "runsc", Profile: "strict", Engine: "Unknown runtime specified runsc"}}
	f.srv = f.srv.with(t, func(c *Config) { c.Engine = eng })
	resp, body := f.do(t, f.agent, `{"language":"python","code":"print(1)","profile":"strict"}`)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d %v, want 503", resp.StatusCode, body)
	}
	code, _, msg := errorOf(t, body)
	if code != api.CodeUnavailable {
		t.Errorf("code %q, want %s", code, api.CodeUnavailable)
	}
	for _, want := range []string{`"runsc"`, `"strict"`, "make gvisor"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}

// cellEngine is a runtimeEngine with the runner's word on cells.
type cellEngine struct {
	*runtimeEngine
	cellsErr error
}

func (e *cellEngine) CellsUnavailable() error { return e.cellsErr }

// A kernel that forbids unprivileged user namespaces: /readyz says so
// naming the setting, the cell profiles are unavailable, and their execs
// are a 503 UNAVAILABLE, never a run with other isolation.
func TestCellsUnavailable(t *testing.T) {
	why := fmt.Errorf("%w: the kernel allows no user namespaces (user.max_user_namespaces = 0); set it", runner.ErrCellsUnavailable)
	code, b := readyzWith(t, &cellEngine{runtimeEngine: &runtimeEngine{fakeEngine: &fakeEngine{}, runtimes: []string{"runc", "runsc"}}, cellsErr: why})
	if code != 503 || b.Status != "not ready" {
		t.Fatalf("readyz %d %+v, want 503: the default profile runs in cells", code, b)
	}
	c := check(b, "cells")
	if c == nil || c.OK || c.Optional || !strings.Contains(c.Error, "user.max_user_namespaces = 0") || !strings.Contains(c.Error, "503 UNAVAILABLE") {
		t.Errorf("cells check = %+v", c)
	}
	if !slices.Equal(b.Unavailable, []string{"data", "default", "strict"}) {
		t.Errorf("unavailable_profiles = %v, want [data default strict]", b.Unavailable)
	}
	if code, b := readyzWith(t, &cellEngine{runtimeEngine: &runtimeEngine{fakeEngine: &fakeEngine{}, runtimes: []string{"runc", "runsc"}}}); code != 200 || check(b, "cells") == nil || !check(b, "cells").OK {
		t.Errorf("with cells available: readyz %d %+v", code, b)
	}

	f := newFixture(t, 1, 1)
	eng := &runtimeEngine{fakeEngine: f.eng, runtimes: []string{"runc"}, runErr: why}
	f.srv = f.srv.with(t, func(c *Config) { c.Engine = eng })
	resp, body := f.do(t, f.agent, `{"language":"python","code":"print(1)"}`)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d %v, want 503", resp.StatusCode, body)
	}
	if code, _, msg := errorOf(t, body); code != api.CodeUnavailable || !strings.Contains(msg, "user.max_user_namespaces") {
		t.Errorf("error %s %q", code, msg)
	}
}

// imageEngine is a fakeEngine without some images, as the runner reports
// them.
type imageEngine struct {
	*fakeEngine
	missing map[string]bool
}

func (e *imageEngine) ImageID(_ context.Context, ref string) (string, error) {
	if e.missing[ref] {
		return "", fmt.Errorf("%w: %s (it is being built: step 1 of 3, 40s so far)", runner.ErrImageMissing, ref)
	}
	return "sha256:fake", nil
}

// A missing image of a profile other than the default leaves the service
// ready and names the profiles it holds back and how far its build is; a
// missing default image makes the service not ready.
func TestReadyzImages(t *testing.T) {
	const data, base = "sandboxd/python-data:3.11", "sandboxd/python:3.11"
	t.Run("data image being built", func(t *testing.T) {
		code, b := readyzWith(t, &imageEngine{fakeEngine: &fakeEngine{}, missing: map[string]bool{data: true}})
		if code != 200 || b.Status != "ready" {
			t.Fatalf("readyz %d %+v, want 200 ready", code, b)
		}
		c := check(b, "image "+data)
		if c == nil || c.OK || !c.Optional {
			t.Fatalf("check of the data image = %+v, want failed and optional", c)
		}
		for _, want := range []string{"being built", "step 1 of 3", "profile data", "503 UNAVAILABLE"} {
			if !strings.Contains(c.Error, want) {
				t.Errorf("data image check error %q lacks %q", c.Error, want)
			}
		}
		if !slices.Equal(b.Unavailable, []string{"data"}) {
			t.Errorf("unavailable_profiles = %v, want [data]", b.Unavailable)
		}
		if c := check(b, "image "+base); c == nil || !c.OK || c.Optional {
			t.Errorf("check of the default image = %+v, want ok and required", c)
		}
		if c := check(b, "engine"); c == nil || !c.OK {
			t.Errorf("engine check = %+v", c)
		}
	})
	t.Run("default image missing", func(t *testing.T) {
		code, b := readyzWith(t, &imageEngine{fakeEngine: &fakeEngine{}, missing: map[string]bool{base: true}})
		if code != 503 || b.Status != "not ready" {
			t.Fatalf("readyz %d %+v, want 503: the default profile needs its image", code, b)
		}
		if !slices.Contains(b.Unavailable, "default") {
			t.Errorf("unavailable_profiles = %v, want default among them", b.Unavailable)
		}
	})
}
