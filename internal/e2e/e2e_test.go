package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestKeysYAML(t *testing.T) {
	got := KeysYAML(
		Key{ID: "a", Tenant: "acme", Roles: []string{"agent", "reviewer"}, Secret: "s1"},
		Key{ID: "n", Tenant: "acme", Secret: "s2"})
	want := "keys:\n" +
		"  - id: a\n    tenant: acme\n    key_sha256: " + sha256Hex("s1") + "\n    roles: [agent, reviewer]\n" +
		"  - id: n\n    tenant: acme\n    key_sha256: " + sha256Hex("s2") + "\n    roles: []\n"
	if got != want {
		t.Errorf("KeysYAML:\n%s\nwant:\n%s", got, want)
	}
	if sha256Hex("abc") != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("sha256Hex(abc) = %s", sha256Hex("abc"))
	}
	if s := NewSecret("p_"); !strings.HasPrefix(s, "p_") || len(s) != 2+48 || s == NewSecret("p_") {
		t.Errorf("NewSecret: %q", s)
	}
}

func TestText(t *testing.T) {
	log := "a req-1\nb\nc req-2\nd req-1\n"
	if got := Grep(log, 2, "req-1", "req-2"); got != "c req-2\nd req-1" {
		t.Errorf("Grep: %q", got)
	}
	if got := Grep(log, 5, ""); got != "" {
		t.Errorf(`Grep of "": %q`, got)
	}
	if got := LastLines(log, 2); got != "c req-2\nd req-1" {
		t.Errorf("LastLines: %q", got)
	}
	for p, want := range map[string]bool{"a/b.txt": true, "": false, "/a": false, "a//b": false, "a/./b": false, "../a": false, "a/..": false} {
		if CleanRelPath(p) != want {
			t.Errorf("CleanRelPath(%q) = %v", p, !want)
		}
	}
}

func TestClientRetries429(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" || r.Header.Get("X-Request-Id") != "id-1" || r.Header.Get("X-Drop") != "" {
			http.Error(w, "headers: "+r.Header.Get("Authorization")+" "+r.Header.Get("X-Request-Id"), http.StatusBadRequest)
			return
		}
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte("done"))
	}))
	defer srv.Close()
	c := Client{URL: srv.URL, Key: "k", Retries429: 1}
	req := Request{Method: http.MethodGet, Path: "/x", ID: "id-1", Header: map[string]string{"X-Drop": ""}}
	res, err := c.Do(context.Background(), req)
	if err != nil || res.Status != http.StatusOK || string(res.Body) != "done" || res.Tries != 2 {
		t.Fatalf("with a retry: %v %+v", err, res)
	}
	calls.Store(0)
	c.Retries429 = 0
	if res, err := c.Do(context.Background(), req); err != nil || res.Status != http.StatusTooManyRequests || res.Tries != 1 {
		t.Fatalf("without retries: %v %+v", err, res)
	}
}

func TestGateAndRepeat(t *testing.T) {
	g := NewGate(1)
	if err := g.Enter(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g.Enter(ctx); err == nil {
		t.Fatal("a full gate let a second request in")
	}
	g.Leave()
	if err := g.Enter(context.Background()); err != nil {
		t.Fatal(err)
	}

	var n atomic.Int32
	stop := Repeat(time.Millisecond, func() { n.Add(1) })
	for n.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	stop()
	after := n.Load()
	stop()
	time.Sleep(10 * time.Millisecond)
	if n.Load() != after {
		t.Errorf("Repeat called f after stop: %d, then %d", after, n.Load())
	}

	var ids IDSet
	ids.Add("")
	ids.Add("a")
	if !ids.Has("a") || ids.Has("") || len(ids.Snapshot()) != 1 {
		t.Errorf("IDSet: %v", ids.Snapshot())
	}
}
