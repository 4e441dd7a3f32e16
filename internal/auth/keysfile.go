package auth

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/internal/yamlfile"
)

// LoadFile reads and validates the keys file at path. The warnings say
// which entries store a plaintext key; they never contain the key. Any
// problem makes LoadFile fail with a *yamlfile.Error pointing at its line
// ("file:line: problem"), whose message never contains a key either.
func LoadFile(path string) (*Keyring, []string, error) {
	data, err := yamlfile.ReadFile(path, "the keys file")
	if err != nil {
		return nil, nil, err
	}
	return parse(path, data)
}

var entryKeys = []string{"id", "tenant", "key_sha256", "key", "roles"}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

type parser struct {
	file string
}

func (p *parser) errf(line int, format string, args ...any) *yamlfile.Error {
	return &yamlfile.Error{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// parse decodes a keys file. file names it in errors and warnings.
func parse(file string, data []byte) (*Keyring, []string, error) {
	p := &parser{file: file}
	root, err := p.document(data)
	if err != nil {
		return nil, nil, err
	}
	var list *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" || k.Value != "keys" {
			return nil, nil, p.errf(k.Line, "unknown top-level key %s; the file holds only keys: [...]", quoteKey(k))
		}
		if list != nil {
			return nil, nil, p.errf(k.Line, "key \"keys\" is repeated; keep only one list")
		}
		list = v
	}
	if list == nil {
		return nil, nil, p.errf(0, "no keys: list; write keys: followed by entries with id, tenant, key_sha256 and roles")
	}
	if list.Kind != yaml.SequenceNode {
		return nil, nil, p.errf(list.Line, "keys must be a list of entries (- id: ...), got %s", describe(list))
	}
	if len(list.Content) == 0 {
		return nil, nil, p.errf(list.Line, "keys is empty; add at least one entry, or no request can authenticate")
	}

	ring := &Keyring{}
	var warnings []string
	idLines := make(map[string]int)
	hashes := make(map[[sha256.Size]byte]string)
	for i, item := range list.Content {
		e, err := p.entry(i, item)
		if err != nil {
			return nil, nil, err
		}
		if first, dup := idLines[e.key.ID]; dup {
			return nil, nil, p.errf(item.Line, "id %q is already used on line %d; ids must be unique", e.key.ID, first)
		}
		idLines[e.key.ID] = item.Line
		if other, dup := hashes[e.hash]; dup {
			return nil, nil, p.errf(item.Line, "key %q has the same key as %q; give every entry its own key", e.key.ID, other)
		}
		hashes[e.hash] = e.key.ID
		if e.plaintext {
			warnings = append(warnings, fmt.Sprintf("%s:%d: key %q is stored in plaintext (key:); store only its hash instead: key_sha256: <output of printf %%s \"$KEY\" | sha256sum>", file, e.keyLine, e.key.ID))
			if e.hashLike {
				warnings = append(warnings, fmt.Sprintf("%s:%d: the key of %q looks like a sha256; if it is the hash of the key, write it as key_sha256:, or clients must send the hash itself", file, e.keyLine, e.key.ID))
			}
		}
		ring.entries = append(ring.entries, e.entry)
	}
	return ring, warnings, nil
}

// document parses data as one YAML document whose root is a mapping.
func (p *parser) document(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, p.errf(0, "the keys file is empty; write keys: followed by entries with id, tenant, key_sha256 and roles")
		}
		return nil, p.yamlErr(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, p.yamlErr(err)
		}
		return nil, p.errf(extra.Line, "the file holds more than one YAML document (---); keep one")
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, p.errf(doc.Line, "the file must hold exactly one YAML document")
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, p.errf(root.Line, "top level must be a mapping with keys: [...], got %s", describe(root))
	}
	return root, nil
}

func (p *parser) yamlErr(err error) *yamlfile.Error {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		if line, convErr := strconv.Atoi(m[1]); convErr == nil {
			return p.errf(line, "invalid YAML: %s", m[2])
		}
	}
	return p.errf(0, "invalid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
}

// parsedEntry is one decoded entry of the keys list.
type parsedEntry struct {
	entry
	// plaintext: the entry used key: instead of key_sha256:, on keyLine.
	plaintext bool
	keyLine   int
	// hashLike: that plaintext key is 64 hex digits, so probably a hash.
	hashLike bool
}

