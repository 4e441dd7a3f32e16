package security

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/runner"
)

// notInSessions lists the attacks of the table that do not apply to a
// session, and why. Every other attack runs inside a session, as one call,
// and must end as it does in an exec.
var notInSessions = map[string]string{
	"env-host-secrets": "it sets environment variables in the request, which sessions do not take (the environment of a session is the image's)",
}

// sessionOverride adapts an attack to a session where a premise of the
// attack or a bound of its check is the exec's and not the session's.
type sessionOverride struct {
	// prefix runs before the attack's code (after the prelude).
	prefix string
	// check replaces the attack's check.
	check func(t *testing.T, x *run)
	why   string
}

var sessionOverrides = map[string]sessionOverride{
	"out-hard-links": {
		prefix: "open('/tmp/main.py', 'w').write('# code\\n')\n",
		why:    "the attack links /tmp/main.py, the file an exec's code is in; a session's code is in no file, so the prefix makes one there for the link to cross devices from",
	},
	"timeout-ignoring-sigterm": {
		why: "the attack ignores SIGINT too, so the session's interpreter is replaced a second after the limit: the call ends at the limit + 1 s + the restart, and the state is lost",
		check: func(t *testing.T, x *run) {
			if x.r.Stdout != "SLEEPING\n" && x.r.Stdout != "" {
				t.Errorf("stdout %q, want the output before the limit only", x.r.Stdout)
			}
			if x.r.DurationMS < 1500 || x.r.DurationMS >= 3500 {
				t.Errorf("duration_ms %d, want in [1500, 3500): the limit, the 1 s grace of the interrupt and the restart", x.r.DurationMS)
			}
			if !bytes.Contains(x.res.Body, []byte(`"state_lost":true`)) {
				t.Errorf("the interpreter that ignored the interrupt was not replaced: %s", e2e.Clip(x.res.Body, 500))
			}
		},
	},
}

// TestEscapesInSessions runs the attack table inside sessions under the
// default profile: each attack gets a session of its own (with the
// attack's limits), runs as its one call, and the session is then ended;
// the same checks apply, and nothing the attack started may outlive the
// session on the host.
func TestEscapesInSessions(t *testing.T) {
	start := time.Now()
	hl := startHostListener(t)
	subst := hostSubst(hl)
	attacks := allAttacks()
	for _, names := range [][]string{slices.Collect(maps.Keys(notInSessions)), slices.Collect(maps.Keys(sessionOverrides))} {
		for _, name := range names {
			if !slices.ContainsFunc(attacks, func(a attack) bool { return a.name == name }) {
				t.Errorf("%q is not an attack of the table", name)
			}
		}
	}
	ran := 0
	t.Run("parallel", func(t *testing.T) {
		for _, a := range attacks {
			if a.solo || notInSessions[a.name] != "" {
				continue
			}
			ran++
			t.Run(a.name, func(t *testing.T) {
				t.Parallel()
				runSessionAttack(t, "default", a, subst)
			})
		}
	})
	t.Run("solo", func(t *testing.T) {
		for _, a := range attacks {
			if a.solo && notInSessions[a.name] == "" {
				ran++
				t.Run(a.name, func(t *testing.T) { runSessionAttack(t, "default", a, subst) })
			}
		}
	})
	t.Run("after", func(t *testing.T) { afterTable(t, "default", hl) })
	for name, why := range notInSessions {
		t.Logf("not run in a session: %s: %s", name, why)
	}
	for name, o := range sessionOverrides {
		t.Logf("adapted to a session: %s: %s", name, o.why)
	}
	t.Logf("%d attacks in sessions in %v", ran, time.Since(start).Round(100*time.Millisecond))
}

// sessionDo sends one session request with the suite's agent key.
func sessionDo(method, path string, body any, reqID string) (int, []byte, error) {
	var raw []byte
	if body != nil {
		raw = e2e.JSON(body)
	}
	res, err := api.Do(context.Background(), e2e.Request{Method: method, Path: path, Body: raw, ID: reqID})
	if res == nil {
		return 0, nil, err
	}
	return res.Status, res.Body, err
}

// createSession opens a session (POST /sessions with create) and decodes
// the answer into sess; an answer other than 201 fails the test.
func createSession(t *testing.T, create map[string]any, reqID string, sess any) {
	t.Helper()
	status, body, err := sessionDo("POST", "/sessions", create, reqID)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("POST /sessions: %v %d %s", err, status, e2e.Clip(body, 1000))
	}
	if err := json.Unmarshal(body, sess); err != nil {
		t.Fatal(err)
	}
}

// sessionCall runs code in session id and returns the answer; an answer
// other than 200 fails the test.
func sessionCall(t *testing.T, id, code, reqID string) []byte {
	t.Helper()
	status, body, err := sessionDo("POST", "/sessions/"+id+"/exec", map[string]any{"code": code}, reqID)
	if err != nil || status != http.StatusOK {
		t.Fatalf("call: %v %d %s", err, status, e2e.Clip(body, 1500))
	}
	return body
}

func runSessionAttack(t *testing.T, prof string, a attack, subst map[string]string) {
	o := sessionOverrides[a.name]
	x, n, code := newRun(t, prof, pyPrelude+o.prefix+a.code, subst)
	if o.check != nil {
		a.check = o.check
	}
	x.req = e2e.ExecRequest{Language: "python", Code: code, Limits: a.limits}
	reqID := fmt.Sprintf("escape-s%d-%s", n, a.name)
	if len(reqID) > 64 {
		reqID = reqID[:64]
	}
	defer logOnFailure(t, reqID)
	// Sessions hold no run slot between calls, but their calls do: keep
	// to the suite's concurrency.
	if err := execGate.Enter(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer execGate.Leave()
	create := map[string]any{}
	if a.limits != nil {
		create["limits"] = a.limits
	}
	var sess struct {
		ID        string `json:"id"`
		SandboxID string `json:"sandbox_id"`
	}
	createSession(t, create, reqID, &sess)
	seenExecIDs.Add(sess.SandboxID)
	ended := false
	end := func() {
		if ended {
			return
		}
		ended = true
		if status, body, err := sessionDo("DELETE", "/sessions/"+sess.ID, nil, reqID); err != nil || status != http.StatusOK {
			t.Errorf("DELETE /sessions/%s: %v %d %s", sess.ID, err, status, e2e.Clip(body, 500))
		}
		left := e2e.WaitGone(e2e.RemovalTimeout, ourContainers, func(c container.Summary) bool { return c.Labels[runner.LabelExecID] == sess.SandboxID })
		if len(left) > 0 {
			t.Errorf("the session's container remains after DELETE: %s", strings.Join(left, ", "))
		}
	}
	defer end()

	status, body, err := sessionDo("POST", "/sessions/"+sess.ID+"/exec", map[string]any{"code": code}, reqID)
	if err != nil || status != http.StatusOK {
		t.Fatalf("POST /sessions/%s/exec: %v %d, want 200 for a call that ran: %s", sess.ID, err, status, e2e.Clip(body, 2000))
	}
	// A session call's answer has no Server-Timing, and its wall time is
	// not taken (wallAfterStart is 0 for it).
	x.res = &e2e.Result{Status: status, Body: body}
	x.checkAnswer(t, body, a.status, a.otherStatus)
	if a.check != nil {
		a.check(t, x)
	}
	// The session ends; then nothing the attack started may be left.
	end()
	if a.host != nil {
		a.host(t, x)
	}
	x.checkHostClean(t, "of this session are still alive on the host after it ended", x.r.Stdout)
}
