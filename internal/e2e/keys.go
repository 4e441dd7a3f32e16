package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// Key is one entry of a keys file (--keys-file) and the secret whose
// digest it holds.
type Key struct {
	ID     string
	Tenant string
	Roles  []string // none: a key without roles
	Secret string
}

// RandHex returns n random bytes in hex.
func RandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NewSecret returns a fresh key secret: prefix and 24 random bytes in hex.
func NewSecret(prefix string) string { return prefix + RandHex(24) }

// sha256Hex returns the hex SHA-256 of s, as a keys file names a secret.
func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// KeysYAML returns the content of a keys file with keys, in order.
func KeysYAML(keys ...Key) string {
	var b strings.Builder
	b.WriteString("keys:\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "  - id: %s\n    tenant: %s\n    key_sha256: %s\n    roles: [%s]\n", k.ID, k.Tenant, sha256Hex(k.Secret), strings.Join(k.Roles, ", "))
	}
	return b.String()
}

// WriteKeys writes a keys file with keys to path, readable by its owner
// only.
func WriteKeys(path string, keys ...Key) error {
	return os.WriteFile(path, []byte(KeysYAML(keys...)), 0o600)
}