// entry decodes keys[i].
func (p *parser) entry(i int, n *yaml.Node) (e parsedEntry, err error) {
	where := fmt.Sprintf("keys[%d]", i)
	if n.Kind != yaml.MappingNode {
		return e, p.errf(n.Line, "%s must be a mapping with id, tenant, key_sha256 and roles, got %s", where, describe(n))
	}
	vals := make(map[string]*yaml.Node)
	for j := 0; j+1 < len(n.Content); j += 2 {
		k, v := n.Content[j], n.Content[j+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" || !slices.Contains(entryKeys, k.Value) {
			return e, p.errf(k.Line, "unknown key %s in %s; allowed keys: %s", quoteKey(k), where, strings.Join(entryKeys, ", "))
		}
		if prev, dup := vals[k.Value]; dup {
			return e, p.errf(k.Line, "key %q in %s is repeated (first on line %d); keep only one", k.Value, where, prev.Line)
		}
		vals[k.Value] = v
	}

	str := func(name string) (string, int, error) {
		v := vals[name]
		if v == nil {
			return "", 0, nil
		}
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
			return "", v.Line, p.errf(v.Line, "%s of %s must be a string, got %s", name, where, describe(v))
		}
		return v.Value, v.Line, nil
	}

	// name reads a required name field; hint says what to set when it is
	// missing.
	name := func(field, hint string) (string, error) {
		v, line, err := str(field)
		if err != nil {
			return "", err
		}
		if v == "" {
			return "", p.errf(lineOr(line, n.Line), "%s has no %s; %s", where, field, hint)
		}
		if msg := checkName(field, v); msg != "" {
			return "", p.errf(line, "%s", msg)
		}
		return v, nil
	}

	id, err := name("id", "set id: to a name for the key, e.g. id: agent-1")
	if err != nil {
		return e, err
	}
	where = fmt.Sprintf("key %q", id)
	tenant, err := name("tenant", "set tenant: to the tenant it acts for")
	if err != nil {
		return e, err
	}

	roles, err := p.roles(where, vals["roles"], n.Line)
	if err != nil {
		return e, err
	}

	hashNode, keyNode := vals["key_sha256"], vals["key"]
	switch {
	case hashNode != nil && keyNode != nil:
		return e, p.errf(keyNode.Line, "%s sets both key and key_sha256; keep only key_sha256", where)
	case hashNode != nil:
		// The value is never echoed: it may be a plaintext key pasted
		// into the wrong field.
		if hashNode.Kind != yaml.ScalarNode || hashNode.ShortTag() != "!!str" {
			return e, p.errf(hashNode.Line, "key_sha256 of %s must be a string of 64 hex digits, got %s", where, kindOnly(hashNode))
		}
		b, decErr := hex.DecodeString(hashNode.Value)
		if decErr != nil || len(b) != sha256.Size {
			return e, p.errf(hashNode.Line, "key_sha256 of %s is not 64 hex digits (got %d characters); set it to the sha256 of the key, from printf %%s \"$KEY\" | sha256sum", where, len(hashNode.Value))
		}
		copy(e.hash[:], b)
	case keyNode != nil:
		if keyNode.Kind != yaml.ScalarNode || keyNode.ShortTag() != "!!str" {
			return e, p.errf(keyNode.Line, "key of %s must be a string, got %s", where, kindOnly(keyNode))
		}
		if keyNode.Value == "" || strings.ContainsFunc(keyNode.Value, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return e, p.errf(keyNode.Line, "key of %s must be non-empty and without spaces or control characters (it is sent as Authorization: Bearer <key>)", where)
		}
		e.hash = sha256.Sum256([]byte(keyNode.Value))
		e.plaintext = true
		e.keyLine = keyNode.Line
		_, hexErr := hex.DecodeString(keyNode.Value)
		e.hashLike = hexErr == nil && len(keyNode.Value) == 2*sha256.Size
	default:
		return e, p.errf(n.Line, "%s has no key_sha256; set key_sha256: to the sha256 (hex) of the key, from printf %%s \"$KEY\" | sha256sum", where)
	}
	e.key = &Key{ID: id, Tenant: tenant, Roles: roles}
	return e, nil
}

func (p *parser) roles(where string, v *yaml.Node, entryLine int) ([]string, error) {
	allowed := strings.Join(knownRoles, ", ")
	if v == nil {
		return nil, p.errf(entryLine, "%s has no roles; set roles: [agent] or [admin] (allowed roles: %s)", where, allowed)
	}
	if v.Kind != yaml.SequenceNode {
		return nil, p.errf(v.Line, "roles of %s must be a list such as [agent], got %s", where, describe(v))
	}
	if len(v.Content) == 0 {
		return nil, p.errf(v.Line, "roles of %s is empty; a key without roles can do nothing (allowed roles: %s)", where, allowed)
	}
	var roles []string
	for _, r := range v.Content {
		if r.Kind != yaml.ScalarNode || r.ShortTag() != "!!str" {
			return nil, p.errf(r.Line, "roles of %s must be strings, got %s", where, describe(r))
		}
		if !slices.Contains(knownRoles, r.Value) {
			return nil, p.errf(r.Line, "role %q of %s is unknown; allowed roles: %s (agent: exec and fetch; security: profiles and egress evaluation; admin: everything)", r.Value, where, allowed)
		}
		if !slices.Contains(roles, r.Value) {
			roles = append(roles, r.Value)
		}
	}
	return roles, nil
}

func lineOr(line, fallback int) int {
	if line > 0 {
		return line
	}
	return fallback
}

func quoteKey(k *yaml.Node) string {
	if k.Kind == yaml.ScalarNode {
		return strconv.Quote(k.Value)
	}
	return describe(k)
}

// describe names what a node holds, with its value for scalars. Not for
// key values: those go through kindOnly.
func describe(n *yaml.Node) string { return yamlfile.Describe(n) }

// kindOnly names what a node holds without its value.
func kindOnly(n *yaml.Node) string { return yamlfile.Kind(n) }
