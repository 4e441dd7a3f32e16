package reviewui

import (
	"context"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
)

// Register puts the page's routes on g, which must be the group of the
// Prefix without its trailing slash (e.Group("/ui")): /ui redirects to
// /ui/, and everything under /ui/ is the page's, answered with its
// security headers.
//
// The page is read with GET (and HEAD); sign-in, sign-out, holds,
// erasures and bundle downloads are POST.
// Any other path or method under /ui/ is the page's "no such page"
// (404), except that a path that is not clean (//, . or .. segments) is
// redirected to its clean form (307), and a path written with needless
// escapes (/ui/%61udit) is routed as its unescaped form.
func (h *Handler) Register(g *echo.Group) {
	// /ui: GET and HEAD are sent to /ui/ with a See Other, every other
	// method goes on to /ui/ with its body.
	g.Any("", h.toTree, h.secure)
	g.Match(read, "", func(c echo.Context) error { return redirect(c, Prefix) }, h.secure)
	// Every path under /ui/ answers every method: the ones it serves go
	// to its handler, the others to unrouted.
	page := func(p string, get, post echo.HandlerFunc) {
		g.Any(p, h.clean(h.unrouted), h.secure)
		if get != nil {
			g.Match(read, p, h.clean(get), h.secure)
		}
		if post != nil {
			g.POST(p, h.clean(post), h.secure)
		}
	}
	page("/", h.home, nil)
	page("/static/style.css", h.style, nil)
	page("/login", h.loginForm, h.login)
	page("/logout", nil, h.logout)
	page("/audit", h.signedIn(h.auditList), nil)
	page("/audit/:id", h.segment("id", h.signedIn(h.auditRecord)), nil)
	page("/captures/:id", h.signedIn(h.captureView), nil)
	page("/captures/:id/part", h.signedIn(h.capturePart), nil)
	page("/captures/:id/figure", h.signedIn(h.figure), nil)
	page("/captures/:id/hold", nil, h.signedIn(h.holdCapture))
	page("/captures/:id/erase", nil, h.signedIn(h.eraseCapture))
	page("/session", h.signedIn(h.sessionTimeline), nil)
	page("/bundle", nil, h.signedIn(h.bundleDownload))
	page("/*", nil, nil)
}

// read are the methods the page is read with.
var read = []string{http.MethodGet, http.MethodHead}

// secure sets the security headers every response of the page carries.
func (h *Handler) secure(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		hd := c.Response().Header()
		hd.Set("Content-Security-Policy", csp)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		hd.Set("Cross-Origin-Resource-Policy", "same-origin")
		hd.Set("Cache-Control", "no-store")
		return next(c)
	}
}

func redirect(c echo.Context, to string) error {
	http.Redirect(c.Response(), c.Request(), to, http.StatusSeeOther)
	return nil
}

// toTree sends a request for /ui on to /ui/, query and method kept.
func (h *Handler) toTree(c echo.Context) error {
	u := &url.URL{Path: Prefix, RawQuery: c.Request().URL.RawQuery}
	http.Redirect(c.Response(), c.Request(), u.String(), http.StatusTemporaryRedirect)
	return nil
}

// reroutedKey marks, in a request's context, a request that unrouted has
// routed again by its unescaped path.
type reroutedKey struct{}

func rerouted(r *http.Request) bool { return r.Context().Value(reroutedKey{}) != nil }

// clean redirects a request whose path is not clean to the clean path
// (307: the method and body are kept), and passes the others to next. A
// path that cleans to /ui goes to /ui/ unless it is read (see toTree).
func (h *Handler) clean(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		p := r.URL.EscapedPath()
		if rerouted(r) || cleanPath(p) == p {
			return next(c)
		}
		to := cleanPath(p)
		if to+"/" == Prefix && !slices.Contains(read, r.Method) {
			to = Prefix
		}
		u := &url.URL{Path: to, RawQuery: r.URL.RawQuery}
		http.Redirect(c.Response(), r, u.String(), http.StatusTemporaryRedirect)
		return nil
	}
}

// cleanPath is p without empty, . and .. segments; a trailing slash
// stays.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// unrouted answers what no route matches: a path with needless escapes is
// routed again by its unescaped segments (once), anything else is the
// "no such page" page.
func (h *Handler) unrouted(c echo.Context) error {
	r := c.Request()
	if p := unescapedPath(r); !rerouted(r) && p != echo.GetPath(r) {
		c.SetRequest(r.WithContext(context.WithValue(r.Context(), reroutedKey{}, true)))
		c.Echo().Router().Find(r.Method, p, c)
		return c.Handler()(c)
	}
	return h.fail(c, nil, http.StatusNotFound, "There is no such page.")
}

// unescapedPath is the request's path with each segment unescaped but for
// "%" and "/". The router matches the escaped path when there is one
// (URL.RawPath), so param unescapes what it matched.
func unescapedPath(r *http.Request) string {
	if r.URL.RawPath == "" {
		return r.URL.Path // the router matches Path itself
	}
	segs := strings.Split(r.URL.RawPath, "/")
	for i, s := range segs {
		if u, err := url.PathUnescape(s); err == nil {
			segs[i] = strings.NewReplacer("%", "%25", "/", "%2F").Replace(u)
		}
	}
	return strings.Join(segs, "/")
}

// segment sends a request whose path parameter name spans more than one
// segment to unrouted: a route's last parameter matches the rest of the
// path.
func (h *Handler) segment(name string, next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if strings.Contains(c.Param(name), "/") {
			return h.unrouted(c)
		}
		return next(c)
	}
}

// param returns path parameter name, unescaped.
func param(c echo.Context, name string) string {
	v := c.Param(name)
	if c.Request().URL.RawPath == "" {
		return v // matched in URL.Path, which is unescaped
	}
	if u, err := url.PathUnescape(v); err == nil {
		return u
	}
	return v
}
