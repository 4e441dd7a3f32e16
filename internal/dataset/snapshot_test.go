package dataset

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSnapshotChangesWithContent(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.csv", "x,y\n1,2\n")
	write("sub/b.txt", "hello")
	r := NewRegistry()
	id1, err := r.Snapshot(dir)
	if err != nil || len(id1) != 67 {
		t.Fatalf("snapshot: %q %v", id1, err)
	}
	if again, _ := r.Snapshot(dir); again != id1 {
		t.Fatal("an unchanged dataset got a new id")
	}
	if direct, _ := Snapshot(dir); direct != id1 {
		t.Fatal("the registry and Snapshot disagree")
	}
	// Same size, same mtime, different content: the fingerprint alone would
	// not see it, Snapshot does.
	st, _ := os.Stat(filepath.Join(dir, "a.csv"))
	write("a.csv", "x,y\n1,3\n")
	os.Chtimes(filepath.Join(dir, "a.csv"), st.ModTime(), st.ModTime())
	if id, _ := Snapshot(dir); id == id1 {
		t.Fatal("changed content kept the id")
	}
	// A change the fingerprint sees gives the registry a new id.
	write("a.csv", "x,y\n1,3\n4,5\n")
	os.Chtimes(filepath.Join(dir, "a.csv"), time.Now().Add(time.Minute), time.Now().Add(time.Minute))
	id2, _ := r.Snapshot(dir)
	if id2 == id1 {
		t.Fatal("the registry kept the old id after a change")
	}
	// Renaming a file changes the id; so does adding a symlink.
	os.Rename(filepath.Join(dir, "sub/b.txt"), filepath.Join(dir, "sub/c.txt"))
	id3, _ := r.Snapshot(dir)
	os.Symlink("/etc/passwd", filepath.Join(dir, "link"))
	id4, _ := r.Snapshot(dir)
	if id3 == id2 || id4 == id3 {
		t.Fatal("rename or symlink did not change the id")
	}
}
