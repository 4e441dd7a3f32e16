// Package engine tests sandboxd against a private Docker Engine that the
// test starts, restarts and kills itself: a second dockerd (the machine's
// own binary) with its own data root, exec root, socket and managed
// containerd, so that restarting it disturbs no other test using the
// machine's engine. Needs root, /usr/sbin/dockerd and the sandbox image in
// the machine's engine (`make image`); a missing piece fails the test with
// a message saying what to do, nothing is skipped.
//
// The private engine runs in a network namespace of its own (with only a
// loopback): started in the machine's, a dockerd with --bridge=none deletes
// the machine's docker0 and so breaks the machine's engine's networking.
// It needs no network: it serves on a unix socket, which works across
// network namespaces, and the sandboxes run with network none. TestMain
// checks that the machine's interfaces, engine networks and engine
// configuration are the same after the suite as before.
package engine

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/internal/e2e"
)

// dockerdBin is the engine binary the machine runs; the private engine is
// the same binary.
const dockerdBin = "/usr/sbin/dockerd"

// Tools of the private engine's network namespace (util-linux, iproute2).
const (
	unshareBin = "/usr/bin/unshare"
	nsenterBin = "/usr/bin/nsenter"
	ipBin      = "/usr/sbin/ip"
)

// Engine timing budgets, generous for a busy 2-core machine.
const (
	// engineStartTimeout covers dockerd's start-up, including its restore
	// after a kill: without live-restore it stops the containers it finds
	// running, with the containers' 10 s stop timeout.
	engineStartTimeout = 60 * time.Second
	// engineStopTimeout covers a graceful stop: dockerd stops every running
	// container first, and a sandbox's init (the launcher) ignores SIGTERM,
	// so that takes the 10 s stop timeout.
	engineStopTimeout = 45 * time.Second
	// procGoneTimeout bounds the wait for a killed process to disappear.
	procGoneTimeout = 15 * time.Second
)

// privateEngine is a dockerd of the test's own, with its own managed
// containerd, under dir.
type privateEngine struct {
	t    *testing.T
	dir  string // everything lives under it
	sock string // dir/docker.sock
	args []string
	log  string // dockerd's output, appended over restarts
	cli  *client.Client
	// cgroup is the parent cgroup of the engine's containers, of its own so
	// that clean-up finds every process they left (a crash can leave a
	// container's "runc init" behind, in no container the engine lists).
	cgroup string
	// lock is held while the engine's directory is in use (sweepStale).
	lock *os.File
	// netns is the network namespace dockerd runs in (dir/netns, a bind
	// mount of it that lives over restarts until scrub unmounts it).
	netns string

	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited (nil: never started)
	// containerdPID is the managed containerd of the running dockerd.
	containerdPID int
}

