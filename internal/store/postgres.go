package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandboxd/sandboxd/internal/pgdb"
)

// pgSteps are the store's schema versions on PostgreSQL (pgdb.Migrate):
// append a step for a change, never edit one that has shipped. Times are
// Unix milliseconds, as in the SQLite store.
var pgSteps = []string{
	`CREATE TABLE settings (
		name TEXT PRIMARY KEY,
		value TEXT NOT NULL,
		updated_at BIGINT NOT NULL);
	CREATE TABLE idempotency (
		tenant TEXT NOT NULL,
		key TEXT NOT NULL,
		request_sha256 TEXT NOT NULL,
		exec_id TEXT NOT NULL,
		state TEXT NOT NULL,
		owner TEXT NOT NULL,
		status INTEGER NOT NULL DEFAULT 0,
		body BYTEA,
		created_at BIGINT NOT NULL,
		expires_at BIGINT NOT NULL,
		PRIMARY KEY (tenant, key));
	CREATE INDEX idempotency_expires ON idempotency (expires_at);
	CREATE INDEX idempotency_inflight ON idempotency (owner) WHERE state = 'in_flight';
	CREATE TABLE execs (
		id TEXT PRIMARY KEY,
		tenant TEXT NOT NULL,
		key_id TEXT NOT NULL,
		session TEXT NOT NULL,
		state TEXT NOT NULL,
		owner TEXT NOT NULL,
		body BYTEA,
		created_at BIGINT NOT NULL,
		updated_at BIGINT NOT NULL,
		expires_at BIGINT NOT NULL);
	CREATE INDEX execs_expires ON execs (expires_at);
	CREATE INDEX execs_queued ON execs (owner) WHERE state = 'queued';
	CREATE TABLE usage (
		scope TEXT NOT NULL,
		tenant TEXT NOT NULL,
		name TEXT NOT NULL,
		execs BIGINT NOT NULL DEFAULT 0,
		cpu_ms BIGINT NOT NULL DEFAULT 0,
		wall_ms BIGINT NOT NULL DEFAULT 0,
		fetch_bytes BIGINT NOT NULL DEFAULT 0,
		updated_at BIGINT NOT NULL,
		PRIMARY KEY (scope, tenant, name));
	CREATE INDEX usage_updated ON usage (updated_at);
	CREATE TABLE approvals (
		id TEXT PRIMARY KEY,
		profile TEXT NOT NULL,
		profile_version TEXT NOT NULL,
		host TEXT NOT NULL,
		port INTEGER NOT NULL,
		method TEXT NOT NULL,
		url TEXT NOT NULL,
		tenant TEXT NOT NULL,
		key_id TEXT NOT NULL,
		client TEXT NOT NULL,
		state TEXT NOT NULL,
		count BIGINT NOT NULL,
		first_seen BIGINT NOT NULL,
		last_seen BIGINT NOT NULL,
		decided_by TEXT NOT NULL DEFAULT '',
		decided_tenant TEXT NOT NULL DEFAULT '',
		decided_at BIGINT NOT NULL DEFAULT 0,
		reason TEXT NOT NULL DEFAULT '',
		expires_at BIGINT NOT NULL DEFAULT 0);
	CREATE INDEX approvals_host ON approvals (profile, host);
	CREATE INDEX approvals_seen ON approvals (last_seen);
	CREATE TABLE members (
		owner TEXT PRIMARY KEY,
		replica TEXT NOT NULL,
		addr TEXT NOT NULL,
		started_at BIGINT NOT NULL,
		seen_at BIGINT NOT NULL);
	CREATE TABLE rate_buckets (
		key TEXT PRIMARY KEY,
		tokens DOUBLE PRECISION NOT NULL,
		last_ms BIGINT NOT NULL);
	CREATE TABLE budget_holds (
		id TEXT PRIMARY KEY,
		tenant TEXT NOT NULL,
		session TEXT NOT NULL,
		day TEXT NOT NULL,
		cpu_ms BIGINT NOT NULL,
		wall_ms BIGINT NOT NULL,
		owner TEXT NOT NULL,
		created_at BIGINT NOT NULL);
	CREATE INDEX budget_holds_tenant ON budget_holds (tenant);
	CREATE INDEX budget_holds_session ON budget_holds (tenant, session);
	CREATE INDEX budget_holds_owner ON budget_holds (owner);
	CREATE TABLE loop_streaks (
		session TEXT PRIMARY KEY,
		call TEXT NOT NULL,
		outcome TEXT NOT NULL,
		count INTEGER NOT NULL,
		seen_ms BIGINT NOT NULL);
	CREATE INDEX loop_streaks_seen ON loop_streaks (seen_ms);
	CREATE TABLE sessions (
		id TEXT PRIMARY KEY,
		tenant TEXT NOT NULL,
		key_id TEXT NOT NULL,
		owner TEXT NOT NULL,
		replica TEXT NOT NULL,
		addr TEXT NOT NULL,
		state TEXT NOT NULL,
		end_reason TEXT NOT NULL DEFAULT '',
		created_at BIGINT NOT NULL,
		updated_at BIGINT NOT NULL);
	CREATE INDEX sessions_owner ON sessions (owner) WHERE state <> 'ended';
	CREATE INDEX sessions_updated ON sessions (updated_at);`,
}

