package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/bundle"
	"github.com/sandboxd/sandboxd/internal/pgdb"
)

const auditUsage = "usage: sandboxd audit verify [--data-dir DIR | --state postgres://... | --bundle FILE] [--anchor SEQ:HASH]...\n"

// auditCmd runs "sandboxd audit verify --data-dir DIR [--anchor SEQ:HASH]":
// it walks the audit log's hash chain, checks each anchor (a record's hash
// kept elsewhere, such as the "audit head" lines of sandboxd's log), and
// exits 1 at the first break (0: intact), printing a JSON report. It reads
// while sandboxd runs (SQLite WAL); with --state it verifies a fleet's
// one chain in PostgreSQL. With --bundle it checks an evidence bundle
// offline instead (see verifyBundle).
func auditCmd(args []string, stdout, stderr io.Writer) int {
	if groupHelp(args) {
		fmt.Fprint(stdout, auditUsage)
		return 0
	}
	if len(args) == 0 || args[0] != "verify" {
		fmt.Fprint(stderr, auditUsage)
		return 2
	}
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	dir := fs.String("data-dir", envDefault("DATA_DIR", "./data"), "sandboxd's data directory (env SANDBOXD_DATA_DIR)")
	state := fs.String("state", envDefault("STATE", ""), "a fleet's postgres:// URL, to verify its shared chain instead of a data dir's (env SANDBOXD_STATE)")
	bundleFile := fs.String("bundle", "", "an evidence bundle (.tar.gz from the review page) to check offline instead of a log: its records' hashes and links, its captures' digests")
	var anchors []audit.Anchor
	fs.Func("anchor", "SEQ:HASH of a record kept outside the log (the \"audit head\" log line's anchor); the record must be there with that hash. Repeatable", func(v string) error {
		a, err := audit.ParseAnchor(v)
		if err != nil {
			return err
		}
		anchors = append(anchors, a)
		return nil
	})
	if done, code := parseFlags(fs, args[1:], auditUsage, stdout, stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sandboxd audit verify: unexpected argument %q\n%s", fs.Arg(0), auditUsage)
		return 2
	}
	if *bundleFile != "" {
		return verifyBundle(*bundleFile, anchors, stdout, stderr)
	}
	l, closeLog, err := openAuditLog(*dir, *state)
	if err != nil {
		fmt.Fprintln(stderr, "sandboxd audit verify:", err)
		return 1
	}
	defer closeLog()
	rep, err := l.Verify(context.Background())
	if err == nil {
		err = l.CheckAnchors(context.Background(), rep, anchors...)
	}
	if err != nil {
		fmt.Fprintln(stderr, "sandboxd audit verify:", err)
		return 1
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(rep)
	if !rep.OK {
		fmt.Fprintf(stderr, "sandboxd audit verify: the chain breaks at record %d: %s\n", rep.BreakSeq, rep.Problem)
		return 1
	}
	return 0
}

// verifyBundle checks an evidence bundle offline: it prints the JSON
// report (what was checked, what it proves and what it does not) and a
// summary on stderr, and exits 1 when a check failed.
func verifyBundle(file string, anchors []audit.Anchor, stdout, stderr io.Writer) int {
	f, err := os.Open(file)
	if err != nil {
		fmt.Fprintln(stderr, "sandboxd audit verify:", err)
		return 1
	}
	defer f.Close()
	b, err := bundle.Read(f, bundle.Limits{})
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd audit verify: %s: %v\n", file, err)
		return 1
	}
	rep := bundle.Verify(b, anchors...)
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(rep)
	w := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	verdict := "every check holds"
	if !rep.OK {
		verdict = fmt.Sprintf("%d checks FAILED", len(rep.Problems))
	}
	w("bundle %s (%s %s, by %s of tenant %s at %s): %s.", rep.Bundle, rep.Scope, rep.Query, rep.CreatedBy.KeyID, rep.CreatedBy.Tenant, rep.CreatedAt, verdict)
	w("  %d records in %d contiguous runs; %d captures (%d erased), %d parts checked, %d of them against a record's digest.",
		rep.Records, len(rep.Segments), rep.Captures, rep.Erased, rep.Parts, rep.PartsChained)
	for _, p := range rep.Problems {
		w("  FAILED: %s", p)
	}
	for _, n := range rep.Notes {
		w("  note: %s", n)
	}
	w("It proves:")
	for _, p := range rep.Proves {
		w("  - %s", p)
	}
	w("It does not prove:")
	for _, p := range rep.DoesNotProve {
		w("  - %s", p)
	}
	if len(rep.Segments) > 0 {
		w("Tie it to the log: each run's last record is an anchor to check there, with sandboxd audit verify --data-dir DIR --anchor SEQ:HASH:")
		for _, s := range rep.Segments {
			w("  %s: --anchor %s", s, s.Last)
		}
	}
	if !rep.OK {
		return 1
	}
	return 0
}

// verifiable is an audit log verify can check anchors of.
type verifiable interface {
	audit.Log
	CheckAnchors(ctx context.Context, rep *audit.Report, anchors ...audit.Anchor) error
}

// openAuditLog opens the data dir's log, or the fleet's when state is a
// postgres:// URL.
func openAuditLog(dir, state string) (verifiable, func(), error) {
	if pgdb.IsURL(state) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pool, err := pgdb.Open(ctx, state, 4)
		if err != nil {
			return nil, nil, err
		}
		l, err := audit.OpenPostgres(ctx, pool, "verify")
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return l, func() { l.Close(); pool.Close() }, nil
	}
	if state != "" && state != "sqlite" {
		return nil, nil, fmt.Errorf("--state %q: use a postgres:// URL (or none for the data dir's log)", pgdb.Redacted(state))
	}
	if _, err := os.Stat(filepath.Join(dir, audit.FileName)); err != nil {
		return nil, nil, fmt.Errorf("no audit log in %s: %w", dir, err)
	}
	l, err := audit.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	return l, func() { l.Close() }, nil
}
