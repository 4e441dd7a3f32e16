package capture

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandboxd/sandboxd/internal/pgdb"
)

// Postgres is the capture store of a fleet: metadata and small bodies in
// PostgreSQL, larger bodies as objects in an ObjectStore (an S3 bucket,
// S3Objects, or a directory, LocalObjects), shared by every replica. It
// has the semantics of SQLite (the same Store and Forensics contracts,
// holds, tombstones, sealing) with two differences: bodies are not shared
// between captures, and removed inline content is not wiped from the
// database's files at once (see below).
//
// Layout. The tables live in the database of the pool given to
// OpenPostgres, beside the rest of the replica's (pgdb.Migrate,
// component "capture"; every name starts with capture):
//
//	captures              one row per capture (the tombstone of an erased
//	                      one): ids, tenant, kind, times (Unix ns), the
//	                      sealed Meta, state, the erasure, the capture hold
//	capture_parts         (capture_id, idx): name, type, size, sha256, and
//	                      either an object key or the inline data
//	capture_tenant_holds  tenant holds
//	capture_settings      the encryption mode ("none" or the key's
//	                      fingerprint)
//	capture_trash         keys of objects whose capture went (erased,
//	                      deleted, swept) and that are still to be deleted
//
// A part of at most inlineMax bytes (8 KiB: all of a typical exec's
// parts) is stored inline, in capture_parts.data, in the capture's own
// transaction; a larger one is an object. Inline parts save a round trip
// to the object store per part (BenchmarkStores, S3 on the same host: a
// small exec's Put is about 6 times faster with them, its Get 10 times).
// Object keys are
//
//	c/<id[4:6]>/<capture id>/<part index>-<16 random hex digits>
//
// (under S3Config.Prefix, or the directory of LocalObjects): a new key for
// every Put, never reused or rewritten. Objects are not content-addressed
// and so not shared between captures (SQLite shares equal bodies): sharing
// across replicas would need reference counts updated in every Put and
// removal and a lock between a removal and a Put taking the object up;
// the saving (the same page fetched twice) is not worth it. An object and
// an inline value are in SQLite's blob format (encode): deflated when that
// is smaller, sealed with a key.
//
// Durability and crash safety. Put writes its objects (in parallel) and
// waits for the object store to acknowledge each, then commits the rows
// that name them (PostgreSQL's commit is durable with its default
// synchronous_commit); a Put interrupted at any point leaves no capture,
// at most objects that no row names (orphans). A Put whose rows did not
// commit deletes its objects itself; when the commit's outcome is unknown
// (the connection broke during COMMIT) it leaves them, since the capture
// may exist. Removing content (Erase, Delete, Sweep) moves the parts'
// object keys into capture_trash and clears or deletes the rows in one
// transaction, then deletes the objects, then their trash rows: a crash
// in between leaves trash rows, which GC finishes. So a committed row
// never names a missing object, and erased content leaves the bucket even
// if the replica that erased it dies. GC also lists the objects under c/
// and deletes those that no row names and that are older than
// Options.OrphanGrace (1 hour): what a Put that died before its commit
// wrote. The grace is what keeps GC from deleting the objects of a Put in
// progress: a Put that took longer than a quarter of it between starting
// its object writes and committing gives up (its objects become orphans).
// This assumes the object store's clock (which dates the objects) and
// the replicas' clocks differ by less than three quarters of the grace.
//
// Several replicas. Every method is one short transaction (plus object
// reads or writes outside it); what must hold across replicas is decided
// in the database:
//   - Erase, Delete, SetHold lock the capture's row (FOR UPDATE), so they
//     see each other's commits; a second Erase gets ErrErased.
//   - A tenant hold and a removal are ordered by a transaction-level
//     advisory lock on the tenant (exclusive in SetTenantHold, shared in
//     Erase, Delete and Sweep, which read capture_tenant_holds under it):
//     once SetTenantHold returns, no replica removes the tenant's content.
//   - Sweep locks the expired rows it takes (FOR UPDATE SKIP LOCKED):
//     replicas sweeping at once take disjoint captures, and each swept
//     capture is reported (and audited) once.
//   - Put reads the encryption mode under a share lock, and OpenPostgres
//     changes it (an empty store only) under an exclusive one: a replica
//     with another key (or none) cannot slip captures into the store.
//   - Get reads the capture and its parts in one statement (one snapshot);
//     an object found missing (an Erase on another replica between the
//     read and the fetch) makes it read the rows again, so it returns the
//     tombstone or ErrNotFound rather than an error.
//   - GC runs on one replica at a time (a session advisory lock); the
//     others return at once.
//
// Encryption at rest (Options.KeyFile, the same key file format and key
// derivation as SQLite's; every replica needs the same key). Objects,
// inline data and the Meta column are sealed with AES-256-GCM; the
// additional data of an object's seal ends in its key (without the
// store's prefix), which names the capture and part, and an inline
// value's in the capture id and part index: an object or value moved to
// another part or capture fails authentication. Every part's content is
// also checked against its size and sha256 on read, sealed or not, so an
// altered object is detected without a key too. What is in clear in
// PostgreSQL: ids, tenants, key ids, request ids, kinds, times, part
// names, types, sizes and plain sha256 digests, object keys, holds and
// erasures (as in SQLite's database, the digest lets someone holding the
// database confirm a guess of a part's exact content); in the bucket: the
// object keys (capture ids and part indexes) and sizes.
//
// Removed content. An erasure, deletion or sweep deletes the objects from
// the bucket (a versioned bucket keeps old versions: use one without
// versioning, or a lifecycle rule that expires non-current versions) and
// clears the inline data and Meta in the rows. Unlike SQLite's
// secure_delete, PostgreSQL keeps the old row versions in the table's
// pages until VACUUM (autovacuum) reclaims them and their space is
// reused, and in its WAL, WAL archives and base backups: with encryption
// on, what remains there is sealed; without, an erasure is not a wipe
// of the database's disks. As in SQLite, one key seals everything, so an
// erasure is never a cryptographic erasure.
type Postgres struct {
	pool      *pgxpool.Pool
	objects   ObjectStore
	keys      *keys // nil: no encryption
	log       *slog.Logger
	inlineMax int
	grace     time.Duration
}

