// Package admit bounds how many runs proceed at once and how many may wait
// for a slot; past that, callers are turned away at once with ErrBusy.
package admit

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrBusy means every slot is taken and the queue is full, or the wait for a
// slot passed its bound.
var ErrBusy = errors.New("admit: all run slots are busy")

// Gate admits at most Slots runs at once, with at most Queue waiting.
type Gate struct {
	slots   chan struct{}
	queue   int
	maxWait time.Duration

	mu      sync.Mutex
	waiting int
}

// New returns a gate with the given number of slots, queue length and
// longest wait for a slot.
func New(slots, queue int, maxWait time.Duration) *Gate {
	if slots < 1 {
		slots = 1
	}
	return &Gate{slots: make(chan struct{}, slots), queue: queue, maxWait: maxWait}
}

// Acquire takes a slot, waiting in the queue when there is room there. The
// returned release must be called once the run is over.
func (g *Gate) Acquire(ctx context.Context) (release func(), err error) {
	select {
	case g.slots <- struct{}{}:
		return g.release, nil
	default:
	}
	g.mu.Lock()
	if g.waiting >= g.queue {
		g.mu.Unlock()
		return nil, ErrBusy
	}
	g.waiting++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.waiting--
		g.mu.Unlock()
	}()
	t := time.NewTimer(g.maxWait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return g.release, nil
	case <-t.C:
		return nil, ErrBusy
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func (g *Gate) release() { <-g.slots }

// Stats reports the slots in use and the callers waiting.
func (g *Gate) Stats() (running, waiting, slots int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.slots), g.waiting, cap(g.slots)
}
