package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/control/budget"
	"github.com/sandboxd/sandboxd/internal/httpapi"
	"github.com/sandboxd/sandboxd/internal/metrics"
	"github.com/sandboxd/sandboxd/internal/pgdb"
	"github.com/sandboxd/sandboxd/internal/store"
)

// controlFlags are the control plane's serve flags.
type controlFlags struct {
	tenantsFile                     string
	idempotencyTTL, idempotencyWait time.Duration
	asyncTTL                        time.Duration
	// state is "" (SQLite in the data dir) or a postgres:// URL (a fleet);
	// replica and advertise name this replica and where others reach it.
	state, replica, advertise string
	// fleetKeyFile holds the secret replicas sign forwarded requests with.
	fleetKeyFile string
}

func addControlFlags(fs *flag.FlagSet, c *controlFlags) {
	fs.StringVar(&c.tenantsFile, "tenants-file", envDefault("TENANTS_FILE", ""), "rate limits and budgets per tenant and session (YAML); without it there are none (env SANDBOXD_TENANTS_FILE)")
	fs.DurationVar(&c.idempotencyTTL, "idempotency-ttl", envDuration("IDEMPOTENCY_TTL", 24*time.Hour), "how long an Idempotency-Key's answer is kept (env SANDBOXD_IDEMPOTENCY_TTL)")
	fs.DurationVar(&c.idempotencyWait, "idempotency-wait", envDuration("IDEMPOTENCY_WAIT", 30*time.Second), "how long a retry waits for the first request with its key before 409 IN_PROGRESS (env SANDBOXD_IDEMPOTENCY_WAIT)")
	fs.DurationVar(&c.asyncTTL, "async-ttl", envDuration("ASYNC_TTL", 24*time.Hour), "how long an async exec's result is kept for GET /exec/{id} (env SANDBOXD_ASYNC_TTL)")
	fs.StringVar(&c.state, "state", envDefault("STATE", ""), "where durable state lives: empty for SQLite in the data dir (one host), or a postgres:// URL shared by a fleet of replicas (env SANDBOXD_STATE)")
	host, _ := os.Hostname()
	fs.StringVar(&c.replica, "replica", envDefault("REPLICA", host), "this replica's name, unique in a fleet: every answer's X-Sandboxd-Replica and the audit records it writes (env SANDBOXD_REPLICA)")
	fs.StringVar(&c.fleetKeyFile, "fleet-key-file", envDefault("FLEET_KEY_FILE", ""), "a file holding the fleet's shared secret (at least 32 characters, the same on every replica), with which replicas sign the session requests they forward to each other; required with a postgres:// --state (env SANDBOXD_FLEET_KEY_FILE)")
	fs.StringVar(&c.advertise, "advertise-url", envDefault("ADVERTISE_URL", ""), "the base URL other replicas reach this one's API at, for forwarded session calls; empty: http:// and --addr (with the host name for an unspecified address) (env SANDBOXD_ADVERTISE_URL)")
}

func (c *controlFlags) check() error {
	if c.idempotencyTTL < time.Minute || c.idempotencyWait <= 0 || c.asyncTTL < time.Minute {
		return errors.New("--idempotency-ttl and --async-ttl must be at least 1m, --idempotency-wait above 0")
	}
	if c.state != "" && c.state != "sqlite" && !pgdb.IsURL(c.state) {
		return fmt.Errorf("--state %q: use sqlite (the default) or a postgres:// URL", pgdb.Redacted(c.state))
	}
	if c.replica == "" || !replicaName.MatchString(c.replica) {
		return fmt.Errorf("--replica %q: use 1 to 63 of a-z, A-Z, 0-9, '.', '_' and '-'", c.replica)
	}
	if pgdb.IsURL(c.state) && c.fleetKeyFile == "" {
		return errors.New("a postgres:// --state needs --fleet-key-file: replicas sign the session requests they forward to each other with it")
	}
	if c.advertise != "" {
		u, err := url.Parse(c.advertise)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("--advertise-url %q: give a base URL such as http://10.0.0.5:8080", c.advertise)
		}
	}
	return nil
}

