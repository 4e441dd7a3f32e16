// Command sandboxd runs untrusted Python for AI agents in fresh, locked-down
// containers.
//
//	sandboxd serve [--addr 127.0.0.1:8080] [--data-dir ./data] [--profiles-dir ./profiles] [--keys-file FILE] [--secrets-file FILE]
//	sandboxd profiles check DIR
//	sandboxd profiles evaluate [--json] [--no-resolve] DIR NAME URL [METHOD]
//	sandboxd version
package main

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/browse"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/egress/approval"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/control/admit"
	"github.com/sandboxd/sandboxd/internal/execflow"
	"github.com/sandboxd/sandboxd/internal/fetchflow"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
	"github.com/sandboxd/sandboxd/internal/httpapi"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/runner"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage:
  sandboxd serve [flags]          run the HTTP service (sandboxd serve -h lists the flags)
  sandboxd profiles check DIR     validate every profile under DIR; every problem of every file, as FILE:LINE:COLUMN: problem
  sandboxd profiles evaluate DIR NAME URL [METHOD]   the decision egress profile NAME (a draft too) makes on a request, without connecting
  sandboxd seccomp check [FILE]   compile a seccomp profile for this host (default profiles/seccomp/default.json)
  sandboxd audit verify --data-dir DIR   walk the audit log's hash chain; exit 1 at the first break
  sandboxd mcp [--url URL]        serve the agent tools over MCP on stdio (key: SANDBOXD_KEY or --key-file)
  sandboxd version                print the version
Every command takes -h or --help.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "seccomp":
		return seccompCmd(args[1:], stdout, stderr)
	case "mcp":
		return mcpCmd(args[1:], os.Stdin, nopWriteCloser{stdout}, stderr) // mcp.go
	case "audit":
		return auditCmd(args[1:], stdout, stderr)
	case "profiles":
		return profilesCmd(args[1:], stdout, stderr, nil) // profiles.go
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "sandboxd %s %s %s/%s\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "sandboxd: unknown command %q\n%s", args[0], usage)
	return 2
}

type serveConfig struct {
	addr, dataDir, profilesDir, keysFile string
	maxRuns, queue, poolSize, poolMax    int
	cellHosts                            int
	queueWait, shutdownGrace             time.Duration
	maxBodyMB                            int64
	bodyTimeout                          time.Duration
	maxOpenRequests                      int
	logLevel                             string
	ctl                                  controlFlags // control.go
	// profilesPoll is how often the profiles dir is checked for changes
	// (0: only on SIGHUP); egressPort the egress proxy's port on the
	// egress network's gateway (0: any free port).
	profilesPoll time.Duration
	egressPort   int
	// imageBuilds is where image builds running beside sandboxd report
	// their progress ("" for <data-dir>/image-builds).
	imageBuilds string
	// browserImage is the image of browser sandboxes (POST /fetch with
	// render: true, PDFs).
	browserImage string
	// captures say where captures go (captures.go); retentionEvery is
	// how often expired captures are swept.
	captures       captureFlags
	retentionEvery time.Duration
	// anchorEvery is how often the audit head is logged (0: only at
	// shutdown).
	anchorEvery time.Duration
	// secretsFile declares the secrets the egress proxy injects.
	secretsFile string
	// hooks are for tests; nil in the real command.
	hooks *serveHooks
}

// serveHooks let tests run serveWith in-process.
type serveHooks struct {
	// resolver resolves names for the egress proxy instead of the system.
	resolver egress.Resolver
	// listening is called with the API's address once it listens.
	listening func(addr string)
	// stop, when closed, shuts the server down as SIGTERM does.
	stop <-chan struct{}
	// rootCAs verifies the TLS of upstreams the egress proxy reaches
	// (nil: the system roots).
	rootCAs *x509.CertPool
}

// envDefault returns the value of SANDBOXD_<NAME> or def.
func envDefault(name, def string) string {
	if v, ok := os.LookupEnv("SANDBOXD_" + name); ok {
		return v
	}
	return def
}

// envErrs collects environment variables that do not parse, so that serve
// refuses them instead of silently using the default.
var envErrs []string

