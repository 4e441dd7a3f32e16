package runner

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandboxd/sandboxd/profiles"
)

// guard bounds every wait of the unit tests that use the fakes. It only
// turns a hang into a failure: no test passes or fails by it elapsing.
const guard = 10 * time.Second

// newFakeRunner is a Runner on a fakeEngine and a fakeClock. Its pool,
// quiet scheduler and removals are ended when the test ends.
func newFakeRunner(t *testing.T) (*Runner, *fakeEngine, *fakeClock) {
	t.Helper()
	fc := newFakeClock()
	fe := &fakeEngine{clock: fc, changed: make(chan struct{})}
	r := newRunner(slog.New(slog.DiscardHandler), "unit", fe, fc)
	t.Cleanup(func() {
		r.quiet.close()
		if r.pool != nil {
			r.pool.close()
		}
		r.removals.Wait()
	})
	return r, fe, fc
}

// fakePool is a fake runner that pools size to most boxes of a profile,
// and the default profile. hold makes its engine's creates wait (see
// fakeEngine.hold).
func fakePool(t *testing.T, size, most int, hold bool) (*Runner, *fakeEngine, *fakeClock, *profiles.Exec) {
	t.Helper()
	r, fe, fc := newFakeRunner(t)
	if hold {
		fe.hold(t)
	}
	r.EnablePool(size, most)
	return r, fe, fc, defaultProfile(t)
}

// startFake starts a box of the default profile outside the pool, as a
// cold run does.
func startFake(t *testing.T, r *Runner) *box {
	t.Helper()
	p := defaultProfile(t)
	b, err := r.startBox(context.Background(), &Spec{ID: NewExecID(), Profile: p, Limits: p.Limits}, "sha256:img")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// discard closes b's stream and removes its container, as the end of a
// run does.
func discard(r *Runner, b *box) {
	b.hj.Close()
	r.removeLater(b.id)
}

// fakeEngine is a container engine in memory. A container is a record;
// its attach stream is a pipe whose far end the engine holds, so closing
// that end (kill) is the container dying, as an engine restart or a kill
// from outside would.
type fakeEngine struct {
	clock clock
	// gate, when set (hold), makes each ContainerCreate wait for a value.
	gate chan struct{}

	mu        sync.Mutex
	ctrs      []*fakeContainer // in creation order
	creates   int
	createErr error
	// refuse, when set, answers each ContainerRemove first: an error it
	// returns is the engine's answer, and the container stays.
	refuse  func(id string) error
	removes map[string]int  // ContainerRemove calls by id
	gone    map[string]bool // containers removed
	atGate  int             // creates waiting at the gate
	changed chan struct{}   // closed and replaced when atGate or gone change
}

type fakeContainer struct {
	id      string
	image   string
	labels  map[string]string
	created time.Time
	running bool
	far     net.Conn // the container's end of its attach stream
}

var _ containerEngine = (*fakeEngine)(nil)

// hold makes container creation wait for release; the test's end
// releases every create still waiting. Call it before anything starts.
func (f *fakeEngine) hold(t *testing.T) {
	f.gate = make(chan struct{})
	t.Cleanup(func() { close(f.gate) })
}

// release lets one waiting (or the next) ContainerCreate go on.
func (f *fakeEngine) release(t *testing.T) {
	t.Helper()
	select {
	case f.gate <- struct{}{}:
	case <-time.After(guard):
		t.Fatal("no container create came to be released")
	}
}

func (f *fakeEngine) ContainerCreate(ctx context.Context, cfg *container.Config, _ *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, _ string) (container.CreateResponse, error) {
	if f.gate != nil {
		f.mu.Lock()
		f.atGate++
		f.noteLocked()
		f.mu.Unlock()
		var err error
		select {
		case <-f.gate:
		case <-ctx.Done():
			err = ctx.Err()
		}
		f.mu.Lock()
		f.atGate--
		f.noteLocked()
		f.mu.Unlock()
		if err != nil {
			return container.CreateResponse{}, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates++
	if f.createErr != nil {
		return container.CreateResponse{}, f.createErr
	}
	c := f.addLocked(cfg.Labels, f.clock.Now())
	c.image = cfg.Image
	return container.CreateResponse{ID: c.id}, nil
}

func (f *fakeEngine) ContainerAttach(_ context.Context, id string, _ container.AttachOptions) (types.HijackedResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.findLocked(id)
	if c == nil {
		return types.HijackedResponse{}, notFound(id)
	}
	near, far := net.Pipe()
	c.far = far
	return types.HijackedResponse{Conn: near, Reader: bufio.NewReader(near)}, nil
}

func (f *fakeEngine) ContainerStart(_ context.Context, id string, _ container.StartOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.findLocked(id)
	if c == nil {
		return notFound(id)
	}
	c.running = true
	return nil
}

func (f *fakeEngine) ContainerRemove(_ context.Context, id string, opts container.RemoveOptions) error {
	f.mu.Lock()
	if f.removes == nil {
		f.removes = map[string]int{}
	}
	f.removes[id]++
	if f.refuse != nil {
		if err := f.refuse(id); err != nil {
			f.mu.Unlock()
			return err
		}
	}
	i := slices.IndexFunc(f.ctrs, func(c *fakeContainer) bool { return c.id == id })
	if i < 0 {
		f.mu.Unlock()
		return notFound(id)
	}
	if c := f.ctrs[i]; c.running && !opts.Force {
		f.mu.Unlock()
		return fmt.Errorf("cannot remove container %s: container is running: stop the container before removing or force remove", id)
	}
	if c := f.ctrs[i]; c.far != nil {
		c.far.Close()
	}
	f.ctrs = slices.Delete(f.ctrs, i, i+1)
	if f.gone == nil {
		f.gone = map[string]bool{}
	}
	f.gone[id] = true
	f.noteLocked()
	f.mu.Unlock()
	return nil
}

func (f *fakeEngine) ContainerList(_ context.Context, opts container.ListOptions) ([]container.Summary, error) {
	if err := opts.Filters.Validate(map[string]bool{"label": true}); err != nil {
		return nil, fmt.Errorf("the fake engine filters by label only: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []container.Summary
	for _, c := range f.ctrs {
		if (opts.All || c.running) && opts.Filters.MatchKVList("label", c.labels) {
			out = append(out, container.Summary{ID: c.id, Image: c.image, Labels: c.labels, Created: c.created.Unix()})
		}
	}
	return out, nil
}

// add puts a stopped container that no run made into the engine (a
// leftover, or someone else's) and returns its id.
func (f *fakeEngine) add(labels map[string]string, created time.Time) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addLocked(labels, created).id
}

func (f *fakeEngine) addLocked(labels map[string]string, created time.Time) *fakeContainer {
	var b [32]byte
	_, _ = rand.Read(b[:])
	c := &fakeContainer{id: hex.EncodeToString(b[:]), labels: labels, created: created}
	f.ctrs = append(f.ctrs, c)
	return c
}

func (f *fakeEngine) findLocked(id string) *fakeContainer {
	for _, c := range f.ctrs {
		if c.id == id {
			return c
		}
	}
	return nil
}

// kill ends container id as the kernel or an engine restart would: its
// process is gone and its attach stream ends. The record stays until it
// is removed.
func (f *fakeEngine) kill(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.findLocked(id); c != nil {
		c.running = false
		if c.far != nil {
			c.far.Close()
		}
	}
}

// ids lists the containers the engine holds, in creation order.
func (f *fakeEngine) ids() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.ctrs {
		out = append(out, c.id)
	}
	return out
}

// imageOf is the image container id was created from ("" when gone).
func (f *fakeEngine) imageOf(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.findLocked(id); c != nil {
		return c.image
	}
	return ""
}

func (f *fakeEngine) setRefuse(refuse func(id string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = refuse
}

func (f *fakeEngine) removeCalls(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.removes[id]
}

func (f *fakeEngine) createCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.creates
}

func (f *fakeEngine) noteLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// waitFor waits until cond, checked with the engine locked, holds.
func (f *fakeEngine) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for {
		f.mu.Lock()
		ok, changed := cond(), f.changed
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-time.After(guard):
			t.Fatalf("waited in vain for %s; the engine holds %v", what, f.ids())
		}
	}
}

// waitRemoved waits until container id has been removed.
func (f *fakeEngine) waitRemoved(t *testing.T, id string) {
	t.Helper()
	f.waitFor(t, "the removal of "+id[:12], func() bool { return f.gone[id] })
}

// waitAtGate waits until n creates wait at the gate (hold).
func (f *fakeEngine) waitAtGate(t *testing.T, n int) {
	t.Helper()
	f.waitFor(t, fmt.Sprint(n, " creates at the gate"), func() bool { return f.atGate >= n })
}

func notFound(id string) error {
	return fmt.Errorf("no such container: %s: %w", id, cerrdefs.ErrNotFound)
}

// fakeClock is a clock that moves only when the test moves it.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	pending []*fakeTimer
	created int           // timers made so far
	changed chan struct{} // closed and replaced whenever a timer is made
}