// Postgres is the Store a fleet of replicas shares: every replica's
// idempotency keys, async runs, usage, settings (the kill switch),
// approvals, budgets, loop guard and session directory in one PostgreSQL
// database. Every method is one short transaction; what must be exact
// across replicas (a claimed key, a budget's hold, a token taken, an
// approval filed) is decided inside the database.
type Postgres struct {
	common
	pool *pgxpool.Pool
	// relaxed commits without waiting for the WAL flush
	// (pgdb.OpenRelaxed). The per-exec writes go through it: idempotency
	// keys, async runs, usage, budget holds, rate buckets, loop streaks,
	// the session directory, beats. That is the SQLite store's promise
	// (synchronous=NORMAL): a write survives sandboxd being killed at any
	// point; only a crash of the database server (not a restart: a clean
	// shutdown flushes) may lose the last few hundred milliseconds of
	// them. And an exec's audit record, appended durably before its
	// answer, flushes every write before it in the WAL: what was answered
	// is on disk. Settings (the kill switch) and approvals commit durably.
	relaxed *pgxpool.Pool
	// DeadAfter is how long a member may go without a Beat before its
	// in-flight work is taken for interrupted (Recover).
	DeadAfter time.Duration

	// beatsSince is when this store's current run of successful beats
	// began (UnixNano; 0 after a failed beat, or before the first): the
	// vantage from which a member's silence proves it dead (watched).
	beatsSince atomic.Int64
}

// DefaultDeadAfter is Postgres.DeadAfter's default: a replica beats every
// second, so ten missed beats.
const DefaultDeadAfter = 10 * time.Second

// OpenPostgres connects to the database at dsn (postgres://...) and
// brings the store's tables up to date. Several replicas may open the
// same database at once.
func OpenPostgres(ctx context.Context, dsn string) (*Postgres, error) {
	pool, err := pgdb.Open(ctx, dsn, 32)
	if err != nil {
		return nil, err
	}
	if err := pgdb.Migrate(ctx, pool, "store", pgSteps); err != nil {
		pool.Close()
		return nil, err
	}
	relaxed, err := pgdb.OpenRelaxed(ctx, dsn, 32)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &Postgres{common: common{q: pgQ{pool}, perExec: pgQ{relaxed}}, pool: pool, relaxed: relaxed, DeadAfter: DefaultDeadAfter}, nil
}

// Pool is the connection pool, for the other PostgreSQL-backed parts of
// the same replica (they share the database).
func (s *Postgres) Pool() *pgxpool.Pool { return s.pool }

// Close closes the pool.
func (s *Postgres) Close() error {
	s.relaxed.Close()
	s.pool.Close()
	return nil
}

// Ping checks that the database answers.
func (s *Postgres) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

func pgNotFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// ClaimIdempotency implements Store: one insert claims the key, or
// replaces an expired record; a live record comes back unclaimed.
func (s *Postgres) ClaimIdempotency(ctx context.Context, rec *IdemRecord) (*IdemRecord, bool, error) {
	now := time.Now()
	r := *rec
	r.State = IdemInFlight
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	}
	for range 3 {
		tag, err := s.relaxed.Exec(ctx, `INSERT INTO idempotency (`+idemCols+`) VALUES ($1, $2, $3, $4, $5, $6, 0, NULL, $7, $8)
			ON CONFLICT (tenant, key) DO UPDATE SET request_sha256 = excluded.request_sha256, exec_id = excluded.exec_id,
				state = excluded.state, owner = excluded.owner, status = 0, body = NULL,
				created_at = excluded.created_at, expires_at = excluded.expires_at
			WHERE idempotency.expires_at <= $9`,
			r.Tenant, r.Key, r.RequestSHA256, r.ExecID, r.State, r.Owner, ms(r.CreatedAt), ms(r.ExpiresAt), ms(now))
		if err != nil {
			return nil, false, err
		}
		if tag.RowsAffected() == 1 {
			return &r, true, nil
		}
		old, err := s.GetIdempotency(ctx, r.Tenant, r.Key)
		if errors.Is(err, ErrNotFound) {
			continue // it expired or was released in between: claim again
		}
		if err != nil {
			return nil, false, err
		}
		return old, false, nil
	}
	return nil, false, errors.New("store: an idempotency key kept changing while it was claimed")
}

