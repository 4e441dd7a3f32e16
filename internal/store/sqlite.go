package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // pure-Go SQLite driver, registered as "sqlite"

	"github.com/sandboxd/sandboxd/internal/sqlitedb"
)

// fileName is the SQLite database's name in the data directory.
const fileName = "sandboxd.db"

// lockName is the file a serving process holds an exclusive lock on, so two
// processes never serve one data directory (Recover relies on that).
const lockName = "sandboxd.lock"

// schemaVersion is stored in user_version; bump it with a migration.
const schemaVersion = 2

var schema = []string{
	`CREATE TABLE IF NOT EXISTS settings (
		name TEXT PRIMARY KEY,
		value TEXT NOT NULL,
		updated_at INTEGER NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS idempotency (
		tenant TEXT NOT NULL,
		key TEXT NOT NULL,
		request_sha256 TEXT NOT NULL,
		exec_id TEXT NOT NULL,
		state TEXT NOT NULL,
		owner TEXT NOT NULL,
		status INTEGER NOT NULL DEFAULT 0,
		body BLOB,
		created_at INTEGER NOT NULL,
		expires_at INTEGER NOT NULL,
		PRIMARY KEY (tenant, key))`,
	`CREATE INDEX IF NOT EXISTS idempotency_expires ON idempotency (expires_at)`,
	`CREATE TABLE IF NOT EXISTS execs (
		id TEXT PRIMARY KEY,
		tenant TEXT NOT NULL,
		key_id TEXT NOT NULL,
		session TEXT NOT NULL,
		state TEXT NOT NULL,
		owner TEXT NOT NULL,
		body BLOB,
		created_at INTEGER NOT NULL,
		updated_at INTEGER NOT NULL,
		expires_at INTEGER NOT NULL)`,
	`CREATE INDEX IF NOT EXISTS execs_expires ON execs (expires_at)`,
	`CREATE TABLE IF NOT EXISTS usage (
		scope TEXT NOT NULL,
		tenant TEXT NOT NULL,
		name TEXT NOT NULL,
		execs INTEGER NOT NULL DEFAULT 0,
		cpu_ms INTEGER NOT NULL DEFAULT 0,
		wall_ms INTEGER NOT NULL DEFAULT 0,
		fetch_bytes INTEGER NOT NULL DEFAULT 0,
		updated_at INTEGER NOT NULL,
		PRIMARY KEY (scope, tenant, name))`,
	`CREATE INDEX IF NOT EXISTS usage_updated ON usage (updated_at)`,
	// Version 2: egress approvals.
	`CREATE TABLE IF NOT EXISTS approvals (
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
		count INTEGER NOT NULL,
		first_seen INTEGER NOT NULL,
		last_seen INTEGER NOT NULL,
		decided_by TEXT NOT NULL DEFAULT '',
		decided_tenant TEXT NOT NULL DEFAULT '',
		decided_at INTEGER NOT NULL DEFAULT 0,
		reason TEXT NOT NULL DEFAULT '',
		expires_at INTEGER NOT NULL DEFAULT 0)`,
	`CREATE INDEX IF NOT EXISTS approvals_host ON approvals (profile, host)`,
	`CREATE INDEX IF NOT EXISTS approvals_seen ON approvals (last_seen)`,
}

// SQLite is the embedded Store: one database file, WAL mode.
//
// Writes use synchronous=NORMAL: a committed transaction is in the WAL file
// before the call returns, so it survives the process being killed at any
// point (SIGKILL, a crash, the OOM killer); only a power loss or kernel
// crash may lose the last transactions. One connection serves every call,
// so writers never meet SQLITE_BUSY inside the process.
type SQLite struct {
	common
	db   *sql.DB
	lock *os.File
}

// OpenSQLite opens (creating if needed) the store in dir, takes the data
// directory's lock and brings the schema up to date. dir "" opens a private
// in-memory database (for tests).
func OpenSQLite(dir string) (*SQLite, error) {
	s := &SQLite{}
	path := ""
	if dir != "" {
		lf, err := LockDataDir(dir)
		if err != nil {
			return nil, err
		}
		s.lock = lf
		path = filepath.Join(dir, fileName)
	}
	db, err := sql.Open("sqlite", sqlitedb.DSN(path, []string{"journal_mode(WAL)", "synchronous(NORMAL)", "busy_timeout(10000)", "foreign_keys(1)"}, true))
	if err != nil {
		s.unlock()
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	s.db = db
	s.common = common{q: sqlQ{db}, perExec: sqlQ{db}}
	if err := s.migrate(); err != nil {
		s.Close()
		return nil, fmt.Errorf("opening the store %s: %w", filepath.Join(dir, fileName), err)
	}
	return s, nil
}

// LockDataDir takes the exclusive lock of a data directory that a serving
// process holds (so that two processes never serve one data directory:
// one Docker instance id, one set of local files); closing the file
// releases it.
func LockDataDir(dir string) (*os.File, error) {
	lf, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the data dir lock: %w", err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		return nil, fmt.Errorf("the data dir %s is in use by another sandboxd process (lock %s held): %w", dir, lockName, err)
	}
	return lf, nil
}

