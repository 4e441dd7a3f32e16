package e2e

import (
	"strings"
	"sync"
	"time"
)

// LastLines returns the last n lines of s, its trailing newlines trimmed
// first.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-max(n, 0):]
	}
	return strings.Join(lines, "\n")
}

// Grep returns the lines of s that contain any of needles ("" matches
// nothing), the last most of them.
func Grep(s string, most int, needles ...string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, n := range needles {
			if n != "" && strings.Contains(line, n) {
				out = append(out, line)
				break
			}
		}
	}
	if len(out) > most {
		out = out[len(out)-most:]
	}
	return strings.Join(out, "\n")
}

// IDSet is a set of ids that many goroutines add to (the exec ids a suite
// saw).
type IDSet struct {
	mu  sync.Mutex
	ids map[string]bool
}

// Add adds id; "" is not added.
func (s *IDSet) Add(id string) {
	if id == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]bool{}
	}
	s.ids[id] = true
}

// Has reports whether id was added.
func (s *IDSet) Has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

// Snapshot returns a copy of the set.
func (s *IDSet) Snapshot() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]bool, len(s.ids))
	for id := range s.ids {
		out[id] = true
	}
	return out
}

// Repeat calls f in a goroutine of its own, at once and then every
// interval, until stop is called; stop waits for the last call to return
// and may be called again.
func Repeat(interval time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			f()
			select {
			case <-done:
				return
			case <-time.After(interval):
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}
