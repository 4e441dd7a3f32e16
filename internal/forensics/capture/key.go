package capture

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// keys are the subkeys derived from the key file's 32 bytes. The master
// key itself is not kept: the blob address, the blob and metadata
// encryption and the fingerprint each use their own HMAC-derived key, so
// no key serves two primitives.
type keys struct {
	addr        []byte      // HMAC-SHA256 key for blob addresses
	aead        cipher.AEAD // AES-256-GCM for blobs and metadata
	fingerprint string      // 16 hex digits naming the key, stored in the database and in each blob
}

// loadKeyFile reads a key file: one line holding 32 bytes in hex (64
// digits) or base64 (standard or URL alphabet, padded or not). The file
// must be a regular file that neither group nor others may read or write.
// Errors never quote the file's content.
func loadKeyFile(name string) (*keys, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return nil, fmt.Errorf("%w file: %w", errKey, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w file %s is not a regular file", errKey, name)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%w file %s has mode %04o: group and others must have no access (chmod 600 %s)", errKey, name, perm, name)
	}
	raw, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("%w file: %w", errKey, err)
	}
	defer clear(raw)
	line := bytes.TrimSpace(raw)
	if bytes.ContainsAny(line, "\r\n") {
		return nil, fmt.Errorf("%w file %s has more than one line; it must hold one line: 32 random bytes in hex or base64", errKey, name)
	}
	key, ok := decodeKey(string(line))
	if !ok {
		return nil, fmt.Errorf("%w file %s does not hold 32 bytes in hex (64 digits) or base64 (44 characters); make one with: head -c 32 /dev/urandom | base64 > %s", errKey, name, name)
	}
	defer clear(key)
	return deriveKeys(key)
}

func decodeKey(s string) ([]byte, bool) {
	if len(s) == 64 {
		if b, err := hex.DecodeString(s); err == nil {
			return b, true
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == 32 {
			return b, true
		}
	}
	return nil, false
}

func deriveKeys(master []byte) (*keys, error) {
	sub := func(label string) []byte {
		m := hmac.New(sha256.New, master)
		m.Write([]byte("sandboxd capture " + label + " v1"))
		return m.Sum(nil)
	}
	encKey := sub("encryption")
	defer clear(encKey)
	block, err := aes.NewCipher(encKey)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &keys{addr: sub("address"), aead: aead, fingerprint: hex.EncodeToString(sub("fingerprint")[:8])}, nil
}

// address returns a blob's address: the hex sha256 of its content (sum)
// without encryption, HMAC-SHA256 under the address key with it (so that
// the disk does not confirm a guessed content).
func (k *keys) address(data []byte, sum string) string {
	if k == nil {
		return sum
	}
	m := hmac.New(sha256.New, k.addr)
	m.Write(data)
	return hex.EncodeToString(m.Sum(nil))
}

// sealMeta returns a capture's sealed Meta (the Meta column of both
// stores): JSON, or with encryption 0x01, a nonce
// and the AES-GCM sealed JSON bound to the capture id.
func (k *keys) sealMeta(id string, m map[string]string) ([]byte, error) {
	if len(m) == 0 {
		return nil, nil
	}
	js, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if k == nil {
		return js, nil
	}
	ns := k.aead.NonceSize()
	out := make([]byte, 1+ns, 1+ns+len(js)+k.aead.Overhead())
	out[0] = 1
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, err
	}
	return k.aead.Seal(out, out[1:], js, []byte("capture meta "+id)), nil
}

func (k *keys) openMeta(id string, b []byte) (map[string]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if b[0] == 1 {
		if k == nil {
			return nil, fmt.Errorf("%w: capture %s has encrypted metadata and the store was opened without a key", errKey, id)
		}
		ns := k.aead.NonceSize()
		if len(b) < 1+ns {
			return nil, fmt.Errorf("%w: capture %s: metadata truncated", errCorrupt, id)
		}
		js, err := k.aead.Open(nil, b[1:1+ns], b[1+ns:], []byte("capture meta "+id))
		if err != nil {
			return nil, fmt.Errorf("%w: capture %s: metadata fails authentication", errCorrupt, id)
		}
		b = js
	} else if k != nil {
		return nil, fmt.Errorf("%w: capture %s: unencrypted metadata in an encrypted store", errCorrupt, id)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: capture %s: metadata: %v", errCorrupt, id, err)
	}
	return m, nil
}

// keyMismatch is the error of opening a store whose content was written
// in the mode stored ("none" or "aes-256-gcm/" and a fingerprint) with
// keys k (nil: none); where names the store.
func keyMismatch(where, stored string, k *keys) error {
	storedFP, _ := strings.CutPrefix(stored, "aes-256-gcm/")
	switch {
	case stored == "none":
		return fmt.Errorf("%w: the capture store %s holds unencrypted captures and cannot take a key file; open it without one, or start a new capture store", errKey, where)
	case k == nil:
		return fmt.Errorf("%w: the capture store %s is encrypted (key %s); give its key file", errKey, where, storedFP)
	default:
		return fmt.Errorf("%w: the key file is not the key the capture store %s is encrypted with (the store's key is %s, the file's %s)", errKey, where, storedFP, k.fingerprint)
	}
}

// mode is the encryption mode the stores record: "none", or
// "aes-256-gcm/" and the key's fingerprint.
func (k *keys) mode() string {
	if k == nil {
		return "none"
	}
	return "aes-256-gcm/" + k.fingerprint
}
