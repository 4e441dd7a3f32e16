package runner

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestImageCache(t *testing.T) {
	c := newImageCache()
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	calls, id, fail := 0, "sha256:a", false
	inspect := func(context.Context, string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if fail {
			return "", errors.New("engine down")
		}
		return id, nil
	}
	set := func(f func()) { mu.Lock(); f(); mu.Unlock() }
	get := func() (string, error) { return c.get(context.Background(), "img", inspect) }
	expect := func(what, want string, wantCalls int) {
		t.Helper()
		c.wg.Wait()
		v, err := get()
		c.wg.Wait()
		mu.Lock()
		n := calls
		mu.Unlock()
		if err != nil || v != want || n != wantCalls {
			t.Fatalf("%s: got %q %v after %d engine calls; want %q after %d", what, v, err, n, want, wantCalls)
		}
	}
	expect("first get asks the engine", "sha256:a", 1)
	set(func() { id = "sha256:b" }) // rebuilt
	advance(imageCacheTTL / 2)
	expect("within the TTL the cache answers", "sha256:a", 1)
	advance(imageCacheTTL)
	expect("past the TTL the cached id answers while a refresh runs", "sha256:a", 2)
	expect("the refresh picked up the rebuilt image", "sha256:b", 2)

	// Past the stale bound the run asks the engine itself, and its error
	// is not cached.
	advance(imageCacheStale + time.Second)
	set(func() { fail = true })
	if _, err := get(); err == nil {
		t.Fatal("an engine error was hidden")
	}
	set(func() { fail = false })
	expect("after an error", "sha256:b", 4)

	// A failed background refresh drops the entry: the next run asks.
	advance(imageCacheTTL + time.Millisecond)
	set(func() { fail = true })
	expect("stale id while the refresh fails", "sha256:b", 5)
	if _, err := get(); err == nil {
		t.Fatal("after a failed refresh the engine's error was hidden")
	}
	set(func() { fail = false })

	// forget: the image named was deleted.
	expect("asks again", "sha256:b", 7)
	set(func() { id = "sha256:c" })
	c.forget("img")
	expect("after forget the engine is asked", "sha256:c", 8)
}