// DefaultOrphanGrace is Options.OrphanGrace's default.
const DefaultOrphanGrace = time.Hour

// pgSteps are the capture tables' schema versions (pgdb.Migrate): append
// a step for a change, never edit one that has shipped.
var pgSteps = []string{
	`CREATE TABLE capture_settings (
		name TEXT PRIMARY KEY,
		value TEXT NOT NULL);
	CREATE TABLE captures (
		id TEXT PRIMARY KEY,
		kind TEXT NOT NULL,
		tenant TEXT NOT NULL,
		key_id TEXT NOT NULL,
		request_id TEXT NOT NULL,
		created_at BIGINT NOT NULL,
		retention BIGINT NOT NULL,
		expires_at BIGINT NOT NULL,
		meta BYTEA,
		state TEXT NOT NULL CHECK (state IN ('live', 'erased')),
		erased_at BIGINT NOT NULL DEFAULT 0,
		erased_by TEXT NOT NULL DEFAULT '',
		erase_reason TEXT NOT NULL DEFAULT '',
		held BOOLEAN NOT NULL DEFAULT false,
		hold_at BIGINT NOT NULL DEFAULT 0,
		hold_by TEXT NOT NULL DEFAULT '',
		hold_reason TEXT NOT NULL DEFAULT '');
	CREATE INDEX captures_created ON captures (created_at, id);
	CREATE INDEX captures_tenant ON captures (tenant, created_at, id);
	CREATE INDEX captures_expires ON captures (expires_at) WHERE expires_at > 0 AND state = 'live';
	CREATE TABLE capture_parts (
		capture_id TEXT NOT NULL REFERENCES captures (id) ON DELETE CASCADE,
		idx INTEGER NOT NULL,
		name TEXT NOT NULL,
		content_type TEXT NOT NULL,
		size BIGINT NOT NULL,
		sha256 TEXT NOT NULL,
		object TEXT,
		data BYTEA,
		CHECK (data IS NULL OR object IS NULL),
		PRIMARY KEY (capture_id, idx),
		UNIQUE (capture_id, name));
	CREATE UNIQUE INDEX capture_parts_object ON capture_parts (object) WHERE object IS NOT NULL;
	CREATE TABLE capture_tenant_holds (
		tenant TEXT PRIMARY KEY,
		at BIGINT NOT NULL,
		by TEXT NOT NULL,
		reason TEXT NOT NULL);
	CREATE TABLE capture_trash (
		object TEXT PRIMARY KEY,
		at BIGINT NOT NULL);
	INSERT INTO capture_settings (name, value) VALUES ('encryption', '');`,
}

