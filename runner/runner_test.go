package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/profiles"
)

// defaultProfile is the shipped default profile with one container per
// run (isolation: container); cells_test.go runs it in cells.
func defaultProfile(t *testing.T) *profiles.Exec {
	t.Helper()
	p := *shippedProfile(t, "default")
	p.Isolation = profiles.IsolationContainer
	return &p
}

func shippedProfile(t *testing.T, name string) *profiles.Exec {
	t.Helper()
	set, err := profiles.Load("../profiles")
	if err != nil {
		t.Fatal(err)
	}
	p := set.Exec[name]
	if p == nil {
		t.Fatalf("no %s profile in ../profiles", name)
	}
	return p
}

func TestCreateOptionsLockdown(t *testing.T) {
	p := defaultProfile(t)
	l := p.Limits
	l.MemoryMB = 64
	l.CPUs = 0.5
	spec := &Spec{ID: "ex_1", Profile: p, Limits: l}
	cfg, hc, err := createOptions(spec, "sha256:abc", "inst", nil)
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("lockdown: %s", name)
		}
	}
	check("image by id", cfg.Image == "sha256:abc")
	check("network disabled", cfg.NetworkDisabled && hc.NetworkMode == "none")
	check("non-root user", cfg.User == "65534:65534")
	check("labels", cfg.Labels[LabelManaged] == "true" && cfg.Labels[LabelExecID] == "ex_1" && cfg.Labels[LabelInstance] == "inst")
	check("no env from the host", len(cfg.Env) == 0)
	check("hostname", cfg.Hostname == "sandbox")
	check("read-only root", hc.ReadonlyRootfs)
	check("/tmp tmpfs noexec", strings.Contains(hc.Tmpfs["/tmp"], "noexec") && strings.Contains(hc.Tmpfs["/tmp"], "nosuid") && strings.Contains(hc.Tmpfs["/tmp"], "nodev") && strings.Contains(hc.Tmpfs["/tmp"], "size=64m"))
	check("/sandbox tmpfs", strings.Contains(hc.Tmpfs["/sandbox"], "nosuid,nodev") && strings.Contains(hc.Tmpfs["/sandbox"], "size=64m") && !strings.Contains(hc.Tmpfs["/sandbox"], "noexec"))
	check("memory, no swap", hc.Memory == 64<<20 && hc.MemorySwap == 64<<20)
	check("cpus", hc.NanoCPUs == 5e8)
	check("pids", hc.PidsLimit != nil && *hc.PidsLimit == p.Limits.Pids+pidsOverhead)
	check("caps", len(hc.CapDrop) == 1 && hc.CapDrop[0] == "ALL" && len(hc.CapAdd) == 0)
	check("no-new-privileges", hc.SecurityOpt[0] == "no-new-privileges:true")
	check("seccomp profile", strings.HasPrefix(hc.SecurityOpt[1], "seccomp={") && !strings.Contains(hc.SecurityOpt[1], "unconfined"))
	check("the launcher is init", hc.Init == nil || !*hc.Init)
	check("private cgroup namespace", hc.CgroupnsMode == container.CgroupnsModePrivate)
	check("private ipc", hc.IpcMode == container.IPCModePrivate)
	check("small shm", hc.ShmSize == p.ShmMB<<20 && hc.ShmSize <= 64<<20)
	check("no logs", hc.LogConfig.Type == "none")
	check("no host mounts", len(hc.Binds) == 0 && len(hc.Mounts) == 0 && len(hc.VolumesFrom) == 0)
	check("not privileged", !hc.Privileged)
	ul := map[string]int64{}
	for _, u := range hc.Ulimits {
		ul[u.Name] = u.Hard
		check("ulimit soft == hard "+u.Name, u.Soft == u.Hard)
	}
	check("ulimits", ul["nofile"] == p.Nofile && ul["fsize"] == p.FileSizeMB<<20 && ul["core"] == 0)

	bad := *p
	bad.User = "0:0"
	if _, _, err := createOptions(&Spec{Profile: &bad, Limits: l}, "x", "i", nil); err == nil {
		t.Error("root user accepted")
	}
}

var testKey = jobproto.NewKey()

// frames builds a launcher stream sealed with testKey.
func frames(t *testing.T, fs ...func(w *jobproto.SealedWriter) error) io.Reader {
	var b bytes.Buffer
	w := jobproto.NewSealedWriter(&b, testKey)
	for _, f := range fs {
		if err := f(w); err != nil {
			t.Fatal(err)
		}
	}
	return &b
}

func out(typ byte, s string) func(*jobproto.SealedWriter) error {
	return func(w *jobproto.SealedWriter) error { return w.Frame(typ, []byte(s)) }
}

func exitFrame(e jobproto.Exit) func(*jobproto.SealedWriter) error {
	return func(w *jobproto.SealedWriter) error {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		return w.Frame(jobproto.TypeExit, b)
	}
}

