// Package runner runs one job in a fresh, locked-down container through the
// Docker Engine API and removes the container afterwards, on every path.
package runner

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxd/sandboxd/internal/imagebuild"
	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/redact"
)

// Labels on every container sandboxd creates.
const (
	LabelManaged  = "sandboxd.managed"
	LabelExecID   = "sandboxd.exec-id"
	LabelInstance = "sandboxd.instance"
)

// launcherPath is where the sandbox image carries the launcher.
const launcherPath = "/usr/local/bin/sandboxd-launcher"

// Statuses of a finished run.
const (
	StatusOK      = "ok"      // exit code 0
	StatusError   = "error"   // any other exit code
	StatusTimeout = "timeout" // killed at the wall-time limit
	StatusOOM     = "oom"     // killed by the kernel at the memory limit
	StatusKilled  = "killed"  // ended by a signal, or stopped by sandboxd (shutdown, cancel)
)

// pidsOverhead is added to the profile's pids limit for the launcher (the
// container's init) and its threads, so the code gets what the profile says.
const pidsOverhead = 16

// startTimeout bounds the time from handing over the job to the launcher
// starting the code: container start-up under load, writing input files.
const startTimeout = 20 * time.Second

// killGrace is how long after the launcher's own deadline sandboxd kills the
// container from outside. Keep the sum well under one second.
const killGrace = 500 * time.Millisecond

// Spec is one run.
type Spec struct {
	ID string
	// Tenant is whose run it is: a cell host serves one tenant only.
	Tenant  string
	Profile *profiles.Exec
	// Limits are the effective limits: the profile's, lowered by the request.
	Limits profiles.Limits
	Job    jobproto.Job
	// Redact, when set, removes secrets from stdout and stderr as they are
	// read (a secret split across frames included) and from returned text
	// files. The caps apply to the redacted output.
	Redact *redact.Redactor
	// OnOutput, when set, receives each chunk of stdout ("stdout") and
	// stderr ("stderr") as it arrives, before redaction and without the
	// caps (the caller redacts and caps what it passes on). It is called
	// from the goroutine that reads the sandbox and must not block long.
	OnOutput func(stream string, p []byte)
	// Datasets are mounted read-only at /data/<name> (a cold sandbox:
	// pooled ones were created without them).
	Datasets []DatasetMount
	// Secrets, for a networked profile, are the run's secrets: the egress
	// proxy finds them by the sandbox's address (EgressSecrets), bound to
	// the id it knows the sandbox by, from before the job is handed over
	// until the sandbox is removed.
	Secrets *secrets.Run
}

// OutFile is a file the code left under /sandbox/out.
type OutFile struct {
	Path    string
	Mode    uint32
	Content []byte
}

// Result is what a run that started produced.
type Result struct {
	Status          string
	ExitCode        int
	Signal          string
	Stdout, Stderr  []byte
	StdoutTruncated bool
	StderrTruncated bool
	Duration        time.Duration
	UserCPU, SysCPU time.Duration
	MaxRSSKB        int64
	Files           []OutFile
	Skipped         []jobproto.Skipped
	ImageID         string
	// Message explains a status the exit code does not (timeout, oom, killed).
	Message string
	// Redactions counts secrets removed, by type (Spec.Redact).
	Redactions map[string]int
	// Pooled tells whether the run had a warm pooled sandbox; Acquire is
	// how long getting its sandbox took (a pooled one's take, or a cold
	// one's create and start).
	Pooled  bool
	Acquire time.Duration
	// Container is the engine container the run had: its own, or the
	// cell host it ran in (isolation: cell).
	Container string
}

// Error kinds returned by Run, so callers can map them to responses.
var (
	ErrImageMissing = errors.New("sandbox image is not present")
	ErrEngine       = errors.New("container engine error")
	ErrLauncher     = errors.New("sandbox launcher failed")
)

// errStaleBox means a pooled box could not take its job: it died while it
// waited. The code never ran, so a cold box may run it.
var errStaleBox = errors.New("pooled sandbox is gone")

