package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
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
	if cfg.hooks == nil {
		cfg.hooks = &serveHooks{}
	}
	cfg.hooks.resolver, cfg.hooks.stop = resolver, stop
	cfg.hooks.listening = func(addr string) { listening <- addr }
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

// testServeConfig is what the in-process end-to-end tests run sandboxd
// with: the given address, data, profiles and keys, two run slots and a
// queue of four without a pool, the usual waits and an info log. Tests
// change what they need.
func testServeConfig(addr, dataDir, profilesDir, keysFile string) *serveConfig {
	return &serveConfig{
		addr: addr, dataDir: dataDir, profilesDir: profilesDir, keysFile: keysFile,
		maxRuns: 2, queue: 4,
		queueWait: 30 * time.Second, shutdownGrace: 5 * time.Second, maxBodyMB: 8, logLevel: "info",
		ctl:          controlFlags{idempotencyTTL: time.Hour, idempotencyWait: 10 * time.Second, asyncTTL: time.Hour},
		profilesPoll: time.Second,
	}
}

// copyShippedProfiles copies the repository's profile files (paths under
// profiles/) into the profiles dir dst.
func copyShippedProfiles(t *testing.T, dst string, files ...string) {
	t.Helper()
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join("../../profiles", f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dst, f), string(data))
	}
}
