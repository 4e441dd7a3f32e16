// Package authtest builds keyrings for tests from keys file content.
package authtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/internal/auth"
)

// Keyring loads a keys file holding content, as sandboxd serve loads
// --keys-file; content that does not load fails the test.
func Keyring(t testing.TB, content string) *auth.Keyring {
	t.Helper()
	file := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	ring, _, err := auth.LoadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return ring
}