// Runner starts containers through one engine client.
type Runner struct {
	cli *client.Client
	// ctr is cli as far as a sandbox's start and removal go (engine.go);
	// clock times the background work around them.
	ctr      containerEngine
	clock    clock
	log      *slog.Logger
	instance string
	// imageBuilds is where background image builds report their progress
	// (internal/imagebuild); "" when nobody reports.
	imageBuilds string
	removals    sync.WaitGroup
	pool        *pool       // nil when pooling is off
	cells       *cells      // cells.go; nil when cells are off
	eg          egressState // network.go
	// live and the reaper: see reap.go.
	live                   liveSet
	reaperStop, reaperDone chan struct{}
	reaped                 atomic.Int64
	images                 *imageCache // imagecache.go
	// quiet holds background engine work back while runs are in progress
	// (quiet.go); deferred counts removals waiting for it.
	quiet    *quiet
	deferred atomic.Int64
}

// New connects to the engine named by the environment (DOCKER_HOST etc.),
// negotiating the API version so that any engine from 20.10 on works.
// instance names this sandboxd's containers (see Cleanup).
func New(log *slog.Logger, instance string) (*Runner, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("connecting to the container engine: %w", err)
	}
	r := newRunner(log, instance, cli, realClock{})
	r.cli = cli
	return r, nil
}

// newRunner is a Runner whose sandboxes start and end through ctr, its
// background work timed by clk. Its cli is unset.
func newRunner(log *slog.Logger, instance string, ctr containerEngine, clk clock) *Runner {
	return &Runner{ctr: ctr, clock: clk, log: log, instance: instance, images: newImageCache(), quiet: newQuiet(clk)}
}

// instanceFile holds a data dir's instance id.
const instanceFile = "instance-id"

// InstanceID returns the instance id of the sandboxd serving dataDir, which
// labels every container it makes (LabelInstance): the id stored in the
// data dir's instance-id file, made and stored the first time. A new id is
// random, so two sandboxd on one engine never share one, even with data
// dirs at the same path in two containers; a data dir an earlier sandboxd
// served without the file (its databases are there) keeps the id it had,
// the hash of its path, so that its containers stay its own. When the file
// cannot be written the id is the path's hash.
func InstanceID(dataDir string) string {
	path := filepath.Join(dataDir, instanceFile)
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); instancePattern.MatchString(id) {
			return id
		}
	}
	h := sha256.Sum256([]byte(dataDir))
	legacy := hex.EncodeToString(h[:6])
	id := legacy
	if !servedBefore(dataDir) {
		var b [6]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return legacy
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if b, rerr := os.ReadFile(path); rerr == nil && instancePattern.MatchString(strings.TrimSpace(string(b))) {
			return strings.TrimSpace(string(b)) // made meanwhile by another caller
		}
		return legacy
	}
	_, werr := f.WriteString(id + "\n")
	if cerr := f.Close(); werr != nil || cerr != nil {
		return legacy
	}
	return id
}

var instancePattern = regexp.MustCompile(`^[0-9a-f]{12}$`)

// servedBefore reports whether an earlier sandboxd served dataDir (its
// store or audit log is there).
func servedBefore(dataDir string) bool {
	for _, f := range []string{"sandboxd.db", "audit.db"} {
		if _, err := os.Stat(filepath.Join(dataDir, f)); err == nil {
			return true
		}
	}
	return false
}

// Ping checks that the engine answers.
func (r *Runner) Ping(ctx context.Context) error {
	_, err := r.cli.Ping(ctx)
	return err
}

// ImageID resolves an image reference to the ID of a locally present image.
func (r *Runner) ImageID(ctx context.Context, ref string) (string, error) {
	img, err := r.cli.ImageInspect(ctx, ref)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", fmt.Errorf("%w: %s (%s)", ErrImageMissing, ref, r.imageHint(ref))
		}
		return "", fmt.Errorf("%w: inspecting image %s: %v", ErrEngine, ref, err)
	}
	return img.ID, nil
}

// SetImageBuilds names the directory where image builds running beside
// sandboxd report their progress, so that the error for a missing image
// says how far its build is. Call it before serving.
func (r *Runner) SetImageBuilds(dir string) { r.imageBuilds = dir }

// imageHint is what to do about the missing image ref: wait for its build,
// look at its failed build, or build it.
func (r *Runner) imageHint(ref string) string {
	st, err := imagebuild.Read(r.imageBuilds, ref)
	if err != nil {
		r.log.Warn("reading an image build's status", "image", ref, "err", err)
	}
	if d := st.Describe(r.clock.Now()); d != "" {
		if st.State == imagebuild.Building {
			return d + "; its profiles answer 503 until it is ready"
		}
		return d + "; build it again with `make image`"
	}
	return "build it with `make image`"
}

