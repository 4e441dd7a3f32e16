package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/bundle"
	"github.com/sandboxd/sandboxd/internal/logbuf"
)

func appendExec(t *testing.T, l *audit.SQLite, subject string) {
	t.Helper()
	if err := l.Append(context.Background(), &audit.Record{Kind: audit.KindExec, Tenant: "acme", Subject: subject, Status: "ok"}); err != nil {
		t.Fatal(err)
	}
}

// The head is logged when it moved, not on every tick, and each line's
// anchor is the head at that moment.
func TestAnchorLoopLogsTheHeadWhenItMoves(t *testing.T) {
	dir := t.TempDir()
	l, err := audit.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { anchorLoop(ctx, l, 5*time.Millisecond, log); close(done) }()
	// waitSeq waits for a head line of seq and returns the lines so far.
	waitSeq := func(seq float64) []map[string]any {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			h := logs.Records("audit head")
			if len(h) > 0 && h[len(h)-1]["seq"] == seq {
				return h
			}
			if time.Now().After(deadline) {
				t.Fatalf("no \"audit head\" line for record %v:\n%s", seq, logs.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	time.Sleep(30 * time.Millisecond) // ticks over an empty log log nothing
	if h := logs.Records("audit head"); len(h) != 0 {
		t.Fatalf("an empty log's head was logged: %v", h)
	}
	appendExec(t, l, "ex_1")
	appendExec(t, l, "ex_2")
	n := len(waitSeq(2))
	time.Sleep(50 * time.Millisecond) // about ten ticks without a new record
	if h := logs.Records("audit head"); len(h) != n {
		t.Fatalf("the head was logged again without moving: %v", h)
	}
	appendExec(t, l, "ex_3")
	heads := waitSeq(3)
	cancel()
	<-done
	head, err := l.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if last := heads[len(heads)-1]; last["anchor"] != head.String() || last["hash"] != head.Hash || len(heads) != n+1 {
		t.Fatalf("head lines %v; the log's head is %v", heads, head)
	}
}

func TestAuditVerifyCommand(t *testing.T) {
	dir := t.TempDir()
	l, err := audit.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	appendExec(t, l, "ex_1")
	head, err := l.Head(context.Background())
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	other := audit.Anchor{Seq: 1, Hash: strings.Repeat("0", 64)}
	later := audit.Anchor{Seq: 2, Hash: head.Hash}
	for _, c := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"verify", "--data-dir", dir}, 0, `"ok": true`, ""},
		{[]string{"verify", "--data-dir", dir, "--anchor", head.String()}, 0, `"anchors": 1`, ""},
		{[]string{"verify", "--data-dir", dir, "--anchor", other.String()}, 1, `"ok": false`, "rebuilt at or before record 1"},
		{[]string{"verify", "--data-dir", dir, "--anchor", later.String()}, 1, `"break_seq": 2`, "cut from the end"},
		{[]string{"verify", "--data-dir", dir, "--anchor", "1:zz"}, 2, "", "64 hex digits"},
		{[]string{"verify", "--data-dir", dir, "extra"}, 2, "", `unexpected argument "extra"`},
		{[]string{"check"}, 2, "", "usage: sandboxd audit verify"},
		{[]string{"verify", "--data-dir", t.TempDir()}, 1, "", "no audit log in"},
	} {
		var stdout, stderr bytes.Buffer
		code := auditCmd(c.args, &stdout, &stderr)
		if code != c.code || !strings.Contains(stdout.String(), c.stdout) || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("audit %v: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				c.args, code, stdout.String(), stderr.String(), c.code, c.stdout, c.stderr)
		}
	}
}

// verify --bundle checks an evidence bundle offline: exit 0 and what it
// proves when it holds, exit 1 and the failed check when a record was
// changed; a file that is not a bundle is refused.
func TestAuditVerifyBundleCommand(t *testing.T) {
	dir := t.TempDir()
	l, err := audit.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"ex_1", "ex_2", "ex_3"} {
		appendExec(t, l, s)
	}
	recs, _, err := l.Query(context.Background(), audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	head, _ := l.Head(context.Background())
	lines, err := bundle.Lines(context.Background(), l, []audit.Record{recs[0], recs[2]})
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := bundle.NewWriter(&buf, "bnd_00000000000000aa", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Records(lines); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(bundle.Manifest{Scope: "search", Query: "kind=exec", Head: head, CreatedBy: bundle.Creator{KeyID: "rev-1", Tenant: "acme"}}); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.tar.gz")
	os.WriteFile(good, buf.Bytes(), 0o644)
	// The same bundle with one record's status changed in place.
	zr, _ := gzip.NewReader(bytes.NewReader(buf.Bytes()))
	raw, _ := io.ReadAll(zr)
	raw = bytes.Replace(raw, []byte(`"status":"ok"`), []byte(`"status":"OK"`), 1)
	var bad bytes.Buffer
	zw := gzip.NewWriter(&bad)
	zw.Write(raw)
	zw.Close()
	badFile := filepath.Join(dir, "bad.tar.gz")
	os.WriteFile(badFile, bad.Bytes(), 0o644)
	for _, c := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"verify", "--bundle", good}, 0, `"ok": true`, "does not prove"},
		{[]string{"verify", "--bundle", good}, 0, `"records": 2`, "--anchor " + recs[0].Hash[:0]},
		{[]string{"verify", "--bundle", good, "--anchor", head.String()}, 0, `"anchors": 1`, "every check holds"},
		{[]string{"verify", "--bundle", good, "--anchor", "2:" + strings.Repeat("0", 64)}, 1, `"ok": false`, "not in the bundle"},
		{[]string{"verify", "--bundle", badFile}, 1, `"ok": false`, "does not match its hash"},
		{[]string{"verify", "--bundle", filepath.Join(dir, audit.FileName)}, 1, "", "not gzip"},
		{[]string{"verify", "--bundle", filepath.Join(dir, "missing")}, 1, "", "no such file"},
	} {
		var stdout, stderr bytes.Buffer
		code := auditCmd(c.args, &stdout, &stderr)
		if code != c.code || !strings.Contains(stdout.String(), c.stdout) || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("audit %v: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				c.args, code, stdout.String(), stderr.String(), c.code, c.stdout, c.stderr)
		}
	}
}
