package execflow

import (
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/runner"
)

// The proxy's CA reaches a run with https secrets as a file of its
// /sandbox (written with the job, like an input file, and never captured)
// that the usual variables point at.
const (
	// sandboxdDir is the directory of /sandbox sandboxd writes into; input
	// files may not use it.
	sandboxdDir = ".sandboxd"
	caFile      = sandboxdDir + "/egress-ca.pem"
)

// caEnv are the variables that make Python's ssl (and so urllib, http.client
// and asyncio), requests and curl trust the proxy's CA.
var caEnv = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"}

// AttachSecrets binds the secrets a run may use, its exec profile's and
// the request's (names), to a fresh set of placeholders: the run's
// environment gets SANDBOXD_SECRET_<NAME> for each, spec.Secrets carries
// them to the egress proxy, and a run with a secret that goes over https
// gets the proxy's CA. Each secret must be declared (400 naming it) and
// allowed to the key's tenant (403 naming it); secrets need a profile
// with network egress (400 saying so).
func (f *Flow) AttachSecrets(spec *runner.Spec, names []string, key *auth.Key) error {
	prof := spec.Profile
	if len(names) == 0 && len(prof.Secrets) == 0 {
		return nil
	}
	if len(names) > 0 && !runner.Networked(prof) {
		return api.Validation("secrets", "profile %q has egress: none, so its runs have no network and nothing to inject secrets into; secrets need a profile whose egress profile allows the secrets' hosts", prof.Name)
	}
	if len(names) > profiles.MaxSecrets {
		return api.Validation("secrets", "%d secrets named; at most %d are allowed", len(names), profiles.MaxSecrets)
	}
	set := f.cfg.Secrets.Set()
	var list []*secrets.Secret
	// The profile's first: an operator's choice, refused before the
	// request's when the tenant may not use it.
	for _, name := range prof.Secrets {
		s := set.Get(name)
		switch {
		case s == nil:
			f.cfg.Log.Error("an exec profile names a secret the secrets file does not declare", "profile", prof.Name, "secret", name)
			return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Field: "profile",
				Message: fmt.Sprintf("profile %q names secret %q, which the secrets file does not declare; its runs are refused until the operator declares it or removes it from the profile", prof.Name, name)}
		case !s.Allows(key.Tenant):
			return &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Field: "profile",
				Message: fmt.Sprintf("profile %q gives its runs secret %q, which tenant %s may not use; use another profile, or ask the operator to add the tenant to the secret's tenants", prof.Name, name, key.Tenant)}
		}
		list = append(list, s)
	}
	for i, name := range names {
		field := fmt.Sprintf("secrets[%d]", i)
		if slices.Contains(names[:i], name) {
			return api.Validation(field, "secret %q is named twice", name)
		}
		s := set.Get(name)
		if s == nil {
			return api.Validation(field, "secret %q is not declared (%s)", name, usable(set, key.Tenant))
		}
		if !s.Allows(key.Tenant) {
			return &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Field: field,
				Message: fmt.Sprintf("tenant %s may not use secret %q; ask the operator to add the tenant to the secret's tenants in the secrets file", key.Tenant, name)}
		}
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	run := secrets.NewRun(key.Tenant, list)
	env := run.Env()
	if run.HTTPS() {
		ca := f.caPEM()
		if ca == nil {
			return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Field: "secrets",
				Message: "the egress proxy has no CA to read the HTTPS the secrets go over; the log says why"}
		}
		for _, v := range caEnv {
			if _, ok := spec.Job.Env[v]; ok {
				return api.Validation("env."+v, "%s points at the egress proxy's CA in a run with secrets that go over https; leave it out", v)
			}
			env[v] = path.Join(jobproto.WorkDir, caFile)
		}
		spec.Job.Files = append(spec.Job.Files, jobproto.File{Path: caFile, Content: ca})
	}
	if spec.Job.Env == nil {
		spec.Job.Env = map[string]string{}
	}
	for k, v := range env {
		spec.Job.Env[k] = v
	}
	spec.Secrets = run
	return nil
}

// usable lists the secrets tenant may use, for a message; never another
// tenant's.
func usable(set *secrets.Set, tenant string) string {
	var mine []string
	for _, n := range set.Names() {
		if set.Get(n).Allows(tenant) {
			mine = append(mine, n)
		}
	}
	if len(mine) == 0 {
		return "your tenant may use none"
	}
	return "your tenant may use: " + strings.Join(mine, ", ")
}

// caPEM is the proxy's CA certificate, or nil.
func (f *Flow) caPEM() []byte {
	if f.cfg.CA == nil {
		return nil
	}
	return f.cfg.CA()
}

// reservedFile reports whether an input file's path is sandboxd's own.
func reservedFile(p string) bool {
	return p == sandboxdDir || strings.HasPrefix(p, sandboxdDir+"/")
}
