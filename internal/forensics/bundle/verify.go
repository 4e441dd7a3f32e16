package bundle

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/forensics/audit"
)

// Report is the outcome of Verify.
type Report struct {
	// OK: every check held (Problems is empty).
	OK     bool   `json:"ok"`
	Bundle string `json:"bundle"`
	Scope  string `json:"scope,omitempty"`
	Query  string `json:"query,omitempty"`
	// CreatedBy and CreatedAt are the manifest's (not chained: the
	// bundle's export records, when present, are).
	CreatedBy Creator `json:"created_by"`
	CreatedAt string  `json:"created_at"`
	// Records is how many records were checked; Segments the contiguous
	// runs they form, each with its first and last record as anchors.
	Records  int       `json:"records"`
	Segments []Segment `json:"segments"`
	// Head is the log's head when the bundle was made (the manifest's);
	// HeadInBundle says whether that record is in the bundle, so that its
	// hash was checked.
	Head         audit.Anchor `json:"head"`
	HeadInBundle bool         `json:"head_in_bundle"`
	// ExportRecords are the bundle's own audit records (its download).
	ExportRecords []string `json:"export_records,omitempty"`
	// Captures and Erased count the captures; Parts the parts whose bytes
	// were checked, PartsChained those of them whose sha256 a record in
	// the bundle names (the others are checked against the capture's
	// metadata only, which is not chained).
	Captures     int `json:"captures"`
	Erased       int `json:"erased"`
	Parts        int `json:"parts"`
	PartsChained int `json:"parts_chained"`
	// Anchors is how many anchors given to Verify were checked.
	Anchors int `json:"anchors,omitempty"`
	// Problems are the checks that failed; Notes what was not checked or
	// is worth knowing.
	Problems []string `json:"problems,omitempty"`
	Notes    []string `json:"notes,omitempty"`
	// Proves and DoesNotProve say what the checks mean.
	Proves       []string `json:"proves"`
	DoesNotProve []string `json:"does_not_prove"`
}

// Segment is a contiguous run of records: consecutive sequence numbers,
// each linked to the one before by its prev_hash.
type Segment struct {
	First   audit.Anchor `json:"first"`
	Last    audit.Anchor `json:"last"`
	Records int          `json:"records"`
}

func (s Segment) String() string {
	if s.Records == 1 {
		return "record " + strconv.FormatInt(s.First.Seq, 10)
	}
	return fmt.Sprintf("records %d to %d", s.First.Seq, s.Last.Seq)
}

