package e2e

import (
	"encoding/base64"
	"strings"
)

// The suites' own view of the wire: what a client sends and reads back.
// Only the fields the suites look at are here.

// ExecRequest is the body of POST /exec.
type ExecRequest struct {
	Language string            `json:"language,omitempty"`
	Code     string            `json:"code"`
	Stdin    string            `json:"stdin,omitempty"`
	Files    []InFile          `json:"files,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Profile  string            `json:"profile,omitempty"`
	Limits   map[string]any    `json:"limits,omitempty"`
}

// Py is a Python ExecRequest of code with the default profile.
func Py(code string) ExecRequest { return ExecRequest{Language: "python", Code: code} }

// InFile is a file of an ExecRequest, its content in base64.
type InFile struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// ExecLimits are the limits a run had.
type ExecLimits struct {
	TimeoutMS   int64   `json:"timeout_ms"`
	MemoryMB    int64   `json:"memory_mb"`
	CPUs        float64 `json:"cpus"`
	Pids        int64   `json:"pids"`
	OutputBytes int64   `json:"output_bytes"`
	TmpfsMB     int64   `json:"tmpfs_mb"`
}

// OutFile is a file a run left in /sandbox/out, its content in base64.
type OutFile struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Mode    string `json:"mode"`
	Content string `json:"content"`
}

// SkippedFile is a file of /sandbox/out that was not returned, and why.
type SkippedFile struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// ExecUsage is what a run used.
type ExecUsage struct {
	UserCPUMS int64 `json:"user_cpu_ms"`
	SysCPUMS  int64 `json:"sys_cpu_ms"`
	MaxRSSKB  int64 `json:"max_rss_kb"`
}

// ExecResponse is the 200 answer of POST /exec (and a session call's
// common part).
type ExecResponse struct {
	ID              string        `json:"id"`
	Status          string        `json:"status"`
	ExitCode        int           `json:"exit_code"`
	Signal          string        `json:"signal"`
	Message         string        `json:"message"`
	Stdout          string        `json:"stdout"`
	Stderr          string        `json:"stderr"`
	StdoutBase64    *string       `json:"stdout_base64"`
	StderrBase64    *string       `json:"stderr_base64"`
	StdoutTruncated bool          `json:"stdout_truncated"`
	StderrTruncated bool          `json:"stderr_truncated"`
	DurationMS      int64         `json:"duration_ms"`
	Usage           ExecUsage     `json:"usage"`
	Files           []OutFile     `json:"files"`
	SkippedFiles    []SkippedFile `json:"skipped_files"`
	Limits          ExecLimits    `json:"limits"`
	Profile         struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"profile"`
	Image string `json:"image"`
	// Redactions counts the secrets removed from the answer, by type.
	Redactions map[string]int `json:"redactions"`
}

// File returns the returned file at path, or nil.
func (r *ExecResponse) File(path string) *OutFile {
	for i := range r.Files {
		if r.Files[i].Path == path {
			return &r.Files[i]
		}
	}
	return nil
}

// Skipped returns the skipped file at path, or nil.
func (r *ExecResponse) Skipped(path string) *SkippedFile {
	for i := range r.SkippedFiles {
		if r.SkippedFiles[i].Path == path {
			return &r.SkippedFiles[i]
		}
	}
	return nil
}

// Decoded returns the base64 outputs (stdout, stderr when not UTF-8) and
// the returned files' contents, decoded and concatenated: what to search
// for a value that must not come back in any form.
func (r *ExecResponse) Decoded() string {
	var b strings.Builder
	for _, p := range []*string{r.StdoutBase64, r.StderrBase64} {
		if p != nil {
			d, _ := base64.StdEncoding.DecodeString(*p)
			b.Write(d)
		}
	}
	for _, f := range r.Files {
		d, _ := base64.StdEncoding.DecodeString(f.Content)
		b.Write(d)
	}
	return b.String()
}

// ErrorBody is the body of an error answer.
type ErrorBody struct {
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	} `json:"error"`
}

// Readiness is the body of GET /readyz.
type Readiness struct {
	Status      string       `json:"status"`
	Checks      []ReadyCheck `json:"checks"`
	Unavailable []string     `json:"unavailable_profiles"`
}

// ReadyCheck is one entry of Readiness.Checks.
type ReadyCheck struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Optional bool   `json:"optional"`
	Error    string `json:"error"`
}

// Check returns the check named name, or nil.
func (r *Readiness) Check(name string) *ReadyCheck {
	for i := range r.Checks {
		if r.Checks[i].Name == name {
			return &r.Checks[i]
		}
	}
	return nil
}

// CleanRelPath reports whether p is relative, without empty, "." or ".."
// elements: a path the service may name inside /sandbox/out.
func CleanRelPath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") {
		return false
	}
	for _, e := range strings.Split(p, "/") {
		if e == "" || e == "." || e == ".." {
			return false
		}
	}
	return true
}
