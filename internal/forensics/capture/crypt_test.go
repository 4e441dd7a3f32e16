package capture

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func keyBytes(seed byte) []byte { return bytes.Repeat([]byte{seed, 0x5a, seed ^ 0xff, 0x17}, 8) }

func hexKey(seed byte) string { return hex.EncodeToString(keyBytes(seed)) + "\n" }

func writeKey(t testing.TB, dir string, mode os.FileMode, content string) string {
	t.Helper()
	p := filepath.Join(dir, fmt.Sprintf("key-%d", len(content)))
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// allFiles returns every file under dir (database, WAL, blobs) by path.
func allFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestEncryptionAtRest(t *testing.T) {
	dir := t.TempDir()
	keyFile := writeKey(t, t.TempDir(), 0o600, hexKey(7))
	s := openT(t, dir, Options{KeyFile: keyFile})
	if !s.Encrypted() {
		t.Fatal("not encrypted")
	}
	var text strings.Builder
	for i := range 400 {
		fmt.Fprintf(&text, "CONFIDENTIAL-PAYLOAD line %d of the fetched page.\n", i)
	}
	plain := []byte(text.String())
	var gz, fl bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(plain)
	zw.Close()
	fw, _ := flate.NewWriter(&fl, flate.BestSpeed)
	fw.Write(plain)
	fw.Close()
	c := fetchCapture("acme", plain, "returned CONFIDENTIAL-PAYLOAD")
	c.Meta["url"] = "http://pages.test/?token=URL-SECRET-TOKEN"
	if err := s.Put(bg, c); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(bg, c.ID)
	if err != nil || !bytes.Equal(got.Part("raw").Data, plain) || got.Meta["url"] != c.Meta["url"] {
		t.Fatalf("round trip: %v", err)
	}
	// Checkpoint so the database file itself holds the rows too.
	if _, err := s.wdb.Exec(`PRAGMA wal_checkpoint(FULL)`); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(plain)
	addr := partBlob(t, s, c.ID, "raw")
	if addr == hex.EncodeToString(sum[:]) {
		t.Fatal("the blob address is the plain sha256 of the content")
	}
	files := allFiles(t, dir)
	if len(files) < 4 {
		t.Fatalf("only %d files", len(files))
	}
	for p, b := range files {
		for _, needle := range [][]byte{[]byte("CONFIDENTIAL-PAYLOAD"), []byte("URL-SECRET-TOKEN"), gz.Bytes()[10:74], fl.Bytes()[:64], fl.Bytes()[len(fl.Bytes())/2:][:64]} {
			if bytes.Contains(b, needle) {
				t.Errorf("%s holds %q", p, needle[:min(len(needle), 24)])
			}
		}
		if strings.Contains(p, blobDir) && !strings.Contains(p, tmpDir) && (len(b) < headerLen || b[5]&flagSealed == 0) {
			t.Errorf("blob %s is not sealed", p)
		}
	}
	// The same key given in base64 opens the store.
	s.Close()
	b64 := writeKey(t, t.TempDir(), 0o400, base64.StdEncoding.EncodeToString(keyBytes(7))+"\n")
	s2 := openT(t, dir, Options{KeyFile: b64})
	if g, err := s2.Get(bg, c.ID); err != nil || !bytes.Equal(g.Part("raw").Data, plain) {
		t.Fatalf("reopened with the base64 key: %v", err)
	}
}

func TestWrongKey(t *testing.T) {
	dirA, dirB := t.TempDir(), t.TempDir()
	keys := t.TempDir()
	keyA := writeKey(t, keys, 0o600, hexKey(1))
	keyB := writeKey(t, keys, 0o600, base64.RawURLEncoding.EncodeToString(keyBytes(2)))
	a := openT(t, dirA, Options{KeyFile: keyA, inlineMax: -1})
	b := openT(t, dirB, Options{KeyFile: keyB, inlineMax: -1})
	ca, cb := fetchCapture("acme", []byte("same raw"), "text"), fetchCapture("acme", []byte("same raw"), "text")
	if err := a.Put(bg, ca); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(bg, cb); err != nil {
		t.Fatal(err)
	}
	if partBlob(t, a, ca.ID, "raw") == partBlob(t, b, cb.ID, "raw") {
		t.Fatal("two keys give one address")
	}
	// A blob sealed with key A, found by a store with key B.
	fa := blobFiles(t, dirA)[partBlob(t, a, ca.ID, "raw")]
	fb := blobFiles(t, dirB)[partBlob(t, b, cb.ID, "raw")]
	sealed, _ := os.ReadFile(fa)
	if err := os.WriteFile(fb, sealed, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := b.Get(bg, cb.ID)
	if !errors.Is(err, errKey) || !strings.Contains(err.Error(), a.keys.fingerprint) || !strings.Contains(err.Error(), "wrong key") {
		t.Fatalf("Get of a blob sealed with another key: %v", err)
	}
	// Opening a store with the wrong key, or none, is refused clearly.
	a.Close()
	if _, err := Open(dirA, Options{KeyFile: keyB}); !errors.Is(err, errKey) || !strings.Contains(err.Error(), "not the key") {
		t.Fatalf("Open with the wrong key: %v", err)
	}
	if _, err := Open(dirA, Options{}); !errors.Is(err, errKey) || !strings.Contains(err.Error(), "give its key file") {
		t.Fatalf("Open of an encrypted store without a key: %v", err)
	}
	// An unencrypted store with content does not take a key.
	plainDir := t.TempDir()
	p := openT(t, plainDir, Options{})
	p.Put(bg, fetchCapture("acme", []byte("r"), "t"))
	p.Close()
	if _, err := Open(plainDir, Options{KeyFile: keyA}); !errors.Is(err, errKey) || !strings.Contains(err.Error(), "unencrypted") {
		t.Fatalf("Open of a plain store with a key: %v", err)
	}
	// An empty store may change mode.
	emptyDir := t.TempDir()
	e := openT(t, emptyDir, Options{})
	e.Close()
	e2 := openT(t, emptyDir, Options{KeyFile: keyA})
	if !e2.Encrypted() {
		t.Fatal("empty store did not take the key")
	}
}

func TestKeyFileChecks(t *testing.T) {
	dir := t.TempDir()
	good := hex.EncodeToString(keyBytes(3))
	for _, tc := range []struct {
		name    string
		mode    os.FileMode
		content string
		want    string // "" means accepted
	}{
		{"hex", 0o600, good + "\n", ""},
		{"hex upper, read-only", 0o400, strings.ToUpper(good), ""},
		{"base64", 0o600, base64.StdEncoding.EncodeToString(keyBytes(3)) + "\r\n", ""},
		{"base64 raw url", 0o600, base64.RawURLEncoding.EncodeToString(keyBytes(3)), ""},
		{"group readable", 0o640, good, "mode 0640"},
		{"world readable", 0o604, good, "mode 0604"},
		{"group writable", 0o620, good, "mode 0620"},
		{"two lines", 0o600, good + "\n" + good + "\n", "more than one line"},
		{"short", 0o600, hex.EncodeToString(keyBytes(3)[:31]), "32 bytes"},
		{"long", 0o600, base64.StdEncoding.EncodeToString(append(keyBytes(3), 1)), "32 bytes"},
		{"garbage", 0o600, "NOT-A-KEY-but-a-secret-looking-thing", "32 bytes"},
		{"empty", 0o600, "", "32 bytes"},
	} {
		sub := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
		os.Mkdir(sub, 0o700)
		kf := writeKey(t, sub, tc.mode, tc.content)
		s, err := Open(filepath.Join(sub, "store"), Options{KeyFile: kf})
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				continue
			}
			s.Close()
			continue
		}
		if err == nil {
			s.Close()
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if !errors.Is(err, errKey) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q lacks %q", tc.name, err, tc.want)
		}
		if tc.content != "" && strings.Contains(err.Error(), strings.TrimSpace(tc.content)[:16]) {
			t.Errorf("%s: the error quotes the key file: %v", tc.name, err)
		}
		if _, serr := os.Stat(filepath.Join(sub, "store")); serr == nil {
			t.Errorf("%s: a refused key created the store", tc.name)
		}
	}
	if _, err := Open(t.TempDir(), Options{KeyFile: filepath.Join(dir, "missing")}); !errors.Is(err, errKey) {
		t.Errorf("missing key file: %v", err)
	}
	if _, err := Open(t.TempDir(), Options{KeyFile: dir}); !errors.Is(err, errKey) || !strings.Contains(err.Error(), "regular") {
		t.Errorf("directory as key file: %v", err)
	}
}