var replicaName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,63}$`)

// advertiseURL is --advertise-url, or one made from the API's listen
// address.
func (c *controlFlags) advertiseURL(addr string) string {
	if c.advertise != "" {
		return strings.TrimSuffix(c.advertise, "/")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host, _ = os.Hostname()
	}
	return "http://" + net.JoinHostPort(host, port)
}

// fleetKey reads --fleet-key-file (nil without one).
func (c *controlFlags) fleetKey() ([]byte, error) {
	if c.fleetKeyFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(c.fleetKeyFile)
	if err != nil {
		return nil, fmt.Errorf("reading --fleet-key-file: %w", err)
	}
	key := []byte(strings.TrimSpace(string(b)))
	if len(key) < 32 {
		return nil, fmt.Errorf("--fleet-key-file %s holds %d characters; use at least 32 (e.g. openssl rand -hex 32)", c.fleetKeyFile, len(key))
	}
	return key, nil
}

// fleet reports whether the state is shared by a fleet (PostgreSQL).
func (c *controlFlags) fleet() bool { return pgdb.IsURL(c.state) }

// stateBackend is the durable state a serve opened: the control plane's
// pieces, and (in a fleet) the PostgreSQL store the audit log and the
// capture metadata share.
type stateBackend struct {
	ctl   httpapi.Control
	pg    *store.Postgres // nil: SQLite in the data dir
	close func()
}

// openControl opens the store (SQLite in the data dir, holding its lock,
// or the fleet's PostgreSQL), marks what an earlier process left in
// flight as interrupted, and loads the tenants file.
func openControl(c *controlFlags, dataDir, addr string, queue int, log *slog.Logger) (*stateBackend, error) {
	var tenants *budget.Config
	if c.tenantsFile != "" {
		var err error
		if tenants, err = budget.LoadFile(c.tenantsFile); err != nil {
			return nil, fmt.Errorf("loading tenants: %w", err)
		}
		log.Info("tenants file loaded", "file", c.tenantsFile, "tenants", len(tenants.Tenants))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := &stateBackend{}
	var st store.Store
	if c.fleet() {
		// The data dir stays this process's own (its containers' instance
		// id, local files): lock it as the SQLite store would.
		lock, err := store.LockDataDir(dataDir)
		if err != nil {
			return nil, err
		}
		pg, err := store.OpenPostgres(ctx, c.state)
		if err != nil {
			lock.Close()
			return nil, fmt.Errorf("opening the shared state: %w", err)
		}
		log.Info("state is shared with the fleet", "state", pgdb.Redacted(c.state), "replica", c.replica)
		st, b.pg = pg, pg
		b.close = func() {
			pg.Close()
			lock.Close()
		}
	} else {
		sq, err := store.OpenSQLite(dataDir)
		if err != nil {
			return nil, err
		}
		st = sq
		b.close = func() {
			if err := sq.Close(); err != nil {
				log.Error("closing the store", "err", err)
			}
		}
	}
	owner := control.NewOwnerID()
	rs, err := st.Recover(ctx, owner)
	if err != nil {
		b.close()
		return nil, fmt.Errorf("recovering the store: %w", err)
	}
	if rs.Idempotency > 0 || rs.Execs > 0 || rs.Sessions > 0 {
		log.Warn("an earlier process stopped with requests in flight; they are marked interrupted and will not run again",
			"idempotency_keys", rs.Idempotency, "async_execs", rs.Execs, "sessions", rs.Sessions)
	}
	b.ctl = httpapi.Control{
		Store:           st,
		Owner:           owner,
		Limits:          budget.New(tenants, st, log),
		Metrics:         metrics.New(),
		IdempotencyTTL:  c.idempotencyTTL,
		IdempotencyWait: c.idempotencyWait,
		AsyncTTL:        c.asyncTTL,
		Queue:           queue,
		Replica:         c.replica,
		Addr:            c.advertiseURL(addr),
	}
	return b, nil
}
