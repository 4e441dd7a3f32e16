package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// What the SQLite and the PostgreSQL stores share: the statements their
// dialects write alike, written once with ? placeholders, and the code
// around them, run through a querier: sqlQ on database/sql (SQLite),
// pgQ on pgx (PostgreSQL), which numbers the placeholders. Both stores
// embed common, the Store methods made of such statements alone; what
// differs (claiming a key, upserts, recovery, transactions and locks, the
// schema) stays with each store.

// common implements the Store methods both stores run alike.
type common struct {
	q querier
	// perExec runs the writes of idempotency keys, which a fleet commits
	// without waiting for the WAL flush (see Postgres.relaxed); q in
	// SQLite.
	perExec querier
}

// querier runs one statement on a database or in a transaction.
type querier interface {
	// exec runs a statement and returns how many rows it changed.
	exec(ctx context.Context, query string, args ...any) (int64, error)
	queryRow(ctx context.Context, query string, args ...any) row
	// each calls fn with each row the query returns.
	each(ctx context.Context, query string, args []any, fn func(row) error) error
}

// row is a result row to scan. A row with no result scans as
// sql.ErrNoRows (pgx.ErrNoRows is sql.ErrNoRows to errors.Is).
type row interface{ Scan(dest ...any) error }

// sqlQ runs statements on a *sql.DB or a *sql.Tx.
type sqlQ struct {
	db interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	}
}

func (q sqlQ) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return n, nil
}

func (q sqlQ) queryRow(ctx context.Context, query string, args ...any) row {
	return q.db.QueryRowContext(ctx, query, args...)
}

func (q sqlQ) each(ctx context.Context, query string, args []any, fn func(row) error) error {
	rows, err := q.db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return eachRow(rows, fn)
}

// pgQ runs statements on a pool or in a transaction of pgx, with the ?
// placeholders numbered ($1, $2, ...; ?N is $N).
type pgQ struct {
	db interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	}
}

func (q pgQ) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := q.db.Exec(ctx, numbered(query), args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (q pgQ) queryRow(ctx context.Context, query string, args ...any) row {
	return q.db.QueryRow(ctx, numbered(query), args...)
}

func (q pgQ) each(ctx context.Context, query string, args []any, fn func(row) error) error {
	rows, err := q.db.Query(ctx, numbered(query), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return eachRow(rows, fn)
}

// eachRow calls fn with each of rows (database/sql's or pgx's).
func eachRow(rows interface {
	row
	Next() bool
	Err() error
}, fn func(row) error) error {
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// numbered rewrites the ? placeholders of query as PostgreSQL's: the
// n-th bare ? is $n, ?N is $N. The statements written for both stores
// have no ? in a literal.
func numbered(query string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] != '?' {
			b.WriteByte(query[i])
			continue
		}
		b.WriteByte('$')
		if i+1 < len(query) && query[i+1] >= '0' && query[i+1] <= '9' {
			continue // ?N: the digits follow
		}
		n++
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

const idemCols = `tenant, key, request_sha256, exec_id, state, owner, status, body, created_at, expires_at`

func scanIdem(r row) (*IdemRecord, error) {
	rec := &IdemRecord{}
	var created, expires int64
	if err := r.Scan(&rec.Tenant, &rec.Key, &rec.RequestSHA256, &rec.ExecID, &rec.State, &rec.Owner, &rec.Status, &rec.Body, &created, &expires); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, err
	}
	rec.CreatedAt, rec.ExpiresAt = fromMS(created), fromMS(expires)
	return rec, nil
}

// CompleteIdempotency implements Store.
func (c common) CompleteIdempotency(ctx context.Context, tenant, key string, status int, body []byte) error {
	n, err := c.perExec.exec(ctx, `UPDATE idempotency SET state = ?, status = ?, body = ? WHERE tenant = ? AND key = ? AND state = ?`,
		IdemDone, status, body, tenant, key, IdemInFlight)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("completing idempotency key of tenant %s: %w (no in-flight record)", tenant, ErrNotFound)
	}
	return nil
}

// ReleaseIdempotency implements Store.
func (c common) ReleaseIdempotency(ctx context.Context, tenant, key, owner string) error {
	_, err := c.perExec.exec(ctx, `DELETE FROM idempotency WHERE tenant = ? AND key = ? AND state = ? AND owner = ?`,
		tenant, key, IdemInFlight, owner)
	return err
}

// GetIdempotency implements Store.
func (c common) GetIdempotency(ctx context.Context, tenant, key string) (*IdemRecord, error) {
	return scanIdem(c.q.queryRow(ctx, `SELECT `+idemCols+` FROM idempotency WHERE tenant = ? AND key = ? AND expires_at > ?`,
		tenant, key, ms(time.Now())))
}

// GetExec implements Store.
func (c common) GetExec(ctx context.Context, id string) (*ExecRecord, error) {
	r := &ExecRecord{}
	var created, updated, expires int64
	err := c.q.queryRow(ctx, `SELECT id, tenant, key_id, session, state, owner, body, created_at, updated_at, expires_at
		FROM execs WHERE id = ? AND expires_at > ?`, id, ms(time.Now())).
		Scan(&r.ID, &r.Tenant, &r.KeyID, &r.Session, &r.State, &r.Owner, &r.Body, &created, &updated, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	r.CreatedAt, r.UpdatedAt, r.ExpiresAt = fromMS(created), fromMS(updated), fromMS(expires)
	return r, nil
}

// Usage implements Store.
func (c common) Usage(ctx context.Context, scope, tenant, name string) (Usage, error) {
	var u Usage
	err := c.q.queryRow(ctx, `SELECT execs, cpu_ms, wall_ms, fetch_bytes FROM usage WHERE scope = ? AND tenant = ? AND name = ?`,
		scope, tenant, name).Scan(&u.Execs, &u.CPUMillis, &u.WallMillis, &u.FetchBytes)
	if errors.Is(err, sql.ErrNoRows) {
		return Usage{}, nil
	}
	return u, err
}

// Setting implements Store.
func (c common) Setting(ctx context.Context, name string) (string, bool, error) {
	var v string
	err := c.q.queryRow(ctx, `SELECT value FROM settings WHERE name = ?`, name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return v, true, nil
}

// SetSetting implements Store.
func (c common) SetSetting(ctx context.Context, name, value string) error {
	_, err := c.q.exec(ctx, `INSERT INTO settings (name, value, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`, name, value, ms(time.Now()))
	return err
}

// purgeStmt is one statement of Purge, with its one argument.
type purgeStmt struct {
	sql string
	arg int64
}

// purgeStmts are what both stores' Purge deletes.
func purgeStmts(now, usageBefore time.Time) []purgeStmt {
	return []purgeStmt{
		{`DELETE FROM idempotency WHERE expires_at <= ?`, ms(now)},
		{`DELETE FROM execs WHERE expires_at <= ?`, ms(now)},
		{`DELETE FROM usage WHERE updated_at < ?`, ms(usageBefore)},
		{`DELETE FROM approvals WHERE (state = 'approved' AND expires_at <= ?1) OR (state = 'pending' AND last_seen <= ?1)`, ms(now.Add(-approvalRetention))},
	}
}

// purge runs stmts and returns how many rows they deleted.
func (c common) purge(ctx context.Context, stmts []purgeStmt) (int64, error) {
	var total int64
	for _, st := range stmts {
		n, err := c.q.exec(ctx, st.sql, st.arg)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}
