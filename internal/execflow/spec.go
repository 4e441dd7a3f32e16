package execflow

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/runner"
)

var envNamePattern = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)

// Limits on the env field.
const (
	maxEnvVars     = 64
	maxEnvValueLen = 32 << 10
)

// Spec validates the request against its profile and returns the run.
func (f *Flow) Spec(req *api.ExecRequest) (*runner.Spec, error) {
	switch req.Language {
	case "python":
	case "":
		return nil, api.Validation("language", `language is required; the only supported value is "python"`)
	default:
		return nil, api.Validation("language", `unsupported language %q; the only supported value is "python"`, req.Language)
	}
	name := req.Profile
	if name == "" {
		name = "default"
	}
	set := f.profiles()
	prof, ok := set.Exec[name]
	if !ok {
		return nil, api.Validation("profile", "no exec profile named %q; available: %s", name, strings.Join(set.Names(), ", "))
	}
	if req.Code == nil {
		return nil, api.Validation("code", "code is required: the Python source to run")
	}
	if int64(len(*req.Code)) > prof.MaxCodeBytes {
		return nil, api.Validation("code", "code is %d bytes; profile %q allows at most %d", len(*req.Code), prof.Name, prof.MaxCodeBytes)
	}
	if int64(len(req.Stdin)) > prof.MaxStdinBytes {
		return nil, api.Validation("stdin", "stdin is %d bytes; profile %q allows at most %d", len(req.Stdin), prof.Name, prof.MaxStdinBytes)
	}
	limits, err := EffectiveLimits(prof, req.Limits)
	if err != nil {
		return nil, err
	}
	files, err := DecodeFiles(prof, limits, req.Files)
	if err != nil {
		return nil, err
	}
	if err := checkEnv(req.Env); err != nil {
		return nil, err
	}
	return &runner.Spec{
		ID:      runner.NewExecID(),
		Profile: prof,
		Limits:  limits,
		Redact:  f.Redactor(prof),
		Job: jobproto.Job{
			Code:             []byte(*req.Code),
			Stdin:            []byte(req.Stdin),
			Files:            files,
			Env:              req.Env,
			TimeoutMS:        limits.TimeoutMS,
			OutputBytes:      limits.OutputBytes,
			MaxOutFileBytes:  prof.Files.MaxOutputFileBytes,
			MaxOutTotalBytes: prof.Files.MaxOutputTotalBytes,
			MaxOutCount:      prof.Files.MaxOutputCount,
		},
	}, nil
}

// EffectiveLimits lowers the profile's limits by the request's; a value above
// the profile's ceiling, or below a workable floor, is refused.
func EffectiveLimits(p *profiles.Exec, r *api.LimitsRequest) (profiles.Limits, error) {
	l := p.Limits
	if r == nil {
		return l, nil
	}
	lowerInt := func(field string, v *int64, ceiling, floor int64, dst *int64) error {
		if v == nil {
			return nil
		}
		switch {
		case *v > ceiling:
			return api.Validation("limits."+field, "%d is above the ceiling of %d set by profile %q; a request may only lower limits", *v, ceiling, p.Name)
		case *v < floor:
			return api.Validation("limits."+field, "%d is below the minimum of %d", *v, floor)
		}
		*dst = *v
		return nil
	}
	for _, f := range []struct {
		name           string
		v              *int64
		ceiling, floor int64
		dst            *int64
	}{
		{"timeout_ms", r.TimeoutMS, p.Limits.TimeoutMS, 1, &l.TimeoutMS},
		{"memory_mb", r.MemoryMB, p.Limits.MemoryMB, 16, &l.MemoryMB},
		{"pids", r.Pids, p.Limits.Pids, 1, &l.Pids},
		{"output_bytes", r.OutputBytes, p.Limits.OutputBytes, 0, &l.OutputBytes},
		{"tmpfs_mb", r.TmpfsMB, p.Limits.TmpfsMB, 1, &l.TmpfsMB},
	} {
		if err := lowerInt(f.name, f.v, f.ceiling, f.floor, f.dst); err != nil {
			return l, err
		}
	}
	if r.CPUs != nil {
		switch v := *r.CPUs; {
		case v > p.Limits.CPUs:
			return l, api.Validation("limits.cpus", "%g is above the ceiling of %g set by profile %q; a request may only lower limits", v, p.Limits.CPUs, p.Name)
		case v < 0.01:
			return l, api.Validation("limits.cpus", "%g is below the minimum of 0.01", v)
		}
		l.CPUs = *r.CPUs
	}
	return l, nil
}

