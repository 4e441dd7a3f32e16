package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// hostPython runs w's code with the host's python3: the floor.
func hostPython(w workload) call {
	return func() attempt {
		var stderr bytes.Buffer
		cmd := exec.Command("/usr/bin/python3", "-c", w.code)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return attempt{err: fmt.Errorf("host python3: %v: %s", err, lastLine(stderr.String()))}
		}
		if strings.TrimSpace(string(out)) != w.want {
			return attempt{err: fmt.Errorf("host python3 printed %q, not %q", clip(string(out), 100), w.want)}
		}
		return attempt{}
	}
}

// dockerRun runs w's code in a container of its own, removed afterwards;
// runtime names the OCI runtime ("": the engine's default).
func dockerRun(runtime string, w workload) call {
	args := []string{"run", "--rm", "--network", "none"}
	if runtime != "" {
		args = append(args, "--runtime", runtime)
	}
	args = append(args, w.image, "python3", "-c", w.code)
	return func() attempt {
		var stderr bytes.Buffer
		cmd := exec.Command("docker", args...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return attempt{err: fmt.Errorf("docker run: %v: %s", err, clip(stderr.String(), 300))}
		}
		if strings.TrimSpace(string(out)) != w.want {
			return attempt{err: fmt.Errorf("docker run printed %q, not %q", clip(string(out), 100), w.want)}
		}
		return attempt{}
	}
}

// probe is one way of building what a cell needs, tried in a container.
type probe struct {
	name string
	args []string
}

// cellProbes build a cell as the cell host's launcher does (bubblewrap:
// user, PID, mount, IPC, UTS and network namespaces, a fresh /proc), and
// the bare step under it (a user and mount namespace).
var cellProbes = []probe{
	{"bubblewrap cell running print(1)", []string{"/usr/bin/bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/",
		"--proc", "/proc", "--dev", "/dev", "/usr/bin/python3", "-c", "print(1)"}},
	{"user and mount namespace (unshare -Urm)", []string{"/usr/bin/unshare", "--user", "--map-root-user", "--mount", "/bin/true"}},
}

// strictProbes are the probes' outcomes by runtime: "" when it worked,
// else what failed.
type strictProbes struct {
	runtimes []string
	results  map[string][]string // runtime -> one per cellProbes
}

// probeStrict runs each probe in a container of each runtime with the cell
// host's relevant lockdown (non-root, no capabilities, no new privileges,
// no network) but no seccomp filter and an unmasked /proc, so that only
// the runtime can refuse.
func probeStrict(image string) *strictProbes {
	p := &strictProbes{runtimes: []string{"runc", "runsc"}, results: map[string][]string{}}
	for _, rt := range p.runtimes {
		for _, pr := range cellProbes {
			args := append([]string{"run", "--rm", "--runtime", rt, "--network", "none", "--user", "65534:65534", "--cap-drop", "ALL",
				"--security-opt", "no-new-privileges", "--security-opt", "seccomp=unconfined", "--security-opt", "systempaths=unconfined", image}, pr.args...)
			var stderr bytes.Buffer
			cmd := exec.Command("docker", args...)
			cmd.Stderr = &stderr
			res := ""
			if err := cmd.Run(); err != nil {
				res = lastLine(stderr.String())
				if res == "" {
					res = err.Error()
				}
			}
			p.results[rt] = append(p.results[rt], res)
			fmt.Fprintf(os.Stderr, "probe %-40s under %-5s: %s\n", pr.name, rt, orOK(res))
		}
	}
	return p
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func orOK(s string) string {
	if s == "" {
		return "ok"
	}
	return s
}
