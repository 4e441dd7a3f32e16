package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/sqlitedb"
)

// FileName is the audit database in the data directory.
const FileName = "audit.db"

// Log is the audit log. The SQLite one (Open) is the embedded default; a
// server-backed log fits the same interface.
type Log interface {
	// Append writes r durably and fills in its Seq, ID, Time, PrevHash and
	// Hash. When it returns nil the record survives any crash.
	Append(ctx context.Context, r *Record) error
	// Query returns records matching f, newest first, and the cursor of
	// the next page ("" at the end).
	Query(ctx context.Context, f Filter) ([]Record, string, error)
	// Get returns the record with id, or ErrNotFound.
	Get(ctx context.Context, id string) (*Record, error)
	// Verify walks the whole chain and reports the first break.
	Verify(ctx context.Context) (*Report, error)
	// Head returns the last record's sequence number and hash, to be kept
	// elsewhere as an Anchor.
	Head(ctx context.Context) (Anchor, error)
	Close() error
}

// ErrNotFound: no record has the id.
var ErrNotFound = errors.New("audit record not found")

// errClosed: the log is closed.
var errClosed = errors.New("the audit log is closed")

// Filter selects records (GET /audit's query). Zero fields match
// everything.
type Filter = api.AuditQuery

// Page sizes.
const (
	defaultLimit = 100
	MaxLimit     = 1000
)

// SQLite is the audit log in one SQLite file (WAL, synchronous=FULL).
// Appends are group-committed by one writer goroutine: concurrent appends
// share a transaction and its fsync, and each returns once it is durable.
type SQLite struct {
	db        *sql.DB
	w         *groupWriter
	closeOnce sync.Once

	// head: the last record written (seq and hash), owned by the writer.
	headSeq  int64
	headHash string
}

// schemaVersion is the audit database's schema version (user_version).
const schemaVersion = 1

var schema = []string{
	`CREATE TABLE IF NOT EXISTS records (
		seq INTEGER PRIMARY KEY,
		id TEXT NOT NULL UNIQUE,
		time_ns INTEGER NOT NULL,
		kind TEXT NOT NULL,
		tenant TEXT NOT NULL,
		status TEXT NOT NULL,
		exec_profile TEXT NOT NULL,
		egress_profile TEXT NOT NULL,
		session TEXT NOT NULL,
		code_sha256 TEXT NOT NULL,
		subject TEXT NOT NULL,
		body BLOB NOT NULL,
		prev_hash TEXT NOT NULL,
		hash TEXT NOT NULL
	)`,
	`CREATE INDEX IF NOT EXISTS records_tenant ON records (tenant, seq)`,
	`CREATE INDEX IF NOT EXISTS records_kind ON records (kind, seq)`,
	`CREATE INDEX IF NOT EXISTS records_time ON records (time_ns)`,
	// Full (not partial) indexes: a partial index is not used for a
	// comparison with a bound parameter, which cannot be shown non-empty.
	`DROP INDEX IF EXISTS records_code`,
	`DROP INDEX IF EXISTS records_session`,
	`DROP INDEX IF EXISTS records_subject`,
	`CREATE INDEX IF NOT EXISTS records_code_seq ON records (code_sha256, seq)`,
	`CREATE INDEX IF NOT EXISTS records_session_seq ON records (session, seq)`,
	`CREATE INDEX IF NOT EXISTS records_subject_seq ON records (subject, seq)`,
	`CREATE INDEX IF NOT EXISTS records_status_seq ON records (status, seq)`,
	// The sandbox sessions of records whose session is the agent's.
	`CREATE TABLE IF NOT EXISTS record_sessions (
		session TEXT NOT NULL,
		seq INTEGER NOT NULL,
		PRIMARY KEY (session, seq)
	) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS record_hosts (
		host TEXT NOT NULL,
		seq INTEGER NOT NULL,
		PRIMARY KEY (host, seq)
	) WITHOUT ROWID`,
}