// PutExec implements Store.
func (s *Postgres) PutExec(ctx context.Context, r *ExecRecord) error {
	now := time.Now()
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	}
	r.UpdatedAt = now
	_, err := s.relaxed.Exec(ctx, `INSERT INTO execs (id, tenant, key_id, session, state, owner, body, created_at, updated_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (id) DO UPDATE SET tenant = excluded.tenant, key_id = excluded.key_id, session = excluded.session,
			state = excluded.state, owner = excluded.owner, body = excluded.body, created_at = excluded.created_at,
			updated_at = excluded.updated_at, expires_at = excluded.expires_at`,
		r.ID, r.Tenant, r.KeyID, r.Session, r.State, r.Owner, r.Body, ms(r.CreatedAt), ms(r.UpdatedAt), ms(r.ExpiresAt))
	return err
}

const addUsageSQL = `INSERT INTO usage (scope, tenant, name, execs, cpu_ms, wall_ms, fetch_bytes, updated_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
	ON CONFLICT (scope, tenant, name) DO UPDATE SET
		execs = usage.execs + excluded.execs, cpu_ms = usage.cpu_ms + excluded.cpu_ms,
		wall_ms = usage.wall_ms + excluded.wall_ms, fetch_bytes = usage.fetch_bytes + excluded.fetch_bytes,
		updated_at = excluded.updated_at`

// AddUsage implements Store.
func (s *Postgres) AddUsage(ctx context.Context, deltas ...UsageDelta) error {
	if len(deltas) == 0 {
		return nil
	}
	return pgx.BeginFunc(ctx, s.relaxed, func(tx pgx.Tx) error { return addUsage(ctx, tx, deltas) })
}

func addUsage(ctx context.Context, tx pgx.Tx, deltas []UsageDelta) error {
	now := ms(time.Now())
	for _, d := range deltas {
		if _, err := tx.Exec(ctx, addUsageSQL, d.Scope, d.Tenant, d.Name, d.Execs, d.CPUMillis, d.WallMillis, d.FetchBytes, now); err != nil {
			return err
		}
	}
	return nil
}

// liveOwners is the condition "owner is a member seen within DeadAfter"
// for the owner column col; its one argument is the cut-off (ms).
func liveOwners(col string, arg int) string {
	return fmt.Sprintf(`%s IN (SELECT owner FROM members WHERE seen_at > $%d)`, col, arg)
}

// Recover implements Store. Replicas share the database, so unlike the
// SQLite store it marks only the work of owners that are not alive: not
// owner itself, and no other member that beat within DeadAfter. It is
// safe to call at any time; a fleet calls it every few seconds so that a
// dead replica's in-flight keys answer INTERRUPTED on every other. The
// dead owners' budget holds and open sessions go too (Ended with the
// reason).
//
// A missed beat proves a member dead only while the database answered:
// when it was down (or out of reach) nobody could beat, and the first
// replica back must not take the others' running work for interrupted.
// So Recover does nothing until this store's beats have gone through
// without a failure for DeadAfter; by then every live member has beaten
// again.
func (s *Postgres) Recover(ctx context.Context, owner string) (RecoverStats, error) {
	var st RecoverStats
	if !s.watched() {
		return st, nil
	}
	cut := ms(time.Now().Add(-s.DeadAfter))
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE idempotency SET state = $1 WHERE state = $2 AND owner <> $3 AND NOT `+liveOwners("owner", 4),
			IdemInterrupted, IdemInFlight, owner, cut)
		if err != nil {
			return err
		}
		st.Idempotency = int(tag.RowsAffected())
		tag, err = tx.Exec(ctx, `UPDATE execs SET state = $1, updated_at = $2 WHERE state = $3 AND owner <> $4 AND NOT `+liveOwners("owner", 5),
			ExecInterrupted, ms(time.Now()), ExecQueued, owner, cut)
		if err != nil {
			return err
		}
		st.Execs = int(tag.RowsAffected())
		if _, err := tx.Exec(ctx, `DELETE FROM budget_holds WHERE owner <> $1 AND NOT `+liveOwners("owner", 2), owner, cut); err != nil {
			return err
		}
		tag, err = tx.Exec(ctx, `UPDATE sessions SET state = 'ended', end_reason = 'its replica ' || replica || ' stopped answering', updated_at = $1
			WHERE state <> 'ended' AND owner <> $2 AND NOT `+liveOwners("owner", 3), ms(time.Now()), owner, cut)
		if err != nil {
			return err
		}
		st.Sessions = int(tag.RowsAffected())
		return nil
	})
	return st, err
}

// Purge implements Store: besides what the SQLite store purges, loop
// streaks, ended sessions' entries and members not seen since
// usageBefore.
func (s *Postgres) Purge(ctx context.Context, now, usageBefore time.Time) (int64, error) {
	return s.purge(ctx, append(purgeStmts(now, usageBefore),
		purgeStmt{`DELETE FROM loop_streaks WHERE seen_ms < ?`, ms(usageBefore)},
		purgeStmt{`DELETE FROM sessions WHERE state = 'ended' AND updated_at < ?`, ms(usageBefore)},
		purgeStmt{`DELETE FROM members WHERE seen_at < ?`, ms(usageBefore)},
	))
}

var _ Store = (*Postgres)(nil)
