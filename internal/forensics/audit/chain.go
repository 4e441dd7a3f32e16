package audit

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "au_" + hex.EncodeToString(b[:])
}

// chained is one record of a batch as it will be stored: numbered,
// chained to the one before, hashed.
type chained struct {
	req  *appendReq
	r    Record // the stored copy (the caller's is filled after commit)
	body []byte // canonical JSON, what Hash covers
}

// chainBatch numbers and hashes batch after the head (seq, hash); replica
// names the writer in each record. It fills in the callers' ID and Time
// at once (they do not depend on the commit) and returns the rows.
func chainBatch(batch []*appendReq, seq int64, prev, replica string) ([]chained, error) {
	out := make([]chained, 0, len(batch))
	for _, req := range batch {
		r := *req.r
		seq++
		r.Seq, r.PrevHash, r.Hash = seq, prev, ""
		if r.ID == "" {
			r.ID = newID()
		}
		if r.Time.IsZero() {
			r.Time = time.Now().UTC()
		}
		if r.Replica == "" {
			r.Replica = replica
		}
		body, err := canonical(&r)
		if err != nil {
			return nil, fmt.Errorf("audit: encoding a record: %w", err)
		}
		r.Hash = hashOf(body)
		out = append(out, chained{req: req, r: r, body: body})
		req.r.ID, req.r.Time = r.ID, r.Time
		prev = r.Hash
	}
	return out, nil
}

// committed fills in the callers' records once their batch is durable.
func committed(rows []chained) {
	for _, c := range rows {
		c.req.r.Seq, c.req.r.PrevHash, c.req.r.Hash, c.req.r.Replica = c.r.Seq, c.r.PrevHash, c.r.Hash, c.r.Replica
	}
}

func profName(p *ProfileRef) string {
	if p == nil {
		return ""
	}
	return p.Name
}

// storedRow is one record as a log stores it: the indexed columns, the
// hashed body and the chain fields. Verify checks each in order.
type storedRow struct {
	seq, timeNS                                                   int64
	id, kind, tenant, status, execP, egressP, session, code, subj string
	body                                                          []byte
	prevHash, hash                                                string
}

// verifier walks stored rows in sequence order and stops at the first
// break of the chain.
type verifier struct {
	rep  *Report
	want int64
	prev string
}

func newVerifier() *verifier { return &verifier{rep: &Report{OK: true}, want: 1} }

// next checks row; false means the chain broke (the report says where).
func (v *verifier) next(row *storedRow) bool {
	rep := v.rep
	fail := func(seq int64, format string, args ...any) bool {
		rep.OK, rep.BreakSeq, rep.Problem = false, seq, fmt.Sprintf(format, args...)
		return false
	}
	rep.Records++
	switch {
	case row.seq != v.want:
		return fail(v.want, "record %d is missing (the next record is %d): deleted", v.want, row.seq)
	case row.prevHash != v.prev:
		return fail(row.seq, "record %d names %s as the hash before it, but record %d's hash is %s: a record before it was changed, removed or reordered", row.seq, short(row.prevHash), row.seq-1, short(v.prev))
	case hashOf(row.body) != row.hash:
		return fail(row.seq, "record %d's content does not match its hash: changed", row.seq)
	}
	var r Record
	if err := unmarshalRecord(row.body, &r); err != nil {
		return fail(row.seq, "record %d's body is not JSON: %v", row.seq, err)
	}
	if r.Seq != row.seq || r.ID != row.id || r.Time.UnixNano() != row.timeNS || r.Kind != row.kind || r.Tenant != row.tenant || r.Status != row.status ||
		profName(r.ExecProfile) != row.execP || profName(r.EgressProfile) != row.egressP || r.Session != row.session || r.CodeSHA256 != row.code ||
		r.Subject != row.subj || r.PrevHash != row.prevHash {
		return fail(row.seq, "record %d's indexed columns disagree with its hashed content: changed", row.seq)
	}
	v.prev = row.hash
	v.want++
	rep.HeadSeq, rep.HeadHash = row.seq, row.hash
	return true
}

// Report is the outcome of Verify.
type Report struct {
	// Records is how many records were checked.
	Records int64 `json:"records"`
	// HeadSeq and HeadHash name the last record (anchor them elsewhere to
	// detect truncation of the tail).
	HeadSeq  int64  `json:"head_seq"`
	HeadHash string `json:"head_hash"`
	// Anchors is how many anchors were checked (CheckAnchors).
	Anchors int `json:"anchors,omitempty"`
	// OK is false at the first break, which BreakSeq and Problem describe.
	OK       bool   `json:"ok"`
	BreakSeq int64  `json:"break_seq,omitempty"`
	Problem  string `json:"problem,omitempty"`
}

func short(h string) string {
	if h == "" {
		return "(none: the first record)"
	}
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