func DecodeFiles(p *profiles.Exec, l profiles.Limits, in []api.InFile) ([]jobproto.File, error) {
	if len(in) > p.Files.MaxInputCount {
		return nil, api.Validation("files", "%d files sent; profile %q allows at most %d", len(in), p.Name, p.Files.MaxInputCount)
	}
	out := make([]jobproto.File, 0, len(in))
	seen := map[string]bool{}
	var total int64
	for i, f := range in {
		field := fmt.Sprintf("files[%d]", i)
		if err := jobproto.CheckPath(f.Path); err != nil {
			return nil, api.Validation(field+".path", "%q: %v", f.Path, err)
		}
		if f.Path == "out" {
			return nil, api.Validation(field+".path", `"out" is the output directory; put input files elsewhere or inside it`)
		}
		if reservedFile(f.Path) {
			return nil, api.Validation(field+".path", "%q is under %s/, which sandboxd writes into (the egress proxy's CA for runs with secrets); put input files elsewhere", f.Path, sandboxdDir)
		}
		if seen[f.Path] {
			return nil, api.Validation(field+".path", "%q is given twice", f.Path)
		}
		seen[f.Path] = true
		content, err := base64.StdEncoding.DecodeString(f.Content)
		if err != nil {
			return nil, api.Validation(field+".content", "content must be standard base64: %v", err)
		}
		total += int64(len(content))
		if total > p.Files.MaxInputBytes {
			return nil, api.Validation("files", "input files total more than the %d bytes profile %q allows", p.Files.MaxInputBytes, p.Name)
		}
		out = append(out, jobproto.File{Path: f.Path, Content: content})
	}
	// A path that is also a directory of another path cannot be written.
	for path := range seen {
		for dir := path; ; {
			i := strings.LastIndexByte(dir, '/')
			if i < 0 {
				break
			}
			dir = dir[:i]
			if seen[dir] {
				return nil, api.Validation("files", "%q is a file and also the directory of %q", dir, path)
			}
		}
	}
	if total > (l.TmpfsMB<<20)*3/4 {
		return nil, api.Validation("files", "input files (%d bytes) do not fit in the %d MiB /sandbox scratch space", total, l.TmpfsMB)
	}
	return out, nil
}

func checkEnv(env map[string]string) error {
	if len(env) > maxEnvVars {
		return api.Validation("env", "%d variables sent; at most %d are allowed", len(env), maxEnvVars)
	}
	for k, v := range env {
		field := "env." + k
		switch {
		case !envNamePattern.MatchString(k):
			return api.Validation("env", "variable name %q is not allowed: names match [A-Z_][A-Z0-9_]*", k)
		case k == "PATH" || k == "HOME" || strings.HasPrefix(k, "PYTHON") || strings.HasPrefix(k, "LD_"):
			return api.Validation(field, "%s may not be overridden (PATH, HOME, PYTHON* and LD_* are reserved)", k)
		case strings.HasPrefix(k, secrets.EnvPrefix):
			return api.Validation(field, "%s* is reserved for the placeholders of the secrets a run names (\"secrets\": [...]); a request cannot set them", secrets.EnvPrefix)
		case len(v) > maxEnvValueLen:
			return api.Validation(field, "value is %d bytes; at most %d are allowed", len(v), maxEnvValueLen)
		case strings.IndexByte(v, 0) >= 0:
			return api.Validation(field, "value contains a NUL byte")
		}
	}
	return nil
}