func fileFrame(path string, content string) func(*jobproto.SealedWriter) error {
	return func(w *jobproto.SealedWriter) error {
		p, err := jobproto.EncodeFile(jobproto.FileHeader{Path: path, Size: int64(len(content))}, []byte(content))
		if err != nil {
			return err
		}
		return w.Frame(jobproto.TypeFile, p)
	}
}

func testCollector(outputBytes, fileBytes int64, count int) *collector {
	return newCollector(&Spec{Job: jobproto.Job{Key: testKey, OutputBytes: outputBytes, MaxOutFileBytes: fileBytes, MaxOutTotalBytes: fileBytes * 2, MaxOutCount: count}})
}

// The collector must hold its caps even when the launcher (which the code
// may have subverted) sends more than it may.
func TestCollectorHoldsCapsAgainstAHostileLauncher(t *testing.T) {
	c := testCollector(5, 4, 2)
	err := c.read(frames(t, out('O', "abc"), out('O', "defgh"), out('E', "123456"),
		fileFrame("a", "1234"), fileFrame("big", "12345"), fileFrame("b", "1234"), fileFrame("c", "1"),
		exitFrame(jobproto.Exit{ExitCode: 0})))
	if err != nil {
		t.Fatal(err)
	}
	if string(c.out.buf) != "abcde" || !c.out.trunc || string(c.errs.buf) != "12345" || !c.errs.trunc {
		t.Fatalf("stdout %q %v stderr %q %v", c.out.buf, c.out.trunc, c.errs.buf, c.errs.trunc)
	}
	if len(c.files) != 2 || c.files[0].Path != "a" || c.files[1].Path != "b" {
		t.Fatalf("files %+v", c.files)
	}
	if len(c.skipped) != 2 {
		t.Fatalf("skipped %+v", c.skipped)
	}
	if !c.exited {
		t.Fatal("exit frame not seen")
	}

	// Names that would leave /sandbox/out are never returned as files.
	c = testCollector(5, 10, 10)
	if err := c.read(frames(t, fileFrame("../../etc/x", "1"), fileFrame("/abs", "1"), fileFrame("a\nb", "1"), exitFrame(jobproto.Exit{}))); err != nil {
		t.Fatal(err)
	}
	if len(c.files) != 0 || len(c.skipped) != 3 {
		t.Fatalf("files %+v skipped %+v", c.files, c.skipped)
	}
}