// envParsed returns SANDBOXD_<NAME> parsed with parse, or def when it is
// unset or empty. A value that does not parse is recorded in envErrs,
// saying that it is not what, and def is used.
func envParsed[T any](name string, def T, parse func(string) (T, error), what string) T {
	v := envDefault(name, "")
	if v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil {
		envErrs = append(envErrs, fmt.Sprintf("SANDBOXD_%s=%q is not %s", name, v, what))
		return def
	}
	return x
}

// envInt is envParsed for a whole number.
func envInt(name string, def int) int {
	return envParsed(name, def, strconv.Atoi, "a whole number")
}

// envDuration is envParsed for a duration.
func envDuration(name string, def time.Duration) time.Duration {
	return envParsed(name, def, time.ParseDuration, "a duration such as 30s")
}

// perProfile is a gauge of count i of the per-profile pairs stats
// returns (the pool's ready and starting sandboxes, the cell hosts' busy
// and idle ones), read at each scrape.
func perProfile(stats func() map[string][2]int, i int) func() map[string]float64 {
	return func() map[string]float64 {
		out := map[string]float64{}
		for profile, n := range stats() {
			out[profile] = float64(n[i])
		}
		return out
	}
}

func parseServe(args []string, stderr io.Writer) (*serveConfig, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &serveConfig{}
	envErrs = nil
	fs.StringVar(&c.addr, "addr", envDefault("ADDR", "127.0.0.1:8080"), "listen address (env SANDBOXD_ADDR)")
	fs.StringVar(&c.dataDir, "data-dir", envDefault("DATA_DIR", "./data"), "data directory (env SANDBOXD_DATA_DIR)")
	fs.StringVar(&c.profilesDir, "profiles-dir", envDefault("PROFILES_DIR", "./profiles"), "profiles directory (env SANDBOXD_PROFILES_DIR)")
	fs.StringVar(&c.imageBuilds, "image-builds-dir", envDefault("IMAGE_BUILDS_DIR", ""), "where image builds running beside sandboxd report their progress, which the answers of profiles whose image is not built yet repeat (default DATA_DIR/image-builds; env SANDBOXD_IMAGE_BUILDS_DIR)")
	fs.StringVar(&c.keysFile, "keys-file", envDefault("KEYS_FILE", ""), "API keys file; without it a development key is generated and printed once (env SANDBOXD_KEYS_FILE)")
	fs.StringVar(&c.secretsFile, "secrets-file", envDefault("SECRETS_FILE", ""), "secrets file: credentials runs may use by name, which the egress proxy injects and the code never holds; reloaded like the keys file (env SANDBOXD_SECRETS_FILE)")
	fs.IntVar(&c.maxRuns, "max-runs", envInt("MAX_RUNS", 2*runtime.NumCPU()), "runs at once (env SANDBOXD_MAX_RUNS)")
	fs.IntVar(&c.queue, "queue", envInt("QUEUE", 4*runtime.NumCPU()), "requests that may wait for a run slot; past that, 429 BUSY (env SANDBOXD_QUEUE)")
	fs.DurationVar(&c.queueWait, "queue-wait", envDuration("QUEUE_WAIT", 30*time.Second), "longest wait for a run slot (env SANDBOXD_QUEUE_WAIT)")
	fs.DurationVar(&c.shutdownGrace, "shutdown-grace", envDuration("SHUTDOWN_GRACE", 15*time.Second), "on SIGTERM, how long running jobs may finish before they are killed (env SANDBOXD_SHUTDOWN_GRACE)")
	fs.Int64Var(&c.maxBodyMB, "max-body-mb", int64(envInt("MAX_BODY_MB", 32)), "largest request body in MiB (env SANDBOXD_MAX_BODY_MB)")
	fs.DurationVar(&c.bodyTimeout, "body-timeout", envDuration("BODY_TIMEOUT", 30*time.Second), "longest time a request body may take to arrive; a slower one is refused with 408 (env SANDBOXD_BODY_TIMEOUT)")
	fs.IntVar(&c.maxOpenRequests, "max-open-requests", envInt("MAX_OPEN_REQUESTS", 64), "most requests one tenant may hold open at once; past it, 429 RATE_LIMITED (env SANDBOXD_MAX_OPEN_REQUESTS)")
	fs.IntVar(&c.poolSize, "pool-size", envInt("POOL_SIZE", 2), "started sandboxes kept ready per exec profile; 0 turns the warm pool off (env SANDBOXD_POOL_SIZE)")
	fs.IntVar(&c.cellHosts, "cell-hosts", envInt("CELL_HOSTS", 64), "most cell hosts (isolation: cell) of all tenants together; each profile's cell.hosts bounds one tenant's (env SANDBOXD_CELL_HOSTS)")
	fs.IntVar(&c.poolMax, "pool-max", envInt("POOL_MAX", 8), "most started sandboxes kept ready per exec profile when traffic needs more than --pool-size (env SANDBOXD_POOL_MAX)")
	fs.StringVar(&c.logLevel, "log-level", envDefault("LOG_LEVEL", "info"), "debug, info, warn or error (env SANDBOXD_LOG_LEVEL)")
	fs.DurationVar(&c.profilesPoll, "profiles-poll", envDuration("PROFILES_POLL", 3*time.Second), "how often the profiles dir is checked for changed files, which are then reloaded (SIGHUP reloads at once); 0 turns polling off (env SANDBOXD_PROFILES_POLL)")
	fs.IntVar(&c.egressPort, "egress-port", envInt("EGRESS_PORT", 3128), "port of the egress proxy on the egress network's gateway, for exec profiles with network egress; 0 picks a free one (env SANDBOXD_EGRESS_PORT)")
	fs.StringVar(&c.browserImage, "browser-image", envDefault("BROWSER_IMAGE", fetchflow.DefaultBrowserImage), "the image of browser sandboxes, for POST /fetch with render: true and PDFs (make image builds it) (env SANDBOXD_BROWSER_IMAGE)")
	addCaptureFlags(fs, &c.captures)
	fs.DurationVar(&c.anchorEvery, "audit-anchor-interval", envDuration("AUDIT_ANCHOR_INTERVAL", time.Minute), "how often the audit log's head is logged as \"audit head\" (seq, hash, anchor) when it moved, to keep outside the log for `sandboxd audit verify --anchor`; 0: only at shutdown (env SANDBOXD_AUDIT_ANCHOR_INTERVAL)")
	fs.DurationVar(&c.retentionEvery, "retention-interval", envDuration("RETENTION_INTERVAL", time.Hour), "how often captures past their profile's capture_retention_days are deleted (each deletion is audited) (env SANDBOXD_RETENTION_INTERVAL)")
	addControlFlags(fs, &c.ctl)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if len(envErrs) > 0 {
		return nil, errors.New(strings.Join(envErrs, "; "))
	}
	if c.maxRuns < 1 || c.queue < 0 || c.poolSize < 0 || c.poolSize > 64 || c.poolMax > 64 || c.cellHosts < 1 || c.queueWait <= 0 || c.maxBodyMB < 1 || c.shutdownGrace < 0 || c.bodyTimeout <= 0 || c.maxOpenRequests < 1 {
		return nil, errors.New("--max-runs and --max-body-mb must be at least 1, --queue and --shutdown-grace at least 0, --pool-size 0 to 64, --queue-wait above 0")
	}
	if err := c.ctl.check(); err != nil {
		return nil, err
	}
	if err := c.captures.check(c.ctl.fleet()); err != nil {
		return nil, err
	}
	if c.retentionEvery <= 0 {
		return nil, errors.New("--retention-interval must be a positive duration")
	}
	if c.anchorEvery < 0 {
		return nil, errors.New("--audit-anchor-interval must be 0 (only at shutdown) or a positive duration")
	}
	if c.profilesPoll < 0 {
		return nil, errors.New("--profiles-poll must be 0 (off) or a positive duration")
	}
	if err := proxyPortFlag(c.egressPort); err != nil {
		return nil, err
	}
	return c, nil
}

