// Package profiles loads and validates the YAML profiles that security teams
// edit: exec job classes (profiles/exec/*.yaml) and the seccomp filters they
// name (profiles/seccomp/*.json).
package profiles

import "github.com/sandboxd/sandboxd/redact"

// Limits are the resource ceilings of an exec job class. A request may lower
// any of them, never raise them.
type Limits struct {
	TimeoutMS   int64   `yaml:"timeout_ms" json:"timeout_ms"`
	MemoryMB    int64   `yaml:"memory_mb" json:"memory_mb"`
	CPUs        float64 `yaml:"cpus" json:"cpus"`
	Pids        int64   `yaml:"pids" json:"pids"`
	OutputBytes int64   `yaml:"output_bytes" json:"output_bytes"`
	TmpfsMB     int64   `yaml:"tmpfs_mb" json:"tmpfs_mb"`
}

// CellLimits bound the cell hosts of a profile (isolation: cell).
type CellLimits struct {
	// MaxRuns is how many runs a host serves before it is replaced.
	MaxRuns int64 `yaml:"max_runs" json:"max_runs"`
	// MaxAgeS is how long a host lives, in seconds, however many runs.
	MaxAgeS int64 `yaml:"max_age_s" json:"max_age_s"`
	// IdleS is how long an unused host is kept before it is removed.
	IdleS int64 `yaml:"idle_s" json:"idle_s"`
	// Hosts is the most hosts one tenant has of this profile at once
	// (runs beyond them wait for a host to be free).
	Hosts int64 `yaml:"hosts" json:"hosts"`
}

// FileLimits cap the files a job may send in and bring back out.
type FileLimits struct {
	// MaxInputBytes caps the decoded size of all input files together.
	MaxInputBytes int64 `yaml:"max_input_bytes" json:"max_input_bytes"`
	// MaxInputCount caps how many input files a request may carry.
	MaxInputCount int `yaml:"max_input_count" json:"max_input_count"`
	// MaxOutputFileBytes caps one file returned from /sandbox/out.
	MaxOutputFileBytes int64 `yaml:"max_output_file_bytes" json:"max_output_file_bytes"`
	// MaxOutputTotalBytes caps all files returned from /sandbox/out together.
	MaxOutputTotalBytes int64 `yaml:"max_output_total_bytes" json:"max_output_total_bytes"`
	// MaxOutputCount caps how many entries of /sandbox/out are reported.
	MaxOutputCount int `yaml:"max_output_count" json:"max_output_count"`
}

// Exec is one exec job class, loaded from profiles/exec/NAME.yaml. The
// JSON names are what Version hashes: renaming one changes every
// profile's version.
type Exec struct {
	Name        string `yaml:"name" json:"name"`
	Description string `yaml:"description" json:"description"`
	// Image is the sandbox image reference, e.g. sandboxd/python:3.11.
	Image string `yaml:"image" json:"image"`
	// Runtime is the OCI runtime the engine runs the container with: "runc"
	// or "runsc" (gVisor), see Runtimes. Never empty after loading.
	Runtime string `yaml:"runtime" json:"runtime"`
	// User is the uid:gid the code runs as; never 0.
	User string `yaml:"user" json:"user"`
	// Seccomp names a file under profiles/seccomp/.
	Seccomp string `yaml:"seccomp" json:"seccomp"`
	// Egress names the egress profile; "none" means no network at all.
	Egress string `yaml:"egress" json:"egress"`
	// Isolation is how each run is isolated: IsolationContainer (an
	// engine container of its own) or IsolationCell (a fresh cell in a
	// long-lived cell host that serves one tenant and this profile only).
	Isolation string `yaml:"isolation" json:"isolation"`
	// Cell bounds the cell hosts of a profile with isolation cell.
	Cell CellLimits `yaml:"cell" json:"cell"`

	Limits Limits     `yaml:"limits" json:"limits"`
	Files  FileLimits `yaml:"files" json:"files"`

	// MaxCodeBytes caps the size of the code field.
	MaxCodeBytes int64 `yaml:"max_code_bytes" json:"max_code_bytes"`
	// MaxStdinBytes caps the size of the stdin field.
	MaxStdinBytes int64 `yaml:"max_stdin_bytes" json:"max_stdin_bytes"`
	// Nofile is the open-files ulimit (soft and hard).
	Nofile int64 `yaml:"nofile" json:"nofile"`
	// FileSizeMB is the file-size ulimit: no single file written may grow past it.
	FileSizeMB int64 `yaml:"file_size_mb" json:"file_size_mb"`
	// ShmMB is the size of /dev/shm.
	ShmMB int64 `yaml:"shm_mb" json:"shm_mb"`
	// Preload lists Python modules the waiting interpreter of a pooled
	// sandbox imports before the job arrives, e.g. [numpy, pandas].
	Preload []string `yaml:"preload" json:"preload,omitempty"`
	// Redact adds secret patterns to the built-in ones for what an exec
	// returns under this profile (stdout, stderr, returned text files).
	Redact []redact.Rule `yaml:"redact" json:"redact,omitempty"`
	// Secrets names secrets of the secrets file (--secrets-file) every exec
	// under this profile may use: its run gets a placeholder for each, which
	// the egress proxy replaces with the value on the way to where the
	// secret may go. Needs an egress profile other than none.
	Secrets []string `yaml:"secrets" json:"secrets,omitempty"`
	// CaptureRetentionDays is how long an exec's capture (code, input,
	// outputs) is kept; 0 keeps it until it is erased.
	CaptureRetentionDays int64 `yaml:"capture_retention_days" json:"capture_retention_days"`
	// SessionIdleTimeoutS and SessionMaxLifetimeS bound a session (POST
	// /sessions) of this profile: how long it may sit unused and how long
	// it may live, in seconds. A session that asks for neither gets these.
	SessionIdleTimeoutS int64 `yaml:"session_idle_timeout_s" json:"session_idle_timeout_s"`
	SessionMaxLifetimeS int64 `yaml:"session_max_lifetime_s" json:"session_max_lifetime_s"`

	// Version is the sha256 (hex) of the profile's normalised content,
	// including the seccomp filter it names. Set by the loader.
	Version string `yaml:"-" json:"-"`
	// SeccompJSON is the content of the named seccomp file. Set by the loader.
	SeccompJSON []byte `yaml:"-" json:"-"`
	// Source is the file the profile was loaded from. Set by the loader.
	Source string `yaml:"-" json:"-"`
}
