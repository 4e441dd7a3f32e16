package security

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/e2e"
)

// TestCancelledRunSaysHowItEnded: a run killed by DELETE /exec/{id} says
// so as the README promises (exit code 128+9, SIGKILL) with what it used,
// and its async state keeps its times (issue 16, item 11: exit_code 0,
// signal "", zero usage; started_at vanished; created_at moved).
func TestCancelledRunSaysHowItEnded(t *testing.T) {
	type state struct {
		ID         string     `json:"id"`
		Status     string     `json:"status"`
		CreatedAt  string     `json:"created_at"`
		StartedAt  *string    `json:"started_at"`
		FinishedAt *time.Time `json:"finished_at"`
		Result     *struct {
			ExitCode int    `json:"exit_code"`
			Signal   string `json:"signal"`
			Usage    struct {
				UserCPUMS int64 `json:"user_cpu_ms"`
				SysCPUMS  int64 `json:"sys_cpu_ms"`
			} `json:"usage"`
		} `json:"result"`
	}
	get := func(method, path string, body any) (int, state, []byte) {
		t.Helper()
		status, raw, err := sessionDo(method, path, body, "cancel-signal")
		if err != nil {
			t.Fatal(err)
		}
		var st state
		_ = json.Unmarshal(raw, &st)
		return status, st, raw
	}
	status, accepted, raw := get("POST", "/exec", map[string]any{"language": "python", "async": true,
		"code": "print('spinning', flush=True)\nwhile True:\n    pass\n"})
	if status != http.StatusAccepted {
		t.Fatalf("async exec: %d %s", status, e2e.Clip(raw, 500))
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, st, _ := get("GET", "/exec/"+accepted.ID, nil)
		if st.Status == "running" && st.StartedAt != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not start: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // it burns CPU meanwhile
	status, st, raw := get("DELETE", "/exec/"+accepted.ID, nil)
	if status != http.StatusOK || st.Status != "killed" || st.Result == nil {
		t.Fatalf("DELETE: %d %s", status, e2e.Clip(raw, 800))
	}
	if st.Result.ExitCode != 137 || st.Result.Signal != "SIGKILL" {
		t.Errorf("a killed run reports exit_code %d, signal %q; want 137 and SIGKILL", st.Result.ExitCode, st.Result.Signal)
	}
	if st.Result.Usage.UserCPUMS+st.Result.Usage.SysCPUMS == 0 {
		t.Errorf("a run killed after spinning reports no CPU use: %s", e2e.Clip(raw, 800))
	}
	if st.CreatedAt != accepted.CreatedAt || st.StartedAt == nil || st.FinishedAt == nil {
		t.Errorf("times: 202 created_at %s; after the kill %+v", accepted.CreatedAt, st)
	}
}
