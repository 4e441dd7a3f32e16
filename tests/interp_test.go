package tests

import (
	"strings"
	"testing"
)

// The code runs in an interpreter started before the job arrived; it must
// look to the code exactly like `python3 /tmp/main.py`.
func TestWaitingInterpreterLooksLikeAPlainRun(t *testing.T) {
	t.Parallel()
	c := newTC(t)
	req := py(`import os, sys
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
	r, _ := c.exec(py("x = ("))
	if r.Status != "error" || r.ExitCode != 1 || strings.Contains(r.Stderr, "Traceback") || !strings.Contains(r.Stderr, "SyntaxError") || strings.Contains(r.Stderr, "<string>") {
		t.Errorf("syntax error: status %s exit %d stderr %q", r.Status, r.ExitCode, r.Stderr)
	}
	r, _ = c.exec(py("import sys\nsys.exit(7)"))
	if r.Status != "error" || r.ExitCode != 7 || r.Stderr != "" {
		t.Errorf("sys.exit(7): status %s exit %d stderr %q", r.Status, r.ExitCode, r.Stderr)
	}
	r, _ = c.exec(py("raise SystemExit('bye')"))
	if r.ExitCode != 1 || r.Stderr != "bye\n" {
		t.Errorf("SystemExit('bye'): exit %d stderr %q", r.ExitCode, r.Stderr)
	}
}