func serve(args []string, stderr io.Writer) int {
	cfg, err := parseServe(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "sandboxd serve:", err)
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.logLevel)); err != nil {
		fmt.Fprintln(stderr, "sandboxd serve: --log-level:", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := serveWith(cfg, log, stderr); err != nil {
		log.Error("sandboxd stopped", "err", err)
		return 1
	}
	return 0
}

func serveWith(cfg *serveConfig, log *slog.Logger, console io.Writer) error {
	// The secrets first: every log line goes through the redactor, which
	// knows each of their values (and, after a reload, each value it ever
	// knew), so no secret reaches the log.
	sec, ca, err := loadSecrets(cfg.secretsFile)
	if err != nil {
		return err
	}
	log = slog.New(sec.LogHandler(log.Handler()))
	logSecrets(log, cfg.secretsFile, sec)
	set, err := profiles.Load(cfg.profilesDir)
	if err != nil {
		return fmt.Errorf("loading profiles: %w", err)
	}
	logProfileWarnings(log, set)
	current := &atomic.Pointer[profiles.Set]{}
	current.Store(set)
	// SIGHUP reloads the profiles; caught from the start so that an early
	// one does not end the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	keys, devKey, err := loadKeys(cfg.keysFile, log)
	if err != nil {
		return err
	}
	dataDir, err := filepath.Abs(cfg.dataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("creating the data dir: %w", err)
	}
	fleetKey, err := cfg.ctl.fleetKey()
	if err != nil {
		return err
	}
	state, err := openControl(&cfg.ctl, dataDir, cfg.addr, cfg.queue, log)
	if err != nil {
		return err
	}
	defer state.close()
	ctl := state.ctl
	var auditLog audit.Log
	if state.pg != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		auditLog, err = audit.OpenPostgres(ctx, state.pg.Pool(), cfg.ctl.replica)
		cancel()
	} else {
		auditLog, err = audit.Open(dataDir)
	}
	if err != nil {
		return fmt.Errorf("opening the audit log: %w", err)
	}
	defer auditLog.Close()
	captures, closeCaptures, err := openCaptures(&cfg.captures, dataDir, state, log)
	if err != nil {
		return fmt.Errorf("opening the capture store: %w", err)
	}
	defer closeCaptures()
	instance := runner.InstanceID(dataDir)
	eng, err := runner.New(log, instance)
	if err != nil {
		return err
	}
	var resolver egress.Resolver
	if cfg.hooks != nil {
		resolver = cfg.hooks.resolver
	}
	// Egress approvals live in the store; the proxy files and reads them,
	// the API decides them (httpapi.New tells the service who runs each exec).
	approvals := approval.New(approval.Config{Store: ctl.Store, Log: log})
	// self is every address sandboxd listens on (the egress proxy's, added
	// when it listens, and the API's, which serves /metrics too, added
	// below). The proxy's checker and /fetch's share it, so neither a
	// sandbox nor a fetch can loop back into sandboxd.
	self := &egress.Listeners{}
	eside := &egressSide{eng: eng, cur: current, log: log, instance: instance, port: cfg.egressPort, resolver: resolver, approvals: approvals, metrics: ctl.Metrics, self: self, ca: ca}
	if cfg.hooks != nil {
		eside.rootCAs = cfg.hooks.rootCAs
	}
	fetchChecker := &egress.Checker{Resolver: resolver, Approvals: approvals, Observe: eside.count, Self: self}
	// The proxy and the firewall outlive the sandboxes: they stop once the
	// runner has removed every container (on an early return too). When
	// that fails, the firewall rules stay (fail closed) until the next
	// start replaces them.
	engClosed := false
	defer func() {
		if !engClosed {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := eng.Close(ctx)
			cancel()
			if err != nil {
				log.Error("sandboxes may remain; the egress firewall rules stay until the next start", "err", err)
				return
			}
		}
		eside.stop()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	if err := eng.Ping(ctx); err != nil {
		log.Warn("container engine not reachable at start-up; /readyz reports it", "err", err)
	} else if n, err := eng.Cleanup(ctx); err != nil {
		log.Warn("removing leftover containers failed", "err", err)
	} else {
		if n > 0 {
			log.Info("removed containers left by an earlier process", "count", n)
		}
		eside.removeLeftovers(ctx, set)
		eside.ensure(ctx, set)
	}
	cancel()
	eng.EnablePool(cfg.poolSize, cfg.poolMax)
	eng.EnableCells(cfg.cellHosts)
	if err := eng.CellsUnavailable(); err != nil {
		log.Warn("profiles with isolation: cell are refused on this machine; /readyz reports it", "err", err)
	}
	if cfg.imageBuilds == "" {
		cfg.imageBuilds = filepath.Join(dataDir, "image-builds")
	}
	eng.SetImageBuilds(cfg.imageBuilds)
	eng.Warm(context.Background(), set)
	eng.StartReaper(time.Minute)

	reloadCtx, stopReload := context.WithCancel(context.Background())
	defer stopReload()
	rl := newReloader(cfg.profilesDir, current, log, func(_, set *profiles.Set) {
		ctx, cancel := context.WithTimeout(reloadCtx, 30*time.Second)
		defer cancel()
		eside.ensure(ctx, set)
		eng.Warm(ctx, set)
	})
	rl.audit = auditLog
	if cfg.keysFile != "" {
		rl.keysFile, rl.keys = cfg.keysFile, keys
		if data, err := os.ReadFile(cfg.keysFile); err == nil {
			sum := sha256.Sum256(data)
			rl.keysSum = hex.EncodeToString(sum[:])
		}
	}
	if cfg.secretsFile != "" {
		rl.secretsFile, rl.secrets = cfg.secretsFile, sec
		rl.secretsSum = secretsFingerprint(cfg.secretsFile, sec.Set())
	}
	go rl.run(reloadCtx, cfg.profilesPoll, hup)
	images := &imageWatcher{eng: eng, current: current, log: log, present: map[string]bool{}}
	go images.run(reloadCtx, 5*time.Second)

	srv, err := httpapi.New(httpapi.Config{
		DataDir:         dataDir,
		Profiles:        set,
		CurrentProfiles: current,
		Keys:            keys,
		Engine:          eng,
		Gate:            admit.New(cfg.maxRuns, cfg.queue, cfg.queueWait),
		Log:             log,
		MaxBodyBytes:    cfg.maxBodyMB << 20,
		BodyTimeout:     cfg.bodyTimeout,
		MaxOpenRequests: cfg.maxOpenRequests,
		Version:         version,
		Control:         ctl,
		Approvals:       approvals,
		Fetcher:         &browse.Fetcher{Checker: fetchChecker, Log: log, UserAgent: "sandboxd/" + version},
		Browser:         fetchflow.BrowserConfig{Runner: eng, Image: cfg.browserImage},
		Audit:           auditLog,
		Captures:        captures,
		FleetKey:        fleetKey,
		Secrets:         sec,
		CA:              caPEM(ca),
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	recordEgress := srv.RecordEgress
	eside.record.Store(&recordEgress)
	srv.Metrics().CounterFunc("sandboxd_reaper_removed_total", "Containers of this instance the reaper removed because no run owned them.",
		func() float64 { return float64(eng.Reaped()) })
	srv.Metrics().GaugesByLabel("sandboxd_pool_ready", "Started sandboxes waiting in the warm pool for a job, per exec profile.", "profile", perProfile(eng.PoolStats, 0))
	srv.Metrics().GaugesByLabel("sandboxd_pool_starting", "Sandboxes being started for the warm pool, per exec profile.", "profile", perProfile(eng.PoolStats, 1))
	srv.Metrics().GaugesByLabel("sandboxd_cell_hosts_busy", "Cell hosts running a run or building their next cell, per exec profile (isolation: cell).", "profile", perProfile(eng.CellHosts, 0))
	srv.Metrics().GaugesByLabel("sandboxd_cell_hosts_idle", "Cell hosts with a built cell waiting for a run, per exec profile (isolation: cell).", "profile", perProfile(eng.CellHosts, 1))
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.addr, err)
	}
	self.Add(ln.Addr().(*net.TCPAddr).AddrPort())
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("sandboxd listening", "addr", ln.Addr().String(), "version", version, "data_dir", dataDir,
		"profiles", strings.Join(set.Names(), ","), "exec_versions", versions(set, false), "egress_versions", versions(set, true),
		"max_runs", cfg.maxRuns, "queue", cfg.queue, "pool_size", cfg.poolSize)

	if devKey != "" {
		printFirstSteps(console, ln.Addr().String(), devKey)
	}

	sweepCtx, stopSweep := context.WithCancel(context.Background())
	defer stopSweep()
	sweeper := &capture.Sweeper{Store: captures, Audit: auditLog, Log: log}
	go sweeper.Run(sweepCtx, cfg.retentionEvery)
	go anchorLoop(sweepCtx, auditLog, cfg.anchorEvery, log)

	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	var stop <-chan struct{}
	if cfg.hooks != nil {
		stop = cfg.hooks.stop
		if cfg.hooks.listening != nil {
			cfg.hooks.listening(ln.Addr().String())
		}
	}
	select {
	case err := <-serveErr:
		return err
	case sig := <-sigs:
		log.Info("shutting down", "signal", sig.String(), "grace", cfg.shutdownGrace.String())
	case <-stop:
		log.Info("shutting down", "signal", "test stop", "grace", cfg.shutdownGrace.String())
	}
	signal.Stop(sigs)
	stopReload()
	stopSweep()

	// Stop accepting; let running jobs finish within the grace period; then
	// kill what is left; then wait until every container is removed.
	graceCtx, cancelGrace := context.WithTimeout(context.Background(), cfg.shutdownGrace)
	defer cancelGrace()
	go func() { _ = hs.Shutdown(graceCtx) }()
	if !srv.WaitRuns(graceCtx) {
		log.Warn("killing runs still going at the end of the grace period")
	}
	killCtx, cancelKill := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelKill()
	if err := srv.KillRuns(killCtx, execflow.ErrShutdown); err != nil {
		log.Error("runs did not stop", "err", err)
	}
	_ = srv.Close()
	_ = hs.Shutdown(killCtx)
	// The last record this process wrote, for anchoring elsewhere.
	logAuditHead(context.Background(), auditLog, log, audit.Anchor{})
	err = eng.Close(killCtx)
	engClosed = err == nil
	if err != nil {
		return err
	}
	log.Info("sandboxd stopped")
	return nil
}

// anchorLoop logs the audit log's head ("audit head": seq, hash and the
// anchor SEQ:HASH) every interval when it moved, so that a log shipped
// elsewhere holds anchors for `sandboxd audit verify --anchor`: the chain
// alone cannot show records cut from its end.
func anchorLoop(ctx context.Context, l audit.Log, every time.Duration, log *slog.Logger) {
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var last audit.Anchor
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if h := logAuditHead(ctx, l, log, last); h.Seq != 0 {
			last = h
		}
	}
}

