// Package loopguard spots an agent stuck in a loop: the same session making
// the same tool call again and again and getting the same outcome each time.
package loopguard

import (
	"sync"
	"time"
)

// Guard remembers, per session, the last call, its outcome and how many
// times in a row that call got that outcome. It is safe for concurrent use.
type Guard struct {
	mu       sync.Mutex
	sessions map[string]*streak
	now      func() time.Time
}

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
func (g *Guard) Check(session, call string, threshold int) (refuse bool, repeats int) {
	if threshold <= 0 || session == "" {
		return false, 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.sessions[session]
	if s == nil || s.call != call {
		return false, 0
	}
	s.seen = g.now()
	return s.count >= threshold-1, s.count
}

// Record notes that call, made by session, had outcome.
func (g *Guard) Record(session, call, outcome string) {
	if session == "" {
		return
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
