package security

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/e2e"
)

// The suite's server runs with these (harness_test.go).
const (
	slowBodyTimeout = 3 * time.Second
	maxOpenRequests = 16
)

// slowBody opens a connection that sends an authenticated POST /exec's
// headers, promising 1000 bytes of body, and one byte of it.
func slowBody(t *testing.T) net.Conn {
	t.Helper()
	u, _ := url.Parse(srv.URL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST /exec HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", u.Host, api.Key)
	return conn
}

// TestSlowBodyDoesNotHoldAConnection: a body that never arrives is cut
// at the body timeout with 408, and a tenant cannot hold more than its
// open-request cap with such bodies (issue 16, item 7: 95 s and counting,
// 200 such connections held).
func TestSlowBodyDoesNotHoldAConnection(t *testing.T) {
	conn := slowBody(t)
	start := time.Now()
	conn.SetReadDeadline(time.Now().Add(slowBodyTimeout + 10*time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("HOLE: no answer to a body that never arrives within %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "REQUEST_TIMEOUT") {
		t.Errorf("a body that never arrives: %d %s", resp.StatusCode, body)
	}
	if d := time.Since(start); d > slowBodyTimeout+5*time.Second {
		t.Errorf("HOLE: the connection was held %v, the body timeout is %v", d, slowBodyTimeout)
	}

	// The tenant's cap: with maxOpenRequests slow bodies open, the next
	// request of the tenant is refused at once; another request goes
	// through once they are gone.
	var held []net.Conn
	for range maxOpenRequests {
		held = append(held, slowBody(t))
	}
	over := e2e.Client{URL: srv.URL, Key: api.Key} // no 429 retries
	deadline := time.Now().Add(slowBodyTimeout)
	refused := false
	for time.Now().Before(deadline) {
		res, err := over.Do(context.Background(), e2e.Request{Method: http.MethodGet, Path: "/usage?tenant=escape", ID: "slow-body-cap"})
		if err == nil && res.Status == http.StatusTooManyRequests && strings.Contains(string(res.Body), "tenant.open_requests") {
			refused = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !refused {
		t.Errorf("HOLE: a tenant holding %d slow bodies open was not refused its next request", maxOpenRequests)
	}
	for _, c := range held {
		c.Close()
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		res, err := over.Do(context.Background(), e2e.Request{Method: http.MethodGet, Path: "/usage?tenant=escape", ID: "slow-body-after"})
		if err == nil && res.Status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the slow bodies closed, the tenant is still refused: %v %v", err, res)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
