package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

const pgStandingWhere = `profile = $1 AND host = $2 AND (state IN ('pending', 'rejected') OR (state = 'approved' AND expires_at > $3))`

func pgStanding(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, profile, host string, now time.Time) (*Approval, error) {
	a, err := scanApproval(q.QueryRow(ctx, `SELECT `+approvalCols+` FROM approvals WHERE `+pgStandingWhere+
		` ORDER BY last_seen DESC LIMIT 1`, profile, host, ms(now)))
	return a, pgNotFound(err)
}

// FileApproval implements Store. Replicas filing for the same profile and
// host at once are serialized by a transaction-scoped advisory lock on
// the pair, so there is one standing record, as with SQLite.
func (s *Postgres) FileApproval(ctx context.Context, a *Approval, now time.Time) (*Approval, bool, error) {
	if a.ID == "" || a.Profile == "" || a.Host == "" {
		return nil, false, errors.New("store: an approval needs an id, a profile and a host")
	}
	var rec *Approval
	var created bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "approval|"+a.Profile+"|"+a.Host); err != nil {
			return err
		}
		old, err := pgStanding(ctx, tx, a.Profile, a.Host, now)
		switch {
		case err == nil:
			rec = old
			if old.State == ApprovalApproved {
				return nil
			}
			old.Count++
			if now.After(old.LastSeen) {
				old.LastSeen = now.UTC().Truncate(time.Millisecond)
			}
			_, err := tx.Exec(ctx, `UPDATE approvals SET count = $1, last_seen = $2 WHERE id = $3`, old.Count, ms(old.LastSeen), old.ID)
			return err
		case !errors.Is(err, ErrNotFound):
			return err
		}
		r := *a
		r.State, r.Count = ApprovalPending, 1
		r.FirstSeen = now.UTC().Truncate(time.Millisecond)
		r.LastSeen = r.FirstSeen
		r.DecidedBy, r.DecidedTenant, r.DecidedAt, r.Reason, r.ExpiresAt = "", "", time.Time{}, "", time.Time{}
		if _, err := tx.Exec(ctx, `INSERT INTO approvals (`+approvalCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, '', '', 0, '', 0)`,
			r.ID, r.Profile, r.ProfileVersion, r.Host, r.Port, r.Method, r.URL, r.Tenant, r.KeyID, r.Client, r.State, r.Count,
			ms(r.FirstSeen), ms(r.LastSeen)); err != nil {
			return err
		}
		rec, created = &r, true
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return rec, created, nil
}

// StandingApproval implements Store.
func (s *Postgres) StandingApproval(ctx context.Context, profile, host string, now time.Time) (*Approval, error) {
	return pgStanding(ctx, s.pool, profile, host, now)
}

// GetApproval implements Store.
func (s *Postgres) GetApproval(ctx context.Context, id string) (*Approval, error) {
	a, err := scanApproval(s.pool.QueryRow(ctx, `SELECT `+approvalCols+` FROM approvals WHERE id = $1`, id))
	return a, pgNotFound(err)
}

// ListApprovals implements Store.
func (s *Postgres) ListApprovals(ctx context.Context, f ApprovalFilter, now time.Time) ([]*Approval, error) {
	q := `SELECT ` + approvalCols + ` FROM approvals WHERE 1 = 1`
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	switch f.Status {
	case "":
	case ApprovalPending, ApprovalRejected:
		q += ` AND state = ` + arg(f.Status)
	case ApprovalApproved:
		q += ` AND state = 'approved' AND expires_at > ` + arg(ms(now))
	case ApprovalExpired:
		q += ` AND state = 'approved' AND expires_at <= ` + arg(ms(now))
	default:
		return nil, fmt.Errorf("store: unknown approval status %q", f.Status)
	}
	if f.Profile != "" {
		q += ` AND profile = ` + arg(f.Profile)
	}
	if f.Host != "" {
		q += ` AND host = ` + arg(f.Host)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	q += ` ORDER BY last_seen DESC, id LIMIT ` + arg(limit)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*Approval{}
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// DecideApproval implements Store.
func (s *Postgres) DecideApproval(ctx context.Context, id string, d ApprovalDecision, now time.Time) (*Approval, *Approval, error) {
	if err := checkDecision(d, now); err != nil {
		return nil, nil, err
	}
	var before, after *Approval
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		before, err = scanApproval(tx.QueryRow(ctx, `SELECT `+approvalCols+` FROM approvals WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return pgNotFound(err)
		}
		if before.Status(now) == ApprovalExpired {
			return fmt.Errorf("approval %s expired at %s: %w", id, before.ExpiresAt.Format(time.RFC3339), ErrApprovalExpired)
		}
		after = decided(before, d, now)
		_, err = tx.Exec(ctx, `UPDATE approvals SET state = $1, decided_by = $2, decided_tenant = $3, decided_at = $4, reason = $5, expires_at = $6 WHERE id = $7`,
			after.State, after.DecidedBy, after.DecidedTenant, ms(after.DecidedAt), after.Reason, optMS(after.ExpiresAt), id)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrApprovalExpired) {
			return before, nil, err
		}
		return nil, nil, err
	}
	return before, after, nil
}
