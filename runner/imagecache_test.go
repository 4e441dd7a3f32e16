package runner

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestImageCache(t *testing.T) {
	c := newImageCache()
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	calls, id, fail := 0, "sha256:a", false
	inspect := func(context.Context, string) (string, error) {
		calls++
		if fail {
			return "", errors.New("engine down")
		}
		return id, nil
	}
	get := func() (string, error) { return c.get(context.Background(), "img", inspect) }
	if v, _ := get(); v != "sha256:a" || calls != 1 {
		t.Fatalf("first get: %s, %d calls", v, calls)
	}
	id = "sha256:b" // rebuilt
	now = now.Add(imageCacheTTL / 2)
	if v, _ := get(); v != "sha256:a" || calls != 1 {
		t.Fatalf("within the TTL: %s, %d calls", v, calls)
	}
	now = now.Add(imageCacheTTL)
	if v, _ := get(); v != "sha256:b" || calls != 2 {
		t.Fatalf("after the TTL the rebuilt image is used: %s, %d calls", v, calls)
	}
	// Errors are not cached.
	now = now.Add(2 * imageCacheTTL)
	fail = true
	if _, err := get(); err == nil {
		t.Fatal("an engine error was hidden")
	}
	fail = false
	if v, err := get(); err != nil || v != "sha256:b" || calls != 4 {
		t.Fatalf("after an error: %s %v, %d calls", v, err, calls)
	}
}
