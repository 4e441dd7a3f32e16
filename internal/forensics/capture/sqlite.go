package capture

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // pure-Go SQLite driver, registered as "sqlite"

	"github.com/sandboxd/sandboxd/internal/sqlitedb"
)

// SQLite is the capture store: metadata and small bodies (inline parts)
// in an SQLite database, larger bodies in content-addressed blob files.
//
// On-disk layout of the directory given to Open (mode 0700):
//
//	captures.db (-wal, -shm)  the metadata: captures (one row each, the
//	                          tombstone of an erased one), parts (name,
//	                          type, size, sha256, and either a blob
//	                          address or the inline data), blobs
//	                          (address, reference count), tenant_holds,
//	                          settings (schema and encryption mode)
//	captures.lock             the blob lock (see blobLock); always empty
//	blobs/00 .. blobs/ff      blob files, blobs/ab/cdef... for the address
//	                          abcdef... (64 hex digits); a shard directory
//	                          is made with its first blob
//	blobs/tmp                 blob writes in progress (removed at Open)
//
// A blob's address is the sha256 of the content, or HMAC-SHA256 of it
// under a key derived from the key file when encryption is on; captures
// with equal parts share one blob, counted in blobs.refs. A blob file is
// the content compressed with DEFLATE (when that makes it smaller) and,
// with encryption, sealed with AES-256-GCM under a random nonce (see
// encodeBlob).
//
// Inline parts. A part of at most inlineMax bytes (most of an exec's) is
// not a blob: its content, in the blob file format (deflated when that is
// smaller, sealed with encryption, the seal bound to the capture id and
// the part's index), is the parts.data column of its row, written in the
// capture's transaction. It is not shared, has no blobs row and no file,
// and is never a blob reference: GC and the reference counts do not see
// it. So a Put whose parts are all inline writes no file and takes one
// fsync (the commit's) instead of two or more per new part.
//
// Durability and crash safety. The database runs in WAL mode with
// synchronous=FULL: a commit has reached the disk when it returns. Put
// writes each new blob to a temporary file, syncs it, renames it to its
// address and syncs its shard directory (and blobs, for a new shard), all
// before the transaction that references it commits: a committed capture
// never names a blob that is not durably on disk, and a Put interrupted
// at any point leaves no capture (at most an orphan blob or a temporary
// file); inline data commits with its row. Removing content (Erase,
// Delete, Sweep) commits first (references dropped, rows whose count
// reaches 0 deleted, inline data cleared) and removes the files
// afterwards, each only after checking under the exclusive blob lock that
// no row references it: a crash can leave an orphan, never delete a
// referenced blob. GC removes orphans and temporary files.
//
// Removed content in the database. Every connection runs with
// secure_delete, so a cleared inline value or Meta, or a deleted row, is
// overwritten with zeros in its page (and freed overflow pages are
// zeroed); after the commit, Erase, Delete and Sweep checkpoint the WAL,
// which still holds the pages as they were, into the database and
// truncate it (wipeLog), and GC does it again (after a crash, or when a
// checkpoint was kept busy). Then neither captures.db nor its WAL holds
// the bytes, and no VACUUM is needed.
//
// Encryption at rest (Options.KeyFile). Blob files, inline data and the
// Meta column (URLs, which may carry tokens) are sealed with AES-256-GCM;
// blob addresses are keyed HMACs, so the disk neither shows nor confirms
// a content. What stays in clear in captures.db: ids, tenants, key ids,
// request ids, kinds, times, part names, types and sizes, holds and
// erasures, and each part's plain sha256 (which the audit log quotes too,
// on the same disk): someone holding the disk can confirm a guess of a
// part's exact content through that digest, but cannot read any content.
// One key serves the whole store: erasing a capture removes its blobs and
// inline data but is not a cryptographic erasure (a copy of the disk
// taken earlier, or blocks the file system has not reused yet, still hold
// the sealed content).
type SQLite struct {
	dir  string
	wdb  *sql.DB // one connection, BEGIN IMMEDIATE: all writes
	rdb  *sql.DB // readers (WAL lets them run beside the writer)
	keys *keys   // nil: no encryption
	log  *slog.Logger
	mu   sync.RWMutex // in-process side of the blob lock
	// shards holds the shard directories known to be durable.
	shards sync.Map
	// noSync (tests only) skips every fsync: fast, not durable.
	noSync bool
	// inlineMax is the largest part stored inline (-1: none).
	inlineMax int
}

