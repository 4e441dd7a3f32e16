package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// buildTimeout bounds one `go build` on a busy machine.
const buildTimeout = 5 * time.Minute

// ModuleRoot returns the module's root: the nearest directory at or above
// the working directory (a test's package directory) with a go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod in %s or any directory above it: run the test from inside the module", dir)
		}
	}
}

// builds are the binaries this test process built, by package.
var builds struct {
	mu   sync.Mutex
	dir  string
	bins map[string]string
}

// Binary builds the module's main package pkg (for example
// "./cmd/sandboxd") the first time it is asked for in this test process,
// into a temporary directory that RemoveBinaries removes, and returns the
// binary's path.
func Binary(pkg string) (string, error) {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if bin, ok := builds.bins[pkg]; ok {
		return bin, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	if builds.dir == "" {
		if builds.dir, err = os.MkdirTemp("", "sandboxd-e2e-bin-"); err != nil {
			return "", err
		}
		builds.bins = map[string]string{}
	}
	bin := filepath.Join(builds.dir, filepath.Base(pkg))
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	build := exec.CommandContext(ctx, goTool(), "build", "-o", bin, pkg)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s failed: %v\n%s", pkg, err, out)
	}
	builds.bins[pkg] = bin
	return bin, nil
}

// RemoveBinaries removes what Binary built; a later Binary builds again.
func RemoveBinaries() error {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir == "" {
		return nil
	}
	err := os.RemoveAll(builds.dir)
	builds.dir, builds.bins = "", nil
	if err != nil {
		return errors.New("removing the test binaries: " + err.Error())
	}
	return nil
}

// goTool returns the go command: `go test` puts its own GOROOT/bin first
// on the test's PATH.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}
