package capture

import (
	"context"
	"log/slog"
	"time"

	"github.com/sandboxd/sandboxd/internal/forensics/audit"
)

// Sweeper deletes the captures whose retention ended, writing one audit
// record per deletion, and then the blobs no capture references any more.
type Sweeper struct {
	Store Forensics
	Audit audit.Log
	Log   *slog.Logger
}

// Sweep deletes what expired by now; it returns how many captures went
// and the first error (a deletion whose record could not be written is
// logged and reported, the deletion stands).
func (w *Sweeper) Sweep(ctx context.Context, now time.Time) (int, error) {
	swept, err := w.Store.Sweep(ctx, now)
	for _, sw := range swept {
		if aerr := w.Audit.Append(ctx, audit.CaptureDelete(sw.Tenant, sw.ID, sw.Kind, sw.CreatedAt, sw.ExpiresAt)); aerr != nil {
			w.Log.Error("writing a retention deletion's audit record failed", "capture_id", sw.ID, "err", aerr)
			if err == nil {
				err = aerr
			}
		}
	}
	if len(swept) > 0 {
		w.Log.Info("retention: deleted expired captures", "count", len(swept))
	}
	// Blobs no capture references any more (a crash between a deletion's
	// commit and its file removal leaves some) go too.
	if gc, ok := w.Store.(interface {
		GC(context.Context) (int, error)
	}); ok {
		if n, gerr := gc.GC(ctx); gerr != nil {
			w.Log.Warn("capture blob GC failed", "err", gerr)
		} else if n > 0 {
			w.Log.Info("capture blob GC removed orphans", "count", n)
		}
	}
	return len(swept), err
}

// Run sweeps at once and then every interval (an hour when 0) until ctx
// ends.
func (w *Sweeper) Run(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = time.Hour
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		if _, err := w.Sweep(sctx, time.Now()); err != nil && ctx.Err() == nil {
			w.Log.Error("retention sweep failed", "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
