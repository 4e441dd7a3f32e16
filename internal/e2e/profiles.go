package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// isolationLine is an exec profile's isolation setting.
var isolationLine = regexp.MustCompile(`(?m)^isolation:[ \t]*\S+[ \t]*$`)

// ContainerProfiles copies the profiles tree src into dir with every exec
// profile's isolation set to container: for a suite (or the benchmark)
// that wants an engine container per run (the shipped default and data
// profiles run in cells).
func ContainerProfiles(src, dir string) error {
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		return fmt.Errorf("copying the profiles dir for container mode: %w", err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "exec", "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no exec profiles in %s", filepath.Join(src, "exec"))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(f, isolationLine.ReplaceAll(b, []byte("isolation: container")), 0o644); err != nil {
			return err
		}
	}
	return nil
}
