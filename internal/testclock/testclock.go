// Package testclock is a clock for tests of code that takes the time from
// a func() time.Time (a Config's Now): the test moves it by hand while the
// code under test reads it from any goroutine.
package testclock

import (
	"sync"
	"time"
)

// Clock is a settable clock, safe for concurrent use. Make one with New.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock that reads t until it is moved.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time; pass it as a Now func.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
