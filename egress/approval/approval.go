// Package approval is the human approval of first-time hosts for egress
// profiles in approve mode. A request to a host no rule of such a profile
// matches is denied (approval_required) and files an approval request,
// once per profile and host while it is pending; a person with the role
// security approves it for a bounded time or rejects it; an approved host
// is allowed for that profile until the approval expires. Nothing is ever
// approved by default or by timeout: an unanswered request stays denied,
// and an expired approval denies again (the next request files a new one).
//
// Service implements egress.Approvals on top of the store, so approvals
// survive restarts; the Checker consults it (egress/approval.go) and still
// checks every address an approved host resolves to, so an approval never
// opens a private, loopback or metadata address.
package approval

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Bounds of an approval's ttl.
const (
	MinTTL = time.Minute
	MaxTTL = 30 * 24 * time.Hour
	// MaxReasonLen caps the reason a person gives with a decision.
	MaxReasonLen = 500
)

// Decisions a person can make.
const (
	DecisionApprove = "approve"
	DecisionReject  = "reject"
)

// IdentifyFunc maps a client id (an exec id) to the tenant and key that
// started it; ok is false when it is not known (any more).
type IdentifyFunc func(client string) (tenant, keyID string, ok bool)

// Config configures a Service.
type Config struct {
	// Store keeps the records. Required.
	Store store.ApprovalStore
	// Log receives a line for every request filed and every decision.
	Log *slog.Logger
	// Now is the clock; nil means time.Now. Tests use a fake.
	Now func() time.Time
}

// Service files approval requests and records people's decisions.
type Service struct {
	cfg      Config
	identify atomic.Pointer[IdentifyFunc]
}