// Advisory lock keys (the two-int4 key space, apart from pgdb's int8
// migration lock): lockTenant with hashtext(tenant) orders tenant holds
// and removals; lockGC with 0 lets one replica collect at a time.
const (
	lockTenant = 0x63617074 // "capt"
	lockGC     = 0x63676300 // "cgc"
)

// OpenPostgres opens the fleet's capture store: it migrates the capture
// tables in pool's database, loads the key (opts.KeyFile) and checks it
// against the store's mode (refusing, as Open does, a key that is not the
// one the stored captures were sealed with, or none for a sealed store).
// The pool is shared with the rest of the replica: Close does not close
// it. Options.Log and Options.OrphanGrace apply; other replicas must be
// given the same key file.
func OpenPostgres(ctx context.Context, pool *pgxpool.Pool, objects ObjectStore, opts Options) (*Postgres, error) {
	if pool == nil || objects == nil {
		return nil, errors.New("opening the capture store: a PostgreSQL pool and an object store are needed")
	}
	s := &Postgres{pool: pool, objects: objects, log: opts.Log, inlineMax: inlineMax, grace: opts.OrphanGrace}
	if opts.inlineMax != 0 {
		s.inlineMax = max(opts.inlineMax, -1)
	}
	if s.grace <= 0 {
		s.grace = DefaultOrphanGrace
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
	if err := pgdb.Migrate(ctx, pool, "capture", pgSteps); err != nil {
		return nil, fmt.Errorf("opening the capture store: %w", err)
	}
	if err := s.checkKey(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// checkKey records the mode on first use (or while the store is empty)
// and refuses a key that does not match stored content. The row lock
// orders it with Puts (which read the mode under a share lock).
func (s *Postgres) checkKey(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var stored string
		if err := tx.QueryRow(ctx, `SELECT value FROM capture_settings WHERE name = 'encryption' FOR UPDATE`).Scan(&stored); err != nil {
			return fmt.Errorf("opening the capture store: reading its encryption mode: %w", err)
		}
		cur := s.keys.mode()
		if stored == cur {
			return nil
		}
		if stored != "" {
			var some bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM captures) OR EXISTS (SELECT 1 FROM capture_trash)`).Scan(&some); err != nil {
				return err
			}
			if some {
				return keyMismatch("in PostgreSQL", stored, s.keys)
			}
		}
		_, err := tx.Exec(ctx, `UPDATE capture_settings SET value = $1 WHERE name = 'encryption'`, cur)
		return err
	})
}

// Encrypted reports whether the store was opened with a key.
func (s *Postgres) Encrypted() bool { return s.keys != nil }

// Objects returns the object store.
func (s *Postgres) Objects() ObjectStore { return s.objects }

// Close releases nothing: the pool belongs to the caller.
func (s *Postgres) Close() error { return nil }

// objectPrefix is where the store's objects are, objectKeyRE their keys.
const objectPrefix = "c/"

var objectKeyRE = regexp.MustCompile(`^c/[0-9a-f]{2}/(cap_[0-9a-f]{32})/([0-9]+)-[0-9a-f]{16}$`)

// newObjectKey returns a fresh key for part idx of capture id.
func newObjectKey(id string, idx int) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return objectPrefix + id[4:6] + "/" + id + "/" + strconv.Itoa(idx) + "-" + hex.EncodeToString(b[:])
}

// objectBind is what an object's seal is bound to: its key, which names
// its capture and part. Neither a blob address nor an inlineBind has
// this form.
func objectBind(key string) string { return "object " + key }

// Put implements Store. A capture of a held tenant is held from the start;
// c.Hold, c.TenantHold and c.Erased are not stored.
func (s *Postgres) Put(ctx context.Context, c *Capture) error {
	inline, meta, err := prepare(ctx, c, s.keys, s.inlineMax)
	if err != nil {
		return err
	}
	n := len(c.Parts)
	var (
		idxs    = make([]int32, n)
		names   = make([]string, n)
		types   = make([]string, n)
		sizes   = make([]int64, n)
		sums    = make([]string, n)
		objects = make([]*string, n)
		keys    []string
	)
	for i, p := range c.Parts {
		idxs[i], names[i], types[i], sizes[i], sums[i] = int32(i), p.Name, p.ContentType, p.Size, p.SHA256
		if inline[i] == nil {
			k := newObjectKey(c.ID, i)
			objects[i] = &k
			keys = append(keys, k)
		}
	}
	start := time.Now()
	if err := s.putObjects(ctx, c, objects); err != nil {
		s.dropObjects(keys)
		return fmt.Errorf("storing capture %s: %w", c.ID, err)
	}
	if err := hook("objects-written"); err != nil {
		return err
	}
	committing := false
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		var mode string
		b.Queue(`SELECT value FROM capture_settings WHERE name = 'encryption' FOR SHARE`).QueryRow(func(r pgx.Row) error { return r.Scan(&mode) })
		b.Queue(`INSERT INTO captures (id, kind, tenant, key_id, request_id, created_at, retention, expires_at, meta, state)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'live')`,
			c.ID, c.Kind, c.Tenant, c.KeyID, c.RequestID, nanos(c.CreatedAt), int64(c.Retention), nanos(c.ExpiresAt), meta)
		if n > 0 {
			b.Queue(`INSERT INTO capture_parts (capture_id, idx, name, content_type, size, sha256, object, data)
				SELECT $1, * FROM unnest($2::int[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::bytea[])`,
				c.ID, idxs, names, types, sizes, sums, objects, inline)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if mode != s.keys.mode() {
			return fmt.Errorf("%w: the capture store's encryption mode changed to %q since this replica opened it (with %q): restart it with the store's key", errKey, mode, s.keys.mode())
		}
		if err := hook("before-commit"); err != nil {
			return err
		}
		if d := time.Since(start); d > s.grace/4 {
			return fmt.Errorf("the object writes and the transaction took %v, more than a quarter of the orphan grace (%v): GC may take the objects for orphans", d.Round(time.Millisecond), s.grace)
		}
		committing = true
		return nil
	})
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "captures_pkey" {
		err = errExists
	}
	if !committing || errors.Is(err, errExists) {
		// Nothing committed: the objects are ours alone.
		s.dropObjects(keys)
	}
	return fmt.Errorf("storing capture %s: %w", c.ID, err)
}

// putObjects encodes and writes the objects of the parts that have one,
// in parallel.
func (s *Postgres) putObjects(ctx context.Context, c *Capture, objects []*string) error {
	var wg sync.WaitGroup
	errs := make([]error, len(objects))
	for i, k := range objects {
		if k == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			content, err := s.keys.encode(c.Parts[i].Data, objectBind(*k))
			if err == nil {
				err = s.objects.Put(ctx, *k, content)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// dropObjects deletes the objects of a Put that did not commit, on a
// context of its own (the Put's may have ended); what it misses, GC takes.
func (s *Postgres) dropObjects(keys []string) {
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, k := range keys {
		if err := s.objects.Delete(ctx, k); err != nil {
			s.log.Warn("deleting an object of a capture that was not stored failed (GC retries)", "object", k, "err", err)
		}
	}
}

// pgCapFrom is the FROM clause of capCols.
const pgCapFrom = ` FROM captures c LEFT JOIN capture_tenant_holds h ON h.tenant = c.tenant`

// pgPart is a capture_parts row: its object key, or its inline value, or
// neither once erased.
type pgPart struct {
	Part
	idx    int
	object string
	data   []byte
	inline bool
}

// Get implements Store.
func (s *Postgres) Get(ctx context.Context, id string) (*Capture, error) {
	if !validID(id) {
		return nil, ErrNotFound
	}
	for attempt := 0; ; attempt++ {
		c, parts, err := s.read(ctx, id)
		if err != nil {
			return nil, err
		}
		missing, err := s.fill(ctx, c, parts)
		if err == nil {
			return c, nil
		}
		if !missing || attempt == 2 {
			return nil, fmt.Errorf("capture %s: %w", id, err)
		}
		// An object went after the rows were read: a removal on some
		// replica committed since. Read the rows again.
	}
}

// read reads capture id and its parts (with inline data unless erased) in
// one statement, so in one snapshot.
func (s *Postgres) read(ctx context.Context, id string) (*Capture, []pgPart, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+capCols+`, p.idx, p.name, p.content_type, p.size, p.sha256, p.object, p.data IS NOT NULL,
		CASE WHEN c.state = 'live' THEN p.data END`+pgCapFrom+` LEFT JOIN capture_parts p ON p.capture_id = c.id WHERE c.id = $1 ORDER BY p.idx`, id)
	if err != nil {
		return nil, nil, fmt.Errorf("reading capture %s: %w", id, err)
	}
	defer rows.Close()
	var r captureRow
	var parts []pgPart
	found := false
	for rows.Next() {
		found = true
		var idx *int32
		var name, ctype, sum, object *string
		var size *int64
		var inline *bool
		var data []byte
		if err := rows.Scan(append(r.dest(), &idx, &name, &ctype, &size, &sum, &object, &inline, &data)...); err != nil {
			return nil, nil, fmt.Errorf("reading capture %s: %w", id, err)
		}
		if idx == nil {
			continue // no parts
		}
		parts = append(parts, pgPart{Part: Part{Name: *name, ContentType: *ctype, Size: *size, SHA256: *sum}, idx: int(*idx), object: deref(object), data: data, inline: *inline})
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("reading capture %s: %w", id, err)
	}
	if !found {
		return nil, nil, ErrNotFound
	}
	c, err := r.capture(s.keys)
	if err != nil {
		return nil, nil, fmt.Errorf("reading capture %s: %w", id, err)
	}
	return c, parts, nil
}

// fill sets c's parts with their content: inline values decoded, objects
// fetched (in parallel) and decoded. missing reports that an object was
// not found.
func (s *Postgres) fill(ctx context.Context, c *Capture, parts []pgPart) (missing bool, err error) {
	c.Parts = make([]Part, len(parts))
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, p := range parts {
		c.Parts[i] = p.Part
		switch {
		case c.Erased != nil:
		case p.inline:
			c.Parts[i].Data, errs[i] = s.keys.decodeInline(p.data, c.ID, p.idx, p.Size, p.SHA256)
		case p.object != "":
			wg.Add(1)
			go func() {
				defer wg.Done()
				file, err := s.objects.Get(ctx, p.object)
				if errors.Is(err, ErrObjectNotFound) {
					mu.Lock()
					missing = true
					mu.Unlock()
					errs[i] = fmt.Errorf("%w: object %s of part %s is missing", errCorrupt, p.object, p.Name)
					return
				}
				if err == nil {
					c.Parts[i].Data, err = s.keys.decode(file, "object "+p.object, objectBind(p.object), p.Size, p.SHA256)
				}
				if err != nil {
					errs[i] = fmt.Errorf("part %s: %w", p.Name, err)
				}
			}()
		}
	}
	wg.Wait()
	return missing, errors.Join(errs...)
}

// lockTenants takes the shared advisory locks of tenants (sorted, so
// concurrent callers take them in one order) and returns those under a
// tenant hold, read under the locks.
func lockTenants(ctx context.Context, tx pgx.Tx, tenants []string) (map[string]bool, error) {
	if len(tenants) == 0 {
		return nil, nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1, hashtext(t)) FROM (SELECT DISTINCT t FROM unnest($2::text[]) t ORDER BY t) u`,
		int32(lockTenant), tenants); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, `SELECT tenant FROM capture_tenant_holds WHERE tenant = ANY($1)`, tenants)
	if err != nil {
		return nil, err
	}
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, t := range held {
		out[t] = true
	}
	return out, nil
}

// lockForRemoval locks capture id's row and its tenant (lockTenants) and
// reports whether it is held (itself or its tenant) and erased.
func lockForRemoval(ctx context.Context, tx pgx.Tx, id string) (held, erased bool, err error) {
	var tenant, state string
	err = tx.QueryRow(ctx, `SELECT tenant, state, held FROM captures WHERE id = $1 FOR UPDATE`, id).Scan(&tenant, &state, &held)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false, ErrNotFound
	}
	if err != nil {
		return false, false, err
	}
	th, err := lockTenants(ctx, tx, []string{tenant})
	if err != nil {
		return false, false, err
	}
	return held || th[tenant], state == "erased", nil
}