// Runtimes lists the OCI runtimes the engine offers.
func (r *Runner) Runtimes(ctx context.Context) ([]string, error) {
	info, err := r.cli.Info(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for name := range info.Runtimes {
		names = append(names, name)
	}
	return names, nil
}

// Cleanup removes the containers of this instance that an earlier process
// left behind, and returns how many it removed.
func (r *Runner) Cleanup(ctx context.Context) (int, error) {
	list, err := r.ours(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing leftover containers: %w", err)
	}
	n := 0
	for _, c := range list {
		if err := r.removeNow(ctx, c.ID); err != nil && !cerrdefs.IsNotFound(err) {
			return n, fmt.Errorf("removing leftover container %s: %w", c.ID[:12], err)
		}
		n++
	}
	return n, nil
}

// Close removes the pool's idle containers, waits for pending container
// removals, at most until ctx ends, and removes the egress network.
func (r *Runner) Close(ctx context.Context) error {
	r.quiet.close() // deferred removals go now
	r.stopReaper()
	if r.pool != nil {
		r.pool.close()
	}
	if r.cells != nil {
		r.cells.close()
	}
	done := make(chan struct{})
	go func() { r.removals.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("waiting for container removals: %w", ctx.Err())
	}
	// Nothing is being created now: whatever of this instance is left
	// belongs to no run (an earlier process's late create, say).
	if _, err := r.reap(ctx, 0); err != nil {
		r.log.Warn("reaping at shutdown failed", "err", err)
	}
	r.closeEgress(ctx) // network.go
	if err := r.removeDatasetVolumes(ctx); err != nil {
		r.log.Warn("removing dataset volumes failed", "err", err)
	}
	return r.cli.Close()
}

// createOptions builds the container configuration for a spec. It is the
// single place where the lockdown is written down. en is the egress
// network, for a profile whose egress is not "none" (networkOptions);
// such a profile without one is refused.
func createOptions(spec *Spec, imageID, instance string, en *EgressNet) (*container.Config, *container.HostConfig, error) {
	p := spec.Profile
	l := spec.Limits
	if Networked(p) && en == nil {
		return nil, nil, egressUnavailable(p)
	}
	uid, gid, err := splitUser(p.User)
	if err != nil {
		return nil, nil, err
	}
	pids := l.Pids + pidsOverhead + runtimePidsOverhead(p.Runtime) // runtimes.go
	mem := l.MemoryMB << 20
	user, capAdd, env := launcherUser(p)
	cfg := &container.Config{
		Image:        imageID,
		Entrypoint:   []string{launcherPath},
		Cmd:          launcherArgs(p),
		User:         user,
		Env:          env,
		WorkingDir:   jobproto.WorkDir,
		Hostname:     "sandbox",
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		OpenStdin:    true,
		StdinOnce:    true,
		// NetworkDisabled removes the network stack from the config as well
		// as NetworkMode none below.
		NetworkDisabled: true,
		Labels: map[string]string{
			LabelManaged:  "true",
			LabelExecID:   spec.ID,
			LabelInstance: instance,
		},
	}
	tmpfsOpts := func(extra string) string {
		return fmt.Sprintf("rw,nosuid,nodev%s,size=%dm,uid=%d,gid=%d,mode=%s", extra, l.TmpfsMB, uid, gid, "0700")
	}
	hc := &container.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		Tmpfs: map[string]string{
			"/tmp":           tmpfsOpts(",noexec"),
			jobproto.WorkDir: tmpfsOpts(""),
		},
		CapDrop:     []string{"ALL"},
		CapAdd:      capAdd,
		SecurityOpt: []string{"no-new-privileges:true", "seccomp=" + string(p.SeccompJSON)},
		MaskedPaths: maskedPaths,
		// No docker-init: the launcher is the container's init (pid 1), so no
		// other process holds its report stream, it reaps every orphan, and
		// when it exits the kernel kills everything left in the container.
		CgroupnsMode: container.CgroupnsModePrivate,
		IpcMode:      container.IPCModePrivate,
		ShmSize:      p.ShmMB << 20,
		LogConfig:    container.LogConfig{Type: "none"},
		Runtime:      p.Runtime,
		Resources: container.Resources{
			Memory:     mem,
			MemorySwap: mem, // equal to Memory: no swap
			NanoCPUs:   int64(l.CPUs * 1e9),
			PidsLimit:  &pids,
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: p.Nofile, Hard: p.Nofile},
				{Name: "fsize", Soft: p.FileSizeMB << 20, Hard: p.FileSizeMB << 20},
				{Name: "core", Soft: 0, Hard: 0},
			},
		},
	}
	if Networked(p) {
		networkOptions(cfg, hc, p, en)
	}
	hc.Mounts = append(hc.Mounts, datasetMounts(spec, instance)...)
	return cfg, hc, nil
}

