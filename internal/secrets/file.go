// Package secrets holds the credentials sandboxed code may use but never
// hold. Operators declare them in a secrets file (--secrets-file): each
// has a name, the tenants that may use it, where it may go (host
// patterns, schemes and ports) and how it is applied to a request (a
// header, HTTP basic auth or a query parameter); its value comes from
// sandboxd's environment or from a file, never from a request.
//
// A run that names secrets gets a placeholder per secret in its
// environment (SANDBOXD_SECRET_<NAME>=sbx_secret_..., random per run).
// The egress proxy replaces a placeholder with the real value only where
// the secret is applied, on a request to a destination the secret may go
// to, and denies every other request that carries one (Run.Prepare). The
// value never enters the sandbox; every place it could come back through
// (an upstream's response, an error message, a log line, a run's output)
// knows it as a literal to redact (Literals, Store.Rules, LogHandler).
package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/egress/hostmatch"
	"github.com/sandboxd/sandboxd/internal/yamlfile"
)

// Limits on a secrets file and its values.
const (
	// MaxSecrets bounds the entries of a secrets file.
	MaxSecrets = 256
	// MinValueLen and MaxValueLen bound a secret's value in bytes. A value
	// shorter than MinValueLen would be redacted wherever those few bytes
	// appear by chance.
	MinValueLen = 8
	MaxValueLen = 8 << 10
	// maxFileBytes bounds the secrets file itself and a value_file.
	maxFileBytes = 1 << 20
	// Marker is what a secret's value is written in a template.
	Marker = "{secret}"
)

// Schemes a secret may be sent over.
const (
	SchemeHTTPS = "https"
	SchemeHTTP  = "http"
)

// How a secret is applied to a request.
const (
	ApplyHeader = "header"
	ApplyBasic  = "basic_auth"
	ApplyQuery  = "query"
)

// Secret is one entry of the secrets file, with its value read.
type Secret struct {
	Name        string
	Description string
	// Tenants may name the secret in a run.
	Tenants []string
	// Hosts, Schemes and Ports are where the value may go: a request whose
	// host matches one of Hosts, over one of Schemes, to one of Ports.
	Hosts   []hostmatch.Pattern
	Schemes []string
	Ports   []uint16
	// Apply is ApplyHeader, ApplyBasic or ApplyQuery.
	Apply string
	// Header is the header's canonical name and Template its value with
	// Marker where the secret goes (ApplyHeader).
	Header, Template string
	// Username and Password are the basic-auth credentials, one of them
	// holding Marker (ApplyBasic).
	Username, Password string
	// Param is the query parameter (ApplyQuery).
	Param string
	// Source says where the value was read ("env STRIPE_KEY", "file
	// /run/secrets/stripe"), never the value.
	Source string
	// Line is the entry's line in the file.
	Line int

	value string
}

// Value returns the secret's value. Only the egress proxy sends it, and
// only to a destination the secret allows.
func (s *Secret) Value() string { return s.value }

// EnvName is the environment variable that carries the secret's
// placeholder in a run: SANDBOXD_SECRET_ and the name in upper case.
func EnvName(name string) string { return EnvPrefix + strings.ToUpper(name) }

// EnvPrefix starts the name of every placeholder variable.
const EnvPrefix = "SANDBOXD_SECRET_"

// RedactType is the type a redacted value of the secret is reported as
// ("[REDACTED:secret_stripe]").
func RedactType(name string) string { return "secret_" + name }

// Allows reports whether tenant may use the secret.
func (s *Secret) Allows(tenant string) bool { return slices.Contains(s.Tenants, tenant) }

// Goes reports whether the secret may be sent to scheme://host:port (host
// normalised as hostport returns it).
func (s *Secret) Goes(scheme, host string, port uint16) bool {
	if !slices.Contains(s.Schemes, scheme) || !slices.Contains(s.Ports, port) {
		return false
	}
	for _, p := range s.Hosts {
		if p.Match(host) {
			return true
		}
	}
	return false
}

