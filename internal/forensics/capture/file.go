package capture

import (
	"fmt"
	"os"
)

// writeFile writes data whole or not at all: to a new file in dir (named
// from pattern, as os.CreateTemp names it), synced unless noSync and
// closed, which place then renames into place. A non-empty point is a
// hook point between the write and the sync. On an error the temporary
// file is removed.
func writeFile(dir, pattern string, data []byte, noSync bool, point string, place func(tmp string) error) error {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if point != "" {
		if err := hook(point); err != nil {
			return err
		}
	}
	if !noSync {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := place(tmp); err != nil {
		return err
	}
	ok = true
	return nil
}

// syncDir makes dir's entries durable (nothing when noSync, for tests).
func syncDir(dir string, noSync bool) error {
	if noSync {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
