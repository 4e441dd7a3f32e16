package capture

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv("CAPTURE_CRASH_CHILD_DIR"); dir != "" {
		crashChild(dir, os.Getenv("CAPTURE_CRASH_CHILD_KEY"), os.Getenv("CAPTURE_CRASH_CHILD_SEED"))
		return
	}
	code := m.Run()
	stopServers()
	os.Exit(code)
}

var errCrash = errors.New("simulated crash")

func crashAt(t *testing.T, point string) {
	t.Helper()
	hook = func(p string) error {
		if p == point {
			return errCrash
		}
		return nil
	}
	t.Cleanup(func() { hook = func(string) error { return nil } })
}

func noCrash() { hook = func(string) error { return nil } }

func TestInterruptedPutLeavesNoCapture(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{inlineMax: -1})
	before := fetchCapture("acme", []byte("stored before"), "text before")
	if err := s.Put(bg, before); err != nil {
		t.Fatal(err)
	}
	for i, point := range []string{"blob-written", "blobs-synced", "before-commit"} {
		crashAt(t, point)
		c := fetchCapture("acme", []byte(fmt.Sprint("raw of the interrupted put ", i)), fmt.Sprint("text ", i))
		if err := s.Put(bg, c); !errors.Is(err, errCrash) {
			t.Fatalf("%s: Put = %v", point, err)
		}
		noCrash()
		if _, err := s.Get(bg, c.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: an interrupted Put is visible: %v", point, err)
		}
		if l, _, _ := s.List(bg, Filter{}); len(l) != 1 {
			t.Fatalf("%s: %d captures listed", point, len(l))
		}
	}
	// What a crash in the middle of a blob write leaves: a temporary file
	// (partly written) in blobs/tmp; and orphan blobs of the Puts that got
	// as far as renaming.
	os.WriteFile(filepath.Join(dir, blobDir, tmpDir, "0123456789abcdef-crash"), []byte("SBXC\x01partial"), 0o600)
	orphans := len(blobFiles(t, dir)) - 1 - 3 // minus the temp file and before's three blobs
	if orphans != 4 {
		t.Fatalf("%d orphan blobs, want 4 (raw and text of two Puts)", orphans)
	}
	s.Close()
	s = openT(t, dir, Options{inlineMax: -1})
	if n := tmpFiles(t, dir); n != 0 {
		t.Fatalf("Open left %d temporary files", n)
	}
	n, err := s.GC(bg)
	if err != nil || n != orphans {
		t.Fatalf("GC removed %d (want %d): %v", n, orphans, err)
	}
	if got, err := s.Get(bg, before.ID); err != nil || string(got.Part("raw").Data) != "stored before" {
		t.Fatalf("the capture stored before: %v", err)
	}
	if n := len(blobFiles(t, dir)); n != 3 {
		t.Fatalf("%d blob files after GC, want 3", n)
	}
	// GC leaves files it does not know alone.
	stray := filepath.Join(dir, blobDir, "ab", "README")
	os.MkdirAll(filepath.Dir(stray), 0o700)
	if err := os.WriteFile(stray, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GC(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stray); err != nil {
		t.Fatalf("GC removed a file not its own: %v", err)
	}
}

func TestInterruptedRemovalKeepsReferencedBlobs(t *testing.T) {
	for _, point := range []string{"erase-committed", "delete-committed"} {
		t.Run(point, func(t *testing.T) {
			dir := t.TempDir()
			s := openT(t, dir, Options{inlineMax: -1})
			raw := []byte("shared raw body")
			a, b := fetchCapture("acme", raw, "a's own text"), fetchCapture("acme", raw, "b's own text")
			putAll(t, s, a, b)
			aText := partBlob(t, s, a.ID, "returned.json")
			crashAt(t, point)
			var err error
			if point == "erase-committed" {
				err = s.Erase(bg, a.ID, "rev", "")
			} else {
				err = s.Delete(bg, a.ID)
			}
			if !errors.Is(err, errCrash) {
				t.Fatalf("removal: %v", err)
			}
			noCrash()
			// Committed: a is gone (or a tombstone); its own blob file is
			// an orphan still on disk; nothing b needs is missing.
			if _, ok := blobFiles(t, dir)[aText]; !ok {
				t.Fatal("the crash point is after the file removal")
			}
			s.Close()
			s = openT(t, dir, Options{inlineMax: -1})
			g, err := s.Get(bg, a.ID)
			if point == "erase-committed" && (err != nil || g.Erased == nil) {
				t.Fatalf("after reopen, a: %v %+v", err, g)
			}
			if point == "delete-committed" && !errors.Is(err, ErrNotFound) {
				t.Fatalf("after reopen, a: %v", err)
			}
			if n, err := s.GC(bg); err != nil || n != 1 {
				t.Fatalf("GC removed %d, want 1 (a's text): %v", n, err)
			}
			if g, err := s.Get(bg, b.ID); err != nil || !bytes.Equal(g.Part("raw").Data, raw) {
				t.Fatalf("b after GC: %v", err)
			}
			if n := len(blobFiles(t, dir)); n != 3 {
				t.Fatalf("%d blob files, want b's 3", n)
			}
		})
	}
}

