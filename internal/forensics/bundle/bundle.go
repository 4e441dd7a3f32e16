// Package bundle writes and reads evidence bundles: audit records and the
// captures they name, taken out of sandboxd in one archive that a
// verifier checks offline (`sandboxd audit verify --bundle FILE`).
//
// A bundle is a gzip-compressed tar archive whose entries all sit under
// one directory named after the bundle (bnd_ and 16 hex digits):
//
//	bnd_…/records.jsonl             the records, oldest first, one JSON object a line
//	bnd_…/captures/cap_….json       a capture's metadata: parts with size and sha256; an erased capture's tombstone
//	bnd_…/captures/cap_…/NAME       a part's bytes (none for an erased capture)
//	bnd_…/manifest.json             what was asked for, by whom, the log's head at download time, every file's sha256
//	bnd_…/README.txt                how to verify, and what a bundle can and cannot prove
//
// Each line of records.jsonl is a record exactly as the log stores it
// (its canonical JSON, the bytes its hash covers) with its hash added as
// the last member: the line ends in ,"hash":"…"}, and the record's body is
// the line without that member. So a verifier recomputes every record's
// hash from the bytes it holds, and the records are plain JSON for jq.
//
// The records are a segment of the chain, not the whole log: the records
// a reviewer may see of a record, a session or a search. Where their
// sequence numbers are consecutive they form a contiguous run whose
// links (each record's prev_hash is the hash of the one before) are
// checked; between runs the records of other sessions, kinds or tenants
// are not in the bundle. See Verify for what that proves.
package bundle

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
)

// Format names the layout in the manifest.
const Format = "sandboxd-evidence-bundle/1"

// File names inside the bundle's directory.
const (
	RecordsFile  = "records.jsonl"
	ManifestFile = "manifest.json"
	ReadmeFile   = "README.txt"
	capturesDir  = "captures"
)

var (
	idPattern      = regexp.MustCompile(`^bnd_[0-9a-f]{16}$`)
	capturePattern = regexp.MustCompile(`^cap_[0-9a-f]{32}$`)
	partPattern    = regexp.MustCompile(`^[a-z0-9._-]{1,64}$`)
	hashPattern    = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// NewID returns a fresh bundle id.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "bnd_" + hex.EncodeToString(b[:])
}

// Manifest describes a bundle. It is written last, and is not itself
// chained: what it says is checked against the records where it can be.
type Manifest struct {
	Format    string    `json:"format"`
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	// CreatedBy is the key that downloaded the bundle.
	CreatedBy Creator `json:"created_by"`
	// Scope is record, session or search; Query what was asked for (a
	// record id, a session id, a search's query string).
	Scope string `json:"scope"`
	Query string `json:"query,omitempty"`
	// Head is the log's last record when the bundle was made, after its
	// own export records were written.
	Head audit.Anchor `json:"head"`
	// Records counts the lines of records.jsonl; ExportRecords are the ids
	// of the bundle's own audit records (its download), among them.
	Records       int      `json:"records"`
	ExportRecords []string `json:"export_records,omitempty"`
	// Cut: the selection had more records than a bundle holds; the
	// newest were kept.
	Cut      bool              `json:"cut,omitempty"`
	Captures []ManifestCapture `json:"captures"`
	// Omitted says what the records name that the bundle does not hold,
	// and why.
	Omitted []string `json:"omitted,omitempty"`
	// Files is the sha256 of every other file of the bundle.
	Files map[string]string `json:"files"`
}

// Creator is who made a bundle.
type Creator struct {
	KeyID  string `json:"key_id"`
	Tenant string `json:"tenant"`
}

// ManifestCapture is one capture of a bundle.
type ManifestCapture struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Kind   string `json:"kind"`
	Parts  int    `json:"parts"`
	Erased bool   `json:"erased,omitempty"`
}