// newPrivateEngine prepares (but does not start) a private engine under a
// fresh short directory in /tmp (unix socket paths are limited to 108
// bytes), and registers its total cleanup.
func newPrivateEngine(t *testing.T) *privateEngine {
	t.Helper()
	sweepStale(t)
	dir, err := os.MkdirTemp("/tmp", dirPrefix)
	if err != nil {
		t.Fatalf("creating the private engine's directory: %v", err)
	}
	e := &privateEngine{t: t, dir: dir, sock: filepath.Join(dir, "docker.sock"), log: filepath.Join(dir, "dockerd.log"), cgroup: filepath.Base(dir), netns: filepath.Join(dir, "netns")}
	t.Cleanup(e.destroy)
	if e.lock, err = lockDir(dir, true); err != nil {
		t.Fatalf("locking %s: %v", dir, err)
	}
	if longest := filepath.Join(dir, "exec", "containerd", "containerd.sock.ttrpc"); len(longest) > 100 {
		t.Fatalf("the private engine's socket path %s is too long for a unix socket", longest)
	}
	if err := newNetns(e.netns); err != nil {
		t.Fatalf("the private engine's network namespace: %v", err)
	}
	config := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(config, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// overlay2 needs only the kernel's overlay file system and a backing
	// file system with d_type (ext4, xfs, tmpfs), whatever the machine's
	// engine uses (fuse-overlayfs on some).
	e.args = []string{
		"--config-file", config, // not /etc/docker/daemon.json, which names the machine's data root
		"--data-root", filepath.Join(dir, "data"),
		"--exec-root", filepath.Join(dir, "exec"), // the managed containerd lives under it
		"--pidfile", filepath.Join(dir, "docker.pid"),
		"-H", "unix://" + e.sock,
		"--storage-driver", "overlay2",
		// cgroupfs under a parent of its own, whatever the machine's
		// engine uses (on cgroup v2 with systemd that is the systemd
		// driver, whose parents are slices).
		"--exec-opt", "native.cgroupdriver=cgroupfs",
		"--cgroup-parent", "/" + e.cgroup,
		"--bridge=none", "--iptables=false", "--ip-masq=false", "--ip6tables=false",
	}
	e.cli, err = client.NewClientWithOpts(client.WithHost("unix://"+e.sock), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("docker client for the private engine: %v", err)
	}
	return e
}

// start starts dockerd and waits until its API answers. It returns how
// long that took.
func (e *privateEngine) start(t *testing.T) time.Duration {
	t.Helper()
	if e.running() {
		t.Fatal("private engine: start while it runs")
	}
	logf, err := os.OpenFile(e.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "\n===== test: starting dockerd at %s\n", time.Now().Format(time.RFC3339Nano))
	// nsenter joins the engine's network namespace and execs dockerd (no
	// fork: cmd's process is dockerd).
	cmd := exec.Command(nsenterBin, append([]string{"--net=" + e.netns, "--", dockerdBin}, e.args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = cleanEnv(nil)
	// Its own process group (a ^C to the test does not reach it), and
	// killed with the test process if that dies without its clean-ups.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", dockerdBin, err)
	}
	e.cmd, e.exited = cmd, make(chan struct{})
	exited := e.exited
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(engineStartTimeout)
	for {
		select {
		case <-exited:
			t.Fatalf("the private dockerd exited during start-up (%v); its log:\n%s", cmd.ProcessState, e.logTail(40))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := e.cli.Ping(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the private dockerd did not answer within %v (last: %v); its log:\n%s", engineStartTimeout, err, e.logTail(40))
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(began)
	if err := inNetns(cmd.Process.Pid, e.netns); err != nil {
		t.Fatalf("the private dockerd: %v", err)
	}
	e.containerdPID = e.findContainerd()
	if e.containerdPID == 0 {
		t.Fatalf("the private dockerd runs no managed containerd under %s", e.dir)
	}
	return took
}

func (e *privateEngine) running() bool {
	if e.exited == nil {
		return false
	}
	select {
	case <-e.exited:
		return false
	default:
		return true
	}
}

// terminate sends SIGTERM to dockerd (a graceful stop, as `systemctl stop
// docker`) and returns at once; waitStopped waits for it.
func (e *privateEngine) terminate(t *testing.T) {
	t.Helper()
	if !e.running() {
		t.Fatal("private engine: terminate while it is not running")
	}
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to the private dockerd: %v", err)
	}
}

// waitStopped waits for dockerd and its containerd to be gone.
func (e *privateEngine) waitStopped(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-e.exited:
	case <-time.After(within):
		t.Fatalf("the private dockerd did not exit within %v; its log:\n%s", within, e.logTail(30))
	}
	if pid := e.containerdPID; pid != 0 && !waitGone(pid, procGoneTimeout) {
		t.Fatalf("the private engine's containerd (pid %d) is still running %v after dockerd exited", pid, procGoneTimeout)
	}
	e.containerdPID = 0
}

// kill SIGKILLs dockerd and its managed containerd (a crash: the shims and
// the containers they hold keep running) and waits for both to be gone.
func (e *privateEngine) kill(t *testing.T) {
	t.Helper()
	if !e.running() {
		t.Fatal("private engine: kill while it is not running")
	}
	pid := e.containerdPID
	_ = e.cmd.Process.Kill()
	if pid != 0 && e.ours(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	e.waitStopped(t, procGoneTimeout)
	// The killed containerd is an orphan until init reaps it, which some
	// inits (this machine's among them) do late; a restarted dockerd that
	// finds its pid still in the pid file adopts the zombie and times out
	// waiting for it. After a real crash init would have reaped it: drop
	// the stale pid file.
	if err := os.Remove(filepath.Join(e.dir, "exec", "containerd", "containerd.pid")); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("removing the killed containerd's pid file: %v", err)
	}
}

// findContainerd returns the pid of the running managed containerd of this
// engine, from its pid file under the exec root, checked against its
// command line.
func (e *privateEngine) findContainerd() int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(e.dir, "exec", "containerd", "containerd.pid"))
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 && e.ours(pid) && alive(pid) {
			return pid
		}
		if time.Now().After(deadline) {
			return 0
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// newNetns makes a network namespace bound to the file path (which scrub
// unmounts with the engine's other mounts) with its loopback up.
func newNetns(path string) error {
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		return err
	}
	out, err := exec.Command(unshareBin, "--net="+path, ipBin, "link", "set", "lo", "up").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s --net=%s %s link set lo up: %v: %s (needs root, util-linux's unshare and iproute2's ip)", unshareBin, path, ipBin, err, bytes.TrimSpace(out))
	}
	return nil
}

// inNetns checks that pid runs in the network namespace bound to path,
// not in the test's (the machine's).
func inNetns(pid int, path string) error {
	var want, got, host syscall.Stat_t
	if err := syscall.Stat(path, &want); err != nil {
		return err
	}
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &got); err != nil {
		return err
	}
	if err := syscall.Stat("/proc/self/ns/net", &host); err != nil {
		return err
	}
	if want.Ino == host.Ino {
		return fmt.Errorf("%s is the machine's network namespace, not one of its own", path)
	}
	if got.Ino != want.Ino {
		return fmt.Errorf("pid %d runs in network namespace %d, not in %s (%d)", pid, got.Ino, path, want.Ino)
	}
	return nil
}