// Verify checks a bundle as read: every record's hash against its body,
// the order of the records and the links inside each contiguous run, the
// head anchor where its record is in the bundle, every anchor given (its
// record must be in the bundle with that hash), and every capture part's
// bytes against its capture's metadata and against the digest of the
// record that names it. An erased capture must hold no bytes.
func Verify(b *Bundle, anchors ...audit.Anchor) *Report {
	m := b.Manifest
	rep := &Report{Bundle: m.ID, Scope: m.Scope, Query: m.Query, CreatedBy: m.CreatedBy, Head: m.Head, ExportRecords: m.ExportRecords, Segments: []Segment{}}
	if !m.CreatedAt.IsZero() {
		rep.CreatedAt = m.CreatedAt.UTC().Format("2006-01-02T15:04:05Z")
	}
	problem := func(format string, a ...any) { rep.Problems = append(rep.Problems, fmt.Sprintf(format, a...)) }
	note := func(format string, a ...any) { rep.Notes = append(rep.Notes, fmt.Sprintf(format, a...)) }

	if m.Format != Format {
		problem("the manifest's format is %q, not %q", m.Format, Format)
	}
	if m.ID != b.Dir {
		problem("the manifest names bundle %q, but its files are under %s/", m.ID, b.Dir)
	}

	// Records: hashes, order, links.
	bySeq := map[int64]*audit.Record{}
	byID := map[string]bool{}
	var prev *audit.Record
	var seg *Segment
	for i := range b.Records {
		l := &b.Records[i]
		if l.Problem != "" {
			problem("records.jsonl: %s", l.Problem)
			prev, seg = nil, nil
			continue
		}
		r := &l.Record
		rep.Records++
		if got := audit.BodyHash(l.Body); got != l.Hash {
			problem("record %d (%s, line %d): its content does not match its hash: changed", r.Seq, r.ID, l.N)
		}
		if r.Seq < 1 || r.ID == "" {
			problem("line %d: a record needs a sequence number from 1 and an id", l.N)
		}
		if byID[r.ID] {
			problem("record %s appears twice", r.ID)
		}
		byID[r.ID] = true
		if prev != nil && r.Seq <= prev.Seq {
			problem("record %d follows record %d: the records are not in sequence order", r.Seq, prev.Seq)
			prev, seg = r, nil
			continue
		}
		bySeq[r.Seq] = r
		switch {
		case prev != nil && r.Seq == prev.Seq+1:
			if r.PrevHash != prev.Hash {
				problem("record %d names %s as the hash before it, but record %d's hash is %s: a record was changed, removed or reordered", r.Seq, short(r.PrevHash), prev.Seq, short(prev.Hash))
			}
			seg.Last = audit.Anchor{Seq: r.Seq, Hash: r.Hash}
			seg.Records++
		default:
			if r.Seq == 1 && r.PrevHash != "" {
				problem("record 1, the log's first, names a hash before it")
			}
			rep.Segments = append(rep.Segments, Segment{First: audit.Anchor{Seq: r.Seq, Hash: r.Hash}, Last: audit.Anchor{Seq: r.Seq, Hash: r.Hash}, Records: 1})
			seg = &rep.Segments[len(rep.Segments)-1]
		}
		prev = r
	}
	if rep.Records != m.Records {
		problem("the manifest counts %d records; records.jsonl holds %d", m.Records, rep.Records)
	}

	// The head and the anchors.
	if m.Head.Seq > 0 {
		if r := bySeq[m.Head.Seq]; r != nil {
			rep.HeadInBundle = true
			if r.Hash != m.Head.Hash {
				problem("the manifest's head is record %d with hash %s, but that record's hash is %s", m.Head.Seq, short(m.Head.Hash), short(r.Hash))
			}
		}
		if prev != nil && prev.Seq > m.Head.Seq {
			problem("record %d is past the head (record %d) the bundle was made at", prev.Seq, m.Head.Seq)
		}
	}
	for _, a := range anchors {
		rep.Anchors++
		r := bySeq[a.Seq]
		switch {
		case r == nil:
			problem("anchor %s: record %d is not in the bundle, so it cannot be checked here (check it against the log)", a, a.Seq)
		case r.Hash != a.Hash:
			problem("anchor %s: record %d's hash in the bundle is %s", a, a.Seq, short(r.Hash))
		}
	}
	for _, id := range m.ExportRecords {
		if !byID[id] {
			problem("the manifest names export record %s, which is not in records.jsonl", id)
		}
	}

	// Files the manifest lists.
	names := make([]string, 0, len(m.Files))
	for n := range m.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		got, ok := b.Files[n]
		switch {
		case !ok:
			problem("the manifest lists %s, which is not in the bundle", n)
		case got != m.Files[n]:
			problem("%s's sha256 is not the one the manifest lists", n)
		}
	}
	for n := range b.Files {
		if _, ok := m.Files[n]; !ok {
			problem("%s is in the bundle but not in its manifest", n)
		}
	}

	// Captures.
	namedBy := map[string][]*audit.Record{}
	for _, seq := range sortedSeqs(bySeq) {
		r := bySeq[seq]
		for _, id := range r.CaptureIDs {
			namedBy[id] = append(namedBy[id], r)
		}
	}
	ids := make([]string, 0, len(b.Captures))
	for id := range b.Captures {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		v := b.Captures[id]
		rep.Captures++
		data := b.Parts[id]
		if v.ID != id {
			problem("captures/%s.json describes capture %q", id, v.ID)
		}
		recs := namedBy[id]
		if len(recs) == 0 {
			note("capture %s is named by no record in the bundle", id)
		}
		if v.Erased != nil {
			rep.Erased++
			if len(data) > 0 {
				problem("capture %s was erased, yet the bundle holds %d of its parts", id, len(data))
			}
			continue
		}
		declared := map[string]bool{}
		for _, p := range v.Parts {
			declared[p.Name] = true
			d, ok := data[p.Name]
			if !ok {
				problem("capture %s: part %s is missing", id, p.Name)
				continue
			}
			rep.Parts++
			if d.Size != p.Size || d.SHA256 != p.SHA256 {
				problem("capture %s: part %s is %d bytes with sha256 %s, but its metadata says %d bytes, %s", id, p.Name, d.Size, short(d.SHA256), p.Size, short(p.SHA256))
				continue
			}
			chained := false
			for _, r := range recs {
				want, named := recordDigest(r, p.Name, v.Meta)
				if !named {
					continue
				}
				if want != d.SHA256 {
					problem("capture %s: part %s's sha256 is %s, but record %d names %s", id, p.Name, short(d.SHA256), r.Seq, short(want))
					continue
				}
				chained = true
			}
			if chained {
				rep.PartsChained++
			}
		}
		for name := range data {
			if !declared[name] {
				problem("capture %s: part %s is not in its metadata", id, name)
			}
		}
	}
	for id := range b.Parts {
		if b.Captures[id] == nil {
			problem("the bundle holds parts of capture %s but not its metadata", id)
		}
	}
	if rep.Parts > rep.PartsChained {
		note("%d of %d parts are not named by a record's digest (a fetch's headers and returned.json, an empty stdin): they are checked against their capture's metadata only", rep.Parts-rep.PartsChained, rep.Parts)
	}
	if !rep.HeadInBundle && m.Head.Seq > 0 {
		note("the head the bundle was made at (record %d) is not in the bundle: compare it with the log or with an \"audit head\" anchor", m.Head.Seq)
	}
	for _, o := range m.Omitted {
		note("not in the bundle: %s", o)
	}
	if m.Cut {
		note("the selection had more records than a bundle holds: the newest were kept")
	}

	rep.OK = len(rep.Problems) == 0
	rep.Proves, rep.DoesNotProve = meaning(rep)
	return rep
}

