package runner

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestQuietWaitsForRunsToEnd(t *testing.T) {
	q := newQuiet(realClock{})
	end := q.begin()
	done := make(chan struct{})
	go func() { q.wait(time.Minute, nil); close(done) }()
	select {
	case <-done:
		t.Fatal("wait returned while a run was in progress")
	case <-time.After(200 * time.Millisecond):
	}
	end()
	end() // a second call is harmless
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("wait did not return once the run ended")
	}
}

func TestQuietUrgentLimitAndClose(t *testing.T) {
	q := newQuiet(realClock{})
	defer q.begin()()
	var urgent atomic.Bool
	done := make(chan struct{})
	go func() { q.wait(time.Minute, urgent.Load); close(done) }()
	urgent.Store(true)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("wait did not return when the work became urgent")
	}

	// The limit bounds the wait under steady load.
	began := time.Now()
	q.wait(50*time.Millisecond, nil)
	if time.Since(began) > 10*time.Second {
		t.Fatal("wait ignored its limit")
	}

	// Shutdown ends every wait.
	done = make(chan struct{})
	go func() { q.wait(time.Hour, nil); close(done) }()
	q.close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("close did not end the wait")
	}
}

// The tests below run the quiet scheduler on a fake clock: a wait can end
// only when the test moves the clock or changes the state.

// waitAsync runs q.wait in the background; the channel closes when it
// returns.
func waitAsync(q *quiet, limit time.Duration, urgent func() bool) <-chan struct{} {
	done := make(chan struct{})
	go func() { q.wait(limit, urgent); close(done) }()
	return done
}

func returned(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

func mustReturn(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(guard):
		t.Fatalf("wait did not return %s", what)
	}
}

// A wait ends quietGrace after the last run ends, not before.
func TestQuietWaitsForGraceAfterTheLastRun(t *testing.T) {
	fc := newFakeClock()
	q := newQuiet(fc)
	end1, end2 := q.begin(), q.begin()
	done := waitAsync(q, time.Hour, nil)
	fc.waitTimers(t, 1)
	end1()
	fc.waitTimers(t, 2) // woken by the change, waiting again
	fc.Advance(time.Second)
	fc.waitTimers(t, 3)
	if returned(done) {
		t.Fatal("wait returned while a run was still in progress")
	}
	end2()
	fc.waitTimers(t, 4)                       // now waiting out the grace
	fc.Advance(quietGrace - time.Millisecond) // short of the timer: nothing wakes
	if returned(done) {
		t.Fatal("wait returned before quietGrace had passed")
	}
	fc.Advance(time.Millisecond)
	mustReturn(t, done, "once quietGrace had passed")
}

// With no run for quietGrace already, a wait returns at once.
func TestQuietReturnsAtOnceWhenQuiet(t *testing.T) {
	fc := newFakeClock()
	q := newQuiet(fc)
	q.begin()()
	fc.Advance(quietGrace)
	mustReturn(t, waitAsync(q, time.Hour, nil), "when it was quiet")
}

// urgent, checked at each state change and every 50 ms, ends a wait under
// load; until it says so the wait goes on.
func TestQuietUrgentEndsTheWait(t *testing.T) {
	fc := newFakeClock()
	q := newQuiet(fc)
	defer q.begin()()
	var urgent atomic.Bool
	done := waitAsync(q, time.Hour, urgent.Load)
	fc.waitTimers(t, 1)
	fc.Advance(50 * time.Millisecond) // checked: not urgent
	fc.waitTimers(t, 2)
	if returned(done) {
		t.Fatal("wait returned under load with nothing urgent")
	}
	urgent.Store(true)
	fc.Advance(50 * time.Millisecond)
	mustReturn(t, done, "once the work was urgent")
}

// limit bounds a wait under steady load: it ends at the limit, not before.
func TestQuietLimitEndsTheWait(t *testing.T) {
	fc := newFakeClock()
	q := newQuiet(fc)
	defer q.begin()()
	const limit = 120 * time.Millisecond
	done := waitAsync(q, limit, nil)
	for i, step := range []time.Duration{50 * time.Millisecond, 50 * time.Millisecond} {
		fc.waitTimers(t, i+1)
		fc.Advance(step)
	}
	fc.waitTimers(t, 3) // the last 20 ms
	if returned(done) {
		t.Fatal("wait returned before its limit")
	}
	fc.Advance(20 * time.Millisecond)
	mustReturn(t, done, "at its limit")
}
