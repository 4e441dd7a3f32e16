package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/logbuf"
)

// DefaultStartTimeout bounds the wait for /healthz after the process
// starts, when ServerConfig.StartTimeout is 0.
const DefaultStartTimeout = 30 * time.Second

// pollTimeout bounds one health or readiness request while waiting.
const pollTimeout = 5 * time.Second

// ErrNotStopped is wrapped by Stop's error when the process did not exit
// in time after SIGTERM (and was killed).
var ErrNotStopped = errors.New("sandboxd did not exit")

// ServerConfig is how to start one `sandboxd serve`.
type ServerConfig struct {
	Bin         string // the sandboxd binary (Binary("./cmd/sandboxd"))
	DataDir     string // --data-dir, when not ""
	ProfilesDir string // --profiles-dir, when not ""
	KeysFile    string // --keys-file, when not ""
	// Flags are more flags of serve, after those above.
	Flags []string
	// Env is the process's environment; nil: the test process's.
	Env []string
	// Log receives the process's output; nil: a new buffer. A buffer given
	// again to a restarted server keeps the earlier output.
	Log *logbuf.Buffer
	// StartTimeout bounds the wait for /healthz; 0: DefaultStartTimeout.
	StartTimeout time.Duration
}

// Server is a running `sandboxd serve` on a loopback port. It is killed
// with the test process if that dies without stopping it.
type Server struct {
	URL     string         // http://127.0.0.1:PORT
	Port    int            // its API port
	Log     *logbuf.Buffer // its stdout and stderr
	Started time.Time      // when the process was started

	cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's, once done is closed
}

// Start starts sandboxd on a free loopback port and waits for GET /healthz
// to answer 200. A port taken between its choice and sandboxd's bind is
// retried with another, up to three times.
func Start(cfg ServerConfig) (*Server, error) {
	if cfg.Log == nil {
		cfg.Log = &logbuf.Buffer{}
	}
	timeout := cfg.StartTimeout
	if timeout == 0 {
		timeout = DefaultStartTimeout
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		mark := len(cfg.Log.String())
		s, err := launch(cfg, port)
		if err != nil {
			return nil, err
		}
		if lastErr = s.WaitHealthy(timeout); lastErr == nil {
			return s, nil
		}
		s.Kill()
		if !strings.Contains(cfg.Log.String()[mark:], "address already in use") {
			break
		}
	}
	return nil, lastErr
}

func launch(cfg ServerConfig, port int) (*Server, error) {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"serve", "--addr", addr}
	for _, f := range [][2]string{{"--data-dir", cfg.DataDir}, {"--profiles-dir", cfg.ProfilesDir}, {"--keys-file", cfg.KeysFile}} {
		if f[1] != "" {
			args = append(args, f[0], f[1])
		}
	}
	s := &Server{URL: "http://" + addr, Port: port, Log: cfg.Log, done: make(chan struct{})}
	s.cmd = exec.Command(cfg.Bin, append(args, cfg.Flags...)...)
	s.cmd.Env = cfg.Env
	s.cmd.Stdout, s.cmd.Stderr = cfg.Log, cfg.Log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	s.Started = time.Now()
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting sandboxd: %w", err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	return s, nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Done is closed when the process has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err is the process's exit error (nil for exit status 0); valid once Done
// is closed.
func (s *Server) Err() error {
	<-s.done
	return s.err
}

// Exited reports whether the process has exited.
func (s *Server) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process.
func (s *Server) Signal(sig os.Signal) error { return s.cmd.Process.Signal(sig) }

// Kill sends SIGKILL and waits for the process to be gone.
func (s *Server) Kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Stop sends SIGTERM and waits up to timeout for the process to exit; past
// that it kills it and returns an error wrapping ErrNotStopped. An exit
// status other than 0 is an error too. A process that has exited already
// is left as it is (nil).
func (s *Server) Stop(timeout time.Duration) error {
	if s.Exited() {
		return nil
	}
	_ = s.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		if s.err != nil {
			return fmt.Errorf("sandboxd exited with %v after SIGTERM", s.err)
		}
		return nil
	case <-time.After(timeout):
		s.Kill()
		return fmt.Errorf("%w within %v of SIGTERM; killed", ErrNotStopped, timeout)
	}
}

// WaitHealthy polls GET /healthz until it answers 200, for up to timeout.
func (s *Server) WaitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if s.Exited() {
			return fmt.Errorf("sandboxd exited before it was healthy: %v", s.err)
		}
		if status, _, err := s.get("/healthz"); err == nil && status == http.StatusOK {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("GET /healthz did not answer 200 within %v", timeout)
}

// WaitReady polls GET /readyz until it answers 200, for up to timeout. It
// returns the last answer's status and body either way (status 0: no
// answer); the error says what the last answer was.
func (s *Server) WaitReady(timeout time.Duration) (int, []byte, error) {
	deadline := time.Now().Add(timeout)
	var status int
	var body []byte
	last := "none"
	for time.Now().Before(deadline) {
		if s.Exited() {
			return status, body, fmt.Errorf("sandboxd exited while waiting for /readyz: %v", s.err)
		}
		st, b, err := s.get("/readyz")
		if err == nil {
			status, body = st, b
			if st == http.StatusOK {
				return status, body, nil
			}
			last = fmt.Sprintf("%d %s", st, b)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return status, body, fmt.Errorf("GET /readyz did not answer 200 within %v; last answer: %s", timeout, last)
}

func (s *Server) get(path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}
