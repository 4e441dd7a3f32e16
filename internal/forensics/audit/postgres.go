package audit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandboxd/sandboxd/internal/pgdb"
)

// pgSteps are the audit log's schema versions on PostgreSQL.
var pgSteps = []string{
	`CREATE TABLE audit_records (
		seq BIGINT PRIMARY KEY,
		id TEXT NOT NULL UNIQUE,
		time_ns BIGINT NOT NULL,
		kind TEXT NOT NULL,
		tenant TEXT NOT NULL,
		status TEXT NOT NULL,
		exec_profile TEXT NOT NULL,
		egress_profile TEXT NOT NULL,
		session TEXT NOT NULL,
		code_sha256 TEXT NOT NULL,
		subject TEXT NOT NULL,
		replica TEXT NOT NULL,
		body BYTEA NOT NULL,
		prev_hash TEXT NOT NULL,
		hash TEXT NOT NULL);
	CREATE INDEX audit_records_tenant ON audit_records (tenant, seq);
	CREATE INDEX audit_records_kind ON audit_records (kind, seq);
	CREATE INDEX audit_records_time ON audit_records (time_ns);
	CREATE INDEX audit_records_code ON audit_records (code_sha256, seq);
	CREATE INDEX audit_records_session ON audit_records (session, seq);
	CREATE INDEX audit_records_subject ON audit_records (subject, seq);
	CREATE INDEX audit_records_status ON audit_records (status, seq);
	CREATE TABLE audit_record_sessions (
		session TEXT NOT NULL,
		seq BIGINT NOT NULL,
		PRIMARY KEY (session, seq));
	CREATE TABLE audit_record_hosts (
		host TEXT NOT NULL,
		seq BIGINT NOT NULL,
		PRIMARY KEY (host, seq));`,
}

// chainLock is the advisory lock that serializes appends to the fleet's
// one chain: each replica's group commit takes it, reads the head and
// appends its batch in one transaction.
const chainLock = 0x61756474 // "audt"

// Postgres is the audit log of a fleet: every replica appends to one
// hash chain in one PostgreSQL database. Each replica group-commits its
// own appends (as the SQLite log does); the batches of all replicas are
// serialized by a transaction-scoped advisory lock, under which a batch
// reads the chain's head and appends after it. A record names the
// replica that wrote it (Replica, which the hash covers). Append returns
// once the batch's transaction has committed (synchronous_commit, the
// server's default, makes that durable).
type Postgres struct {
	pool      *pgxpool.Pool
	replica   string
	w         *groupWriter
	closeOnce sync.Once
}

// OpenPostgres opens the log in the database pool connects to, bringing
// its tables up to date; replica names this writer in its records.
// Closing the log leaves the pool open (its owner closes it).
func OpenPostgres(ctx context.Context, pool *pgxpool.Pool, replica string) (*Postgres, error) {
	if err := pgdb.Migrate(ctx, pool, "audit", pgSteps); err != nil {
		return nil, fmt.Errorf("opening the audit log: %w", err)
	}
	p := &Postgres{pool: pool, replica: replica}
	p.w = newGroupWriter(p.commit)
	return p, nil
}

// Append implements Log.
func (p *Postgres) Append(ctx context.Context, r *Record) error { return p.w.Append(ctx, r) }

var recordColumns = []string{"seq", "id", "time_ns", "kind", "tenant", "status", "exec_profile", "egress_profile", "session", "code_sha256", "subject", "replica", "body", "prev_hash", "hash"}

func (p *Postgres) commit(batch []*appendReq) error {
	// The writer goroutine is the only caller; a batch must not wait for
	// ever on a database that went away.
	ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
	defer cancel()
	var rows []chained
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(chainLock)); err != nil {
			return err
		}
		var seq int64
		var prev string
		err := tx.QueryRow(ctx, `SELECT seq, hash FROM audit_records ORDER BY seq DESC LIMIT 1`).Scan(&seq, &prev)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if rows, err = chainBatch(batch, seq, prev, p.replica); err != nil {
			return err
		}
		var recs, hosts, sessions [][]any
		for _, c := range rows {
			r := &c.r
			recs = append(recs, []any{r.Seq, r.ID, r.Time.UnixNano(), r.Kind, r.Tenant, r.Status, profName(r.ExecProfile), profName(r.EgressProfile),
				r.Session, r.CodeSHA256, r.Subject, r.Replica, c.body, r.PrevHash, r.Hash})
			seen := map[string]bool{}
			for _, h := range r.Hosts {
				h = strings.ToLower(h)
				if !seen[h] {
					seen[h] = true
					hosts = append(hosts, []any{h, r.Seq})
				}
			}
			if r.SandboxSession != "" && r.SandboxSession != r.Session {
				sessions = append(sessions, []any{r.SandboxSession, r.Seq})
			}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"audit_records"}, recordColumns, pgx.CopyFromRows(recs)); err != nil {
			return err
		}
		if len(hosts) > 0 {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"audit_record_hosts"}, []string{"host", "seq"}, pgx.CopyFromRows(hosts)); err != nil {
				return err
			}
		}
		if len(sessions) > 0 {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"audit_record_sessions"}, []string{"session", "seq"}, pgx.CopyFromRows(sessions)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit: appending %d records: %w", len(batch), err)
	}
	committed(rows)
	return nil
}

// Close implements Log: the queued appends are written first.
func (p *Postgres) Close() error {
	p.closeOnce.Do(p.w.Close)
	return nil
}

// Get implements Log.
func (p *Postgres) Get(ctx context.Context, id string) (*Record, error) {
	return getRecord(p.pool.QueryRow(ctx, `SELECT body, hash FROM audit_records WHERE id = $1`, id), id)
}

// Query implements Log.
func (p *Postgres) Query(ctx context.Context, f Filter) ([]Record, string, error) {
	q, err := buildQuery(f, "audit_records", "audit_record_hosts", "audit_record_sessions", func(n int) string { return "$" + strconv.Itoa(n) })
	if err != nil {
		return nil, "", err
	}
	rows, err := p.pool.Query(ctx, q.sql, q.args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	return page(rows, q.limit)
}

// Verify implements Log, over the fleet's whole chain.
func (p *Postgres) Verify(ctx context.Context) (*Report, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+storedCols+` FROM audit_records ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return verifyRows(rows)
}

// Head implements Log.
func (p *Postgres) Head(ctx context.Context) (Anchor, error) {
	return head(p.pool.QueryRow(ctx, `SELECT seq, hash FROM audit_records ORDER BY seq DESC LIMIT 1`))
}

// CheckAnchors checks anchors against the chain rep found intact (see
// SQLite.CheckAnchors).
func (p *Postgres) CheckAnchors(ctx context.Context, rep *Report, anchors ...Anchor) error {
	return checkAnchors(rep, anchors, func(seq int64) (string, error) {
		var hash string
		err := p.pool.QueryRow(ctx, `SELECT hash FROM audit_records WHERE seq = $1`, seq).Scan(&hash)
		return hash, err
	})
}

var _ Log = (*Postgres)(nil)