// Where describes the destinations of the secret, for messages.
func (s *Secret) Where() string {
	hosts := make([]string, len(s.Hosts))
	for i, h := range s.Hosts {
		hosts[i] = h.String()
	}
	ports := make([]string, len(s.Ports))
	for i, p := range s.Ports {
		ports[i] = strconv.Itoa(int(p))
	}
	return fmt.Sprintf("%s over %s on port %s", strings.Join(hosts, ", "), strings.Join(s.Schemes, " or "), strings.Join(ports, ", "))
}

// Slot describes where the placeholder must stand, for messages.
func (s *Secret) Slot() string {
	switch s.Apply {
	case ApplyHeader:
		return fmt.Sprintf("the header %s: %s", s.Header, s.Template)
	case ApplyBasic:
		return fmt.Sprintf("basic auth (Authorization: Basic) as %s:%s", s.Username, s.Password)
	}
	return fmt.Sprintf("the query parameter %s", s.Param)
}

// Set is a loaded secrets file.
type Set struct {
	// File is the path it was loaded from ("" for an empty set).
	File    string
	secrets map[string]*Secret
	names   []string
}

// Get returns the secret named name, or nil.
func (s *Set) Get(name string) *Secret {
	if s == nil {
		return nil
	}
	return s.secrets[name]
}

// Names returns the names of the secrets, sorted.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.names)
}

// Len is the number of secrets.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.names)
}

// Env reads a variable of sandboxd's environment (os.LookupEnv; tests
// pass their own).
type Env func(name string) (string, bool)

// LoadFile reads and validates the secrets file at path, taking values
// from sandboxd's environment and from the files entries name. Every
// problem is reported at once as yamlfile.Errors, each "file:line:column:
// problem"; no message ever holds a value.
func LoadFile(path string) (*Set, error) {
	data, err := readCapped(path, "the secrets file")
	if err != nil {
		return nil, err
	}
	return Parse(path, data, os.LookupEnv)
}

// readCapped reads a file of at most maxFileBytes.
func readCapped(path, what string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &yamlfile.Error{File: path, Msg: fmt.Sprintf("cannot read %s: %v", what, yamlfile.StripPath(err))}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, &yamlfile.Error{File: path, Msg: fmt.Sprintf("cannot read %s: %v", what, yamlfile.StripPath(err))}
	}
	if len(data) > maxFileBytes {
		return nil, &yamlfile.Error{File: path, Msg: fmt.Sprintf("%s is over %d bytes", what, maxFileBytes)}
	}
	return data, nil
}

var (
	nameRe   = regexp.MustCompile(`^[a-z][a-z0-9_]{0,56}$`)
	tenantRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)
	envRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	paramRe  = regexp.MustCompile(`^[A-Za-z0-9_.~\[\]-]{1,64}$`)
	tokenRe  = regexp.MustCompile(`^[!#$%&'*+.^_|~0-9A-Za-z-]{1,64}$`)
)

var entryKeys = []string{"name", "description", "tenants", "hosts", "ports", "schemes", "header", "basic_auth", "query", "value_env", "value_file"}

// forbiddenHeaders frame the message or steer the proxy: a secret is never
// written into them.
var forbiddenHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Upgrade", "Te", "Trailer",
	"Expect", "Content-Encoding", "Content-Type", "Proxy-Authorization", "Proxy-Authenticate", "Proxy-Connection"}

// parser collects the problems of one file.
type parser struct {
	file string
	env  Env
	errs yamlfile.Errors
}

