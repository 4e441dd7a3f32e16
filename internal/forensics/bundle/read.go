package bundle

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sandboxd/sandboxd/internal/forensics/audit"
)

// Limits bound what Read accepts: a bundle is input from outside, and a
// tar or gzip stream can claim or expand to any size.
type Limits struct {
	// Entries is the most entries (files and directories).
	Entries int
	// EntryBytes is the most bytes of one capture part.
	EntryBytes int64
	// MetaBytes is the most bytes of the manifest, README and each
	// capture's metadata.
	MetaBytes int64
	// RecordsBytes is the most bytes of records.jsonl, which is held in
	// memory; LineBytes the most of one of its lines.
	RecordsBytes, LineBytes int64
	// TotalBytes is the most bytes the archive expands to.
	TotalBytes int64
}

// DefaultLimits are Read's limits when none are given: far above what
// sandboxd writes (a part is at most a profile's output or response cap).
var DefaultLimits = Limits{Entries: 200_000, EntryBytes: 1 << 30, MetaBytes: 16 << 20, RecordsBytes: 512 << 20, LineBytes: 16 << 20, TotalBytes: 16 << 30}

// Bundle is a bundle as read: its manifest, records and captures, and the
// digest of every part's bytes (the bytes themselves are not kept).
type Bundle struct {
	// Dir is the directory every entry is under (the bundle's id).
	Dir      string
	Manifest *Manifest
	Records  []Line
	Captures map[string]*View
	// Parts holds each capture's parts' digests, by capture id and part
	// name.
	Parts map[string]map[string]Digest
	// Files is the sha256 of every file but the manifest, by its name
	// under Dir.
	Files map[string]string
}

// Line is one line of records.jsonl.
type Line struct {
	// N is the line's number, from 1.
	N int
	// Body is the record's body (what its hash covers) and Hash the hash
	// the line states; Record is the line as a record.
	Body   []byte
	Hash   string
	Record audit.Record
	// Problem says why the line is not a record (Body and Record are then
	// empty).
	Problem string
}

// Digest is a part's size and sha256 as read.
type Digest struct {
	Size   int64
	SHA256 string
}

// ErrNotBundle: the input is not a bundle (not gzip, not tar, or no
// manifest or records).
var ErrNotBundle = errors.New("not an evidence bundle")

// countingReader fails once more than max bytes were read.
type countingReader struct {
	r   io.Reader
	n   int64
	max int64
}

var errTooBig = errors.New("bundle: the archive expands past its size limit")

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		return n, errTooBig
	}
	return n, err
}

// Read reads a bundle from r (a gzip-compressed tar archive) within lim
// (the zero Limits: DefaultLimits). It refuses links, devices and any
// other entry that is not a regular file or a directory, names that are
// absolute, hold "..", backslashes or control characters, or lie
// outside the layout, entries named twice, and anything past lim. It
// writes nothing to disk: parts are hashed as they stream past.
func Read(r io.Reader, lim Limits) (*Bundle, error) {
	if lim == (Limits{}) {
		lim = DefaultLimits
	}
	gz, err := gzip.NewReader(bufio.NewReader(r))
	if err != nil {
		return nil, fmt.Errorf("%w: not gzip-compressed: %v", ErrNotBundle, err)
	}
	gz.Multistream(false)
	tr := tar.NewReader(&countingReader{r: gz, max: lim.TotalBytes})
	b := &Bundle{Captures: map[string]*View{}, Parts: map[string]map[string]Digest{}, Files: map[string]string{}}
	seen := map[string]bool{}
	var records []byte
	var haveRecords bool
	entries := 0
	var claimed int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if errors.Is(err, errTooBig) {
				return nil, err
			}
			return nil, fmt.Errorf("bundle: reading the archive: %w", err)
		}
		entries++
		if entries > lim.Entries {
			return nil, fmt.Errorf("bundle: more than %d entries", lim.Entries)
		}
		dir, name, err := splitName(hdr.Name)
		if err != nil {
			return nil, err
		}
		if b.Dir == "" {
			b.Dir = dir
		} else if dir != b.Dir {
			return nil, fmt.Errorf("bundle: entry %q is not under %s/", hdr.Name, b.Dir)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if name != "" && name != capturesDir && !(strings.HasPrefix(name, capturesDir+"/") && capturePattern.MatchString(strings.TrimPrefix(name, capturesDir+"/"))) {
				return nil, fmt.Errorf("bundle: unexpected directory %q", hdr.Name)
			}
			continue
		case tar.TypeReg:
		default:
			return nil, fmt.Errorf("bundle: entry %q is not a regular file (type %q): links and special files are refused", hdr.Name, hdr.Typeflag)
		}
		if name == "" {
			return nil, fmt.Errorf("bundle: entry %q has no name", hdr.Name)
		}
		if seen[name] {
			return nil, fmt.Errorf("bundle: entry %q appears twice", hdr.Name)
		}
		seen[name] = true
		if hdr.Size < 0 {
			return nil, fmt.Errorf("bundle: entry %q has a negative size", hdr.Name)
		}
		for k := range hdr.PAXRecords {
			if strings.HasPrefix(k, "GNU.sparse.") {
				return nil, fmt.Errorf("bundle: entry %q is a sparse file: refused", hdr.Name)
			}
		}
		// Sparse entries expand without reading the stream: count what
		// entries claim too.
		if claimed += hdr.Size; claimed > lim.TotalBytes {
			return nil, errTooBig
		}
		h := sha256.New()
		switch kind, capID, part := classify(name); kind {
		case entryManifest, entryReadme, entryCaptureMeta:
			data, err := readAll(tr, hdr, lim.MetaBytes)
			if err != nil {
				return nil, err
			}
			h.Write(data)
			switch kind {
			case entryManifest:
				var m Manifest
				if err := strictJSON(data, &m); err != nil {
					return nil, fmt.Errorf("bundle: %s: %v", ManifestFile, err)
				}
				b.Manifest = &m
			case entryCaptureMeta:
				var v View
				if err := strictJSON(data, &v); err != nil {
					return nil, fmt.Errorf("bundle: %s: %v", name, err)
				}
				b.Captures[capID] = &v
			}
		case entryRecords:
			if records, err = readAll(tr, hdr, lim.RecordsBytes); err != nil {
				return nil, err
			}
			haveRecords = true
			h.Write(records)
		case entryPart:
			if hdr.Size > lim.EntryBytes {
				return nil, fmt.Errorf("bundle: entry %q is %d bytes; at most %d", hdr.Name, hdr.Size, lim.EntryBytes)
			}
			n, err := io.Copy(h, tr)
			if err != nil {
				return nil, fmt.Errorf("bundle: reading %q: %w", hdr.Name, err)
			}
			if b.Parts[capID] == nil {
				b.Parts[capID] = map[string]Digest{}
			}
			b.Parts[capID][part] = Digest{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}
		default:
			return nil, fmt.Errorf("bundle: unexpected entry %q", hdr.Name)
		}
		if name != ManifestFile {
			b.Files[name] = hex.EncodeToString(h.Sum(nil))
		}
	}
	if b.Manifest == nil || !haveRecords {
		return nil, fmt.Errorf("%w: it has no %s or no %s", ErrNotBundle, ManifestFile, RecordsFile)
	}
	b.Records = splitRecords(records, lim.LineBytes)
	return b, nil
}

