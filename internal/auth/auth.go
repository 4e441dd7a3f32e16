// Package auth loads the API keys file and authenticates bearer keys.
//
// The keys file is YAML:
//
//	keys:
//	  - id: agent-1
//	    tenant: acme
//	    key_sha256: 9f86d0818...   # sha256 (hex) of the key: printf %s "$KEY" | sha256sum
//	    roles: [agent]
//
// Only hashes need to be stored. `key: <plaintext>` is accepted in place of
// key_sha256 for development; the loader hashes it and returns a warning.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Roles. A key holds one or more.
const (
	// RoleAgent may run code (exec) and fetch results.
	RoleAgent = "agent"
	// RoleAdmin may do everything, and so holds every role.
	RoleAdmin = "admin"
	// RoleSecurity may read the loaded profiles and evaluate egress
	// decisions (GET /profiles, POST /profiles/{name}/evaluate), and
	// everything a reviewer may, and put holds on and erase captures.
	RoleSecurity = "security"
	// RoleReviewer may read the audit log and captures of its tenant.
	RoleReviewer = "reviewer"
)

// knownRoles lists the roles a keys file may grant, sorted.
var knownRoles = []string{RoleAdmin, RoleAgent, RoleReviewer, RoleSecurity}

// keyPrefix starts every key that Generate makes, so that a leaked key is
// easy to recognise (e.g. by secret scanners).
const keyPrefix = "sbx_"

// Key is an authenticated API key's identity. The plaintext key and its hash
// are not part of it, so a Key can be logged.
type Key struct {
	ID     string
	Tenant string
	Roles  []string
}

// Has reports whether k holds role. An admin key holds every role; a
// security key also holds reviewer.
func (k *Key) Has(role string) bool {
	return slices.Contains(k.Roles, role) || slices.Contains(k.Roles, RoleAdmin) ||
		role == RoleReviewer && slices.Contains(k.Roles, RoleSecurity)
}

// CanSee reports whether k may see data of tenant (records, captures,
// execs, usage): its own tenant's, or every tenant's with the admin role.
// It is the one tenant check of the API and the review page.
func (k *Key) CanSee(tenant string) bool {
	return k.Tenant == tenant || k.Has(RoleAdmin)
}

// Scope is the tenant filter for a listing of k that asks for tenant
// ("": every tenant k may see): an admin key gets what it asked, any
// other key its own tenant; ok is false when it asked for another tenant.
func (k *Key) Scope(tenant string) (scoped string, ok bool) {
	if k.Has(RoleAdmin) {
		return tenant, true
	}
	if tenant != "" && tenant != k.Tenant {
		return "", false
	}
	return k.Tenant, true
}

// Keyring is a set of API keys, held as sha256 hashes. It is safe for
// concurrent use; Replace swaps its keys in place (a keys-file reload), so
// every holder of the *Keyring sees the new set.
type Keyring struct {
	mu      sync.RWMutex
	entries []entry
}

type entry struct {
	hash [sha256.Size]byte
	key  *Key
}

// Len returns the number of keys.
func (r *Keyring) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.entries)
}

// IDs returns the key ids, sorted.
func (r *Keyring) IDs() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ids := make([]string, len(r.entries))
	for i, e := range r.entries {
		ids[i] = e.key.ID
	}
	slices.Sort(ids)
	return ids
}

// Replace puts other's keys in place of r's (other is left as it was).
func (r *Keyring) Replace(other *Keyring) {
	other.mu.RLock()
	entries := slices.Clone(other.entries)
	other.mu.RUnlock()
	r.mu.Lock()
	r.entries = entries
	r.mu.Unlock()
}

// Fingerprint is the sha256 of a plaintext key, as a Keyring holds it. It
// stands for a key where the key itself must not be kept (a review-page
// session): it cannot be presented as a key, since Authenticate hashes
// what it is given.
type Fingerprint [sha256.Size]byte

// FingerprintOf returns the Fingerprint of the plaintext key bearer.
func FingerprintOf(bearer string) Fingerprint { return sha256.Sum256([]byte(bearer)) }

// Authenticate returns the key whose hash matches sha256(bearer), as
// Lookup does. The returned *Key is shared: do not modify it.
func (r *Keyring) Authenticate(bearer string) (*Key, bool) {
	if bearer == "" {
		return nil, false
	}
	return r.Lookup(FingerprintOf(bearer))
}

// Lookup returns the key whose hash is fp as r holds it now: after a
// Replace, a key that was removed, or rotated to a new secret under the
// same id, is not found, and one that was kept has its new tenant and
// roles. The returned *Key is shared: do not modify it.
//
// Every stored hash is compared with crypto/subtle, and the loop neither
// stops at a match nor branches on one, so the time taken does not depend
// on which key, if any, matched. What is compared is the hash of the
// presented key, never the key itself: even a timing leak would give away
// bits of a sha256, which do not help to find a key. A map lookup by hash
// would therefore be acceptable too; the scan keeps the code free of that
// argument and costs nothing at the number of keys a service has.
func (r *Keyring) Lookup(fp Fingerprint) (*Key, bool) {
	if r == nil {
		return nil, false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	match := -1
	for i := range r.entries {
		eq := subtle.ConstantTimeCompare(fp[:], r.entries[i].hash[:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 {
		return nil, false
	}
	return r.entries[match].key, true
}

// Generate makes a random development key with the given identity and
// roles and a Keyring holding only it, for running without a keys file. The
// plaintext is keyPrefix followed by 32 random bytes in unpadded base64url.
// It panics if id or tenant is not a valid name or a role is unknown or
// missing: callers pass constants.
func Generate(id, tenant string, roles ...string) (plaintext string, ring *Keyring) {
	if msg := checkName("id", id); msg != "" {
		panic("auth.Generate: " + msg)
	}
	if msg := checkName("tenant", tenant); msg != "" {
		panic("auth.Generate: " + msg)
	}
	if len(roles) == 0 {
		panic("auth.Generate: no roles given")
	}
	for _, role := range roles {
		if !slices.Contains(knownRoles, role) {
			panic(fmt.Sprintf("auth.Generate: unknown role %q", role))
		}
	}
	var b [32]byte
	// crypto/rand.Read does not fail; the Go runtime aborts if the system
	// random source is broken.
	_, _ = rand.Read(b[:])
	plaintext = keyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	k := &Key{ID: id, Tenant: tenant, Roles: slices.Clone(roles)}
	return plaintext, &Keyring{entries: []entry{{hash: sha256.Sum256([]byte(plaintext)), key: k}}}
}

// ParseBearer returns the key from an "Authorization: Bearer <key>" header
// value. The scheme is case-insensitive and surrounding spaces are ignored.
// It returns false for another scheme, a missing key, or a key containing
// spaces or control characters.
func ParseBearer(header string) (string, bool) {
	h := strings.TrimSpace(header)
	const scheme = "bearer"
	if len(h) <= len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return "", false
	}
	if c := h[len(scheme)]; c != ' ' && c != '\t' {
		return "", false
	}
	key := strings.TrimLeft(h[len(scheme):], " \t")
	if key == "" || strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", false
	}
	return key, true
}

var nameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// checkName validates a key id or tenant; they end up in logs and audit
// records, so they are plain words. It returns what is wrong, or "".
func checkName(what, v string) string {
	if v == "" {
		return what + " is empty"
	}
	if !nameRe.MatchString(v) {
		return fmt.Sprintf("%s %q is not allowed; use 1 to 64 letters, digits, '.', '_', '@' and '-', starting with a letter or digit", what, v)
	}
	return ""
}