// Options configure Open.
type Options struct {
	// KeyFile names the encryption key file (one line: 32 random bytes in
	// hex or base64; no access for group and others). "" stores captures
	// unencrypted. A store keeps the mode it was first written in: Open
	// refuses a store holding captures with another key, or none.
	KeyFile string
	// Log receives notes; nil discards them.
	Log *slog.Logger

	// OrphanGrace (Postgres only) is how old an object that no capture
	// names must be before GC deletes it (see Postgres); 0 is
	// DefaultOrphanGrace.
	OrphanGrace time.Duration

	noSync bool // tests only: no fsync, synchronous=OFF
	// durable (tests only): the tests' openT keeps fsync on.
	durable bool
	// inlineMax (tests only): 0 is the default inlineMax, < 0 stores every
	// part as a blob.
	inlineMax int
}

const (
	// dbName is the metadata database's name in the capture directory.
	dbName   = "captures.db"
	lockFile = "captures.lock"
	// schemaVersion 2 added parts.data (inline parts); a version 1
	// database is migrated by Open (see addInlineColumn), and a sandboxd
	// of version 1 refuses a version 2 database rather than misreading
	// its inline parts as erased.
	schemaVersion = 2
	busyTimeoutMS = 10000
)

// inlineMax is the size up to which a part is stored inline, in the
// parts.data column inside the capture's own transaction, instead of as a
// blob file. A blob file costs the same whatever its size: a file create,
// a write, an fsync of the file and one of its shard directory (about 2 ms
// on a disk where fsync takes 1 ms, the syncs of one Put overlapping), a
// 4 KiB block and an inode; 8 KiB more in the WAL rides on the commit's
// one fsync and costs microseconds. 8 KiB covers the parts of a typical
// exec (code, stdin, stdout, stderr and small files of a few KiB) and
// the headers of a fetch; an encoded inline value is then at most three
// database pages (the row on its leaf page and an overflow chain of two),
// which keeps the parts table compact, its rows cheap to rewrite on
// erasure and the WAL small. Larger contents (fetched pages, data files)
// stay blob files: they are shared between captures (inline parts are
// not: each capture holds its own copy) and would bloat the database.
const inlineMax = 8 << 10

// partsDataCheck keeps a part either inline (data) or in a blob, never
// both; neither is an erased part (or one of a capture erased or deleted).
const partsDataCheck = `CHECK (data IS NULL OR blob IS NULL)`

var schema = []string{
	`CREATE TABLE IF NOT EXISTS settings (
		name TEXT PRIMARY KEY,
		value TEXT NOT NULL)`,
	// Times are Unix nanoseconds; 0 is none.
	`CREATE TABLE IF NOT EXISTS captures (
		id TEXT PRIMARY KEY,
		kind TEXT NOT NULL,
		tenant TEXT NOT NULL,
		key_id TEXT NOT NULL,
		request_id TEXT NOT NULL,
		created_at INTEGER NOT NULL,
		retention INTEGER NOT NULL,
		expires_at INTEGER NOT NULL,
		meta BLOB,
		state TEXT NOT NULL CHECK (state IN ('live', 'erased')),
		erased_at INTEGER NOT NULL DEFAULT 0,
		erased_by TEXT NOT NULL DEFAULT '',
		erase_reason TEXT NOT NULL DEFAULT '',
		held INTEGER NOT NULL DEFAULT 0,
		hold_at INTEGER NOT NULL DEFAULT 0,
		hold_by TEXT NOT NULL DEFAULT '',
		hold_reason TEXT NOT NULL DEFAULT '')`,
	`CREATE INDEX IF NOT EXISTS captures_created ON captures (created_at, id)`,
	`CREATE INDEX IF NOT EXISTS captures_tenant ON captures (tenant, created_at, id)`,
	`CREATE INDEX IF NOT EXISTS captures_expires ON captures (expires_at) WHERE expires_at > 0`,
	`CREATE TABLE IF NOT EXISTS parts (
		capture_id TEXT NOT NULL REFERENCES captures (id) ON DELETE CASCADE,
		idx INTEGER NOT NULL,
		name TEXT NOT NULL,
		content_type TEXT NOT NULL,
		size INTEGER NOT NULL,
		sha256 TEXT NOT NULL,
		blob TEXT,
		data BLOB ` + partsDataCheck + `,
		PRIMARY KEY (capture_id, idx),
		UNIQUE (capture_id, name))`,
	`CREATE INDEX IF NOT EXISTS parts_blob ON parts (blob) WHERE blob IS NOT NULL`,
	`CREATE TABLE IF NOT EXISTS blobs (
		addr TEXT PRIMARY KEY,
		refs INTEGER NOT NULL CHECK (refs >= 0),
		created_at INTEGER NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS tenant_holds (
		tenant TEXT PRIMARY KEY,
		at INTEGER NOT NULL,
		by TEXT NOT NULL,
		reason TEXT NOT NULL)`,
}

