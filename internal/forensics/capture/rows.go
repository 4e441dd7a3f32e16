package capture

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// What the SQLite and the PostgreSQL stores share of their rows: the
// captures row, the statement of List, and the scans of tenant holds and
// of sweep candidates. Both database/sql's rows and pgx's satisfy rows.

// rows is a result set being read.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// capCols are the columns a captureRow scans, over captures c LEFT JOIN
// the tenant holds h (each store's FROM clause).
const capCols = `c.id, c.kind, c.tenant, c.key_id, c.request_id, c.created_at, c.retention, c.expires_at, c.meta, c.state,
	c.erased_at, c.erased_by, c.erase_reason, c.held, c.hold_at, c.hold_by, c.hold_reason, h.at, h.by, h.reason`

// captureRow is a captures row (capCols) as scanned. held is an INTEGER
// 0 or 1 in SQLite, which database/sql scans into a bool; the tenant
// hold's columns are NULL when there is none.
type captureRow struct {
	c                                                Capture
	created, retention, expires, erasedAt, holdAt    int64
	meta                                             []byte
	state, erasedBy, eraseReason, holdBy, holdReason string
	held                                             bool
	thAt                                             *int64
	thBy, thReason                                   *string
}

func (r *captureRow) dest() []any {
	return []any{&r.c.ID, &r.c.Kind, &r.c.Tenant, &r.c.KeyID, &r.c.RequestID, &r.created, &r.retention, &r.expires, &r.meta, &r.state,
		&r.erasedAt, &r.erasedBy, &r.eraseReason, &r.held, &r.holdAt, &r.holdBy, &r.holdReason, &r.thAt, &r.thBy, &r.thReason}
}

