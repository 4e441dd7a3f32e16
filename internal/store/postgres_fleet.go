package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// Beat implements Shared.
func (s *Postgres) Beat(ctx context.Context, m Member) error {
	now := time.Now()
	if m.StartedAt.IsZero() {
		m.StartedAt = now
	}
	_, err := s.relaxed.Exec(ctx, `INSERT INTO members (owner, replica, addr, started_at, seen_at) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (owner) DO UPDATE SET replica = excluded.replica, addr = excluded.addr, seen_at = excluded.seen_at`,
		m.Owner, m.Replica, m.Addr, ms(m.StartedAt), ms(now))
	if err != nil {
		s.beatsSince.Store(0)
	} else {
		s.beatsSince.CompareAndSwap(0, now.UnixNano())
	}
	return err
}

// Leave implements Shared.
func (s *Postgres) Leave(ctx context.Context, owner string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM members WHERE owner = $1`, owner)
	return err
}

// Member implements Shared.
func (s *Postgres) Member(ctx context.Context, owner string) (*Member, bool, error) {
	m := &Member{Owner: owner}
	var started, seen int64
	err := s.pool.QueryRow(ctx, `SELECT replica, addr, started_at, seen_at FROM members WHERE owner = $1`, owner).
		Scan(&m.Replica, &m.Addr, &started, &seen)
	if err != nil {
		return nil, false, pgNotFound(err)
	}
	m.StartedAt, m.SeenAt = fromMS(started), fromMS(seen)
	return m, time.Since(m.SeenAt) < s.DeadAfter || !s.watched(), nil
}

// watched says whether this store's beats have gone through without a
// failure for DeadAfter: only then does a member's silence prove it dead
// rather than the database down or out of reach (nobody beats through an
// outage).
func (s *Postgres) watched() bool {
	since := s.beatsSince.Load()
	return since != 0 && time.Since(time.Unix(0, since)) >= s.DeadAfter
}

// TakeToken implements Shared: the bucket is refilled (made full when
// new) and, in the same transaction with its row locked, a token taken
// when there is one.
func (s *Postgres) TakeToken(ctx context.Context, key string, perSec, capacity float64, now time.Time) (time.Duration, error) {
	var wait time.Duration
	err := pgx.BeginFunc(ctx, s.relaxed, func(tx pgx.Tx) error {
		var tokens float64
		if err := tx.QueryRow(ctx, `INSERT INTO rate_buckets AS b (key, tokens, last_ms) VALUES ($1, $2, $4)
			ON CONFLICT (key) DO UPDATE SET
				tokens = LEAST($2, b.tokens + GREATEST($4 - b.last_ms, 0) / 1000.0 * $3),
				last_ms = GREATEST(b.last_ms, $4)
			RETURNING tokens`, key, capacity, perSec, ms(now)).Scan(&tokens); err != nil {
			return err
		}
		// The refill is floating point: 3 s at 20 a minute is 0.999...
		if tokens < 1-1e-9 {
			wait = waitFor(tokens, perSec)
			return nil
		}
		_, err := tx.Exec(ctx, `UPDATE rate_buckets SET tokens = GREATEST(tokens - 1, 0) WHERE key = $1`, key)
		return err
	})
	return wait, err
}

func waitFor(tokens, perSec float64) time.Duration {
	if perSec <= 0 {
		return time.Hour
	}
	return time.Duration(math.Ceil((1 - tokens) / perSec * float64(time.Second)))
}

// Admit implements Shared. A transaction-scoped advisory lock on the
// tenant serializes admissions of one tenant on every replica; the view
// is read and the hold inserted under it.
func (s *Postgres) Admit(ctx context.Context, tenant, session, day string, decide func(BudgetView) *Hold) (*Hold, error) {
	var hold *Hold
	err := pgx.BeginFunc(ctx, s.relaxed, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "budget|"+tenant); err != nil {
			return err
		}
		v, err := view(ctx, pgQ{tx}, tenant, session, day)
		if err != nil {
			return err
		}
		h := decide(v)
		if h == nil {
			return nil
		}
		if h.CreatedAt.IsZero() {
			h.CreatedAt = time.Now()
		}
		if _, err := tx.Exec(ctx, `INSERT INTO budget_holds (id, tenant, session, day, cpu_ms, wall_ms, owner, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			h.ID, h.Tenant, h.Session, h.Day, h.CPUMS, h.WallMS, h.Owner, ms(h.CreatedAt)); err != nil {
			return err
		}
		hold = h
		return nil
	})
	return hold, err
}

// View implements Shared.
func (s *Postgres) View(ctx context.Context, tenant, session, day string) (BudgetView, error) {
	return view(ctx, s.q, tenant, session, day)
}

