package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The approval records' statements and rules, for both stores (see
// querier); each store adds its transactions.

const approvalCols = `id, profile, profile_version, host, port, method, url, tenant, key_id, client, state, count,
	first_seen, last_seen, decided_by, decided_tenant, decided_at, reason, expires_at`

func scanApproval(r row) (*Approval, error) {
	a := &Approval{}
	var first, last, decided, expires int64
	err := r.Scan(&a.ID, &a.Profile, &a.ProfileVersion, &a.Host, &a.Port, &a.Method, &a.URL, &a.Tenant, &a.KeyID, &a.Client,
		&a.State, &a.Count, &first, &last, &a.DecidedBy, &a.DecidedTenant, &decided, &a.Reason, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	a.FirstSeen, a.LastSeen = fromMS(first), fromMS(last)
	if decided != 0 {
		a.DecidedAt = fromMS(decided)
	}
	if expires != 0 {
		a.ExpiresAt = fromMS(expires)
	}
	return a, nil
}

func optMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return ms(t)
}

// standingWhere selects the standing record of a profile and host: pending,
// rejected, or approved and not yet expired. Arguments: profile, host, now.
const standingWhere = `profile = ? AND host = ? AND (state IN ('pending', 'rejected') OR (state = 'approved' AND expires_at > ?))`

func standing(ctx context.Context, q querier, profile, host string, now time.Time) (*Approval, error) {
	return scanApproval(q.queryRow(ctx, `SELECT `+approvalCols+` FROM approvals WHERE `+standingWhere+
		` ORDER BY last_seen DESC LIMIT 1`, profile, host, ms(now)))
}

// StandingApproval implements Store.
func (c common) StandingApproval(ctx context.Context, profile, host string, now time.Time) (*Approval, error) {
	return standing(ctx, c.q, profile, host, now)
}

// checkApproval refuses a request without what FileApproval needs.
func checkApproval(a *Approval) error {
	if a.ID == "" || a.Profile == "" || a.Host == "" {
		return errors.New("store: an approval needs an id, a profile and a host")
	}
	return nil
}

