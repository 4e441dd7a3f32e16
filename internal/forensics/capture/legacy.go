package capture

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// FS is the former name of the store, kept so that callers compile.
//
// Deprecated: use SQLite.
type FS = SQLite

// OpenFS opens the store in dir without encryption: Open(dir, Options{}).
//
// Deprecated: use Open, which takes the key file.
func OpenFS(dir string) (*FS, error) { return Open(dir, Options{}) }

// The former file-system store kept a capture in DIR/<two hex digits>/<id>/:
// capture.json (the metadata) and one file per part, and wrote it in a
// DIR/.tmp-* directory first.
const (
	legacyMeta      = "capture.json"
	legacyTmpPrefix = ".tmp-"
)

var legacyShard = regexp.MustCompile(`^[0-9a-f]{2}$`)

// importLegacy moves captures of the former layout into the store: each is
// Put (keeping its id and time, with no retention) and then its directory
// removed, so a crash in between imports it at most once (the next Open
// finds it stored and only removes the directory). A capture whose files
// do not match their recorded digests is left where it is, and logged.
func (s *SQLite) importLegacy(ctx context.Context) error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	imported, skipped := 0, 0
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, legacyTmpPrefix) && e.IsDir() {
			if err := os.RemoveAll(filepath.Join(s.dir, name)); err != nil {
				return err
			}
			continue
		}
		if !e.IsDir() || !legacyShard.MatchString(name) {
			continue
		}
		shard := filepath.Join(s.dir, name)
		caps, err := os.ReadDir(shard)
		if err != nil {
			return err
		}
		for _, ce := range caps {
			if !ce.IsDir() || !ValidID(ce.Name()) {
				continue
			}
			dir := filepath.Join(shard, ce.Name())
			c, err := readLegacy(dir, ce.Name())
			if err != nil {
				skipped++
				s.log.Warn("a capture of the former layout cannot be imported; it stays where it is", "dir", dir, "err", err)
				continue
			}
			if err := s.Put(ctx, c); err != nil && !errors.Is(err, ErrExists) {
				return fmt.Errorf("importing the former capture %s: %w", dir, err)
			}
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
			imported++
		}
		if err := s.syncDir(shard); err != nil {
			return err
		}
		_ = os.Remove(shard) // only when empty
	}
	if imported+skipped > 0 {
		s.log.Info("captures of the former file-system layout imported", "imported", imported, "skipped", skipped)
		return s.syncDir(s.dir)
	}
	return nil
}

func readLegacy(dir, id string) (*Capture, error) {
	meta, err := os.ReadFile(filepath.Join(dir, legacyMeta))
	if err != nil {
		return nil, err
	}
	var c Capture
	if err := json.Unmarshal(meta, &c); err != nil {
		return nil, fmt.Errorf("malformed %s: %w", legacyMeta, err)
	}
	if c.ID != id {
		return nil, fmt.Errorf("%s names %q", legacyMeta, c.ID)
	}
	c.Retention, c.Hold, c.TenantHold, c.Erased = 0, nil, nil, nil
	for i := range c.Parts {
		p := &c.Parts[i]
		if !namePattern.MatchString(p.Name) || p.Name == "." || p.Name == ".." {
			return nil, fmt.Errorf("bad part name %q", p.Name)
		}
		data, err := os.ReadFile(filepath.Join(dir, p.Name))
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != p.SHA256 {
			return nil, fmt.Errorf("part %s does not match its sha256 (altered on disk)", p.Name)
		}
		p.Data = data
	}
	return &c, nil
}
