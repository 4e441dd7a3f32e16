// Package capture keeps raw captures for forensics: what a fetch received
// (bytes as they came off the wire, response headers) and what sandboxd
// returned, each under an id that the response and the log carry. Captures
// are for reviewers, never for agents.
//
// Store is the interface; FS, a directory tree under the data directory,
// is the implementation a single instance uses.
package capture

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Capture is one stored capture.
type Capture struct {
	// ID is "cap_" and 32 hex digits; Put assigns one when empty.
	ID string `json:"id"`
	// Kind says what was captured: "fetch", "exec".
	Kind      string    `json:"kind"`
	Tenant    string    `json:"tenant"`
	KeyID     string    `json:"key_id"`
	RequestID string    `json:"request_id,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Meta holds small facts (url, final_url, status, content_type).
	Meta map[string]string `json:"meta,omitempty"`
	// Parts are the captured bodies, each under a unique name.
	Parts []Part `json:"parts"`
}

// Part is one captured body.
type Part struct {
	// Name is 1 to 64 of a-z, 0-9, '.', '_' and '-' ("raw", "headers",
	// "content").
	Name        string `json:"name"`
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
	// SHA256 is the hex digest of Data, set by Put.
	SHA256 string `json:"sha256"`
	// Data is the content; empty in what Get returns for a deleted part.
	Data []byte `json:"-"`
}

// Part returns the part called name, or nil.
func (c *Capture) Part(name string) *Part {
	for i := range c.Parts {
		if c.Parts[i].Name == name {
			return &c.Parts[i]
		}
	}
	return nil
}

// Store keeps captures. Implementations are safe for concurrent use.
type Store interface {
	// Put stores c durably (it is on disk when Put returns) and sets its
	// ID, when empty, and each part's size and digest.
	Put(ctx context.Context, c *Capture) error
	// Get returns the capture with its parts' data, or ErrNotFound.
	Get(ctx context.Context, id string) (*Capture, error)
	// Delete removes a capture, or returns ErrNotFound.
	Delete(ctx context.Context, id string) error
}

// ErrNotFound: no capture has the id.
var ErrNotFound = errors.New("capture not found")

var (
	idPattern   = regexp.MustCompile(`^cap_[0-9a-f]{32}$`)
	namePattern = regexp.MustCompile(`^[a-z0-9._-]{1,64}$`)
)

// NewID returns a fresh random capture id.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "cap_" + hex.EncodeToString(b[:])
}

// ValidID reports whether id has the form of a capture id.
func ValidID(id string) bool { return idPattern.MatchString(id) }

func check(c *Capture) error {
	if !ValidID(c.ID) {
		return fmt.Errorf("capture id %q is not of the form cap_ and 32 hex digits", c.ID)
	}
	seen := map[string]bool{}
	for _, p := range c.Parts {
		if !namePattern.MatchString(p.Name) || p.Name == "." || p.Name == ".." {
			return fmt.Errorf("capture part name %q: use 1 to 64 of a-z, 0-9, '.', '_' and '-'", p.Name)
		}
		if seen[p.Name] {
			return fmt.Errorf("capture part %q appears twice", p.Name)
		}
		seen[p.Name] = true
	}
	return nil
}