func ToResponse(spec *runner.Spec, res *runner.Result) *api.ExecResponse {
	r := &api.ExecResponse{
		ID:              spec.ID,
		Status:          res.Status,
		ExitCode:        res.ExitCode,
		Signal:          res.Signal,
		Message:         res.Message,
		StdoutTruncated: res.StdoutTruncated,
		StderrTruncated: res.StderrTruncated,
		DurationMS:      res.Duration.Milliseconds(),
		Usage:           api.Usage{UserCPUMS: res.UserCPU.Milliseconds(), SysCPUMS: res.SysCPU.Milliseconds(), MaxRSSKB: res.MaxRSSKB},
		Files:           []api.OutFile{},
		SkippedFiles:    []api.SkippedFile{},
		Limits:          api.Limits(spec.Limits),
		Profile:         api.ProfileRef{Name: spec.Profile.Name, Version: spec.Profile.Version},
		Image:           res.ImageID,
		Redactions:      res.Redactions,
	}
	if r.Redactions == nil {
		r.Redactions = map[string]int{}
	}
	r.Stdout, r.StdoutBase64 = textOf(res.Stdout, res.StdoutTruncated)
	r.Stderr, r.StderrBase64 = textOf(res.Stderr, res.StderrTruncated)
	for _, f := range res.Files {
		r.Files = append(r.Files, *OutFile(f.Path, f.Mode, f.Content))
	}
	for _, sk := range res.Skipped {
		r.SkippedFiles = append(r.SkippedFiles, api.SkippedFile{Path: sk.Path, Reason: sk.Reason})
	}
	return r
}

// textOf returns output as valid UTF-8 text; when the bytes are not valid
// UTF-8 it also returns them exactly, as base64. A multi-byte character cut
// by truncation at the end does not count as invalid.
func textOf(b []byte, truncated bool) (string, string) {
	check := b
	if truncated {
		for i := 0; i < utf8.UTFMax && len(check) > 0; i++ {
			if r, _ := utf8.DecodeLastRune(check); r != utf8.RuneError {
				break
			}
			check = check[:len(check)-1]
		}
		if utf8.Valid(check) {
			return string(check), ""
		}
	}
	if utf8.Valid(b) {
		return string(b), ""
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), base64.StdEncoding.EncodeToString(b)
}

// maxDatasets bounds the datasets one exec mounts.
const maxDatasets = 8

// AttachDatasets checks the datasets an exec names (each declared, each
// allowed to the key's tenant: 403 otherwise), takes their snapshot ids
// and adds their mounts to spec.
func (f *Flow) AttachDatasets(spec *runner.Spec, names []string, key *auth.Key) ([]api.DatasetRef, error) {
	if len(names) == 0 {
		return nil, nil
	}
	if len(names) > maxDatasets {
		return nil, api.Validation("datasets", "%d datasets named; at most %d may be mounted", len(names), maxDatasets)
	}
	set := f.profiles()
	var refs []api.DatasetRef
	for i, name := range names {
		if slices.Contains(names[:i], name) {
			return nil, api.Validation("datasets", "dataset %q is named twice", name)
		}
		ds := set.Datasets[name]
		if ds == nil {
			known := set.DatasetNames()
			list := "none are declared"
			if len(known) > 0 {
				list = "declared: " + strings.Join(known, ", ")
			}
			return nil, api.Validation("datasets", "dataset %q does not exist (%s)", name, list)
		}
		if !ds.Allows(key.Tenant) {
			return nil, &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Field: "datasets",
				Message: fmt.Sprintf("tenant %s may not use dataset %q; ask the operator to add it to the dataset's tenants", key.Tenant, name)}
		}
		snap, err := f.snapshots.Snapshot(ds.Path)
		if err != nil {
			f.cfg.Log.Error("computing a dataset snapshot failed", "dataset", name, "err", err)
			return nil, &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Field: "datasets",
				Message: fmt.Sprintf("dataset %q cannot be read on the host right now; the operator's log says why", name)}
		}
		refs = append(refs, api.DatasetRef{Name: name, Snapshot: snap})
		spec.Datasets = append(spec.Datasets, runner.DatasetMount{Name: name, Path: ds.Path})
	}
	return refs, nil
}

// OutFile is a returned file as the API shows it.
func OutFile(path string, mode uint32, content []byte) *api.OutFile {
	return &api.OutFile{Path: path, Size: int64(len(content)), Mode: fmt.Sprintf("%04o", mode), Content: base64.StdEncoding.EncodeToString(content)}
}
