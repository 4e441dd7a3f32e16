package audit

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
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
	db *sql.DB

	reqs   chan *appendReq
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once
	mu     sync.RWMutex // guards isClosed against Append after Close
	isOver bool

	// head: the last record written (seq and hash), owned by the writer.
	headSeq  int64
	headHash string
}

type appendReq struct {
	r    *Record
	done chan error
}

// maxBatch bounds the records of one group commit.
const maxBatch = 256

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
	s := &SQLite{db: db, reqs: make(chan *appendReq, maxBatch), stop: make(chan struct{}), done: make(chan struct{})}
	if err := s.loadHead(ctx); err != nil {
		db.Close()
		return nil, err
	}
	go s.writer()
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
func (s *SQLite) Append(ctx context.Context, r *Record) error {
	if r.Kind == "" {
		return errors.New("audit: a record needs a kind")
	}
	req := &appendReq{r: r, done: make(chan error, 1)}
	s.mu.RLock()
	if s.isOver {
		s.mu.RUnlock()
		return errClosed
	}
	select {
	case s.reqs <- req:
	case <-ctx.Done():
		s.mu.RUnlock()
		return ctx.Err()
	}
	s.mu.RUnlock()
	// Once queued, the record is written whatever ctx does: wait for it.
	return <-req.done
}

// writer group-commits queued appends.
func (s *SQLite) writer() {
	defer close(s.done)
	for {
		var first *appendReq
		select {
		case first = <-s.reqs:
		case <-s.stop:
			// Close stopped new appends; drain what was queued.
			for {
				select {
				case r := <-s.reqs:
					s.commit([]*appendReq{r})
				default:
					return
				}
			}
		}
		batch := []*appendReq{first}
	more:
		for len(batch) < maxBatch {
			select {
			case r := <-s.reqs:
				batch = append(batch, r)
			default:
				break more
			}
		}
		s.commit(batch)
	}
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "au_" + hex.EncodeToString(b[:])
}

// commit writes a batch in one transaction; every request gets the outcome.
func (s *SQLite) commit(batch []*appendReq) {
	err := s.commitBatch(batch)
	if err != nil {
		// Nothing of the batch is written; the head is re-read so that the
		// next batch chains to what is really on disk.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = s.loadHead(ctx)
		cancel()
	}
	for _, r := range batch {
		r.done <- err
	}
}