func (p *parser) problem(n *yaml.Node, format string, args ...any) {
	e := &yamlfile.Error{File: p.file, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	p.errs = append(p.errs, e)
}

// Parse validates a secrets file's content; file names it in errors. env
// looks up value_env variables.
func Parse(file string, data []byte, env Env) (*Set, error) {
	p := &parser{file: file, env: env}
	set := &Set{File: file, secrets: map[string]*Secret{}}
	root := p.document(data)
	if root == nil {
		return nil, p.errs
	}
	var list *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch {
		case k.Kind != yaml.ScalarNode || k.Value != "secrets":
			msg := fmt.Sprintf("unknown top-level key %s; the file holds only secrets: [...]", quote(k))
			if s := yamlfile.Suggest(k.Value, []string{"secrets"}); s != "" {
				msg += "; did you mean secrets?"
			}
			p.problem(k, "%s", msg)
		case list != nil:
			p.problem(k, "key \"secrets\" is repeated; keep one list")
		default:
			list = v
		}
	}
	if list == nil {
		if len(p.errs) == 0 {
			p.problem(nil, "no secrets: list; write secrets: followed by entries with name, tenants, hosts, how it is applied (header, basic_auth or query) and value_env or value_file")
		}
		return nil, p.errs
	}
	switch {
	case list.Kind == yaml.ScalarNode && list.ShortTag() == "!!null":
		// "secrets:" with nothing: an empty set, so that an operator can
		// withdraw every secret without removing the flag.
	case list.Kind != yaml.SequenceNode:
		p.problem(list, "secrets must be a list of entries (- name: ...), got %s", yamlfile.Describe(list))
	case len(list.Content) > MaxSecrets:
		p.problem(list, "secrets lists %d entries; at most %d are allowed", len(list.Content), MaxSecrets)
	default:
		lines := map[string]int{}
		for i, item := range list.Content {
			s := p.entry(i, item)
			if s == nil {
				continue
			}
			if first, dup := lines[s.Name]; dup {
				p.problem(item, "secret %q is already declared on line %d; names must be unique", s.Name, first)
				continue
			}
			lines[s.Name] = item.Line
			set.secrets[s.Name] = s
			set.names = append(set.names, s.Name)
		}
	}
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	slices.Sort(set.names)
	return set, nil
}

func quote(k *yaml.Node) string {
	if k.Kind == yaml.ScalarNode {
		return strconv.Quote(k.Value)
	}
	return yamlfile.Kind(k)
}

// document parses data as one YAML document whose root is a mapping.
func (p *parser) document(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.problem(nil, "the secrets file is empty; write secrets: followed by entries (or secrets: with none)")
			return nil
		}
		p.errs = append(p.errs, yamlfile.SyntaxError(p.file, data, err)...)
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			p.errs = append(p.errs, yamlfile.SyntaxError(p.file, data, err)...)
			return nil
		}
		p.problem(&extra, "the file holds more than one YAML document (---); keep one")
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		p.problem(&doc, "the file must hold exactly one YAML document")
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		p.problem(root, "top level must be a mapping with secrets: [...], got %s", yamlfile.Describe(root))
		return nil
	}
	return root
}

// fields reads a mapping's keys strictly: unknown keys (with a
// suggestion), repeated keys and aliases are problems.
func (p *parser) fields(n *yaml.Node, where string, known []string) map[string]*yaml.Node {
	vals := map[string]*yaml.Node{}
	for j := 0; j+1 < len(n.Content); j += 2 {
		k, v := n.Content[j], n.Content[j+1]
		if k.Kind != yaml.ScalarNode || !slices.Contains(known, k.Value) {
			msg := fmt.Sprintf("unknown key %s in %s", quote(k), where)
			if s := yamlfile.Suggest(k.Value, known); s != "" {
				msg += "; did you mean " + s + "?"
			}
			p.problem(k, "%s (allowed keys: %s)", msg, strings.Join(known, ", "))
			continue
		}
		if prev, dup := vals[k.Value]; dup {
			p.problem(k, "key %q in %s is repeated (first on line %d); keep one", k.Value, where, prev.Line)
			continue
		}
		if v.Kind == yaml.AliasNode {
			p.problem(v, "%s of %s is an alias; aliases are not supported", k.Value, where)
			continue
		}
		vals[k.Value] = v
	}
	return vals
}

// str reads a string field; ok false after a problem or when it is absent.
func (p *parser) str(vals map[string]*yaml.Node, key, where string) (string, *yaml.Node, bool) {
	v := vals[key]
	if v == nil {
		return "", nil, false
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		p.problem(v, "%s of %s must be a string, got %s", key, where, yamlfile.Describe(v))
		return "", v, false
	}
	return v.Value, v, true
}

