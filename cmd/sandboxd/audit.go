package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandboxd/audit"
)

// auditCmd runs "sandboxd audit verify --data-dir DIR": it walks the audit
// log's hash chain and exits 1 at the first break (0: intact), printing a
// JSON report. It reads while sandboxd runs (SQLite WAL).
func auditCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "verify" {
		fmt.Fprint(stderr, "usage: sandboxd audit verify --data-dir DIR\n")
		return 2
	}
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("data-dir", envDefault("DATA_DIR", "./data"), "sandboxd's data directory (env SANDBOXD_DATA_DIR)")
	if err := fs.Parse(args[1:]); err != nil {
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
