package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/imagebuild"
)

// The error for a missing image says how far its background build is, that
// its build failed, or how to build it.
func TestImageHint(t *testing.T) {
	r, _, fc := newFakeRunner(t)
	const ref = "sandboxd/python-data:3.11"
	if got := r.imageHint(ref); got != "build it with `make image`" {
		t.Errorf("no builds dir: %q", got)
	}
	dir := t.TempDir()
	r.SetImageBuilds(dir)
	if got := r.imageHint(ref); !strings.Contains(got, "make image") {
		t.Errorf("no build of it: %q", got)
	}
	now := fc.Now().UTC().Format(time.RFC3339)
	status := func(state string) {
		t.Helper()
		body := `{"image":"` + ref + `","state":"` + state + `","step":"building the image","step_number":2,"steps":3,"started":"` + now + `","updated":"` + now + `"}`
		if err := os.WriteFile(filepath.Join(dir, imagebuild.FileName(ref)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	status(imagebuild.Building)
	fc.Advance(90 * time.Second)
	got := r.imageHint(ref)
	for _, want := range []string{"being built: step 2 of 3 (building the image), 1m30s so far", "503 until it is ready"} {
		if !strings.Contains(got, want) {
			t.Errorf("building: %q lacks %q", got, want)
		}
	}
	status(imagebuild.Failed)
	if got := r.imageHint(ref); !strings.Contains(got, "failed while building the image") || !strings.Contains(got, "make image") {
		t.Errorf("failed: %q", got)
	}
}
