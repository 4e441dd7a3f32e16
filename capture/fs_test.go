package capture

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestFSPutGetDelete(t *testing.T) {
	ctx := context.Background()
	s, err := OpenFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	raw := []byte("\x1f\x8b compressed bytes \x00\xff")
	c := &Capture{Kind: "fetch", Tenant: "acme", KeyID: "k1", Meta: map[string]string{"url": "http://pages.test/"},
		Parts: []Part{{Name: "raw", ContentType: "application/octet-stream", Data: raw}, {Name: "content", ContentType: "text/plain", Data: []byte("hello")}}}
	if err := s.Put(ctx, c); err != nil {
		t.Fatal(err)
	}
	if !ValidID(c.ID) || c.CreatedAt.IsZero() {
		t.Fatalf("Put did not assign id and time: %+v", c)
	}
	got, err := s.Get(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tenant != "acme" || got.Meta["url"] != "http://pages.test/" || len(got.Parts) != 2 {
		t.Fatalf("metadata: %+v", got)
	}
	if p := got.Part("raw"); p == nil || !bytes.Equal(p.Data, raw) || p.Size != int64(len(raw)) || len(p.SHA256) != 64 {
		t.Fatalf("raw part: %+v", p)
	}
	// Tampering with a part on disk is detected.
	if err := os.WriteFile(filepath.Join(s.path(c.ID), "content"), []byte("HELLO"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, c.ID); err == nil {
		t.Fatal("Get returned a part altered on disk")
	}
	if err := s.Delete(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, c.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if err := s.Delete(ctx, c.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Delete: %v", err)
	}
}

func TestFSRefusesBadNamesAndIDs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := OpenFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"../escape", "a/b", "", "..", "UPPER", string(make([]byte, 65))} {
		if err := s.Put(ctx, &Capture{Kind: "fetch", Parts: []Part{{Name: name}}}); err == nil {
			t.Errorf("part name %q accepted", name)
		}
	}
	if err := s.Put(ctx, &Capture{Kind: "fetch", Parts: []Part{{Name: "a"}, {Name: "a"}}}); err == nil {
		t.Error("duplicate part names accepted")
	}
	if err := s.Put(ctx, &Capture{ID: "../../etc", Kind: "fetch"}); err == nil {
		t.Error("bad id accepted")
	}
	for _, id := range []string{"../x", "cap_zz", "cap_" + string(bytes.Repeat([]byte("0"), 31))} {
		if _, err := s.Get(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q) = %v, want ErrNotFound", id, err)
		}
	}
	// Nothing but the (empty) tree was written by the refusals.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Fatalf("refused puts left %d entries", len(entries))
	}
}

func TestOpenFSRemovesTemporaryDirs(t *testing.T) {
	dir := t.TempDir()
	left := filepath.Join(dir, tmpPrefix+"cap_x-123")
	if err := os.MkdirAll(left, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFS(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Fatalf("temporary dir left by a crash was not removed: %v", err)
	}
}
