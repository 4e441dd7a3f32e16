package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandboxd/internal/forensics/audit"
)

const auditUsage = "usage: sandboxd audit verify --data-dir DIR [--anchor SEQ:HASH]...\n"

// auditCmd runs "sandboxd audit verify --data-dir DIR [--anchor SEQ:HASH]":
// it walks the audit log's hash chain, checks each anchor (a record's hash
// kept elsewhere, such as the "audit head" lines of sandboxd's log), and
// exits 1 at the first break (0: intact), printing a JSON report. It reads
// while sandboxd runs (SQLite WAL).
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
	if _, err := os.Stat(filepath.Join(*dir, audit.FileName)); err != nil {
		fmt.Fprintf(stderr, "sandboxd audit verify: no audit log in %s: %v\n", *dir, err)
		return 1
	}
	l, err := audit.Open(*dir)
	if err != nil {
		fmt.Fprintln(stderr, "sandboxd audit verify:", err)
		return 1
	}
	defer l.Close()
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
