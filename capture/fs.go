package capture

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// FS stores captures in a directory: DIR/<two hex digits>/<id>/ holds
// capture.json (the metadata) and one file per part. A capture is written
// in a temporary directory, synced, and renamed into place, so a crash
// leaves either the whole capture or none of it (and a temporary directory
// that the next OpenFS removes).
type FS struct {
	dir string
}

const (
	metaFile  = "capture.json"
	tmpPrefix = ".tmp-"
)

// OpenFS opens (creating it, mode 0700) the capture directory dir and
// removes temporary directories left by a crash.
func OpenFS(dir string) (*FS, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the capture directory: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the capture directory: %w", err)
	}
	for _, e := range entries {
		if len(e.Name()) > len(tmpPrefix) && e.Name()[:len(tmpPrefix)] == tmpPrefix {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	return &FS{dir: dir}, nil
}

// Dir returns the directory.
func (s *FS) Dir() string { return s.dir }

func (s *FS) path(id string) string { return filepath.Join(s.dir, id[4:6], id) }

// Put implements Store.
func (s *FS) Put(ctx context.Context, c *Capture) error {
	if c.ID == "" {
		c.ID = NewID()
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = time.Now().UTC()
	}
	if err := check(c); err != nil {
		return err
	}
	for i := range c.Parts {
		p := &c.Parts[i]
		sum := sha256.Sum256(p.Data)
		p.Size, p.SHA256 = int64(len(p.Data)), hex.EncodeToString(sum[:])
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(s.dir, tmpPrefix+c.ID+"-")
	if err != nil {
		return fmt.Errorf("storing capture %s: %w", c.ID, err)
	}
	done := false
	defer func() {
		if !done {
			_ = os.RemoveAll(tmp)
		}
	}()
	for _, p := range c.Parts {
		if err := writeFile(filepath.Join(tmp, p.Name), p.Data); err != nil {
			return fmt.Errorf("storing capture %s: %w", c.ID, err)
		}
	}
	meta, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(tmp, metaFile), meta); err != nil {
		return fmt.Errorf("storing capture %s: %w", c.ID, err)
	}
	if err := syncDir(tmp); err != nil {
		return err
	}
	final := s.path(c.ID)
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return fmt.Errorf("storing capture %s: %w", c.ID, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("storing capture %s: %w", c.ID, err)
	}
	done = true
	if err := syncDir(filepath.Dir(final)); err != nil {
		return err
	}
	return syncDir(s.dir)
}

// Get implements Store.
func (s *FS) Get(ctx context.Context, id string) (*Capture, error) {
	if !ValidID(id) {
		return nil, ErrNotFound
	}
	dir := s.path(id)
	meta, err := os.ReadFile(filepath.Join(dir, metaFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading capture %s: %w", id, err)
	}
	var c Capture
	if err := json.Unmarshal(meta, &c); err != nil {
		return nil, fmt.Errorf("capture %s: malformed %s: %w", id, metaFile, err)
	}
	if c.ID != id {
		return nil, fmt.Errorf("capture %s: %s names %q", id, metaFile, c.ID)
	}
	for i := range c.Parts {
		p := &c.Parts[i]
		if !namePattern.MatchString(p.Name) {
			return nil, fmt.Errorf("capture %s: bad part name %q", id, p.Name)
		}
		data, err := os.ReadFile(filepath.Join(dir, p.Name))
		if err != nil {
			return nil, fmt.Errorf("capture %s: reading part %s: %w", id, p.Name, err)
		}
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != p.SHA256 {
			return nil, fmt.Errorf("capture %s: part %s does not match its sha256 (altered on disk)", id, p.Name)
		}
		p.Data = data
	}
	return &c, nil
}

// Delete implements Store.
func (s *FS) Delete(ctx context.Context, id string) error {
	if !ValidID(id) {
		return ErrNotFound
	}
	dir := s.path(id)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return ErrNotFound
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("deleting capture %s: %w", id, err)
	}
	return syncDir(filepath.Dir(dir))
}

func writeFile(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

var _ Store = (*FS)(nil)
