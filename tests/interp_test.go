package tests

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/e2e"
)

// The code runs in an interpreter started before the job arrived; it must
// look to the code exactly like `python3 /tmp/main.py`.
func TestWaitingInterpreterLooksLikeAPlainRun(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	req := e2e.Py(`import os, sys
print(__name__, __file__, sys.argv, sys.path[0])
print(sorted(k for k in globals() if not k.startswith("__")))
print(os.environ["JOB_VAR"], os.getcwd())
import multiprocessing as mp
def sq(x):
    return x * x
if __name__ == "__main__":
    with mp.get_context("fork").Pool(2) as p:
        print(p.map(sq, [1, 2, 3]))
    print(os.read(0, 100).decode())
def boom():
    raise KeyError("k")
boom()
`)
	req.Env = map[string]string{"JOB_VAR": "from-the-job"}
	req.Stdin = "stdin-data"
	r, res := c.exec(req)
	wantLines := []string{
		"__main__ /tmp/main.py ['/tmp/main.py'] /tmp",
		"['os', 'sys']", // nothing of the waiting interpreter's own
		"from-the-job /sandbox",
		"[1, 4, 9]",
		"stdin-data",
	}
	if got := strings.Split(strings.TrimSpace(r.Stdout), "\n"); strings.Join(got, "\n") != strings.Join(wantLines, "\n") {
		t.Errorf("stdout:\n%s\nwant:\n%s\n%s", r.Stdout, strings.Join(wantLines, "\n"), res)
	}
	wantErr := "Traceback (most recent call last):\n  File \"/tmp/main.py\", line 14, in <module>\n    boom()\n  File \"/tmp/main.py\", line 13, in boom\n    raise KeyError(\"k\")\nKeyError: 'k'\n"
	if r.Status != "error" || r.ExitCode != 1 || r.Stderr != wantErr {
		t.Errorf("status %s exit %d stderr:\n%s\nwant:\n%s", r.Status, r.ExitCode, r.Stderr, wantErr)
	}
}

func TestWaitingInterpreterSyntaxErrorAndExitCodes(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	r, _ := c.exec(e2e.Py("x = ("))
	if r.Status != "error" || r.ExitCode != 1 || strings.Contains(r.Stderr, "Traceback") || !strings.Contains(r.Stderr, "SyntaxError") || strings.Contains(r.Stderr, "<string>") {
		t.Errorf("syntax error: status %s exit %d stderr %q", r.Status, r.ExitCode, r.Stderr)
	}
	r, _ = c.exec(e2e.Py("import sys\nsys.exit(7)"))
	if r.Status != "error" || r.ExitCode != 7 || r.Stderr != "" {
		t.Errorf("sys.exit(7): status %s exit %d stderr %q", r.Status, r.ExitCode, r.Stderr)
	}
	r, _ = c.exec(e2e.Py("raise SystemExit('bye')"))
	if r.ExitCode != 1 || r.Stderr != "bye\n" {
		t.Errorf("SystemExit('bye'): exit %d stderr %q", r.ExitCode, r.Stderr)
	}
}

// The waiting interpreter's quick exit keeps what a plain exit does: atexit
// handlers run, non-daemon threads finish, files left open are flushed.
func TestWaitingInterpreterExitKeepsPythonSemantics(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	r, res := c.exec(e2e.Py(`import atexit, threading, time, sys
atexit.register(lambda: print("atexit ran"))
def late():
    time.sleep(0.3)
    print("thread finished")
threading.Thread(target=late).start()
f = open("/sandbox/out/unclosed.txt", "w")
f.write("written but never closed")
sys.stdout.write("no newline at the end")
`))
	if r.Status != "ok" || !strings.Contains(r.Stdout, "thread finished") || !strings.Contains(r.Stdout, "atexit ran") || !strings.Contains(r.Stdout, "no newline at the end") {
		t.Errorf("status %s stdout %q\n%s", r.Status, r.Stdout, res)
	}
	if f := r.File("unclosed.txt"); f == nil || string(unb64(t, f.Content)) != "written but never closed" {
		t.Errorf("the file the code left open was not flushed: %+v", r.Files)
	}
}

// The data profile's interpreter has numpy, pandas and matplotlib imported
// before the code starts, and a plot can be saved and returned.
func TestDataProfilePreloads(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	req := e2e.Py(`import sys
print(all(m in sys.modules for m in ("numpy", "pandas", "matplotlib.pyplot")))
import pandas as pd
import matplotlib.pyplot as plt
df = pd.DataFrame({"a": [1, 2, 3]})
print(int(df["a"].sum()))
plt.plot(df["a"])
plt.savefig("/sandbox/out/plot.png")
`)
	req.Profile = "data"
	r, res := c.exec(req)
	if r.Status != "ok" || r.Stdout != "True\n6\n" {
		t.Fatalf("status %s stdout %q stderr %q\n%s", r.Status, r.Stdout, r.Stderr, res)
	}
	png := r.File("plot.png")
	if png == nil || !strings.HasPrefix(string(unb64(t, png.Content)), "\x89PNG") {
		t.Fatalf("no PNG came back: %+v", r.Files)
	}
	if strings.Contains(r.Stderr, "Matplotlib") {
		t.Errorf("matplotlib complained (font cache?): %q", r.Stderr)
	}
}

// In a cold sandbox the data profile's preload (numpy, pandas, matplotlib:
// a second or more here) is the sandbox's start-up: the job's wall clock
// starts once it is done, so a trivial job under a short limit is not
// killed for the time the imports took.
func TestColdPreloadIsNotOnTheJobClock(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	req := e2e.Py("import sys\nprint('pandas' in sys.modules)\n")
	req.Profile = "data"
	// A lower tmpfs size is one a ready container cannot take: the run
	// gets a cold sandbox.
	req.Limits = map[string]any{"timeout_ms": 300, "tmpfs_mb": 200}
	r, res := c.exec(req)
	if r.Status != "ok" || r.Stdout != "True\n" {
		t.Fatalf("status %s (%s) stdout %q: the preload counted against the 300 ms limit\n%s", r.Status, r.Message, r.Stdout, res)
	}
	if st := res.Header.Get("Server-Timing"); !strings.Contains(st, `sandbox;desc="cold"`) {
		t.Errorf("the run did not get a cold sandbox: Server-Timing %q", st)
	}
	if r.DurationMS > 300 {
		t.Errorf("duration_ms %d counts more than the job", r.DurationMS)
	}
}