// RecordLine is a record's line of records.jsonl: body (the stored
// canonical JSON, ending in '}') with "hash" added as its last member.
func RecordLine(body []byte, hash string) ([]byte, error) {
	body = bytes.TrimSpace(body)
	if len(body) < 2 || body[0] != '{' || body[len(body)-1] != '}' || !hashPattern.MatchString(hash) {
		return nil, errors.New("bundle: a record body must be a JSON object and its hash 64 hex digits")
	}
	if audit.BodyHash(body) != hash {
		return nil, fmt.Errorf("bundle: the record body does not have the hash %s", hash)
	}
	var b bytes.Buffer
	b.Write(body[:len(body)-1])
	if len(body) > 2 {
		b.WriteByte(',')
	}
	b.WriteString(`"hash":"` + hash + `"}`)
	return b.Bytes(), nil
}

// splitLine undoes RecordLine: the body and the hash of a line.
func splitLine(line []byte) (body []byte, hash string, ok bool) {
	const tail = len(`"hash":"`) + 64 + len(`"}`)
	if len(line) < tail+2 || line[0] != '{' {
		return nil, "", false
	}
	t := line[len(line)-tail:]
	if !bytes.HasPrefix(t, []byte(`"hash":"`)) || !bytes.HasSuffix(t, []byte(`"}`)) {
		return nil, "", false
	}
	hash = string(t[len(`"hash":"`) : len(`"hash":"`)+64])
	if !hashPattern.MatchString(hash) {
		return nil, "", false
	}
	head := line[:len(line)-tail]
	switch head[len(head)-1] {
	case ',':
		body = append(append([]byte{}, head[:len(head)-1]...), '}')
	case '{':
		body = []byte("{}")
	default:
		return nil, "", false
	}
	return body, hash, true
}

// Writer writes a bundle: Records, then each Capture, then Close with the
// manifest.
type Writer struct {
	gz    *gzip.Writer
	tw    *tar.Writer
	id    string
	now   time.Time
	files map[string]string
	caps  []ManifestCapture
	n     int
	err   error
}

// NewWriter starts bundle id on w.
func NewWriter(w io.Writer, id string, now time.Time) (*Writer, error) {
	if !idPattern.MatchString(id) {
		return nil, fmt.Errorf("bundle: id %q is not bnd_ and 16 hex digits", id)
	}
	gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	return &Writer{gz: gz, tw: tar.NewWriter(gz), id: id, now: now.UTC(), files: map[string]string{}}, nil
}

