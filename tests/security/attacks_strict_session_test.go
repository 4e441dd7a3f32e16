package security

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestStrictSessionCannotReachTheLauncher: under gVisor a session's code
// tried to read the launcher's stdin (/proc/1/fd/0), stealing sandboxd's
// next call frame, and could signal the launcher (issue 16, item 4). The
// launcher is another uid there now: the reads and signals fail, and the
// next call runs.
func TestStrictSessionCannotReachTheLauncher(t *testing.T) {
	if ok, why := strictUsable(); !ok {
		t.Fatalf("the strict profile is not usable here: %s", why)
	}
	var sess struct {
		ID string `json:"id"`
	}
	createSession(t, map[string]any{"profile": strictProfile}, "strict-session", &sess)
	defer sessionDo("DELETE", "/sessions/"+sess.ID, nil, "strict-session")
	call := func(code string) string {
		t.Helper()
		var r struct{ Stdout string }
		_ = json.Unmarshal(sessionCall(t, sess.ID, code, "strict-session"), &r)
		return r.Stdout
	}
	out := call(`
import os, signal, threading
def steal():
    try:
        fd = os.open("/proc/1/fd/0", os.O_RDONLY)
    except OSError as e:
        print("open-stdin", e.strerror, flush=True)
        return
    print("open-stdin ALLOWED", flush=True)
    def read():
        while os.read(fd, 65536):
            pass
    threading.Thread(target=read, daemon=True).start()
steal()
for s in (signal.SIGSTOP, signal.SIGKILL):
    try:
        os.kill(1, s)
        print("kill", s.name, "ALLOWED", flush=True)
    except OSError as e:
        print("kill", s.name, e.strerror, flush=True)
`)
	if strings.Contains(out, "ALLOWED") {
		t.Errorf("HOLE: the session's code reached the launcher: %q", out)
	}
	for i := range 3 {
		if got := call("print(6 * 7)"); got != "42\n" {
			t.Fatalf("call %d after the attempt: stdout %q, want 42", i+2, got)
		}
	}
}
