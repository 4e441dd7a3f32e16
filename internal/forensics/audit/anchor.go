package audit

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// An Anchor is one record's sequence number and hash kept outside the log:
// in a log shipped elsewhere (sandboxd logs the head as "audit head" every
// minute and at shutdown), a ticket, a printout. The chain alone shows that
// no record was changed, removed or reordered relative to the others; only
// an anchor shows that no records were cut from the end, and that the chain
// was not rebuilt, hashes and all, after a change.
type Anchor struct {
	Seq  int64  `json:"seq"`
	Hash string `json:"hash"`
}

// String is the form ParseAnchor reads: SEQ:HASH.
func (a Anchor) String() string { return strconv.FormatInt(a.Seq, 10) + ":" + a.Hash }

var hashPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ParseAnchor reads SEQ:HASH (a record's sequence number, from 1, and its
// hex sha256, as `sandboxd audit verify` and the "audit head" log line
// print them).
func ParseAnchor(s string) (Anchor, error) {
	seq, hash, ok := strings.Cut(strings.TrimSpace(s), ":")
	n, err := strconv.ParseInt(seq, 10, 64)
	switch {
	case !ok || err != nil || n < 1:
		return Anchor{}, fmt.Errorf("anchor %q: want SEQ:HASH, a record number from 1 and its sha256 in hex", s)
	case !hashPattern.MatchString(strings.ToLower(hash)):
		return Anchor{}, fmt.Errorf("anchor %q: the hash must be 64 hex digits", s)
	}
	return Anchor{Seq: n, Hash: strings.ToLower(hash)}, nil
}

// Head returns the last record's anchor, the zero Anchor for an empty log.
func (s *SQLite) Head(ctx context.Context) (Anchor, error) {
	return head(s.db.QueryRowContext(ctx, `SELECT seq, hash FROM records ORDER BY seq DESC LIMIT 1`))
}

// CheckAnchors checks anchors against the log that rep (from Verify) found
// intact, and marks rep broken at the first anchor that does not hold: its
// record is gone from the end, or has another hash. A report that is
// already broken is left as it is.
func (s *SQLite) CheckAnchors(ctx context.Context, rep *Report, anchors ...Anchor) error {
	return checkAnchors(rep, anchors, func(seq int64) (string, error) {
		var hash string
		err := s.db.QueryRowContext(ctx, `SELECT hash FROM records WHERE seq = ?`, seq).Scan(&hash)
		return hash, err
	})
}

// checkAnchors is CheckAnchors over a log whose record seq has the hash
// hashAt returns.
func checkAnchors(rep *Report, anchors []Anchor, hashAt func(seq int64) (string, error)) error {
	for _, a := range anchors {
		if !rep.OK {
			return nil
		}
		rep.Anchors++
		if a.Seq > rep.HeadSeq {
			rep.OK, rep.BreakSeq = false, rep.HeadSeq+1
			rep.Problem = fmt.Sprintf("the log ends at record %d, but an anchor names record %d (hash %s): records were cut from the end", rep.HeadSeq, a.Seq, short(a.Hash))
			return nil
		}
		hash, err := hashAt(a.Seq)
		if err != nil {
			return fmt.Errorf("audit: reading record %d: %w", a.Seq, err)
		}
		if hash != a.Hash {
			rep.OK, rep.BreakSeq = false, a.Seq
			rep.Problem = fmt.Sprintf("record %d's hash is %s, but its anchor says %s: the chain was rebuilt at or before record %d", a.Seq, short(hash), short(a.Hash), a.Seq)
			return nil
		}
	}
	return nil
}
