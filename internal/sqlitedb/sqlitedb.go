// Package sqlitedb holds what sandboxd's SQLite databases (the store, the
// capture metadata, the audit log) share: how a connection string is
// written for the pure-Go driver, and schema migration by user_version.
package sqlitedb

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
)

// DSN returns the driver's connection string for the database file path
// ("" for a private in-memory database) with the given pragmas, such as
// "journal_mode(WAL)". immediate makes every transaction BEGIN IMMEDIATE
// (take the write lock at once: no upgrade deadlocks between writers).
func DSN(path string, pragmas []string, immediate bool) string {
	dsn := "file::memory:"
	if path != "" {
		dsn = "file:" + (&url.URL{Path: path}).EscapedPath()
	}
	q := url.Values{}
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	if immediate {
		q.Set("_txlock", "immediate")
	}
	return dsn + "?" + q.Encode()
}

// Migrate brings db to schema version: it runs every statement of schema
// (each idempotent: CREATE ... IF NOT EXISTS) in one transaction and
// records the version. A database written by a newer sandboxd is refused.
func Migrate(ctx context.Context, db *sql.DB, version int, schema []string) error {
	var v int
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return err
	}
	if v > version {
		return fmt.Errorf("the database has schema version %d, newer than this sandboxd's %d", v, version)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, stmt := range schema {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%w: %s", err, stmt)
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, version)); err != nil {
		return err
	}
	return tx.Commit()
}
