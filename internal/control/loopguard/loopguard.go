// Package loopguard spots an agent stuck in a loop: the same session making
// the same tool call again and again and getting the same outcome each time.
package loopguard

import (
	"context"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
)

// Guard remembers, per session, the last call, its outcome and how many
// times in a row that call got that outcome. It is safe for concurrent use.
// In a fleet (Share) the streaks live in the shared store, so a loop
// spread over replicas by the load balancer is seen whole.
type Guard struct {
	mu       sync.Mutex
	sessions map[string]*streak
	now      func() time.Time
	shared   Streaks
}

// Streaks keeps the guard's streaks outside the process (store.Postgres).
type Streaks interface {
	Streak(ctx context.Context, session string) (store.Streak, error)
	PutStreak(ctx context.Context, session string, s store.Streak) error
}

// Share keeps the streaks in st instead of this process's memory.
func (g *Guard) Share(st Streaks) { g.shared = st }

type streak struct {
	call, outcome string
	count         int
	seen          time.Time
}

// New returns an empty guard.
func New() *Guard { return &Guard{sessions: map[string]*streak{}, now: time.Now} }

// Check reports whether call, made by session, is to be refused: the last
// threshold-1 calls of the session were this call and all had the same
// outcome. It returns the length of that streak. threshold 0 never refuses.
func (g *Guard) Check(ctx context.Context, session, call string, threshold int) (refuse bool, repeats int, err error) {
	if threshold <= 0 || session == "" {
		return false, 0, nil
	}
	if g.shared != nil {
		s, err := g.shared.Streak(ctx, session)
		if err != nil || s.Call != call {
			return false, 0, err
		}
		return s.Count >= threshold-1, s.Count, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.sessions[session]
	if s == nil || s.call != call {
		return false, 0, nil
	}
	s.seen = g.now()
	return s.count >= threshold-1, s.count, nil
}

// Record notes that call, made by session, had outcome.
func (g *Guard) Record(ctx context.Context, session, call, outcome string) error {
	if session == "" {
		return nil
	}
	if g.shared != nil {
		// Read, then write: two calls of one session racing on two
		// replicas may count one repeat less, never one more.
		s, err := g.shared.Streak(ctx, session)
		if err != nil {
			return err
		}
		if s.Call == call && s.Outcome == outcome {
			s.Count++
		} else {
			s = store.Streak{Call: call, Outcome: outcome, Count: 1}
		}
		s.Seen = g.now()
		return g.shared.PutStreak(ctx, session, s)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.sessions[session]
	if s == nil {
		s = &streak{}
		g.sessions[session] = s
	}
	if s.call == call && s.outcome == outcome {
		s.count++
	} else {
		s.call, s.outcome, s.count = call, outcome, 1
	}
	s.seen = g.now()
	return nil
}

// Forget drops the sessions not seen for longer than idle.
func (g *Guard) Forget(idle time.Duration) {
	cut := g.now().Add(-idle)
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, s := range g.sessions {
		if s.seen.Before(cut) {
			delete(g.sessions, k)
		}
	}
}