// Open opens (creating it, mode 0700) the capture store in dir: the
// database, the blob directories, the key when opts.KeyFile is set. It
// removes temporary files left by a crash and imports captures left in
// the layout of the former file-system store.
func Open(dir string, opts Options) (*SQLite, error) {
	s := &SQLite{dir: dir, log: opts.Log, noSync: opts.noSync, inlineMax: inlineMax}
	if opts.inlineMax != 0 {
		s.inlineMax = max(opts.inlineMax, -1)
	}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.KeyFile != "" {
		k, err := loadKeyFile(opts.KeyFile)
		if err != nil {
			return nil, err
		}
		s.keys = k
	}
	if err := s.makeDirs(); err != nil {
		return nil, fmt.Errorf("creating the capture directory: %w", err)
	}
	syncPragma := "synchronous(FULL)"
	if s.noSync {
		syncPragma = "synchronous(OFF)"
	}
	pragmas := []string{"busy_timeout(" + strconv.Itoa(busyTimeoutMS) + ")", "journal_mode(WAL)", syncPragma, "foreign_keys(1)", "secure_delete(1)"}
	path := filepath.Join(dir, dbName)
	var err error
	if s.wdb, err = sql.Open("sqlite", sqlitedb.DSN(path, pragmas, true)); err != nil {
		return nil, err
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	s.wdb.SetConnMaxIdleTime(0)
	if err := s.migrate(); err != nil {
		s.Close()
		return nil, fmt.Errorf("opening the capture database %s: %w", filepath.Join(dir, dbName), err)
	}
	if s.rdb, err = sql.Open("sqlite", sqlitedb.DSN(path, pragmas, false)); err != nil {
		s.Close()
		return nil, err
	}
	s.rdb.SetMaxOpenConns(8)
	s.rdb.SetMaxIdleConns(8)
	if err := s.checkKey(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.removeTemps(); err != nil {
		s.Close()
		return nil, fmt.Errorf("removing temporary blob files: %w", err)
	}
	return s, nil
}

func (s *SQLite) makeDirs() error {
	if err := os.MkdirAll(filepath.Join(s.dir, blobDir, tmpDir), 0o700); err != nil {
		return err
	}
	lf, err := os.OpenFile(filepath.Join(s.dir, lockFile), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	lf.Close()
	// Shard directories (blobs/ab) are made by the first blob written to
	// each; those that exist are durable once blobs is synced.
	entries, err := os.ReadDir(filepath.Join(s.dir, blobDir))
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() && len(e.Name()) == 2 && validAddr(e.Name()+strings.Repeat("0", 62)) {
			s.shards.Store(e.Name(), true)
		}
	}
	if err := s.syncDir(filepath.Join(s.dir, blobDir)); err != nil {
		return err
	}
	return s.syncDir(s.dir)
}

func (s *SQLite) migrate() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.addInlineColumn(ctx); err != nil {
		return err
	}
	return sqlitedb.Migrate(ctx, s.wdb, schemaVersion, schema)
}

// addInlineColumn migrates a database of schema version 1: it adds
// parts.data, which CREATE TABLE IF NOT EXISTS cannot add to an existing
// table. Its own transaction (BEGIN IMMEDIATE) orders it with another
// process opening the store; the check makes it idempotent, so a crash
// before Migrate records version 2 only repeats the check. Existing parts
// keep their blobs and read as before. A database newer than this
// sandboxd is left to Migrate to refuse.
func (s *SQLite) addInlineColumn(ctx context.Context) error {
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var version, table, column int
	if err := tx.QueryRowContext(ctx, `SELECT (SELECT user_version FROM pragma_user_version),
		(SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'parts'),
		(SELECT count(*) FROM pragma_table_info('parts') WHERE name = 'data')`).Scan(&version, &table, &column); err != nil {
		return err
	}
	if version > schemaVersion || table == 0 || column != 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `ALTER TABLE parts ADD COLUMN data BLOB `+partsDataCheck); err != nil {
		return fmt.Errorf("adding parts.data: %w", err)
	}
	return tx.Commit()
}

