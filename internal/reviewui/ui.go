// Package reviewui is the review page: a server-rendered web page at /ui/ for
// investigators, served by sandboxd itself. A reviewer signs in with an API
// key (reviewer, security or admin role; agent keys are refused), searches
// the audit log, opens a record with its code, outputs, results and every
// egress decision, reads a fetch capture's returned text beside its raw
// source, follows a session as a trace (trace.go), sees figures as images
// the page re-encodes (figures.go), downloads evidence bundles (bundle.go)
// and, with the security or admin role, holds and erases captures
// (actions.go).
//
// The page is plain HTML from html/template and one CSS file, both
// embedded; it has no JavaScript. Every response carries a strict
// Content-Security-Policy (no script at all, styles only from the CSS
// file), X-Content-Type-Options: nosniff, Referrer-Policy: no-referrer and
// Cache-Control: no-store, and everything shown that came from a record or
// a capture is escaped by html/template: captured pages are shown as their
// source text, never rendered.
//
// Sign-in: the key is posted in a form (never in a URL) and exchanged for
// a random session token in an HttpOnly, SameSite=Strict cookie; the
// server maps the token to the key's identity (id, tenant, roles) and
// fingerprint (the sha256 the keyring holds), never to the key, until the
// session expires or signs out. Every request checks the session's key
// against the keyring as it is now (a keys reload replaces it in place):
// a key removed or rotated, moved to another tenant or no longer holding
// the reviewer, security or admin role ends its sessions, and the roles
// that decide what the page shows are the key's current ones. Sign-in and
// sign-out are POST forms that carry a CSRF token (sign-in: an HMAC-signed
// double-submit cookie; sign-out, holds, erasures and bundle downloads: the
// session's own token), and all check
// that the request comes from this origin (Sec-Fetch-Site, Origin,
// Referer).
//
// Tenant scoping is the JSON API's (auth.Key.CanSee and Scope): reviewer
// and security keys see their own tenant's records and captures, admin
// keys every tenant's.
//
// The page's routes go on the API's echo router: New, then Register on the
// group of /ui.
package reviewui

import (
	"cmp"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/style.css
var staticFS embed.FS

// Headers set on every response of the review page.
const (
	// csp allows nothing but the page's own style sheet and images, and
	// forms that post to the page itself; no script of any origin runs.
	csp = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
	// Prefix is the path the page is served under.
	Prefix = "/ui/"
)

// Cookie names.
const (
	sessionCookie = "sandboxd_ui_session"
	loginCookie   = "sandboxd_ui_login"
)

// Config configures the review page.
type Config struct {
	// Audit is the audit log to search (required).
	Audit audit.Log
	// Captures holds the captures records name; nil shows none.
	Captures capture.Store
	// Keys authenticates the keys reviewers sign in with (required).
	Keys *auth.Keyring
	// Log receives sign-ins, refusals and errors; nil discards.
	Log *slog.Logger
	// SessionTTL is how long a sign-in lasts at most (default 8 h).
	SessionTTL time.Duration
	// IdleTimeout ends a session unused for this long (default 1 h).
	IdleTimeout time.Duration
	// MaxSessions caps the sessions held at once (default 10,000); past it
	// the oldest is ended.
	MaxSessions int
	// Origins are the origins (scheme://host[:port]) the page is reached
	// at, for the CSRF origin check. Empty: the request's own Host, with
	// either scheme. Set it behind a proxy that rewrites Host.
	Origins []string
	// SecureCookie marks the cookies Secure even when the request did not
	// arrive over TLS (behind a TLS-terminating proxy). Requests over TLS,
	// or with X-Forwarded-Proto: https, always get Secure cookies (a forged
	// header can only keep the cookie from being sent over plain HTTP).
	SecureCookie bool
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// Handler serves the review page.
type Handler struct {
	cfg      Config
	log      *slog.Logger
	pages    map[string]*template.Template
	css      []byte
	secret   [32]byte // signs the sign-in form's CSRF token
	sessions *sessionStore
}

// New returns the review page's handler; Register puts its routes on the
// router.
func New(cfg Config) *Handler {
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 8 * time.Hour
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = time.Hour
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 10000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{cfg: cfg, log: cfg.Log.With("component", "ui"), pages: map[string]*template.Template{}}
	if _, err := rand.Read(h.secret[:]); err != nil {
		panic("ui: no randomness: " + err.Error())
	}
	h.sessions = newSessionStore(cfg.MaxSessions)
	css, err := fs.ReadFile(staticFS, "static/style.css")
	if err != nil {
		panic("ui: " + err.Error())
	}
	h.css = css
	for _, page := range []string{"login", "audit", "record", "capture", "session", "error"} {
		h.pages[page] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS,
			"templates/layout.html", "templates/parts.html", "templates/"+page+".html"))
	}
	return h
}

