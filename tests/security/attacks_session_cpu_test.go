package security

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/e2e"
)

// TestSessionCPUAfterTheLastCallIsCharged: a call starts threads that
// spin and returns; the session is then deleted. The CPU the threads
// burnt after the call is charged to the tenant when the session ends
// (issue 16, item 3: 28 s ran, 0.07 s was charged).
func TestSessionCPUAfterTheLastCallIsCharged(t *testing.T) {
	profs := []string{"default"}
	if ok, _ := strictUsable(); ok {
		profs = append(profs, strictProfile)
	}
	for _, prof := range profs {
		t.Run(prof, func(t *testing.T) {
			reqID := "session-cpu-" + prof
			var sess struct {
				ID     string `json:"id"`
				Limits struct {
					CPUs float64 `json:"cpus"`
				} `json:"limits"`
			}
			createSession(t, map[string]any{"profile": prof}, reqID, &sess)
			before := tenantCPUSeconds(t)
			sessionCall(t, sess.ID, `
import threading
def spin():
    while True:
        pass
for _ in range(2):
    threading.Thread(target=spin, daemon=True).start()
print("spinning")
`, reqID)
			const spin = 4 * time.Second
			time.Sleep(spin)
			if status, body, err := sessionDo("DELETE", "/sessions/"+sess.ID, nil, reqID); err != nil || status != http.StatusOK {
				t.Fatalf("DELETE: %v %d %s", err, status, e2e.Clip(body, 500))
			}
			charged := tenantCPUSeconds(t) - before
			// The threads could use the profile's CPUs for the whole spin;
			// on a loaded 2-core machine they get a share of it, so the
			// floor is an eighth (the hole charged 0.07 s of 28 s). Nor may
			// more than the container could use be charged.
			if want := spin.Seconds() * sess.Limits.CPUs / 8; charged < want {
				t.Errorf("HOLE: %.2f CPU-seconds charged for a session whose threads spun %v on %.2g CPUs after its call; want at least %.2f", charged, spin, sess.Limits.CPUs, want)
			}
			if most := (spin.Seconds() + 3) * sess.Limits.CPUs; charged > most {
				t.Errorf("%.2f CPU-seconds charged, more than the container could use in %v (%.2f)", charged, spin+3*time.Second, most)
			}
			t.Logf("%s: %.2f CPU-seconds charged", prof, charged)
		})
	}
}

// tenantCPUSeconds is the suite's tenant's CPU use today (GET /usage).
func tenantCPUSeconds(t *testing.T) float64 {
	t.Helper()
	status, body, err := sessionDo("GET", "/usage?tenant=escape", nil, "session-cpu-usage")
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /usage: %v %d %s", err, status, e2e.Clip(body, 500))
	}
	var u struct {
		Used struct {
			CPUSeconds float64 `json:"cpu_seconds"`
		} `json:"used"`
	}
	if err := json.Unmarshal(body, &u); err != nil {
		t.Fatal(err)
	}
	return u.Used.CPUSeconds
}
