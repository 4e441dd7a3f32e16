package runner

import (
	"sync"
	"time"
)

// quiet lets background engine work - refilling the pool, removing used
// containers - wait for a moment when no run is in progress. Starting and
// removing a container costs about half a second of CPU here (the engine,
// containerd, the shim, runc, the storage driver and the kernel), which on
// a small machine would otherwise be taken from a running job's code and
// from the answer its caller waits for.
type quiet struct {
	mu      sync.Mutex
	active  int
	since   time.Time     // when active last fell to 0
	changed chan struct{} // closed and replaced whenever active changes
	closing bool          // no more waiting: shutting down
	clock   clock
}

// quietGrace is how long after the last run ends the machine counts as
// quiet: sandboxd still stores the run's capture and audit record and
// writes the answer after the runner returns.
const quietGrace = 30 * time.Millisecond

func newQuiet(c clock) *quiet { return &quiet{changed: make(chan struct{}), clock: c} }

// begin marks a run in progress until the returned func is called.
func (q *quiet) begin() func() {
	q.mu.Lock()
	q.active++
	q.signalLocked()
	q.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			q.active--
			if q.active == 0 {
				q.since = q.clock.Now()
			}
			q.signalLocked()
			q.mu.Unlock()
		})
	}
}

func (q *quiet) signalLocked() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// close ends every wait at once (shutdown).
func (q *quiet) close() {
	q.mu.Lock()
	q.closing = true
	q.signalLocked()
	q.mu.Unlock()
}

// wait returns when no run has been in progress for quietGrace, when
// urgent (if not nil) reports true, or after at most limit, whichever comes
// first. urgent is checked whenever the state changes and every 50 ms.
func (q *quiet) wait(limit time.Duration, urgent func() bool) {
	deadline := q.clock.Now().Add(limit)
	for {
		q.mu.Lock()
		now := q.clock.Now()
		if q.closing || !now.Before(deadline) {
			q.mu.Unlock()
			return
		}
		next := min(deadline.Sub(now), 50*time.Millisecond)
		if q.active == 0 {
			left := quietGrace - now.Sub(q.since)
			if left <= 0 {
				q.mu.Unlock()
				return
			}
			next = min(next, left)
		}
		changed := q.changed
		q.mu.Unlock()
		if urgent != nil && urgent() {
			return
		}
		timer, stop := q.clock.NewTimer(next)
		select {
		case <-changed:
		case <-timer:
		}
		stop()
	}
}
