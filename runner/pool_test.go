package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"
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
