package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
)

// sample builds a log of five records (three of one session, two others
// between them), two captures (one erased) and a bundle of the session's
// records with their captures.
type sample struct {
	log              *audit.SQLite
	caps             *capture.SQLite
	recs             []audit.Record
	kept, erased     *capture.Capture
	bundle           []byte
	manifest         Manifest
	sessionRecordIDs []string
}

func newSample(t testing.TB) *sample {
	t.Helper()
	ctx := context.Background()
	log, err := audit.Open("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	caps, err := capture.Open(t.TempDir(), capture.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { caps.Close() })
	s := &sample{log: log, caps: caps}
	code, out := []byte("print('hi')\n"), []byte("hi\n")
	s.kept = &capture.Capture{Kind: "exec", Tenant: "acme", KeyID: "agent-1", Meta: map[string]string{"exec_id": "ex_1", "output.0": "out/a.csv"},
		Parts: []capture.Part{{Name: "code", Data: code}, {Name: "stdin"}, {Name: "stdout", Data: out}, {Name: "stderr"}, {Name: "output.0", Data: []byte("a,b\n")}, {Name: "result.0", Data: []byte("'hi'")}}}
	s.erased = &capture.Capture{Kind: "exec", Tenant: "acme", KeyID: "agent-1", Parts: []capture.Part{{Name: "code", Data: []byte("secret = 1")}}}
	for _, c := range []*capture.Capture{s.kept, s.erased} {
		if err := caps.Put(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := caps.Erase(ctx, s.erased.ID, "sec-1", "GDPR request"); err != nil {
		t.Fatal(err)
	}
	add := func(r *audit.Record) {
		if err := log.Append(ctx, r); err != nil {
			t.Fatal(err)
		}
		s.recs = append(s.recs, *r)
	}
	add(&audit.Record{Kind: audit.KindSession, Action: "start", Tenant: "acme", Session: "s1", Status: "ok"})
	add(&audit.Record{Kind: audit.KindExec, Tenant: "acme", Session: "s1", Subject: "ex_1", Status: "ok", CodeSHA256: audit.SHA256(code),
		Outputs:    []audit.Output{{Name: "stdout", Size: 3, SHA256: audit.SHA256(out)}, {Name: "stderr", SHA256: audit.SHA256(nil)}, {Name: "files/out/a.csv", Size: 4, SHA256: audit.SHA256([]byte("a,b\n"))}, {Name: "results/0.repr", Size: 4, SHA256: audit.SHA256([]byte("'hi'"))}},
		CaptureIDs: []string{s.kept.ID}})
	add(&audit.Record{Kind: audit.KindExec, Tenant: "other", Session: "s9", Subject: "ex_9", Status: "ok"})
	add(&audit.Record{Kind: audit.KindExec, Tenant: "acme", Session: "s1", Subject: "ex_2", Status: "error", CodeSHA256: audit.SHA256([]byte("secret = 1")), CaptureIDs: []string{s.erased.ID}})
	add(&audit.Record{Kind: audit.KindFetch, Tenant: "acme", Session: "s2", Subject: "fe_1", Status: "EGRESS_DENIED"})
	sel := []audit.Record{s.recs[0], s.recs[1], s.recs[3]}
	for _, r := range sel {
		s.sessionRecordIDs = append(s.sessionRecordIDs, r.ID)
	}
	s.bundle = s.write(t, sel, s.kept.ID, s.erased.ID)
	return s
}

// write bundles recs and the captures ids, as the review page does.
func (s *sample) write(t testing.TB, recs []audit.Record, ids ...string) []byte {
	t.Helper()
	ctx := context.Background()
	head, err := s.log.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := Lines(ctx, s.log, recs)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, "bnd_0123456789abcdef", time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Records(lines); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		c, err := s.caps.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Capture(c); err != nil {
			t.Fatal(err)
		}
	}
	s.manifest = Manifest{CreatedBy: Creator{KeyID: "rev-1", Tenant: "acme"}, Scope: "session", Query: "s1", Head: head}
	if err := w.Close(s.manifest); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func mustVerify(t *testing.T, data []byte, anchors ...audit.Anchor) *Report {
	t.Helper()
	b, err := Read(bytes.NewReader(data), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return Verify(b, anchors...)
}

func TestBundleVerifies(t *testing.T) {
	s := newSample(t)
	rep := mustVerify(t, s.bundle, audit.Anchor{Seq: s.recs[1].Seq, Hash: s.recs[1].Hash})
	if !rep.OK {
		t.Fatalf("problems: %v", rep.Problems)
	}
	if rep.Records != 3 || len(rep.Segments) != 2 || rep.Segments[0].Records != 2 || rep.Segments[1].First.Seq != 4 {
		t.Fatalf("records %d, segments %+v", rep.Records, rep.Segments)
	}
	if rep.Captures != 2 || rep.Erased != 1 || rep.Parts != 6 || rep.PartsChained != 5 {
		t.Fatalf("captures %d, erased %d, parts %d, chained %d; notes %v", rep.Captures, rep.Erased, rep.Parts, rep.PartsChained, rep.Notes)
	}
	if rep.HeadInBundle || rep.Head.Seq != 5 {
		t.Fatalf("head %+v in bundle %v", rep.Head, rep.HeadInBundle)
	}
	if len(rep.DoesNotProve) < 3 || !strings.Contains(strings.Join(rep.DoesNotProve, " "), "missing between runs") {
		t.Fatalf("does not prove: %v", rep.DoesNotProve)
	}
	// The lines are the records as the API shows them, hash included.
	b, _ := Read(bytes.NewReader(s.bundle), Limits{})
	for i, l := range b.Records {
		if l.Record.Hash != s.recs[[]int{0, 1, 3}[i]].Hash || l.Record.ID != s.sessionRecordIDs[i] {
			t.Fatalf("line %d: %+v", i, l.Record)
		}
	}
	// An anchor the bundle does not hold, or with another hash, fails.
	if rep := mustVerify(t, s.bundle, audit.Anchor{Seq: 3, Hash: s.recs[2].Hash}); rep.OK {
		t.Fatal("an anchor of a record not in the bundle passed")
	}
	if rep := mustVerify(t, s.bundle, audit.Anchor{Seq: 2, Hash: s.recs[0].Hash}); rep.OK {
		t.Fatal("a wrong anchor passed")
	}
}

// rewrite copies a bundle, letting edit change each entry (nil drops it)
// and add append more.
func rewrite(t *testing.T, data []byte, edit func(h *tar.Header, body []byte) []byte, add ...func(tw *tar.Writer)) []byte {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		if body = edit(h, body); body == nil {
			continue
		}
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	for _, a := range add {
		a(tw)
	}
	tw.Close()
	zw.Close()
	return out.Bytes()
}

func TestTamperingIsFound(t *testing.T) {
	s := newSample(t)
	dir := "bnd_0123456789abcdef/"
	cases := []struct {
		name string
		edit func(h *tar.Header, body []byte) []byte
		want string
	}{
		{"a record changed", func(h *tar.Header, b []byte) []byte {
			if h.Name == dir+RecordsFile {
				return bytes.Replace(b, []byte(`"status":"error"`), []byte(`"status":"ok!!!"`), 1)
			}
			return b
		}, "does not match its hash"},
		{"a record's hash recomputed but its successor's link not", func(h *tar.Header, b []byte) []byte {
			if h.Name != dir+RecordsFile {
				return b
			}
			lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
			body, _, _ := splitLine(lines[0])
			body = bytes.Replace(body, []byte(`"action":"start"`), []byte(`"action":"stopp"`), 1)
			lines[0], _ = RecordLine(body, audit.BodyHash(body))
			return append(bytes.Join(lines, []byte("\n")), '\n')
		}, "names"},
		{"records reordered", func(h *tar.Header, b []byte) []byte {
			if h.Name != dir+RecordsFile {
				return b
			}
			lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
			lines[0], lines[2] = lines[2], lines[0]
			return append(bytes.Join(lines, []byte("\n")), '\n')
		}, "not in sequence order"},
		{"a part changed", func(h *tar.Header, b []byte) []byte {
			if strings.HasSuffix(h.Name, "/stdout") {
				return []byte("bye\n")
			}
			return b
		}, "part stdout"},
		{"a part dropped", func(h *tar.Header, b []byte) []byte {
			if strings.HasSuffix(h.Name, "/output.0") {
				return nil
			}
			return b
		}, "part output.0 is missing"},
		{"the manifest's head changed", func(h *tar.Header, b []byte) []byte {
			if h.Name == dir+ManifestFile {
				return bytes.Replace(b, []byte(`"seq": 5`), []byte(`"seq": 2`), 1)
			}
			return b
		}, "head"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := mustVerify(t, rewrite(t, s.bundle, tc.edit))
			if rep.OK || !strings.Contains(strings.Join(rep.Problems, "\n"), tc.want) {
				t.Fatalf("want a problem with %q; got ok=%v %v", tc.want, rep.OK, rep.Problems)
			}
		})
	}
	// The erased capture's content slipped back in.
	withContent := rewrite(t, s.bundle, func(h *tar.Header, b []byte) []byte { return b }, func(tw *tar.Writer) {
		tw.WriteHeader(&tar.Header{Name: dir + "captures/" + s.erased.ID + "/code", Mode: 0o644, Size: 10, Typeflag: tar.TypeReg})
		tw.Write([]byte("secret = 1"))
	})
	if rep := mustVerify(t, withContent); rep.OK || !strings.Contains(strings.Join(rep.Problems, "\n"), "was erased") {
		t.Fatalf("erased content: %v", rep.Problems)
	}
}

func TestReadRefusesHostileArchives(t *testing.T) {
	s := newSample(t)
	dir := "bnd_0123456789abcdef/"
	same := func(h *tar.Header, b []byte) []byte { return b }
	entry := func(h tar.Header, body string) func(tw *tar.Writer) {
		return func(tw *tar.Writer) {
			h.Size = int64(len(body))
			if h.Typeflag != tar.TypeReg {
				h.Size = 0
				body = ""
			}
			tw.WriteHeader(&h)
			tw.Write([]byte(body))
		}
	}
	cases := []struct {
		name string
		data []byte
		lim  Limits
		want string
	}{
		{"a symlink", rewrite(t, s.bundle, same, entry(tar.Header{Name: dir + "captures/x", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}, "")), Limits{}, "not a regular file"},
		{"a hard link", rewrite(t, s.bundle, same, entry(tar.Header{Name: dir + "README2", Typeflag: tar.TypeLink, Linkname: dir + "README.txt"}, "")), Limits{}, "not a regular file"},
		{"dot dot", rewrite(t, s.bundle, same, entry(tar.Header{Name: dir + "../evil", Typeflag: tar.TypeReg}, "x")), Limits{}, ".. segment"},
		{"absolute", rewrite(t, s.bundle, same, entry(tar.Header{Name: "/etc/evil", Typeflag: tar.TypeReg}, "x")), Limits{}, "absolute"},
		{"another directory", rewrite(t, s.bundle, same, entry(tar.Header{Name: "bnd_ffffffffffffffff/README.txt", Typeflag: tar.TypeReg}, "x")), Limits{}, "not under"},
		{"twice", rewrite(t, s.bundle, same, entry(tar.Header{Name: dir + "README.txt", Typeflag: tar.TypeReg}, "x")), Limits{}, "twice"},
		{"unknown file", rewrite(t, s.bundle, same, entry(tar.Header{Name: dir + "run.sh", Typeflag: tar.TypeReg}, "x")), Limits{}, "unexpected entry"},
		{"too many entries", s.bundle, Limits{Entries: 3, EntryBytes: 1 << 20, MetaBytes: 1 << 20, RecordsBytes: 1 << 20, LineBytes: 1 << 20, TotalBytes: 1 << 30}, "more than 3 entries"},
		{"too large", s.bundle, Limits{Entries: 100, EntryBytes: 1 << 20, MetaBytes: 1 << 20, RecordsBytes: 1 << 20, LineBytes: 1 << 20, TotalBytes: 2048}, "size limit"},
		{"not gzip", []byte("PK\x03\x04 a zip"), Limits{}, "not gzip"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(bytes.NewReader(tc.data), tc.lim)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error with %q, got %v", tc.want, err)
			}
		})
	}
	// A gzip bomb: a part that expands far past the limit.
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: dir + "captures/cap_00000000000000000000000000000000/raw", Typeflag: tar.TypeReg, Size: 64 << 20, Mode: 0o644})
	tw.Write(make([]byte, 64<<20))
	tw.Close()
	zw.Close()
	if _, err := Read(bytes.NewReader(bomb.Bytes()), Limits{Entries: 10, EntryBytes: 1 << 30, MetaBytes: 1 << 20, RecordsBytes: 1 << 20, LineBytes: 1 << 20, TotalBytes: 8 << 20}); err == nil || !strings.Contains(err.Error(), "size limit") {
		t.Fatalf("a gzip bomb: %v", err)
	}
	if _, err := Read(bytes.NewReader(bomb.Bytes()), Limits{Entries: 10, EntryBytes: 1 << 20, MetaBytes: 1 << 20, RecordsBytes: 1 << 20, LineBytes: 1 << 20, TotalBytes: 1 << 30}); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("an oversized part: %v", err)
	}
}