// maskedPaths are hidden from a container's sandbox (the engine mounts
// /dev/null or an empty read-only tmpfs over them): jobproto.Masked, the
// engine's own defaults among them (a list replaces the engine's).
var maskedPaths = jobproto.Masked

func egressUnavailable(p *profiles.Exec) error {
	return fmt.Errorf("%w: profile %q needs network egress (egress profile %q), and sandboxd could not set up its egress network at start-up or at the last profile reload; the log says why. Requests naming this profile are refused until then", ErrEgressUnavailable, p.Name, p.Egress)
}

// launcherArgs tells the launcher what its waiting interpreter preloads.
func launcherArgs(p *profiles.Exec) []string {
	if len(p.Preload) == 0 {
		return nil
	}
	return []string{"--preload", strings.Join(p.Preload, ",")}
}

// launcherUser is who the launcher runs as, with what capabilities and
// environment. Under runc it is the profile's user, with none: the kernel
// shields the container's init from the code. gVisor does not (a process
// of the same uid may signal it and open its /proc entries), so under
// runsc the launcher runs as root inside gVisor with CAP_SETUID,
// CAP_SETGID (to start the code as the profile's user) and CAP_KILL (to
// end it), and the code gets another uid than the launcher's.
func launcherUser(p *profiles.Exec) (user string, capAdd []string, env []string) {
	if p.Runtime == profiles.RuntimeRunsc {
		return "0:0", []string{"SETUID", "SETGID", "KILL"}, []string{"SANDBOXD_CODE_USER=" + p.User}
	}
	return p.User, nil, nil
}

func splitUser(u string) (int, int, error) {
	a, b, ok := strings.Cut(u, ":")
	uid, err1 := strconv.Atoi(a)
	gid, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || uid <= 0 || gid <= 0 {
		return 0, 0, fmt.Errorf("profile user %q is not a non-root uid:gid", u)
	}
	return uid, gid, nil
}

// box is a started sandbox container, attached and waiting for its one job.
type box struct {
	id      string
	imageID string
	hj      types.HijackedResponse
	// Set for pooled boxes: the exec id the container was labelled with,
	// and the watcher's peek (see watch).
	execID  string
	peeked  chan struct{}
	peekErr error
}

// startBox creates, attaches to and starts a container for spec. The
// container waits for its job on stdin. A networked one is known to the
// egress proxy by its address from then until its removal. On error
// nothing is left behind.
func (r *Runner) startBox(ctx context.Context, spec *Spec, imageID string) (*box, error) {
	en := r.EgressNetwork()
	cfg, hc, err := createOptions(spec, imageID, r.instance, en)
	if err != nil {
		return nil, err
	}
	b, err := r.startContainer(ctx, spec, cfg, hc, boxName(spec), imageID) // network.go: boxName
	if err != nil {
		return nil, err
	}
	if Networked(spec.Profile) {
		if err := r.joinEgress(context.WithoutCancel(ctx), spec, b.id, en); err != nil {
			b.hj.Close()
			r.removeLater(b.id)
			return nil, err
		}
	}
	return b, nil
}

