package audit

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// What the SQLite and the PostgreSQL logs share of reading their rows.
// Both database/sql's rows and pgx's satisfy row and rows; pgx.ErrNoRows
// is sql.ErrNoRows to errors.Is.

// row is one row of a query, to be scanned.
type row interface {
	Scan(dest ...any) error
}

// rows is a result set being read.
type rows interface {
	row
	Next() bool
	Err() error
}

// storedCols are the columns of a storedRow (dest), in both logs'
// records tables.
const storedCols = `seq, id, time_ns, kind, tenant, status, exec_profile, egress_profile, session, code_sha256, subject, body, prev_hash, hash`

func (r *storedRow) dest() []any {
	return []any{&r.seq, &r.id, &r.timeNS, &r.kind, &r.tenant, &r.status, &r.execP, &r.egressP, &r.session, &r.code, &r.subj, &r.body, &r.prevHash, &r.hash}
}

// verifyRows is Verify over rows of storedCols in sequence order.
func verifyRows(rs rows) (*Report, error) {
	v := newVerifier()
	for rs.Next() {
		var r storedRow
		if err := rs.Scan(r.dest()...); err != nil {
			return nil, err
		}
		if !v.next(&r) {
			return v.rep, nil
		}
	}
	return v.rep, rs.Err()
}

// getRecord is Get of record id from its row (body, hash).
func getRecord(r row, id string) (*Record, error) {
	var body []byte
	var hash string
	err := r.Scan(&body, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	var rec Record
	if err := json.Unmarshal(body, &rec); err != nil {
		return nil, fmt.Errorf("audit record %s is malformed: %w", id, err)
	}
	rec.Hash = hash
	return &rec, nil
}

// head is Head from the row (seq, hash) of the last record.
func head(r row) (Anchor, error) {
	var a Anchor
	err := r.Scan(&a.Seq, &a.Hash)
	if errors.Is(err, sql.ErrNoRows) {
		return Anchor{}, nil
	}
	if err != nil {
		return Anchor{}, fmt.Errorf("audit: reading the head: %w", err)
	}
	return a, nil
}

// scanBodies reads rows of seq, body.
func scanBodies(rs rows) (map[int64][]byte, error) {
	out := map[int64][]byte{}
	for rs.Next() {
		var seq int64
		var body []byte
		if err := rs.Scan(&seq, &body); err != nil {
			return nil, err
		}
		out[seq] = body
	}
	return out, rs.Err()
}