// Open opens (creating it) the audit log in dir ("" for a private
// in-memory log, for tests).
func Open(dir string) (*SQLite, error) {
	path := ""
	if dir != "" {
		path = filepath.Join(dir, FileName)
	}
	db, err := sql.Open("sqlite", sqlitedb.DSN(path, []string{"journal_mode(WAL)", "synchronous(FULL)", "busy_timeout(10000)"}, true))
	if err != nil {
		return nil, err
	}
	if dir == "" {
		db.SetMaxOpenConns(1) // one in-memory database
	} else {
		db.SetMaxOpenConns(4)
	}
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sqlitedb.Migrate(ctx, db, schemaVersion, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening the audit log: %w", err)
	}
	s := &SQLite{db: db}
	if err := s.loadHead(ctx); err != nil {
		db.Close()
		return nil, err
	}
	s.w = newGroupWriter(s.commit)
	return s, nil
}

func (s *SQLite) loadHead(ctx context.Context) error {
	err := s.db.QueryRowContext(ctx, `SELECT seq, hash FROM records ORDER BY seq DESC LIMIT 1`).Scan(&s.headSeq, &s.headHash)
	if errors.Is(err, sql.ErrNoRows) {
		s.headSeq, s.headHash = 0, ""
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the audit log's last record: %w", err)
	}
	return nil
}

// Append implements Log.
func (s *SQLite) Append(ctx context.Context, r *Record) error { return s.w.Append(ctx, r) }

// commit writes a batch in one transaction.
func (s *SQLite) commit(batch []*appendReq) error {
	err := s.commitBatch(batch)
	if err != nil {
		// Nothing of the batch is written; the head is re-read so that the
		// next batch chains to what is really on disk.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = s.loadHead(ctx)
		cancel()
	}
	return err
}

func (s *SQLite) commitBatch(batch []*appendReq) error {
	ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
	defer cancel()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer tx.Rollback()
	ins, err := tx.PrepareContext(ctx, `INSERT INTO records (`+storedCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer ins.Close()
	insHost, err := tx.PrepareContext(ctx, `INSERT OR IGNORE INTO record_hosts (host, seq) VALUES (?, ?)`)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer insHost.Close()
	insSession, err := tx.PrepareContext(ctx, `INSERT OR IGNORE INTO record_sessions (session, seq) VALUES (?, ?)`)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer insSession.Close()
	rows, err := chainBatch(batch, s.headSeq, s.headHash, "")
	if err != nil {
		return err
	}
	for _, c := range rows {
		r := &c.r
		if _, err := ins.ExecContext(ctx, r.Seq, r.ID, r.Time.UnixNano(), r.Kind, r.Tenant, r.Status, profName(r.ExecProfile), profName(r.EgressProfile),
			r.Session, r.CodeSHA256, r.Subject, c.body, r.PrevHash, r.Hash); err != nil {
			return fmt.Errorf("audit: writing record %d: %w", r.Seq, err)
		}
		for _, host := range r.Hosts {
			if _, err := insHost.ExecContext(ctx, strings.ToLower(host), r.Seq); err != nil {
				return fmt.Errorf("audit: writing record %d: %w", r.Seq, err)
			}
		}
		if r.SandboxSession != "" && r.SandboxSession != r.Session {
			if _, err := insSession.ExecContext(ctx, r.SandboxSession, r.Seq); err != nil {
				return fmt.Errorf("audit: writing record %d: %w", r.Seq, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("audit: committing: %w", err)
	}
	last := rows[len(rows)-1].r
	s.headSeq, s.headHash = last.Seq, last.Hash
	committed(rows)
	return nil
}

// Close stops the writer after the queued appends and closes the database.
func (s *SQLite) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.w.Close()
		err = s.db.Close()
	})
	return err
}

// Get implements Log.
func (s *SQLite) Get(ctx context.Context, id string) (*Record, error) {
	return getRecord(s.db.QueryRowContext(ctx, `SELECT body, hash FROM records WHERE id = ?`, id), id)
}

// Query implements Log.
func (s *SQLite) Query(ctx context.Context, f Filter) ([]Record, string, error) {
	q, err := buildQuery(f, "records", "record_hosts", "record_sessions", func(int) string { return "?" })
	if err != nil {
		return nil, "", err
	}
	rows, err := s.db.QueryContext(ctx, q.sql, q.args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	return page(rows, q.limit)
}

// Verify implements Log: it checks that sequence numbers run 1, 2, 3, ...
// without a gap, that each record names the hash of the one before, that
// each hash is the sha256 of the record's body, and that the indexed
// columns agree with the body.
func (s *SQLite) Verify(ctx context.Context) (*Report, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+storedCols+` FROM records ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return verifyRows(rows)
}

var _ Log = (*SQLite)(nil)