// strList reads a list of strings; ok false after a problem or when it is
// absent (node nil).
func (p *parser) strList(vals map[string]*yaml.Node, key, where string) ([]string, *yaml.Node, bool) {
	v := vals[key]
	if v == nil {
		return nil, nil, false
	}
	if v.Kind != yaml.SequenceNode {
		p.problem(v, "%s of %s must be a list such as [a, b], got %s", key, where, yamlfile.Describe(v))
		return nil, v, false
	}
	out := []string{}
	for _, item := range v.Content {
		if item.Kind != yaml.ScalarNode || item.ShortTag() != "!!str" {
			p.problem(item, "%s of %s must hold strings, got %s", key, where, yamlfile.Describe(item))
			return nil, v, false
		}
		out = append(out, item.Value)
	}
	return out, v, true
}

// entry decodes secrets[i]; nil after a problem.
func (p *parser) entry(i int, n *yaml.Node) *Secret {
	where := fmt.Sprintf("secrets[%d]", i)
	if n.Kind != yaml.MappingNode {
		p.problem(n, "%s must be a mapping with name, tenants, hosts, how it is applied and where its value is, got %s", where, yamlfile.Describe(n))
		return nil
	}
	before := len(p.errs)
	for j := 0; j+1 < len(n.Content); j += 2 {
		if k, v := n.Content[j], n.Content[j+1]; k.Value == "name" && v.Kind == yaml.ScalarNode && nameRe.MatchString(v.Value) {
			where = fmt.Sprintf("secret %q", v.Value)
		}
	}
	vals := p.fields(n, where, entryKeys)
	s := &Secret{Line: n.Line}

	name, nameNode, ok := p.str(vals, "name", where)
	switch {
	case nameNode == nil:
		p.problem(n, "%s has no name; set name: to what requests and profiles call it, e.g. name: stripe", where)
	case ok && !nameRe.MatchString(name):
		p.problem(nameNode, "name %q is not allowed; use 1 to 57 lower-case letters, digits and '_', starting with a letter (the run sees it as %s<NAME>)", name, EnvPrefix)
	case ok:
		s.Name = name
	}
	if d, _, ok := p.str(vals, "description", where); ok {
		s.Description = d
	}

	tenants, tn, ok := p.strList(vals, "tenants", where)
	switch {
	case tn == nil:
		p.problem(n, "%s has no tenants; list the tenants that may use it, e.g. tenants: [acme]", where)
	case ok && len(tenants) == 0:
		p.problem(tn, "tenants of %s is empty; a secret no tenant may use is of no use: list at least one", where)
	}
	for j, t := range tenants {
		switch {
		case !tenantRe.MatchString(t):
			p.problem(tn.Content[j], "tenant %q of %s is not a tenant name; use 1 to 64 letters, digits, '.', '_', '@' and '-', starting with a letter or digit", t, where)
		case slices.Contains(s.Tenants, t):
			p.problem(tn.Content[j], "tenant %q of %s is listed twice", t, where)
		default:
			s.Tenants = append(s.Tenants, t)
		}
	}

	hosts, hn, ok := p.strList(vals, "hosts", where)
	switch {
	case hn == nil:
		p.problem(n, "%s has no hosts; list where its value may be sent, e.g. hosts: [\"api.stripe.com\"]", where)
	case ok && len(hosts) == 0:
		p.problem(hn, "hosts of %s is empty; list at least one host name or \"*.domain\" wildcard", where)
	}
	for j, h := range hosts {
		pat, err := hostmatch.Parse(h)
		if err != nil {
			p.problem(hn.Content[j], "hosts[%d] of %s: %v", j, where, err)
			continue
		}
		if slices.ContainsFunc(s.Hosts, func(q hostmatch.Pattern) bool { return q.String() == pat.String() }) {
			p.problem(hn.Content[j], "host %q of %s is listed twice", h, where)
			continue
		}
		s.Hosts = append(s.Hosts, pat)
	}

	s.Schemes = []string{SchemeHTTPS}
	if schemes, sn, ok := p.strList(vals, "schemes", where); ok {
		s.Schemes = nil
		if len(schemes) == 0 {
			p.problem(sn, "schemes of %s is empty; remove the key for the default [https] or list https and/or http", where)
		}
		for j, sc := range schemes {
			switch {
			case sc != SchemeHTTPS && sc != SchemeHTTP:
				p.problem(sn.Content[j], "scheme %q of %s is not allowed; use https (the default) or http (the value then crosses the network in clear)", sc, where)
			case slices.Contains(s.Schemes, sc):
				p.problem(sn.Content[j], "scheme %q of %s is listed twice", sc, where)
			default:
				s.Schemes = append(s.Schemes, sc)
			}
		}
	}

	p.ports(vals, where, s)
	p.apply(vals, n, where, s)
	p.value(vals, n, where, s)
	if len(p.errs) > before {
		return nil
	}
	return s
}