func TestCollectorRejectsProtocolAbuse(t *testing.T) {
	cases := map[string]io.Reader{
		"unknown frame":     frames(t, out('Z', "x")),
		"bad file frame":    frames(t, out('F', "garbage")),
		"frame over budget": frames(t, out('O', strings.Repeat("x", 3<<20))),
		"bad exit json":     frames(t, out('X', "{")),
		"unsealed frame":    bytes.NewReader(append([]byte{'X', 0, 0, 0, 2, '{', '}'}, make([]byte, jobproto.MACSize)...)),
	}
	for name, r := range cases {
		c := testCollector(10, 10, 1)
		if err := c.read(r); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A stream that ends without an exit frame is not an exit.
	c := testCollector(10, 10, 1)
	if err := c.read(frames(t, out('O', "x"))); err != io.EOF || c.exited {
		t.Fatalf("no exit frame: err %v exited %v", err, c.exited)
	}
}

// engine tests below talk to the real Docker engine and need the sandbox
// image (make image).

func newTestRunner(t *testing.T, instance string) *Runner {
	t.Helper()
	r, err := New(slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), instance)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Ping(ctx); err != nil {
		t.Fatalf("the Docker engine must be running for these tests: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return r
}

func job(code string, timeoutMS int64) jobproto.Job {
	return jobproto.Job{Code: []byte(code), TimeoutMS: timeoutMS, OutputBytes: 1 << 20, MaxOutFileBytes: 1 << 20, MaxOutTotalBytes: 1 << 20, MaxOutCount: 10}
}

func managedContainers(t *testing.T, instance string) []container.Summary {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	list, err := cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelManaged+"=true"), filters.Arg("label", LabelInstance+"="+instance))})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func TestRunHelloAndRemoval(t *testing.T) {
	instance := "test-" + t.Name()
	r := newTestRunner(t, instance)
	p := defaultProfile(t)
	res, err := r.Run(context.Background(), &Spec{ID: "ex_hello", Profile: p, Limits: p.Limits, Job: job("print(1)", 5000)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusOK || string(res.Stdout) != "1\n" || res.ExitCode != 0 || !strings.HasPrefix(res.ImageID, "sha256:") {
		t.Fatalf("result %+v", res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := managedContainers(t, instance); len(left) != 0 {
		t.Fatalf("%d containers left after the run", len(left))
	}
}

// A cancelled context (client gone, shutdown) kills the run promptly and
// still removes its container.
func TestRunCancelKillsAndRemoves(t *testing.T) {
	instance := "test-" + t.Name()
	r := newTestRunner(t, instance)
	p := defaultProfile(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(1500*time.Millisecond, func() { cancel(errors.New("client went away")) })
	start := time.Now()
	res, err := r.Run(ctx, &Spec{ID: "ex_cancel", Profile: p, Limits: p.Limits, Job: job("import time; print('started', flush=True); time.sleep(30)", 10000)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusKilled || !strings.Contains(res.Message, "client went away") {
		t.Fatalf("result %+v", res)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("cancel took %v to stop the run", took)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
	defer ccancel()
	if err := r.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if left := managedContainers(t, instance); len(left) != 0 {
		t.Fatalf("%d containers left after a cancelled run", len(left))
	}
}

// Cleanup removes what an earlier process of the same instance left, and
// nothing of another instance.
func TestCleanupRemovesOnlyOwnLeftovers(t *testing.T) {
	mine, other := "test-cleanup-mine", "test-cleanup-other"
	p := defaultProfile(t)
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	r := newTestRunner(t, mine)
	img, err := r.ImageID(ctx, p.Image)
	if err != nil {
		t.Fatalf("%v (run make image)", err)
	}
	var otherID string
	for i, inst := range []string{mine, other} {
		cfg, hc, err := createOptions(&Spec{ID: "ex_left" + inst, Profile: p, Limits: p.Limits}, img, inst, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := cli.ContainerCreate(ctx, cfg, hc, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			otherID = c.ID
		}
	}
	defer cli.ContainerRemove(ctx, otherID, container.RemoveOptions{Force: true})
	n, err := r.Cleanup(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Cleanup = %d, %v; want 1", n, err)
	}
	if left := managedContainers(t, mine); len(left) != 0 {
		t.Fatalf("own leftovers remain: %d", len(left))
	}
	if left := managedContainers(t, other); len(left) != 1 {
		t.Fatalf("another instance's container was touched: %d left", len(left))
	}
}

func TestRunMissingImage(t *testing.T) {
	r := newTestRunner(t, "test-missing")
	p := *defaultProfile(t)
	p.Image = "sandboxd/does-not-exist:0"
	_, err := r.Run(context.Background(), &Spec{ID: "ex_missing", Profile: &p, Limits: p.Limits, Job: job("print(1)", 1000)})
	if !errors.Is(err, ErrImageMissing) || !strings.Contains(err.Error(), "make image") {
		t.Fatalf("err = %v, want ErrImageMissing with a hint", err)
	}
}

// The reaper removes a container of this instance that no run owns (a
// create the engine finished after an earlier process died) and leaves the
// ones the runner is using alone.
func TestReapRemovesOnlyUnownedContainers(t *testing.T) {
	instance := "test-reap"
	r := newTestRunner(t, instance)
	p := defaultProfile(t)
	ctx := context.Background()
	img, err := r.ImageID(ctx, p.Image)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	cfg, hc, err := createOptions(&Spec{ID: "ex_orphan", Profile: p, Limits: p.Limits}, img, instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := cli.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	owned, err := r.startBox(ctx, &Spec{ID: "ex_owned", Profile: p, Limits: p.Limits}, img)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := r.reap(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("reap within the grace period removed %d (%v), want 0", n, err)
	}
	if n, err := r.reap(ctx, 0); err != nil || n != 1 {
		t.Fatalf("reap = %d, %v; want the one orphan", n, err)
	}
	if _, err := cli.ContainerInspect(ctx, orphan.ID); !cerrdefs.IsNotFound(err) {
		t.Fatalf("the orphan is still there: %v", err)
	}
	if _, err := cli.ContainerInspect(ctx, owned.id); err != nil {
		t.Fatalf("the owned box was reaped: %v", err)
	}
	owned.hj.Close()
	r.removeLater(owned.id)
}

// A data dir's instance id is stored and kept; a new dir's is random (two
// dirs at one path in two containers differ); an old one's stays its
// path's hash.
func TestInstanceID(t *testing.T) {
	dir := t.TempDir()
	a := InstanceID(dir)
	if !instancePattern.MatchString(a) || InstanceID(dir) != a {
		t.Fatalf("instance id %q not stable", a)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, instanceFile)); strings.TrimSpace(string(b)) != a {
		t.Fatalf("stored %q, want %q", b, a)
	}
	other := t.TempDir()
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, other); err != nil {
		t.Fatal(err)
	}
	if InstanceID(other) != a {
		t.Error("the id moved with the dir's path")
	}
	fresh := t.TempDir()
	h := sha256.Sum256([]byte(fresh))
	if InstanceID(fresh) == hex.EncodeToString(h[:6]) {
		t.Error("a new dir's id is its path's hash, shared with any dir at the same path")
	}
	old := t.TempDir()
	if err := os.WriteFile(filepath.Join(old, "sandboxd.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h = sha256.Sum256([]byte(old))
	if got := InstanceID(old); got != hex.EncodeToString(h[:6]) {
		t.Errorf("a dir an earlier sandboxd served got %q, want its old id", got)
	}
}
