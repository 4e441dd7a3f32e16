package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// FileApproval implements Store. Replicas filing for the same profile and
// host at once are serialized by a transaction-scoped advisory lock on
// the pair, so there is one standing record, as with SQLite.
func (s *Postgres) FileApproval(ctx context.Context, a *Approval, now time.Time) (*Approval, bool, error) {
	if err := checkApproval(a); err != nil {
		return nil, false, err
	}
	var rec *Approval
	var created bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "approval|"+a.Profile+"|"+a.Host); err != nil {
			return err
		}
		var err error
		rec, created, err = fileApproval(ctx, pgQ{tx}, a, now)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return rec, created, nil
}

// DecideApproval implements Store.
func (s *Postgres) DecideApproval(ctx context.Context, id string, d ApprovalDecision, now time.Time) (*Approval, *Approval, error) {
	if err := checkDecision(d, now); err != nil {
		return nil, nil, err
	}
	var before, after *Approval
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		before, after, err = decideApproval(ctx, pgQ{tx}, id, d, now, " FOR UPDATE")
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
