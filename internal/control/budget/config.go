// Package budget enforces per-tenant rate limits and budgets and
// per-session budgets: token buckets for requests per minute, concurrent
// execs, daily CPU-seconds and fetched bytes per tenant, and execs,
// CPU-seconds, wall seconds and fetched bytes per agent session.
//
// Budgets are enforced in code before a run starts and while it runs: a
// run's wall-time limit is lowered to what the tightest time budget has
// left, so no run can spend past a budget by more than the sandbox's kill
// grace. Usage is kept in the store, so a restart does not reset it.
package budget

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/internal/yamlfile"
)

// Limits are one tenant's settings. Zero means no limit.
type Limits struct {
	// ExecPerMinute and FetchPerMinute are token-bucket rates; Burst is the
	// bucket's size (default: one minute's worth).
	ExecPerMinute  float64 `yaml:"exec_per_minute"`
	FetchPerMinute float64 `yaml:"fetch_per_minute"`
	Burst          int     `yaml:"burst"`
	// ConcurrentExecs bounds the tenant's execs queued or running at once.
	ConcurrentExecs int `yaml:"concurrent_execs"`
	// DailyCPUSeconds and DailyFetchBytes reset at 00:00 UTC.
	DailyCPUSeconds float64 `yaml:"daily_cpu_seconds"`
	DailyFetchBytes int64   `yaml:"daily_fetch_bytes"`
	// LoopRepeats is the loop guard's threshold: the call that would be the
	// LoopRepeats-th identical call in a row of a session, after identical
	// outcomes, is refused. 0 turns the guard off; the default is 3.
	LoopRepeats int `yaml:"loop_repeats"`
	// Session limits apply to each X-Session-Id of the tenant.
	Session SessionLimits `yaml:"session"`
	// FetchProfile is the egress profile POST /fetch uses when a request
	// names none; empty: the request must name one.
	FetchProfile string `yaml:"fetch_profile"`
	// MaxSessions bounds the tenant's open sessions (POST /sessions).
	MaxSessions int `yaml:"max_sessions"`
}

// SessionLimits are the budgets of one agent session. Zero means no limit.
type SessionLimits struct {
	MaxExecs    int64   `yaml:"max_execs"`
	CPUSeconds  float64 `yaml:"cpu_seconds"`
	WallSeconds float64 `yaml:"wall_seconds"`
	FetchBytes  int64   `yaml:"fetch_bytes"`
}

// defaultLoopRepeats is the loop guard's threshold when none is set.
const defaultLoopRepeats = 3

// Config holds the defaults and every tenant's limits.
type Config struct {
	Defaults Limits
	Tenants  map[string]Limits
}

// unlimited is the configuration without a tenants file: no rate limits or
// budgets, the loop guard at its default.
func unlimited() *Config {
	return &Config{Defaults: Limits{LoopRepeats: defaultLoopRepeats}}
}

// For returns the limits of tenant: its own entry, or the defaults.
func (c *Config) For(tenant string) Limits {
	if l, ok := c.Tenants[tenant]; ok {
		return l
	}
	return c.Defaults
}

// burst returns the bucket size for a rate.
func (l *Limits) burst(perMinute float64) float64 {
	if l.Burst > 0 {
		return float64(l.Burst)
	}
	return max(1, perMinute)
}

var tenantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

var profileName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

var lineRe = regexp.MustCompile(`line (\d+): (.*)`)

