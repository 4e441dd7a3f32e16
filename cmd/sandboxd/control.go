package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/internal/control/budget"
	"github.com/sandboxd/sandboxd/internal/httpapi"
	"github.com/sandboxd/sandboxd/internal/metrics"
	"github.com/sandboxd/sandboxd/internal/store"
)

// controlFlags are the control plane's serve flags.
type controlFlags struct {
	tenantsFile                     string
	idempotencyTTL, idempotencyWait time.Duration
	asyncTTL                        time.Duration
}

func addControlFlags(fs *flag.FlagSet, c *controlFlags) {
	fs.StringVar(&c.tenantsFile, "tenants-file", envDefault("TENANTS_FILE", ""), "rate limits and budgets per tenant and session (YAML); without it there are none (env SANDBOXD_TENANTS_FILE)")
	fs.DurationVar(&c.idempotencyTTL, "idempotency-ttl", envDuration("IDEMPOTENCY_TTL", 24*time.Hour), "how long an Idempotency-Key's answer is kept (env SANDBOXD_IDEMPOTENCY_TTL)")
	fs.DurationVar(&c.idempotencyWait, "idempotency-wait", envDuration("IDEMPOTENCY_WAIT", 30*time.Second), "how long a retry waits for the first request with its key before 409 IN_PROGRESS (env SANDBOXD_IDEMPOTENCY_WAIT)")
	fs.DurationVar(&c.asyncTTL, "async-ttl", envDuration("ASYNC_TTL", 24*time.Hour), "how long an async exec's result is kept for GET /exec/{id} (env SANDBOXD_ASYNC_TTL)")
}

func (c *controlFlags) check() error {
	if c.idempotencyTTL < time.Minute || c.idempotencyWait <= 0 || c.asyncTTL < time.Minute {
		return errors.New("--idempotency-ttl and --async-ttl must be at least 1m, --idempotency-wait above 0")
	}
	return nil
}

// openControl opens the store in the data dir (holding its lock), marks
// what an earlier process left in flight as interrupted, and loads the
// tenants file. The returned close closes the store.
func openControl(c *controlFlags, dataDir string, queue int, log *slog.Logger) (httpapi.Control, func(), error) {
	var tenants *budget.Config
	if c.tenantsFile != "" {
		var err error
		if tenants, err = budget.LoadFile(c.tenantsFile); err != nil {
			return httpapi.Control{}, nil, fmt.Errorf("loading tenants: %w", err)
		}
		log.Info("tenants file loaded", "file", c.tenantsFile, "tenants", len(tenants.Tenants))
	}
	st, err := store.OpenSQLite(dataDir)
	if err != nil {
		return httpapi.Control{}, nil, err
	}
	owner := fmt.Sprintf("pid%d-%d", os.Getpid(), time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := st.Recover(ctx, owner)
	if err != nil {
		st.Close()
		return httpapi.Control{}, nil, fmt.Errorf("recovering the store: %w", err)
	}
	if rs.Idempotency > 0 || rs.Execs > 0 {
		log.Warn("an earlier process stopped with requests in flight; they are marked interrupted and will not run again",
			"idempotency_keys", rs.Idempotency, "async_execs", rs.Execs)
	}
	ctl := httpapi.Control{
		Store:           st,
		Owner:           owner,
		Limits:          budget.New(tenants, st, log),
		Metrics:         metrics.New(),
		IdempotencyTTL:  c.idempotencyTTL,
		IdempotencyWait: c.idempotencyWait,
		AsyncTTL:        c.asyncTTL,
		Queue:           queue,
	}
	return ctl, func() {
		if err := st.Close(); err != nil {
			log.Error("closing the store", "err", err)
		}
	}, nil
}