// checkKey records the store's encryption mode on first use and refuses a
// key (or its absence) that does not match the mode of stored content.
func (s *SQLite) checkKey() error {
	cur := "none"
	if s.keys != nil {
		cur = "aes-256-gcm/" + s.keys.fingerprint
	}
	ctx := context.Background()
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var stored string
	err = tx.QueryRowContext(ctx, `SELECT value FROM settings WHERE name = 'encryption'`).Scan(&stored)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if stored == cur {
		return nil
	}
	if stored != "" {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM captures) + (SELECT count(*) FROM blobs)`).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return keyMismatch(filepath.Join(s.dir, dbName), stored, s.keys)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO settings (name, value) VALUES ('encryption', ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`, cur); err != nil {
		return err
	}
	return tx.Commit()
}

// Dir returns the directory.
func (s *SQLite) Dir() string { return s.dir }

// Encrypted reports whether the store was opened with a key.
func (s *SQLite) Encrypted() bool { return s.keys != nil }

// Close closes the database.
func (s *SQLite) Close() error {
	var errs []error
	for _, db := range []*sql.DB{s.rdb, s.wdb} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	return errors.Join(errs...)
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v).UTC()
}

// Put implements Store. A capture of a held tenant is held from the start
// (the tenant hold covers future captures); c.Hold, c.TenantHold and
// c.Erased are not stored.
func (s *SQLite) Put(ctx context.Context, c *Capture) error {
	inline, meta, err := prepare(ctx, c, s.keys, s.inlineMax)
	if err != nil {
		return err
	}
	// A part is either inline (data, sealed and bound to its row) or a
	// blob (addrs[i], its file written below).
	addrs := make([]string, len(c.Parts))
	blobs := false
	for i, p := range c.Parts {
		if inline[i] == nil {
			addrs[i] = s.keys.address(p.Data, p.SHA256)
			blobs = true
		}
	}
	if blobs {
		unlock, err := s.blobLock(false)
		if err != nil {
			return err
		}
		defer unlock()
		if err := s.writeBlobs(c, addrs); err != nil {
			return fmt.Errorf("storing capture %s: %w", c.ID, err)
		}
	}
	if err := hook("blobs-synced"); err != nil {
		return err
	}
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("storing capture %s: %w", c.ID, err)
	}
	defer tx.Rollback()
	var exists int
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM captures WHERE id = ?)`, c.ID).Scan(&exists); err != nil {
		return fmt.Errorf("storing capture %s: %w", c.ID, err)
	}
	if exists != 0 {
		return fmt.Errorf("storing capture %s: %w", c.ID, errExists)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO captures (id, kind, tenant, key_id, request_id, created_at, retention, expires_at, meta, state)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'live')`,
		c.ID, c.Kind, c.Tenant, c.KeyID, c.RequestID, nanos(c.CreatedAt), int64(c.Retention), nanos(c.ExpiresAt), meta); err != nil {
		return fmt.Errorf("storing capture %s: %w", c.ID, err)
	}
	now := time.Now().UnixNano()
	for i, p := range c.Parts {
		if inline[i] != nil {
			if _, err := tx.ExecContext(ctx, `INSERT INTO parts (capture_id, idx, name, content_type, size, sha256, data) VALUES (?, ?, ?, ?, ?, ?, ?)`,
				c.ID, i, p.Name, p.ContentType, p.Size, p.SHA256, inline[i]); err != nil {
				return fmt.Errorf("storing capture %s: %w", c.ID, err)
			}
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO blobs (addr, refs, created_at) VALUES (?, 1, ?)
			ON CONFLICT (addr) DO UPDATE SET refs = refs + 1`, addrs[i], now); err != nil {
			return fmt.Errorf("storing capture %s: %w", c.ID, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO parts (capture_id, idx, name, content_type, size, sha256, blob) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			c.ID, i, p.Name, p.ContentType, p.Size, p.SHA256, addrs[i]); err != nil {
			return fmt.Errorf("storing capture %s: %w", c.ID, err)
		}
	}
	if err := hook("before-commit"); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("storing capture %s: %w", c.ID, err)
	}
	return nil
}

// writeBlobs makes sure each blob part's blob is on disk, durably (parts
// whose addrs[i] is "" are inline): a blob file that exists and decodes to
// the part is shared, any other is (re)written.
// Each blob to write is encoded, written, synced, renamed and its shard
// directory synced in a goroutine of its own, so that the syncs overlap.
// The caller holds the blob lock shared.
func (s *SQLite) writeBlobs(c *Capture, addrs []string) error {
	type job struct {
		addr string
		data []byte
	}
	var jobs []job
	seen := map[string]bool{}
	for i, p := range c.Parts {
		a := addrs[i]
		if a == "" || seen[a] {
			continue
		}
		seen[a] = true
		if _, err := s.readBlob(a, p.Size, p.SHA256); err == nil {
			continue
		}
		jobs = append(jobs, job{a, p.Data})
	}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			content, err := s.keys.encodeBlob(j.data, j.addr)
			if err == nil {
				err = s.writeBlob(j.addr, content)
			}
			if err == nil {
				err = s.syncDir(s.shardDir(j.addr))
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// capFrom is the FROM clause of capCols.
const capFrom = ` FROM captures c LEFT JOIN tenant_holds h ON h.tenant = c.tenant`

func (s *SQLite) scanCapture(row interface{ Scan(...any) error }) (*Capture, error) {
	var r captureRow
	if err := row.Scan(r.dest()...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, err
	}
	return r.capture(s.keys)
}

// partRow is a part as stored: its blob address, or its inline value
// (read only when asked for), or neither once erased.
type partRow struct {
	Part
	idx    int
	blob   string
	inline bool
	data   []byte
}

// queryParts reads capture id's parts; withData reads the inline values
// too.
func queryParts(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, id string, withData bool) ([]partRow, error) {
	cols := `idx, name, content_type, size, sha256, blob, data IS NOT NULL, NULL`
	if withData {
		cols = `idx, name, content_type, size, sha256, blob, data IS NOT NULL, data`
	}
	rows, err := q.QueryContext(ctx, `SELECT `+cols+` FROM parts WHERE capture_id = ? ORDER BY idx`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []partRow
	for rows.Next() {
		var p partRow
		var blob sql.NullString
		if err := rows.Scan(&p.idx, &p.Name, &p.ContentType, &p.Size, &p.SHA256, &blob, &p.inline, &p.data); err != nil {
			return nil, err
		}
		p.blob = blob.String
		out = append(out, p)
	}
	return out, rows.Err()
}

// Get implements Store.
func (s *SQLite) Get(ctx context.Context, id string) (*Capture, error) {
	if !validID(id) {
		return nil, ErrNotFound
	}
	// The shared lock keeps the blobs of the rows read below on disk.
	unlock, err := s.blobLock(false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	c, err := s.scanCapture(tx.QueryRowContext(ctx, `SELECT `+capCols+capFrom+` WHERE c.id = ?`, id))
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("reading capture %s: %w", id, err)
	}
	parts, err := queryParts(ctx, tx, id, c.Erased == nil)
	if err != nil {
		return nil, fmt.Errorf("reading capture %s: %w", id, err)
	}
	if err := tx.Rollback(); err != nil {
		return nil, err
	}
	c.Parts = make([]Part, len(parts))
	for i, p := range parts {
		c.Parts[i] = p.Part
		var data []byte
		switch {
		case c.Erased != nil:
			continue
		case p.inline:
			data, err = s.keys.decodeInline(p.data, id, p.idx, p.Size, p.SHA256)
		case p.blob != "":
			data, err = s.readBlob(p.blob, p.Size, p.SHA256)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("capture %s: part %s: %w", id, p.Name, err)
		}
		c.Parts[i].Data = data
	}
	return c, nil
}

// heldIn reports whether capture id is held (itself or its tenant), and
// whether it is erased, in a transaction; ErrNotFound if there is none.
func heldIn(ctx context.Context, tx *sql.Tx, id string) (held, erased bool, tenant string, err error) {
	var h, th int
	var state string
	err = tx.QueryRowContext(ctx, `SELECT c.held, EXISTS (SELECT 1 FROM tenant_holds h WHERE h.tenant = c.tenant), c.state, c.tenant
		FROM captures c WHERE c.id = ?`, id).Scan(&h, &th, &state, &tenant)
	if errors.Is(err, sql.ErrNoRows) {
		return false, false, "", ErrNotFound
	}
	return h != 0 || th != 0, state == "erased", tenant, err
}

// unref drops the blob references of capture id's parts, deletes the
// blob rows left without references and clears the parts' inline data. It
// returns the addresses of the blobs left without references: the caller
// removes their files after the commit (and wipes the WAL: wipeLog).
func unref(ctx context.Context, tx *sql.Tx, id string) ([]string, error) {
	parts, err := queryParts(ctx, tx, id, false)
	if err != nil {
		return nil, err
	}
	var zero []string
	for _, p := range parts {
		if p.blob == "" {
			continue
		}
		var refs int64
		err := tx.QueryRowContext(ctx, `UPDATE blobs SET refs = refs - 1 WHERE addr = ? RETURNING refs`, p.blob).Scan(&refs)
		if errors.Is(err, sql.ErrNoRows) {
			// A reference without a row: the file is still to be
			// checked (removeBlobs finds no reference and removes it).
			zero = append(zero, p.blob)
			continue
		}
		if err != nil {
			return nil, err
		}
		if refs == 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM blobs WHERE addr = ? AND refs = 0`, p.blob); err != nil {
				return nil, err
			}
			zero = append(zero, p.blob)
		}
	}
	// secure_delete (set on every connection) overwrites the cleared
	// values with zeros in the page, and zeroes their overflow pages.
	if _, err := tx.ExecContext(ctx, `UPDATE parts SET blob = NULL, data = NULL WHERE capture_id = ?`, id); err != nil {
		return nil, err
	}
	return zero, nil
}

