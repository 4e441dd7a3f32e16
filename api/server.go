// Package api is sandboxd's HTTP layer: authentication, request validation,
// admission and the JSON shapes of requests, responses and errors.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/admit"
	"github.com/sandboxd/sandboxd/auth"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/runner"
)

// Engine is what the API needs from the container runner. The real one is
// *runner.Runner; unit tests use a fake.
type Engine interface {
	Run(ctx context.Context, spec *runner.Spec) (*runner.Result, error)
	Ping(ctx context.Context) error
	ImageID(ctx context.Context, ref string) (string, error)
}

// Config is the server's configuration.
type Config struct {
	DataDir  string
	Profiles *profiles.Set
	Keys     *auth.Keyring
	Engine   Engine
	Gate     *admit.Gate
	Log      *slog.Logger
	// MaxBodyBytes caps a request body; a larger one is refused with 400.
	MaxBodyBytes int64
	Version      string
}

// Server serves the HTTP API.
type Server struct {
	cfg  Config
	log  *slog.Logger
	echo *echo.Echo

	// runCtx is the parent of every run; cancelling it kills running code.
	runCtx    context.Context
	cancelRun context.CancelCauseFunc
	runs      sync.WaitGroup
}

// New builds the server and its routes.
func New(cfg Config) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 32 << 20
	}
	s := &Server{cfg: cfg, log: cfg.Log}
	s.runCtx, s.cancelRun = context.WithCancelCause(context.Background())
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.errorHandler
	e.Use(s.requestID, s.accessLog, s.recoverPanic)

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.POST("/exec", s.exec, s.authenticate(auth.RoleAgent))
	s.echo = e
	return s
}

// Handler returns the HTTP handler, for tests and for http.Server.
func (s *Server) Handler() http.Handler { return s.echo }

// KillRuns stops every running job (their containers are killed and removed)
// and waits until their handlers have returned, at most until ctx ends.
func (s *Server) KillRuns(ctx context.Context, cause error) error {
	s.cancelRun(cause)
	done := make(chan struct{})
	go func() { s.runs.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("runs still in progress after kill: %w", ctx.Err())
	}
}

// WaitRuns waits until running jobs finish on their own, at most until ctx ends.
func (s *Server) WaitRuns(ctx context.Context) bool {
	done := make(chan struct{})
	go func() { s.runs.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// Context keys.
const (
	ctxRequestID = "request_id"
	ctxKey       = "auth_key"
	ctxLogger    = "logger"
	ctxErrorCode = "error_code"
	ctxProfile   = "profile"
	ctxRunStatus = "run_status"
)

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// requestID takes the caller's X-Request-Id when it is well-formed, or makes one.
func (s *Server) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if !requestIDPattern.MatchString(id) {
			id = uuid.NewString()
		}
		c.Set(ctxRequestID, id)
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		c.Set(ctxLogger, s.log.With("request_id", id))
		return next(c)
	}
}

func requestLogger(c echo.Context, fallback *slog.Logger) *slog.Logger {
	if l, ok := c.Get(ctxLogger).(*slog.Logger); ok {
		return l
	}
	return fallback
}

// accessLog writes one line per request: never code, output or keys.
func (s *Server) accessLog(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		attrs := []any{
			"method", c.Request().Method,
			"path", c.Request().URL.Path,
			"status", c.Response().Status,
			"duration_ms", time.Since(start).Milliseconds(),
			"bytes_in", c.Request().ContentLength,
			"bytes_out", c.Response().Size,
		}
		for _, name := range []string{ctxProfile, ctxRunStatus, ctxErrorCode} {
			if v, ok := c.Get(name).(string); ok && v != "" {
				attrs = append(attrs, name, v)
			}
		}
		requestLogger(c, s.log).Info("request", attrs...)
		return nil
	}
}

func (s *Server) recoverPanic(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		return next(c)
	}
}

// authenticate checks the bearer key and that it holds role.
func (s *Server) authenticate(role string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			bearer, ok := auth.ParseBearer(c.Request().Header.Get(echo.HeaderAuthorization))
			if !ok {
				return &Error{Status: http.StatusUnauthorized, Code: CodeAuth, Message: "missing API key: send the header Authorization: Bearer <key>"}
			}
			key, ok := s.cfg.Keys.Authenticate(bearer)
			if !ok {
				return &Error{Status: http.StatusUnauthorized, Code: CodeAuth, Message: "the API key is not valid"}
			}
			c.Set(ctxKey, key)
			c.Set(ctxLogger, requestLogger(c, s.log).With("tenant", key.Tenant, "key_id", key.ID))
			if !key.Has(role) {
				return &Error{Status: http.StatusForbidden, Code: CodeForbidden, Message: fmt.Sprintf("key %q lacks the role %q needed here", key.ID, role)}
			}
			return next(c)
		}
	}
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// ReadyCheck is one readiness check's outcome.
type ReadyCheck struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 5*time.Second)
	defer cancel()
	var checks []ReadyCheck
	add := func(name string, err error) {
		ch := ReadyCheck{Name: name, OK: err == nil}
		if err != nil {
			ch.Error = err.Error()
		}
		checks = append(checks, ch)
	}
	engineErr := s.cfg.Engine.Ping(ctx)
	add("engine", engineErr)
	if engineErr == nil {
		seen := map[string]bool{}
		for _, name := range s.cfg.Profiles.Names() {
			p := s.cfg.Profiles.Exec[name]
			if seen[p.Image] {
				continue
			}
			seen[p.Image] = true
			_, err := s.cfg.Engine.ImageID(ctx, p.Image)
			add("image "+p.Image, err)
		}
	}
	add("data_dir", checkWritable(s.cfg.DataDir))
	status, code := "ready", http.StatusOK
	for _, ch := range checks {
		if !ch.OK {
			status, code = "not ready", http.StatusServiceUnavailable
		}
	}
	return c.JSON(code, map[string]any{"status": status, "checks": checks})
}

func checkWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".readyz-*")
	if err != nil {
		return fmt.Errorf("data dir %s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(filepath.Clean(name))
}

var errShutdown = errors.New("sandboxd is shutting down")

// ErrShutdown is the cause given to running jobs killed at shutdown.
func ErrShutdown() error { return errShutdown }
