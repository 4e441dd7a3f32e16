// Package store keeps sandboxd's durable state: idempotency records, the
// records of asynchronous runs, usage counters behind the budgets and
// service settings such as the kill switch, egress approvals (and, later,
// the audit log).
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
	// Sessions is how many sessions of dead replicas were marked ended
	// (a shared store only).
	Sessions int
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
	// Purge deletes expired idempotency and exec records, usage rows not
	// updated since usageBefore, and approval records that ended more than
	// 30 days (approvalRetention) before now (approvals expired that long ago,
	// pending requests not seen for that long; rejections are kept); it
	// returns how many rows went.
	Purge(ctx context.Context, now, usageBefore time.Time) (int64, error)

	ApprovalStore

	Close() error
}

// States of an egress approval record. An approved record whose ExpiresAt
// has passed is "expired" (Approval.Status): it allows nothing, and the
// next request to its host files a new record.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalRejected = "rejected"
	ApprovalExpired  = "expired" // derived, never stored
)

// approvalRetention is how long Purge keeps an expired approval, or a
// pending request that nobody sent again. Forgetting a pending request
// allows nothing: the next request files a new one.
const approvalRetention = 30 * 24 * time.Hour

// ErrApprovalExpired is returned when a decision is made on an approval
// that has expired: it is history, and a new request is filed instead.
var ErrApprovalExpired = errors.New("store: approval expired")

// Approval is a request for a person to approve a host for an egress
// profile in approve mode, and the answer. A profile and host have at most
// one standing record (pending, rejected, or approved and not expired).
type Approval struct {
	ID string
	// Profile is the egress profile's name, ProfileVersion its version when
	// the request was first filed. The approval applies to the profile by
	// name, across versions, as long as it stays in approve mode.
	Profile        string
	ProfileVersion string
	// Host is the normalised host name; Port, Method and URL (without its
	// query) are those of the first request.
	Host   string
	Port   int
	Method string
	URL    string
	// Tenant, KeyID and Client (an exec or fetch id) name who asked first.
	Tenant string
	KeyID  string
	Client string
	// State is ApprovalPending, ApprovalApproved or ApprovalRejected.
	State string
	// Count is how many requests were refused for it while pending or
	// rejected; FirstSeen and LastSeen the first and the last of them.
	Count     int64
	FirstSeen time.Time
	LastSeen  time.Time
	// DecidedBy is the key id (and DecidedTenant its tenant) of the person
	// who approved or rejected it, at DecidedAt, with Reason.
	DecidedBy     string
	DecidedTenant string
	DecidedAt     time.Time
	Reason        string
	// ExpiresAt is when an approval ends (approved records only).
	ExpiresAt time.Time
}

// Status returns the record's state at now: its State, or
// ApprovalExpired for an approval past ExpiresAt.
func (a *Approval) Status(now time.Time) string {
	if a.State == ApprovalApproved && !now.Before(a.ExpiresAt) {
		return ApprovalExpired
	}
	return a.State
}

// ApprovalFilter selects approval records for ListApprovals.
type ApprovalFilter struct {
	// Status is pending, approved (not expired), rejected, expired, or ""
	// for every record.
	Status string
	// Profile and Host, when set, must match exactly.
	Profile string
	Host    string
	// Limit caps the records returned, newest LastSeen first (0: 100).
	Limit int
}

// ApprovalDecision is a person's answer to an approval request.
type ApprovalDecision struct {
	// State is ApprovalApproved or ApprovalRejected.
	State string
	// ExpiresAt ends an approval; ignored for a rejection.
	ExpiresAt time.Time
	By        string
	ByTenant  string
	Reason    string
}

// ApprovalStore keeps egress approval records. Times are passed in, so
// that callers decide the clock.
type ApprovalStore interface {
	// FileApproval returns the standing record of a.Profile and a.Host at
	// now, with created false; a pending or rejected one first counts the
	// request (Count, LastSeen). When there is none it stores a as a new
	// pending record (FirstSeen and LastSeen now, Count 1) and returns it
	// with created true.
	FileApproval(ctx context.Context, a *Approval, now time.Time) (rec *Approval, created bool, err error)
	// StandingApproval returns the standing record of profile and host at
	// now, or ErrNotFound. It changes nothing.
	StandingApproval(ctx context.Context, profile, host string, now time.Time) (*Approval, error)
	// GetApproval returns the record id (of any state), or ErrNotFound.
	GetApproval(ctx context.Context, id string) (*Approval, error)
	// ListApprovals returns the records f selects at now.
	ListApprovals(ctx context.Context, f ApprovalFilter, now time.Time) ([]*Approval, error)
	// DecideApproval records d on record id and returns the record before
	// and after. Pending, approved and rejected records may be decided
	// (again: a rejection revokes an approval, an approval extends one or
	// reverses a rejection); an expired approval is ErrApprovalExpired, an
	// unknown id ErrNotFound.
	DecideApproval(ctx context.Context, id string, d ApprovalDecision, now time.Time) (before, after *Approval, err error)
}