type fakeTimer struct {
	at time.Time
	c  chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), changed: make(chan struct{})}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{at: f.now.Add(d), c: make(chan time.Time, 1)}
	f.created++
	close(f.changed)
	f.changed = make(chan struct{})
	if d <= 0 {
		t.c <- f.now
		return t.c, func() bool { return false }
	}
	f.pending = append(f.pending, t)
	return t.c, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		i := slices.Index(f.pending, t)
		if i >= 0 {
			f.pending = slices.Delete(f.pending, i, i+1)
		}
		return i >= 0
	}
}

// Advance moves the clock on by d and fires the timers then due.
func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.fireLocked()
}

func (f *fakeClock) fireLocked() {
	var left []*fakeTimer
	for _, t := range f.pending {
		if t.at.After(f.now) {
			left = append(left, t)
		} else {
			t.c <- t.at
		}
	}
	f.pending = left
}

// waitTimers waits until n timers have been made since the clock was.
func (f *fakeClock) waitTimers(t *testing.T, n int) {
	t.Helper()
	for {
		f.mu.Lock()
		made, changed := f.created, f.changed
		f.mu.Unlock()
		if made >= n {
			return
		}
		select {
		case <-changed:
		case <-time.After(guard):
			t.Fatalf("%d timers made, want %d", made, n)
		}
	}
}

// runUntil moves the clock from one timer to the next, as the code waits
// on them, until done is closed.
func (f *fakeClock) runUntil(t *testing.T, done <-chan struct{}) {
	t.Helper()
	for {
		select {
		case <-done:
			return
		default:
		}
		f.mu.Lock()
		if len(f.pending) > 0 {
			next := slices.MinFunc(f.pending, func(a, b *fakeTimer) int { return a.at.Compare(b.at) })
			f.now = next.at
			f.fireLocked()
			f.mu.Unlock()
			continue
		}
		changed := f.changed
		f.mu.Unlock()
		select {
		case <-done:
			return
		case <-changed:
		case <-time.After(guard):
			t.Fatal("nothing waits on the clock and the work is not done")
		}
	}
}