// trash moves the object keys of the captures ids into capture_trash and
// returns them; the caller deletes them after its commit (removeObjects).
func trash(ctx context.Context, tx pgx.Tx, ids []string) ([]string, error) {
	rows, err := tx.Query(ctx, `INSERT INTO capture_trash (object, at)
		SELECT object, $2 FROM capture_parts WHERE capture_id = ANY($1) AND object IS NOT NULL
		ON CONFLICT (object) DO NOTHING RETURNING object`, ids, time.Now().UnixNano())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// removeObjects deletes objects that committed removals put in the trash,
// then their trash rows. It returns how many it deleted; what it misses
// stays in the trash for GC.
func (s *Postgres) removeObjects(ctx context.Context, keys []string) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	var done []string
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := s.objects.Delete(ctx, k)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			done = append(done, k)
		}()
	}
	wg.Wait()
	if len(done) > 0 {
		if _, err := s.pool.Exec(ctx, `DELETE FROM capture_trash WHERE object = ANY($1)`, done); err != nil {
			errs = append(errs, err)
		}
	}
	return len(done), errors.Join(errs...)
}

// Delete implements Store: the capture goes with no tombstone. It refuses
// a held capture with ErrHeld; an erased capture's tombstone can be
// deleted.
func (s *Postgres) Delete(ctx context.Context, id string) error {
	if !validID(id) {
		return ErrNotFound
	}
	var keys []string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		held, _, err := lockForRemoval(ctx, tx, id)
		if err != nil {
			return err
		}
		if held {
			return ErrHeld
		}
		if keys, err = trash(ctx, tx, []string{id}); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM captures WHERE id = $1`, id); err != nil {
			return err
		}
		return hook("delete-before-commit")
	})
	if errors.Is(err, ErrNotFound) {
		return err
	}
	if err != nil {
		return fmt.Errorf("deleting capture %s: %w", id, err)
	}
	if err := hook("delete-committed"); err != nil {
		return err
	}
	if _, err := s.removeObjects(ctx, keys); err != nil {
		return fmt.Errorf("capture %s is deleted, but deleting its objects failed (GC retries): %w", id, err)
	}
	return nil
}

// Erase implements Forensics. The tombstone keeps the capture's id,
// tenant, key, request, kind, times and its parts' names, types, sizes and
// digests; the content (objects, inline data) and Meta go.
func (s *Postgres) Erase(ctx context.Context, id, by, reason string) error {
	if err := reviewed(id, by, "erasing a capture: say who erases it (by)"); err != nil {
		return err
	}
	var keys []string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		held, erased, err := lockForRemoval(ctx, tx, id)
		switch {
		case err != nil:
			return err
		case erased:
			return ErrErased
		case held:
			return ErrHeld
		}
		if keys, err = trash(ctx, tx, []string{id}); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE capture_parts SET object = NULL, data = NULL WHERE capture_id = $1`, id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE captures SET state = 'erased', meta = NULL, erased_at = $2, erased_by = $3, erase_reason = $4 WHERE id = $1`,
			id, time.Now().UnixNano(), by, reason)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return err
	}
	if err != nil {
		return fmt.Errorf("erasing capture %s: %w", id, err)
	}
	if err := hook("erase-committed"); err != nil {
		return err
	}
	if _, err := s.removeObjects(ctx, keys); err != nil {
		return fmt.Errorf("capture %s is erased, but deleting its objects failed (GC retries): %w", id, err)
	}
	return nil
}

// SetHold implements Forensics. Placing a hold on an erased capture
// returns ErrErased; placing one again replaces who, when and why; lifting
// one that is not there does nothing.
func (s *Postgres) SetHold(ctx context.Context, id string, on bool, by, reason string) error {
	if err := reviewed(id, by, "setting a capture hold: say who sets it (by)"); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var state string
		err := tx.QueryRow(ctx, `SELECT state FROM captures WHERE id = $1 FOR UPDATE`, id).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if on {
			if state == "erased" {
				return fmt.Errorf("holding capture %s: %w", id, ErrErased)
			}
			_, err = tx.Exec(ctx, `UPDATE captures SET held = true, hold_at = $2, hold_by = $3, hold_reason = $4 WHERE id = $1`, id, time.Now().UnixNano(), by, reason)
		} else {
			_, err = tx.Exec(ctx, `UPDATE captures SET held = false, hold_at = 0, hold_by = '', hold_reason = '' WHERE id = $1`, id)
		}
		return err
	})
}

// SetTenantHold implements Forensics: the hold covers every capture of the
// tenant, stored or to come, until lifted. Under the tenant's exclusive
// advisory lock: once it returns, no replica's removal that has not
// committed can proceed past its hold check without seeing it.
func (s *Postgres) SetTenantHold(ctx context.Context, tenant string, on bool, by, reason string) error {
	if err := checkTenantHold(tenant, by); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, int32(lockTenant), tenant); err != nil {
			return err
		}
		var err error
		if on {
			_, err = tx.Exec(ctx, `INSERT INTO capture_tenant_holds (tenant, at, by, reason) VALUES ($1, $2, $3, $4)
				ON CONFLICT (tenant) DO UPDATE SET at = excluded.at, by = excluded.by, reason = excluded.reason`, tenant, time.Now().UnixNano(), by, reason)
		} else {
			_, err = tx.Exec(ctx, `DELETE FROM capture_tenant_holds WHERE tenant = $1`, tenant)
		}
		return err
	})
}

// TenantHolds returns the tenants under a hold.
func (s *Postgres) TenantHolds(ctx context.Context) (map[string]Hold, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant, at, by, reason FROM capture_tenant_holds`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanTenantHolds(rows)
}

