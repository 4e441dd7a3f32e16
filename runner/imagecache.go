package runner

import (
	"context"
	"sync"
	"time"
)

// Image id caching. Within imageCacheTTL an id is used without asking the
// engine. After it, up to imageCacheStale, the cached id is still used
// while one background inspect refreshes it, so no run waits for the
// engine round trip (about 2 ms here) on its path; a rebuilt image (make
// image) is picked up by the runs after that refresh. Past imageCacheStale
// the run asks the engine itself. A run whose cached image has been
// deleted meanwhile drops the entry and asks again (forget).
const (
	imageCacheTTL   = 2 * time.Second
	imageCacheStale = time.Minute
)

// imageCache remembers the image id of each reference. Errors are not
// cached. Safe for concurrent use.
type imageCache struct {
	mu    sync.Mutex
	ids   map[string]cachedImage
	now   func() time.Time
	ttl   time.Duration
	stale time.Duration
	wg    sync.WaitGroup // background refreshes, for tests
}

type cachedImage struct {
	id         string
	at         time.Time
	refreshing bool
}

func newImageCache() *imageCache {
	return &imageCache{ids: map[string]cachedImage{}, now: time.Now, ttl: imageCacheTTL, stale: imageCacheStale}
}

// get returns ref's id, from the cache or from inspect.
func (c *imageCache) get(ctx context.Context, ref string, inspect func(context.Context, string) (string, error)) (string, error) {
	c.mu.Lock()
	e, ok := c.ids[ref]
	age := c.now().Sub(e.at)
	switch {
	case ok && age < c.ttl:
		c.mu.Unlock()
		return e.id, nil
	case ok && age < c.stale:
		if !e.refreshing {
			e.refreshing = true
			c.ids[ref] = e
			c.wg.Add(1)
			go c.refresh(ref, inspect)
		}
		c.mu.Unlock()
		return e.id, nil
	}
	c.mu.Unlock()
	id, err := inspect(ctx, ref)
	if err != nil {
		return "", err
	}
	c.put(ref, id)
	return id, nil
}

func (c *imageCache) refresh(ref string, inspect func(context.Context, string) (string, error)) {
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := inspect(ctx, ref)
	if err != nil {
		// The next run asks the engine itself and gets the error.
		c.forget(ref)
		return
	}
	c.put(ref, id)
}

func (c *imageCache) put(ref, id string) {
	c.mu.Lock()
	c.ids[ref] = cachedImage{id: id, at: c.now()}
	c.mu.Unlock()
}

// forget drops ref's entry: the engine no longer has the image it named.
func (c *imageCache) forget(ref string) {
	c.mu.Lock()
	delete(c.ids, ref)
	c.mu.Unlock()
}