// crashChild stores captures and erases every third one, printing a line
// after each call returns, until it is killed.
func crashChild(dir, keyFile, seed string) {
	s, err := Open(dir, Options{KeyFile: keyFile})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	for i := 0; ; i++ {
		raw := randomBytes(8000+i%5000, uint64(i)*7919+uint64(len(seed)))
		copy(raw, seed+fmt.Sprint(i))
		c := &Capture{Kind: "fetch", Tenant: "acme", Meta: map[string]string{"i": fmt.Sprint(i)},
			Parts: []Part{{Name: "raw", Data: raw}, {Name: "headers", Data: []byte("HTTP 200 OK\r\n")}, {Name: "text", Data: bytes.Repeat([]byte(seed), 200)}}}
		if err := s.Put(ctx, c); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		fmt.Printf("put %s %x\n", c.ID, sha256.Sum256(raw))
		if i%3 == 2 {
			if err := s.Erase(ctx, c.ID, "child", ""); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(4)
			}
			fmt.Printf("erased %s\n", c.ID)
		}
	}
}

// TestCrashKeepsReturnedPuts kills (SIGKILL) a process storing and erasing
// captures at an arbitrary point, three times, and checks that every Put
// that returned is there, every Erase that returned holds, and nothing
// references a missing blob. (A kill tests that nothing is buffered in
// the process; power loss relies on the fsync ordering described on
// SQLite.)
func TestCrashKeepsReturnedPuts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	dir := t.TempDir()
	puts := map[string]string{} // id -> raw sha256
	erased := map[string]bool{}
	for round, after := range []int{5, 17, 29} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "CAPTURE_CRASH_CHILD_DIR="+dir, fmt.Sprint("CAPTURE_CRASH_CHILD_SEED=round", round))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		n := 0
		killed := false
		deadline := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 3 && f[0] == "put":
				puts[f[1]] = f[2]
				n++
			case len(f) == 2 && f[0] == "erased":
				erased[f[1]] = true
			default:
				t.Fatalf("child said %q", sc.Text())
			}
			if n == after && !killed {
				// Let it run on a little so the kill lands anywhere.
				time.Sleep(time.Duration(round*3) * time.Millisecond)
				cmd.Process.Kill()
				killed = true
			}
		}
		deadline.Stop()
		cmd.Wait()
		if !killed {
			t.Fatalf("the child stopped by itself: %s", stderr.String())
		}
	}
	s := openT(t, dir, Options{})
	check := func(when string) {
		for id, sum := range puts {
			c, err := s.Get(bg, id)
			if err != nil {
				t.Fatalf("%s: capture %s, whose Put returned: %v", when, id, err)
			}
			if erased[id] && c.Erased == nil {
				t.Fatalf("%s: capture %s, whose Erase returned, is not erased", when, id)
			}
			if c.Erased == nil {
				if fmt.Sprintf("%x", sha256.Sum256(c.Part("raw").Data)) != sum {
					t.Fatalf("%s: capture %s: wrong raw data", when, id)
				}
			}
		}
	}
	check("after the crashes")
	if n := tmpFiles(t, dir); n != 0 {
		t.Fatalf("%d temporary files after Open", n)
	}
	if _, err := s.GC(bg); err != nil {
		t.Fatal(err)
	}
	check("after GC")
	// Every blob file left is referenced, and every reference has its file.
	files := blobFiles(t, dir)
	rows, err := s.rdb.Query(`SELECT addr, refs, (SELECT count(*) FROM parts WHERE blob = addr) FROM blobs`)
	if err != nil {
		t.Fatal(err)
	}
	nrows := 0
	for rows.Next() {
		var addr string
		var refs, parts int
		rows.Scan(&addr, &refs, &parts)
		if refs != parts || refs == 0 {
			t.Errorf("blob %s: refs %d, parts %d", addr, refs, parts)
		}
		if _, ok := files[addr]; !ok {
			t.Errorf("blob %s has no file", addr)
		}
		nrows++
	}
	rows.Close()
	if nrows != len(files) {
		t.Errorf("%d blob rows, %d files", nrows, len(files))
	}
	t.Logf("%d puts (%d erased) over 3 kills", len(puts), len(erased))
}
