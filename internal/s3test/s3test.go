// Package s3test starts throwaway S3-compatible servers for tests: a real
// SeaweedFS server (Apache-2.0; `weed server -filer -s3`: master, volume
// server, filer and S3 gateway in one process), built from its Go module once and cached
// outside the repository, listening on free loopback ports with a
// temporary data directory and an access key of its own. Nothing is
// skipped: a machine that cannot build it fails the test with the reason.
//
// The build needs only the Go module proxy: SeaweedFS's go.mod has a
// replace directive, so `go install` refuses it; Binary generates a
// throwaway module in a temporary directory that requires the weed
// package and repeats that replace, and builds there. The binary is
// cached as CacheDir()/weed-<Version> (a first build takes several
// minutes on two cores; later runs reuse it). `go run
// ./internal/s3test/build` builds it ahead, for CI before `go test`.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// Module is the Go module the server is built from, Version its
	// version (a pseudo-version the Go module proxy serves).
	Module  = "github.com/seaweedfs/seaweedfs"
	Version = "v0.0.0-20261109003541-7506e5f91cd6"
	pkg     = Module + "/weed"
	// replace is the directive of SeaweedFS's own go.mod that a module
	// requiring it must repeat.
	replace = "github.com/tyler-smith/go-bip39 => github.com/cosmos/go-bip39 v1.0.0"
	// Region is what the server answers for every bucket.
	Region = "us-east-1"
)

// CacheDir is where the built server is kept: $SANDBOXD_S3TEST_CACHE, or
// sandboxd-s3 beside the Go build cache ($(go env GOCACHE)/../sandboxd-s3).
func CacheDir() (string, error) {
	if d := os.Getenv("SANDBOXD_S3TEST_CACHE"); d != "" {
		return d, nil
	}
	out, err := exec.Command(goCmd(), "env", "GOCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOCACHE: %w", err)
	}
	gocache := strings.TrimSpace(string(out))
	if gocache == "" || gocache == "off" {
		d, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		return filepath.Join(d, "sandboxd-s3"), nil
	}
	return filepath.Join(filepath.Dir(gocache), "sandboxd-s3"), nil
}

// goCmd is the go command: the one of the toolchain running the tests
// when there is one, else go on PATH.
func goCmd() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if p := "/usr/local/go/bin/go"; fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

var buildMu sync.Mutex

// Binary returns the path of the built server, building it first when the
// cache does not have it. Concurrent callers (test binaries of several
// packages) wait for one build: a lock file in the cache directory.
func Binary() (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "weed-"+Version)
	if fileExists(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	for {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	if fileExists(bin) { // built by another process meanwhile
		return bin, nil
	}
	if err := build(bin); err != nil {
		return "", err
	}
	return bin, nil
}

// build builds the server into bin in a throwaway module.
func build(bin string) error {
	mod, err := os.MkdirTemp("", "sandboxd-s3build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(mod)
	gomod := "module sandboxd.test/s3server\n\ngo 1.26\n\nreplace " + replace + "\n"
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	run := func(args ...string) error {
		cmd := exec.Command(goCmd(), args...)
		cmd.Dir, cmd.Env = mod, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			tail := string(out)
			if len(tail) > 4000 {
				tail = "…" + tail[len(tail)-4000:]
			}
			return fmt.Errorf("building the S3 test server (%s@%s): go %s: %w\n%s", Module, Version, strings.Join(args, " "), err, tail)
		}
		return nil
	}
	if err := run("get", "-tool", pkg+"@"+Version); err != nil {
		return err
	}
	tmp := bin + ".tmp" + strconv.Itoa(os.Getpid())
	if err := run("build", "-trimpath", "-o", tmp, pkg); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, bin)
}