func (h *Handler) style(c echo.Context) error {
	w := c.Response()
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(h.css)
	return nil
}

func (h *Handler) home(c echo.Context) error {
	if h.session(c.Request()) != nil {
		return redirect(c, Prefix+"audit")
	}
	return redirect(c, Prefix+"login")
}

// page is what every template gets; Data is the page's own.
type page struct {
	Title string
	// Session is nil on the sign-in page and on errors before sign-in.
	Session *session
	Data    any
}

// render writes a page with status.
func (h *Handler) render(c echo.Context, status int, name string, p page) error {
	w := c.Response()
	t := h.pages[name]
	var b strings.Builder
	if err := t.Execute(&b, p); err != nil {
		h.log.Error("rendering a page failed", "page", name, "path", c.Request().URL.Path, "err", err)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = fmt.Fprintln(w, "the page could not be rendered; the log says why")
		return nil
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, b.String())
	return nil
}

// fail shows an error page.
func (h *Handler) fail(c echo.Context, s *session, status int, msg string) error {
	if s == nil {
		s = h.session(c.Request())
	}
	return h.render(c, status, "error", page{Title: http.StatusText(status), Session: s, Data: errorData{Status: status, Message: msg}})
}

type errorData struct {
	Status  int
	Message string
}

// ---- sessions ----

// session is one signed-in reviewer. It holds the key's identity and
// fingerprint, never the key.
type session struct {
	// key is, in the store, the identity the key had at sign-in; in the
	// copy a request gets, the key as the keyring holds it now. Its
	// CanSee and Scope are the page's tenant checks.
	key *auth.Key
	// fp is the key's fingerprint, to find it in the keyring again.
	fp auth.Fingerprint
	// CSRF is the token the sign-out form carries.
	CSRF     string
	created  time.Time
	expires  time.Time
	lastSeen time.Time
}

// KeyID is the session's key's id.
func (s *session) KeyID() string { return s.key.ID }

// Tenant is the session's key's tenant.
func (s *session) Tenant() string { return s.key.Tenant }

// Admin reports whether the session's key sees every tenant.
func (s *session) Admin() bool { return s.key.Has(auth.RoleAdmin) }

// sessionStore maps the sha256 of session tokens to sessions: the store
// does not hold the tokens themselves.
type sessionStore struct {
	mu  sync.Mutex
	max int
	m   map[[32]byte]*session
}

func newSessionStore(max int) *sessionStore {
	return &sessionStore{max: max, m: map[[32]byte]*session{}}
}

func tokenHash(token string) [32]byte { return sha256.Sum256([]byte(token)) }

func (st *sessionStore) add(token string, s *session, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.m) >= st.max {
		var oldest [32]byte
		var oldestAt time.Time
		for k, v := range st.m {
			if !v.expires.After(now) {
				delete(st.m, k)
				continue
			}
			if oldestAt.IsZero() || v.created.Before(oldestAt) {
				oldest, oldestAt = k, v.created
			}
		}
		if len(st.m) >= st.max {
			delete(st.m, oldest)
		}
	}
	st.m[tokenHash(token)] = s
}

// get returns a copy of the live session of token and marks it used, or
// nil.
func (st *sessionStore) get(token string, now time.Time, idle time.Duration) *session {
	st.mu.Lock()
	defer st.mu.Unlock()
	k := tokenHash(token)
	s := st.m[k]
	if s == nil {
		return nil
	}
	if !now.Before(s.expires) || now.Sub(s.lastSeen) >= idle {
		delete(st.m, k)
		return nil
	}
	s.lastSeen = now
	cp := *s
	return &cp
}

func (st *sessionStore) remove(token string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.m, tokenHash(token))
}

// randomToken returns 32 random bytes in unpadded base64url.
func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // does not fail: the runtime aborts if the system source is broken
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// session returns the request's live session, with its key as the
// keyring holds it now, or nil. A session whose key the keyring no longer
// has as it was signed in with (see currentKey) is ended.
func (h *Handler) session(r *http.Request) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" || len(c.Value) > 100 {
		return nil
	}
	s := h.sessions.get(c.Value, h.cfg.Now(), h.cfg.IdleTimeout)
	if s == nil {
		return nil
	}
	key, why := h.currentKey(s)
	if key == nil {
		h.sessions.remove(c.Value)
		h.log.Warn("review session ended: "+why, "key_id", s.key.ID, "tenant", s.key.Tenant, "remote", r.RemoteAddr)
		return nil
	}
	s.key = key
	return s
}

