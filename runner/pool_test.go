package runner

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/profiles"
)

func waitPoolReady(t *testing.T, r *Runner, profile string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if r.PoolStats()[profile][0] >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("pool of %q never reached %d ready boxes: %v", profile, n, r.PoolStats())
}

// Every run takes a fresh pooled container that is destroyed afterwards;
// no container ever serves two jobs.
func TestPoolServesEachContainerOnce(t *testing.T) {
	instance := "test-pool-once"
	r := newTestRunner(t, instance)
	r.EnablePool(2, 4)
	p := defaultProfile(t)
	r.pool.fill(p, mustImage(t, r, p.Image))
	waitPoolReady(t, r, p.Name, 2)

	seen := map[string]bool{}
	for i := 0; i < 6; i++ {
		coldID := NewExecID()
		spec := &Spec{ID: coldID, Profile: p, Limits: p.Limits,
			Job: job("import socket; print(socket.gethostname(), open('/proc/self/cgroup').read().count('docker'))", 5000)}
		res, err := r.Run(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != StatusOK {
			t.Fatalf("run %d: %+v", i, res)
		}
		if seen[spec.ID] {
			t.Fatalf("exec id %s served twice", spec.ID)
		}
		seen[spec.ID] = true
		if i == 0 && spec.ID == coldID {
			t.Fatal("the first run did not use the warm pool")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := managedContainers(t, instance); len(left) != 0 {
		t.Fatalf("%d containers left after Close, pooled ones included", len(left))
	}
}

// A request's lower memory limit reaches a pooled container made with the
// profile's.
func TestPoolAppliesLoweredLimits(t *testing.T) {
	r := newTestRunner(t, "test-pool-lower")
	r.EnablePool(1, 2)
	p := defaultProfile(t)
	r.pool.fill(p, mustImage(t, r, p.Image))
	waitPoolReady(t, r, p.Name, 1)
	l := p.Limits
	l.MemoryMB = 64
	spec := &Spec{ID: "ex_cold", Profile: p, Limits: l,
		Job: job("print(open('/sys/fs/cgroup/memory/memory.limit_in_bytes').read().strip())\nb = bytearray(100 << 20)", 5000)}
	res, err := r.Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if spec.ID == "ex_cold" {
		t.Fatal("did not use the pool")
	}
	if res.Status != StatusOOM || strings.TrimSpace(string(res.Stdout)) != "67108864" {
		t.Fatalf("want oom under a 64 MiB limit; got %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
	}
}

// A pooled box that dies while it waits is never handed a job: the run
// falls back to a cold container.
func TestPoolSkipsDeadBoxes(t *testing.T) {
	r := newTestRunner(t, "test-pool-dead")
	r.EnablePool(1, 2)
	p := defaultProfile(t)
	r.pool.fill(p, mustImage(t, r, p.Image))
	waitPoolReady(t, r, p.Name, 1)
	r.pool.mu.Lock()
	victim := r.pool.classes[p.Name].ready[0]
	r.pool.mu.Unlock()
	cli, _ := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	defer cli.Close()
	if err := cli.ContainerKill(context.Background(), victim.id, "KILL"); err != nil {
		t.Fatal(err)
	}
	<-victim.peeked
	spec := &Spec{ID: "ex_cold", Profile: p, Limits: p.Limits, Job: job("print(1)", 5000)}
	res, err := r.Run(context.Background(), spec)
	if err != nil || res.Status != StatusOK {
		t.Fatalf("run after a pooled box died: %+v %v", res, err)
	}
	if spec.ID == victim.execID {
		t.Fatal("the dead box was used")
	}
	if _, err := cli.ContainerInspect(context.Background(), victim.id); err == nil {
		// removal is asynchronous; give it a moment
		time.Sleep(2 * time.Second)
		if c, err := cli.ContainerInspect(context.Background(), victim.id); err == nil && c.State != nil {
			t.Fatalf("dead pooled container %s not removed (state %s)", victim.id[:12], c.State.Status)
		}
	}
}

// A new profile version drains the boxes made for the old one.
func TestPoolDrainsOnProfileChange(t *testing.T) {
	instance := "test-pool-drain"
	r := newTestRunner(t, instance)
	r.EnablePool(1, 2)
	p := defaultProfile(t)
	img := mustImage(t, r, p.Image)
	r.pool.fill(p, img)
	waitPoolReady(t, r, p.Name, 1)
	r.pool.mu.Lock()
	old := r.pool.classes[p.Name].ready[0]
	r.pool.mu.Unlock()

	changed := *p
	changed.Version = "changed"
	spec := &Spec{ID: "ex_cold", Profile: &changed, Limits: changed.Limits, Job: job("print(1)", 5000)}
	if _, err := r.Run(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	if spec.ID == old.execID {
		t.Fatal("a box of the old profile version ran the job")
	}
}

func mustImage(t *testing.T, r *Runner, ref string) string {
	t.Helper()
	id, err := r.ImageID(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// The tests below run the pool on a fake engine and a fake clock (see
// fake_test.go): nothing in them waits on time.

// readyBoxes waits until the class of profile name holds at least n ready
// boxes and returns them.
func readyBoxes(t *testing.T, p *pool, name string, n int) []*box {
	t.Helper()
	for {
		p.mu.Lock()
		c := p.classes[name]
		if c == nil {
			p.mu.Unlock()
			t.Fatalf("no pool class for %q", name)
		}
		if len(c.ready) >= n {
			ready := slices.Clone(c.ready)
			p.mu.Unlock()
			return ready
		}
		arrived, have := c.arrived, len(c.ready)
		p.mu.Unlock()
		select {
		case <-arrived:
		case <-time.After(guard):
			t.Fatalf("pool of %q has %d ready boxes, want %d", name, have, n)
		}
	}
}

// takeAsync runs take in the background; its box arrives on the channel.
func takeAsync(p *pool, prof *profiles.Exec, imageID string) <-chan *box {
	got := make(chan *box, 1)
	go func() { got <- p.take(context.Background(), prof, imageID) }()
	return got
}

// fillersDone waits until no filler runs. Call it only when none can be
// started meanwhile (WaitGroup).
func fillersDone(t *testing.T, p *pool) {
	t.Helper()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(guard):
		t.Fatal("the pool keeps starting boxes")
	}
}

func taken(t *testing.T, got <-chan *box) *box {
	t.Helper()
	select {
	case b := <-got:
		return b
	case <-time.After(guard):
		t.Fatal("take never returned")
		return nil
	}
}

func TestPoolFillsToTargetTwoAtATime(t *testing.T) {
	r, fe, _, p := fakePool(t, 3, 3, true)
	r.pool.fill(p, "sha256:img")
	if got := r.PoolStats()[p.Name]; got != [2]int{0, maxFillers} {
		t.Fatalf("right after fill: ready, starting = %v; want 0, %d", got, maxFillers)
	}
	for range 3 {
		fe.release(t)
	}
	ready := readyBoxes(t, r.pool, p.Name, 3)
	if got := r.PoolStats()[p.Name]; got != [2]int{3, 0} {
		t.Fatalf("filled: ready, starting = %v; want 3, 0", got)
	}
	if ids := fe.ids(); len(ids) != 3 || fe.createCalls() != 3 {
		t.Fatalf("the engine made %d containers (%d creates) for a target of 3", len(ids), fe.createCalls())
	}
	for _, b := range ready {
		if b.execID == "" || fe.imageOf(b.id) != "sha256:img" {
			t.Fatalf("box %s: exec id %q, image %q", b.id[:12], b.execID, fe.imageOf(b.id))
		}
	}
}

// A warm take hands out a ready box at once and starts its replacement.
func TestPoolTakeWarm(t *testing.T) {
	r, fe, _, p := fakePool(t, 1, 1, false)
	r.pool.fill(p, "sha256:img")
	warm := readyBoxes(t, r.pool, p.Name, 1)[0]

	b := taken(t, takeAsync(r.pool, p, "sha256:img"))
	if b != warm {
		t.Fatalf("take returned %v, want the ready box %s", b, warm.id[:12])
	}
	next := readyBoxes(t, r.pool, p.Name, 1)[0]
	if next == warm {
		t.Fatal("the taken box is still in the pool")
	}
	if ids := fe.ids(); !slices.Equal(ids, []string{warm.id, next.id}) {
		t.Fatalf("engine holds %v; want the taken box and its replacement", ids)
	}
	discard(r, b)
}

// take never hands out a ready box whose stream has ended before its
// watcher took it out of the pool: it removes it and takes the next.
func TestPoolTakeSkipsADeadBox(t *testing.T) {
	r, fe, _, p := fakePool(t, 1, 1, false)
	r.pool.fill(p, "sha256:img")
	live := readyBoxes(t, r.pool, p.Name, 1)[0]
	dead := startFake(t, r)
	fe.kill(dead.id)
	dead.peeked = make(chan struct{})
	close(dead.peeked) // as its watcher's peek would, before it gets the lock
	r.pool.mu.Lock()
	c := r.pool.classes[p.Name]
	c.ready = append([]*box{dead}, c.ready...)
	r.pool.mu.Unlock()

	if b := taken(t, takeAsync(r.pool, p, "sha256:img")); b != live {
		t.Fatalf("take returned %v, want the live box %s", b, live.id[:12])
	}
	fe.waitRemoved(t, dead.id)
	discard(r, live)
}

// With no ready box, take waits for one that is starting, up to the
// in-flight wait; after it the caller goes cold, and the box stays for the
// next take.
func TestPoolTakeWaitsForAStartingBoxThenGoesCold(t *testing.T) {
	r, fe, fc, p := fakePool(t, 1, 1, true)
	r.pool.fill(p, "sha256:img")

	got := takeAsync(r.pool, p, "sha256:img")
	fc.waitTimers(t, 1) // take's in-flight wait
	select {
	case b := <-got:
		t.Fatalf("take returned %v while the box was starting", b)
	default:
	}
	fc.Advance(maxInflightWait)
	if b := taken(t, got); b != nil {
		t.Fatalf("take after the in-flight wait returned box %s, want none (cold)", b.id[:12])
	}

	got = takeAsync(r.pool, p, "sha256:img")
	fc.waitTimers(t, 2)
	fe.release(t)
	b := taken(t, got)
	if b == nil {
		t.Fatal("take did not get the box that finished starting while it waited")
	}
	discard(r, b)
}

// A profile whose image is missing is not pooled: take goes cold at once.
func TestPoolTakeColdWhenTheImageIsMissing(t *testing.T) {
	r, fe, _, p := fakePool(t, 1, 1, false)
	fe.createErr = notFound("sha256:gone")
	r.pool.fill(p, "sha256:gone")
	fillersDone(t, r.pool) // the one filler: a disabled class starts no more
	if b := taken(t, takeAsync(r.pool, p, "sha256:gone")); b != nil {
		t.Fatalf("take returned box %s for a missing image", b.id[:12])
	}
	if got := r.PoolStats()[p.Name]; got != [2]int{0, 0} || fe.createCalls() != 1 {
		t.Fatalf("ready, starting = %v after %d creates; want 0, 0 after 1", got, fe.createCalls())
	}
}

// A pooled box that dies while it waits leaves the pool at once, is
// removed, and a new one takes its place.
func TestPoolReplacesABoxThatDies(t *testing.T) {
	r, fe, _, p := fakePool(t, 1, 1, false)
	r.pool.fill(p, "sha256:img")
	dead := readyBoxes(t, r.pool, p.Name, 1)[0]

	fe.kill(dead.id)
	fe.waitRemoved(t, dead.id)
	if !dead.dead() {
		t.Fatal("the watcher did not see the box's stream end")
	}
	next := readyBoxes(t, r.pool, p.Name, 1)[0]
	if next == dead {
		t.Fatal("the dead box is still in the pool")
	}
	if ids := fe.ids(); !slices.Equal(ids, []string{next.id}) {
		t.Fatalf("engine holds %v; want only the replacement %s", ids, next.id[:12])
	}
}

// retain drains the classes of profiles no longer loaded and does not
// refill them until the profile is warmed again.
func TestPoolRetainDropsRemovedProfiles(t *testing.T) {
	r, fe, _, p := fakePool(t, 1, 1, false)
	kept, dropped := *p, *p
	kept.Name, dropped.Name = "kept", "dropped"
	r.pool.fill(&kept, "sha256:img")
	r.pool.fill(&dropped, "sha256:img")
	keptBox := readyBoxes(t, r.pool, kept.Name, 1)[0]
	droppedBox := readyBoxes(t, r.pool, dropped.Name, 1)[0]

	r.pool.retain(&profiles.Set{Exec: map[string]*profiles.Exec{kept.Name: &kept}})
	fe.waitRemoved(t, droppedBox.id)
	<-droppedBox.peeked // its watcher has seen the removal
	stats := r.PoolStats()
	if stats[dropped.Name] != [2]int{0, 0} || stats[kept.Name] != [2]int{1, 0} {
		t.Fatalf("after retain: %v; want %s empty and not refilling, %s kept", stats, dropped.Name, kept.Name)
	}
	if ids := fe.ids(); !slices.Equal(ids, []string{keptBox.id}) {
		t.Fatalf("engine holds %v; want only %s's box", ids, kept.Name)
	}

	r.pool.fill(&dropped, "sha256:img")
	if again := readyBoxes(t, r.pool, dropped.Name, 1)[0]; again == droppedBox {
		t.Fatal("warmed again, the class got its drained box back")
	}
}

// A box that finishes starting after its profile was dropped is removed,
// and the class is not refilled.
func TestPoolRetainDropsABoxStillStarting(t *testing.T) {
	r, fe, _, p := fakePool(t, 1, 1, true)
	r.pool.fill(p, "sha256:img")
	fe.waitAtGate(t, 1)
	r.pool.retain(&profiles.Set{Exec: map[string]*profiles.Exec{}})
	fe.release(t)
	fe.waitFor(t, "the late box's removal", func() bool { return len(fe.gone) == 1 })
	fillersDone(t, r.pool) // the filler is done, and started no other
	if got := r.PoolStats()[p.Name]; got != [2]int{0, 0} || fe.createCalls() != 1 || len(fe.ids()) != 0 {
		t.Fatalf("ready, starting = %v after %d creates, engine holds %v; want nothing after 1", got, fe.createCalls(), fe.ids())
	}
}

// close removes every idle box, and a box that finishes starting after it.
func TestPoolCloseRemovesAll(t *testing.T) {
	r, fe, _, p := fakePool(t, 3, 3, true)
	r.pool.fill(p, "sha256:img")
	fe.release(t)
	fe.release(t)
	readyBoxes(t, r.pool, p.Name, 2) // and a third one starting

	closed := make(chan struct{})
	go func() { r.pool.close(); close(closed) }()
	for !closedPool(r.pool) {
		runtime.Gosched()
	}
	fe.release(t) // the third box starts after close
	select {
	case <-closed:
	case <-time.After(guard):
		t.Fatal("close did not return")
	}
	r.removals.Wait()
	if ids := fe.ids(); len(ids) != 0 || fe.createCalls() != 3 {
		t.Fatalf("after close the engine holds %d containers of %d made; want none of 3", len(ids), fe.createCalls())
	}
	if b := r.pool.take(context.Background(), p, "sha256:img"); b != nil {
		t.Fatal("a closed pool handed out a box")
	}
	r.pool.fill(p, "sha256:img")
	if got := r.PoolStats()[p.Name]; got != [2]int{0, 0} || fe.createCalls() != 3 {
		t.Fatalf("a closed pool refilled: %v, %d creates", got, fe.createCalls())
	}
}

func closedPool(p *pool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// A new image or profile version drains the boxes made for the old one,
// and the take waits for a box of the new one.
func TestPoolDropsStaleBoxes(t *testing.T) {
	base := defaultProfile(t)
	changed := *base
	changed.Version = "changed"
	for _, tc := range []struct {
		name    string
		prof    *profiles.Exec
		imageID string
	}{
		{"image", base, "sha256:new"},
		{"profile version", &changed, "sha256:old"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, fe, _, _ := fakePool(t, 1, 1, false)
			r.pool.fill(base, "sha256:old")
			stale := readyBoxes(t, r.pool, base.Name, 1)[0]

			b := taken(t, takeAsync(r.pool, tc.prof, tc.imageID))
			fe.waitRemoved(t, stale.id)
			if b == nil || b == stale || b.imageID != tc.imageID || fe.imageOf(b.id) != tc.imageID {
				t.Fatalf("take after the change returned %+v; want a new box of image %s", b, tc.imageID)
			}
			discard(r, b)
		})
	}
}

// A box that finishes starting after its image changed is removed, not
// filed, and the pool fills with the new image.
func TestPoolDropsABoxStartedForTheOldImage(t *testing.T) {
	r, fe, _, p := fakePool(t, 1, 1, true)
	r.pool.fill(p, "sha256:old")
	fe.waitAtGate(t, 1)          // the old image's box is being created
	r.pool.fill(p, "sha256:new") // and the image changes
	fe.release(t)
	fe.release(t)
	b := readyBoxes(t, r.pool, p.Name, 1)[0]
	if b.imageID != "sha256:new" {
		t.Fatalf("the pool filed a box of %s", b.imageID)
	}
	fe.waitFor(t, "the old image's box to go", func() bool { return len(fe.gone) == 1 })
	if ids := fe.ids(); !slices.Equal(ids, []string{b.id}) || fe.createCalls() != 2 {
		t.Fatalf("engine holds %v after %d creates; want only the new image's box after 2", ids, fe.createCalls())
	}
}

// target grows with the take rate times the start time, with half again
// as headroom, between the configured size and max; takes older than the
// rate window do not count.
func TestPoolTargetUnderDemand(t *testing.T) {
	r, _, _ := newFakeRunner(t)
	p := newPool(r, 1, 5)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	takes := func(n int, age time.Duration) []time.Time {
		var out []time.Time
		for range n {
			out = append(out, now.Add(-age))
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		takes     []time.Time
		startTime time.Duration
		want      int
	}{
		{"idle", nil, time.Second, 1},
		{"7 takes in 10 s, 1 s starts", takes(7, time.Second), time.Second, 3},     // 1 + ceil(0.7*1*1.5)
		{"20 takes in 10 s, 1 s starts", takes(20, time.Second), time.Second, 4},   // 1 + ceil(2*1*1.5)
		{"20 takes, instant starts", takes(20, time.Second), 0, 1},                 // nothing to cover
		{"over max", takes(100, time.Second), time.Second, 5},                      // 1 + 15, capped
		{"old takes", takes(100, rateWindow+time.Second), time.Second, 1},          // outside the window
		{"mixed", append(takes(50, time.Minute), takes(20, 0)...), time.Second, 4}, // only the 20 recent
	} {
		c := &poolClass{takes: tc.takes, startTime: tc.startTime}
		if got := p.target(c, now); got != tc.want {
			t.Errorf("%s: target %d, want %d", tc.name, got, tc.want)
		}
		for _, at := range c.takes {
			if now.Sub(at) > rateWindow {
				t.Errorf("%s: a take %v old was kept", tc.name, now.Sub(at))
			}
		}
	}
}
