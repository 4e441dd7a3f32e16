package store

import (
	"context"
	"time"
)

// Shared is what a store that several replicas share (Postgres) adds to
// Store: who is alive, and the state that must be exact across the fleet
// rather than per process (rate buckets, budget holds, the loop guard's
// streaks, the session directory). The SQLite store, for one host, does
// not implement it: each of those lives in the process's memory there.
type Shared interface {
	// Beat records that m.Owner (one replica's process) is alive. A
	// member that has not beaten within the store's DeadAfter is dead:
	// Recover takes its work for interrupted.
	Beat(ctx context.Context, m Member) error
	// Leave removes a member that stops cleanly.
	Leave(ctx context.Context, owner string) error
	// Member returns the member owner and whether it is alive, or
	// ErrNotFound. A member is presumed alive until this process's beats
	// have gone through for DeadAfter: after an outage of the store,
	// nobody's beats are recent.
	Member(ctx context.Context, owner string) (*Member, bool, error)

	// TakeToken takes one token from the bucket key, refilled at perSec
	// up to capacity (full when new). It returns 0 when a token was
	// taken, else how long until one will be there.
	TakeToken(ctx context.Context, key string, perSec, capacity float64, now time.Time) (time.Duration, error)
	// Admit decides a run's budget hold atomically across the fleet:
	// decide sees the tenant's and the session's usage and the holds of
	// their running execs, as of a moment when no other admission of the
	// tenant is deciding, and returns the hold to store (nil: refused).
	Admit(ctx context.Context, tenant, session, day string, decide func(BudgetView) *Hold) (*Hold, error)
	// ReleaseHold deletes hold id and adds charge in one transaction.
	ReleaseHold(ctx context.Context, id string, charge ...UsageDelta) error
	// View is what Admit's decide would see now (without the lock).
	View(ctx context.Context, tenant, session, day string) (BudgetView, error)
	// Tokens is how many tokens bucket key holds at now (capacity when
	// it has none yet), without taking one.
	Tokens(ctx context.Context, key string, perSec, capacity float64, now time.Time) (float64, error)

	// Streak returns the loop guard's record of session (zero: none).
	Streak(ctx context.Context, session string) (Streak, error)
	// PutStreak stores it.
	PutStreak(ctx context.Context, session string, s Streak) error

	// PutSession inserts or updates a session's directory entry.
	PutSession(ctx context.Context, e *SessionEntry) error
	// GetSession returns it, or ErrNotFound.
	GetSession(ctx context.Context, id string) (*SessionEntry, error)
	// OpenSessions counts a tenant's live sessions on every replica.
	OpenSessions(ctx context.Context, tenant string) (int, error)
}

// Member is one replica's serving process.
type Member struct {
	// Owner is the process's owner id (control.Plane's), Replica the
	// replica's name, Addr the base URL other replicas reach its API at.
	Owner, Replica, Addr string
	StartedAt, SeenAt    time.Time
}

// BudgetView is what an admission decides on: a tenant's usage today and
// what its running execs hold, and the same for one session.
type BudgetView struct {
	Tenant      Usage // of the day, finished runs
	Running     int   // the tenant's execs holding budget
	ReservedCPU int64 // ms the tenant's running execs hold
	Session     Usage
	Pending     int64 // the session's execs holding budget
	SessionCPU  int64 // ms
	SessionWall int64 // ms
}

// Hold is what one admitted exec holds of its budgets until it ends.
type Hold struct {
	ID              string
	Tenant, Session string
	Day             string
	CPUMS, WallMS   int64
	Owner           string
	CreatedAt       time.Time
}

// Streak is the loop guard's memory of a session: its last call, that
// call's outcome and how many times in a row it had it.
type Streak struct {
	Call, Outcome string
	Count         int
	Seen          time.Time
}

// Session states in the directory.
const (
	SessionLive  = "live"
	SessionEnded = "ended"
)

// SessionEntry says where a session lives: the replica whose engine runs
// its sandbox, and how to reach it.
type SessionEntry struct {
	ID, Tenant, KeyID string
	// Owner, Replica and Addr are the serving process's (Member).
	Owner, Replica, Addr string
	State                string // SessionLive or SessionEnded
	EndReason            string
	CreatedAt, UpdatedAt time.Time
}