// startContainer creates, attaches to and starts a container. On error
// nothing is left behind.
func (r *Runner) startContainer(ctx context.Context, spec *Spec, cfg *container.Config, hc *container.HostConfig, name, imageID string) (*box, error) {
	// Engine calls use a context that outlives a cancelled request, so a
	// half-made container is always cleaned up.
	bg := context.WithoutCancel(ctx)
	created, err := r.ctr.ContainerCreate(bg, cfg, hc, nil, nil, name)
	if cerrdefs.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s (%s): %v", ErrImageMissing, spec.Profile.Image, imageID, err)
	}
	if err != nil {
		return nil, createError(err, spec) // runtimes.go: an unknown runtime is ErrRuntimeMissing
	}
	r.live.add(created.ID)
	b := &box{id: created.ID, imageID: imageID}
	b.hj, err = r.ctr.ContainerAttach(bg, b.id, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		r.removeLater(b.id)
		return nil, fmt.Errorf("%w: attaching to container: %v", ErrEngine, err)
	}
	if err := r.ctr.ContainerStart(bg, b.id, container.StartOptions{}); err != nil {
		b.hj.Close()
		r.removeLater(b.id)
		return nil, fmt.Errorf("%w: starting container: %v", ErrEngine, err)
	}
	return b, nil
}

// Run runs spec in a fresh container and removes the container afterwards.
// It returns a Result for every run that started, whatever the code did; an
// error means the run could not start or the engine failed. When ctx ends
// before the code does, the container is killed and the result is "killed".
func (r *Runner) Run(ctx context.Context, spec *Spec) (*Result, error) {
	defer r.quiet.begin()()
	if Networked(spec.Profile) && r.EgressNetwork() == nil {
		return nil, egressUnavailable(spec.Profile)
	}
	began := time.Now()
	imageID, err := r.images.get(ctx, spec.Profile.Image, r.ImageID)
	if err != nil {
		return nil, err
	}
	if spec.Profile.Isolation == profiles.IsolationCell {
		if err := r.ensureDatasetVolumes(ctx, spec); err != nil {
			return nil, err
		}
		return r.runCell(ctx, spec, imageID, began) // cells.go
	}
	if b := r.takePooled(ctx, spec, imageID); b != nil {
		id := spec.ID
		spec.ID = b.execID
		r.bindSecrets(b.id, spec) // network.go: before the job reaches the sandbox
		acquire := time.Since(began)
		res, err := r.runIn(ctx, b, spec)
		if res != nil {
			res.Pooled, res.Acquire = true, acquire
		}
		if !errors.Is(err, errStaleBox) {
			return res, err
		}
		// The box died while it waited and the job never reached it.
		r.log.Warn("a pooled sandbox was gone; using a cold one", "container", b.id[:12])
		spec.ID = id
	}
	if err := r.ensureDatasetVolumes(ctx, spec); err != nil {
		return nil, err
	}
	b, err := r.startBox(ctx, spec, imageID)
	if errors.Is(err, ErrImageMissing) {
		// The cached id may name an image deleted since (a rebuild that
		// replaced it): ask the engine again.
		r.images.forget(spec.Profile.Image)
		if imageID, err = r.images.get(ctx, spec.Profile.Image, r.ImageID); err == nil {
			b, err = r.startBox(ctx, spec, imageID)
		}
	}
	if err != nil {
		return nil, err
	}
	acquire := time.Since(began)
	res, err := r.runIn(ctx, b, spec)
	if res != nil {
		res.Acquire = acquire
	}
	return res, err
}

// takePooled returns a ready pooled box for spec with spec's limits applied,
// or nil when there is none (the caller then starts a cold one).
func (r *Runner) takePooled(ctx context.Context, spec *Spec, imageID string) *box {
	if r.pool == nil || !poolable(spec) {
		return nil
	}
	b := r.pool.take(ctx, spec.Profile, imageID)
	if b == nil {
		return nil
	}
	if err := r.lower(ctx, b, spec); err != nil {
		r.log.Warn("lowering a pooled sandbox's limits failed; using a cold one", "err", err)
		b.hj.Close()
		r.removeLater(b.id)
		return nil
	}
	return b
}

// lower applies a request's lowered memory, CPU and pids limits to a pooled
// box made with its profile's, before the job is handed over.
func (r *Runner) lower(ctx context.Context, b *box, spec *Spec) error {
	p, l := spec.Profile.Limits, spec.Limits
	if l.MemoryMB == p.MemoryMB && l.CPUs == p.CPUs && l.Pids == p.Pids {
		return nil
	}
	mem := l.MemoryMB << 20
	pids := l.Pids + pidsOverhead + runtimePidsOverhead(spec.Profile.Runtime)
	_, err := r.cli.ContainerUpdate(context.WithoutCancel(ctx), b.id, container.UpdateConfig{Resources: container.Resources{
		Memory: mem, MemorySwap: mem, NanoCPUs: int64(l.CPUs * 1e9), PidsLimit: &pids,
	}})
	return err
}