// LoadFile reads a tenants file:
//
//	defaults:                 # for tenants without an entry
//	  exec_per_minute: 120
//	  concurrent_execs: 8
//	  daily_cpu_seconds: 36000
//	  session: {max_execs: 500, cpu_seconds: 3600, wall_seconds: 7200}
//	tenants:
//	  acme:                   # a tenant's entry overrides the defaults field by field
//	    exec_per_minute: 60
//
// Unknown fields, negative values and malformed tenant names are refused
// with file:line errors.
func LoadFile(path string) (*Config, error) {
	data, err := yamlfile.ReadFile(path, "the tenants file")
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse parses a tenants file's content; file names it in errors.
func Parse(file string, data []byte) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlErr(file, err)
	}
	cfg := unlimited()
	if len(doc.Content) == 0 {
		return cfg, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, &yamlfile.Error{File: file, Line: root.Line, Msg: "the tenants file must be a mapping with defaults: and tenants:, got " + yamlfile.Describe(root)}
	}
	var defNode, tenNode *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "defaults":
			defNode = v
		case "tenants":
			tenNode = v
		default:
			return nil, &yamlfile.Error{File: file, Line: k.Line, Msg: fmt.Sprintf("unknown top-level key %q; the file holds defaults: and tenants:", k.Value)}
		}
	}
	if defNode != nil {
		if err := decodeLimits(file, defNode, &cfg.Defaults); err != nil {
			return nil, err
		}
	}
	if tenNode == nil {
		return cfg, nil
	}
	if tenNode.Kind != yaml.MappingNode {
		return nil, &yamlfile.Error{File: file, Line: tenNode.Line, Msg: "tenants must map tenant names to their limits, got " + yamlfile.Describe(tenNode)}
	}
	cfg.Tenants = map[string]Limits{}
	for i := 0; i+1 < len(tenNode.Content); i += 2 {
		k, v := tenNode.Content[i], tenNode.Content[i+1]
		if !tenantName.MatchString(k.Value) {
			return nil, &yamlfile.Error{File: file, Line: k.Line, Msg: fmt.Sprintf("tenant name %q is not allowed; use the tenant of the keys file (letters, digits, '.', '_', '@', '-')", k.Value)}
		}
		if _, dup := cfg.Tenants[k.Value]; dup {
			return nil, &yamlfile.Error{File: file, Line: k.Line, Msg: fmt.Sprintf("tenant %q is listed twice", k.Value)}
		}
		l := cfg.Defaults // a tenant's entry overrides the defaults field by field
		if err := decodeLimits(file, v, &l); err != nil {
			return nil, err
		}
		cfg.Tenants[k.Value] = l
	}
	return cfg, nil
}

func decodeLimits(file string, n *yaml.Node, l *Limits) error {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return &yamlfile.Error{File: file, Line: n.Line, Msg: "limits must be a mapping (exec_per_minute: ..., session: {...}), got " + yamlfile.Describe(n)}
	}
	// Re-encode to decode strictly: unknown fields are errors.
	raw, err := yaml.Marshal(n)
	if err != nil {
		return &yamlfile.Error{File: file, Line: n.Line, Msg: err.Error()}
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(l); err != nil {
		e := yamlErr(file, err)
		if e.Line > 0 {
			e.Line += n.Line - 1 // the re-encoded mapping starts at n's line
		}
		if strings.Contains(e.Msg, "not found in type") {
			e.Msg += "; known fields: " + strings.Join(knownFields, ", ")
		}
		return e
	}
	for _, c := range []struct {
		name string
		bad  bool
	}{
		{"exec_per_minute", l.ExecPerMinute < 0},
		{"fetch_per_minute", l.FetchPerMinute < 0},
		{"burst", l.Burst < 0},
		{"concurrent_execs", l.ConcurrentExecs < 0},
		{"daily_cpu_seconds", l.DailyCPUSeconds < 0},
		{"daily_fetch_bytes", l.DailyFetchBytes < 0},
		{"session.max_execs", l.Session.MaxExecs < 0},
		{"session.cpu_seconds", l.Session.CPUSeconds < 0},
		{"session.wall_seconds", l.Session.WallSeconds < 0},
		{"session.fetch_bytes", l.Session.FetchBytes < 0},
		{"max_sessions", l.MaxSessions < 0},
	} {
		if c.bad {
			return &yamlfile.Error{File: file, Line: n.Line, Msg: c.name + " is negative; use 0 for no limit"}
		}
	}
	if l.FetchProfile != "" && !profileName.MatchString(l.FetchProfile) {
		return &yamlfile.Error{File: file, Line: n.Line, Msg: fmt.Sprintf("fetch_profile %q is not an egress profile name (1-63 of a-z, 0-9 and '-')", l.FetchProfile)}
	}
	if l.LoopRepeats == 1 || l.LoopRepeats < 0 {
		return &yamlfile.Error{File: file, Line: n.Line, Msg: fmt.Sprintf("loop_repeats is %d; use 0 to turn the loop guard off, or 2 or more", l.LoopRepeats)}
	}
	return nil
}

var knownFields = func() []string {
	f := []string{"exec_per_minute", "fetch_per_minute", "burst", "concurrent_execs", "daily_cpu_seconds", "daily_fetch_bytes", "loop_repeats", "fetch_profile", "max_sessions",
		"session (max_execs, cpu_seconds, wall_seconds, fetch_bytes)"}
	sort.Strings(f)
	return f
}()

func yamlErr(file string, err error) *yamlfile.Error {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "yaml: unmarshal errors:\n")
	msg = strings.TrimSpace(msg)
	if m := lineRe.FindStringSubmatch(msg); m != nil {
		var line int
		fmt.Sscan(m[1], &line)
		return &yamlfile.Error{File: file, Line: line, Msg: strings.TrimSpace(m[2])}
	}
	return &yamlfile.Error{File: file, Msg: strings.TrimPrefix(msg, "yaml: ")}
}