func TestRecordLine(t *testing.T) {
	body := []byte(`{"seq":1,"id":"au_1","prev_hash":""}`)
	line, err := RecordLine(body, audit.BodyHash(body))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"seq":1,"id":"au_1","prev_hash":"","hash":"` + audit.BodyHash(body) + `"}`; string(line) != want {
		t.Fatalf("line %s", line)
	}
	b, h, ok := splitLine(line)
	if !ok || string(b) != string(body) || h != audit.BodyHash(body) {
		t.Fatalf("split: %s %s %v", b, h, ok)
	}
	if _, err := RecordLine(body, strings.Repeat("0", 64)); err == nil {
		t.Fatal("a wrong hash was accepted")
	}
}

func FuzzRead(f *testing.F) {
	s := newSample(f)
	f.Add(s.bundle)
	f.Add([]byte{})
	f.Add([]byte("\x1f\x8b\x08\x00\x00\x00\x00\x00"))
	lim := Limits{Entries: 64, EntryBytes: 1 << 16, MetaBytes: 1 << 16, RecordsBytes: 1 << 16, LineBytes: 1 << 14, TotalBytes: 1 << 20}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := Read(bytes.NewReader(data), lim)
		if err != nil {
			return
		}
		if b.Manifest == nil {
			t.Fatal("a bundle without a manifest was read")
		}
		for name := range b.Files {
			if strings.Contains(name, "..") || strings.HasPrefix(name, "/") {
				t.Fatalf("entry %q was accepted", name)
			}
		}
		rep := Verify(b)
		if rep.OK != (len(rep.Problems) == 0) {
			t.Fatal("OK disagrees with the problems")
		}
	})
}
