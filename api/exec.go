package api

import "time"

// ExecRequest is the body of POST /exec.
type ExecRequest struct {
	Language string            `json:"language"`
	Code     *string           `json:"code"`
	Stdin    string            `json:"stdin"`
	Files    []InFile          `json:"files"`
	Env      map[string]string `json:"env"`
	Profile  string            `json:"profile"`
	Limits   *LimitsRequest    `json:"limits"`
	// Datasets are mounted read-only at /data/<name>.
	Datasets []string `json:"datasets,omitempty"`
	// Secrets names secrets of the secrets file the run may use (besides
	// its exec profile's): the run's environment gets a placeholder
	// SANDBOXD_SECRET_<NAME> for each, which the egress proxy replaces
	// with the value where the secret is applied. Needs a profile with
	// network egress.
	Secrets []string `json:"secrets,omitempty"`
	// Async answers 202 with the id at once; GET /exec/{id} gives the result.
	Async bool `json:"async"`
}

// InFile is an input file; Content is base64 (standard alphabet, padded).
type InFile struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// LimitsRequest lowers the profile's limits; an omitted field keeps the
// profile's value.
type LimitsRequest struct {
	TimeoutMS   *int64   `json:"timeout_ms"`
	MemoryMB    *int64   `json:"memory_mb"`
	CPUs        *float64 `json:"cpus"`
	Pids        *int64   `json:"pids"`
	OutputBytes *int64   `json:"output_bytes"`
	TmpfsMB     *int64   `json:"tmpfs_mb"`
}

// ExecResponse is the body of a 200 from POST /exec.
type ExecResponse struct {
	ID              string        `json:"id"`
	Status          string        `json:"status"`
	ExitCode        int           `json:"exit_code"`
	Signal          string        `json:"signal"`
	Message         string        `json:"message,omitempty"`
	Stdout          string        `json:"stdout"`
	Stderr          string        `json:"stderr"`
	StdoutBase64    string        `json:"stdout_base64,omitempty"`
	StderrBase64    string        `json:"stderr_base64,omitempty"`
	StdoutTruncated bool          `json:"stdout_truncated"`
	StderrTruncated bool          `json:"stderr_truncated"`
	DurationMS      int64         `json:"duration_ms"`
	Usage           Usage         `json:"usage"`
	Files           []OutFile     `json:"files"`
	SkippedFiles    []SkippedFile `json:"skipped_files"`
	Limits          Limits        `json:"limits"`
	Profile         ProfileRef    `json:"profile"`
	// Egress names the egress profile in force for the run's network, with
	// its version (each decision's version is in the egress log).
	Egress *ProfileRef `json:"egress,omitempty"`
	Image  string      `json:"image"`
	// Redactions counts the secrets removed from stdout, stderr and
	// returned text files, by type.
	Redactions map[string]int `json:"redactions"`
	// Datasets the run mounted, with the snapshot id of their content.
	Datasets []DatasetRef `json:"datasets,omitempty"`
}

// DatasetRef names a mounted dataset and the snapshot of its content.
type DatasetRef struct {
	Name     string `json:"name"`
	Snapshot string `json:"snapshot"`
}

// Usage is the resource use the launcher measured.
type Usage struct {
	UserCPUMS int64 `json:"user_cpu_ms"`
	SysCPUMS  int64 `json:"sys_cpu_ms"`
	MaxRSSKB  int64 `json:"max_rss_kb"`
}

// OutFile is a file returned from /sandbox/out; Content is base64.
type OutFile struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Mode    string `json:"mode"`
	Content string `json:"content"`
}

// SkippedFile is an entry of /sandbox/out that was not returned.
type SkippedFile struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// ProfileRef names a profile and the version that served the request.
type ProfileRef struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// ExecState is the body of GET and DELETE /exec/{id} and of the 202 that
// accepts an async exec.
type ExecState struct {
	ID string `json:"id"`
	// Status is queued, running, a run status (ok, error, timeout, oom,
	// killed), failed (the run could not start) or interrupted.
	Status     string        `json:"status"`
	Message    string        `json:"message,omitempty"`
	Error      *Error        `json:"error,omitempty"`
	Result     *ExecResponse `json:"result,omitempty"`
	CreatedAt  time.Time     `json:"created_at"`
	StartedAt  *time.Time    `json:"started_at,omitempty"`
	FinishedAt *time.Time    `json:"finished_at,omitempty"`
}

// Limits are the effective limits of a run: the profile's, lowered by the
// request's.
type Limits struct {
	TimeoutMS   int64   `json:"timeout_ms"`
	MemoryMB    int64   `json:"memory_mb"`
	CPUs        float64 `json:"cpus"`
	Pids        int64   `json:"pids"`
	OutputBytes int64   `json:"output_bytes"`
	TmpfsMB     int64   `json:"tmpfs_mb"`
}