// logAuditHead logs the head unless it is skip (or the log is empty) and
// returns it.
func logAuditHead(ctx context.Context, l audit.Log, log *slog.Logger, skip audit.Anchor) audit.Anchor {
	h, err := l.Head(ctx)
	if err != nil {
		if ctx.Err() == nil {
			log.Error("reading the audit head failed", "err", err)
		}
		return audit.Anchor{}
	}
	if h.Seq == 0 || h == skip {
		return h
	}
	log.Info("audit head", "seq", h.Seq, "hash", h.Hash, "anchor", h.String())
	return h
}

// loadKeys loads the keys file, or without one generates a development
// key, which it returns for printing once to the console (never to the
// structured log).
func loadKeys(path string, log *slog.Logger) (ring *auth.Keyring, devKey string, err error) {
	if path == "" {
		devKey, ring = auth.Generate("dev", "dev", auth.RoleAdmin)
		log.Warn("using a generated development key; pass --keys-file in production")
		return ring, devKey, nil
	}
	ring, warnings, err := auth.LoadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("loading keys: %w", err)
	}
	for _, w := range warnings {
		log.Warn(w)
	}
	return ring, "", nil
}

// printFirstSteps tells a newcomer, once the API listens, the development
// key and a first request to try with it.
func printFirstSteps(console io.Writer, addr, key string) {
	fmt.Fprintf(console, `
sandboxd: serving on http://%[1]s. No --keys-file was given: this development
key (tenant dev, role admin) is valid until this process exits. Try:

    export SANDBOXD_KEY=%[2]s
    curl -s http://%[1]s/exec -H "Authorization: Bearer $SANDBOXD_KEY" \
        -H 'Content-Type: application/json' -d '{"language":"python","code":"print(6*7)"}'

`, addr, key)
}
