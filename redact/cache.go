package redact

import (
	"log/slog"
	"sync"
)

// Cache holds compiled redactors by key (a profile's version), so that a
// profile's rules compile once however many requests use them. The zero
// value is ready to use.
type Cache struct {
	// Log receives rules that do not compile; nil discards.
	Log *slog.Logger

	mu sync.Mutex
	m  map[string]*Redactor
}

// maxCached bounds the cache; past it the cache starts over (profiles
// change rarely, so this only matters for a process that reloads often).
const maxCached = 64

// For returns the redactor of the built-in rules and rules, compiled once
// for key; profile names the rules in the log. With no rules it is
// Default().
func (c *Cache) For(key, profile string, rules []Rule) *Redactor {
	if len(rules) == 0 {
		return Default()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.m[key]; ok {
		return r
	}
	r, err := New(rules)
	if err != nil {
		// The profile loader validated the rules; fall back to the
		// built-ins rather than return nothing.
		if c.Log != nil {
			c.Log.Error("a profile's redact rules do not compile; using the built-in rules", "profile", profile, "err", err)
		}
		r = Default()
	}
	if c.m == nil || len(c.m) > maxCached {
		c.m = map[string]*Redactor{}
	}
	c.m[key] = r
	return r
}
