// Package pgdb holds what sandboxd's PostgreSQL state shares (the store,
// the audit log and the capture metadata of a fleet): opening a connection
// pool from a postgres:// URL, and versioned schema migrations that are
// safe when several replicas start at once.
package pgdb

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// IsURL reports whether s names a PostgreSQL database (postgres:// or
// postgresql://), as --state takes it.
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// Redacted is the URL with its password replaced, for logs and errors.
func Redacted(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "postgres://…"
	}
	return u.Redacted()
}

// Open connects a pool to dsn (a postgres:// URL; pool settings such as
// pool_max_conns may be given in it) and checks that the server answers.
func Open(ctx context.Context, dsn string, maxConns int32) (*pgxpool.Pool, error) {
	return open(ctx, dsn, maxConns, nil)
}

// OpenRelaxed is Open for writes that may be lost if the database server
// itself crashes (synchronous_commit off: a commit returns before its WAL
// record is flushed, at most a few hundred milliseconds of such commits
// can be lost, never torn). For state whose loss a crash of the database
// makes harmless, such as a budget hold (it would have been released) or
// a rate bucket's refill, it saves a disk flush per write.
func OpenRelaxed(ctx context.Context, dsn string, maxConns int32) (*pgxpool.Pool, error) {
	return open(ctx, dsn, maxConns, map[string]string{"synchronous_commit": "off"})
}

func open(ctx context.Context, dsn string, maxConns int32, params map[string]string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("the PostgreSQL URL %s: %w", Redacted(dsn), err)
	}
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	if maxConns > 0 && !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = maxConns
	}
	cfg.MaxConnIdleTime = 5 * time.Minute
	// A server that goes away is noticed at the next use; the pool dials
	// again then. Dialing is bounded so a request never hangs on it.
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > 5*time.Second {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", Redacted(dsn), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to %s: %w", Redacted(dsn), err)
	}
	return pool, nil
}

// migrateLock is the advisory lock key every replica takes while it
// migrates, so that replicas starting at once migrate one after another.
const migrateLock = 0x73627864 // "sbxd"

// Migrate brings component's tables to len(steps): step i (0-based) takes
// the schema from version i to i+1 and runs in a transaction of its own
// with the version update. A database written by a newer sandboxd (a
// higher version) is refused. Concurrent callers, in one process or
// many, are serialized by a session advisory lock.
func Migrate(ctx context.Context, pool *pgxpool.Pool, component string, steps []string) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrating %s: %w", component, err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(migrateLock)); err != nil {
		return fmt.Errorf("migrating %s: taking the migration lock: %w", component, err)
	}
	defer func() {
		// Unlock on a fresh context: the lock must go even when ctx ended.
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, int64(migrateLock))
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_versions (
		component TEXT PRIMARY KEY,
		version INTEGER NOT NULL,
		updated_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("migrating %s: %w", component, err)
	}
	var v int
	err = conn.QueryRow(ctx, `SELECT version FROM schema_versions WHERE component = $1`, component).Scan(&v)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("migrating %s: reading its version: %w", component, err)
	}
	if v > len(steps) {
		return fmt.Errorf("the %s tables have schema version %d, newer than this sandboxd's %d: upgrade this replica", component, v, len(steps))
	}
	for ; v < len(steps); v++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, steps[v]); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_versions (component, version) VALUES ($1, $2)
				ON CONFLICT (component) DO UPDATE SET version = excluded.version, updated_at = now()`, component, v+1)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrating %s to version %d: %w", component, v+1, err)
		}
	}
	return nil
}

// Unavailable reports whether err means the database could not be
// reached or stopped answering (as opposed to a constraint or a bug):
// callers answer 503 with Retry-After for it.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exception; 57P: operator intervention
		// (admin shutdown, crash shutdown, cannot connect now).
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P")
	}
	return true
}