// New returns a Service.
func New(cfg Config) *Service {
	if cfg.Store == nil {
		panic("approval: Config.Store is required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg}
}

// Now returns the service's clock reading.
func (s *Service) Now() time.Time { return s.cfg.Now().UTC() }

// SetIdentify sets how a request's client id is mapped to its tenant and
// key, for requests that do not name them (the proxy knows only the exec
// id). It may be called at any time.
func (s *Service) SetIdentify(f IdentifyFunc) {
	if f == nil {
		s.identify.Store(nil)
		return
	}
	s.identify.Store(&f)
}

// CheckApproval implements egress.Approvals: the standing approval of the
// host, filing a pending request when there is none.
func (s *Service) CheckApproval(ctx context.Context, q egress.ApprovalQuery) (egress.ApprovalStatus, error) {
	return s.check(ctx, q, true)
}

// ReadOnly returns an egress.Approvals that reports the standing approvals
// and never files anything, for dry runs (POST /profiles/{name}/evaluate).
func (s *Service) ReadOnly() egress.Approvals { return readOnly{s} }

type readOnly struct{ s *Service }

func (r readOnly) CheckApproval(ctx context.Context, q egress.ApprovalQuery) (egress.ApprovalStatus, error) {
	return r.s.check(ctx, q, false)
}

func (s *Service) check(ctx context.Context, q egress.ApprovalQuery, file bool) (egress.ApprovalStatus, error) {
	if q.Profile == "" || q.Host == "" {
		return egress.ApprovalStatus{}, errors.New("an approval query needs a profile and a host")
	}
	now := s.Now()
	a, err := s.cfg.Store.StandingApproval(ctx, q.Profile, q.Host, now)
	switch {
	case err == nil && (a.State == store.ApprovalApproved || !file):
		return status(a, false), nil
	case err == nil:
	case !errors.Is(err, store.ErrNotFound):
		return egress.ApprovalStatus{}, err
	case !file:
		return egress.ApprovalStatus{}, nil
	}
	rec := &store.Approval{
		ID: newID(), Profile: q.Profile, ProfileVersion: q.ProfileVersion,
		Host: q.Host, Port: int(q.Port), Method: q.Method, URL: q.URL,
		Tenant: q.Tenant, KeyID: q.KeyID, Client: q.Client,
	}
	if rec.Tenant == "" && rec.KeyID == "" && q.Client != "" {
		if f := s.identify.Load(); f != nil {
			rec.Tenant, rec.KeyID, _ = (*f)(q.Client)
		}
	}
	a, created, err := s.cfg.Store.FileApproval(ctx, rec, now)
	if err != nil {
		return egress.ApprovalStatus{}, err
	}
	if created {
		s.cfg.Log.LogAttrs(ctx, slog.LevelWarn, "egress approval requested",
			slog.String("approval_id", a.ID),
			slog.String("profile", a.Profile),
			slog.String("profile_version", a.ProfileVersion),
			slog.String("host", a.Host),
			slog.Int("port", a.Port),
			slog.String("method", a.Method),
			slog.String("url", a.URL),
			slog.String("tenant", a.Tenant),
			slog.String("key_id", a.KeyID),
			slog.String("client", a.Client),
		)
	}
	return status(a, created), nil
}

func status(a *store.Approval, created bool) egress.ApprovalStatus {
	st := egress.ApprovalStatus{ID: a.ID, DecidedBy: a.DecidedBy, ExpiresAt: a.ExpiresAt, Created: created}
	switch a.State {
	case store.ApprovalApproved:
		st.State = egress.ApprovalApproved
	case store.ApprovalRejected:
		st.State = egress.ApprovalRejected
	default:
		st.State = egress.ApprovalPending
	}
	return st
}

// newID returns a fresh approval id: "ap_" and 20 hex digits.
func newID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "ap_" + hex.EncodeToString(b[:])
}

// ValidationError is a decision that cannot be made as given; Field names
// the offending field of the request.
type ValidationError struct {
	Field string
	Msg   string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Msg }

// ParseTTL parses an approval's ttl: a Go duration ("24h", "90m") or a
// whole number of days ("7d"), from MinTTL to MaxTTL.
func ParseTTL(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok && days != "" && !strings.ContainsAny(days, "+-.") {
		n, err := strconv.Atoi(days)
		if err != nil || n > 10_000 {
			return 0, fmt.Errorf("ttl %q is not a duration; write for example \"24h\", \"90m\" or \"7d\"", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("ttl %q is not a duration; write for example \"24h\", \"90m\" or \"7d\"", s)
		}
	}
	if d < MinTTL || d > MaxTTL {
		return 0, fmt.Errorf("ttl %s is out of range; an approval lasts from %s to %s (30 days)", d, MinTTL, MaxTTL)
	}
	return d, nil
}

// Decision is a person's answer to an approval request.
type Decision struct {
	// Decision is DecisionApprove or DecisionReject.
	Decision string
	// TTL is required to approve (see ParseTTL) and refused with reject:
	// a rejection stands until a person approves the request.
	TTL string
	// Reason is optional, kept with the record and logged.
	Reason string
	// By and ByTenant name the key that decided.
	By       string
	ByTenant string
}

// Decide records a person's decision on approval id and logs it with who
// decided. It returns the record before and after. Errors:
// *ValidationError for a bad decision, ttl or reason; store.ErrNotFound for
// an unknown id; store.ErrApprovalExpired for an approval that expired (the
// next request to its host files a new one).
func (s *Service) Decide(ctx context.Context, id string, d Decision) (before, after *store.Approval, err error) {
	dec := store.ApprovalDecision{By: d.By, ByTenant: d.ByTenant, Reason: d.Reason}
	var ttl time.Duration
	switch d.Decision {
	case DecisionApprove:
		if d.TTL == "" {
			return nil, nil, &ValidationError{"ttl", fmt.Sprintf("ttl is required to approve: how long the approval lasts, from %s to %s (30 days), for example \"24h\" or \"7d\"; nothing is approved without an end", MinTTL, MaxTTL)}
		}
		if ttl, err = ParseTTL(d.TTL); err != nil {
			return nil, nil, &ValidationError{"ttl", err.Error()}
		}
		dec.State = store.ApprovalApproved
	case DecisionReject:
		if d.TTL != "" {
			return nil, nil, &ValidationError{"ttl", "ttl applies to approve only; a rejection stands until a person approves the request"}
		}
		dec.State = store.ApprovalRejected
	case "":
		return nil, nil, &ValidationError{"decision", `decision is required: "approve" (with a ttl) or "reject"`}
	default:
		return nil, nil, &ValidationError{"decision", fmt.Sprintf(`decision %q is not allowed; use "approve" (with a ttl) or "reject"`, d.Decision)}
	}
	if len(d.Reason) > MaxReasonLen {
		return nil, nil, &ValidationError{"reason", fmt.Sprintf("reason is %d bytes; at most %d", len(d.Reason), MaxReasonLen)}
	}
	if strings.IndexFunc(d.Reason, unicode.IsControl) >= 0 {
		return nil, nil, &ValidationError{"reason", "reason may not contain control characters (newlines among them)"}
	}
	now := s.Now()
	if dec.State == store.ApprovalApproved {
		dec.ExpiresAt = now.Add(ttl)
	}
	before, after, err = s.cfg.Store.DecideApproval(ctx, id, dec, now)
	if err != nil {
		return before, nil, err
	}
	attrs := []slog.Attr{
		slog.String("approval_id", after.ID),
		slog.String("decision", d.Decision),
		slog.String("decided_by", after.DecidedBy),
		slog.String("decided_by_tenant", after.DecidedTenant),
		slog.String("previous_status", before.Status(now)),
		slog.String("profile", after.Profile),
		slog.String("host", after.Host),
		slog.String("reason", after.Reason),
		slog.String("requested_by_tenant", after.Tenant),
		slog.String("requested_by_key_id", after.KeyID),
		slog.String("requested_by_client", after.Client),
	}
	if dec.State == store.ApprovalApproved {
		attrs = append(attrs, slog.String("ttl", ttl.String()), slog.Time("expires_at", after.ExpiresAt))
	}
	s.cfg.Log.LogAttrs(ctx, slog.LevelWarn, "egress approval decided", attrs...)
	return before, after, nil
}

// Get returns approval id, or store.ErrNotFound.
func (s *Service) Get(ctx context.Context, id string) (*store.Approval, error) {
	return s.cfg.Store.GetApproval(ctx, id)
}

// List returns the approvals f selects, at the service's clock.
func (s *Service) List(ctx context.Context, f store.ApprovalFilter) ([]*store.Approval, error) {
	return s.cfg.Store.ListApprovals(ctx, f, s.Now())
}
