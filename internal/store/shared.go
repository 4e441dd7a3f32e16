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
// pgQ on pgx (PostgreSQL), which numbers the placeholders. Statements
// that differ (claiming a key, upserts, recovery, the schema) stay with
// each store.

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

func completeIdempotency(ctx context.Context, q querier, tenant, key string, status int, body []byte) error {
	n, err := q.exec(ctx, `UPDATE idempotency SET state = ?, status = ?, body = ? WHERE tenant = ? AND key = ? AND state = ?`,
		IdemDone, status, body, tenant, key, IdemInFlight)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("completing idempotency key of tenant %s: %w (no in-flight record)", tenant, ErrNotFound)
	}
	return nil
}

func releaseIdempotency(ctx context.Context, q querier, tenant, key, owner string) error {
	_, err := q.exec(ctx, `DELETE FROM idempotency WHERE tenant = ? AND key = ? AND state = ? AND owner = ?`,
		tenant, key, IdemInFlight, owner)
	return err
}

func getIdempotency(ctx context.Context, q querier, tenant, key string) (*IdemRecord, error) {
	return scanIdem(q.queryRow(ctx, `SELECT `+idemCols+` FROM idempotency WHERE tenant = ? AND key = ? AND expires_at > ?`,
		tenant, key, ms(time.Now())))
}

func getExec(ctx context.Context, q querier, id string) (*ExecRecord, error) {
	r := &ExecRecord{}
	var created, updated, expires int64
	err := q.queryRow(ctx, `SELECT id, tenant, key_id, session, state, owner, body, created_at, updated_at, expires_at
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

func usage(ctx context.Context, q querier, scope, tenant, name string) (Usage, error) {
	var u Usage
	err := q.queryRow(ctx, `SELECT execs, cpu_ms, wall_ms, fetch_bytes FROM usage WHERE scope = ? AND tenant = ? AND name = ?`,
		scope, tenant, name).Scan(&u.Execs, &u.CPUMillis, &u.WallMillis, &u.FetchBytes)
	if errors.Is(err, sql.ErrNoRows) {
		return Usage{}, nil
	}
	return u, err
}

func setting(ctx context.Context, q querier, name string) (string, bool, error) {
	var v string
	err := q.queryRow(ctx, `SELECT value FROM settings WHERE name = ?`, name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return v, true, nil
}

func setSetting(ctx context.Context, q querier, name, value string) error {
	_, err := q.exec(ctx, `INSERT INTO settings (name, value, updated_at) VALUES (?, ?, ?)
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
func purge(ctx context.Context, q querier, stmts []purgeStmt) (int64, error) {
	var total int64
	for _, st := range stmts {
		n, err := q.exec(ctx, st.sql, st.arg)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}
