package capture

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/sqlitedb"
)

// partData returns the parts.data value of a part (nil when NULL).
func partData(t testing.TB, s *SQLite, id, name string) []byte {
	t.Helper()
	var d []byte
	if err := s.rdb.QueryRow(`SELECT data FROM parts WHERE capture_id = ? AND name = ?`, id, name).Scan(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

func countRows(t testing.TB, s *SQLite, q string, args ...any) int {
	t.Helper()
	var n int
	if err := s.rdb.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// dbFiles returns the database and its WAL, concatenated: what someone
// holding the disk can read of the metadata.
func dbFiles(t testing.TB, dir string) []byte {
	t.Helper()
	var out []byte
	for _, name := range []string{dbName, dbName + "-wal"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

func encOpts(t testing.TB, enc bool) Options {
	if !enc {
		return Options{}
	}
	return Options{KeyFile: writeKey(t, t.TempDir(), 0o600, hexKey(5))}
}

func TestInlineRoundTrip(t *testing.T) {
	for _, enc := range []bool{false, true} {
		t.Run(fmt.Sprint("encrypted=", enc), func(t *testing.T) {
			dir := t.TempDir()
			opts := encOpts(t, enc)
			s := openDurable(t, dir, opts)
			text := strings.Repeat("INLINE-PLAINTEXT compressible line. ", 150) // 5.4 KiB
			c := execCapture(7)
			c.Parts = append(c.Parts, Part{Name: "output.0", ContentType: "text/plain", Data: []byte(text)})
			if err := s.Put(bg, c); err != nil {
				t.Fatal(err)
			}
			if n := len(blobFiles(t, dir)); n != 0 {
				t.Fatalf("%d blob files for an all-inline capture", n)
			}
			if n := countRows(t, s, `SELECT count(*) FROM blobs`); n != 0 {
				t.Fatalf("%d blob rows for an all-inline capture", n)
			}
			check := func(s *SQLite, when string) {
				got, err := s.Get(bg, c.ID)
				if err != nil {
					t.Fatalf("%s: %v", when, err)
				}
				if len(got.Parts) != len(c.Parts) || got.Meta["profile"] != "default" {
					t.Fatalf("%s: %+v", when, got)
				}
				for i, want := range c.Parts {
					p := got.Parts[i]
					sum := sha256.Sum256(want.Data)
					if p.Name != want.Name || p.ContentType != want.ContentType || !bytes.Equal(p.Data, want.Data) || p.Data == nil ||
						p.Size != int64(len(want.Data)) || p.SHA256 != hex.EncodeToString(sum[:]) || p.SHA256 != want.SHA256 {
						t.Fatalf("%s: part %d: %+v, want %+v", when, i, p, want)
					}
				}
			}
			check(s, "after Put")
			// Stored in the blob format: sealed with a key, deflated when
			// that is smaller.
			for _, p := range c.Parts {
				v := partData(t, s, c.ID, p.Name)
				if partBlob(t, s, c.ID, p.Name) != "" || len(v) < headerLen || string(v[:4]) != blobMagic {
					t.Fatalf("part %s is not inline: %q", p.Name, v)
				}
				if sealed := v[5]&flagSealed != 0; sealed != enc {
					t.Fatalf("part %s: sealed %v", p.Name, sealed)
				}
			}
			if v := partData(t, s, c.ID, "output.0"); v[5]&flagDeflate == 0 || len(v) > len(text)/4 {
				t.Fatalf("the text part is stored in %d bytes, flags %#x: not compressed", len(v), v[5])
			}
			if l, _, err := s.List(bg, Filter{}); err != nil || len(l) != 1 || len(l[0].Parts) != len(c.Parts) || l[0].Parts[4].Data != nil ||
				l[0].Parts[4].Size != int64(len(text)) || l[0].Parts[4].SHA256 != c.Parts[4].SHA256 {
				t.Fatalf("List: %v %+v", err, l)
			}
			if enc {
				// Nothing on disk shows the plaintext, not even deflated
				// (the seal covers the compressed payload).
				if _, err := s.wdb.Exec(`PRAGMA wal_checkpoint(FULL)`); err != nil {
					t.Fatal(err)
				}
				for p, b := range allFiles(t, dir) {
					for _, needle := range []string{"INLINE-PLAINTEXT", "print(json.dumps", "out 000007"} {
						if bytes.Contains(b, []byte(needle)) {
							t.Errorf("%s holds %q", p, needle)
						}
					}
				}
			}
			s.Close()
			check(openDurable(t, dir, opts), "after reopening")
		})
	}
}

func TestInlineThreshold(t *testing.T) {
	for _, enc := range []bool{false, true} {
		t.Run(fmt.Sprint("encrypted=", enc), func(t *testing.T) {
			dir := t.TempDir()
			s := openT(t, dir, encOpts(t, enc))
			at, over := randomBytes(inlineMax, 11), randomBytes(inlineMax+1, 12)
			c := &Capture{Kind: "exec", Tenant: "acme", Parts: []Part{{Name: "at", Data: at}, {Name: "over", Data: over}}}
			if err := s.Put(bg, c); err != nil {
				t.Fatal(err)
			}
			if partBlob(t, s, c.ID, "at") != "" || partData(t, s, c.ID, "at") == nil {
				t.Fatalf("a part of exactly %d bytes is not inline", inlineMax)
			}
			if partBlob(t, s, c.ID, "over") == "" || partData(t, s, c.ID, "over") != nil {
				t.Fatalf("a part of %d bytes is not a blob", inlineMax+1)
			}
			if n := len(blobFiles(t, dir)); n != 1 {
				t.Fatalf("%d blob files, want 1", n)
			}
			got, err := s.Get(bg, c.ID)
			if err != nil || !bytes.Equal(got.Part("at").Data, at) || !bytes.Equal(got.Part("over").Data, over) {
				t.Fatalf("round trip: %v", err)
			}
		})
	}
}

// TestRemovalWipesInlineData: after Erase, Delete or a retention sweep the
// inline bytes (and the URL in Meta) are in neither the database file nor
// its WAL; after an Erase interrupted between its commit and the wipe, GC
// wipes them. The store is unencrypted, the worst case: the bytes would be
// there in clear.
func TestRemovalWipesInlineData(t *testing.T) {
	for _, how := range []string{"erase", "delete", "sweep", "erase-interrupted"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			s := openT(t, dir, Options{})
			// Random bytes do not deflate, so they are stored as they are,
			// each with a marker: one part fits its row's page, one spills
			// into overflow pages.
			mark := func(name string, n int, seed uint64) []byte {
				b := randomBytes(n, seed)
				copy(b, "SECRET-"+name+"-"+how)
				copy(b[n-40:], "SECRET-"+name+"-END-"+how)
				return b
			}
			small, big := mark("SMALL", 200, 21), mark("BIG", inlineMax, 22)
			t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			c := &Capture{Kind: "exec", Tenant: "acme", CreatedAt: t0, Retention: time.Hour,
				Meta:  map[string]string{"url": "http://pages.test/?token=SECRET-URL-" + how},
				Parts: []Part{{Name: "code", Data: small}, {Name: "stdout", Data: big}, {Name: "stdin", Data: []byte{}}}}
			other := &Capture{Kind: "exec", Tenant: "acme", Parts: []Part{{Name: "stdout", Data: []byte("KEPT-OUTPUT " + how)}}}
			for _, x := range []*Capture{c, other} {
				if err := s.Put(bg, x); err != nil {
					t.Fatal(err)
				}
			}
			needles := []string{"SECRET-SMALL-" + how, "SECRET-SMALL-END-" + how, "SECRET-BIG-" + how, "SECRET-BIG-END-" + how, "SECRET-URL-" + how}
			before := dbFiles(t, dir)
			for _, n := range needles {
				if !bytes.Contains(before, []byte(n)) {
					t.Fatalf("before the removal, %q is not in the database files: the test does not test", n)
				}
			}
			switch how {
			case "erase-interrupted":
				crashAt(t, "erase-committed")
				if err := s.Erase(bg, c.ID, "rev", "test"); !errors.Is(err, errCrash) {
					t.Fatalf("Erase: %v", err)
				}
				noCrash()
				if !bytes.Contains(dbFiles(t, dir), []byte(needles[0])) {
					t.Fatal("the crash point is after the wipe: the test does not test")
				}
				if _, err := s.GC(bg); err != nil {
					t.Fatal(err)
				}
			case "erase":
				if err := s.Erase(bg, c.ID, "rev", "test"); err != nil {
					t.Fatal(err)
				}
				g, err := s.Get(bg, c.ID)
				if err != nil || g.Erased == nil || len(g.Parts) != 3 || g.Meta != nil {
					t.Fatalf("tombstone: %v %+v", err, g)
				}
				for i, p := range g.Parts {
					if p.Data != nil || p.Size != int64(len(c.Parts[i].Data)) || p.SHA256 != c.Parts[i].SHA256 {
						t.Fatalf("tombstone part: %+v", p)
					}
				}
				if n := countRows(t, s, `SELECT count(*) FROM parts WHERE capture_id = ? AND (data IS NOT NULL OR blob IS NOT NULL)`, c.ID); n != 0 {
					t.Fatalf("%d parts of the tombstone keep content", n)
				}
			case "delete":
				if err := s.Delete(bg, c.ID); err != nil {
					t.Fatal(err)
				}
			case "sweep":
				if sw, err := s.Sweep(bg, t0.Add(2*time.Hour)); err != nil || len(sw) != 1 || sw[0].ID != c.ID {
					t.Fatalf("sweep: %v %+v", err, sw)
				}
			}
			after := dbFiles(t, dir)
			for _, n := range needles {
				if bytes.Contains(after, []byte(n)) {
					t.Errorf("after %s, %q is still in the database files", how, n)
				}
			}
			if st, err := os.Stat(filepath.Join(dir, dbName+"-wal")); err == nil && st.Size() != 0 {
				t.Errorf("the WAL holds %d bytes after %s", st.Size(), how)
			}
			// The other capture is intact, and the store goes on.
			if g, err := s.Get(bg, other.ID); err != nil || string(g.Part("stdout").Data) != "KEPT-OUTPUT "+how {
				t.Fatalf("the other capture: %v", err)
			}
			if err := s.Put(bg, execCapture(1)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.GC(bg); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMixedInlineAndBlob: a capture with inline parts and a blob shared
// with another capture; references, erasure, holds and GC treat only the
// blob as a blob.
func TestMixedInlineAndBlob(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	shared := randomBytes(inlineMax*2, 31)
	a := fetchCapture("acme", shared, "a's text")
	b := fetchCapture("acme", shared, "b's text")
	putAll(t, s, a, b)
	addr := partBlob(t, s, a.ID, "raw")
	if addr == "" || addr != partBlob(t, s, b.ID, "raw") || blobRefs(t, s, addr) != 2 {
		t.Fatalf("shared raw blob %q, refs %d", addr, blobRefs(t, s, addr))
	}
	if n := countRows(t, s, `SELECT count(*) FROM blobs`); n != 1 {
		t.Fatalf("%d blob rows, want 1: inline parts count as blobs", n)
	}
	if n := len(blobFiles(t, dir)); n != 1 {
		t.Fatalf("%d blob files, want 1", n)
	}
	if n, err := s.GC(bg); err != nil || n != 0 {
		t.Fatalf("GC: %d %v", n, err)
	}
	// A held capture keeps its inline parts.
	if err := s.SetHold(bg, a.ID, true, "legal", "case"); err != nil {
		t.Fatal(err)
	}
	if err := s.Erase(bg, a.ID, "rev", ""); !errors.Is(err, ErrHeld) {
		t.Fatalf("Erase of a held capture: %v", err)
	}
	if g, err := s.Get(bg, a.ID); err != nil || string(g.Part("returned.json").Data) != "a's text" {
		t.Fatalf("held capture: %v", err)
	}
	if err := s.SetHold(bg, a.ID, false, "legal", "closed"); err != nil {
		t.Fatal(err)
	}
	if err := s.Erase(bg, a.ID, "rev", ""); err != nil {
		t.Fatal(err)
	}
	if blobRefs(t, s, addr) != 1 || len(blobFiles(t, dir)) != 1 {
		t.Fatal("erasing a lost the blob b shares")
	}
	g, err := s.Get(bg, b.ID)
	if err != nil || !bytes.Equal(g.Part("raw").Data, shared) || string(g.Part("returned.json").Data) != "b's text" ||
		!strings.HasPrefix(string(g.Part("headers").Data), "HTTP 200") {
		t.Fatalf("b: %v", err)
	}
	if err := s.Erase(bg, b.ID, "rev", ""); err != nil {
		t.Fatal(err)
	}
	if n := len(blobFiles(t, dir)); n != 0 {
		t.Fatalf("%d blob files after erasing both", n)
	}
	if n := countRows(t, s, `SELECT count(*) FROM blobs`); n != 0 {
		t.Fatalf("%d blob rows after erasing both", n)
	}
	if n, err := s.GC(bg); err != nil || n != 0 {
		t.Fatalf("GC: %d %v", n, err)
	}
}

// TestInterruptedInlinePut: a Put of inline parts interrupted before its
// commit leaves nothing, neither rows nor files.
func TestInterruptedInlinePut(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	for _, point := range []string{"blobs-synced", "before-commit"} {
		crashAt(t, point)
		c := execCapture(3)
		if err := s.Put(bg, c); !errors.Is(err, errCrash) {
			t.Fatalf("%s: Put = %v", point, err)
		}
		noCrash()
		if _, err := s.Get(bg, c.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: an interrupted Put is visible: %v", point, err)
		}
		if n := countRows(t, s, `SELECT (SELECT count(*) FROM parts) + (SELECT count(*) FROM captures) + (SELECT count(*) FROM blobs)`); n != 0 {
			t.Fatalf("%s: %d rows left", point, n)
		}
	}
	if n := len(blobFiles(t, dir)) + tmpFiles(t, dir); n != 0 {
		t.Fatalf("%d files left", n)
	}
}

// TestTamperedInlineDetected: an inline value altered, moved to another
// part or capture, or sealed under another key does not read as content.
func TestTamperedInlineDetected(t *testing.T) {
	for _, enc := range []bool{false, true} {
		t.Run(fmt.Sprint("encrypted=", enc), func(t *testing.T) {
			s := openT(t, t.TempDir(), encOpts(t, enc))
			a := &Capture{Kind: "exec", Parts: []Part{{Name: "code", Data: []byte("print('same code')")}, {Name: "stdout", Data: []byte("a's output")}}}
			b := &Capture{Kind: "exec", Parts: []Part{{Name: "code", Data: []byte("print('same code')")}, {Name: "stdout", Data: []byte("b's output")}}}
			putAll(t, s, a, b)
			orig := partData(t, s, a.ID, "stdout")
			set := func(id, name string, v []byte) {
				t.Helper()
				if _, err := s.wdb.Exec(`UPDATE parts SET data = ? WHERE capture_id = ? AND name = ?`, v, id, name); err != nil {
					t.Fatal(err)
				}
			}
			for name, alter := range map[string]func([]byte) []byte{
				"flip last byte": func(v []byte) []byte { v[len(v)-1] ^= 1; return v },
				"truncate":       func(v []byte) []byte { return v[:len(v)-3] },
				"empty":          func(v []byte) []byte { return []byte{} },
				"other header":   func(v []byte) []byte { v[5] ^= flagSealed; return v },
				"b's value":      func([]byte) []byte { return partData(t, s, b.ID, "stdout") },
			} {
				set(a.ID, "stdout", alter(bytes.Clone(orig)))
				if _, err := s.Get(bg, a.ID); !errors.Is(err, errCorrupt) {
					t.Errorf("%s: Get = %v, want errCorrupt", name, err)
				}
			}
			set(a.ID, "stdout", orig)
			if g, err := s.Get(bg, a.ID); err != nil || string(g.Part("stdout").Data) != "a's output" {
				t.Fatalf("restored: %v", err)
			}
			// The same content under another capture's seal: the seal is
			// bound to the capture and the part.
			bCode := partData(t, s, b.ID, "code")
			set(a.ID, "code", bCode)
			_, err := s.Get(bg, a.ID)
			if enc && !errors.Is(err, errCorrupt) {
				t.Errorf("b's sealed code in a: Get = %v, want errCorrupt", err)
			}
			if !enc && err != nil {
				t.Errorf("unencrypted, equal content is equal: %v", err)
			}
			// A part cannot be both inline and a blob.
			if _, err := s.wdb.Exec(`UPDATE parts SET blob = ? WHERE capture_id = ? AND name = 'stdout'`, strings.Repeat("a", 64), a.ID); err == nil {
				t.Error("a part took a blob beside its inline data")
			}
		})
	}
	// A value sealed with another key names the key.
	ka, kb := writeKey(t, t.TempDir(), 0o600, hexKey(1)), writeKey(t, t.TempDir(), 0o600, hexKey(2))
	sa, sb := openT(t, t.TempDir(), Options{KeyFile: ka}), openT(t, t.TempDir(), Options{KeyFile: kb})
	id := newID()
	ca, cb := &Capture{ID: id, Kind: "exec", Parts: []Part{{Name: "stdout", Data: []byte("x")}}}, &Capture{ID: id, Kind: "exec", Parts: []Part{{Name: "stdout", Data: []byte("x")}}}
	if err := sa.Put(bg, ca); err != nil {
		t.Fatal(err)
	}
	if err := sb.Put(bg, cb); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.wdb.Exec(`UPDATE parts SET data = ? WHERE capture_id = ?`, partData(t, sa, id, "stdout"), id); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Get(bg, id); !errors.Is(err, errKey) || !strings.Contains(err.Error(), sa.keys.fingerprint) {
		t.Fatalf("a value sealed with another key: %v", err)
	}
}

// schemaV1 is the schema of captures.db before inline parts (version 1).
var schemaV1 = []string{
	`CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)`,
	`CREATE TABLE captures (
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
	`CREATE INDEX captures_created ON captures (created_at, id)`,
	`CREATE INDEX captures_tenant ON captures (tenant, created_at, id)`,
	`CREATE INDEX captures_expires ON captures (expires_at) WHERE expires_at > 0`,
	`CREATE TABLE parts (
		capture_id TEXT NOT NULL REFERENCES captures (id) ON DELETE CASCADE,
		idx INTEGER NOT NULL,
		name TEXT NOT NULL,
		content_type TEXT NOT NULL,
		size INTEGER NOT NULL,
		sha256 TEXT NOT NULL,
		blob TEXT,
		PRIMARY KEY (capture_id, idx),
		UNIQUE (capture_id, name))`,
	`CREATE INDEX parts_blob ON parts (blob) WHERE blob IS NOT NULL`,
	`CREATE TABLE blobs (addr TEXT PRIMARY KEY, refs INTEGER NOT NULL CHECK (refs >= 0), created_at INTEGER NOT NULL)`,
	`CREATE TABLE tenant_holds (tenant TEXT PRIMARY KEY, at INTEGER NOT NULL, by TEXT NOT NULL, reason TEXT NOT NULL)`,
}

// TestMigratesSchemaV1 opens a store written before inline parts: a
// version 1 database whose parts are all blob files, small ones too.
func TestMigratesSchemaV1(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, blobDir), 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", sqlitedb.DSN(filepath.Join(dir, dbName), []string{"journal_mode(WAL)"}, false))
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlitedb.Migrate(bg, db, 1, schemaV1); err != nil {
		t.Fatal(err)
	}
	old := &Capture{ID: newID(), Kind: "exec", Tenant: "acme", KeyID: "k1", CreatedAt: time.Date(2029, 5, 1, 0, 0, 0, 0, time.UTC),
		Parts: []Part{{Name: "code", ContentType: "text/x-python", Data: []byte("print('old')")}, {Name: "stdout", Data: []byte("old\n")}, {Name: "stderr", Data: []byte{}}}}
	mustExec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(q, err)
		}
	}
	mustExec(`INSERT INTO settings VALUES ('encryption', 'none')`)
	mustExec(`INSERT INTO captures (id, kind, tenant, key_id, request_id, created_at, retention, expires_at, meta, state) VALUES (?, 'exec', 'acme', 'k1', '', ?, 0, 0, NULL, 'live')`,
		old.ID, old.CreatedAt.UnixNano())
	for i, p := range old.Parts {
		sum := sha256.Sum256(p.Data)
		addr := hex.EncodeToString(sum[:])
		old.Parts[i].SHA256 = addr
		file, err := (*keys)(nil).encodeBlob(p.Data, addr)
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(dir, blobDir, addr[:2]), 0o700)
		if err := os.WriteFile(filepath.Join(dir, blobDir, addr[:2], addr[2:]), file, 0o600); err != nil {
			t.Fatal(err)
		}
		mustExec(`INSERT INTO blobs VALUES (?, 1, 1)`, addr)
		mustExec(`INSERT INTO parts (capture_id, idx, name, content_type, size, sha256, blob) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			old.ID, i, p.Name, p.ContentType, len(p.Data), addr, addr)
	}
	db.Close()

	s := openT(t, dir, Options{})
	var version int
	if err := s.rdb.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != schemaVersion {
		t.Fatalf("user_version %d, want %d: %v", version, schemaVersion, err)
	}
	g, err := s.Get(bg, old.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range old.Parts {
		if !bytes.Equal(g.Parts[i].Data, p.Data) || g.Parts[i].SHA256 != p.SHA256 {
			t.Fatalf("old part %s: %+v", p.Name, g.Parts[i])
		}
	}
	// New captures go inline beside the old blob ones.
	c := execCapture(1)
	if err := s.Put(bg, c); err != nil {
		t.Fatal(err)
	}
	if partData(t, s, c.ID, "code") == nil {
		t.Fatal("a new small part is not inline in a migrated store")
	}
	if g, err := s.Get(bg, c.ID); err != nil || !bytes.Equal(g.Part("stdout").Data, c.Part("stdout").Data) {
		t.Fatalf("new capture: %v", err)
	}
	// The old capture's blobs go with its erasure, as before.
	if err := s.Erase(bg, old.ID, "rev", ""); err != nil {
		t.Fatal(err)
	}
	if n := len(blobFiles(t, dir)); n != 0 {
		t.Fatalf("%d blob files after erasing the old capture", n)
	}
	// Opening again finds the column there.
	s.Close()
	s = openT(t, dir, Options{})
	if g, err := s.Get(bg, c.ID); err != nil || !bytes.Equal(g.Part("code").Data, c.Part("code").Data) {
		t.Fatalf("after reopening: %v", err)
	}
	// A newer database is refused, and not altered.
	if _, err := s.wdb.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(dir, Options{noSync: true}); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open of a newer database: %v", err)
	}
}

// TestExecCaptureIsAllInline: what BenchmarkPutSmallExec stores writes no
// blob file.
func TestExecCaptureIsAllInline(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	for i := range 3 {
		if err := s.Put(context.Background(), execCapture(i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(blobFiles(t, dir)); n != 0 {
		t.Fatalf("%d blob files", n)
	}
}
