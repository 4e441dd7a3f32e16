package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/internal/logbuf"
)

// Server timing budgets (its start is e2e.Start's default).
const (
	// serverStopTimeout: sandboxd's shutdown grace (set to 5 s below) plus
	// its kill-and-remove phase.
	serverStopTimeout = 60 * time.Second
	requestTimeout    = 60 * time.Second
)

// sandboxd is a `sandboxd serve` of the test's own, talking to the private
// engine, and a client of it with its agent key.
type sandboxd struct {
	*e2e.Server
	api e2e.Client
}

// startSandboxd starts sandboxd with the module's profiles (a container
// per run), a keys file
// with one agent key and the warm pool on, against the engine at
// dockerHost, with its data under dir, and waits for /healthz. Its
// clean-up stops it.
func startSandboxd(t *testing.T, bin, root, dir, dockerHost string, poolSize int) *sandboxd {
	t.Helper()
	key := e2e.NewSecret("sbxtest_")
	keys := filepath.Join(dir, "keys.yaml")
	if err := e2e.WriteKeys(keys, e2e.Key{ID: "engine-test", Tenant: "engine-test", Roles: []string{"agent"}, Secret: key}); err != nil {
		t.Fatal(err)
	}
	// The warm pool is the subject: the shipped profiles with a container
	// per run (the default profile's isolation is cell).
	profilesDir := filepath.Join(dir, "profiles")
	if err := e2e.ContainerProfiles(filepath.Join(root, "profiles"), profilesDir); err != nil {
		t.Fatal(err)
	}
	log := &logbuf.Buffer{}
	srv, err := e2e.Start(e2e.ServerConfig{
		Bin:         bin,
		DataDir:     filepath.Join(dir, "data"),
		ProfilesDir: profilesDir,
		KeysFile:    keys,
		Flags: []string{
			"--pool-size", fmt.Sprint(poolSize),
			// The most equal to the least: the target stays poolSize
			// whatever the request rate, so "back to the target" is exact.
			"--pool-max", fmt.Sprint(poolSize),
			"--egress-port", "0",
			"--shutdown-grace", "5s",
			"--log-level", "info",
		},
		Env: cleanEnv([]string{"DOCKER_HOST=" + dockerHost}),
		Log: log,
	})
	if err != nil {
		t.Fatalf("%v\n--- sandboxd output ---\n%s", err, log.Tail(60))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- last lines of sandboxd's output ---\n%s", log.Tail(60))
		}
		keepLog(t, "sandboxd.log", log.String())
		if err := srv.Stop(serverStopTimeout); err != nil {
			t.Error(err)
		}
	})
	return &sandboxd{Server: srv, api: e2e.Client{URL: srv.URL, Key: key}}
}

// execAnswer is one POST /exec as the client saw it.
type execAnswer struct {
	HTTP    int // 0: no answer (transport error in Err)
	Header  http.Header
	Body    []byte
	Wall    time.Duration
	Err     error
	Result  e2e.ExecResponse
	Problem struct {
		Code    string
		Message string
	}
}

func (a *execAnswer) String() string {
	if a.HTTP == 0 {
		return fmt.Sprintf("no answer after %v: %v", a.Wall.Round(time.Millisecond), a.Err)
	}
	return fmt.Sprintf("HTTP %d after %v: %s", a.HTTP, a.Wall.Round(time.Millisecond), strings.TrimSpace(string(a.Body)))
}

// exec runs code with the default profile, bounded by within.
func (s *sandboxd) exec(code string, within time.Duration) *execAnswer {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	began := time.Now()
	res, err := s.api.Exec(ctx, e2e.Py(code), "")
	a := &execAnswer{Wall: time.Since(began), Err: err}
	if res != nil {
		a.HTTP, a.Header, a.Body = res.Status, res.Header, res.Body
	}
	if a.HTTP == http.StatusOK {
		_ = json.Unmarshal(a.Body, &a.Result)
	} else if a.HTTP != 0 {
		var e e2e.ErrorBody
		if json.Unmarshal(a.Body, &e) == nil && e.Error != nil {
			a.Problem.Code, a.Problem.Message = e.Error.Code, e.Error.Message
		}
	}
	return a
}

// readyz returns /readyz's status and whether its "engine" check passed.
func (s *sandboxd) readyz() (int, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	res, r, err := s.api.Readiness(ctx)
	if res == nil || res.Status == 0 {
		return 0, false, err
	}
	if err != nil {
		return res.Status, false, err
	}
	if c := r.Check("engine"); c != nil {
		return res.Status, c.OK, nil
	}
	return res.Status, false, fmt.Errorf("/readyz has no engine check")
}

// sandboxKind returns the desc of the "sandbox" entry of the answer's
// Server-Timing header ("warm" or "cold"), or "" without one.
func sandboxKind(h http.Header) string {
	for _, v := range h.Values("Server-Timing") {
		for _, entry := range strings.Split(v, ",") {
			parts := strings.Split(strings.TrimSpace(entry), ";")
			if strings.TrimSpace(parts[0]) != "sandbox" {
				continue
			}
			for _, p := range parts[1:] {
				if name, val, ok := strings.Cut(strings.TrimSpace(p), "="); ok && name == "desc" {
					return strings.Trim(val, `"`)
				}
			}
		}
	}
	return ""
}

// keepLog copies a whole log into $ENGINE_TEST_LOG_DIR when that is set
// (for a look at a run beyond the lines a failure prints).
func keepLog(t *testing.T, name, content string) {
	dir := os.Getenv("ENGINE_TEST_LOG_DIR")
	if dir == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Logf("keeping %s: %v", name, err)
	}
}
