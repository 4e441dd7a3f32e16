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
