package store

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/pgtest"
)

// pg is the PostgreSQL server of this package's tests; each test gets a
// database of its own on it.
var pg *pgtest.Server

func TestMain(m *testing.M) {
	var err error
	if pg, err = pgtest.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "store tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	pg.Close()
	os.Exit(code)
}

var dbSeq atomic.Int64

// newPGDatabase returns the DSN of a fresh, empty database.
func newPGDatabase(t testing.TB) string {
	t.Helper()
	dsn, err := pg.NewDatabase(context.Background(), fmt.Sprintf("store_%d", dbSeq.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// beatLongEnough makes owner a member of a shared store whose beats have
// gone through for its DeadAfter (shortened), so that its Recover takes
// the work of owners that are not members; the SQLite store needs nothing.
func beatLongEnough(t *testing.T, s Store, owner string) {
	t.Helper()
	pg, ok := s.(*Postgres)
	if !ok {
		return
	}
	pg.DeadAfter = 100 * time.Millisecond
	if err := pg.Beat(context.Background(), Member{Owner: owner, Replica: "r"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pg.DeadAfter + 10*time.Millisecond)
}

// backend is one Store implementation under test; open, called again,
// opens the same state (after the earlier one was closed).
type backend struct {
	name string
	open func(t *testing.T) Store
}

// forEachBackend runs test against the SQLite store and against the
// PostgreSQL one, each with fresh state.
func forEachBackend(t *testing.T, test func(t *testing.T, b backend)) {
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		test(t, backend{"sqlite", func(t *testing.T) Store { return open(t, dir) }})
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := newPGDatabase(t)
		test(t, backend{"postgres", func(t *testing.T) Store { return openPG(t, dsn) }})
	})
}

func openPG(t testing.TB, dsn string) *Postgres {
	t.Helper()
	s, err := OpenPostgres(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
