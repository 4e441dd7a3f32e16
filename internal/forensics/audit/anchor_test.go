package audit

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestParseAnchor(t *testing.T) {
	h := strings.Repeat("ab", 32)
	for _, c := range []struct {
		in   string
		want Anchor
		err  string
	}{
		{"12:" + h, Anchor{12, h}, ""},
		{" 1:" + strings.ToUpper(h) + "\n", Anchor{1, h}, ""},
		{"0:" + h, Anchor{}, "record number from 1"},
		{"-3:" + h, Anchor{}, "record number from 1"},
		{"x:" + h, Anchor{}, "record number from 1"},
		{h, Anchor{}, "SEQ:HASH"},
		{"5:" + h[:63], Anchor{}, "64 hex digits"},
		{"5:" + h[:62] + "zz", Anchor{}, "64 hex digits"},
		{"", Anchor{}, "SEQ:HASH"},
	} {
		got, err := ParseAnchor(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseAnchor(%q) = %v, %v; want an error mentioning %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want || got.String() != c.want.String() {
			t.Errorf("ParseAnchor(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// The attacks the chain alone cannot see: cutting records from the end, and
// rebuilding the chain, every hash recomputed, after changing a record.
// Both pass Verify; an anchor taken earlier catches both.
func TestAnchorsCatchTruncationAndRebuiltChains(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		tamper  func(t *testing.T, l *SQLite)
		seq     int64
		problem string
	}{
		{"cut from the end", func(t *testing.T, l *SQLite) {
			if _, err := l.db.Exec(`DELETE FROM records WHERE seq > 7`); err != nil {
				t.Fatal(err)
			}
		}, 8, "cut from the end"},
		{"rebuilt chain", func(t *testing.T, l *SQLite) {
			rebuild(t, l, 4, func(r *Record) { r.Status = "ok-after-all" })
		}, 10, "rebuilt"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, _ := openTemp(t)
			fill(t, l, 10)
			head, err := l.Head(ctx)
			if err != nil || head.Seq != 10 || len(head.Hash) != 64 {
				t.Fatalf("head: %v %v", head, err)
			}
			rep, err := l.Verify(ctx)
			if err != nil || !rep.OK {
				t.Fatalf("verify before tampering: %v %+v", err, rep)
			}
			if err := l.CheckAnchors(ctx, rep, head); err != nil || !rep.OK || rep.Anchors != 1 {
				t.Fatalf("the head's own anchor before tampering: %v %+v", err, rep)
			}
			c.tamper(t, l)
			rep, err = l.Verify(ctx)
			if err != nil || !rep.OK {
				t.Fatalf("verify after %s: %v %+v (the chain alone should not see it)", c.name, err, rep)
			}
			if err := l.CheckAnchors(ctx, rep, Anchor{Seq: 2, Hash: mustHash(t, l, 2)}, head); err != nil {
				t.Fatal(err)
			}
			if rep.OK || rep.BreakSeq != c.seq || !strings.Contains(rep.Problem, c.problem) || rep.Anchors != 2 {
				t.Fatalf("report %+v, want a break at %d mentioning %q", rep, c.seq, c.problem)
			}
		})
	}
}

func TestHeadOfAnEmptyLog(t *testing.T) {
	l, _ := openTemp(t)
	if h, err := l.Head(context.Background()); err != nil || h != (Anchor{}) {
		t.Fatalf("head of an empty log: %v %v", h, err)
	}
}

func mustHash(t *testing.T, l *SQLite, seq int64) string {
	t.Helper()
	var h string
	if err := l.db.QueryRow(`SELECT hash FROM records WHERE seq = ?`, seq).Scan(&h); err != nil {
		t.Fatal(err)
	}
	return h
}

// rebuild changes record from with change and rewrites it and every later
// record with correct hashes, as someone with the file and this code could.
func rebuild(t *testing.T, l *SQLite, from int64, change func(*Record)) {
	t.Helper()
	prev := ""
	if from > 1 {
		prev = mustHash(t, l, from-1)
	}
	rows, err := l.db.Query(`SELECT seq, body FROM records WHERE seq >= ? ORDER BY seq`, from)
	if err != nil {
		t.Fatal(err)
	}
	var recs []Record
	for rows.Next() {
		var seq int64
		var body []byte
		if err := rows.Scan(&seq, &body); err != nil {
			t.Fatal(err)
		}
		var r Record
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	rows.Close()
	for i := range recs {
		r := &recs[i]
		if i == 0 {
			change(r)
		}
		r.PrevHash, r.Hash = prev, ""
		body, err := canonical(r)
		if err != nil {
			t.Fatal(err)
		}
		h := hashOf(body)
		if _, err := l.db.Exec(`UPDATE records SET body = ?, status = ?, prev_hash = ?, hash = ? WHERE seq = ?`, body, r.Status, prev, h, r.Seq); err != nil {
			t.Fatal(err)
		}
		prev = h
	}
}