// Sweep implements Forensics: it deletes (without tombstones) the live
// captures whose ExpiresAt is at or before now and that are not held, in
// transactions of up to sweepBatch, and returns each one deleted (by this
// replica: rows another replica's sweep has locked are skipped, it
// reports them). On an error the slice still lists what was deleted
// before it.
func (s *Postgres) Sweep(ctx context.Context, now time.Time) ([]Swept, error) {
	var out []Swept
	for {
		batch, keys, full, err := s.sweepOnce(ctx, now)
		out = append(out, batch...)
		if err != nil {
			return out, err
		}
		if _, err := s.removeObjects(ctx, keys); err != nil {
			return out, fmt.Errorf("swept captures' objects (GC retries): %w", err)
		}
		if !full {
			return out, nil
		}
	}
}

func (s *Postgres) sweepOnce(ctx context.Context, now time.Time) (batch []Swept, keys []string, full bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, tenant, kind, created_at, expires_at FROM captures c
			WHERE expires_at > 0 AND expires_at <= $1 AND state = 'live' AND NOT held
				AND NOT EXISTS (SELECT 1 FROM capture_tenant_holds h WHERE h.tenant = c.tenant)
			ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED`, now.UnixNano(), sweepBatch)
		if err != nil {
			return err
		}
		cand, err := scanSwept(rows)
		rows.Close()
		if err != nil {
			return err
		}
		full = len(cand) == sweepBatch
		if len(cand) == 0 {
			return nil
		}
		tenants := make([]string, len(cand))
		for i, w := range cand {
			tenants[i] = w.Tenant
		}
		// A tenant hold placed since the query's snapshot is seen under
		// the tenant's lock.
		held, err := lockTenants(ctx, tx, tenants)
		if err != nil {
			return err
		}
		var ids []string
		batch = batch[:0]
		for _, w := range cand {
			if !held[w.Tenant] {
				batch = append(batch, w)
				ids = append(ids, w.ID)
			}
		}
		if keys, err = trash(ctx, tx, ids); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM captures WHERE id = ANY($1)`, ids)
		return err
	})
	if err != nil {
		return nil, nil, false, err
	}
	return batch, keys, full, nil
}