// Delete implements Store: the capture goes with no tombstone (a hard
// delete, for tests and tools; reviewers use Erase). It refuses a held
// capture with ErrHeld. An erased capture's tombstone can be deleted.
func (s *SQLite) Delete(ctx context.Context, id string) error {
	if !validID(id) {
		return ErrNotFound
	}
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	held, _, _, err := heldIn(ctx, tx, id)
	if err != nil {
		return err
	}
	if held {
		return fmt.Errorf("deleting capture %s: %w", id, ErrHeld)
	}
	zero, err := unref(ctx, tx, id)
	if err != nil {
		return fmt.Errorf("deleting capture %s: %w", id, err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM parts WHERE capture_id = ?`, id); err != nil {
		return fmt.Errorf("deleting capture %s: %w", id, err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM captures WHERE id = ?`, id); err != nil {
		return fmt.Errorf("deleting capture %s: %w", id, err)
	}
	if err := hook("delete-before-commit"); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("deleting capture %s: %w", id, err)
	}
	if err := hook("delete-committed"); err != nil {
		return err
	}
	_, err = s.removeBlobs(ctx, zero)
	if werr := s.wipeLog(ctx); werr != nil {
		err = errors.Join(err, fmt.Errorf("capture %s is deleted, but its former content may remain in the database's write-ahead log until a checkpoint (GC retries): %w", id, werr))
	}
	return err
}

