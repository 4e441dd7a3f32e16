package httpapi

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// slowRequest sends the headers of an authenticated POST /exec that
// promises 1000 bytes of body, and one byte of it.
func slowRequest(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST /exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", keyAgent)
	return conn
}

func TestSlowBodyIsCutAtTheBodyTimeout(t *testing.T) {
	f := newCtl(t, "", 0)
	f.srv = f.srv.with(t, func(c *Config) { c.BodyTimeout = 300 * time.Millisecond })
	hs := httptest.NewServer(f.srv.Handler())
	t.Cleanup(hs.Close)
	conn := slowRequest(t, hs.Listener.Addr().String())
	start := time.Now()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a trickled body: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"REQUEST_TIMEOUT"`) {
		t.Fatalf("trickled body: %d %s", resp.StatusCode, body)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the answer took %v, the body timeout is 300 ms", d)
	}
	// A body that arrives in time runs, and a run may outlast the timeout:
	// the deadline is lifted once the body is read.
	block := make(chan struct{})
	f.eng.mu.Lock()
	f.eng.block = block
	f.eng.mu.Unlock()
	time.AfterFunc(700*time.Millisecond, func() { close(block) })
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/exec", strings.NewReader(code1))
	req.Header.Set("Authorization", "Bearer "+keyAgent)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if b, _ := io.ReadAll(res.Body); res.StatusCode != 200 || !strings.Contains(string(b), `"status":"ok"`) {
		t.Fatalf("a run longer than the body timeout: %d %s", res.StatusCode, b)
	}
}

func TestOpenRequestsPerTenantAreCapped(t *testing.T) {
	f := newCtl(t, "", 0)
	f.srv = f.srv.with(t, func(c *Config) { c.MaxOpenRequests = 2; c.BodyTimeout = 10 * time.Second })
	hs := httptest.NewServer(f.srv.Handler())
	t.Cleanup(hs.Close) // after the slow connections close
	addr := hs.Listener.Addr().String()
	slowRequest(t, addr)
	slowRequest(t, addr)
	// Both slow requests are let in (key checks are slow under the race
	// detector), then a third is refused.
	deadline := time.Now().Add(30 * time.Second)
	for f.srv.open.count("acme") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the two slow requests did not get in: %d open", f.srv.open.count("acme"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := f.req(http.MethodGet, "/usage?tenant=acme", keyAgent, "")
	if r.code != http.StatusTooManyRequests || r.errCode() != "RATE_LIMITED" || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.raw), "tenant.open_requests") {
		t.Fatalf("a third request of a tenant holding two open: %d %s", r.code, r.raw)
	}
	// Another tenant is not affected.
	if r := f.req(http.MethodGet, "/usage?tenant=other", keyOther, ""); r.code != 200 {
		t.Fatalf("another tenant: %d %s", r.code, r.raw)
	}
}