// fileApproval is FileApproval in a transaction tx that no other filing
// for the same profile and host runs beside.
func fileApproval(ctx context.Context, tx querier, a *Approval, now time.Time) (*Approval, bool, error) {
	old, err := standing(ctx, tx, a.Profile, a.Host, now)
	switch {
	case err == nil:
		if old.State == ApprovalApproved {
			return old, false, nil
		}
		old.Count++
		if now.After(old.LastSeen) {
			old.LastSeen = now.UTC().Truncate(time.Millisecond)
		}
		if _, err := tx.exec(ctx, `UPDATE approvals SET count = ?, last_seen = ? WHERE id = ?`, old.Count, ms(old.LastSeen), old.ID); err != nil {
			return nil, false, err
		}
		return old, false, nil
	case !errors.Is(err, ErrNotFound):
		return nil, false, err
	}
	r := *a
	r.State, r.Count = ApprovalPending, 1
	r.FirstSeen = now.UTC().Truncate(time.Millisecond)
	r.LastSeen = r.FirstSeen
	r.DecidedBy, r.DecidedTenant, r.DecidedAt, r.Reason, r.ExpiresAt = "", "", time.Time{}, "", time.Time{}
	if _, err := tx.exec(ctx, `INSERT INTO approvals (`+approvalCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '', '', 0, '', 0)`,
		r.ID, r.Profile, r.ProfileVersion, r.Host, r.Port, r.Method, r.URL, r.Tenant, r.KeyID, r.Client, r.State, r.Count,
		ms(r.FirstSeen), ms(r.LastSeen)); err != nil {
		return nil, false, err
	}
	return &r, true, nil
}

// GetApproval implements Store.
func (c common) GetApproval(ctx context.Context, id string) (*Approval, error) {
	return scanApproval(c.q.queryRow(ctx, `SELECT `+approvalCols+` FROM approvals WHERE id = ?`, id))
}

// ListApprovals implements Store.
func (c common) ListApprovals(ctx context.Context, f ApprovalFilter, now time.Time) ([]*Approval, error) {
	stmt := `SELECT ` + approvalCols + ` FROM approvals WHERE 1 = 1`
	var args []any
	switch f.Status {
	case "":
	case ApprovalPending, ApprovalRejected:
		stmt += ` AND state = ?`
		args = append(args, f.Status)
	case ApprovalApproved:
		stmt += ` AND state = 'approved' AND expires_at > ?`
		args = append(args, ms(now))
	case ApprovalExpired:
		stmt += ` AND state = 'approved' AND expires_at <= ?`
		args = append(args, ms(now))
	default:
		return nil, fmt.Errorf("store: unknown approval status %q", f.Status)
	}
	if f.Profile != "" {
		stmt += ` AND profile = ?`
		args = append(args, f.Profile)
	}
	if f.Host != "" {
		stmt += ` AND host = ?`
		args = append(args, f.Host)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	stmt += ` ORDER BY last_seen DESC, id LIMIT ?`
	args = append(args, limit)
	out := []*Approval{}
	err := c.q.each(ctx, stmt, args, func(r row) error {
		a, err := scanApproval(r)
		if err != nil {
			return err
		}
		out = append(out, a)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// decideApproval is DecideApproval in a transaction tx; lock is the
// clause that locks the record's row until tx ends ("" where the
// transaction itself excludes other writers). before is set with an
// error only when the approval has expired.
func decideApproval(ctx context.Context, tx querier, id string, d ApprovalDecision, now time.Time, lock string) (before, after *Approval, err error) {
	before, err = scanApproval(tx.queryRow(ctx, `SELECT `+approvalCols+` FROM approvals WHERE id = ?`+lock, id))
	if err != nil {
		return nil, nil, err
	}
	if before.Status(now) == ApprovalExpired {
		return before, nil, fmt.Errorf("approval %s expired at %s: %w", id, before.ExpiresAt.Format(time.RFC3339), ErrApprovalExpired)
	}
	after = decided(before, d, now)
	if _, err := tx.exec(ctx, `UPDATE approvals SET state = ?, decided_by = ?, decided_tenant = ?, decided_at = ?, reason = ?, expires_at = ? WHERE id = ?`,
		after.State, after.DecidedBy, after.DecidedTenant, ms(after.DecidedAt), after.Reason, optMS(after.ExpiresAt), id); err != nil {
		return nil, nil, err
	}
	return before, after, nil
}

// checkDecision refuses a decision that is neither an approval nor a
// rejection, or an approval that ends before now.
func checkDecision(d ApprovalDecision, now time.Time) error {
	switch {
	case d.State != ApprovalApproved && d.State != ApprovalRejected:
		return fmt.Errorf("store: a decision is approved or rejected, not %q", d.State)
	case d.State == ApprovalApproved && !d.ExpiresAt.After(now):
		return errors.New("store: an approval must expire after now")
	}
	return nil
}

// decided is before with decision d made at now.
func decided(before *Approval, d ApprovalDecision, now time.Time) *Approval {
	after := *before
	after.State = d.State
	after.DecidedBy, after.DecidedTenant, after.Reason = d.By, d.ByTenant, d.Reason
	after.DecidedAt = now.UTC().Truncate(time.Millisecond)
	after.ExpiresAt = time.Time{}
	if d.State == ApprovalApproved {
		after.ExpiresAt = d.ExpiresAt.UTC().Truncate(time.Millisecond)
	}
	return &after
}

// FileApproval implements Store.
func (s *SQLite) FileApproval(ctx context.Context, a *Approval, now time.Time) (*Approval, bool, error) {
	if err := checkApproval(a); err != nil {
		return nil, false, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, false, err
	}
	defer tx.Rollback()
	rec, created, err := fileApproval(ctx, sqlQ{tx}, a, now)
	if err != nil {
		return nil, false, err
	}
	if err := tx.Commit(); err != nil {
		return nil, false, err
	}
	return rec, created, nil
}

// DecideApproval implements Store.
func (s *SQLite) DecideApproval(ctx context.Context, id string, d ApprovalDecision, now time.Time) (*Approval, *Approval, error) {
	if err := checkDecision(d, now); err != nil {
		return nil, nil, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	defer tx.Rollback()
	before, after, err := decideApproval(ctx, sqlQ{tx}, id, d, now, "")
	if err != nil {
		return before, nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, nil, err
	}
	return before, after, nil
}
