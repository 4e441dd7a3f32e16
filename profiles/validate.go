package profiles

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
)

// The OCI runtimes an exec profile may name. There is no fallback between
// them: a profile that names runsc runs under gVisor or not at all.
const (
	// RuntimeRunc is the engine's default runtime: namespaces, cgroups,
	// seccomp, with the host kernel serving every syscall.
	RuntimeRunc = "runc"
	// RuntimeRunsc is gVisor: the code's syscalls are served by a user-space
	// kernel (the Sentry), which itself uses a small set of host syscalls.
	// It must be registered with the engine under this name (make gvisor).
	RuntimeRunsc = "runsc"
)

// Runtimes lists the allowed values of the runtime field.
var Runtimes = []string{RuntimeRunc, RuntimeRunsc}

// Values that an omitted field takes. The shipped default.yaml states every
// one of them explicitly; these only fill in for shorter custom profiles.
const (
	DefaultRuntime = RuntimeRunc
	DefaultUser    = "65534:65534"
	DefaultEgress  = "none"
)

// Isolation modes of an exec profile.
const (
	// IsolationContainer runs each exec in an engine container of its own.
	IsolationContainer = "container"
	// IsolationCell runs each exec in a fresh cell (new namespaces, fresh
	// tmpfs, the profile's seccomp filter) inside a long-lived container
	// that serves one tenant and one profile only.
	IsolationCell = "cell"
)

// DefaultIsolation is what a profile that does not say gets.
const DefaultIsolation = IsolationContainer

// defaultExec returns an Exec holding the default of every optional field.
// Decoding overwrites only the keys a file sets, so an explicit 0 (allowed
// for e.g. max_stdin_bytes) is kept and not replaced by the default.
func defaultExec() Exec {
	return Exec{
		Runtime:   DefaultRuntime,
		User:      DefaultUser,
		Egress:    DefaultEgress,
		Isolation: DefaultIsolation,
		Cell:      CellLimits{MaxRuns: 500, MaxAgeS: 1800, IdleS: 300, Hosts: 8},
		Limits: Limits{
			TimeoutMS:   10_000,
			MemoryMB:    256,
			CPUs:        1,
			Pids:        64,
			OutputBytes: 1 * mib,
			TmpfsMB:     64,
		},
		Files: FileLimits{
			MaxInputBytes:       16 * mib,
			MaxInputCount:       100,
			MaxOutputFileBytes:  8 * mib,
			MaxOutputTotalBytes: 16 * mib,
			MaxOutputCount:      100,
		},
		MaxCodeBytes:         1 * mib,
		MaxStdinBytes:        1 * mib,
		Nofile:               256,
		FileSizeMB:           64,
		ShmMB:                16,
		CaptureRetentionDays: DefaultRetentionDays,
		SessionIdleTimeoutS:  DefaultSessionIdleTimeoutS,
		SessionMaxLifetimeS:  DefaultSessionMaxLifetimeS,
	}
}

// DefaultRetentionDays is how long captures are kept when a profile does
// not say.
const DefaultRetentionDays = 30

// Session bounds when a profile does not say: 10 minutes unused, 1 hour.
const (
	DefaultSessionIdleTimeoutS = 600
	DefaultSessionMaxLifetimeS = 3600
)

// intRule is the allowed range of one integer field, named by its YAML path.
type intRule struct {
	path     string
	min, max int64
	unit     string
	get      func(*Exec) int64
}