// ours reports whether pid's command line names this engine's directory
// (dockerd, its containerd, their shims).
func (e *privateEngine) ours(pid int) bool { return names(pid, e.dir) }

func names(pid int, dir string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(b, []byte(dir+"/"))
}

// processesNaming lists the live processes whose command line names dir.
func processesNaming(dir string) []int {
	var pids []int
	for _, pid := range e2e.HostPids() {
		if pid != os.Getpid() && names(pid, dir) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// managed lists the private engine's containers labelled
// sandboxd.managed=true.
func (e *privateEngine) managed(ctx context.Context) ([]container.Summary, error) {
	return e2e.ListContainers(ctx, e.cli, e2e.Managed)
}

func (e *privateEngine) logTail(n int) string {
	b, _ := os.ReadFile(e.log)
	return e2e.LastLines(string(b), n)
}

// destroy removes every trace of the engine, on success and failure:
// containers, dockerd, containerd, shims and what they left running,
// cgroups, mounts, shim sockets and the directory.
func (e *privateEngine) destroy() {
	t := e.t
	if t.Failed() {
		t.Logf("--- last lines of the private dockerd's log ---\n%s", e.logTail(60))
	}
	if b, err := os.ReadFile(e.log); err == nil {
		keepLog(t, "dockerd.log", string(b))
	}
	// Containers first, through the engine, while it runs.
	if e.running() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		list, err := e.cli.ContainerList(ctx, container.ListOptions{All: true})
		if err == nil {
			for _, c := range list {
				_ = e.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
			}
		}
		cancel()
		_ = e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.exited:
		case <-time.After(engineStopTimeout):
			t.Errorf("clean-up: the private dockerd did not stop within %v of SIGTERM; killing it", engineStopTimeout)
			_ = e.cmd.Process.Kill()
			<-e.exited
		}
	}
	if e.cli != nil {
		_ = e.cli.Close()
	}
	if err := scrub(e.dir); err != nil {
		t.Errorf("clean-up: %v", err)
	}
	_ = e.lock.Close()
}

// dirPrefix names the private engines' directories in /tmp.
const dirPrefix = "sbxe-"

