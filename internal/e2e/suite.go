package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// Suite is what an end-to-end suite's TestMain sets up before it starts its
// server: the module's root, a temporary directory, a client of the Docker
// engine (checked to answer) and the sandboxd binary.
type Suite struct {
	Name   string         // for messages: "sandboxd e2e"
	Root   string         // the module's root (ModuleRoot)
	Tmp    string         // the suite's temporary directory
	Docker *client.Client // the engine sandboxd uses
	Bin    string         // ./cmd/sandboxd, built (Binary)
}

// Main is a suite's TestMain: it sets a Suite named name up (its
// temporary directory named after tmpPrefix), runs run with it, undoes the
// set-up and exits with run's code. A set-up failure fails the suite.
func Main(name, tmpPrefix string, run func(*Suite) int) {
	os.Exit(mainCode(name, tmpPrefix, run))
}

func mainCode(name, tmpPrefix string, run func(*Suite) int) int {
	s, err := newSuite(name, tmpPrefix)
	if err != nil {
		return (&Suite{Name: name}).Fatalf("%v", err)
	}
	defer s.Close()
	return run(s)
}

// newSuite sets a Suite up; Close undoes it. On an error it undoes what it
// did.
func newSuite(name, tmpPrefix string) (*Suite, error) {
	s := &Suite{Name: name}
	if err := s.setUp(tmpPrefix); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Fatalf reports what stops the suite outside its tests (a failed set-up,
// a server that did not start) and returns the exit code for it, 1.
func (s *Suite) Fatalf(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "\n%s: FATAL: %s\n", s.Name, fmt.Sprintf(format, args...))
	return 1
}

// Finish ends a suite whose tests returned code: it stops srv (SIGTERM,
// ShutdownTimeout), then requires that list finds none of srv's
// containers left within FinalCleanupTimeout and that each of the checks
// after returns nil, and on any failure prints srv's last log lines. It
// returns code, or 1 when the shutdown failed.
func (s *Suite) Finish(code int, srv *Server, list func(context.Context) ([]container.Summary, error), after ...func() error) int {
	if err := srv.Stop(ShutdownTimeout); err != nil {
		fmt.Fprintf(os.Stderr, "%s: FAIL: %v\n", s.Name, err)
		code = 1
	}
	if left := WaitGone(FinalCleanupTimeout, list, Any); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "%s: FAIL: %d container(s) of the suite's server remain %v after it exited on SIGTERM: %s\n",
			s.Name, len(left), FinalCleanupTimeout, strings.Join(left, ", "))
		code = 1
	} else {
		fmt.Fprintf(os.Stderr, "%s: no container of the suite's server remains after shutdown\n", s.Name)
	}
	for _, check := range after {
		if err := check(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: FAIL: %v\n", s.Name, err)
			code = 1
		}
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "\n--- last lines of sandboxd's output ---\n%s\n", srv.Log.Tail(80))
	}
	return code
}

func (s *Suite) setUp(tmpPrefix string) error {
	var err error
	if s.Root, err = ModuleRoot(); err != nil {
		return err
	}
	if s.Tmp, err = os.MkdirTemp("", tmpPrefix); err != nil {
		return err
	}
	// Docker first: without it nothing else can work.
	if s.Docker, err = Docker(); err != nil {
		return err
	}
	s.Bin, err = Binary("./cmd/sandboxd")
	return err
}

// Close closes the engine's client and removes the temporary directory
// and the binaries.
func (s *Suite) Close() {
	if s.Docker != nil {
		s.Docker.Close()
	}
	if s.Tmp != "" {
		os.RemoveAll(s.Tmp)
	}
	_ = RemoveBinaries()
}