// currentKey returns the keyring's key of session s, or nil and why the
// session may not go on: the key was removed or rotated, its id or tenant
// is not the one it signed in with, or it lost the reviewer role.
func (h *Handler) currentKey(s *session) (*auth.Key, string) {
	key, ok := h.cfg.Keys.Lookup(s.fp)
	switch {
	case !ok:
		return nil, "its key was removed or rotated"
	case key.ID != s.key.ID:
		return nil, fmt.Sprintf("its key is now %s", key.ID)
	case key.Tenant != s.key.Tenant:
		return nil, fmt.Sprintf("its key moved to tenant %s", key.Tenant)
	case !key.Has(auth.RoleReviewer):
		return nil, "its key no longer has the reviewer, security or admin role"
	}
	return key, ""
}

// signedIn sends requests without a live session to the sign-in page.
func (h *Handler) signedIn(next func(echo.Context, *session) error) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		s := h.session(r)
		if s == nil {
			// Back to this page after the sign-in: a link from elsewhere
			// (a ticket) arrives without the SameSite=Strict cookie.
			return redirect(c, Prefix+"login?"+url.Values{"next": {r.URL.RequestURI()}}.Encode())
		}
		return next(c, s)
	}
}

func (h *Handler) cookie(r *http.Request, name, value string, maxAge time.Duration) *http.Cookie {
	c := &http.Cookie{Name: name, Value: value, Path: Prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || h.cfg.SecureCookie || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")}
	if maxAge > 0 {
		c.MaxAge = int(maxAge / time.Second)
		c.Expires = h.cfg.Now().Add(maxAge).UTC()
	} else {
		c.MaxAge = -1
	}
	return c
}

// ---- CSRF ----

// loginToken is the sign-in form's token: an HMAC of the nonce in the
// sign-in cookie, so that a page that can plant a cookie still cannot
// forge the form field.
func (h *Handler) loginToken(nonce string) string {
	m := hmac.New(sha256.New, h.secret[:])
	m.Write([]byte("ui-login\x00" + nonce))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkOrigin refuses requests that a browser says come from another
// site. With Referrer-Policy: no-referrer, browsers send "Origin: null"
// on same-origin form posts (the Fetch standard's rule for that policy),
// so "null" passes only with Sec-Fetch-Site: same-origin, which browsers
// send whatever the referrer policy. A request with none of these headers
// (not a current browser) is refused.
func (h *Handler) checkOrigin(r *http.Request) error {
	site := r.Header.Get("Sec-Fetch-Site")
	if site != "" && site != "same-origin" {
		return fmt.Errorf("the Sec-Fetch-Site header is %q, not same-origin", site)
	}
	if o := r.Header.Get("Origin"); o != "" {
		if o == "null" {
			if site == "same-origin" {
				return nil
			}
			return errors.New("the Origin header is null and Sec-Fetch-Site is not same-origin")
		}
		if !h.allowedOrigin(r, o) {
			return fmt.Errorf("the Origin header %q is not this page's", o)
		}
		return nil
	}
	if ref := r.Header.Get("Referer"); ref != "" {
		u, err := url.Parse(ref)
		if err != nil || !h.allowedOrigin(r, u.Scheme+"://"+u.Host) {
			return errors.New("the Referer is not this page")
		}
		return nil
	}
	if site == "same-origin" {
		return nil
	}
	return errors.New("the request has no Origin, Referer or Sec-Fetch-Site header")
}

func (h *Handler) allowedOrigin(r *http.Request, origin string) bool {
	if len(h.cfg.Origins) > 0 {
		for _, o := range h.cfg.Origins {
			if strings.EqualFold(strings.TrimSuffix(o, "/"), origin) {
				return true
			}
		}
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

// ---- sign-in and sign-out ----

type loginData struct {
	CSRF  string
	Next  string
	Error string
}

// safeNext returns next when it is a path of this page, or "".
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.ContainsAny(next, "\\\r\n\t") || len(next) > 2000 {
		return ""
	}
	if u, err := url.Parse(next); err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return ""
	}
	return next
}

func (h *Handler) loginForm(c echo.Context) error {
	r := c.Request()
	if h.session(r) != nil {
		return redirect(c, cmp.Or(safeNext(r.URL.Query().Get("next")), Prefix+"audit"))
	}
	return h.showLogin(c, http.StatusOK, "")
}

// showLogin renders the sign-in form with a fresh CSRF nonce and token.
func (h *Handler) showLogin(c echo.Context, status int, msg string) error {
	r := c.Request()
	nonce := randomToken()
	http.SetCookie(c.Response(), h.cookie(r, loginCookie, nonce, time.Hour))
	next := r.URL.Query().Get("next")
	if r.Method == http.MethodPost {
		next = r.PostForm.Get("next")
	}
	return h.render(c, status, "login", page{Title: "Sign in", Data: loginData{CSRF: h.loginToken(nonce), Next: safeNext(next), Error: msg}})
}

const maxFormBytes = 16 << 10

func (h *Handler) login(c echo.Context) error {
	w, r := c.Response(), c.Request()
	log := h.log.With("remote", r.RemoteAddr)
	if err := h.checkOrigin(r); err != nil {
		log.Warn("sign-in refused: cross-origin request", "reason", err.Error())
		return h.fail(c, nil, http.StatusForbidden, "The sign-in was refused: it did not come from this page. Open the sign-in page and try again.")
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		return h.showLogin(c, http.StatusBadRequest, "The form could not be read.")
	}
	lc, err := r.Cookie(loginCookie)
	tok := r.PostForm.Get("csrf")
	if err != nil || lc.Value == "" || tok == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(h.loginToken(lc.Value))) != 1 {
		log.Warn("sign-in refused: missing or wrong CSRF token")
		return h.showLogin(c, http.StatusForbidden, "The sign-in form expired or did not come from this page; it has been renewed: sign in again.")
	}
	bearer := strings.TrimSpace(r.PostForm.Get("key"))
	key, ok := h.cfg.Keys.Authenticate(bearer)
	if !ok {
		log.Warn("sign-in refused: the key is not valid")
		return h.showLogin(c, http.StatusUnauthorized, "That key is not valid.")
	}
	if !key.Has(auth.RoleReviewer) {
		log.Warn("sign-in refused: the key lacks the reviewer role", "key_id", key.ID, "tenant", key.Tenant)
		return h.showLogin(c, http.StatusForbidden, fmt.Sprintf("Key %s may not sign in here: only keys with the reviewer, security or admin role may (agents never read the audit log or captures).", key.ID))
	}
	now := h.cfg.Now()
	token := randomToken()
	// The keyring's *Key is shared and never modified: the session keeps
	// it, and the key's fingerprint to find it again after a reload.
	s := &session{key: key, fp: auth.FingerprintOf(bearer), CSRF: randomToken(), created: now, expires: now.Add(h.cfg.SessionTTL), lastSeen: now}
	// A session cookie that came with the request (an earlier sign-in on
	// this browser) is ended: one browser, one session.
	if old, err := r.Cookie(sessionCookie); err == nil {
		h.sessions.remove(old.Value)
	}
	h.sessions.add(token, s, now)
	http.SetCookie(w, h.cookie(r, sessionCookie, token, h.cfg.SessionTTL))
	http.SetCookie(w, h.cookie(r, loginCookie, "", 0))
	log.Info("reviewer signed in", "key_id", key.ID, "tenant", key.Tenant)
	return redirect(c, cmp.Or(safeNext(r.PostForm.Get("next")), Prefix+"audit"))
}

func (h *Handler) logout(c echo.Context) error {
	w, r := c.Response(), c.Request()
	if err := h.checkOrigin(r); err != nil {
		h.log.Warn("sign-out refused: cross-origin request", "remote", r.RemoteAddr, "reason", err.Error())
		return h.fail(c, nil, http.StatusForbidden, "The sign-out was refused: it did not come from this page.")
	}
	sc, err := r.Cookie(sessionCookie)
	s := h.session(r)
	if err != nil || s == nil {
		return redirect(c, Prefix+"login")
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil || subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(s.CSRF)) != 1 {
		h.log.Warn("sign-out refused: missing or wrong CSRF token", "remote", r.RemoteAddr, "key_id", s.KeyID())
		return h.fail(c, s, http.StatusForbidden, "The sign-out was refused: its form did not come from this page.")
	}
	h.sessions.remove(sc.Value)
	http.SetCookie(w, h.cookie(r, sessionCookie, "", 0))
	h.log.Info("reviewer signed out", "key_id", s.KeyID(), "tenant", s.Tenant())
	return redirect(c, Prefix+"login")
}