func (s *SQLite) migrate() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return sqlitedb.Migrate(ctx, s.db, schemaVersion, schema)
}

func (s *SQLite) unlock() {
	if s.lock != nil {
		_ = syscall.Flock(int(s.lock.Fd()), syscall.LOCK_UN)
		s.lock.Close()
		s.lock = nil
	}
}

// Close closes the database and releases the data dir lock.
func (s *SQLite) Close() error {
	var err error
	if s.db != nil {
		err = s.db.Close()
	}
	s.unlock()
	return err
}

// ClaimIdempotency implements Store.
func (s *SQLite) ClaimIdempotency(ctx context.Context, rec *IdemRecord) (*IdemRecord, bool, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, false, err
	}
	defer tx.Rollback()
	now := time.Now()
	old, err := scanIdem(tx.QueryRowContext(ctx, `SELECT `+idemCols+` FROM idempotency WHERE tenant = ? AND key = ? AND expires_at > ?`,
		rec.Tenant, rec.Key, ms(now)))
	switch {
	case err == nil:
		return old, false, nil
	case !errors.Is(err, ErrNotFound):
		return nil, false, err
	}
	r := *rec
	r.State = IdemInFlight
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	}
	if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO idempotency (`+idemCols+`) VALUES (?, ?, ?, ?, ?, ?, 0, NULL, ?, ?)`,
		r.Tenant, r.Key, r.RequestSHA256, r.ExecID, r.State, r.Owner, ms(r.CreatedAt), ms(r.ExpiresAt)); err != nil {
		return nil, false, err
	}
	if err := tx.Commit(); err != nil {
		return nil, false, err
	}
	return &r, true, nil
}

// PutExec implements Store.
func (s *SQLite) PutExec(ctx context.Context, r *ExecRecord) error {
	now := time.Now()
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	}
	r.UpdatedAt = now
	_, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO execs (id, tenant, key_id, session, state, owner, body, created_at, updated_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.Tenant, r.KeyID, r.Session, r.State, r.Owner, r.Body, ms(r.CreatedAt), ms(r.UpdatedAt), ms(r.ExpiresAt))
	return err
}

// AddUsage implements Store.
func (s *SQLite) AddUsage(ctx context.Context, deltas ...UsageDelta) error {
	if len(deltas) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	now := ms(time.Now())
	for _, d := range deltas {
		if _, err := tx.ExecContext(ctx, `INSERT INTO usage (scope, tenant, name, execs, cpu_ms, wall_ms, fetch_bytes, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (scope, tenant, name) DO UPDATE SET
				execs = execs + excluded.execs, cpu_ms = cpu_ms + excluded.cpu_ms,
				wall_ms = wall_ms + excluded.wall_ms, fetch_bytes = fetch_bytes + excluded.fetch_bytes,
				updated_at = excluded.updated_at`,
			d.Scope, d.Tenant, d.Name, d.Execs, d.CPUMillis, d.WallMillis, d.FetchBytes, now); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Recover implements Store.
func (s *SQLite) Recover(ctx context.Context, owner string) (RecoverStats, error) {
	var st RecoverStats
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return st, err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE idempotency SET state = ? WHERE state = ? AND owner <> ?`, IdemInterrupted, IdemInFlight, owner)
	if err != nil {
		return st, err
	}
	n, _ := res.RowsAffected()
	st.Idempotency = int(n)
	res, err = tx.ExecContext(ctx, `UPDATE execs SET state = ?, updated_at = ? WHERE state = ? AND owner <> ?`,
		ExecInterrupted, ms(time.Now()), ExecQueued, owner)
	if err != nil {
		return st, err
	}
	n, _ = res.RowsAffected()
	st.Execs = int(n)
	return st, tx.Commit()
}

// Purge implements Store.
func (s *SQLite) Purge(ctx context.Context, now, usageBefore time.Time) (int64, error) {
	return s.purge(ctx, purgeStmts(now, usageBefore))
}

var _ Store = (*SQLite)(nil)