// ports reads ports; the default is each scheme's own port.
func (p *parser) ports(vals map[string]*yaml.Node, where string, s *Secret) {
	v := vals["ports"]
	if v == nil {
		for _, sc := range s.Schemes {
			if sc == SchemeHTTPS {
				s.Ports = append(s.Ports, 443)
			} else {
				s.Ports = append(s.Ports, 80)
			}
		}
		return
	}
	if v.Kind != yaml.SequenceNode {
		p.problem(v, "ports of %s must be a list such as [443], got %s", where, yamlfile.Describe(v))
		return
	}
	if len(v.Content) == 0 {
		p.problem(v, "ports of %s is empty; remove the key for the default (443 for https, 80 for http) or list ports", where)
	}
	for _, item := range v.Content {
		n, err := strconv.Atoi(item.Value)
		switch {
		case item.Kind != yaml.ScalarNode || item.ShortTag() != "!!int" || err != nil || n < 1 || n > 65535:
			p.problem(item, "ports of %s must be TCP ports 1 to 65535, got %s", where, yamlfile.Describe(item))
		case slices.Contains(s.Ports, uint16(n)):
			p.problem(item, "port %d of %s is listed twice", n, where)
		default:
			s.Ports = append(s.Ports, uint16(n))
		}
	}
}

// apply reads how the secret is applied: exactly one of header, basic_auth
// and query.
func (p *parser) apply(vals map[string]*yaml.Node, n *yaml.Node, where string, s *Secret) {
	var set []string
	for _, k := range []string{ApplyHeader, ApplyBasic, ApplyQuery} {
		if vals[k] != nil {
			set = append(set, k)
		}
	}
	switch len(set) {
	case 0:
		p.problem(n, "%s does not say how it is applied; set one of header: \"Authorization: Bearer %s\", basic_auth: {username: %s, password: \"\"} or query: api_key", where, Marker, Marker)
		return
	case 1:
	default:
		p.problem(vals[set[1]], "%s sets %s; a secret is applied one way: keep one of header, basic_auth and query", where, strings.Join(set, " and "))
		return
	}
	s.Apply = set[0]
	switch s.Apply {
	case ApplyHeader:
		h, hn, ok := p.str(vals, ApplyHeader, where)
		if !ok {
			return
		}
		name, tmpl, found := strings.Cut(h, ":")
		name, tmpl = strings.TrimSpace(name), strings.TrimSpace(tmpl)
		switch {
		case !found || !tokenRe.MatchString(name):
			p.problem(hn, "header of %s must be \"Name: value\" with %s where the secret goes, e.g. \"Authorization: Bearer %s\" or \"X-Api-Key: %s\"", where, Marker, Marker, Marker)
		case slices.Contains(forbiddenHeaders, http.CanonicalHeaderKey(name)):
			p.problem(hn, "header %s of %s frames the message or steers the proxy; a secret cannot be sent in it (not allowed: %s)", name, where, strings.Join(forbiddenHeaders, ", "))
		case strings.Count(tmpl, Marker) != 1:
			p.problem(hn, "header of %s must hold %s exactly once (where the value goes), e.g. \"%s: Bearer %s\"", where, Marker, name, Marker)
		case !printable(tmpl):
			p.problem(hn, "header of %s holds control characters", where)
		default:
			s.Header, s.Template = http.CanonicalHeaderKey(name), tmpl
		}
	case ApplyBasic:
		v := vals[ApplyBasic]
		if v.Kind != yaml.MappingNode {
			p.problem(v, "basic_auth of %s must be a mapping {username: ..., password: ...} with %s in one of them, got %s", where, Marker, yamlfile.Describe(v))
			return
		}
		bw := "basic_auth of " + where
		bv := p.fields(v, bw, []string{"username", "password"})
		user, _, _ := p.str(bv, "username", bw)
		pass, _, _ := p.str(bv, "password", bw)
		switch {
		case strings.Count(user+"\x00"+pass, Marker) != 1:
			p.problem(v, "%s must hold %s exactly once, in username or password, e.g. {username: %s, password: \"\"}", bw, Marker, Marker)
		case strings.Contains(user, ":"):
			p.problem(v, "the username of %s may not contain ':' (basic auth separates username and password with it)", bw)
		case !printable(user) || !printable(pass):
			p.problem(v, "%s holds control characters", bw)
		default:
			s.Username, s.Password = user, pass
		}
	case ApplyQuery:
		q, qn, ok := p.str(vals, ApplyQuery, where)
		if !ok {
			return
		}
		if !paramRe.MatchString(q) {
			p.problem(qn, "query of %s must be a parameter name of 1 to 64 letters, digits and '_', '.', '-', '~', '[', ']', e.g. query: api_key", where)
			return
		}
		s.Param = q
	}
}