// meaning says what a report's checks prove, and what they do not.
func meaning(rep *Report) (proves, not []string) {
	proves = []string{
		fmt.Sprintf("each of the %d records is unchanged since it was hashed: its hash is recomputed from its bytes", rep.Records),
		fmt.Sprintf("inside each of the %d contiguous runs, no record was removed, inserted or reordered: each record's prev_hash is the hash of the one before", len(rep.Segments)),
		fmt.Sprintf("%d capture parts are the bytes their records' digests name; %d more match their capture's metadata", rep.PartsChained, rep.Parts-rep.PartsChained),
	}
	not = []string{
		"that the records are the log's: whoever holds a bundle can rebuild records and hashes together. Compare a run's last record with the log (sandboxd audit verify --data-dir DIR --anchor SEQ:HASH) or with an \"audit head\" anchor kept elsewhere",
		"that no record is missing between runs: the records of other sessions, kinds or tenants, and any not selected, lie between them",
		"that the log was not cut or rebuilt after the bundle was made: only anchors kept outside the log show that",
	}
	if rep.Erased > 0 {
		not = append(not, fmt.Sprintf("what the %d erased captures held: only their tombstones and their records' digests are here", rep.Erased))
	}
	return proves, not
}

// recordDigest is the sha256 record r names for a capture part, and
// whether it names one: the code, stdin, stdout, stderr, input and output
// files (by their paths in meta), session results and a fetch's raw
// body.
func recordDigest(r *audit.Record, part string, meta map[string]string) (string, bool) {
	find := func(list []audit.Output, name string) (string, bool) {
		for _, o := range list {
			if o.Name == name {
				return o.SHA256, true
			}
		}
		return "", false
	}
	switch {
	case part == "code":
		return r.CodeSHA256, r.CodeSHA256 != ""
	case part == "stdin":
		return find(r.Inputs, "stdin")
	case part == "stdout" || part == "stderr" || part == "raw":
		return find(r.Outputs, part)
	case strings.HasPrefix(part, "input.") && meta[part] != "":
		return find(r.Inputs, "files/"+meta[part])
	case strings.HasPrefix(part, "output.") && meta[part] != "":
		return find(r.Outputs, "files/"+meta[part])
	case strings.HasPrefix(part, "result."):
		prefix := "results/" + strings.TrimPrefix(part, "result.") + "."
		for _, o := range r.Outputs {
			if strings.HasPrefix(o.Name, prefix) {
				return o.SHA256, true
			}
		}
	}
	return "", false
}

func sortedSeqs(m map[int64]*audit.Record) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func short(h string) string {
	if h == "" {
		return "(none)"
	}
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
