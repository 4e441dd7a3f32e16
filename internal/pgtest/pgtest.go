// Package pgtest starts throwaway PostgreSQL servers for tests: Debian's
// postgresql package (initdb and postgres from /usr/lib/postgresql/N/bin),
// a fresh cluster in a temporary directory, listening on a free loopback
// port and a private socket directory. Run as root, the server runs as the
// postgres user (PostgreSQL refuses root). Nothing is skipped: a machine
// without the package fails the test with the apt-get command to run.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is one running PostgreSQL server.
type Server struct {
	// Port is its TCP port on 127.0.0.1.
	Port int
	dir  string
	bin  string
	cred *syscall.Credential
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File

	mu      sync.Mutex
	stopped bool
}

// BinDir returns the directory of Debian's newest installed PostgreSQL
// server binaries.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var ok []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			ok = append(ok, d)
		}
	}
	if len(ok) == 0 {
		return "", errors.New("no PostgreSQL server is installed (no /usr/lib/postgresql/*/bin/postgres): run `apt-get install -y postgresql` (.ci/run does)")
	}
	sort.Slice(ok, func(i, j int) bool { return version(ok[i]) > version(ok[j]) })
	return ok[0], nil
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Start initialises a cluster in a new temporary directory and starts it.
// Stop it with Stop (it is also stopped when the test process dies).
func Start() (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sandboxd-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin, done: make(chan struct{})}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running PostgreSQL as root needs the postgres user (Debian's postgresql package makes it): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if err := s.run(filepath.Join(bin, "initdb"), "-D", s.data(), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-locale"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

func (s *Server) run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", filepath.Base(name), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// start starts the server on a free port (again on its old one after a
// Stop: Restart).
func (s *Server) start() error {
	if s.Port == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		s.Port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", s.data(), "-p", strconv.Itoa(s.Port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+s.dir, "-c", "max_connections=300",
		"-c", "shared_buffers=64MB")
	cmd.Stdout, cmd.Stderr = logf, logf
	// The server dies with the test process if that is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	s.mu.Lock()
	s.cmd, s.log, s.done, s.stopped = cmd, logf, make(chan struct{}), false
	done := s.done
	s.mu.Unlock()
	go func() { _ = cmd.Wait(); close(done) }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		c, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err == nil {
			c.Close(ctx)
			return nil
		}
		select {
		case <-done:
			b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			return fmt.Errorf("postgres exited at start: %s", strings.TrimSpace(string(b)))
		case <-ctx.Done():
			s.Stop()
			return fmt.Errorf("postgres did not accept connections within 60 s: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// DSN is the connection string of database db on this server.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port, db)
}

// NewDatabase creates an empty database and returns its DSN.
func (s *Server) NewDatabase(ctx context.Context, name string) (string, error) {
	c, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return "", err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("creating database %s: %w", name, err)
	}
	return s.DSN(name), nil
}

// Stop stops the server (a fast shutdown: connections are ended), keeping
// its data for Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	if s.stopped || s.cmd == nil {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	cmd, done, logf := s.cmd, s.done, s.log
	s.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	logf.Close()
}

// Restart starts a stopped server again on the same port and data.
func (s *Server) Restart() error { return s.start() }

// Close stops the server and removes its files.
func (s *Server) Close() {
	s.Stop()
	os.RemoveAll(s.dir)
}
