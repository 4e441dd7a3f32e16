package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/control/budget"
)

// A request's body must arrive within the body timeout (Config.BodyTimeout,
// 30 s by default): a client that sends headers and then trickles its body,
// or never sends it, holds a connection for that long at most. The read
// deadline is the connection's, set before the handler runs and lifted
// once the body has been read to its end, so that it bounds neither the
// run nor the answer; a body that is never read (a refused request) is
// still bounded while the server discards it.

// timedBody is a request body under the read deadline.
type timedBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	done     atomic.Bool
	timedOut atomic.Bool
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !b.done.Swap(true) {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			b.timedOut.Store(true)
		} else {
			_ = b.rc.SetReadDeadline(time.Time{}) // read to its end: lift it
		}
	}
	return n, err
}

// bodyDeadline bounds the time a request's body may take to arrive; a body
// that did not arrive in time is a 408 REQUEST_TIMEOUT, whatever the
// handler made of the cut body.
func (s *Server) bodyDeadline(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.Body == nil || req.Body == http.NoBody || req.ContentLength == 0 {
			return next(c)
		}
		rc := http.NewResponseController(c.Response().Writer)
		if err := rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout)); err != nil {
			return next(c) // a connection without deadlines (tests' recorders)
		}
		b := &timedBody{ReadCloser: req.Body, rc: rc}
		req.Body = b
		err := next(c)
		if b.timedOut.Load() {
			reqOf(c).log.Warn("request body timed out", "content_length", req.ContentLength, "body_timeout", s.cfg.BodyTimeout.String())
			return &api.Error{Status: http.StatusRequestTimeout, Code: api.CodeRequestTimeout,
				Message: fmt.Sprintf("the request body did not arrive within %s; send the whole body at once", s.cfg.BodyTimeout)}
		}
		return err
	}
}

// openRequests caps the requests each tenant has open at once (a slow
// client holds one open while it trickles its body).
type openRequests struct {
	limit int
	mu    sync.Mutex
	open  map[string]int
}

// count is how many requests tenant has open.
func (o *openRequests) count(tenant string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.open[tenant]
}

// enter takes one of tenant's open requests; the returned func gives it
// back. It refuses when the tenant has limit open already.
func (o *openRequests) enter(tenant string) (func(), *api.Error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.limit > 0 && o.open[tenant] >= o.limit {
		limit := float64(o.limit)
		return nil, &api.Error{Status: http.StatusTooManyRequests, Code: api.CodeRateLimited, Budget: budget.TenantOpenRequests, Limit: &limit, RetryAfter: 1,
			Message: fmt.Sprintf("tenant %s has %d requests open already, the most a tenant may hold; finish or close some first", tenant, o.limit)}
	}
	o.open[tenant]++
	return func() {
		o.mu.Lock()
		if o.open[tenant]--; o.open[tenant] <= 0 {
			delete(o.open, tenant)
		}
		o.mu.Unlock()
	}, nil
}
