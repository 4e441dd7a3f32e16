// Package imagebuild reads the progress of sandbox image builds that run
// beside sandboxd (make run builds the images of the non-default profiles
// in the background), so that a profile whose image is not there yet can
// say how far its build is instead of only that the image is missing.
//
// A build writes one JSON file per image into a directory (by default
// <data-dir>/image-builds), named by FileName; images/status.sh writes it.
package imagebuild

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// States of a build.
const (
	Building = "building"
	Failed   = "failed"
	Done     = "done"
)

// StaleAfter is how long a build may say "building" without a newer word
// before it is taken for dead (a killed build script cannot write
// "failed"). The slowest step, the data image's package download and
// install, takes minutes, not an hour.
const StaleAfter = time.Hour

// Status is what a build last wrote about itself.
type Status struct {
	Image string `json:"image"`
	// State is Building, Failed or Done.
	State string `json:"state"`
	// Step names what the build is doing, StepNumber of Steps.
	Step       string    `json:"step"`
	StepNumber int       `json:"step_number"`
	Steps      int       `json:"steps"`
	Started    time.Time `json:"started"`
	Updated    time.Time `json:"updated"`
	// Log is the build's output file, when it has one.
	Log string `json:"log,omitempty"`
}

// FileName is the status file of image ref: the reference with every
// character other than letters, digits, '.', '-' and '_' replaced by '_',
// and ".json".
func FileName(ref string) string {
	var b strings.Builder
	for _, r := range ref {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String() + ".json"
}

// Read returns the status of the build of image ref in dir, or nil when no
// build of it was recorded there (no directory, no file). A file that is
// not a status of ref is an error.
func Read(dir, ref string) (*Status, error) {
	if dir == "" {
		return nil, nil
	}
	data, err := os.ReadFile(filepath.Join(dir, FileName(ref)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the build status of %s: %w", ref, err)
	}
	var s Status
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("build status of %s in %s: %w", ref, dir, err)
	}
	if s.Image != ref {
		return nil, fmt.Errorf("build status file %s names image %q, not %q", FileName(ref), s.Image, ref)
	}
	switch s.State {
	case Building, Failed, Done:
	default:
		return nil, fmt.Errorf("build status of %s: unknown state %q", ref, s.State)
	}
	return &s, nil
}

// Describe says, for an error message about a missing image, where its
// build stands at now: "being built: step 2 of 3 (...), 3m10s so far", "its
// build failed ...; see LOG", or "" when there is nothing to tell (no
// status, a build that says it is done, or one that went silent).
func (s *Status) Describe(now time.Time) string {
	if s == nil {
		return ""
	}
	log := ""
	if s.Log != "" {
		log = "; its log is " + s.Log
	}
	switch s.State {
	case Building:
		if now.Sub(s.Updated) > StaleAfter {
			return ""
		}
		step := ""
		if s.Steps > 0 {
			step = fmt.Sprintf(": step %d of %d", s.StepNumber, s.Steps)
		}
		if s.Step != "" {
			step += " (" + s.Step + ")"
		}
		return fmt.Sprintf("it is being built%s, %s so far%s", step, now.Sub(s.Started).Round(time.Second), log)
	case Failed:
		what := ""
		if s.Step != "" {
			what = " while " + s.Step
		}
		return fmt.Sprintf("its build failed%s at %s%s", what, s.Updated.UTC().Format(time.TimeOnly+" MST"), log)
	}
	return ""
}