// runIn hands spec's job to the waiting box b, collects what it reports and
// removes the container afterwards, off the request path.
func (r *Runner) runIn(ctx context.Context, b *box, spec *Spec) (*Result, error) {
	cid, hj, imageID := b.id, b.hj, b.imageID
	defer r.removeLater(cid)
	// A fresh key per run seals what the launcher reports (jobproto.SealedWriter).
	spec.Job.Key = jobproto.NewKey()
	defer hj.Close()

	// Hand over the job, then close our side of stdin.
	sendErr := make(chan error, 1)
	go func() {
		err := jobproto.WriteJSON(hj.Conn, jobproto.TypeJob, &spec.Job)
		if err == nil {
			err = hj.CloseWrite()
		}
		sendErr <- err
	}()

	col := newCollector(spec)
	pr, pw := io.Pipe()
	diag := &capped{max: 8 << 10}
	go func() {
		if b.peeked != nil {
			// A pooled box's watcher peeks at the stream; read it only
			// once that has returned (it does not consume).
			<-b.peeked
		}
		_, err := stdcopy.StdCopy(pw, diag, hj.Reader)
		pw.CloseWithError(err)
	}()
	readDone := make(chan error, 1)
	go func() {
		err := col.read(pr)
		pr.CloseWithError(io.ErrClosedPipe) // unblock StdCopy if we stopped early
		readDone <- err
	}()
	w := r.await(ctx, spec, col, readDone)
	if w.stopped != "" {
		// The launcher reports no usage for a run stopped from outside:
		// the engine's accounting says what the container used.
		w.used = r.containerUse(cid)
		r.kill(cid)
		hj.Close()
		w.readErr = <-readDone
	}
	if err := <-sendErr; err != nil && w.stopped == "" && !col.exited {
		select {
		case <-col.started:
		default:
			if b.execID != "" {
				return nil, errStaleBox
			}
		}
		r.log.Warn("sending job to sandbox failed", "exec_id", spec.ID, "err", err)
	}
	return r.outcome(ctx, cid, spec, col, w, imageID, diag, false)
}

// waited is how a run's wait ended.
type waited struct {
	stopped        string // why sandboxd stopped the run from outside, if it did
	ranFrom, ended time.Time
	readErr        error
	used           cgroupUse // for a run stopped from outside
}

// await waits for the launcher's report of a run to end (readDone), on
// two clocks: the sandbox must start the code within startTimeout; from
// then on the code has its wall-time limit, plus killGrace for the
// launcher to report it stopped the code itself. It also ends when ctx
// does.
func (r *Runner) await(ctx context.Context, spec *Spec, col *collector, readDone <-chan error) waited {
	var w waited
	startup := time.NewTimer(startTimeout)
	defer startup.Stop()
	startedCh := col.started
	var deadline <-chan time.Time
wait:
	for {
		select {
		case w.readErr = <-readDone:
			break wait
		case <-startedCh:
			startedCh = nil
			startup.Stop()
			w.ranFrom = time.Now()
			t := time.NewTimer(time.Duration(spec.Limits.TimeoutMS)*time.Millisecond + killGrace)
			defer t.Stop()
			deadline = t.C
		case <-startup.C:
			w.stopped = "startup"
			break wait
		case <-deadline:
			w.stopped = StatusTimeout
			break wait
		case <-ctx.Done():
			w.stopped = StatusKilled
			break wait
		}
	}
	w.ended = time.Now()
	return w
}