func (s *SQLite) commitBatch(batch []*appendReq) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer tx.Rollback()
	ins, err := tx.PrepareContext(ctx, `INSERT INTO records (seq, id, time_ns, kind, tenant, status, exec_profile, egress_profile, session, code_sha256, subject, body, prev_hash, hash)
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
	seq, prev := s.headSeq, s.headHash
	type done struct {
		r          *Record
		seq        int64
		prev, hash string
	}
	var results []done
	for _, req := range batch {
		r := *req.r // the caller's record is filled only after commit
		seq++
		r.Seq, r.PrevHash, r.Hash = seq, prev, ""
		if r.ID == "" {
			r.ID = newID()
		}
		if r.Time.IsZero() {
			r.Time = time.Now().UTC()
		}
		body, err := canonical(&r)
		if err != nil {
			return fmt.Errorf("audit: encoding a record: %w", err)
		}
		h := hashOf(body)
		if _, err := ins.ExecContext(ctx, seq, r.ID, r.Time.UnixNano(), r.Kind, r.Tenant, r.Status, profName(r.ExecProfile), profName(r.EgressProfile),
			r.Session, r.CodeSHA256, r.Subject, body, prev, h); err != nil {
			return fmt.Errorf("audit: writing record %d: %w", seq, err)
		}
		for _, host := range r.Hosts {
			if _, err := insHost.ExecContext(ctx, strings.ToLower(host), seq); err != nil {
				return fmt.Errorf("audit: writing record %d: %w", seq, err)
			}
		}
		if r.SandboxSession != "" && r.SandboxSession != r.Session {
			if _, err := insSession.ExecContext(ctx, r.SandboxSession, seq); err != nil {
				return fmt.Errorf("audit: writing record %d: %w", seq, err)
			}
		}
		results = append(results, done{req.r, seq, prev, h})
		req.r.ID, req.r.Time = r.ID, r.Time
		prev = h
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("audit: committing: %w", err)
	}
	s.headSeq, s.headHash = seq, prev
	for _, d := range results {
		d.r.Seq, d.r.PrevHash, d.r.Hash = d.seq, d.prev, d.hash
	}
	return nil
}

func profName(p *ProfileRef) string {
	if p == nil {
		return ""
	}
	return p.Name
}

// Close stops the writer after the queued appends and closes the database.
func (s *SQLite) Close() error {
	var err error
	s.closed.Do(func() {
		s.mu.Lock()
		s.isOver = true
		s.mu.Unlock()
		close(s.stop)
		<-s.done
		err = s.db.Close()
	})
	return err
}

// Get implements Log.
func (s *SQLite) Get(ctx context.Context, id string) (*Record, error) {
	var body []byte
	var hash string
	err := s.db.QueryRowContext(ctx, `SELECT body, hash FROM records WHERE id = ?`, id).Scan(&body, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("audit record %s is malformed: %w", id, err)
	}
	r.Hash = hash
	return &r, nil
}

// Query implements Log.
func (s *SQLite) Query(ctx context.Context, f Filter) ([]Record, string, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	if limit > MaxLimit {
		return nil, "", fmt.Errorf("limit %d is over the maximum of %d", limit, MaxLimit)
	}
	var where []string
	var args []any
	add := func(cond string, v any) {
		where = append(where, cond)
		args = append(args, v)
	}
	from, seqCol := "records r", "r.seq"
	if f.Host != "" {
		// Walk the host's entries newest first; each joins one record.
		from, seqCol = "record_hosts h JOIN records r ON r.seq = h.seq", "h.seq"
		add("h.host = ?", strings.ToLower(f.Host))
	}
	if f.Tenant != "" {
		add("r.tenant = ?", f.Tenant)
	}
	if f.Kind != "" {
		add("r.kind = ?", f.Kind)
	}
	if f.Status != "" {
		add("r.status = ?", f.Status)
	}
	if f.Profile != "" {
		where = append(where, "(r.exec_profile = ? OR r.egress_profile = ?)")
		args = append(args, f.Profile, f.Profile)
	}
	if f.Session != "" {
		where = append(where, "(r.session = ? OR r.seq IN (SELECT seq FROM record_sessions WHERE session = ?))")
		args = append(args, f.Session, f.Session)
	}
	if f.CodeSHA256 != "" {
		add("r.code_sha256 = ?", strings.ToLower(f.CodeSHA256))
	}
	if f.Subject != "" {
		add("r.subject = ?", f.Subject)
	}
	if !f.Since.IsZero() {
		add("r.time_ns >= ?", f.Since.UnixNano())
	}
	if !f.Until.IsZero() {
		add("r.time_ns < ?", f.Until.UnixNano())
	}
	if f.Cursor != "" {
		c, err := strconv.ParseInt(f.Cursor, 10, 64)
		if err != nil || c <= 0 {
			return nil, "", fmt.Errorf("cursor %q is not one this log gave out", f.Cursor)
		}
		add(seqCol+" < ?", c)
	}
	q := "SELECT r.seq, r.body, r.hash FROM " + from
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY " + seqCol + " DESC LIMIT ?"
	args = append(args, limit+1)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	out := []Record{}
	for rows.Next() {
		var seq int64
		var body []byte
		var hash string
		if err := rows.Scan(&seq, &body, &hash); err != nil {
			return nil, "", err
		}
		var r Record
		if err := json.Unmarshal(body, &r); err != nil {
			return nil, "", fmt.Errorf("audit record %d is malformed: %w", seq, err)
		}
		r.Hash = hash
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = strconv.FormatInt(out[limit-1].Seq, 10)
	}
	return out, next, nil
}

// Report is the outcome of Verify.
type Report struct {
	// Records is how many records were checked.
	Records int64 `json:"records"`
	// HeadSeq and HeadHash name the last record (anchor them elsewhere to
	// detect truncation of the tail).
	HeadSeq  int64  `json:"head_seq"`
	HeadHash string `json:"head_hash"`
	// Anchors is how many anchors were checked (CheckAnchors).
	Anchors int `json:"anchors,omitempty"`
	// OK is false at the first break, which BreakSeq and Problem describe.
	OK       bool   `json:"ok"`
	BreakSeq int64  `json:"break_seq,omitempty"`
	Problem  string `json:"problem,omitempty"`
}

// Verify implements Log: it checks that sequence numbers run 1, 2, 3, ...
// without a gap, that each record names the hash of the one before, that
// each hash is the sha256 of the record's body, and that the indexed
// columns agree with the body.
func (s *SQLite) Verify(ctx context.Context) (*Report, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT seq, id, time_ns, kind, tenant, status, exec_profile, egress_profile, session, code_sha256, subject, body, prev_hash, hash FROM records ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	rep := &Report{OK: true}
	var want int64 = 1
	prev := ""
	fail := func(seq int64, format string, args ...any) {
		rep.OK, rep.BreakSeq, rep.Problem = false, seq, fmt.Sprintf(format, args...)
	}
	for rows.Next() {
		var (
			seq, timeNS                                                   int64
			id, kind, tenant, status, execP, egressP, session, code, subj string
			body                                                          []byte
			prevHash, hash                                                string
		)
		if err := rows.Scan(&seq, &id, &timeNS, &kind, &tenant, &status, &execP, &egressP, &session, &code, &subj, &body, &prevHash, &hash); err != nil {
			return nil, err
		}
		rep.Records++
		switch {
		case seq != want:
			fail(want, "record %d is missing (the next record is %d): deleted", want, seq)
		case prevHash != prev:
			fail(seq, "record %d names %s as the hash before it, but record %d's hash is %s: a record before it was changed, removed or reordered", seq, short(prevHash), seq-1, short(prev))
		case hashOf(body) != hash:
			fail(seq, "record %d's content does not match its hash: changed", seq)
		}
		if !rep.OK {
			return rep, nil
		}
		var r Record
		if err := json.Unmarshal(body, &r); err != nil {
			fail(seq, "record %d's body is not JSON: %v", seq, err)
			return rep, nil
		}
		if r.Seq != seq || r.ID != id || r.Time.UnixNano() != timeNS || r.Kind != kind || r.Tenant != tenant || r.Status != status ||
			profName(r.ExecProfile) != execP || profName(r.EgressProfile) != egressP || r.Session != session || r.CodeSHA256 != code ||
			r.Subject != subj || r.PrevHash != prevHash {
			fail(seq, "record %d's indexed columns disagree with its hashed content: changed", seq)
			return rep, nil
		}
		prev = hash
		want++
		rep.HeadSeq, rep.HeadHash = seq, hash
	}
	return rep, rows.Err()
}

func short(h string) string {
	if h == "" {
		return "(none: the first record)"
	}
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

var _ Log = (*SQLite)(nil)