// List implements Forensics: captures (erased ones' tombstones too) whose
// CreatedAt is in [Since, Until), newest first, metadata only.
func (s *Postgres) List(ctx context.Context, f Filter) ([]Capture, string, error) {
	q, args, limit, err := listQuery(f, `SELECT `+capCols+pgCapFrom, func(n int) string { return "$" + strconv.Itoa(n) }, true)
	if err != nil {
		return nil, "", err
	}
	var out []Capture
	next := ""
	// One snapshot for the captures and their parts.
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		out, err = scanCaptures(rows, s.keys)
		rows.Close()
		if err != nil {
			return err
		}
		out, next = nextCursor(out, limit)
		ids := make([]string, len(out))
		at := map[string]int{}
		for i, c := range out {
			ids[i], at[c.ID] = c.ID, i
		}
		prows, err := tx.Query(ctx, `SELECT capture_id, name, content_type, size, sha256 FROM capture_parts WHERE capture_id = ANY($1) ORDER BY capture_id, idx`, ids)
		if err != nil {
			return err
		}
		defer prows.Close()
		for prows.Next() {
			var id string
			var p Part
			if err := prows.Scan(&id, &p.Name, &p.ContentType, &p.Size, &p.SHA256); err != nil {
				return err
			}
			c := &out[at[id]]
			c.Parts = append(c.Parts, p)
		}
		return prows.Err()
	})
	if err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// GC deletes the objects that committed removals left in the trash (a