// outcome is the result of a run whose wait ended as w. cid is its
// container (a cell's host when cell is set).
func (r *Runner) outcome(ctx context.Context, cid string, spec *Spec, col *collector, w waited, imageID string, diag *capped, cell bool) (*Result, error) {
	bg := context.WithoutCancel(ctx)
	res := col.result(imageID)
	res.Container = cid
	if res.Duration == 0 && !w.ranFrom.IsZero() {
		res.Duration = w.ended.Sub(w.ranFrom)
	}
	switch {
	case w.stopped == "startup":
		return nil, fmt.Errorf("%w: the sandbox did not start the code within %v", ErrEngine, startTimeout)
	case w.stopped == StatusTimeout:
		res.Status = StatusTimeout
		res.Duration = w.ended.Sub(w.ranFrom)
		res.ExitCode, res.Signal = 128+int(syscall.SIGKILL), "SIGKILL"
		w.used.fill(res)
		res.Message = fmt.Sprintf("the code ran past the %d ms wall-time limit and was killed", spec.Limits.TimeoutMS)
	case w.stopped == StatusKilled:
		res.Status = StatusKilled
		res.Message = "the run was stopped before it finished: " + context.Cause(ctx).Error()
		res.ExitCode, res.Signal = 128+int(syscall.SIGKILL), "SIGKILL"
		w.used.fill(res)
	case col.exited && col.exit.Error != "":
		return nil, fmt.Errorf("%w: %s", ErrLauncher, col.exit.Error)
	case col.exited:
		r.classify(bg, cid, col, res, spec, cell)
	default:
		// The stream ended without an exit frame: the launcher died (the
		// kernel's OOM killer, or the code killed it) or broke the protocol.
		r.classifyLost(bg, cid, res, w.readErr, diag.String())
	}
	return res, nil
}

// classify sets the status from the launcher's exit report.
// A cell's host outlives the run: only the launcher's count of the
// host's OOM kills can tell (cell).
func (r *Runner) classify(ctx context.Context, cid string, col *collector, res *Result, spec *Spec, cell bool) {
	e := col.exit
	switch {
	case e.TimedOut:
		res.Status = StatusTimeout
		res.Message = fmt.Sprintf("the code ran past the %d ms wall-time limit and was killed", spec.Limits.TimeoutMS)
	case e.OOM:
		res.Status = StatusOOM
	case e.Signal == "SIGKILL" && !cell && r.oomKilled(ctx, cid):
		res.Status = StatusOOM
	case e.Signal != "":
		res.Status = StatusKilled
		res.Message = "the code was ended by " + e.Signal
	case e.ExitCode == 0:
		res.Status = StatusOK
	default:
		res.Status = StatusError
	}
	if res.Status == StatusOOM {
		res.Message = fmt.Sprintf("the code was killed at the %d MiB memory limit", spec.Limits.MemoryMB)
	}
}

func (r *Runner) classifyLost(ctx context.Context, cid string, res *Result, readErr error, diag string) {
	res.ExitCode = -1
	if errors.Is(readErr, jobproto.ErrBadMAC) {
		// Something other than the launcher wrote into the report stream:
		// nothing in it can be trusted, the run is stopped at once.
		r.kill(cid)
		res.Status = StatusKilled
		res.Stdout, res.Stderr, res.Files, res.Skipped = nil, nil, nil, nil
		res.Message = "the code wrote into the sandbox's report stream; the run was stopped and its output discarded"
		r.log.Warn("report stream tampered with", "container", cid[:12], "security", true)
		return
	}
	if readErr != nil && !errors.Is(readErr, io.EOF) && !errors.Is(readErr, io.ErrUnexpectedEOF) {
		// A protocol violation (over the caps, bad frames): stop it now
		// rather than wait for it.
		r.kill(cid)
	}
	if r.oomKilled(ctx, cid) {
		res.Status = StatusOOM
		res.Message = "the sandbox was killed at its memory limit"
		return
	}
	res.Status = StatusKilled
	res.Message = "the sandbox ended without reporting an exit status"
	if readErr != nil && !errors.Is(readErr, io.EOF) && !errors.Is(readErr, io.ErrUnexpectedEOF) {
		res.Message += ": " + readErr.Error()
	}
	r.log.Warn("sandbox ended without an exit frame", "container", cid[:12], "err", readErr, "launcher_stderr", diag)
}

// oomKilled waits briefly for the container to stop and reports whether the
// engine saw an OOM kill in it.
func (r *Runner) oomKilled(ctx context.Context, cid string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	wait, errc := r.cli.ContainerWait(ctx, cid, container.WaitConditionNotRunning)
	select {
	case <-wait:
	case <-errc:
	case <-ctx.Done():
	}
	info, err := r.cli.ContainerInspect(ctx, cid)
	if err != nil || info.State == nil {
		return false
	}
	return info.State.OOMKilled
}

