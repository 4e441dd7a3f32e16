package httpapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/runner"
)

// withMirror returns a copy of set with a networked exec profile "mirror".
func withMirror(set *profiles.Set) *profiles.Set {
	m := *set.Exec["default"]
	m.Name, m.Egress, m.Version = "mirror", "package-mirror", "mirror-version"
	out := *set
	out.Exec = maps.Clone(set.Exec)
	out.Exec["mirror"] = &m
	return &out
}

// The server reads the set in force at each request: a swap applies to
// the next one. A networked profile without the egress network is listed
// as unavailable by /readyz and its execs answer 503.
func TestCurrentProfilesAndEgressUnavailable(t *testing.T) {
	f := newFixture(t, 1, 1)
	base := f.srv.cfg.Profiles
	cur := &atomic.Pointer[profiles.Set]{}
	cur.Store(base)
	f.srv = f.srv.with(t, func(c *Config) { c.CurrentProfiles = cur })

	body := `{"language":"python","code":"print(1)","profile":"mirror"}`
	if resp, out := f.do(t, f.agent, body); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("mirror before the swap: %d %v", resp.StatusCode, out)
	}
	cur.Store(withMirror(base))
	if resp, out := f.do(t, f.agent, body); resp.StatusCode != http.StatusOK || fmt.Sprint(out["profile"]) != "map[name:mirror version:mirror-version]" {
		t.Fatalf("mirror after the swap: %d %v", resp.StatusCode, out)
	}

	f.srv = f.srv.with(t, func(c *Config) {
		c.Engine = &runtimeEngine{fakeEngine: f.eng, runtimes: []string{"runc", "runsc"}, runErr: fmt.Errorf("%w: test", runner.ErrEgressUnavailable)}
	})
	if resp, out := f.do(t, f.agent, body); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("egress unavailable: %d %v, want 503", resp.StatusCode, out)
	}

	rec := httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var b readyBody
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
		t.Fatal(err)
	}
	c := check(b, "egress network")
	if rec.Code != http.StatusOK || c == nil || c.OK || !c.Optional || len(b.Unavailable) != 1 || b.Unavailable[0] != "mirror" {
		t.Fatalf("readyz %d %+v (check %+v)", rec.Code, b, c)
	}
}