// crash, or a failed delete), then lists the store's objects and deletes
// those that no part names and that are older than the orphan grace
// (what Puts that died before their commit wrote). It returns how many
// objects it deleted. One replica collects at a time: on the others it
// returns 0 at once. It is safe to run at any time.
func (s *Postgres) GC(ctx context.Context) (int, error) { return s.gc(ctx, time.Now()) }

// gcPage bounds the keys GC looks up in one query.
const gcPage = 1000

func (s *Postgres) gc(ctx context.Context, now time.Time) (int, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, 0)`, int32(lockGC)).Scan(&got); err != nil {
		return 0, err
	}
	if !got {
		return 0, nil
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1, 0)`, int32(lockGC)); err != nil {
			conn.Conn().Close(uctx) // a closed session holds no lock
		}
	}()
	removed := 0
	// The trash: objects of committed removals, whatever their age.
	for {
		rows, err := conn.Query(ctx, `SELECT object FROM capture_trash ORDER BY at LIMIT $1`, gcPage)
		if err != nil {
			return removed, err
		}
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return removed, err
		}
		n, err := s.removeObjects(ctx, keys)
		removed += n
		if err != nil {
			return removed, err
		}
		if len(keys) < gcPage {
			break
		}
	}
	// Orphans: objects no row names, older than the grace.
	var page []string
	flush := func() error {
		if len(page) == 0 {
			return nil
		}
		rows, err := conn.Query(ctx, `SELECT object FROM capture_parts WHERE object = ANY($1)
			UNION ALL SELECT object FROM capture_trash WHERE object = ANY($1)`, page)
		if err != nil {
			return err
		}
		named, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		ref := map[string]bool{}
		for _, k := range named {
			ref[k] = true
		}
		var errs []error
		for _, k := range page {
			if ref[k] {
				continue
			}
			if err := s.objects.Delete(ctx, k); err != nil {
				errs = append(errs, err)
				continue
			}
			removed++
		}
		page = page[:0]
		return errors.Join(errs...)
	}
	err = s.objects.List(ctx, objectPrefix, func(o ObjectInfo) error {
		if !objectKeyRE.MatchString(o.Key) || now.Sub(o.Modified) <= s.grace {
			return nil // not ours, or perhaps a Put's in progress
		}
		page = append(page, o.Key)
		if len(page) == gcPage {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	return removed, err
}

var (
	_ Store     = (*Postgres)(nil)
	_ Forensics = (*Postgres)(nil)
)
