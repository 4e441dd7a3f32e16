package audit

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

func unmarshalRecord(body []byte, r *Record) error { return json.Unmarshal(body, r) }

// builtQuery is a Query's SQL, for the table names and placeholder style
// of one log.
type builtQuery struct {
	sql   string
	args  []any
	limit int
}

// buildQuery turns f into SQL over records (table recs, host index hosts,
// session index sessions); ph(n) is the n-th placeholder ("?" or "$n").
func buildQuery(f Filter, recs, hosts, sessions string, ph func(n int) string) (*builtQuery, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	if limit > MaxLimit {
		return nil, fmt.Errorf("limit %d is over the maximum of %d", limit, MaxLimit)
	}
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return ph(len(args))
	}
	from, seqCol := recs+" r", "r.seq"
	if f.Host != "" {
		// Walk the host's entries newest first; each joins one record.
		from, seqCol = hosts+" h JOIN "+recs+" r ON r.seq = h.seq", "h.seq"
		where = append(where, "h.host = "+arg(strings.ToLower(f.Host)))
	}
	if f.Tenant != "" {
		where = append(where, "r.tenant = "+arg(f.Tenant))
	}
	if f.Kind != "" {
		where = append(where, "r.kind = "+arg(f.Kind))
	}
	if f.Status != "" {
		where = append(where, "r.status = "+arg(f.Status))
	}
	if f.Profile != "" {
		where = append(where, "(r.exec_profile = "+arg(f.Profile)+" OR r.egress_profile = "+arg(f.Profile)+")")
	}
	if f.Session != "" {
		where = append(where, "(r.session = "+arg(f.Session)+" OR r.seq IN (SELECT seq FROM "+sessions+" WHERE session = "+arg(f.Session)+"))")
	}
	if f.CodeSHA256 != "" {
		where = append(where, "r.code_sha256 = "+arg(strings.ToLower(f.CodeSHA256)))
	}
	if f.Subject != "" {
		where = append(where, "r.subject = "+arg(f.Subject))
	}
	if !f.Since.IsZero() {
		where = append(where, "r.time_ns >= "+arg(f.Since.UnixNano()))
	}
	if !f.Until.IsZero() {
		where = append(where, "r.time_ns < "+arg(f.Until.UnixNano()))
	}
	if f.Cursor != "" {
		c, err := strconv.ParseInt(f.Cursor, 10, 64)
		if err != nil || c <= 0 {
			return nil, fmt.Errorf("cursor %q is not one this log gave out", f.Cursor)
		}
		where = append(where, seqCol+" < "+arg(c))
	}
	q := "SELECT r.seq, r.body, r.hash FROM " + from
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY " + seqCol + " DESC LIMIT " + arg(limit+1)
	return &builtQuery{sql: q, args: args, limit: limit}, nil
}

// page turns the rows of a builtQuery (seq, body, hash) into records and
// the next page's cursor.
func page(rs rows, limit int) ([]Record, string, error) {
	out := []Record{}
	for rs.Next() {
		var seq int64
		var body []byte
		var hash string
		if err := rs.Scan(&seq, &body, &hash); err != nil {
			return nil, "", err
		}
		var r Record
		if err := json.Unmarshal(body, &r); err != nil {
			return nil, "", fmt.Errorf("audit record %d is malformed: %w", seq, err)
		}
		r.Hash = hash
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, "", err
	}
	cursor := ""
	if len(out) > limit {
		out = out[:limit]
		cursor = strconv.FormatInt(out[limit-1].Seq, 10)
	}
	return out, cursor, nil
}
