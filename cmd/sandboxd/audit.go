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
	"github.com/sandboxd/sandboxd/internal/pgdb"
)

const auditUsage = "usage: sandboxd audit verify [--data-dir DIR | --state postgres://...] [--anchor SEQ:HASH]...\n"

// auditCmd runs "sandboxd audit verify --data-dir DIR [--anchor SEQ:HASH]":
// it walks the audit log's hash chain, checks each anchor (a record's hash
// kept elsewhere, such as the "audit head" lines of sandboxd's log), and
// exits 1 at the first break (0: intact), printing a JSON report. It reads
// while sandboxd runs (SQLite WAL); with --state it verifies a fleet's
// one chain in PostgreSQL.
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