func (w *Writer) file(name string, data []byte) error {
	if w.err != nil {
		return w.err
	}
	full := path.Join(w.id, name)
	hdr := &tar.Header{Name: full, Mode: 0o644, Size: int64(len(data)), ModTime: w.now, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := w.tw.WriteHeader(hdr); err != nil {
		w.err = err
		return err
	}
	if _, err := w.tw.Write(data); err != nil {
		w.err = err
		return err
	}
	if name != ManifestFile {
		s := sha256.Sum256(data)
		w.files[name] = hex.EncodeToString(s[:])
	}
	return nil
}

// Records writes records.jsonl from the records' lines (RecordLine), in
// sequence order.
func (w *Writer) Records(lines [][]byte) error {
	var b bytes.Buffer
	for _, l := range lines {
		if bytes.IndexByte(l, '\n') >= 0 {
			return errors.New("bundle: a record line holds a newline")
		}
		b.Write(l)
		b.WriteByte('\n')
	}
	w.n = len(lines)
	return w.file(RecordsFile, b.Bytes())
}

// Capture writes a capture's metadata and, unless it was erased, its
// parts' bytes.
func (w *Writer) Capture(c *capture.Capture) error {
	if !capturePattern.MatchString(c.ID) {
		return fmt.Errorf("bundle: capture id %q", c.ID)
	}
	meta, err := json.MarshalIndent(c.View(), "", "  ")
	if err != nil {
		return err
	}
	if err := w.file(path.Join(capturesDir, c.ID+".json"), meta); err != nil {
		return err
	}
	w.caps = append(w.caps, ManifestCapture{ID: c.ID, Tenant: c.Tenant, Kind: c.Kind, Parts: len(c.Parts), Erased: c.Erased != nil})
	if c.Erased != nil {
		return nil
	}
	for _, p := range c.Parts {
		if !partPattern.MatchString(p.Name) || p.Name == "." || p.Name == ".." {
			return fmt.Errorf("bundle: capture %s: part name %q", c.ID, p.Name)
		}
		if err := w.file(path.Join(capturesDir, c.ID, p.Name), p.Data); err != nil {
			return err
		}
	}
	return nil
}

// Close writes the README and the manifest (its Format, ID, CreatedAt,
// Records, Captures and Files are the writer's) and ends the archive.
func (w *Writer) Close(m Manifest) error {
	if err := w.file(ReadmeFile, []byte(Readme(w.id))); err != nil {
		return err
	}
	m.Format, m.ID, m.CreatedAt, m.Records, m.Files = Format, w.id, w.now, w.n, w.files
	m.Captures = w.caps
	if m.Captures == nil {
		m.Captures = []ManifestCapture{}
	}
	sort.Slice(m.Captures, func(i, j int) bool { return m.Captures[i].ID < m.Captures[j].ID })
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := w.file(ManifestFile, b); err != nil {
		return err
	}
	if err := w.tw.Close(); err != nil {
		return err
	}
	return w.gz.Close()
}

// Readme is the README.txt of bundle id.
func Readme(id string) string {
	return `Evidence bundle ` + id + ` from sandboxd's audit log.

Check it offline:

    sandboxd audit verify --bundle ` + id + `.tar.gz

It recomputes every record's hash from records.jsonl (a record's hash is the
sha256 of its line without the final "hash" member), checks the chain links
inside each contiguous run of records (each record's prev_hash is the hash of
the record before it), and checks every capture part's sha256 against the
capture's metadata and against the record that names it.

What a bundle proves: no record in it was changed after it was hashed, and
no record was removed, inserted or reordered inside a contiguous run. Every
part named by a record's digest is the content the log vouched for.

What it cannot prove on its own: that its records are the log's (whoever
holds the bundle could rebuild records and hashes together), that no record
of the same session or search is missing between runs, nor that the log
was not cut after it. Tie it to the log: compare a run's last record
(SEQ:HASH, printed by verify) with the log itself,

    sandboxd audit verify --data-dir DIR --anchor SEQ:HASH

or with the "audit head" anchors sandboxd logs every minute, and keep the
bundle's sha256 with the case.
`
}

// View is what a bundle says of a capture (its capture .json).
type View = api.Capture

// BodySource is a log that gives the stored bodies of its records
// (audit.SQLite, audit.Postgres).
type BodySource interface {
	Bodies(ctx context.Context, seqs []int64) (map[int64][]byte, error)
}

// Lines returns the lines of records (RecordLine) in sequence order, with
// each record's body as log stores it when log is a BodySource, else as
// audit.Body re-encodes it; a record whose body does not give its hash is
// an error.
func Lines(ctx context.Context, log audit.Log, recs []audit.Record) ([][]byte, error) {
	recs = slices.Clone(recs)
	slices.SortFunc(recs, func(a, b audit.Record) int { return cmp.Compare(a.Seq, b.Seq) })
	var stored map[int64][]byte
	if src, ok := log.(BodySource); ok {
		seqs := make([]int64, len(recs))
		for i, r := range recs {
			seqs[i] = r.Seq
		}
		var err error
		if stored, err = src.Bodies(ctx, seqs); err != nil {
			return nil, err
		}
	}
	out := make([][]byte, 0, len(recs))
	for i := range recs {
		r := &recs[i]
		body, ok := stored[r.Seq]
		if !ok {
			var err error
			if body, err = audit.Body(r); err != nil {
				return nil, err
			}
		}
		line, err := RecordLine(body, r.Hash)
		if err != nil {
			return nil, fmt.Errorf("bundle: record %d: %w", r.Seq, err)
		}
		out = append(out, line)
	}
	return out, nil
}