// value reads the value from value_env or value_file.
func (p *parser) value(vals map[string]*yaml.Node, n *yaml.Node, where string, s *Secret) {
	envName, en, envOK := p.str(vals, "value_env", where)
	path, fn, fileOK := p.str(vals, "value_file", where)
	switch {
	case en != nil && fn != nil:
		p.problem(fn, "%s sets both value_env and value_file; keep one", where)
		return
	case en == nil && fn == nil:
		p.problem(n, "%s has no value; set value_env: NAME (a variable of sandboxd's environment) or value_file: /path (a file only sandboxd's user may read). A value is never written in this file", where)
		return
	case en != nil && !envOK, fn != nil && !fileOK:
		return
	}
	var v string
	switch {
	case en != nil:
		if !envRe.MatchString(envName) {
			p.problem(en, "value_env of %s must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*), got %q", where, envName)
			return
		}
		val, ok := p.env(envName)
		if !ok || val == "" {
			p.problem(en, "value_env of %s names %s, which is not set (or empty) in sandboxd's environment", where, envName)
			return
		}
		v, s.Source = val, "env "+envName
	default:
		if !filepath.IsAbs(path) {
			p.problem(fn, "value_file of %s must be an absolute path, got %q", where, path)
			return
		}
		info, err := os.Stat(path)
		if err != nil {
			p.problem(fn, "value_file of %s: cannot read %s: %v", where, path, yamlfile.StripPath(err))
			return
		}
		if !info.Mode().IsRegular() {
			p.problem(fn, "value_file of %s: %s is not a regular file", where, path)
			return
		}
		if info.Mode().Perm()&0o077 != 0 {
			p.problem(fn, "value_file of %s: %s has mode %04o; group and others must have no access (chmod 600, or defaultMode 0400 for a mounted secret)", where, path, info.Mode().Perm())
			return
		}
		data, err := readCapped(path, "the value file")
		if err != nil {
			p.problem(fn, "value_file of %s: %v", where, err)
			return
		}
		data = bytes.TrimSuffix(data, []byte("\n"))
		data = bytes.TrimSuffix(data, []byte("\r"))
		v, s.Source = string(data), "file "+path
	}
	// The value is never echoed: only its length and what is wrong.
	switch {
	case len(v) < MinValueLen || len(v) > MaxValueLen:
		p.problem(firstOf(en, fn), "the value of %s (%s) is %d bytes; allowed is %d to %d", where, s.Source, len(v), MinValueLen, MaxValueLen)
	case !utf8.ValidString(v) || !printable(v) || strings.TrimSpace(v) != v:
		p.problem(firstOf(en, fn), "the value of %s (%s) holds control characters, invalid UTF-8 or surrounding spaces; a value is sent in a header or a URL as it is", where, s.Source)
	case strings.Contains(strings.ToLower(v), PlaceholderPrefix):
		p.problem(firstOf(en, fn), "the value of %s (%s) contains %q, which marks placeholders", where, s.Source, PlaceholderPrefix)
	default:
		s.value = v
	}
}

func firstOf(ns ...*yaml.Node) *yaml.Node {
	for _, n := range ns {
		if n != nil {
			return n
		}
	}
	return nil
}

// printable reports whether s has no control characters (spaces allowed).
func printable(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f || r == utf8.RuneError })
}
