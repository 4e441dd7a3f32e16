package egress

import (
	"sync"
	"time"
)

// Limiter enforces requests_per_minute per client with a token bucket: a
// client may burst up to the per-minute number, and regains one request
// every 60/N seconds. It is safe for concurrent use; the zero value is not,
// use NewLimiter.
type Limiter struct {
	mu        sync.Mutex
	buckets   map[string]*bucket
	now       func() time.Time
	lastSweep time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

// NewLimiter returns an empty limiter.
func NewLimiter() *Limiter {
	return &Limiter{buckets: make(map[string]*bucket), now: time.Now}
}

// Allow takes one request for client under a limit of perMinute. When the
// client is over it, Allow returns false and how long until one request is
// allowed again.
func (l *Limiter) Allow(client string, perMinute int) (bool, time.Duration) {
	if perMinute <= 0 {
		return false, time.Minute
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	capacity := float64(perMinute)
	rate := capacity / 60 // tokens per second
	b, ok := l.buckets[client]
	if !ok {
		b = &bucket{tokens: capacity, last: now}
		l.buckets[client] = b
	}
	b.tokens = min(capacity, b.tokens+now.Sub(b.last).Seconds()*rate)
	b.last = now
	l.sweep(now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / rate * float64(time.Second))
	return false, max(wait, time.Second)
}

// sweep drops buckets idle for over a minute (full again under any limit of
// at least one per minute), at most once a minute, so that clients that
// come and go (one per exec) do not accumulate.
func (l *Limiter) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < time.Minute {
		return
	}
	l.lastSweep = now
	for k, b := range l.buckets {
		if now.Sub(b.last) > time.Minute {
			delete(l.buckets, k)
		}
	}
}
