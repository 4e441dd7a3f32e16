package capture

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandboxd/sandboxd/internal/pgtest"
	"github.com/sandboxd/sandboxd/internal/s3test"
)

// The servers of the Postgres store's tests: a PostgreSQL server (each
// test gets a database of its own) and an S3 server (each test a prefix
// of its own in one bucket), started at first use and stopped by
// TestMain.
var (
	servers struct {
		once   sync.Once
		err    error
		pg     *pgtest.Server
		s3     *s3test.Server
		bucket string
	}
	seq atomic.Int64
)

func startServers() error {
	servers.once.Do(func() {
		var wg sync.WaitGroup
		var pgErr, s3Err error
		wg.Add(2)
		go func() { defer wg.Done(); servers.pg, pgErr = pgtest.Start() }()
		go func() { defer wg.Done(); servers.s3, s3Err = s3test.Start() }()
		wg.Wait()
		if servers.err = errors.Join(pgErr, s3Err); servers.err != nil {
			return
		}
		servers.bucket, servers.err = servers.s3.NewBucket(context.Background())
	})
	return servers.err
}

func stopServers() {
	if servers.pg != nil {
		servers.pg.Close()
	}
	if servers.s3 != nil {
		servers.s3.Close()
	}
}

// newPGDatabase returns the DSN of a fresh, empty database.
func newPGDatabase(t testing.TB) string {
	t.Helper()
	if err := startServers(); err != nil {
		t.Fatal(err)
	}
	dsn, err := servers.pg.NewDatabase(bg, fmt.Sprintf("capture_%d", seq.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// newPool opens a pool on dsn, closed when the test ends: one replica's.
func newPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newS3Config returns the configuration of a fresh prefix of the test
// bucket.
func newS3Config(t testing.TB) S3Config {
	t.Helper()
	if err := startServers(); err != nil {
		t.Fatal(err)
	}
	return S3Config{Endpoint: servers.s3.Endpoint, Region: s3test.Region, Bucket: servers.bucket, PathStyle: true,
		Prefix: fmt.Sprintf("t%d/", seq.Add(1)), AccessKey: servers.s3.AccessKey, SecretKey: servers.s3.SecretKey}
}

func newS3Objects(t testing.TB, cfg S3Config) *S3Objects {
	t.Helper()
	o, err := NewS3Objects(bg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// openPG opens a Postgres store (a replica) on dsn and objects.
func openPG(t testing.TB, dsn string, objects ObjectStore, opts Options) *Postgres {
	t.Helper()
	s, err := OpenPostgres(bg, newPool(t, dsn), objects, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// backend is a capture store under test and what the shared tests see of
// where it keeps bodies (blob files, objects), each named by its address
// or key.
type backend struct {
	name string
	// open opens the store, again on the same state when called again
	// (another handle, another replica).
	open func(t testing.TB, opts Options) Forensics
	// tryOpen is open that returns the error.
	tryOpen func(opts Options) (Forensics, error)
	// shares: equal bodies share one blob (SQLite), or each part has its
	// own object (Postgres).
	shares bool
	// bodies lists the stored bodies.
	bodies func(t testing.TB) []string
	// partBody names the body of a part ("" for an inline or erased one).
	partBody func(t testing.TB, s Forensics, id, name string) string
	// read, write and remove a body (to tamper with it).
	read   func(t testing.TB, name string) []byte
	write  func(t testing.TB, name string, b []byte)
	remove func(t testing.TB, name string)
}

// forEachBackend runs test against SQLite, against Postgres with S3 and
// against Postgres with a local object directory, each with fresh state.
func forEachBackend(t *testing.T, test func(t *testing.T, b *backend)) {
	for _, name := range []string{"sqlite", "postgres-s3", "postgres-dir"} {
		t.Run(name, func(t *testing.T) { test(t, newBackend(t, name)) })
	}
}

func newBackend(t testing.TB, name string) *backend {
	switch name {
	case "sqlite":
		return sqliteBackend(t)
	case "postgres-s3":
		return pgBackend(t, newS3Objects(t, newS3Config(t)))
	case "postgres-dir":
		o, err := NewLocalObjects(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		o.noSync = true
		return pgBackend(t, o)
	}
	t.Fatalf("no backend %s", name)
	return nil
}

func sqliteBackend(t testing.TB) *backend {
	dir := t.TempDir()
	path := func(t testing.TB, name string) string {
		p, ok := blobFiles(t, dir)[name]
		if !ok {
			t.Fatalf("no blob %s", name)
		}
		return p
	}
	return &backend{
		name:   "sqlite",
		shares: true,
		open:   func(t testing.TB, opts Options) Forensics { return openT(t, dir, opts) },
		tryOpen: func(opts Options) (Forensics, error) {
			s, err := Open(dir, opts)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		bodies: func(t testing.TB) []string {
			var out []string
			for a := range blobFiles(t, dir) {
				out = append(out, a)
			}
			sort.Strings(out)
			return out
		},
		partBody: func(t testing.TB, s Forensics, id, name string) string { return partBlob(t, s.(*SQLite), id, name) },
		read: func(t testing.TB, name string) []byte {
			b, err := os.ReadFile(path(t, name))
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		write: func(t testing.TB, name string, b []byte) {
			if err := os.WriteFile(filepath.Join(dir, blobDir, name[:2], name[2:]), b, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		remove: func(t testing.TB, name string) {
			if err := os.Remove(path(t, name)); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func pgBackend(t testing.TB, objects ObjectStore) *backend {
	dsn := newPGDatabase(t)
	name := "postgres-s3"
	if _, ok := objects.(*LocalObjects); ok {
		name = "postgres-dir"
	}
	return &backend{
		name:    name,
		open:    func(t testing.TB, opts Options) Forensics { return openPG(t, dsn, objects, opts) },
		tryOpen: func(opts Options) (Forensics, error) { return openPGErr(dsn, objects, opts) },
		bodies:  func(t testing.TB) []string { return listObjects(t, objects) },
		partBody: func(t testing.TB, s Forensics, id, name string) string {
			var k *string
			if err := s.(*Postgres).pool.QueryRow(bg, `SELECT object FROM capture_parts WHERE capture_id = $1 AND name = $2`, id, name).Scan(&k); err != nil {
				t.Fatal(err)
			}
			return deref(k)
		},
		read: func(t testing.TB, name string) []byte {
			b, err := objects.Get(bg, name)
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		write: func(t testing.TB, name string, b []byte) {
			if err := objects.Put(bg, name, b); err != nil {
				t.Fatal(err)
			}
		},
		remove: func(t testing.TB, name string) {
			if err := objects.Delete(bg, name); err != nil {
				t.Fatal(err)
			}
		},
	}
}

// openPGErr opens a Postgres store on a pool of its own, closing the pool
// when the open fails.
func openPGErr(dsn string, objects ObjectStore, opts Options) (Forensics, error) {
	pool, err := pgxpool.New(bg, dsn)
	if err != nil {
		return nil, err
	}
	s, err := OpenPostgres(bg, pool, objects, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &closingPG{s}, nil
}

// closingPG is a Postgres store whose Close closes its own pool.
type closingPG struct{ *Postgres }

func (c *closingPG) Close() error { c.pool.Close(); return nil }

// listObjects returns the keys of the store's objects.
func listObjects(t testing.TB, o ObjectStore) []string {
	t.Helper()
	var out []string
	if err := o.List(bg, objectPrefix, func(oi ObjectInfo) error { out = append(out, oi.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// closeStore closes a store the shared tests opened.
func closeStore(s Forensics) {
	if c, ok := s.(interface{ Close() error }); ok {
		c.Close()
	}
}

// putAllF stores the captures, failing the test at the first error.
func putAllF(t testing.TB, s Store, caps ...*Capture) {
	t.Helper()
	for _, c := range caps {
		if err := s.Put(bg, c); err != nil {
			t.Fatal(err)
		}
	}
}

func gcOf(s Forensics) func(context.Context) (int, error) {
	return s.(interface {
		GC(context.Context) (int, error)
	}).GC
}