func view(ctx context.Context, q querier, tenant, session, day string) (BudgetView, error) {
	var v BudgetView
	var err error
	if v.Tenant, err = (common{q: q}).Usage(ctx, ScopeTenantDay, tenant, day); err != nil {
		return v, err
	}
	var running int64
	if err := q.queryRow(ctx, `SELECT count(*), COALESCE(sum(cpu_ms) FILTER (WHERE day = ?2), 0) FROM budget_holds WHERE tenant = ?1`,
		tenant, day).Scan(&running, &v.ReservedCPU); err != nil {
		return v, err
	}
	v.Running = int(running)
	if session == "" {
		return v, nil
	}
	if v.Session, err = (common{q: q}).Usage(ctx, ScopeSession, tenant, session); err != nil {
		return v, err
	}
	err = q.queryRow(ctx, `SELECT count(*), COALESCE(sum(cpu_ms), 0), COALESCE(sum(wall_ms), 0) FROM budget_holds WHERE tenant = ? AND session = ?`,
		tenant, session).Scan(&v.Pending, &v.SessionCPU, &v.SessionWall)
	return v, err
}

// Tokens implements Shared.
func (s *Postgres) Tokens(ctx context.Context, key string, perSec, capacity float64, now time.Time) (float64, error) {
	var tokens float64
	var last int64
	err := s.pool.QueryRow(ctx, `SELECT tokens, last_ms FROM rate_buckets WHERE key = $1`, key).Scan(&tokens, &last)
	if errors.Is(err, pgx.ErrNoRows) {
		return capacity, nil
	}
	if err != nil {
		return 0, err
	}
	return math.Min(capacity, tokens+math.Max(0, float64(ms(now)-last))/1000*perSec), nil
}

// OpenSessions implements Shared.
func (s *Postgres) OpenSessions(ctx context.Context, tenant string) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE tenant = $1 AND state <> 'ended'`, tenant).Scan(&n)
	return n, err
}

// ReleaseHold implements Shared.
func (s *Postgres) ReleaseHold(ctx context.Context, id string, charge ...UsageDelta) error {
	return pgx.BeginFunc(ctx, s.relaxed, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM budget_holds WHERE id = $1`, id); err != nil {
			return err
		}
		return addUsage(ctx, tx, charge)
	})
}

// streakKey is the row key of a loop guard key (which may hold any
// bytes, NUL included): its sha256.
func streakKey(k string) string {
	h := sha256.Sum256([]byte(k))
	return hex.EncodeToString(h[:])
}

// Streak implements Shared.
func (s *Postgres) Streak(ctx context.Context, session string) (Streak, error) {
	session = streakKey(session)
	var st Streak
	var seen int64
	err := s.pool.QueryRow(ctx, `SELECT call, outcome, count, seen_ms FROM loop_streaks WHERE session = $1`, session).
		Scan(&st.Call, &st.Outcome, &st.Count, &seen)
	if errors.Is(err, pgx.ErrNoRows) {
		return Streak{}, nil
	}
	if err != nil {
		return Streak{}, err
	}
	st.Seen = fromMS(seen)
	return st, nil
}

// PutStreak implements Shared.
func (s *Postgres) PutStreak(ctx context.Context, session string, st Streak) error {
	session = streakKey(session)
	_, err := s.relaxed.Exec(ctx, `INSERT INTO loop_streaks (session, call, outcome, count, seen_ms) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (session) DO UPDATE SET call = excluded.call, outcome = excluded.outcome, count = excluded.count, seen_ms = excluded.seen_ms`,
		session, st.Call, st.Outcome, st.Count, ms(st.Seen))
	return err
}

// PutSession implements Shared.
func (s *Postgres) PutSession(ctx context.Context, e *SessionEntry) error {
	now := time.Now()
	if e.CreatedAt.IsZero() {
		e.CreatedAt = now
	}
	e.UpdatedAt = now
	_, err := s.relaxed.Exec(ctx, `INSERT INTO sessions (id, tenant, key_id, owner, replica, addr, state, end_reason, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (id) DO UPDATE SET state = excluded.state, end_reason = excluded.end_reason, updated_at = excluded.updated_at`,
		e.ID, e.Tenant, e.KeyID, e.Owner, e.Replica, e.Addr, e.State, e.EndReason, ms(e.CreatedAt), ms(e.UpdatedAt))
	return err
}

// GetSession implements Shared.
func (s *Postgres) GetSession(ctx context.Context, id string) (*SessionEntry, error) {
	e := &SessionEntry{ID: id}
	var created, updated int64
	err := s.pool.QueryRow(ctx, `SELECT tenant, key_id, owner, replica, addr, state, end_reason, created_at, updated_at FROM sessions WHERE id = $1`, id).
		Scan(&e.Tenant, &e.KeyID, &e.Owner, &e.Replica, &e.Addr, &e.State, &e.EndReason, &created, &updated)
	if err != nil {
		return nil, pgNotFound(err)
	}
	e.CreatedAt, e.UpdatedAt = fromMS(created), fromMS(updated)
	return e, nil
}

var _ Shared = (*Postgres)(nil)
