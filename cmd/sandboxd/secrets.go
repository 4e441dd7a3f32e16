package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/secrets"
)

// kindSecretsReload is the audit kind of a reload of the secrets file.
const kindSecretsReload = "secrets_reload"

// loadSecrets loads the secrets file (none: an empty store, and no CA)
// and, with one, makes the egress proxy's CA. A file that does not load
// stops the start, with every problem as file:line:column.
func loadSecrets(path string) (*secrets.Store, *secrets.CA, error) {
	if path == "" {
		return secrets.NewStore(nil), nil, nil
	}
	set, err := secrets.LoadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("loading secrets:\n%w", err)
	}
	ca, err := secrets.NewCA()
	if err != nil {
		return nil, nil, fmt.Errorf("making the egress proxy's CA: %w", err)
	}
	return secrets.NewStore(set), ca, nil
}

// logSecrets logs which secrets are in force: names, tenants and where
// each value comes from, never a value.
func logSecrets(log *slog.Logger, path string, st *secrets.Store) {
	if path == "" {
		return
	}
	set := st.Set()
	log.Info("secrets loaded", "file", path, "secrets", set.Names(), "sources", sources(set))
}

func sources(set *secrets.Set) map[string]string {
	out := map[string]string{}
	for _, n := range set.Names() {
		out[n] = set.Get(n).Source
	}
	return out
}

func caPEM(ca *secrets.CA) func() []byte {
	if ca == nil {
		return nil
	}
	return ca.PEM
}

// secretsFingerprint digests the secrets file and every value file its
// secrets read, so that a rotated value file (a mounted secret updated in
// place) is reloaded like an edited secrets file. Only the digest is kept.
func secretsFingerprint(path string, set *secrets.Set) string {
	h := sha256.New()
	data, err := os.ReadFile(path)
	fmt.Fprintf(h, "%s\x00%v\x00", data, err != nil)
	for _, n := range set.Names() {
		if f, ok := strings.CutPrefix(set.Get(n).Source, "file "); ok {
			v, err := os.ReadFile(f)
			fmt.Fprintf(h, "%s\x00%s\x00%v\x00", f, v, err != nil)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// reloadSecrets reloads the secrets file when it or a value file it names
// changed (or force). A file that does not load leaves the secrets in
// force as they were; runs in flight keep the values they started with
// either way.
func (r *reloader) reloadSecrets(reason string, force bool) {
	if r.secretsFile == "" || r.secrets == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fp := secretsFingerprint(r.secretsFile, r.secrets.Set())
	if !force && fp == r.secretsSum {
		return
	}
	r.secretsSum = fp
	set, err := secrets.LoadFile(r.secretsFile)
	if err != nil {
		r.log.Error("secrets reload failed; the secrets in force stay", "reason", reason, "file", r.secretsFile, "err", err.Error())
		r.record(audit.Reload(kindSecretsReload, r.secretsFile, err, map[string]string{"reason": reason}))
		return
	}
	ch := r.secrets.Load(set)
	r.secretsSum = secretsFingerprint(r.secretsFile, set)
	r.log.Info("secrets reloaded", "reason", reason, "file", r.secretsFile, "secrets", set.Names(),
		"added", ch.Added, "removed", ch.Removed, "changed", ch.Changed)
	r.record(audit.Reload(kindSecretsReload, r.secretsFile, nil, map[string]string{
		"reason": reason, "secrets": strconv.Itoa(set.Len()), "added": strings.Join(ch.Added, ","),
		"removed": strings.Join(ch.Removed, ","), "changed": strings.Join(ch.Changed, ",")}))
}
