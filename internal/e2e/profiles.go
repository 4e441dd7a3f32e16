package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
)

// isolationLine is an exec profile's isolation setting.
var isolationLine = regexp.MustCompile(`(?m)^isolation:\s*\S+\s*$`)

// ContainerProfiles copies the profiles tree src into dir with every exec
// profile's isolation set to container: for a suite that inspects the
// engine container of each run (the shipped default and data profiles
// run in cells).
func ContainerProfiles(src, dir string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if filepath.Base(filepath.Dir(path)) == "exec" && filepath.Ext(path) == ".yaml" && isolationLine.Match(b) {
			b = isolationLine.ReplaceAll(b, []byte("isolation: container"))
		}
		return os.WriteFile(dst, b, 0o644)
	})
}