// beginReviewed begins the transaction of a reviewer's change to capture
// id (an erasure, a hold). by must say who makes it (noBy is the error
// when it does not); an id that cannot exist is ErrNotFound.
func (s *SQLite) beginReviewed(ctx context.Context, id, by, noBy string) (*sql.Tx, error) {
	if err := reviewed(id, by, noBy); err != nil {
		return nil, err
	}
	return s.wdb.BeginTx(ctx, nil)
}

// Erase implements Forensics. The tombstone keeps the capture's id,
// tenant, key, request, kind, times and its parts' names, types, sizes and
// digests; the content and Meta (URLs) go. Erasing an erased capture
// returns ErrErased. by must be set.
func (s *SQLite) Erase(ctx context.Context, id, by, reason string) error {
	tx, err := s.beginReviewed(ctx, id, by, "erasing a capture: say who erases it (by)")
	if err != nil {
		return err
	}
	defer tx.Rollback()
	held, erased, _, err := heldIn(ctx, tx, id)
	switch {
	case err != nil:
		return err
	case erased:
		return fmt.Errorf("erasing capture %s: %w", id, ErrErased)
	case held:
		return fmt.Errorf("erasing capture %s: %w", id, ErrHeld)
	}
	zero, err := unref(ctx, tx, id)
	if err != nil {
		return fmt.Errorf("erasing capture %s: %w", id, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE captures SET state = 'erased', meta = NULL, erased_at = ?, erased_by = ?, erase_reason = ? WHERE id = ?`,
		time.Now().UnixNano(), by, reason, id); err != nil {
		return fmt.Errorf("erasing capture %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("erasing capture %s: %w", id, err)
	}
	if err := hook("erase-committed"); err != nil {
		return err
	}
	var errs []error
	if _, err := s.removeBlobs(ctx, zero); err != nil {
		errs = append(errs, fmt.Errorf("capture %s is erased, but removing its blob files failed (GC retries): %w", id, err))
	}
	if err := s.wipeLog(ctx); err != nil {
		errs = append(errs, fmt.Errorf("capture %s is erased, but its former content may remain in the database's write-ahead log until a checkpoint (GC retries): %w", id, err))
	}
	return errors.Join(errs...)
}

// wipeLog checkpoints the WAL into the database and truncates it, so that
// what the last commits cleared (inline data, Meta) is gone from the disk
// files: secure_delete has overwritten it with zeros in the new versions
// of its pages (and zeroed the overflow pages it freed), but the WAL still
// holds the versions before, until a checkpoint copies the new ones over
// the database's pages and the WAL is truncated. (VACUUM is not needed
// for this: secure_delete leaves no free space holding the old bytes.) It
// waits for writers to finish and readers to leave the WAL, holding off
// new writers meanwhile, and tries again while another connection is
// checkpointing (SQLite then answers busy at once instead of waiting),
// for up to about the busy timeout. Erase, Delete, Sweep and GC call it.
// As with a removed blob file, blocks the file system has not reused yet
// may still hold the bytes.
func (s *SQLite) wipeLog(ctx context.Context) error {
	deadline := time.Now().Add(busyTimeoutMS * time.Millisecond)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		var busy, frames, copied int
		if err := s.wdb.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &frames, &copied); err != nil {
			return fmt.Errorf("checkpointing the capture database: %w", err)
		}
		if busy == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("checkpointing the capture database: the write-ahead log stayed busy (other checkpoints, a writer or readers) for %d ms", busyTimeoutMS)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// SetHold implements Forensics. Placing a hold on an erased capture
// returns ErrErased; placing one again replaces who, when and why; lifting
// one that is not there does nothing. by must be set.
func (s *SQLite) SetHold(ctx context.Context, id string, on bool, by, reason string) error {
	tx, err := s.beginReviewed(ctx, id, by, "setting a capture hold: say who sets it (by)")
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var state string
	err = tx.QueryRowContext(ctx, `SELECT state FROM captures WHERE id = ?`, id).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	if on {
		if state == "erased" {
			return fmt.Errorf("holding capture %s: %w", id, ErrErased)
		}
		_, err = tx.ExecContext(ctx, `UPDATE captures SET held = 1, hold_at = ?, hold_by = ?, hold_reason = ? WHERE id = ?`, time.Now().UnixNano(), by, reason, id)
	} else {
		_, err = tx.ExecContext(ctx, `UPDATE captures SET held = 0, hold_at = 0, hold_by = '', hold_reason = '' WHERE id = ?`, id)
	}
	if err != nil {
		return err
	}
	return tx.Commit()
}

// SetTenantHold implements Forensics: the hold covers every capture of the
// tenant, stored or to come, until lifted. by must be set.
func (s *SQLite) SetTenantHold(ctx context.Context, tenant string, on bool, by, reason string) error {
	if err := checkTenantHold(tenant, by); err != nil {
		return err
	}
	var err error
	if on {
		_, err = s.wdb.ExecContext(ctx, `INSERT INTO tenant_holds (tenant, at, by, reason) VALUES (?, ?, ?, ?)
			ON CONFLICT (tenant) DO UPDATE SET at = excluded.at, by = excluded.by, reason = excluded.reason`, tenant, time.Now().UnixNano(), by, reason)
	} else {
		_, err = s.wdb.ExecContext(ctx, `DELETE FROM tenant_holds WHERE tenant = ?`, tenant)
	}
	return err
}

// TenantHolds returns the tenants under a hold.
func (s *SQLite) TenantHolds(ctx context.Context) (map[string]Hold, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT tenant, at, by, reason FROM tenant_holds`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanTenantHolds(rows)
}

// sweepBatch bounds the captures one Sweep transaction deletes.
var sweepBatch = 200

// Sweep implements Forensics: it deletes (without tombstones) the live
// captures whose ExpiresAt is at or before now and that are not held,
// in transactions of up to 200, and returns each one deleted. On an error
// the slice still lists what was deleted before it. Tombstones of erased
// captures are kept.
func (s *SQLite) Sweep(ctx context.Context, now time.Time) ([]Swept, error) {
	var out []Swept
	for {
		batch, zero, err := s.sweepOnce(ctx, now)
		out = append(out, batch...)
		if err != nil {
			return out, err
		}
		if _, err := s.removeBlobs(ctx, zero); err != nil {
			return out, fmt.Errorf("swept captures' blob files (GC retries): %w", err)
		}
		if len(batch) < sweepBatch {
			break
		}
	}
	if len(out) > 0 {
		if err := s.wipeLog(ctx); err != nil {
			return out, fmt.Errorf("swept captures' content in the write-ahead log (GC retries): %w", err)
		}
	}
	return out, nil
}

func (s *SQLite) sweepOnce(ctx context.Context, now time.Time) ([]Swept, []string, error) {
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT id, tenant, kind, created_at, expires_at FROM captures c
		WHERE expires_at > 0 AND expires_at <= ? AND state = 'live' AND held = 0
			AND NOT EXISTS (SELECT 1 FROM tenant_holds h WHERE h.tenant = c.tenant)
		ORDER BY expires_at LIMIT ?`, now.UnixNano(), sweepBatch)
	if err != nil {
		return nil, nil, err
	}
	batch, err := scanSwept(rows)
	rows.Close()
	if err != nil {
		return nil, nil, err
	}
	var zero []string
	for _, w := range batch {
		z, err := unref(ctx, tx, w.ID)
		if err != nil {
			return nil, nil, err
		}
		zero = append(zero, z...)
		if _, err := tx.ExecContext(ctx, `DELETE FROM parts WHERE capture_id = ?`, w.ID); err != nil {
			return nil, nil, err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM captures WHERE id = ?`, w.ID); err != nil {
			return nil, nil, err
		}
	}
	if len(batch) == 0 {
		return nil, nil, nil
	}
	if err := tx.Commit(); err != nil {
		return nil, nil, err
	}
	return batch, zero, nil
}