// Server is one running S3 server.
type Server struct {
	// Endpoint is host:port on 127.0.0.1, plain HTTP.
	Endpoint             string
	AccessKey, SecretKey string
	dir                  string
	sockets              []string // Unix sockets the server makes in /tmp
	cmd                  *exec.Cmd
	done                 chan struct{}
	log                  *os.File

	mu      sync.Mutex
	stopped bool
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Start builds (or takes from the cache) the server and starts it with a
// fresh data directory. Stop it with Close (it also dies with the test
// process).
func Start() (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sandboxd-s3-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, done: make(chan struct{}), AccessKey: "SBXTEST" + randHex(8), SecretKey: randHex(20)}
	if err := s.start(bin); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))[:n*2]
}

func (s *Server) start(bin string) error {
	cfg := map[string]any{"identities": []any{map[string]any{
		"name":        "sandboxd-test",
		"credentials": []any{map[string]string{"accessKey": s.AccessKey, "secretKey": s.SecretKey}},
		"actions":     []string{"Admin", "Read", "List", "Tagging", "Write"},
	}}}
	js, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(s.dir, "s3.json")
	if err := os.WriteFile(cfgPath, js, 0o600); err != nil {
		return err
	}
	data := filepath.Join(s.dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		return err
	}
	ports, err := freePorts(8)
	if err != nil {
		return err
	}
	p := func(i int) string { return strconv.Itoa(ports[i]) }
	// The server listens on a Unix socket per gRPC port too, always in
	// /tmp: Close removes them.
	for i, name := range map[int]string{1: "master", 3: "volume", 5: "filer", 7: "s3"} {
		s.sockets = append(s.sockets, fmt.Sprintf("/tmp/seaweedfs-%s-grpc-%d.sock", name, ports[i]))
	}
	s.Endpoint = "127.0.0.1:" + p(6)
	args := []string{"server", "-dir=" + data, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port=" + p(0), "-master.port.grpc=" + p(1), "-master.telemetry=false", "-master.volumeSizeLimitMB=64",
		"-volume.port=" + p(2), "-volume.port.grpc=" + p(3), "-volume.max=64",
		"-filer", "-filer.port=" + p(4), "-filer.port.grpc=" + p(5), "-filer.localSocket=" + filepath.Join(s.dir, "filer.sock"),
		"-s3", "-s3.port=" + p(6), "-s3.port.grpc=" + p(7), "-s3.config=" + cfgPath, "-s3.localSocket=" + filepath.Join(s.dir, "s3.sock"),
		"-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.iam=false",
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "HOME="+s.dir)
	// The server dies with the test process if that is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	s.mu.Lock()
	s.cmd, s.log = cmd, logf
	s.mu.Unlock()
	go func() { _ = cmd.Wait(); close(s.done) }()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if err := s.waitReady(ctx); err != nil {
		b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		return fmt.Errorf("the S3 test server did not become ready: %w\n%s", err, b)
	}
	return nil
}

// waitReady waits until the S3 port answers HTTP and the server can store
// an object (the volume server has joined the master).
func (s *Server) waitReady(ctx context.Context) error {
	for {
		err := s.probe(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return errors.New("the server exited")
		case <-ctx.Done():
			return fmt.Errorf("%w: last: %v", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// probe checks that the S3 port answers HTTP, then (readyCheck) that a
// bucket can be made and an object stored and read.
func (s *Server) probe(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.Endpoint+"/", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return readyCheck(ctx, s)
}

// Pid is the server process's id (for measuring its CPU time).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Dir is the server's temporary directory (data, config, log).
func (s *Server) Dir() string { return s.dir }

// Stop stops the server, keeping its data.
func (s *Server) Stop() {
	s.mu.Lock()
	if s.stopped || s.cmd == nil {
		s.stopped = true
		s.mu.Unlock()
		return
	}
	s.stopped = true
	cmd, logf := s.cmd, s.log
	s.mu.Unlock()
	// A throwaway server need not shut down cleanly: a moment for it,
	// then it is killed.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(2 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
	logf.Close()
}

// Close stops the server and removes its files.
func (s *Server) Close() {
	s.Stop()
	os.RemoveAll(s.dir)
	for _, p := range s.sockets {
		os.Remove(p)
	}
}
