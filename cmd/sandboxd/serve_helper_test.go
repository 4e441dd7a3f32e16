package main

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/logbuf"
)

// runServe runs sandboxd in-process (serveWith) with cfg, its JSON log in
// logs and the resolver for egress decisions, and returns the API's base
// URL once it listens. At the end of the test it stops it (as SIGTERM
// would), requires a clean exit, runs afterStop (teardown checks) and, if
// the test failed, prints the log's tail.
func runServe(t *testing.T, cfg *serveConfig, logs *logbuf.Buffer, resolver egress.Resolver, afterStop func()) string {
	t.Helper()
	listening := make(chan string, 1)
	stop := make(chan struct{})
	cfg.hooks = &serveHooks{resolver: resolver, listening: func(addr string) { listening <- addr }, stop: stop}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	served := make(chan error, 1)
	go func() { served <- serveWith(cfg, log, io.Discard) }()
	t.Cleanup(func() {
		close(stop)
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("serveWith: %v", err)
			}
		case <-time.After(90 * time.Second):
			t.Errorf("sandboxd did not stop within 90 s")
		}
		if afterStop != nil {
			afterStop()
		}
		if t.Failed() {
			t.Logf("sandboxd log:\n%s", logs.Tail(60))
		}
	})
	select {
	case addr := <-listening:
		return "http://" + addr
	case err := <-served:
		t.Fatalf("serveWith returned before listening: %v\n%s", err, logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("sandboxd did not listen within 60 s\n%s", logs.String())
	}
	return ""
}