// capture is the row's capture, its Meta opened with k.
func (r *captureRow) capture(k *keys) (*Capture, error) {
	c := r.c
	c.CreatedAt, c.Retention, c.ExpiresAt = fromNanos(r.created), time.Duration(r.retention), fromNanos(r.expires)
	if r.state == "erased" {
		c.Erased = &Erasure{By: r.erasedBy, Reason: r.eraseReason, At: fromNanos(r.erasedAt)}
	}
	if r.held {
		c.Hold = &Hold{By: r.holdBy, Reason: r.holdReason, At: fromNanos(r.holdAt)}
	}
	if r.thAt != nil {
		c.TenantHold = &Hold{By: deref(r.thBy), Reason: deref(r.thReason), At: fromNanos(*r.thAt)}
	}
	m, err := k.openMeta(c.ID, r.meta)
	if err != nil {
		return nil, err
	}
	c.Meta = m
	return &c, nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// scanCaptures reads rows of capCols.
func scanCaptures(rs rows, k *keys) ([]Capture, error) {
	var out []Capture
	for rs.Next() {
		var r captureRow
		if err := rs.Scan(r.dest()...); err != nil {
			return nil, err
		}
		c, err := r.capture(k)
		if err != nil {
			return nil, err
		}
		out = append(out, *c)
	}
	return out, rs.Err()
}

// scanTenantHolds reads rows of tenant, at, by, reason.
func scanTenantHolds(rs rows) (map[string]Hold, error) {
	out := map[string]Hold{}
	for rs.Next() {
		var t string
		var h Hold
		var at int64
		if err := rs.Scan(&t, &at, &h.By, &h.Reason); err != nil {
			return nil, err
		}
		h.At = fromNanos(at)
		out[t] = h
	}
	return out, rs.Err()
}

// scanSwept reads rows of id, tenant, kind, created_at, expires_at.
func scanSwept(rs rows) ([]Swept, error) {
	var out []Swept
	for rs.Next() {
		var w Swept
		var created, expires int64
		if err := rs.Scan(&w.ID, &w.Tenant, &w.Kind, &created, &expires); err != nil {
			return nil, err
		}
		w.CreatedAt, w.ExpiresAt = fromNanos(created), fromNanos(expires)
		out = append(out, w)
	}
	return out, rs.Err()
}

// listQuery is List's statement: sel (SELECT, the columns and the FROM
// clause) with f's conditions, newest first, a row more than the page
// (limit) to tell whether there is another. ph(n) is the n-th
// placeholder; rowValues compares the cursor as a row value,
// (created_at, id) < (at, id), for a database that can use the index for
// it (PostgreSQL).
func listQuery(f Filter, sel string, ph func(n int) string, rowValues bool) (q string, args []any, limit int, err error) {
	limit = f.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	var where []string
	arg := func(v any) string {
		args = append(args, v)
		return ph(len(args))
	}
	if f.Tenant != "" {
		where = append(where, "c.tenant = "+arg(f.Tenant))
	}
	if f.Kind != "" {
		where = append(where, "c.kind = "+arg(f.Kind))
	}
	if !f.Since.IsZero() {
		where = append(where, "c.created_at >= "+arg(f.Since.UnixNano()))
	}
	if !f.Until.IsZero() {
		where = append(where, "c.created_at < "+arg(f.Until.UnixNano()))
	}
	if f.Cursor != "" {
		at, id, err := parseCursor(f.Cursor)
		if err != nil {
			return "", nil, 0, err
		}
		if rowValues {
			where = append(where, "(c.created_at, c.id) < ("+arg(at)+", "+arg(id)+")")
		} else {
			where = append(where, "(c.created_at < "+arg(at)+" OR (c.created_at = "+arg(at)+" AND c.id < "+arg(id)+"))")
		}
	}
	q = sel
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY c.created_at DESC, c.id DESC LIMIT ` + arg(limit+1)
	return q, args, limit, nil
}

// nextCursor cuts a List page read with a row more (listQuery) to limit
// and returns the cursor of the next page ("" at the end).
func nextCursor(out []Capture, limit int) ([]Capture, string) {
	if len(out) <= limit {
		return out, ""
	}
	out = out[:limit]
	last := out[limit-1]
	return out, makeCursor(last.CreatedAt.UnixNano(), last.ID)
}

// prepare readies c to be stored, for both stores' Put: an id and a
// creation time if it has none, checked, its expiry from its retention,
// each part's size and digest, the inline value of each part of at most
// inlineMax bytes (nil for the others, which are stored apart) and the
// sealed Meta.
func prepare(ctx context.Context, c *Capture, k *keys, inlineMax int) (inline [][]byte, meta []byte, err error) {
	if c.ID == "" {
		c.ID = newID()
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = time.Now()
	}
	c.CreatedAt = c.CreatedAt.Round(0).UTC()
	if err := check(c); err != nil {
		return nil, nil, err
	}
	c.ExpiresAt = time.Time{}
	if c.Retention > 0 {
		c.ExpiresAt = c.CreatedAt.Add(c.Retention)
	}
	inline = make([][]byte, len(c.Parts))
	for i := range c.Parts {
		p := &c.Parts[i]
		sum := sha256.Sum256(p.Data)
		p.Size, p.SHA256 = int64(len(p.Data)), hex.EncodeToString(sum[:])
		if len(p.Data) <= inlineMax {
			if inline[i], err = k.encodeInline(p.Data, c.ID, i); err != nil {
				return nil, nil, fmt.Errorf("storing capture %s: %w", c.ID, err)
			}
		}
	}
	if meta, err = k.sealMeta(c.ID, c.Meta); err != nil {
		return nil, nil, err
	}
	return inline, meta, ctx.Err()
}

// reviewed checks what a reviewer's change to capture id (an erasure, a
// hold) needs: by must say who makes it (noBy is the error when it does
// not); an id that cannot exist is ErrNotFound.
func reviewed(id, by, noBy string) error {
	if strings.TrimSpace(by) == "" {
		return errors.New(noBy)
	}
	if !validID(id) {
		return ErrNotFound
	}
	return nil
}

// checkTenantHold checks what a tenant hold needs: who sets it, and a
// tenant.
func checkTenantHold(tenant, by string) error {
	if strings.TrimSpace(by) == "" {
		return errors.New("setting a tenant hold: say who sets it (by)")
	}
	if tenant == "" {
		return errors.New("setting a tenant hold: no tenant")
	}
	return nil
}