// intRules lists every integer field with its allowed range, in file order.
var intRules = []intRule{
	{"limits.timeout_ms", 100, 3_600_000, "ms", func(e *Exec) int64 { return e.Limits.TimeoutMS }},
	{"limits.memory_mb", 16, 65536, "MiB", func(e *Exec) int64 { return e.Limits.MemoryMB }},
	{"limits.pids", 8, 4096, "", func(e *Exec) int64 { return e.Limits.Pids }},
	{"limits.output_bytes", 1, 64 * mib, "bytes", func(e *Exec) int64 { return e.Limits.OutputBytes }},
	{"limits.tmpfs_mb", 1, 4096, "MiB", func(e *Exec) int64 { return e.Limits.TmpfsMB }},
	{"files.max_input_bytes", 0, 64 * mib, "bytes", func(e *Exec) int64 { return e.Files.MaxInputBytes }},
	{"files.max_input_count", 0, 1000, "", func(e *Exec) int64 { return int64(e.Files.MaxInputCount) }},
	{"files.max_output_file_bytes", 0, 64 * mib, "bytes", func(e *Exec) int64 { return e.Files.MaxOutputFileBytes }},
	{"files.max_output_total_bytes", 0, 128 * mib, "bytes", func(e *Exec) int64 { return e.Files.MaxOutputTotalBytes }},
	{"files.max_output_count", 0, 10000, "", func(e *Exec) int64 { return int64(e.Files.MaxOutputCount) }},
	{"max_code_bytes", 1, 16 * mib, "bytes", func(e *Exec) int64 { return e.MaxCodeBytes }},
	{"max_stdin_bytes", 0, 16 * mib, "bytes", func(e *Exec) int64 { return e.MaxStdinBytes }},
	{"nofile", 16, 65536, "", func(e *Exec) int64 { return e.Nofile }},
	{"file_size_mb", 1, 4096, "MiB", func(e *Exec) int64 { return e.FileSizeMB }},
	{"shm_mb", 1, 1024, "MiB", func(e *Exec) int64 { return e.ShmMB }},
	{"capture_retention_days", 0, 3650, "days", func(e *Exec) int64 { return e.CaptureRetentionDays }},
	{"session_idle_timeout_s", 1, 86_400, "s", func(e *Exec) int64 { return e.SessionIdleTimeoutS }},
	{"session_max_lifetime_s", 1, 604_800, "s", func(e *Exec) int64 { return e.SessionMaxLifetimeS }},
	{"cell.max_runs", 1, 100_000, "", func(e *Exec) int64 { return e.Cell.MaxRuns }},
	{"cell.max_age_s", 1, 86_400, "s", func(e *Exec) int64 { return e.Cell.MaxAgeS }},
	{"cell.idle_s", 1, 86_400, "s", func(e *Exec) int64 { return e.Cell.IdleS }},
	{"cell.hosts", 1, 256, "", func(e *Exec) int64 { return e.Cell.Hosts }},
}

const maxCPUs = 64

// allowedRange renders a rule's range for error messages.
func (r intRule) allowedRange() string {
	s := fmt.Sprintf("%d to %d", r.min, r.max)
	switch {
	case r.unit == "bytes" && r.max%mib == 0:
		s += fmt.Sprintf(" bytes (%d MiB)", r.max/mib)
	case r.unit != "":
		s += " " + r.unit
	}
	return s
}

var (
	nameRe    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	userRe    = regexp.MustCompile(`^([0-9]{1,10}):([0-9]{1,10})$`)
	seccompRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*\.json$`)
	moduleRe  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
)

// maxPreload bounds the preload list.
const maxPreload = 32

// MaxSecrets bounds the secrets a profile (or a request) names.
const MaxSecrets = 16

// secretNameRe is a secret's name (internal/secrets).
var secretNameRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,56}$`)

// execRange returns the allowed range of an exec profile's number by its
// path, in words, or "" (for decoding errors).
func execRange(path string) string {
	if path == "limits.cpus" {
		return fmt.Sprintf("more than 0 and at most %d, fractions such as 0.5 included", maxCPUs)
	}
	for _, r := range intRules {
		if r.path == path {
			return r.allowedRange()
		}
	}
	return ""
}

