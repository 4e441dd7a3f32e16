package admit

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestGateBoundsRunningAndWaiting(t *testing.T) {
	g := New(2, 1, time.Minute)
	ctx := context.Background()
	r1, err := g.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := g.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The third waits in the queue; the fourth finds the queue full.
	got := make(chan error, 1)
	var r3 func()
	go func() {
		var err error
		r3, err = g.Acquire(ctx)
		got <- err
	}()
	waitFor(t, func() bool { _, w, _ := g.Stats(); return w == 1 })
	if _, err := g.Acquire(ctx); !errors.Is(err, ErrBusy) {
		t.Fatalf("fourth Acquire: got %v, want ErrBusy", err)
	}
	r1()
	if err := <-got; err != nil {
		t.Fatalf("queued Acquire: %v", err)
	}
	if run, _, _ := g.Stats(); run != 2 {
		t.Fatalf("running = %d, want 2", run)
	}
	r2()
	r3()
	if run, w, _ := g.Stats(); run != 0 || w != 0 {
		t.Fatalf("after release: running %d waiting %d", run, w)
	}
}

func TestGateWaitIsBounded(t *testing.T) {
	g := New(1, 5, 50*time.Millisecond)
	rel, _ := g.Acquire(context.Background())
	defer rel()
	if _, err := g.Acquire(context.Background()); !errors.Is(err, ErrBusy) {
		t.Fatalf("got %v, want ErrBusy after the wait bound", err)
	}
}

func TestGateWaitEndsWithContext(t *testing.T) {
	g := New(1, 5, time.Minute)
	rel, _ := g.Acquire(context.Background())
	defer rel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if _, w, _ := g.Stats(); w != 0 {
		t.Fatalf("waiting = %d after a cancelled wait", w)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("condition not reached")
}
