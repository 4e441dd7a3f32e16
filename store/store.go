// Package store keeps sandboxd's durable state: idempotency records, the
// records of asynchronous runs, usage counters behind the budgets and
// service settings such as the kill switch (and, later, the audit log).
//
// Store is the interface the service uses; OpenSQLite is the embedded
// default (one SQLite file in the data directory, WAL mode, pure Go). A
// server-backed implementation (PostgreSQL, for many replicas) fits the same
// interface: every method is one short transaction and no caller sees SQL.
package store

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned when a record does not exist (or has expired).
var ErrNotFound = errors.New("store: not found")

// States of an idempotency record.
const (
	// IdemInFlight: the first request with the key is being served.
	IdemInFlight = "in_flight"
	// IdemDone: the response is stored and is replayed to retries.
	IdemDone = "done"
	// IdemInterrupted: the process serving the first request stopped
	// (crash, kill, restart) before it answered; the code may have run.
	IdemInterrupted = "interrupted"
)

// IdemRecord is what the store keeps about one Idempotency-Key of a tenant.
type IdemRecord struct {
	Tenant string
	Key    string
	// RequestSHA256 fingerprints the request the key was first used with.
	RequestSHA256 string
	// ExecID is the run the key started.
	ExecID string
	State  string
	// Owner names the process serving an in-flight record.
	Owner string
	// Status and Body are the stored response (IdemDone only).
	Status    int
	Body      []byte
	CreatedAt time.Time
	ExpiresAt time.Time
}

// States of an exec record.
const (
	ExecQueued      = "queued"      // accepted, waiting for a run slot or running
	ExecDone        = "done"        // finished; Body holds the final state
	ExecInterrupted = "interrupted" // the process stopped before it finished
)

// ExecRecord is the durable record of an asynchronous run.
type ExecRecord struct {
	ID      string
	Tenant  string
	KeyID   string
	Session string
	State   string
	Owner   string
	// Body is the JSON the API serves for the run once it is done.
	Body      []byte
	CreatedAt time.Time
	UpdatedAt time.Time
	ExpiresAt time.Time
}

// Usage scopes.
const (
	ScopeTenantDay = "tenant-day" // Name is the UTC day, 2006-01-02
	ScopeSession   = "session"    // Name is the session id
)

// Usage is what a tenant (per day) or a session has used.
type Usage struct {
	Execs      int64
	CPUMillis  int64
	WallMillis int64
	FetchBytes int64
}

// UsageDelta adds to one usage row.
type UsageDelta struct {
	Scope, Tenant, Name string
	Usage
}

// RecoverStats says what Recover marked interrupted.
type RecoverStats struct {
	Idempotency int
	Execs       int
}

// Store is the durable state. Implementations are safe for concurrent use.
type Store interface {
	// ClaimIdempotency atomically returns the live (unexpired) record of
	// rec.Tenant and rec.Key if there is one, with claimed false; otherwise
	// it stores rec (State IdemInFlight) and returns it with claimed true.
	ClaimIdempotency(ctx context.Context, rec *IdemRecord) (existing *IdemRecord, claimed bool, err error)
	// CompleteIdempotency stores the response of an in-flight record.
	CompleteIdempotency(ctx context.Context, tenant, key string, status int, body []byte) error
	// ReleaseIdempotency deletes an in-flight record held by owner, for a
	// request that was refused before anything ran, so a retry may run.
	ReleaseIdempotency(ctx context.Context, tenant, key, owner string) error
	// GetIdempotency returns the live record, or ErrNotFound.
	GetIdempotency(ctx context.Context, tenant, key string) (*IdemRecord, error)

	// PutExec inserts or replaces an exec record.
	PutExec(ctx context.Context, rec *ExecRecord) error
	// GetExec returns the live exec record, or ErrNotFound.
	GetExec(ctx context.Context, id string) (*ExecRecord, error)

	// Usage returns the usage row (zero when there is none).
	Usage(ctx context.Context, scope, tenant, name string) (Usage, error)
	// AddUsage adds the deltas in one transaction.
	AddUsage(ctx context.Context, deltas ...UsageDelta) error

	// Setting returns a service setting; ok is false when it is unset.
	Setting(ctx context.Context, name string) (value string, ok bool, err error)
	// SetSetting stores a service setting.
	SetSetting(ctx context.Context, name, value string) error

	// Recover marks the in-flight idempotency records and the unfinished
	// exec records of every owner but owner as interrupted. Called once at
	// start-up, when no other process serves the same store.
	Recover(ctx context.Context, owner string) (RecoverStats, error)
	// Purge deletes expired idempotency and exec records, and usage rows not
	// updated since usageBefore; it returns how many rows went.
	Purge(ctx context.Context, now, usageBefore time.Time) (int64, error)

	Close() error
}
