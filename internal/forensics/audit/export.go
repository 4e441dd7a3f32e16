package audit

import (
	"context"
	"fmt"
	"strings"
)

// Evidence bundles (package bundle) carry records out of the log with
// what a verifier needs to check them offline: each record's body exactly
// as its hash covers it.

// KindBundle is the record of an evidence bundle's download: who took
// which records and captures out of the log, written before the bundle is
// sent.
const KindBundle = "bundle"

// Bundle is the record of the download of evidence bundle id by w, for
// tenant (one record per tenant whose records or captures the bundle
// holds): scope says what was asked for (record, session, search), query
// the selection, records and captures the counts of the tenant's, and
// captureIDs the tenant's captures whose content the bundle holds.
func Bundle(w Who, tenant, id, scope, query string, records int, captureIDs []string) *Record {
	r := w.Record(KindBundle)
	r.Tenant = tenant
	r.Subject, r.Action, r.Status = id, "download", "ok"
	r.CaptureIDs = captureIDs
	r.Detail = map[string]string{"scope": scope, "records": fmt.Sprint(records), "captures": fmt.Sprint(len(captureIDs))}
	if query != "" {
		r.Detail["query"] = query
	}
	if w.Tenant != tenant {
		r.Detail["reader_tenant"] = w.Tenant
	}
	return r
}

// Body returns the bytes r's hash covers: its canonical JSON, Hash left
// out. For a record read back from a log it is the stored body as long as
// the record type reads and writes every field the body has; Bodies
// returns the stored bytes themselves.
func Body(r *Record) ([]byte, error) { return canonical(r) }

// BodyHash is the hash of a record's body: sha256 in hex.
func BodyHash(body []byte) string { return hashOf(body) }

// maxBodiesBatch bounds the sequence numbers of one Bodies statement.
const maxBodiesBatch = 500

// Bodies returns the stored bodies of the records seqs (those that
// exist), by sequence number.
func (s *SQLite) Bodies(ctx context.Context, seqs []int64) (map[int64][]byte, error) {
	return bodies(seqs, func(batch []int64) (map[int64][]byte, error) {
		args := make([]any, len(batch))
		for i, q := range batch {
			args[i] = q
		}
		rows, err := s.db.QueryContext(ctx, `SELECT seq, body FROM records WHERE seq IN (`+strings.TrimSuffix(strings.Repeat("?,", len(batch)), ",")+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("audit: reading bodies: %w", err)
		}
		defer rows.Close()
		return scanBodies(rows)
	})
}

// Bodies returns the stored bodies of the records seqs (see
// SQLite.Bodies).
func (p *Postgres) Bodies(ctx context.Context, seqs []int64) (map[int64][]byte, error) {
	return bodies(seqs, func(batch []int64) (map[int64][]byte, error) {
		rows, err := p.pool.Query(ctx, `SELECT seq, body FROM audit_records WHERE seq = ANY($1)`, batch)
		if err != nil {
			return nil, fmt.Errorf("audit: reading bodies: %w", err)
		}
		defer rows.Close()
		return scanBodies(rows)
	})
}

func bodies(seqs []int64, batch func([]int64) (map[int64][]byte, error)) (map[int64][]byte, error) {
	out := make(map[int64][]byte, len(seqs))
	for len(seqs) > 0 {
		n := min(len(seqs), maxBodiesBatch)
		m, err := batch(seqs[:n])
		if err != nil {
			return nil, err
		}
		for k, v := range m {
			out[k] = v
		}
		seqs = seqs[n:]
	}
	return out, nil
}