// List implements Forensics: captures (erased ones' tombstones too) whose
// CreatedAt is in [Since, Until), newest first, metadata only.
func (s *SQLite) List(ctx context.Context, f Filter) ([]Capture, string, error) {
	q, args, limit, err := listQuery(f, `SELECT `+capCols+capFrom, func(int) string { return "?" }, false)
	if err != nil {
		return nil, "", err
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, "", err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", err
	}
	out, err := scanCaptures(rows, s.keys)
	rows.Close()
	if err != nil {
		return nil, "", err
	}
	out, next := nextCursor(out, limit)
	for i := range out {
		parts, err := queryParts(ctx, tx, out[i].ID, false)
		if err != nil {
			return nil, "", err
		}
		out[i].Parts = make([]Part, len(parts))
		for j, p := range parts {
			out[i].Parts[j] = p.Part
		}
	}
	return out, next, nil
}

func makeCursor(at int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at, 10) + "." + id))
}

func parseCursor(c string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if at, id, ok := strings.Cut(string(b), "."); ok && validID(id) {
			if n, err := strconv.ParseInt(at, 10, 64); err == nil {
				return n, id, nil
			}
		}
	}
	return 0, "", fmt.Errorf("%w: capture list cursor %q is not one List returned", ErrCursor, c)
}

// ErrCursor: a List cursor that List did not give out.
var ErrCursor = errors.New("bad cursor")

var (
	_ Store     = (*SQLite)(nil)
	_ Forensics = (*SQLite)(nil)
)
