package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/profiles"
)

// reloader reloads the profiles dir on SIGHUP and when a file under it
// changes (it polls names, sizes and modification times), and swaps the
// set in force atomically. A set that does not load (a bad edit, a file
// caught half-written) is not used: the last good set stays in force and
// the log says why, with the file and line. The API, the runner (through
// the specs the API builds) and the egress proxy read the set in force at
// each use.
type reloader struct {
	dir string
	cur *atomic.Pointer[profiles.Set]
	log *slog.Logger
	// apply runs after a new set is in force (warm the pools, bring up
	// the egress network if it is now needed).
	apply func(old, set *profiles.Set)
	// audit, when set, receives one record per reload attempt.
	audit audit.Log
	// keysFile, when set, is reloaded into keys on SIGHUP and when its
	// content changes (keys added, removed or rotated without a restart).
	keysFile string
	keys     *auth.Keyring
	keysSum  string
	// secretsFile, when set, is reloaded into secrets on SIGHUP and when
	// it or a value file it names changes (secrets.go).
	secretsFile string
	secrets     *secrets.Store
	secretsSum  string

	mu   sync.Mutex
	last string // fingerprint of the files at the last attempt
}

func newReloader(dir string, cur *atomic.Pointer[profiles.Set], log *slog.Logger, apply func(old, set *profiles.Set)) *reloader {
	r := &reloader{dir: dir, cur: cur, log: log, apply: apply}
	r.last, _ = fingerprint(dir)
	return r
}

// fingerprint digests the path, size, mode and modification time of every
// file under dir (dot files included: an editor's swap file changes it,
// which costs one reload that finds nothing new).
func fingerprint(dir string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		// Follow a symbolic link's target: a dir managed by a
		// ConfigMap-style "..data" link changes only there.
		if info.Mode()&fs.ModeSymlink != 0 {
			if t, err := os.Stat(path); err == nil {
				info = t
			}
		}
		fmt.Fprintf(h, "%s\x00%d\x00%v\x00%d\n", path, info.Size(), info.Mode(), info.ModTime().UnixNano())
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}

// run polls every interval (0: never) and reloads on each signal from hup,
// until ctx ends.
func (r *reloader) run(ctx context.Context, interval time.Duration, hup <-chan os.Signal) {
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload("SIGHUP", true)
			r.reloadKeys("SIGHUP", true)
			r.reloadSecrets("SIGHUP", true)
		case <-tick:
			r.reload("file change", false)
			r.reloadKeys("file change", false)
			r.reloadSecrets("file change", false)
		}
	}
}

// reload loads the dir and puts the result in force. Without force it
// does nothing when the files have not changed since the last attempt, so
// a bad edit is reported once, not at every poll. It reports whether a new
// set is in force.
func (r *reloader) reload(reason string, force bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	fp, fpErr := fingerprint(r.dir)
	if !force && fpErr == nil && fp == r.last {
		return false
	}
	r.last = fp
	old := r.cur.Load()
	set, err := profiles.Load(r.dir)
	if err != nil {
		attrs := []any{"reason", reason, "err", err.Error(), "dir", r.dir, "kept", "the last good profiles stay in force"}
		var perr *profiles.Error
		if errors.As(err, &perr) {
			attrs = append(attrs, "file", perr.File, "line", perr.Line, "column", perr.Column)
		}
		var all profiles.Errors
		if errors.As(err, &all) {
			attrs = append(attrs, "problems", len(all))
		}
		if old != nil {
			attrs = append(attrs, "exec_versions", versions(old, false), "egress_versions", versions(old, true))
		}
		r.log.Error("profile reload failed", attrs...)
		r.record(audit.Reload(audit.KindProfileReload, r.dir, err, map[string]string{"reason": reason}))
		return false
	}
	r.cur.Store(set)
	logProfileWarnings(r.log, set)
	changed, added, removed := diffSets(old, set)
	r.record(audit.Reload(audit.KindProfileReload, r.dir, nil, map[string]string{
		"reason": reason, "changed": strings.Join(changed, ","), "added": strings.Join(added, ","), "removed": strings.Join(removed, ","),
		"exec_versions": fmt.Sprint(versions(set, false)), "egress_versions": fmt.Sprint(versions(set, true))}))
	r.log.Info("profiles reloaded", "reason", reason, "dir", r.dir,
		"exec_versions", versions(set, false), "egress_versions", versions(set, true),
		"changed", changed, "added", added, "removed", removed)
	if r.apply != nil {
		r.apply(old, set)
	}
	return true
}

// reloadKeys reloads the keys file when its content changed (or force).
// A file that does not load leaves the keys in force as they were.
func (r *reloader) reloadKeys(reason string, force bool) {
	if r.keysFile == "" || r.keys == nil {
		return
	}
	data, err := os.ReadFile(r.keysFile)
	sum := sha256.Sum256(data)
	fp := hex.EncodeToString(sum[:])
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && !force && fp == r.keysSum {
		return
	}
	r.keysSum = fp
	ring, warnings, err := auth.LoadFile(r.keysFile)
	if err != nil {
		r.log.Error("keys reload failed; the keys in force stay", "reason", reason, "file", r.keysFile, "err", err)
		r.record(audit.Reload(audit.KindKeysReload, r.keysFile, err, map[string]string{"reason": reason}))
		return
	}
	for _, w := range warnings {
		r.log.Warn(w)
	}
	before, after := r.keys.IDs(), ring.IDs()
	r.keys.Replace(ring)
	var added, removed []string
	for _, id := range after {
		if !slices.Contains(before, id) {
			added = append(added, id)
		}
	}
	for _, id := range before {
		if !slices.Contains(after, id) {
			removed = append(removed, id)
		}
	}
	r.log.Info("keys reloaded", "reason", reason, "keys", len(after), "added", added, "removed", removed)
	r.record(audit.Reload(audit.KindKeysReload, r.keysFile, nil, map[string]string{
		"reason": reason, "keys": strconv.Itoa(len(after)), "added": strings.Join(added, ","), "removed": strings.Join(removed, ","), "file_sha256": fp}))
}

// record appends a reload's audit record; a failure is logged (the reload
// itself stands).
func (r *reloader) record(rec *audit.Record) {
	if r.audit == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.audit.Append(ctx, rec); err != nil {
		r.log.Error("writing the reload's audit record failed", "err", err)
	}
}

// versions maps each profile name to the first 12 digits of its version.
func versions(set *profiles.Set, egress bool) map[string]string {
	out := map[string]string{}
	if egress {
		for name, p := range set.Egress {
			out[name] = short(p.Version)
		}
		return out
	}
	for name, p := range set.Exec {
		out[name] = short(p.Version)
	}
	return out
}

func short(v string) string { return v[:min(12, len(v))] }

// diffSets lists the profiles ("exec/NAME", "egress/NAME") whose version
// changed, that were added and that were removed.
func diffSets(old, set *profiles.Set) (changed, added, removed []string) {
	changed, added, removed = []string{}, []string{}, []string{}
	if old == nil {
		return
	}
	for _, kind := range []bool{false, true} {
		prefix := "exec/"
		if kind {
			prefix = "egress/"
		}
		was, now := versions(old, kind), versions(set, kind)
		for name, v := range now {
			switch w, ok := was[name]; {
			case !ok:
				added = append(added, prefix+name)
			case w != v:
				changed = append(changed, prefix+name)
			}
		}
		for name := range was {
			if _, ok := now[name]; !ok {
				removed = append(removed, prefix+name)
			}
		}
	}
	slices.Sort(changed)
	slices.Sort(added)
	slices.Sort(removed)
	return
}
