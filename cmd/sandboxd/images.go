package main

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/profiles"
)

// imageWatcher notices profiles' images that appear (a background build
// finished) or disappear (someone deleted one) while sandboxd runs: it logs
// each change with the profiles it concerns and, when images appear, warms
// their pools. Until then the runner answers those profiles' execs with
// 503 UNAVAILABLE, and /readyz lists them, on its own.
type imageWatcher struct {
	eng interface {
		ImageID(ctx context.Context, ref string) (string, error)
		Warm(ctx context.Context, set *profiles.Set)
	}
	current *atomic.Pointer[profiles.Set]
	log     *slog.Logger
	// present is what the last look found, by image; absent before it.
	present map[string]bool
}

// look checks every image of the profiles in force once.
func (w *imageWatcher) look(ctx context.Context) {
	set := w.current.Load()
	images, users := set.ProfilesByImage()
	appeared := false
	for _, img := range images {
		_, err := w.eng.ImageID(ctx, img)
		if ctx.Err() != nil {
			return
		}
		now := err == nil
		was, known := w.present[img]
		w.present[img] = now
		switch {
		case now && known && !was:
			appeared = true
			w.log.Info("image available: its profiles serve again", "image", img, "profiles", strings.Join(users[img], ","))
		case !now && (!known || was):
			w.log.Warn("image missing: its profiles answer 503 UNAVAILABLE until it is there", "image", img, "profiles", strings.Join(users[img], ","), "err", err)
		}
	}
	if appeared {
		w.eng.Warm(ctx, set)
	}
}

// run looks every interval until ctx ends.
func (w *imageWatcher) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		w.look(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
