package e2e

import "time"

// Budgets the suites share. They are generous for a busy 2-core machine;
// only the service's own bounds are asserted against tighter values.
const (
	// ShutdownTimeout bounds a server's exit after SIGTERM: sandboxd's
	// default 15 s grace plus its kill-and-remove phase.
	ShutdownTimeout = 60 * time.Second
	// RemovalTimeout is how long a finished run's container may linger: it
	// is removed off the request path, just after the answer.
	RemovalTimeout = 10 * time.Second
	// FinalCleanupTimeout is how long after a server exited a suite waits
	// for the last of its containers to disappear.
	FinalCleanupTimeout = 15 * time.Second
	// MaxConcurrentExecs caps a suite's /exec requests in flight (a Gate).
	// The server admits 2 runs per core and queues a few more; 3 keeps a
	// 2-core machine busy without making the timing-bound tests wait for
	// CPU.
	MaxConcurrentExecs = 3
	// Max429Retries bounds how often a suite sends a request turned away
	// with 429 BUSY again (Client.Retries429).
	Max429Retries = 30
)