func (r *Runner) kill(cid string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.cli.ContainerKill(ctx, cid, "KILL"); err != nil && !cerrdefs.IsNotFound(err) && !strings.Contains(err.Error(), "is not running") {
		r.log.Warn("killing container failed", "container", cid[:12], "err", err)
	}
}

// cgroupUse is what the engine's cgroup accounting says a container used.
type cgroupUse struct {
	ok             bool
	user, sys, cpu time.Duration
	maxMemory      uint64 // bytes
}

// fill puts the use into a result whose launcher reported none.
func (u cgroupUse) fill(res *Result) {
	if !u.ok || res.UserCPU+res.SysCPU > 0 {
		return
	}
	res.UserCPU, res.SysCPU = u.user, u.sys
	if res.MaxRSSKB == 0 {
		res.MaxRSSKB = int64(u.maxMemory >> 10)
	}
}

// containerUse asks the engine what the container has used; ok is false
// when it cannot say (the container is gone, the engine does not answer
// within 3 s).
func (r *Runner) containerUse(cid string) cgroupUse {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := r.cli.ContainerStatsOneShot(ctx, cid)
	if err != nil {
		return cgroupUse{}
	}
	defer st.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(st.Body).Decode(&s); err != nil || s.CPUStats.CPUUsage.TotalUsage == 0 {
		return cgroupUse{}
	}
	c := s.CPUStats.CPUUsage
	return cgroupUse{ok: true, user: time.Duration(c.UsageInUsermode), sys: time.Duration(c.UsageInKernelmode),
		cpu: time.Duration(c.TotalUsage), maxMemory: s.MemoryStats.MaxUsage}
}

// containerCPU returns the CPU time (ms) the container has used, or -1
// when the engine cannot say.
func (r *Runner) containerCPU(cid string) int64 {
	u := r.containerUse(cid)
	if !u.ok {
		return -1
	}
	return u.cpu.Milliseconds()
}

// removeLater removes the container off the request path. Close waits for
// it. A networked container is forgotten by the egress proxy at once.
func (r *Runner) removeLater(cid string) {
	r.unregisterClient(cid)
	r.removals.Add(1)
	go func() {
		defer r.removals.Done()
		// A used container is stopped already (its launcher exits after
		// the job) and holds no process: its removal can wait for a quiet
		// moment, up to a bound, so that it costs no run its CPU.
		if n := r.deferred.Add(1); n <= maxDeferredRemovals {
			r.quiet.wait(maxRemovalDelay, func() bool { return r.deferred.Load() > maxDeferredRemovals })
		}
		r.deferred.Add(-1)
		// Retried for removeRetryFor, which rides out an engine restart.
		// A container given up on leaves the live set: the reaper, and
		// Close's last reap, remove it once the engine answers again.
		giveUp := r.clock.Now().Add(removeRetryFor)
		delay := 200 * time.Millisecond
		for attempt := 1; ; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := r.removeNow(ctx, cid)
			cancel()
			if err == nil || cerrdefs.IsNotFound(err) || strings.Contains(err.Error(), "already in progress") {
				r.live.remove(cid)
				return
			}
			if r.clock.Now().Add(delay).After(giveUp) {
				break
			}
			r.log.Warn("removing container failed; retrying", "container", cid[:12], "attempt", attempt, "err", err)
			sleep(r.clock, delay)
			delay = min(2*delay, 5*time.Second)
		}
		r.live.remove(cid)
		r.log.Error("container could not be removed; the reaper removes it once the engine answers", "container", cid[:12])
	}()
}

// removeRetryFor is how long removeLater keeps trying: long enough for an
// engine restart, which waits out the stop timeout (10 s by default) of
// the containers still running.
const removeRetryFor = time.Minute

// Bounds on deferring removals: under steady load there is no quiet
// moment, and used containers must not pile up.
const (
	maxDeferredRemovals = 16
	maxRemovalDelay     = 3 * time.Second
)

// capped keeps the first max bytes written to it and drops the rest.
type capped struct {
	max int
	buf bytes.Buffer
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (c *capped) String() string { return c.buf.String() }
