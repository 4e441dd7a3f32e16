package main

// Cell host: a long-lived container that runs one job after another, each
// in a fresh cell built by bubblewrap (see jobproto/cell.go). The launcher
// builds the next cell, with its interpreter started and the preload
// imported, while the host waits; a job then runs in it as a job runs in a
// container of its own; when the job ends, every process of the cell is
// killed (its PID namespace dies with its init), /sandbox/out is collected
// from the cell's directory, and the directory goes.

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/jobproto"
	"golang.org/x/sys/unix"
)

const bwrap = "/usr/bin/bwrap"

// Descriptors of a cell's init (fds 0-6 are the interpreter's, see
// startInterp).
const (
	cellStatusFD  = 7 // init -> launcher: JSON CellStatus
	cellSeccompFD = 8 // launcher -> bubblewrap: the BPF program
)

// cellHost serves the jobs of one host.
type cellHost struct {
	init jobproto.CellInit
	pre  []string
	out  *frameWriter
	n    int // cells built so far
}

// runCellHost reads the CellInit and serves jobs until sandboxd closes
// stdin or no cell can be built.
func runCellHost(pre []string, out *frameWriter) jobproto.Exit {
	typ, payload, err := jobproto.ReadFrame(os.Stdin, jobproto.MaxFrame)
	if err != nil {
		return jobproto.Exit{ExitCode: -1, Error: "reading the cell host's init: " + err.Error()}
	}
	h := &cellHost{pre: pre, out: out}
	if typ != jobproto.TypeCellHost {
		return jobproto.Exit{ExitCode: -1, Error: fmt.Sprintf("a cell host expects a cell host frame first, got %q", typ)}
	}
	if err := json.Unmarshal(payload, &h.init); err != nil {
		return jobproto.Exit{ExitCode: -1, Error: "decoding the cell host's init: " + err.Error()}
	}
	out.setKey(os.Stdout, h.init.Key)
	for {
		c, err := h.build()
		if err == nil && !c.in.waitReady() {
			// The interpreter ended before its preload was done: the cell
			// could not be built (bubblewrap says why) or Python failed.
			c.discard()
			err = fmt.Errorf("the cell's interpreter ended before it was ready: %s", strings.TrimSpace(c.in.earlyStderr()))
		}
		if err != nil {
			_ = out.json(jobproto.TypeNotice, jobproto.Notice{Message: "building a cell failed: " + err.Error()})
			return jobproto.Exit{ExitCode: -1, Error: err.Error()}
		}
		// Ready: the cell is built and its interpreter has imported the
		// preload.
		if err := out.json(jobproto.TypeReady, jobproto.Ready{}); err != nil {
			return jobproto.Exit{ExitCode: -1, Error: err.Error()}
		}
		typ, payload, err := jobproto.ReadFrame(os.Stdin, jobproto.MaxFrame)
		if err != nil {
			c.discard()
			return jobproto.Exit{} // sandboxd closed the host
		}
		var job jobproto.Job
		if typ == jobproto.TypeJob {
			err = json.Unmarshal(payload, &job)
		} else {
			err = fmt.Errorf("a cell host expects job frames, got %q", typ)
		}
		if err != nil {
			c.discard()
			return jobproto.Exit{ExitCode: -1, Error: "reading a job: " + err.Error()}
		}
		// The job's frames, and the Ready after them, are sealed with its
		// own key.
		out.setKey(os.Stdout, job.Key)
		exit, cleanErr := c.runJob(&job)
		if err := out.json(jobproto.TypeExit, exit); err != nil {
			return jobproto.Exit{ExitCode: -1, Error: err.Error()}
		}
		if cleanErr != nil {
			// What the cell left cannot be removed: no other cell may
			// run here. The host says so and ends; sandboxd replaces it.
			_ = out.json(jobproto.TypeNotice, jobproto.Notice{Message: "removing a cell's files failed: " + cleanErr.Error()})
			return jobproto.Exit{ExitCode: -1, Error: cleanErr.Error()}
		}
	}
}

// cell is one built cell: its directories and its waiting interpreter.
type cell struct {
	dirs   cellDirs
	in     *interp
	status *os.File // the read end of the init's status pipe
	out    *frameWriter
}

// cellDirs are a cell's writable places, each a fresh directory on one of
// the host's tmpfs mounts, which the engine made as it makes a
// container's (sized, nosuid, nodev, /tmp and /dev/shm noexec): bound
// into the cell, they keep those flags, and only one cell exists at a
// time, so each has the whole size.
type cellDirs struct {
	sandbox, tmp, shm string
	// own: the directories are the host's own places (a native cell,
	// which binds nothing): make and remove keep them and handle what is
	// in them.
	own bool
}

func newCellDirs(n int) cellDirs {
	name := "cell-" + strconv.Itoa(n)
	return cellDirs{
		sandbox: filepath.Join(jobproto.WorkDir, name),
		tmp:     filepath.Join("/tmp", name),
		shm:     filepath.Join("/dev/shm", name),
	}
}

