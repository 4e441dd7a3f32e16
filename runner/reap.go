package runner

import (
	"context"
	"fmt"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
)

// liveSet is the containers this runner created and has not removed yet.
// A container of this instance that is not in it belongs to no run: it was
// created by a request the engine finished after an earlier process died
// (a SIGKILL during a create), and the reaper removes it.
type liveSet struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (l *liveSet) add(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ids == nil {
		l.ids = map[string]bool{}
	}
	l.ids[id] = true
}

func (l *liveSet) remove(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.ids, id)
}

func (l *liveSet) has(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ids[id]
}

// reap removes the containers of this instance that no run owns and that
// are at least grace old, and returns how many it removed. grace covers a
// create whose answer has not arrived yet; at shutdown, with nothing being
// created, it is 0.
func (r *Runner) reap(ctx context.Context, grace time.Duration) (int, error) {
	list, err := r.ours(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing containers to reap: %w", err)
	}
	n := 0
	for _, c := range list {
		if r.live.has(c.ID) || r.clock.Now().Sub(time.Unix(c.Created, 0)) < grace {
			continue
		}
		if err := r.removeNow(ctx, c.ID); err != nil && !cerrdefs.IsNotFound(err) {
			r.reaped.Add(int64(n))
			return n, fmt.Errorf("reaping container %s: %w", c.ID[:12], err)
		}
		n++
	}
	if n > 0 {
		r.reaped.Add(int64(n))
		r.log.Info("reaped containers that no run owned", "count", n)
	}
	return n, nil
}

// Reaped returns how many containers reap has removed since New.
func (r *Runner) Reaped() int64 { return r.reaped.Load() }

// reapGrace is how old an unowned container must be before the periodic
// reaper removes it: far above the time a create takes.
const reapGrace = 2 * time.Minute

// StartReaper reaps every interval until Close.
func (r *Runner) StartReaper(interval time.Duration) {
	r.reaperStop = make(chan struct{})
	r.reaperDone = make(chan struct{})
	go func() {
		defer close(r.reaperDone)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-r.reaperStop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				if _, err := r.reap(ctx, reapGrace); err != nil {
					r.log.Warn("reaping failed", "err", err)
				}
				cancel()
			}
		}
	}()
}

func (r *Runner) stopReaper() {
	if r.reaperStop != nil {
		close(r.reaperStop)
		<-r.reaperDone
		r.reaperStop = nil
	}
}