// validate checks e after defaults are applied and records every problem
// in d (at the position of its key; see decoder.problem). fileName is the
// base name of the profile file.
func validate(e *Exec, d *decoder, fileName string) {
	base := strings.TrimSuffix(fileName, ".yaml")
	switch {
	case e.Name == "":
		d.problem("name", "name is required; set name: %s (the file name without .yaml)", base)
	case !nameRe.MatchString(e.Name):
		d.problem("name", "name %q is not allowed; use 1 to 63 lowercase letters, digits and '-', starting with a letter or digit", e.Name)
	case e.Name+".yaml" != fileName:
		d.problem("name", "name %q does not match the file name %q; rename the file to %s.yaml or set name: %s", e.Name, fileName, e.Name, base)
	}

	switch {
	case strings.TrimSpace(e.Image) == "":
		d.problem("image", "image is required; set it to the sandbox image reference, e.g. image: sandboxd/python:3.11")
	case strings.ContainsFunc(e.Image, isSpaceOrControl):
		d.problem("image", "image %q contains spaces or control characters; set an image reference such as sandboxd/python:3.11", e.Image)
	}

	if !slices.Contains(Runtimes, e.Runtime) {
		d.problem("runtime", "runtime %q is not supported; allowed: runc (Linux namespaces and cgroups) or runsc (gVisor: a user-space kernel in front of the host's; install it with `make gvisor`)", e.Runtime)
	}

	if err := validateUser(e.User); err != "" {
		d.problem("user", "user %q is not allowed: %s", e.User, err)
	}

	switch {
	case e.Seccomp == "":
		d.problem("seccomp", "seccomp is required; name a filter file under seccomp/, e.g. seccomp: default.json")
	case !validSeccompName(e.Seccomp):
		d.problem("seccomp", "seccomp %q must be a plain file name under seccomp/ ending in .json (letters, digits, '.', '_', '-'; no directories, no \"..\")", e.Seccomp)
	}

	switch e.Isolation {
	case IsolationContainer:
	case IsolationCell:
		if e.Egress != DefaultEgress {
			d.problem("isolation", "isolation cell needs egress: none: a cell has a network namespace of its own with loopback only, so it cannot reach the egress proxy; use isolation: container for a networked profile")
		}
	default:
		d.problem("isolation", "isolation %q is not known; use container (an engine container per run) or cell (a fresh cell per run in a long-lived host of the tenant's)", e.Isolation)
	}

	// Any egress profile may be named; loadEgress checks that it exists.
	// Other than none, the sandbox joins the egress network and reaches
	// only sandboxd's proxy, which applies that profile.
	if !nameRe.MatchString(e.Egress) {
		d.problem("egress", "egress %q is not an egress profile name; use none (no network) or the name of a file in egress/ without .yaml (1 to 63 lowercase letters, digits and '-')", e.Egress)
	}

	for _, r := range intRules {
		if v := r.get(e); v < r.min || v > r.max {
			d.problem(r.path, "%s is %d; allowed is %s", r.path, v, r.allowedRange())
		}
	}
	if len(e.Preload) > maxPreload {
		d.problem("preload", "preload lists %d modules; at most %d are allowed", len(e.Preload), maxPreload)
	}
	for i, m := range e.Preload {
		if !moduleRe.MatchString(m) {
			d.problem(fmt.Sprintf("preload[%d]", i), "preload[%d] %q is not a Python module name; write dotted identifiers such as numpy or matplotlib.pyplot", i, m)
		}
	}
	if len(e.Secrets) > 0 && e.Egress == DefaultEgress {
		d.problem("secrets", "secrets need network egress: the egress proxy injects them into the run's requests, and egress: none has no network; name an egress profile that allows the secrets' hosts")
	}
	if len(e.Secrets) > MaxSecrets {
		d.problem("secrets", "secrets lists %d names; at most %d are allowed", len(e.Secrets), MaxSecrets)
	}
	for i, s := range e.Secrets {
		switch {
		case !secretNameRe.MatchString(s):
			d.problem(fmt.Sprintf("secrets[%d]", i), "secrets[%d] %q is not a secret name; names are 1 to 57 lower-case letters, digits and '_', starting with a letter, as in the secrets file", i, s)
		case slices.Contains(e.Secrets[:i], s):
			d.problem(fmt.Sprintf("secrets[%d]", i), "secret %q is listed twice", s)
		}
	}
	for i, r := range e.Redact {
		if err := r.Validate(); err != nil {
			d.problem(fmt.Sprintf("redact[%d]", i), "redact[%d]: %v", i, err)
		}
	}
	if c := e.Limits.CPUs; !(c > 0 && c <= maxCPUs) {
		d.problem("limits.cpus", "limits.cpus is %s; allowed is %s", strconv.FormatFloat(c, 'g', -1, 64), execRange("limits.cpus"))
	}
}

// validSeccompName reports whether name is a plain file name of seccomp/.
func validSeccompName(name string) bool {
	return seccompRe.MatchString(name) && !strings.Contains(name, "..")
}

// validateUser checks a "uid:gid" string and returns what is wrong with it,
// or "" when it is fine.
func validateUser(u string) string {
	m := userRe.FindStringSubmatch(u)
	if m == nil {
		return `write it as "uid:gid" with numeric ids, e.g. "65534:65534"`
	}
	for i, what := range [2]string{"uid", "gid"} {
		id, err := strconv.ParseUint(m[i+1], 10, 32)
		if err != nil || id == 0 || id == 1<<32-1 {
			return fmt.Sprintf("%s must be between 1 and 4294967294 (0 is root, which sandboxes never run as)", what)
		}
	}
	return ""
}

func isSpaceOrControl(r rune) bool {
	return r <= ' ' || r == 0x7f
}
