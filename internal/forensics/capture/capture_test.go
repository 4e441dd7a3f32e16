package capture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var bg = context.Background()

// openT opens a store without fsync (the machine's fsync can take tens
// of milliseconds); openDurable opens one as the service does.
func openT(t testing.TB, dir string, opts Options) *SQLite {
	t.Helper()
	opts.noSync = !opts.durable
	return openDurable(t, dir, opts)
}

func openDurable(t testing.TB, dir string, opts Options) *SQLite {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// blobFiles lists the blob files under dir by address.
func blobFiles(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	root := filepath.Join(dir, blobDir)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[strings.ReplaceAll(rel, string(filepath.Separator), "")] = p
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func tmpFiles(t testing.TB, dir string) int {
	t.Helper()
	e, err := os.ReadDir(filepath.Join(dir, blobDir, tmpDir))
	if err != nil {
		t.Fatal(err)
	}
	return len(e)
}

func blobRefs(t testing.TB, s *SQLite, addr string) int {
	t.Helper()
	var n int
	if err := s.rdb.QueryRow(`SELECT coalesce((SELECT refs FROM blobs WHERE addr = ?), 0)`, addr).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func partBlob(t testing.TB, s *SQLite, id, name string) string {
	t.Helper()
	var a *string
	if err := s.rdb.QueryRow(`SELECT blob FROM parts WHERE capture_id = ? AND name = ?`, id, name).Scan(&a); err != nil {
		t.Fatal(err)
	}
	if a == nil {
		return ""
	}
	return *a
}

// putAll stores the captures, failing the test at the first error.
func putAll(t testing.TB, s *SQLite, caps ...*Capture) {
	t.Helper()
	for _, c := range caps {
		if err := s.Put(bg, c); err != nil {
			t.Fatal(err)
		}
	}
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func fetchCapture(tenant string, raw []byte, text string) *Capture {
	return &Capture{Kind: "fetch", Tenant: tenant, KeyID: "k1", RequestID: "req-1",
		Meta: map[string]string{"url": "http://pages.test/?token=s3cr3t", "status": "200"},
		Parts: []Part{
			{Name: "raw", ContentType: "application/octet-stream", Data: raw},
			{Name: "headers", ContentType: "text/plain", Data: []byte("HTTP 200 OK\r\nContent-Type: text/html\r\n")},
			{Name: "returned.json", ContentType: "application/json", Data: []byte(text)},
		}}
}

// TestPutGetRoundTrip stores a capture whose raw and text parts are blobs
// and whose headers and empty part are inline.
func TestPutGetRoundTrip(t *testing.T) { forEachBackend(t, testPutGetRoundTrip) }

func testPutGetRoundTrip(t *testing.T, b *backend) {
	s := b.open(t, Options{durable: true})
	raw := append([]byte("\x1f\x8b compressed bytes \x00\xff"), randomBytes(inlineMax, 1)...)
	text := strings.Repeat("Revenue grew. ", 1000)
	c := fetchCapture("acme", raw, text)
	c.Parts = append(c.Parts, Part{Name: "empty", ContentType: "text/plain"})
	c.Retention = time.Hour
	if err := s.Put(bg, c); err != nil {
		t.Fatal(err)
	}
	if !validID(c.ID) || c.CreatedAt.IsZero() || !c.ExpiresAt.Equal(c.CreatedAt.Add(time.Hour)) {
		t.Fatalf("Put did not assign id, time and expiry: %+v", c)
	}
	got, err := s.Get(bg, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tenant != "acme" || got.Kind != "fetch" || got.KeyID != "k1" || got.RequestID != "req-1" || got.Meta["url"] != c.Meta["url"] ||
		!got.CreatedAt.Equal(c.CreatedAt) || !got.ExpiresAt.Equal(c.ExpiresAt) || got.Retention != time.Hour ||
		got.Erased != nil || got.Hold != nil || got.TenantHold != nil {
		t.Fatalf("metadata: %+v", got)
	}
	if len(got.Parts) != 4 {
		t.Fatalf("%d parts", len(got.Parts))
	}
	for i, want := range c.Parts {
		p := got.Parts[i]
		if p.Name != want.Name || p.ContentType != want.ContentType || !bytes.Equal(p.Data, want.Data) || p.Size != int64(len(want.Data)) ||
			p.SHA256 != want.SHA256 || len(p.SHA256) != 64 {
			t.Fatalf("part %d: got %s %s %d %s, want %s %s %d %s", i, p.Name, p.ContentType, p.Size, p.SHA256, want.Name, want.ContentType, want.Size, want.SHA256)
		}
	}
	if p := got.Part("empty"); p == nil || p.Data == nil || len(p.Data) != 0 {
		t.Fatalf("empty part: %+v", p)
	}
	for name, blob := range map[string]bool{"raw": true, "returned.json": true, "headers": false, "empty": false} {
		if got := b.partBody(t, s, c.ID, name) != ""; got != blob {
			t.Fatalf("part %s: stored as a blob: %v, want %v", name, got, blob)
		}
	}
	// The text part is stored compressed, the random one as it is.
	if n := len(b.read(t, b.partBody(t, s, c.ID, "returned.json"))); n > len(text)/4 {
		t.Fatalf("text blob not compressed: %v", n)
	}
	if _, err := s.Get(bg, newID()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of an unknown id: %v", err)
	}
	if err := s.Put(bg, c); !errors.Is(err, errExists) {
		t.Fatalf("second Put with the same id: %v", err)
	}
	// Survives a reopen.
	closeStore(s)
	s2 := b.open(t, Options{durable: true})
	got, err = s2.Get(bg, c.ID)
	if err != nil || !bytes.Equal(got.Part("raw").Data, raw) {
		t.Fatalf("after reopen: %v", err)
	}
}

func TestRefusesBadNamesAndIDs(t *testing.T) { forEachBackend(t, testRefusesBadNamesAndIDs) }

func testRefusesBadNamesAndIDs(t *testing.T, b *backend) {
	s := b.open(t, Options{})
	before := b.bodies(t)
	for _, name := range []string{"../escape", "a/b", "", ".", "..", "UPPER", string(make([]byte, 65)), strings.Repeat("a", 65)} {
		if err := s.Put(bg, &Capture{Kind: "fetch", Parts: []Part{{Name: name, Data: []byte("x")}}}); err == nil {
			t.Errorf("part name %q accepted", name)
		}
	}
	if err := s.Put(bg, &Capture{Kind: "fetch", Parts: []Part{{Name: "a"}, {Name: "a"}}}); err == nil {
		t.Error("duplicate part names accepted")
	}
	if err := s.Put(bg, &Capture{ID: "../../etc", Kind: "fetch"}); err == nil {
		t.Error("bad id accepted")
	}
	if err := s.Put(bg, &Capture{Kind: "fetch", Retention: -time.Second}); err == nil {
		t.Error("negative retention accepted")
	}
	for _, id := range []string{"../x", "cap_zz", "cap_" + strings.Repeat("0", 31), "cap_" + strings.Repeat("A", 32)} {
		if _, err := s.Get(bg, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q) = %v, want ErrNotFound", id, err)
		}
		if err := s.Delete(bg, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Delete(%q) = %v, want ErrNotFound", id, err)
		}
		if err := s.Erase(bg, id, "rev", ""); !errors.Is(err, ErrNotFound) {
			t.Errorf("Erase(%q) = %v, want ErrNotFound", id, err)
		}
	}
	// The refusals wrote nothing.
	if after := b.bodies(t); len(after) != len(before) {
		t.Fatalf("refused puts left %d blob files", len(after)-len(before))
	}
	if l, _, err := s.List(bg, Filter{}); err != nil || len(l) != 0 {
		t.Fatalf("refused puts left captures: %v %v", l, err)
	}
}

func TestDedupSharesOneBlob(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{inlineMax: -1})
	raw := randomBytes(10000, 2)
	a, b := fetchCapture("acme", raw, "page A"), fetchCapture("other", raw, "page B")
	putAll(t, s, a, b)
	ra, rb := partBlob(t, s, a.ID, "raw"), partBlob(t, s, b.ID, "raw")
	if ra != rb || ra == "" {
		t.Fatalf("equal raw bodies have blobs %s and %s", ra, rb)
	}
	if n := blobRefs(t, s, ra); n != 2 {
		t.Fatalf("shared blob has %d references, want 2", n)
	}
	// raw (shared), headers (shared), two returned texts.
	if n := len(blobFiles(t, dir)); n != 4 {
		t.Fatalf("%d blob files, want 4", n)
	}
	// Equal parts within one capture share too.
	c := &Capture{Kind: "exec", Parts: []Part{{Name: "stdout", Data: []byte("same")}, {Name: "stderr", Data: []byte("same")}}}
	if err := s.Put(bg, c); err != nil {
		t.Fatal(err)
	}
	if n := blobRefs(t, s, partBlob(t, s, c.ID, "stdout")); n != 2 {
		t.Fatalf("in-capture duplicate: %d references", n)
	}
	if err := s.Delete(bg, c.ID); err != nil {
		t.Fatal(err)
	}
	if n := len(blobFiles(t, dir)); n != 4 {
		t.Fatalf("%d blob files after deleting the exec capture, want 4", n)
	}
}

func TestEraseLeavesTombstoneAndRemovesUnsharedBlobs(t *testing.T) {
	forEachBackend(t, testEraseLeavesTombstoneAndRemovesUnsharedBlobs)
}

func testEraseLeavesTombstoneAndRemovesUnsharedBlobs(t *testing.T, be *backend) {
	s := be.open(t, Options{inlineMax: -1})
	raw := randomBytes(4000, 3)
	a, b := fetchCapture("acme", raw, "page A"), fetchCapture("acme", raw, "page B")
	putAllF(t, s, a, b)
	rawBlob, aText := be.partBody(t, s, a.ID, "raw"), be.partBody(t, s, a.ID, "returned.json")
	if err := s.Erase(bg, a.ID, "", "no by"); err == nil {
		t.Fatal("Erase without by accepted")
	}
	if err := s.Erase(bg, a.ID, "reviewer@acme", "GDPR request 42"); err != nil {
		t.Fatal(err)
	}
	files := be.bodies(t)
	if slices.Contains(files, aText) {
		t.Fatal("the erased capture's unshared blob is still on disk")
	}
	if slices.Contains(files, rawBlob) != be.shares {
		t.Fatalf("the erased capture's raw blob (shared with a live capture: %v) is kept: %v", be.shares, !be.shares)
	}
	got, err := s.Get(bg, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Erased == nil || got.Erased.By != "reviewer@acme" || got.Erased.Reason != "GDPR request 42" || got.Erased.At.IsZero() {
		t.Fatalf("tombstone: %+v", got.Erased)
	}
	if got.Meta != nil || got.Tenant != "acme" || len(got.Parts) != 3 {
		t.Fatalf("tombstone metadata: %+v", got)
	}
	for _, p := range got.Parts {
		if p.Data != nil || p.SHA256 == "" || (p.Name == "raw" && p.Size != int64(len(raw))) {
			t.Fatalf("tombstone part: %+v", p)
		}
	}
	if err := s.Erase(bg, a.ID, "reviewer", ""); !errors.Is(err, ErrErased) {
		t.Fatalf("second Erase: %v", err)
	}
	if err := s.SetHold(bg, a.ID, true, "legal", ""); !errors.Is(err, ErrErased) {
		t.Fatalf("hold on a tombstone: %v", err)
	}
	// The other capture is intact; erasing it removes the last reference.
	if g, err := s.Get(bg, b.ID); err != nil || !bytes.Equal(g.Part("raw").Data, raw) {
		t.Fatalf("the sharing capture: %v", err)
	}
	if err := s.Erase(bg, b.ID, "reviewer", ""); err != nil {
		t.Fatal(err)
	}
	if n := len(be.bodies(t)); n != 0 {
		t.Fatalf("%d blob files after erasing every capture", n)
	}
	var rows int
	switch s := s.(type) {
	case *SQLite:
		s.rdb.QueryRow(`SELECT count(*) FROM blobs`).Scan(&rows)
	case *Postgres:
		s.pool.QueryRow(bg, `SELECT (SELECT count(*) FROM capture_trash) + (SELECT count(*) FROM capture_parts WHERE object IS NOT NULL OR data IS NOT NULL)`).Scan(&rows)
	}
	if rows != 0 {
		t.Fatalf("%d blob rows left", rows)
	}
	// A tombstone is listed, and can be hard-deleted.
	if l, _, err := s.List(bg, Filter{Tenant: "acme"}); err != nil || len(l) != 2 || l[0].Erased == nil {
		t.Fatalf("List of tombstones: %v %+v", err, l)
	}
	if err := s.Delete(bg, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(bg, a.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
}

func TestDeleteIsHardAndRefusesHeld(t *testing.T) { forEachBackend(t, testDeleteIsHardAndRefusesHeld) }

func testDeleteIsHardAndRefusesHeld(t *testing.T, b *backend) {
	s := b.open(t, Options{})
	c := fetchCapture("acme", []byte("raw"), "text")
	if err := s.Put(bg, c); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHold(bg, c.ID, true, "legal", "case 7"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(bg, c.ID); !errors.Is(err, ErrHeld) {
		t.Fatalf("Delete of a held capture: %v", err)
	}
	if err := s.Erase(bg, c.ID, "rev", ""); !errors.Is(err, ErrHeld) {
		t.Fatalf("Erase of a held capture: %v", err)
	}
	if err := s.SetHold(bg, c.ID, false, "legal", "case closed"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(bg, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(bg, c.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if err := s.Delete(bg, c.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Delete: %v", err)
	}
	if n := len(b.bodies(t)); n != 0 {
		t.Fatalf("%d blob files after Delete", n)
	}
}

func TestSweepRetentionAndHolds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		t.Run("blobs", func(t *testing.T) { testSweepRetentionAndHolds(t, newBackend(t, b.name), false) })
		t.Run("inline", func(t *testing.T) { testSweepRetentionAndHolds(t, newBackend(t, b.name), true) })
	})
}

func testSweepRetentionAndHolds(t *testing.T, b *backend, inline bool) {
	opts := Options{inlineMax: -1}
	if inline {
		opts.inlineMax = 0
	}
	s := b.open(t, opts)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	put := func(tenant string, ret time.Duration, body string) *Capture {
		c := &Capture{Kind: "fetch", Tenant: tenant, CreatedAt: t0, Retention: ret, Parts: []Part{{Name: "raw", Data: []byte(body)}}}
		if err := s.Put(bg, c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	short := put("acme", time.Hour, "short")        // expires t0+1h
	long := put("acme", 48*time.Hour, "long")       // expires t0+48h
	forever := put("acme", 0, "forever")            // never
	held := put("acme", time.Hour, "held")          // capture hold
	tenantHeld := put("bigco", time.Hour, "tenant") // tenant hold
	erased := put("acme", time.Hour, "erased")      // a tombstone stays
	shared := put("acme", time.Hour, "long")        // shares long's blob
	if err := s.SetHold(bg, held.ID, true, "legal", "case 1"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetTenantHold(bg, "bigco", true, "legal", "case 2"); err != nil {
		t.Fatal(err)
	}
	if err := s.Erase(bg, erased.ID, "rev", ""); err != nil {
		t.Fatal(err)
	}
	// Not yet expired.
	if sw, err := s.Sweep(bg, t0.Add(59*time.Minute)); err != nil || len(sw) != 0 {
		t.Fatalf("early sweep: %v %+v", err, sw)
	}
	sw, err := s.Sweep(bg, t0.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, w := range sw {
		ids = append(ids, w.ID)
		if w.Tenant != "acme" || w.Kind != "fetch" || !w.CreatedAt.Equal(t0) || !w.ExpiresAt.Equal(t0.Add(time.Hour)) {
			t.Fatalf("swept entry: %+v", w)
		}
	}
	slices.Sort(ids)
	want := []string{short.ID, shared.ID}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("swept %v, want %v", ids, want)
	}
	for _, c := range []*Capture{long, forever, held, tenantHeld, erased} {
		if _, err := s.Get(bg, c.ID); err != nil {
			t.Fatalf("capture %s not swept expected, Get: %v", c.Part("raw").Data, err)
		}
	}
	// shared's blob is long's: still there.
	if g, err := s.Get(bg, long.ID); err != nil || string(g.Part("raw").Data) != "long" {
		t.Fatalf("long after sweeping a capture sharing its blob: %v", err)
	}
	// A held tenant's future captures are held too.
	future := put("bigco", time.Minute, "future")
	if g, _ := s.Get(bg, future.ID); g.TenantHold == nil || g.TenantHold.By != "legal" || !g.Held() {
		t.Fatalf("new capture of a held tenant: %+v", g.TenantHold)
	}
	if err := s.Erase(bg, future.ID, "rev", ""); !errors.Is(err, ErrHeld) {
		t.Fatalf("Erase under a tenant hold: %v", err)
	}
	if sw, err := s.Sweep(bg, t0.Add(100*time.Hour)); err != nil || len(sw) != 1 || sw[0].ID != long.ID {
		t.Fatalf("later sweep: %v %+v", err, sw)
	}
	// Lifting the holds lets the next sweep take them.
	if err := s.SetTenantHold(bg, "bigco", false, "legal", "closed"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHold(bg, held.ID, false, "legal", "closed"); err != nil {
		t.Fatal(err)
	}
	sw, err = s.Sweep(bg, t0.Add(100*time.Hour))
	if err != nil || len(sw) != 3 {
		t.Fatalf("sweep after lifting holds: %v %+v", err, sw)
	}
	l, _, err := s.List(bg, Filter{})
	if err != nil || len(l) != 2 {
		t.Fatalf("left: %v %+v", err, l)
	}
	for _, c := range l {
		if c.ID != forever.ID && c.ID != erased.ID {
			t.Fatalf("left %s", c.ID)
		}
	}
	wantFiles := 1 // forever's
	if inline {
		wantFiles = 0
	}
	if n := len(b.bodies(t)); n != wantFiles {
		t.Fatalf("%d blob files left, want %d", n, wantFiles)
	}
	if g, err := s.Get(bg, forever.ID); err != nil || string(g.Part("raw").Data) != "forever" {
		t.Fatalf("forever: %v", err)
	}
}

func TestSweepManyInBatches(t *testing.T) { forEachBackend(t, testSweepManyInBatches) }

func testSweepManyInBatches(t *testing.T, b *backend) {
	defer func(n int) { sweepBatch = n }(sweepBatch)
	sweepBatch = 10
	s := b.open(t, Options{})
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	n := sweepBatch*2 + 7
	for i := range n {
		c := &Capture{Kind: "exec", Tenant: "acme", CreatedAt: t0, Retention: time.Minute, Parts: []Part{{Name: "stdout", Data: []byte(fmt.Sprint(i % 10))}}}
		if err := s.Put(bg, c); err != nil {
			t.Fatal(err)
		}
	}
	sw, err := s.Sweep(bg, t0.Add(time.Hour))
	if err != nil || len(sw) != n {
		t.Fatalf("swept %d of %d: %v", len(sw), n, err)
	}
	if k := len(b.bodies(t)); k != 0 {
		t.Fatalf("%d blob files left", k)
	}
}

func TestListFilterAndCursor(t *testing.T) { forEachBackend(t, testListFilterAndCursor) }

func testListFilterAndCursor(t *testing.T, b *backend) {
	s := b.open(t, Options{})
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var all []*Capture
	for i := range 25 {
		tenant, kind := "acme", "fetch"
		if i%3 == 0 {
			tenant = "other"
		}
		if i%2 == 0 {
			kind = "exec"
		}
		// Pairs share a time: the cursor must break ties by id.
		c := &Capture{Kind: kind, Tenant: tenant, CreatedAt: t0.Add(time.Duration(i/2) * time.Minute), Meta: map[string]string{"i": fmt.Sprint(i)},
			Parts: []Part{{Name: "raw", Data: []byte(fmt.Sprint(i))}}}
		if err := s.Put(bg, c); err != nil {
			t.Fatal(err)
		}
		all = append(all, c)
	}
	collect := func(f Filter) []string {
		var ids []string
		for pages := 0; ; pages++ {
			l, next, err := s.List(bg, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range l {
				if len(c.Parts) != 1 || c.Parts[0].Data != nil || c.Parts[0].SHA256 == "" || c.Meta["i"] == "" {
					t.Fatalf("listed capture: %+v", c)
				}
				ids = append(ids, c.ID)
			}
			if next == "" {
				return ids
			}
			if pages > 100 {
				t.Fatal("cursor loops")
			}
			f.Cursor = next
		}
	}
	want := func(keep func(*Capture) bool) []string {
		var cs []*Capture
		for _, c := range all {
			if keep(c) {
				cs = append(cs, c)
			}
		}
		slices.SortFunc(cs, func(a, b *Capture) int {
			if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
				return c
			}
			return strings.Compare(b.ID, a.ID)
		})
		var ids []string
		for _, c := range cs {
			ids = append(ids, c.ID)
		}
		return ids
	}
	since, until := t0.Add(2*time.Minute), t0.Add(9*time.Minute)
	for name, tc := range map[string]struct {
		f    Filter
		keep func(*Capture) bool
	}{
		"all":          {Filter{Limit: 4}, func(*Capture) bool { return true }},
		"tenant":       {Filter{Tenant: "acme", Limit: 3}, func(c *Capture) bool { return c.Tenant == "acme" }},
		"tenant+kind":  {Filter{Tenant: "acme", Kind: "exec", Limit: 2}, func(c *Capture) bool { return c.Tenant == "acme" && c.Kind == "exec" }},
		"since-until":  {Filter{Since: since, Until: until, Limit: 5}, func(c *Capture) bool { return !c.CreatedAt.Before(since) && c.CreatedAt.Before(until) }},
		"default page": {Filter{}, func(*Capture) bool { return true }},
	} {
		if got, w := collect(tc.f), want(tc.keep); !slices.Equal(got, w) {
			t.Errorf("%s: listed %d %v\nwant %d %v", name, len(got), got, len(w), w)
		}
	}
	if _, _, err := s.List(bg, Filter{Cursor: "garbage"}); err == nil {
		t.Error("a malformed cursor was accepted")
	}
}

func TestTamperedBlobDetected(t *testing.T) { forEachBackend(t, testTamperedBlobDetected) }

func testTamperedBlobDetected(t *testing.T, be *backend) {
	for _, enc := range []bool{false, true} {
		t.Run(fmt.Sprint("encrypted=", enc), func(t *testing.T) {
			be := newBackend(t, be.name)
			opts := Options{inlineMax: -1}
			if enc {
				opts.KeyFile = writeKey(t, t.TempDir(), 0o600, hexKey(1))
			}
			s := be.open(t, opts)
			c := fetchCapture("acme", []byte("raw bytes off the wire"), strings.Repeat("the page text ", 100))
			if err := s.Put(bg, c); err != nil {
				t.Fatal(err)
			}
			path := be.partBody(t, s, c.ID, "returned.json")
			orig := be.read(t, path)
			for name, alter := range map[string]func([]byte) []byte{
				"flip last byte": func(b []byte) []byte { b[len(b)-1] ^= 1; return b },
				"flip a payload byte": func(b []byte) []byte {
					b[len(b)/2] ^= 0x40
					return b
				},
				"truncate":     func(b []byte) []byte { return b[:len(b)-5] },
				"empty":        func(b []byte) []byte { return nil },
				"other header": func(b []byte) []byte { b[5] ^= flagSealed; return b },
			} {
				be.write(t, path, alter(slices.Clone(orig)))
				if _, err := s.Get(bg, c.ID); !errors.Is(err, errCorrupt) {
					t.Errorf("%s: Get = %v, want errCorrupt", name, err)
				}
			}
			// Another blob of the store swapped in.
			be.write(t, path, be.read(t, be.partBody(t, s, c.ID, "raw")))
			if _, err := s.Get(bg, c.ID); !errors.Is(err, errCorrupt) {
				t.Errorf("swapped blob: Get = %v, want errCorrupt", err)
			}
			// A missing blob.
			be.remove(t, path)
			if _, err := s.Get(bg, c.ID); !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), "missing") {
				t.Errorf("missing blob: Get = %v", err)
			}
			if !be.shares {
				return
			}
			// A Put of the same content repairs the blob instead of
			// sharing a damaged one.
			be.write(t, path, []byte("junk"))
			if err := s.Put(bg, fetchCapture("acme", []byte("x"), strings.Repeat("the page text ", 100))); err != nil {
				t.Fatal(err)
			}
			if g, err := s.Get(bg, c.ID); err != nil || g.Part("returned.json").Size != 1400 {
				t.Fatalf("after a repairing Put: %v", err)
			}
		})
	}
}

func TestOpenWithoutKey(t *testing.T) { forEachBackend(t, testOpenWithoutKey) }

func testOpenWithoutKey(t *testing.T, b *backend) {
	plain, err := newBackend(t, b.name).tryOpen(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if plain.(interface{ Encrypted() bool }).Encrypted() {
		t.Fatal("Open without a key file opened an encrypted store")
	}
	closeStore(plain)
	// A store written encrypted does not open without its key.
	s := b.open(t, Options{KeyFile: writeKey(t, t.TempDir(), 0o600, hexKey(2))})
	if err := s.Put(bg, fetchCapture("acme", []byte("r"), "t")); err != nil {
		t.Fatal(err)
	}
	closeStore(s)
	if _, err := b.tryOpen(Options{}); !errors.Is(err, errKey) {
		t.Fatalf("Open of an encrypted store without its key: %v", err)
	}
}

// TestConcurrentPutsErasesAndGets runs with every part a blob, and with
// the small parts (stdout, code) inline and the shared raw a blob.
func TestConcurrentPutsErasesAndGets(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		t.Run("blobs", func(t *testing.T) { testConcurrentPutsErasesAndGets(t, newBackend(t, b.name), false) })
		t.Run("mixed", func(t *testing.T) { testConcurrentPutsErasesAndGets(t, newBackend(t, b.name), true) })
	})
}

func testConcurrentPutsErasesAndGets(t *testing.T, b *backend, inline bool) {
	opts := Options{inlineMax: -1}
	shared := randomBytes(3000, 9)
	if inline {
		opts.inlineMax = 0
		shared = randomBytes(inlineMax+3000, 9)
	}
	s := b.open(t, opts)
	// A second handle on the same directory, as a reviewer's tool would
	// have: the blob lock orders the two as it orders goroutines. (For
	// Postgres: a second replica, with a pool of its own.)
	s2 := b.open(t, opts)
	var mu sync.Mutex
	kept := map[string][]byte{}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	// GC and Sweep run all along: GC sees each new blob before its Put
	// commits, and must not remove it.
	stop := make(chan struct{})
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := gcOf(s2)(bg); err != nil {
				errs <- fmt.Errorf("GC: %w", err)
				return
			}
			if _, err := s.Sweep(bg, time.Now()); err != nil {
				errs <- fmt.Errorf("Sweep: %w", err)
				return
			}
		}
	}()
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := s
			if g%2 == 1 {
				st = s2
			}
			for i := range 12 {
				own := []byte(fmt.Sprintf("goroutine %d capture %d", g, i))
				c := &Capture{Kind: "exec", Tenant: fmt.Sprint("t", g%3), Parts: []Part{{Name: "raw", Data: shared}, {Name: "stdout", Data: own}, {Name: "code", Data: []byte("print(1)")}}}
				if err := st.Put(bg, c); err != nil {
					errs <- err
					return
				}
				got, err := st.Get(bg, c.ID)
				if err != nil || !bytes.Equal(got.Part("raw").Data, shared) {
					errs <- fmt.Errorf("Get after Put: %v", err)
					return
				}
				if i%2 == 0 {
					if err := st.Erase(bg, c.ID, "rev", ""); err != nil {
						errs <- err
						return
					}
				} else {
					mu.Lock()
					kept[c.ID] = own
					mu.Unlock()
				}
			}
		}()
	}
	// Captures that come and go with one shared content: its blob's count
	// keeps falling to 0 while other Puts take it up again.
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := s
			if g%2 == 1 {
				st = s2
			}
			cycle := []byte("a body that captures share and drop")
			for range 20 {
				c := &Capture{Kind: "exec", Parts: []Part{{Name: "stdout", Data: cycle}}}
				if err := st.Put(bg, c); err != nil {
					errs <- err
					return
				}
				if got, err := st.Get(bg, c.ID); err != nil || !bytes.Equal(got.Part("stdout").Data, cycle) {
					errs <- fmt.Errorf("Get after Put of the cycling content: %v", err)
					return
				}
				if err := st.Erase(bg, c.ID, "rev", ""); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-gcDone
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n, err := gcOf(s)(bg)
	if err != nil || n != 0 {
		t.Fatalf("GC after concurrent use removed %d: %v", n, err)
	}
	for id, own := range kept {
		got, err := s.Get(bg, id)
		if err != nil || !bytes.Equal(got.Part("stdout").Data, own) || !bytes.Equal(got.Part("raw").Data, shared) {
			t.Fatalf("kept capture %s: %v", id, err)
		}
	}
	// 48 live captures share raw and code; each has its own stdout.
	want := 2 + len(kept)
	if inline {
		want = 1 // raw; code and stdout are inline
	}
	if !b.shares {
		// Each capture has its own objects.
		want = 3 * len(kept)
		if inline {
			want = len(kept)
		}
	}
	if files := b.bodies(t); len(files) != want {
		t.Fatalf("%d blob files, want %d", len(files), want)
	}
	if s, ok := s.(*SQLite); ok {
		if r := blobRefs(t, s, partBlob(t, s, firstKey(kept), "raw")); r != len(kept) {
			t.Fatalf("shared raw blob has %d references, want %d", r, len(kept))
		}
	}
}

func firstKey(m map[string][]byte) string {
	for k := range m {
		return k
	}
	return ""
}

// TestViewGivesRetentionInSeconds: the API shows a capture's retention as
// retention_s, whole seconds, as every duration of the API is given (a Go
// time.Duration would marshal as nanoseconds); none is absent.
func TestViewGivesRetentionInSeconds(t *testing.T) {
	c := &Capture{ID: "cap_1", Kind: "exec", Retention: Days(30)}
	b, err := json.Marshal(c.View())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["retention_s"] != float64(30*86400) {
		t.Errorf("retention_s = %v, want %d: %s", m["retention_s"], 30*86400, b)
	}
	if _, ok := m["retention"]; ok {
		t.Errorf("the view still has retention: %s", b)
	}
	c.Retention = 0
	if b, _ = json.Marshal(c.View()); strings.Contains(string(b), "retention") {
		t.Errorf("a capture kept until erased shows a retention: %s", b)
	}
}