// lockDir takes the lock of an engine directory: a flock on dir/.lock,
// released when the process ends, however it ends. With create it makes
// the lock file, locked before it appears under its name (so that no
// sweepStale can take it first); without, it fails when the file is
// missing or another process holds the lock.
func lockDir(dir string, create bool) (*os.File, error) {
	name := filepath.Join(dir, ".lock")
	var f *os.File
	var err error
	if create {
		f, err = os.CreateTemp(dir, ".lock-*")
	} else {
		f, err = os.OpenFile(name, os.O_RDWR, 0)
	}
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_EX
	if !create {
		how |= syscall.LOCK_NB
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, err
	}
	if create {
		if err := os.Rename(f.Name(), name); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// sweepStale scrubs what a test process that died without its clean-ups
// (killed, or timed out) left: engine directories whose lock nobody holds.
// Directories without a lock file are being created, or not ours.
func sweepStale(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join("/tmp", dirPrefix+"*"))
	for _, dir := range dirs {
		f, err := lockDir(dir, false)
		if err != nil {
			continue // in use, or not ours
		}
		err = scrub(dir)
		f.Close()
		if err != nil {
			t.Errorf("removing what an earlier run left in %s: %v", dir, err)
		} else {
			t.Logf("removed what an earlier run of this test left in %s", dir)
		}
	}
}

// scrub removes every trace of a stopped private engine in dir: the
// processes it left (containerd, shims, what runs in the containers'
// cgroups), the cgroups, shim sockets, mounts and the directory.
func scrub(dir string) error {
	var errs []error
	// Whatever names the directory (containerd, shims after a kill): by
	// pid, each checked to name it.
	deadline := time.Now().Add(procGoneTimeout)
	for {
		pids := processesNaming(dir)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			errs = append(errs, fmt.Errorf("processes of the private engine survive SIGKILL: %v", pids))
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// What runs in the containers' cgroups (left by a shim that died
	// first, or a "runc init" of a create a crash interrupted), then the
	// cgroups themselves.
	ids := containerIDs(dir)
	if err := removeCgroups(cgroupDirs(filepath.Base(dir))); err != nil {
		errs = append(errs, err)
	}
	// A shim killed with SIGKILL leaves its socket (containerd 1.6:
	// /run/containerd/s/<sha256 of address/namespace/id>).
	for _, id := range ids {
		sum := sha256.Sum256([]byte(filepath.Join(dir, "exec", "containerd", "containerd.sock", "moby", id)))
		_ = os.Remove(filepath.Join("/run/containerd/s", hex.EncodeToString(sum[:])))
	}
	// Mounts under the directory (the data root's bind mount, overlays,
	// shm, netns), deepest first, lazily.
	for pass := 0; pass < 5; pass++ {
		mps := mountsUnder(dir)
		if len(mps) == 0 {
			break
		}
		for _, mp := range mps {
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
	}
	if left := mountsUnder(dir); len(left) > 0 {
		// Never remove a tree that still has mounts in it.
		return errors.Join(append(errs, fmt.Errorf("mounts under %s remain: %v", dir, left))...)
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("removing %s: %w", dir, err))
	}
	return errors.Join(errs...)
}

// containerIDs lists the containers the engine's data root knows and
// those that have a cgroup under its parent, whether or not it runs.
func containerIDs(dir string) []string {
	seen := map[string]bool{}
	ents, _ := os.ReadDir(filepath.Join(dir, "data", "containers"))
	for _, d := range ents {
		seen[d.Name()] = true
	}
	for _, dir := range cgroupDirs(filepath.Base(dir)) {
		ents, _ := os.ReadDir(dir)
		for _, d := range ents {
			if d.IsDir() {
				seen[d.Name()] = true
			}
		}
	}
	var ids []string
	for id := range seen {
		if _, err := hex.DecodeString(id); err == nil && len(id) == 64 {
			ids = append(ids, id)
		}
	}
	return ids
}

// cgroupDirs returns the parent cgroup name in each mounted hierarchy
// (cgroup v1: one per controller; v2: one).
func cgroupDirs(name string) []string {
	cands := []string{filepath.Join("/sys/fs/cgroup", name)}
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	for _, d := range ents {
		if d.IsDir() && d.Type()&os.ModeSymlink == 0 { // not cpu -> cpu,cpuacct
			cands = append(cands, filepath.Join("/sys/fs/cgroup", d.Name(), name))
		}
	}
	var out []string
	for _, c := range cands {
		if fi, err := os.Stat(c); err == nil && fi.IsDir() {
			out = append(out, c)
		}
	}
	return out
}

// removeCgroups kills every process in the cgroup trees at roots and
// removes the trees.
func removeCgroups(roots []string) error {
	var dirs []string
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	deadline := time.Now().Add(procGoneTimeout)
	for {
		left := 0
		for _, d := range dirs {
			b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					left++
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d process(es) survive SIGKILL in the cgroups %v", left, roots)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var errs []error
	for _, d := range dirs {
		var err error
		for i := 0; i < 40; i++ {
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// mountsUnder lists the mount points at or under dir, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

func waitGone(pid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// cleanEnv is the test's environment without anything that would point a
// child at another engine or configure sandboxd behind the test's back,
// plus extra.
func cleanEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "DOCKER_") || strings.HasPrefix(name, "SANDBOXD_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// loadImage copies ref from the machine's engine into the private one
// (docker save | docker load). The image may be being rebuilt by `make
// image` at that moment: a missing image is retried for a while.
func loadImage(t *testing.T, from, to *client.Client, ref string) {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < 6; attempt++ {
		if attempt > 0 {
			time.Sleep(5 * time.Second)
		}
		lastErr = copyImage(from, to, ref)
		if lastErr == nil {
			return
		}
	}
	t.Fatalf("copying the sandbox image %s from the machine's engine into the private one failed: %v\n(the image must exist in the machine's engine: run `make image` in the module root)", ref, lastErr)
}

func copyImage(from, to *client.Client, ref string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	want, err := from.ImageInspect(ctx, ref)
	if err != nil {
		return fmt.Errorf("inspecting %s in the machine's engine: %w", ref, err)
	}
	rc, err := from.ImageSave(ctx, []string{ref})
	if err != nil {
		return fmt.Errorf("docker save %s: %w", ref, err)
	}
	defer rc.Close()
	resp, err := to.ImageLoad(ctx, rc, client.ImageLoadWithQuiet(true))
	if err != nil {
		return fmt.Errorf("docker load into the private engine: %w", err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("reading docker load's answer: %w", err)
		}
		if m.Error != "" {
			return fmt.Errorf("docker load: %s", m.Error)
		}
	}
	got, err := to.ImageInspect(ctx, ref)
	if err != nil {
		return fmt.Errorf("the private engine lacks %s after docker load: %w", ref, err)
	}
	if got.ID != want.ID {
		return fmt.Errorf("%s was rebuilt while it was copied (%s in the machine's engine, %s loaded)", ref, want.ID, got.ID)
	}
	return nil
}