func (d cellDirs) make() error {
	dirs := []string{d.sandbox, filepath.Join(d.sandbox, "out"), d.tmp, d.shm}
	if d.own {
		dirs = dirs[1:2]
	}
	for _, dir := range dirs {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return err
		}
	}
	return os.Chmod(filepath.Join(d.sandbox, "out"), 0o755)
}

// remove deletes every file the cell left; its mounts are gone already
// (with its mount namespace), and so are its processes. Every file is the
// launcher's uid's (the cell maps no other), but the code may have closed
// directories to their owner (chmod 000): they are opened up first.
// Nothing can swap a directory for a link meanwhile: nothing else runs.
func (d cellDirs) remove() error {
	var first error
	for _, dir := range []string{d.sandbox, d.tmp, d.shm} {
		_ = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
			// The host's own places keep their modes (the launcher,
			// root without CAP_DAC_OVERRIDE, goes through them).
			if err == nil && e.IsDir() && !(d.own && path == dir) {
				_ = os.Chmod(path, 0o700)
			}
			return nil
		})
		err := os.RemoveAll(dir)
		if d.own {
			err = emptyDir(dir)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// build makes the next cell and starts its interpreter.
func (h *cellHost) build() (*cell, error) {
	h.n++
	dirs := newCellDirs(h.n)
	if h.init.Native {
		dirs = nativeDirs()
	}
	if err := asCode(dirs.make); err != nil {
		_ = asCode(dirs.remove)
		return nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	seccompR, seccompW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	go func() {
		_, _ = seccompW.Write(h.init.Seccomp)
		seccompW.Close()
	}()
	program, args, clone := bwrap, append([]string{"bwrap"}, h.bwrapArgs(dirs)...), uintptr(0)
	args = append(args, "--", launcherSelf, "cell-init", strconv.Itoa(cellStatusFD))
	if h.init.Native {
		program, args, clone = launcherSelf, nativeArgs(dirs, h.init.UID, h.init.GID), nativeCloneFlags
	}
	args = append(args, "--", python, "-c", zygote)
	args = append(args, h.pre...)
	in, err := startProcessInterp(program, args, h.out, []*os.File{statusW, seccompR}, nil, clone)
	statusW.Close()
	seccompR.Close()
	if err != nil {
		statusR.Close()
		_ = asCode(dirs.remove)
		return nil, err
	}
	return &cell{dirs: dirs, in: in, status: statusR, out: h.out}, nil
}

// launcherSelf is the launcher's path in the image (and so in every cell).
const launcherSelf = "/usr/local/bin/sandboxd-launcher"

// bwrapArgs is the cell: every namespace new, the image read-only, its
// own /tmp, /sandbox and /dev/shm over the host's, a fresh
// /dev, a /proc of the cell's own with the host's facts masked
// (bubblewrap itself makes /proc/sys, /proc/sysrq-trigger, /proc/irq and
// /proc/bus read-only), no capability, the profile's seccomp filter.
func (h *cellHost) bwrapArgs(d cellDirs) []string {
	a := []string{
		"--unshare-all", "--die-with-parent", "--new-session", "--as-pid-1",
		"--uid", strconv.Itoa(h.init.UID), "--gid", strconv.Itoa(h.init.GID),
		"--hostname", "sandbox",
		"--ro-bind", "/", "/",
		"--dev", "/dev",
		"--bind", d.sandbox, jobproto.WorkDir,
		"--bind", d.tmp, "/tmp",
		"--bind", d.shm, "/dev/shm",
		"--remount-ro", "/dev", // bubblewrap's /dev is the cell user's
		"--proc", "/proc",
	}
	for _, p := range jobproto.Masked {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			continue
		case fi.IsDir():
			a = append(a, "--perms", "0555", "--tmpfs", p, "--remount-ro", p)
		default:
			a = append(a, "--ro-bind", "/dev/null", p)
		}
	}
	return append(a, "--cap-drop", "ALL", "--seccomp", strconv.Itoa(cellSeccompFD), "--chdir", jobproto.WorkDir)
}

// runJob runs one job in the cell and tears the cell down; cleanErr says
// the cell's files could not all be removed.
func (c *cell) runJob(job *jobproto.Job) (exit jobproto.Exit, cleanErr error) {
	if err := asCode(func() error { return prepareIn(c.dirs.sandbox, job) }); err != nil {
		c.discard()
		return jobproto.Exit{ExitCode: -1, Error: err.Error()}, nil
	}
	exit = c.in.runCell(job, c.status)
	_ = asCode(func() error {
		collect(filepath.Join(c.dirs.sandbox, "out"), outCaps{count: job.MaxOutCount, file: job.MaxOutFileBytes, total: job.MaxOutTotalBytes}, nil, c.out)
		return nil
	})
	return exit, asCode(c.dirs.remove)
}

// discard tears down a cell that ran no job.
func (c *cell) discard() {
	killAll(c.in.pid)
	reapAll()
	c.status.Close()
	_ = asCode(c.dirs.remove)
}

// runCell hands the job to the cell's interpreter and waits for the cell
// to end: its init reports how the interpreter ended, and the kill that
// follows ends every process the code left (the PID namespace dies with
// the init). CPU is the host's cgroup's, which holds only this run (and the
// launcher's relaying of its output).
func (in *interp) runCell(job *jobproto.Job, statusR *os.File) jobproto.Exit {
	outputLimit.Store(job.OutputBytes)
	in.waitReady()
	cpu0 := readCPU(in.pid)
	// The interpreter, seen from here: the timeout kills it (so its init
	// reports it, with its CPU), and its CPU so far is the preload's.
	zpid := descendantNamed(in.pid, "python3")
	base := cpuTicks(zpid)
	// The code comes with the handover (the cell's /tmp is its own); it is
	// the request's text, so valid UTF-8.
	source := string(job.Code)
	ctl, err := json.Marshal(struct {
		Path   string            `json:"path"`
		Source *string           `json:"source"`
		Env    map[string]string `json:"env"`
	}{jobproto.CodePath, &source, job.Env})
	if err != nil {
		return jobproto.Exit{ExitCode: -1, Error: err.Error()}
	}
	in.forward.Store(true)
	start := time.Now()
	_, _ = in.ctlW.Write(ctl)
	in.ctlW.Close()
	in.kreqW.Close()
	in.krespR.Close()
	_ = in.out.frame(jobproto.TypeStarted, nil)
	go func() {
		_, _ = in.stdinW.Write(job.Stdin)
		in.stdinW.Close()
	}()
	status := make(chan jobproto.CellStatus, 1)
	go func() {
		var st jobproto.CellStatus
		if err := json.NewDecoder(statusR).Decode(&st); err != nil {
			st = jobproto.CellStatus{ExitCode: -1, Error: "the cell's init did not report: " + err.Error()}
		}
		statusR.Close()
		status <- st
	}()
	var timedOut, reported bool
	var st jobproto.CellStatus
	select {
	case st = <-status:
		reported = true
	case <-time.After(time.Duration(job.TimeoutMS) * time.Millisecond):
		timedOut = true
	}
	dur := time.Since(start)
	if timedOut && zpid > 0 {
		_ = syscall.Kill(zpid, syscall.SIGKILL)
		select {
		case st = <-status:
			reported = st.Error == ""
		case <-time.After(2 * time.Second):
		}
	}
	killAll(in.pid) // the cell (bubblewrap, its init and all it holds)
	_, _, _ = reapUntil(in.pid)
	reapAll()
	in.pumps.Wait()
	cpu1 := readCPU(in.pid)
	exit := jobproto.Exit{
		DurationMS:      dur.Milliseconds(),
		StdoutTruncated: in.outTrunc,
		StderrTruncated: in.errTrunc,
		TimedOut:        timedOut,
	}
	exit.UserCPUMS, exit.SysCPUMS = cpuBetween(cpu0, cpu1)
	if reported && zpid > 0 {
		// The kernel's account of the interpreter, less its preload: exact,
		// and under gVisor the only one (its cgroup files read 0).
		tick := int64(1000 / clockTicks)
		exit.UserCPUMS = max(st.UserCPUMS-base.user*tick, 0)
		exit.SysCPUMS = max(st.SysCPUMS-base.sys*tick, 0)
	}
	if timedOut {
		exit.MaxRSSKB = st.MaxRSSKB
		exit.ExitCode, exit.Signal = 128+int(syscall.SIGKILL), "SIGKILL"
		return exit
	}
	if st.Error != "" {
		exit.ExitCode, exit.Error = -1, st.Error
		return exit
	}
	exit.ExitCode, exit.MaxRSSKB = st.ExitCode, st.MaxRSSKB
	if st.Signal != 0 {
		sig := syscall.Signal(st.Signal)
		exit.ExitCode, exit.Signal = 128+st.Signal, unix.SignalName(sig)
		if sig == syscall.SIGKILL && oomKills() > in.oomBefore {
			exit.OOM = true
		}
	}
	return exit
}

// cpuBetween is the CPU the host's cgroup used between two readings: the
// precise total, split into user and system time as the (tick-grained,
// under cgroup v1) split says.
func cpuBetween(a, b cpuUse) (user, sys int64) {
	total := max(b.total-a.total, 0)
	u, s := max(b.user-a.user, 0), max(b.sys-a.sys, 0)
	if u+s == 0 {
		return total, 0
	}
	user = total * u / (u + s)
	return user, total - user
}

// descendantNamed is the first process below pid (in this PID namespace)
// whose command is name, or 0.
func descendantNamed(pid int, name string) int {
	parent := map[int]int{}
	comm := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if i < 0 || j < i {
			continue
		}
		f := strings.Fields(s[j+1:])
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		parent[p], comm[p] = pp, s[i+1:j]
	}
	best := 0
	for p, c := range comm {
		if c != name {
			continue
		}
		for a := parent[p]; a > 1; a = parent[a] {
			if a == pid && (best == 0 || p < best) {
				best = p
			}
			if a == pid {
				break
			}
		}
	}
	return best
}