// readAll reads an entry of at most max bytes.
func readAll(tr *tar.Reader, hdr *tar.Header, max int64) ([]byte, error) {
	if hdr.Size > max {
		return nil, fmt.Errorf("bundle: entry %q is %d bytes; at most %d", hdr.Name, hdr.Size, max)
	}
	data, err := io.ReadAll(io.LimitReader(tr, max+1))
	if err != nil {
		return nil, fmt.Errorf("bundle: reading %q: %w", hdr.Name, err)
	}
	return data, nil
}

// strictJSON decodes one JSON value and nothing after it.
func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON value")
	}
	return nil
}

type entryKind int

const (
	entryUnknown entryKind = iota
	entryManifest
	entryReadme
	entryRecords
	entryCaptureMeta
	entryPart
)

// classify names an entry's role from its name under the bundle's
// directory.
func classify(name string) (entryKind, string, string) {
	switch name {
	case ManifestFile:
		return entryManifest, "", ""
	case ReadmeFile:
		return entryReadme, "", ""
	case RecordsFile:
		return entryRecords, "", ""
	}
	rest, ok := strings.CutPrefix(name, capturesDir+"/")
	if !ok {
		return entryUnknown, "", ""
	}
	if id, ok := strings.CutSuffix(rest, ".json"); ok && capturePattern.MatchString(id) {
		return entryCaptureMeta, id, ""
	}
	id, part, ok := strings.Cut(rest, "/")
	if ok && capturePattern.MatchString(id) && partPattern.MatchString(part) && part != "." && part != ".." {
		return entryPart, id, part
	}
	return entryUnknown, "", ""
}

// splitName checks an entry's name and splits it into the bundle's
// directory and the name under it ("" for the directory itself).
func splitName(full string) (dir, name string, err error) {
	bad := func(why string) (string, string, error) {
		return "", "", fmt.Errorf("bundle: entry name %q refused: %s", full, why)
	}
	switch {
	case full == "":
		return bad("empty")
	case len(full) > 512:
		return bad("too long")
	case strings.HasPrefix(full, "/"):
		return bad("absolute")
	case strings.ContainsAny(full, "\\:"):
		return bad("backslash or colon")
	}
	for _, c := range full {
		if c < 0x20 || c == 0x7f {
			return bad("control character")
		}
	}
	segs := strings.Split(strings.TrimSuffix(full, "/"), "/")
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return bad("empty, . or .. segment")
		}
	}
	if !idPattern.MatchString(segs[0]) {
		return bad("not under a bnd_ directory")
	}
	return segs[0], strings.Join(segs[1:], "/"), nil
}

// splitRecords splits records.jsonl into lines and each line into its
// body, hash and record.
func splitRecords(data []byte, maxLine int64) []Line {
	var out []Line
	n := 0
	for len(data) > 0 {
		n++
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		l := Line{N: n}
		switch body, hash, ok := splitLine(line); {
		case int64(len(line)) > maxLine:
			l.Problem = fmt.Sprintf("line %d is %d bytes; at most %d", n, len(line), maxLine)
		case len(bytes.TrimSpace(line)) == 0:
			l.Problem = fmt.Sprintf("line %d is empty", n)
		case !ok:
			l.Problem = fmt.Sprintf(`line %d does not end in its hash (,"hash":"<64 hex digits>"})`, n)
		default:
			var r audit.Record
			var keys map[string]json.RawMessage
			switch {
			case strictJSON(line, &r) != nil:
				l.Problem = fmt.Sprintf("line %d is not a record", n)
			case strictJSON(body, &keys) != nil:
				l.Problem = fmt.Sprintf("line %d's body is not a JSON object", n)
			case keys["hash"] != nil:
				l.Problem = fmt.Sprintf("line %d names its hash twice", n)
			default:
				l.Body, l.Hash, l.Record = body, hash, r
			}
		}
		out = append(out, l)
	}
	return out
}
