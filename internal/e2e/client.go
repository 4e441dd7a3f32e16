package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// RequestTimeout bounds one HTTP request of a Client without an HTTP
// client of its own: the longest run of the profiles is 30 s, plus a
// container's start and teardown on a loaded machine.
const RequestTimeout = 90 * time.Second

var defaultHTTP = &http.Client{Timeout: RequestTimeout}

// Client sends raw requests to one sandboxd. The zero value of each field
// but URL is usable.
type Client struct {
	URL string // the server's base URL, http://127.0.0.1:PORT
	// Key is sent as "Authorization: Bearer Key" when it is not "".
	Key string
	// HTTP sends the requests; nil: a client with RequestTimeout.
	HTTP *http.Client
	// Retries429 is how often a request answered 429 is sent again, after
	// its Retry-After (taken as 1 to 5 s).
	Retries429 int
	// Gate, when not nil, caps the requests of the clients sharing it that
	// are in flight at once (retries included).
	Gate Gate
}

// Request is one raw request.
type Request struct {
	Method, Path string
	Body         []byte // nil: no body
	// Header is set after Authorization and X-Request-Id; a value of ""
	// removes the header.
	Header map[string]string
	ID     string // X-Request-Id, when not ""
}

// JSONHeader is the header of a request with a JSON body.
var JSONHeader = map[string]string{"Content-Type": "application/json"}

// Result is one HTTP exchange as the client saw it.
type Result struct {
	Method, Path string
	ReqBody      []byte
	Status       int // 0: no answer
	Header       http.Header
	Body         []byte
	Wall         time.Duration // of the last attempt
	Tries        int
}

// String describes the exchange for failure messages.
func (r *Result) String() string {
	return fmt.Sprintf("request: %s %s %s\nresponse: %d %s", r.Method, r.Path, Clip(r.ReqBody, 1500), r.Status, Clip(r.Body, 3000))
}

// Clip returns b as a string, cut after n bytes with a note of its length.
func Clip(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return fmt.Sprintf("%s…[%d bytes in all]", b[:n], len(b))
}

// JSON marshals v, which must marshal (a test's own request value).
func JSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("e2e.JSON: %v", err))
	}
	return b
}

// Do sends r and reads the whole answer. The Result is not nil when a
// request was sent, even with an error (then Status is 0 if no answer
// came).
func (c Client) Do(ctx context.Context, r Request) (*Result, error) {
	if c.Gate != nil {
		if err := c.Gate.Enter(ctx); err != nil {
			return nil, err
		}
		defer c.Gate.Leave()
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	res := &Result{Method: r.Method, Path: r.Path, ReqBody: r.Body}
	for attempt := 0; ; attempt++ {
		var body io.Reader
		if r.Body != nil {
			body = bytes.NewReader(r.Body)
		}
		req, err := http.NewRequestWithContext(ctx, r.Method, c.URL+r.Path, body)
		if err != nil {
			return nil, err
		}
		if c.Key != "" {
			req.Header.Set("Authorization", "Bearer "+c.Key)
		}
		if r.ID != "" {
			req.Header.Set("X-Request-Id", r.ID)
		}
		for k, v := range r.Header {
			if v == "" {
				req.Header.Del(k)
			} else {
				req.Header.Set(k, v)
			}
		}
		start := time.Now()
		resp, err := hc.Do(req)
		res.Tries = attempt + 1
		if err != nil {
			return res, err
		}
		res.Body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		res.Wall = time.Since(start)
		res.Status, res.Header = resp.StatusCode, resp.Header
		if err != nil || res.Status != http.StatusTooManyRequests || attempt >= c.Retries429 {
			return res, err
		}
		wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		select {
		case <-time.After(time.Duration(min(max(wait, 1), 5)) * time.Second):
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
}

// Get sends GET path without a body.
func (c Client) Get(ctx context.Context, path string) (*Result, error) {
	return c.Do(ctx, Request{Method: http.MethodGet, Path: path})
}

// Exec posts req to /exec as JSON with request id id.
func (c Client) Exec(ctx context.Context, req ExecRequest, id string) (*Result, error) {
	return c.Do(ctx, Request{Method: http.MethodPost, Path: "/exec", Body: JSON(req), Header: JSONHeader, ID: id})
}

// ExecOK runs req and requires a 200 with a run that ended "ok" and
// printed exactly stdout (a warm-up, a check that the service works).
func (c Client) ExecOK(ctx context.Context, req ExecRequest, id, stdout string) (*ExecResponse, *Result, error) {
	res, err := c.Exec(ctx, req, id)
	if err != nil {
		return nil, res, err
	}
	if res.Status != http.StatusOK {
		return nil, res, fmt.Errorf("POST /exec answered %d: %s", res.Status, res.Body)
	}
	var r ExecResponse
	if err := json.Unmarshal(res.Body, &r); err != nil {
		return nil, res, err
	}
	if r.Status != "ok" || r.Stdout != stdout {
		return &r, res, fmt.Errorf("run %s: status %q stdout %q stderr %q message %q", r.ID, r.Status, r.Stdout, r.Stderr, r.Message)
	}
	return &r, res, nil
}

// Readiness gets /readyz and decodes it.
func (c Client) Readiness(ctx context.Context) (*Result, *Readiness, error) {
	res, err := c.Get(ctx, "/readyz")
	if err != nil {
		return res, nil, err
	}
	var r Readiness
	if err := json.Unmarshal(res.Body, &r); err != nil {
		return res, nil, fmt.Errorf("the /readyz body (%d) is not JSON: %v: %s", res.Status, err, Clip(res.Body, 500))
	}
	return res, &r, nil
}

// Gate caps how many requests are in flight at once.
type Gate chan struct{}

// NewGate returns a Gate of n places.
func NewGate(n int) Gate { return make(Gate, n) }

// Enter takes a place, waiting for one until ctx ends.
func (g Gate) Enter(ctx context.Context) error {
	select {
	case g <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Leave gives back the place Enter took.
func (g Gate) Leave() { <-g }
