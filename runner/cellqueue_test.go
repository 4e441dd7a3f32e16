package runner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/profiles"
)

// waitersFor polls until key has n calls waiting for a host.
func waitersFor(t *testing.T, c *cells, key cellKey, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		got := len(c.waiting[key])
		c.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls wait for a host, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// At its profile's host limit, calls for a tenant's hosts are served in
// the order they came: a host that frees up goes to the oldest waiter, not
// to whichever call wakes first; a call that gives up leaves the line and
// passes on a host handed to it.
func TestCellHostsServeWaitersInOrder(t *testing.T) {
	c := &cells{most: 8, idle: map[cellKey][]*cellHost{}, perGrp: map[cellGroup]int{},
		waiting: map[cellKey][]chan *cellHost{}, changed: make(chan struct{}), settling: map[*cellHost]bool{}}
	prof := &profiles.Exec{Name: "default", Version: "v1"}
	prof.Cell.Hosts = 1
	spec := &Spec{Tenant: "acme", Profile: prof}
	key := cellKeyOf(spec, "sha256:img")
	c.perGrp[key.group()] = 1 // the one host allowed is busy

	type got struct {
		who int
		h   *cellHost
		err error
	}
	out := make(chan got, 4)
	cancelled, cancel := context.WithCancel(context.Background())
	for who := range 4 {
		ctx := context.Background()
		if who == 1 {
			ctx = cancelled
		}
		go func() {
			h, fresh, err := c.acquire(ctx, spec, "sha256:img")
			if fresh {
				err = errors.New("started a host beyond the limit")
			}
			out <- got{who, h, err}
		}()
		waitersFor(t, c, key, who+1)
	}
	cancel() // the second caller gives up
	if g := <-out; g.who != 1 || !errors.Is(g.err, context.Canceled) {
		t.Fatalf("first answer %+v, want the cancelled caller's context.Canceled", g)
	}
	waitersFor(t, c, key, 3)

	for _, want := range []int{0, 2, 3} {
		h := &cellHost{id: "host", key: key}
		c.mu.Lock()
		c.putIdleLocked(h)
		c.mu.Unlock()
		g := <-out
		if g.err != nil || g.who != want || g.h != h {
			t.Fatalf("a freed host went to caller %d (%v), want caller %d", g.who, g.err, want)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiting) != 0 || len(c.idle[key]) != 0 {
		t.Fatalf("left behind: %d queues, %d idle hosts", len(c.waiting), len(c.idle[key]))
	}
}
