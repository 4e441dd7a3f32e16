// Package capture keeps raw captures for forensics: what a fetch received
// (bytes as they came off the wire, response headers), what sandboxd
// returned, and the code, stdin and outputs of an exec, each under an id
// that the response and the log carry. Captures are for reviewers, never
// for agents.
//
// Store is the interface the request paths use (Put, Get, Delete);
// Forensics adds what reviewers and the janitor need: retention (Sweep),
// legal holds (SetHold, SetTenantHold), erasure with a tombstone (Erase)
// and listing (List). SQLite, opened with Open, implements both: metadata
// in an SQLite database, bodies compressed and optionally encrypted, small
// ones in the database beside their metadata, larger ones as
// content-addressed blob files shared between captures. See SQLite for the
// on-disk layout and the crash-safety and encryption arguments.
package capture

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Capture is one stored capture: what the API shows of it (api.Capture,
// see View), whose fields these mean, with the parts' content. The notes
// here say who sets what.
type Capture struct {
	// ID: Put assigns one when empty.
	ID        string
	Kind      string
	Tenant    string
	KeyID     string
	RequestID string
	// CreatedAt: Put sets it when zero.
	CreatedAt time.Time
	// Retention: set by the caller of Put.
	Retention time.Duration
	// ExpiresAt: set by Put; Sweep deletes the capture after it unless it
	// is held.
	ExpiresAt time.Time
	Meta      map[string]string
	Parts     []Part

	// Hold, TenantHold and Erased are set by SetHold, SetTenantHold and
	// Erase, and read back by Get and List; Put ignores them.
	Hold       *Hold
	TenantHold *Hold
	Erased     *Erasure
}

// Part is one captured body: api.CapturePart with its content.
type Part struct {
	Name        string
	ContentType string
	// Size and SHA256 (hex) are set by Put from Data.
	Size   int64
	SHA256 string
	// Data is the content; nil in what Get returns for an erased capture
	// and in what List returns.
	Data []byte
}

// Hold is a legal hold: who placed it, when and why.
type Hold = api.CaptureHold

// Erasure records who erased a capture's content, when and why.
type Erasure = api.CaptureErasure

// Held reports whether the capture or its tenant is under a legal hold.
func (c *Capture) Held() bool { return c.Hold != nil || c.TenantHold != nil }

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
	// ID, when empty, its CreatedAt, when zero, its ExpiresAt, and each
	// part's size and digest.
	Put(ctx context.Context, c *Capture) error
	// Get returns the capture with its parts' data, or ErrNotFound. The
	// tombstone of an erased capture comes back with Erased set and no
	// data.
	Get(ctx context.Context, id string) (*Capture, error)
	// Delete removes a capture without leaving a tombstone, or returns
	// ErrNotFound (ErrHeld for a held capture).
	Delete(ctx context.Context, id string) error
}

// Forensics is a Store with retention, legal holds, erasure and listing,
// for reviewers and the janitor. Every method that removes content returns
// what it removed, or names it, so that the caller can write the audit
// record.
type Forensics interface {
	Store
	// Erase removes a capture's content and leaves a tombstone (who, when,
	// why). It returns ErrNotFound, ErrHeld while the capture or its
	// tenant is held, and ErrErased for a capture already erased.
	Erase(ctx context.Context, id, by, reason string) error
	// SetHold places (on) or lifts a legal hold on one capture.
	SetHold(ctx context.Context, id string, on bool, by, reason string) error
	// SetTenantHold places (on) or lifts a legal hold on all of a tenant's
	// captures, current and future.
	SetTenantHold(ctx context.Context, tenant string, on bool, by, reason string) error
	// Sweep deletes the captures expired at now that are not held and
	// returns them, one entry per deleted capture, also with an error.
	Sweep(ctx context.Context, now time.Time) ([]Swept, error)
	// List returns captures' metadata (no data), newest first, and the
	// cursor for the next page ("" after the last).
	List(ctx context.Context, f Filter) ([]Capture, string, error)
}

// Swept names a capture that Sweep deleted.
type Swept struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Kind      string    `json:"kind"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Filter selects captures for List. Zero fields do not filter.
type Filter struct {
	Tenant string
	Kind   string
	// Since (inclusive) and Until (exclusive) bound CreatedAt.
	Since, Until time.Time
	// Limit is the page size: 0 means 100; at most 1000.
	Limit int
	// Cursor is the nextCursor of the previous page, or "".
	Cursor string
}

var (
	// ErrNotFound: no capture has the id.
	ErrNotFound = errors.New("capture not found")
	// ErrHeld: the capture or its tenant is under a legal hold.
	ErrHeld = errors.New("capture is under a legal hold")
	// ErrErased: the capture's content was erased.
	ErrErased = errors.New("capture was erased")
	// errExists: Put was given the id of a stored capture.
	errExists = errors.New("a capture with this id exists")
	// errCorrupt: a blob does not decode or does not match its digest
	// (altered or damaged on disk).
	errCorrupt = errors.New("capture content altered or damaged on disk")
	// errKey: the encryption key is missing, unusable or not the one the
	// store's content was written with.
	errKey = errors.New("capture encryption key")
)

var (
	idPattern   = regexp.MustCompile(`^cap_[0-9a-f]{32}$`)
	namePattern = regexp.MustCompile(`^[a-z0-9._-]{1,64}$`)
)

// newID returns a fresh random capture id.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "cap_" + hex.EncodeToString(b[:])
}

// validID reports whether id has the form of a capture id.
func validID(id string) bool { return idPattern.MatchString(id) }

func check(c *Capture) error {
	if !validID(c.ID) {
		return fmt.Errorf("capture id %q is not of the form cap_ and 32 hex digits", c.ID)
	}
	if c.Retention < 0 {
		return fmt.Errorf("capture %s: negative retention %v", c.ID, c.Retention)
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

// View is the capture as the API shows it: every part described, no bytes.
func (c *Capture) View() *api.Capture {
	v := &api.Capture{ID: c.ID, Kind: c.Kind, Tenant: c.Tenant, KeyID: c.KeyID, RequestID: c.RequestID, CreatedAt: c.CreatedAt,
		RetentionS: int64(c.Retention / time.Second), ExpiresAt: c.ExpiresAt, Meta: c.Meta, Parts: make([]api.CapturePart, len(c.Parts)),
		Hold: c.Hold, TenantHold: c.TenantHold, Erased: c.Erased}
	for i, p := range c.Parts {
		v.Parts[i] = api.CapturePart{Name: p.Name, ContentType: p.ContentType, Size: p.Size, SHA256: p.SHA256}
	}
	return v
}

// Days is a profile's capture retention in days as a Retention (0: keep
// until erased).
func Days(n int64) time.Duration { return time.Duration(n) * 24 * time.Hour }
