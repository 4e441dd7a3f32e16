package capture

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// replicas opens two Postgres stores on one database and one bucket
// prefix, each with a pool and an S3 client of its own: two replicas.
func replicas(t *testing.T, opts Options) (a, b *Postgres, objects ObjectStore) {
	t.Helper()
	dsn := newPGDatabase(t)
	cfg := newS3Config(t)
	oa, ob := newS3Objects(t, cfg), newS3Objects(t, cfg)
	return openPG(t, dsn, oa, opts), openPG(t, dsn, ob, opts), oa
}

// objectsOf lists the objects of capture id.
func objectsOf(t testing.TB, o ObjectStore, id string) []string {
	t.Helper()
	var out []string
	for _, k := range listObjects(t, o) {
		if strings.Contains(k, "/"+id+"/") {
			out = append(out, k)
		}
	}
	return out
}

// TestFleetEraseSeenEverywhere: an erasure on one replica is the other's
// tombstone at once, and the objects leave the bucket; holds placed on one
// stop erasure and retention on the other.
func TestFleetEraseSeenEverywhere(t *testing.T) {
	a, b, objects := replicas(t, Options{inlineMax: -1})
	raw := randomBytes(20000, 11)
	c := fetchCapture("acme", raw, "page text")
	if err := a.Put(bg, c); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Get(bg, c.ID); err != nil || !bytes.Equal(got.Part("raw").Data, raw) {
		t.Fatalf("the other replica's Get: %v", err)
	}
	if n := len(objectsOf(t, objects, c.ID)); n != 3 {
		t.Fatalf("%d objects, want 3", n)
	}
	if err := b.Erase(bg, c.ID, "rev@b", "GDPR"); err != nil {
		t.Fatal(err)
	}
	got, err := a.Get(bg, c.ID)
	if err != nil || got.Erased == nil || got.Erased.By != "rev@b" || got.Meta != nil || got.Parts[0].Data != nil {
		t.Fatalf("replica a after b's erasure: %v %+v", err, got)
	}
	if left := objectsOf(t, objects, c.ID); len(left) != 0 {
		t.Fatalf("objects left in the bucket after the erasure: %v", left)
	}
	if err := a.Erase(bg, c.ID, "rev@a", ""); !errors.Is(err, ErrErased) {
		t.Fatalf("a's second erasure: %v", err)
	}

	// Holds: placed on a, they bind b.
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	held := &Capture{Kind: "exec", Tenant: "acme", CreatedAt: t0, Retention: time.Hour, Parts: []Part{{Name: "stdout", Data: []byte("held")}}}
	tenant := &Capture{Kind: "exec", Tenant: "bigco", CreatedAt: t0, Retention: time.Hour, Parts: []Part{{Name: "stdout", Data: []byte("tenant")}}}
	putAllF(t, b, held, tenant)
	if err := a.SetHold(bg, held.ID, true, "legal", "case 1"); err != nil {
		t.Fatal(err)
	}
	if err := a.SetTenantHold(bg, "bigco", true, "legal", "case 2"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{held.ID, tenant.ID} {
		if err := b.Erase(bg, id, "rev", ""); !errors.Is(err, ErrHeld) {
			t.Fatalf("b's Erase of a capture a held: %v", err)
		}
		if err := b.Delete(bg, id); !errors.Is(err, ErrHeld) {
			t.Fatalf("b's Delete of a capture a held: %v", err)
		}
	}
	if sw, err := b.Sweep(bg, t0.Add(2*time.Hour)); err != nil || len(sw) != 0 {
		t.Fatalf("b swept held captures: %v %+v", err, sw)
	}
	if h, err := b.TenantHolds(bg); err != nil || h["bigco"].By != "legal" {
		t.Fatalf("b's TenantHolds: %v %+v", err, h)
	}
	if err := a.SetTenantHold(bg, "bigco", false, "legal", "closed"); err != nil {
		t.Fatal(err)
	}
	if sw, err := b.Sweep(bg, t0.Add(2*time.Hour)); err != nil || len(sw) != 1 || sw[0].ID != tenant.ID {
		t.Fatalf("b's sweep after the tenant hold was lifted: %v %+v", err, sw)
	}
}

// TestFleetTenantHoldRacesErasures: erasures of a tenant's captures on one
// replica race a tenant hold placed on the other; every capture that is
// not erased when SetTenantHold returns stays.
func TestFleetTenantHoldRacesErasures(t *testing.T) {
	a, b, _ := replicas(t, Options{})
	var caps []*Capture
	for i := range 40 {
		c := &Capture{Kind: "exec", Tenant: "acme", Parts: []Part{{Name: "stdout", Data: []byte(fmt.Sprint(i))}}}
		putAllF(t, a, c)
		caps = append(caps, c)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, c := range caps {
			if err := a.Erase(bg, c.ID, "rev", ""); err != nil && !errors.Is(err, ErrHeld) {
				t.Error(err)
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	if err := b.SetTenantHold(bg, "acme", true, "legal", "case"); err != nil {
		t.Fatal(err)
	}
	// Under the hold: what is live now must stay live.
	var live []string
	for _, c := range caps {
		g, err := b.Get(bg, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if g.Erased == nil {
			live = append(live, c.ID)
		}
	}
	wg.Wait()
	for _, id := range live {
		if g, err := a.Get(bg, id); err != nil || g.Erased != nil {
			t.Fatalf("capture %s was live under the tenant hold and got erased: %v", id, err)
		}
	}
	t.Logf("%d of %d erased before the hold", len(caps)-len(live), len(caps))
}

// TestFleetConcurrentPutsAndSweeps: both replicas store captures at once,
// each reads the other's, and both sweep at once: every expired capture is
// swept exactly once.
func TestFleetConcurrentPutsAndSweeps(t *testing.T) {
	a, b, objects := replicas(t, Options{})
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	ids := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g, st := range []*Postgres{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			other := a
			if st == a {
				other = b
			}
			for i := range 15 {
				body := randomBytes(inlineMax+1+100*i+g, uint64(g*100+i))
				c := &Capture{Kind: "fetch", Tenant: "acme", CreatedAt: t0, Retention: time.Minute,
					Parts: []Part{{Name: "raw", Data: body}, {Name: "headers", Data: []byte("h")}}}
				if err := st.Put(bg, c); err != nil {
					errs <- err
					return
				}
				got, err := other.Get(bg, c.ID)
				if err != nil || !bytes.Equal(got.Part("raw").Data, body) {
					errs <- fmt.Errorf("the other replica's Get: %v", err)
					return
				}
				mu.Lock()
				ids[c.ID] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(ids) != 60 {
		t.Fatalf("%d distinct captures, want 60", len(ids))
	}
	if n := len(listObjects(t, objects)); n != 60 {
		t.Fatalf("%d objects, want 60", n)
	}
	defer func(n int) { sweepBatch = n }(sweepBatch)
	sweepBatch = 7
	var swept [2][]Swept
	var serr [2]error
	for i, st := range []*Postgres{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); swept[i], serr[i] = st.Sweep(bg, t0.Add(time.Hour)) }()
	}
	wg.Wait()
	if serr[0] != nil || serr[1] != nil {
		t.Fatal(serr)
	}
	seen := map[string]int{}
	for _, sw := range append(swept[0], swept[1]...) {
		seen[sw.ID]++
	}
	for id := range ids {
		if seen[id] != 1 {
			t.Fatalf("capture %s swept %d times", id, seen[id])
		}
	}
	t.Logf("replica a swept %d, b %d", len(swept[0]), len(swept[1]))
	if n := len(listObjects(t, objects)); n != 0 {
		t.Fatalf("%d objects left after the sweep", n)
	}
}

// TestGCRemovesOrphansNeverReferenced: GC deletes objects no row names once
// they are older than the grace, never a referenced one or one of a Put
// in progress, and leaves keys not of its form alone; the trash of a
// removal that crashed goes at once.
func TestGCRemovesOrphansNeverReferenced(t *testing.T) {
	a, b, objects := replicas(t, Options{inlineMax: -1})
	keep := fetchCapture("acme", randomBytes(5000, 1), "kept")
	putAllF(t, a, keep)
	kept := objectsOf(t, objects, keep.ID)
	orphan := newObjectKey(newID(), 0)
	foreign := "c/zz/not-ours"
	for _, k := range []string{orphan, foreign} {
		if err := objects.Put(bg, k, []byte("junk")); err != nil {
			t.Fatal(err)
		}
	}
	// Young: nothing goes.
	if n, err := b.GC(bg); err != nil || n != 0 {
		t.Fatalf("GC of young objects removed %d: %v", n, err)
	}
	// Old: the orphan goes, the referenced and the foreign stay.
	if n, err := b.gc(bg, time.Now().Add(2*DefaultOrphanGrace)); err != nil || n != 1 {
		t.Fatalf("GC removed %d, want 1: %v", n, err)
	}
	left := listObjects(t, objects)
	if slices.Contains(left, orphan) || !slices.Contains(left, foreign) {
		t.Fatalf("after GC: %v", left)
	}
	for _, k := range kept {
		if !slices.Contains(left, k) {
			t.Fatalf("GC removed the referenced object %s", k)
		}
	}
	if g, err := a.Get(bg, keep.ID); err != nil || g.Part("returned.json") == nil {
		t.Fatalf("the kept capture after GC: %v", err)
	}

	// A Put in progress (objects written, not committed) while GC runs
	// with the real clock: its objects stay, and it commits.
	paused, resume := make(chan struct{}), make(chan struct{})
	hook = func(p string) error {
		if p == "before-commit" {
			close(paused)
			<-resume
		}
		return nil
	}
	defer noCrash()
	inflight := fetchCapture("acme", randomBytes(5000, 2), "in flight")
	done := make(chan error)
	go func() { done <- a.Put(bg, inflight) }()
	<-paused
	if n, err := b.GC(bg); err != nil || n != 0 {
		t.Fatalf("GC during a Put removed %d: %v", n, err)
	}
	close(resume)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	noCrash()
	if g, err := b.Get(bg, inflight.ID); err != nil || g.Part("raw").Size != 5000 {
		t.Fatalf("the Put GC ran during: %v", err)
	}

	// A removal that crashed after its commit leaves its objects in the
	// trash; GC deletes them whatever their age.
	crashAt(t, "erase-committed")
	if err := a.Erase(bg, inflight.ID, "rev", ""); !errors.Is(err, errCrash) {
		t.Fatalf("Erase: %v", err)
	}
	noCrash()
	if n := len(objectsOf(t, objects, inflight.ID)); n != 3 {
		t.Fatalf("%d objects after the interrupted erasure, want 3", n)
	}
	if n, err := b.GC(bg); err != nil || n != 3 {
		t.Fatalf("GC of the trash removed %d, want 3: %v", n, err)
	}
	if g, err := a.Get(bg, inflight.ID); err != nil || g.Erased == nil {
		t.Fatalf("erased capture after GC: %v", err)
	}
	// One replica collects at a time: the other returns at once.
	conn, err := a.pool.Acquire(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(bg, `SELECT pg_advisory_lock($1, 0)`, int32(lockGC)); err != nil {
		t.Fatal(err)
	}
	orphan2 := newObjectKey(newID(), 1)
	if err := objects.Put(bg, orphan2, []byte("junk")); err != nil {
		t.Fatal(err)
	}
	if n, err := b.gc(bg, time.Now().Add(2*DefaultOrphanGrace)); err != nil || n != 0 {
		t.Fatalf("GC while another replica collects: %d %v", n, err)
	}
	if _, err := conn.Exec(bg, `SELECT pg_advisory_unlock($1, 0)`, int32(lockGC)); err != nil {
		t.Fatal(err)
	}
	if n, err := b.gc(bg, time.Now().Add(2*DefaultOrphanGrace)); err != nil || n != 1 {
		t.Fatalf("GC after the other replica finished: %d %v", n, err)
	}
}

// TestPostgresInterruptedPut: a Put interrupted before its commit leaves no
// capture; its objects are deleted by the Put or, after a crash, by GC.
func TestPostgresInterruptedPut(t *testing.T) {
	a, _, objects := replicas(t, Options{inlineMax: -1})
	for i, point := range []string{"objects-written", "before-commit"} {
		crashAt(t, point)
		c := fetchCapture("acme", []byte(fmt.Sprint("raw ", i)), fmt.Sprint("text ", i))
		if err := a.Put(bg, c); !errors.Is(err, errCrash) {
			t.Fatalf("%s: Put = %v", point, err)
		}
		noCrash()
		if _, err := a.Get(bg, c.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: an interrupted Put is visible: %v", point, err)
		}
		left := len(objectsOf(t, objects, c.ID))
		if point == "before-commit" && left != 0 {
			t.Fatalf("a Put whose transaction rolled back left %d objects", left)
		}
		if n, err := a.gc(bg, time.Now().Add(2*DefaultOrphanGrace)); err != nil || n != left {
			t.Fatalf("%s: GC removed %d of %d: %v", point, n, left, err)
		}
	}
	// A Put of an id that exists fails and leaves the stored capture whole.
	c := fetchCapture("acme", []byte("first"), "first text")
	putAllF(t, a, c)
	dup := fetchCapture("acme", []byte("second"), "second text")
	dup.ID = c.ID
	if err := a.Put(bg, dup); !errors.Is(err, errExists) {
		t.Fatalf("Put of an existing id: %v", err)
	}
	if g, err := a.Get(bg, c.ID); err != nil || string(g.Part("raw").Data) != "first" {
		t.Fatalf("the stored capture after a duplicate Put: %v", err)
	}
	if n := len(objectsOf(t, objects, c.ID)); n != 3 {
		t.Fatalf("%d objects after a duplicate Put, want 3", n)
	}
}

// TestPostgresEncryptionAtRest: neither the bucket nor the database holds
// a body, a compressed body or Meta in clear.
func TestPostgresEncryptionAtRest(t *testing.T) {
	key := writeKey(t, t.TempDir(), 0o600, hexKey(7))
	a, _, objects := replicas(t, Options{KeyFile: key})
	if !a.Encrypted() {
		t.Fatal("not encrypted")
	}
	var text strings.Builder
	for i := range 400 {
		fmt.Fprintf(&text, "CONFIDENTIAL-PAYLOAD line %d of the fetched page.\n", i)
	}
	plain := []byte(text.String())
	c := fetchCapture("acme", plain, "returned CONFIDENTIAL-PAYLOAD")
	c.Meta["url"] = "http://pages.test/?token=URL-SECRET-TOKEN"
	putAllF(t, a, c)
	got, err := a.Get(bg, c.ID)
	if err != nil || !bytes.Equal(got.Part("raw").Data, plain) || got.Meta["url"] != c.Meta["url"] {
		t.Fatalf("round trip: %v", err)
	}
	needles := []string{"CONFIDENTIAL-PAYLOAD", "URL-SECRET-TOKEN", "HTTP 200 OK"}
	for _, k := range listObjects(t, objects) {
		b, _ := objects.Get(bg, k)
		if len(b) < headerLen || b[5]&flagSealed == 0 {
			t.Errorf("object %s is not sealed", k)
		}
		for _, n := range needles {
			if bytes.Contains(b, []byte(n)) {
				t.Errorf("object %s holds %q", k, n)
			}
		}
	}
	for _, table := range []string{"captures", "capture_parts", "capture_settings"} {
		var dump string
		if err := a.pool.QueryRow(bg, `SELECT coalesce(string_agg(encode(convert_to(t::text, 'UTF8'), 'escape'), ' '), '') FROM `+table+` t`).Scan(&dump); err != nil {
			t.Fatal(err)
		}
		for _, n := range needles {
			if strings.Contains(dump, n) {
				t.Errorf("table %s holds %q", table, n)
			}
		}
	}
}

// TestPostgresWrongKey: a replica with another key, or none, is refused;
// an object sealed under another key (or moved to another part) fails.
func TestPostgresWrongKey(t *testing.T) {
	keys := t.TempDir()
	keyA := writeKey(t, keys, 0o600, hexKey(1))
	keyB := writeKey(t, keys, 0o600, hexKey(2)+" ")
	dsn := newPGDatabase(t)
	objects := newS3Objects(t, newS3Config(t))
	a := openPG(t, dsn, objects, Options{KeyFile: keyA, inlineMax: -1})
	c := fetchCapture("acme", []byte("raw body"), "text")
	putAllF(t, a, c)
	if _, err := openPGErr(dsn, objects, Options{KeyFile: keyB}); !errors.Is(err, errKey) || !strings.Contains(err.Error(), "not the key") {
		t.Fatalf("a replica with the wrong key: %v", err)
	}
	if _, err := openPGErr(dsn, objects, Options{}); !errors.Is(err, errKey) || !strings.Contains(err.Error(), "give its key file") {
		t.Fatalf("a replica without a key: %v", err)
	}
	// An object of store B (key B) copied over one of store A.
	b := openPG(t, newPGDatabase(t), newS3Objects(t, newS3Config(t)), Options{KeyFile: keyB, inlineMax: -1})
	cb := fetchCapture("acme", []byte("raw body"), "text")
	putAllF(t, b, cb)
	var ka, kb string
	a.pool.QueryRow(bg, `SELECT object FROM capture_parts WHERE capture_id = $1 AND name = 'raw'`, c.ID).Scan(&ka)
	b.pool.QueryRow(bg, `SELECT object FROM capture_parts WHERE capture_id = $1 AND name = 'raw'`, cb.ID).Scan(&kb)
	sealedB, err := b.objects.Get(bg, kb)
	if err != nil {
		t.Fatal(err)
	}
	if err := objects.Put(bg, ka, sealedB); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(bg, c.ID); !errors.Is(err, errKey) || !strings.Contains(err.Error(), "wrong key") {
		t.Fatalf("Get of an object sealed with another key: %v", err)
	}
	// An unencrypted store with captures does not take a key.
	pdsn := newPGDatabase(t)
	p := openPG(t, pdsn, objects, Options{})
	putAllF(t, p, fetchCapture("acme", []byte("r"), "t"))
	if _, err := openPGErr(pdsn, objects, Options{KeyFile: keyA}); !errors.Is(err, errKey) || !strings.Contains(err.Error(), "unencrypted") {
		t.Fatalf("a key for an unencrypted store: %v", err)
	}
	// Two replicas opened on an empty store with different keys: the one
	// whose key is no longer the store's cannot Put.
	edsn := newPGDatabase(t)
	e1 := openPG(t, edsn, objects, Options{KeyFile: keyA})
	e2 := openPG(t, edsn, objects, Options{KeyFile: keyB})
	if err := e1.Put(bg, fetchCapture("acme", []byte("r"), "t")); !errors.Is(err, errKey) {
		t.Fatalf("Put by a replica whose key is not the store's: %v", err)
	}
	if err := e2.Put(bg, fetchCapture("acme", []byte("r"), "t")); err != nil {
		t.Fatal(err)
	}
}

// TestS3ObjectsBucket: a missing bucket is an error unless MakeBucket says
// to make it; making one that exists is no error.
func TestS3ObjectsBucket(t *testing.T) {
	cfg := newS3Config(t)
	cfg.Bucket = fmt.Sprintf("made-%d", seq.Add(1))
	if _, err := NewS3Objects(bg, cfg); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing bucket: %v", err)
	}
	cfg.MakeBucket = true
	o := newS3Objects(t, cfg)
	newS3Objects(t, cfg)
	if err := o.Put(bg, "c/x/y", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if b, err := o.Get(bg, "c/x/y"); err != nil || string(b) != "hello" {
		t.Fatalf("Get: %q %v", b, err)
	}
	if _, err := o.Get(bg, "c/x/missing"); !errors.Is(err, ErrObjectNotFound) {
		t.Fatalf("Get of a missing object: %v", err)
	}
	if err := o.Delete(bg, "c/x/y"); err != nil {
		t.Fatal(err)
	}
	if err := o.Delete(bg, "c/x/y"); err != nil {
		t.Fatalf("Delete of a missing object: %v", err)
	}
	for _, k := range []string{"", "/a", "a/", "a//b", "../a", "a/../b", "a b"} {
		if err := o.Put(bg, k, nil); err == nil {
			t.Errorf("key %q accepted", k)
		}
	}
}

// TestLocalObjects: the directory store's Put, Get, Delete and List.
func TestLocalObjects(t *testing.T) {
	dir := t.TempDir()
	o, err := NewLocalObjects(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"c/ab/one", "c/ab/two", "c/cd/three", "other/four"} {
		if err := o.Put(bg, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := o.Get(bg, "c/cd/three"); err != nil || string(b) != "c/cd/three" {
		t.Fatalf("Get: %q %v", b, err)
	}
	if got := listObjects(t, o); !slices.Equal(got, []string{"c/ab/one", "c/ab/two", "c/cd/three"}) {
		t.Fatalf("List: %v", got)
	}
	if err := o.Delete(bg, "c/ab/one"); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Get(bg, "c/ab/one"); !errors.Is(err, ErrObjectNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if err := o.Delete(bg, "c/ab/one"); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	// A directory its last object leaves goes with it.
	if err := o.Delete(bg, "c/cd/three"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "c", "cd")); !os.IsNotExist(err) {
		t.Fatalf("the emptied directory stays: %v", err)
	}
	if err := o.Put(bg, "c/cd/again", []byte("x")); err != nil {
		t.Fatalf("Put into a removed directory: %v", err)
	}
	for _, k := range []string{"", "/a", "a/", "../a", "a/../../b", ".tmp/x"} {
		if err := o.Put(bg, k, nil); err == nil {
			t.Errorf("key %q accepted", k)
		}
	}
}
