package runner

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// The reaper and removeLater on a fake engine and a fake clock.

func oursLabels(r *Runner) map[string]string {
	return map[string]string{LabelManaged: "true", LabelInstance: r.instance}
}

// reap removes this instance's containers that no run owns once they are
// older than the grace, and nothing else; Reaped counts them.
func TestReapRemovesOnlyUnownedOldContainersOfOurs(t *testing.T) {
	r, fe, fc := newFakeRunner(t)
	ctx := context.Background()
	live := startFake(t, r)
	fc.Advance(time.Hour) // the live box is old
	now := fc.Now()
	orphan := fe.add(oursLabels(r), now.Add(-reapGrace-time.Second))
	young := fe.add(oursLabels(r), now.Add(-reapGrace/2))
	other := fe.add(map[string]string{LabelManaged: "true", LabelInstance: "another"}, now.Add(-time.Hour))
	foreign := fe.add(nil, now.Add(-time.Hour))

	if n, err := r.reap(ctx, reapGrace); err != nil || n != 1 {
		t.Fatalf("reap = %d, %v; want the one old orphan", n, err)
	}
	if want := []string{live.id, young, other, foreign}; !slices.Equal(fe.ids(), want) {
		t.Fatalf("after reap the engine holds %v, want %v (orphan %s gone)", fe.ids(), want, orphan[:12])
	}
	if n, err := r.reap(ctx, 0); err != nil || n != 1 {
		t.Fatalf("reap without grace = %d, %v; want the young orphan", n, err)
	}
	if want := []string{live.id, other, foreign}; !slices.Equal(fe.ids(), want) {
		t.Fatalf("after reap without grace the engine holds %v, want %v", fe.ids(), want)
	}
	if got := r.Reaped(); got != 2 {
		t.Fatalf("Reaped = %d, want 2", got)
	}
	discard(r, live)
}

// A removal the engine refuses stops the reap with an error naming the
// container; what was removed before it is counted. A container already
// gone counts as removed.
func TestReapStopsAtARefusedRemoval(t *testing.T) {
	r, fe, fc := newFakeRunner(t)
	old := fc.Now().Add(-time.Hour)
	gone := fe.add(oursLabels(r), old)
	first := fe.add(oursLabels(r), old)
	refused := fe.add(oursLabels(r), old)
	after := fe.add(oursLabels(r), old)
	fe.setRefuse(func(id string) error {
		switch id {
		case gone:
			return notFound(id)
		case refused:
			return errors.New("driver failed to remove root filesystem: device or resource busy")
		}
		return nil
	})
	n, err := r.reap(context.Background(), 0)
	if err == nil || !strings.Contains(err.Error(), refused[:12]) || !strings.Contains(err.Error(), "device or resource busy") {
		t.Fatalf("reap error %v; want the refusal, naming %s", err, refused[:12])
	}
	if n != 2 || r.Reaped() != 2 {
		t.Fatalf("reap = %d, Reaped = %d; want 2 (one already gone, one removed)", n, r.Reaped())
	}
	if want := []string{gone, refused, after}; !slices.Equal(fe.ids(), want) {
		t.Fatalf("engine holds %v, want %v (%s removed)", fe.ids(), want, first[:12])
	}
}

// Cleanup removes every container of this instance, owned or not, old or
// not, and nobody else's.
func TestCleanupRemovesAllOfOurs(t *testing.T) {
	r, fe, fc := newFakeRunner(t)
	now := fc.Now()
	fe.add(oursLabels(r), now)
	fe.add(oursLabels(r), now.Add(-time.Hour))
	other := fe.add(map[string]string{LabelManaged: "true", LabelInstance: "another"}, now)
	if n, err := r.Cleanup(context.Background()); err != nil || n != 2 {
		t.Fatalf("Cleanup = %d, %v; want 2", n, err)
	}
	if !slices.Equal(fe.ids(), []string{other}) {
		t.Fatalf("engine holds %v, want only %s", fe.ids(), other[:12])
	}
}

// removeLater retries a removal the engine refuses, backing off, for
// removeRetryFor; then it leaves the container to the reaper, which
// removes it once the engine answers.
func TestRemoveLaterRetriesThenLeavesItToTheReaper(t *testing.T) {
	r, fe, fc := newFakeRunner(t)
	ctx := context.Background()
	b := startFake(t, r)
	b.hj.Close()
	fe.setRefuse(func(string) error { return errors.New("Cannot connect to the Docker daemon") })
	began := fc.Now()
	r.removeLater(b.id)
	done := make(chan struct{})
	go func() { r.removals.Wait(); close(done) }()
	fc.runUntil(t, done)

	tried := fc.Now().Sub(began)
	if calls := fe.removeCalls(b.id); calls < 3 {
		t.Fatalf("%d removal attempts, want retries", calls)
	}
	if tried > removeRetryFor || tried < removeRetryFor-5*time.Second {
		t.Fatalf("removeLater gave up after %v, want about %v", tried, removeRetryFor)
	}
	if r.live.has(b.id) || !slices.Contains(fe.ids(), b.id) {
		t.Fatal("the container given up on should be out of the live set and still in the engine")
	}

	fe.setRefuse(nil)
	if n, err := r.reap(ctx, 0); err != nil || n != 1 || len(fe.ids()) != 0 {
		t.Fatalf("reap = %d, %v, engine holds %v; want the given-up container removed", n, err, fe.ids())
	}
}

// A refusal that passes costs retries, not the container; "already in
// progress" means another removal has it.
func TestRemoveLaterEndsWhenTheContainerIsGone(t *testing.T) {
	for _, tc := range []struct {
		name      string
		refusals  int
		err       error
		wantCalls int
		wantGone  bool
	}{
		{"at once", 0, nil, 1, true},
		{"after two refusals", 2, errors.New("Cannot connect to the Docker daemon"), 3, true},
		{"already in progress", 1, errors.New("removal of container x is already in progress"), 1, false},
		{"already gone", 1, notFound("x"), 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, fe, fc := newFakeRunner(t)
			b := startFake(t, r)
			b.hj.Close()
			left := tc.refusals
			fe.setRefuse(func(string) error {
				if left == 0 {
					return nil
				}
				left--
				return tc.err
			})
			r.removeLater(b.id)
			done := make(chan struct{})
			go func() { r.removals.Wait(); close(done) }()
			fc.runUntil(t, done)
			if calls := fe.removeCalls(b.id); calls != tc.wantCalls {
				t.Fatalf("%d removal attempts, want %d", calls, tc.wantCalls)
			}
			if r.live.has(b.id) {
				t.Fatal("the container is still in the live set")
			}
			if gone := !slices.Contains(fe.ids(), b.id); gone != tc.wantGone {
				t.Fatalf("container removed by this call: %v, want %v", gone, tc.wantGone)
			}
		})
	}
}
