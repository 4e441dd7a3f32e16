// Package dataset identifies the content of datasets: a snapshot id is the
// sha256 over every file's name, size and content, so an exec's audit
// record can say exactly which data the code saw. Registry recomputes an id
// only when a cheap fingerprint (names, sizes, modification times) changes.
package dataset

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// Limits of one dataset, so that a snapshot is bounded work.
const (
	maxFiles = 100_000
	maxBytes = 64 << 30
)

type entry struct {
	rel  string
	size int64
	mod  int64
	mode fs.FileMode
	link string
}

// walk lists the regular files, directories and symbolic links under root
// (links are recorded by target, never followed).
func walk(root string) ([]entry, error) {
	var out []entry
	var total int64
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		info, err := d.Info()
		if err != nil {
			return err
		}
		e := entry{rel: filepath.ToSlash(rel), size: info.Size(), mod: info.ModTime().UnixNano(), mode: info.Mode()}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			e.link, _ = os.Readlink(path)
			e.size = 0
		case info.IsDir():
			e.size = 0
		case !info.Mode().IsRegular():
			e.size = 0 // devices, sockets: named only
		}
		out = append(out, e)
		total += e.size
		if len(out) > maxFiles {
			return fmt.Errorf("dataset %s has more than %d entries", root, maxFiles)
		}
		if total > maxBytes {
			return fmt.Errorf("dataset %s holds more than %d bytes", root, int64(maxBytes))
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].rel < out[j].rel })
	return out, err
}

func fingerprint(list []entry) string {
	h := sha256.New()
	for _, e := range list {
		fmt.Fprintf(h, "%q %d %d %o %q\n", e.rel, e.size, e.mod, e.mode, e.link)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Snapshot returns the dataset's snapshot id: "ds_" and the sha256 over
// every entry's name, type, size and content digest.
func Snapshot(root string) (string, error) {
	list, err := walk(root)
	if err != nil {
		return "", err
	}
	return snapshotOf(root, list)
}

func snapshotOf(root string, list []entry) (string, error) {
	h := sha256.New()
	for _, e := range list {
		kind := "f"
		switch {
		case e.link != "" || e.mode&fs.ModeSymlink != 0:
			kind = "l"
		case e.mode.IsDir():
			kind = "d"
		case !e.mode.IsRegular():
			kind = "o"
		}
		sum := ""
		if kind == "f" {
			f, err := os.Open(filepath.Join(root, filepath.FromSlash(e.rel)))
			if err != nil {
				return "", err
			}
			fh := sha256.New()
			_, err = io.Copy(fh, f)
			f.Close()
			if err != nil {
				return "", err
			}
			sum = hex.EncodeToString(fh.Sum(nil))
		}
		fmt.Fprintf(h, "%s %q %d %s %q\n", kind, e.rel, e.size, sum, e.link)
	}
	return "ds_" + hex.EncodeToString(h.Sum(nil)), nil
}

// Registry caches snapshot ids by dataset path. Safe for concurrent use.
type Registry struct {
	mu    sync.Mutex
	known map[string]cached // by path
}

type cached struct {
	fp, id string
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{known: map[string]cached{}} }

// Snapshot returns the current snapshot id of the dataset at root,
// recomputing the content digest only when the fingerprint changed since
// the last call.
func (r *Registry) Snapshot(root string) (string, error) {
	list, err := walk(root)
	if err != nil {
		return "", err
	}
	fp := fingerprint(list)
	r.mu.Lock()
	c, ok := r.known[root]
	r.mu.Unlock()
	if ok && c.fp == fp {
		return c.id, nil
	}
	id, err := snapshotOf(root, list)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	r.known[root] = cached{fp: fp, id: id}
	r.mu.Unlock()
	return id, nil
}
