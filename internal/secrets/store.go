package secrets

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/sandboxd/sandboxd/redact"
)

// Store holds the secrets in force. Load swaps them atomically (a reload
// of the secrets file); runs started before keep what they were given
// (Run). The redaction it offers (Rules, Redactor, LogHandler) knows every
// value loaded since sandboxd started, retired ones included, so that a
// value a run in flight still holds after a reload is still redacted.
type Store struct {
	cur atomic.Pointer[state]

	mu sync.Mutex
	// retired are the literals of values no longer in force, newest last.
	retired []literal
}

// maxRetired bounds the retired literals kept for redaction.
const maxRetired = 4096

type state struct {
	set      *Set
	gen      uint64
	lits     *Literals // in force and retired
	rules    []redact.Rule
	redactor *redact.Redactor
}

// NewStore returns a store holding set (nil: no secrets).
func NewStore(set *Set) *Store {
	s := &Store{}
	s.Load(set)
	return s
}

// Set is the set in force (never nil).
func (s *Store) Set() *Set {
	if s == nil {
		return &Set{}
	}
	return s.cur.Load().set
}

// Change says what a Load changed, by name (never a value).
type Change struct {
	Added, Removed, Changed []string
}

// Load puts set in force and says what changed. A secret whose value,
// tenants, destinations or way of being applied differ counts as changed.
func (s *Store) Load(set *Set) Change {
	if set == nil {
		set = &Set{secrets: map[string]*Secret{}}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.cur.Load()
	var ch Change
	var gen uint64
	if old != nil {
		gen = old.gen + 1
		for _, name := range old.set.names {
			was, now := old.set.secrets[name], set.secrets[name]
			switch {
			case now == nil:
				ch.Removed = append(ch.Removed, name)
			case !same(was, now):
				ch.Changed = append(ch.Changed, name)
			}
			if now == nil || now.value != was.value {
				s.retire(forms(was))
			}
		}
		for _, name := range set.names {
			if old.set.secrets[name] == nil {
				ch.Added = append(ch.Added, name)
			}
		}
	}
	var live []*Secret
	for _, name := range set.names {
		live = append(live, set.secrets[name])
	}
	lits := NewLiterals(live...).merge(&Literals{lits: s.retired})
	st := &state{set: set, gen: gen, lits: lits, rules: lits.Rules()}
	r, err := redact.New(st.rules)
	if err != nil {
		// Literal rules always compile; keep the built-ins if one did not.
		r = redact.Default()
	}
	st.redactor = r
	s.cur.Store(st)
	return ch
}

func (s *Store) retire(ls []literal) {
	for _, l := range ls {
		if !slices.Contains(s.retired, l) {
			s.retired = append(s.retired, l)
		}
	}
	if n := len(s.retired) - maxRetired; n > 0 {
		s.retired = slices.Delete(s.retired, 0, n)
	}
}

// same reports whether two loads of a secret are the same in every way.
func same(a, b *Secret) bool {
	return a.value == b.value && slices.Equal(a.Tenants, b.Tenants) && a.Where() == b.Where() && a.Slot() == b.Slot() && a.Apply == b.Apply
}

// Rules returns redact rules for every value (in force and retired), and a
// key that changes whenever they do (for redact.Cache).
func (s *Store) Rules() (key string, rules []redact.Rule) {
	if s == nil {
		return "", nil
	}
	st := s.cur.Load()
	return "secrets:" + strconv.FormatUint(st.gen, 10), st.rules
}

// Literals returns the literals of every value, in force and retired.
func (s *Store) Literals() *Literals {
	if s == nil {
		return nil
	}
	return s.cur.Load().lits
}

// Redactor returns the built-in rules and every value as a literal.
func (s *Store) Redactor() *redact.Redactor {
	if s == nil {
		return redact.Default()
	}
	return s.cur.Load().redactor
}

// LogHandler wraps h so that every record passes the redactor in force
// when it is handled: the built-in rules and every secret value, even one
// loaded after the handler was made.
func (s *Store) LogHandler(h slog.Handler) slog.Handler {
	return &logHandler{base: h, store: s, built: &builtHandler{}}
}

// logHandler redacts with the Store's redactor of the moment. The chain of
// WithAttrs and WithGroup calls is kept and replayed on a redact handler
// whenever the redactor changed.
type logHandler struct {
	base  slog.Handler
	store *Store
	ops   []func(slog.Handler) slog.Handler
	built *builtHandler
}

type builtHandler struct {
	mu sync.Mutex
	r  *redact.Redactor
	h  slog.Handler
}

func (l *logHandler) handler() slog.Handler {
	r := l.store.Redactor()
	l.built.mu.Lock()
	defer l.built.mu.Unlock()
	if l.built.r != r {
		h := redact.NewHandler(l.base, r)
		for _, op := range l.ops {
			h = op(h)
		}
		l.built.r, l.built.h = r, h
	}
	return l.built.h
}

func (l *logHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.base.Enabled(ctx, level)
}

func (l *logHandler) Handle(ctx context.Context, rec slog.Record) error {
	return l.handler().Handle(ctx, rec)
}

func (l *logHandler) with(op func(slog.Handler) slog.Handler) slog.Handler {
	return &logHandler{base: l.base, store: l.store, ops: append(slices.Clip(l.ops), op), built: &builtHandler{}}
}

func (l *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return l.with(func(h slog.Handler) slog.Handler { return h.WithAttrs(as) })
}

func (l *logHandler) WithGroup(name string) slog.Handler {
	return l.with(func(h slog.Handler) slog.Handler { return h.WithGroup(name) })
}
