package runner

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/profiles"
)

// ErrRuntimeMissing means a profile names an OCI runtime (e.g. runsc) that
// the engine does not offer. The run is refused: sandboxd never falls back
// to another runtime, least of all to a weaker one.
var ErrRuntimeMissing = errors.New("container runtime is not available")

// RuntimeError is the error for a run whose profile names a runtime the
// engine does not offer. errors.Is(err, ErrRuntimeMissing) holds for it.
type RuntimeError struct {
	Runtime string // as the profile names it
	Profile string
	// Engine is the engine's own message, for the log.
	Engine string
}

func (e *RuntimeError) Error() string {
	return fmt.Sprintf("profile %q runs under the container runtime %q, which the engine does not offer; %s. Requests naming this profile are refused until then; there is no fallback to another runtime",
		e.Profile, e.Runtime, RuntimeHint(e.Runtime))
}

func (e *RuntimeError) Unwrap() error { return ErrRuntimeMissing }

// RuntimeHint says what makes a runtime available to the engine.
func RuntimeHint(runtime string) string {
	if runtime == profiles.RuntimeRunsc {
		return "install gVisor and register it with the engine by running `make gvisor` on the engine's host"
	}
	return fmt.Sprintf("register %q in the engine's daemon.json (\"runtimes\") and reload the engine", runtime)
}

// createError maps an engine error from creating spec's container: an
// unknown runtime becomes a *RuntimeError, anything else ErrEngine.
func createError(err error, spec *Spec) error {
	if rt := spec.Profile.Runtime; isUnknownRuntime(err, rt) {
		return &RuntimeError{Runtime: rt, Profile: spec.Profile.Name, Engine: err.Error()}
	}
	return fmt.Errorf("%w: creating container: %v", ErrEngine, err)
}

// isUnknownRuntime recognises the engine refusing a container because it
// does not know its runtime. Engine 20.10 says "Unknown runtime specified
// runsc"; later engines say "unknown or invalid runtime name: runsc".
func isUnknownRuntime(err error, runtime string) bool {
	if err == nil || runtime == "" {
		return false
	}
	msg := strings.ToLower(err.Error())
	rt := strings.ToLower(runtime)
	for _, prefix := range []string{"unknown runtime specified ", "unknown or invalid runtime name: "} {
		if i := strings.Index(msg, prefix); i >= 0 {
			name := strings.Fields(msg[i+len(prefix):])
			return len(name) > 0 && strings.Trim(name[0], `"'.,;:`) == rt
		}
	}
	return false
}

// runscPidsOverhead is added to the pids limit of a container under runsc.
// There the container's pids cgroup holds gVisor's own kernel (the Sentry,
// a Go program) and its ptrace stubs, not the code's processes one for one:
// measured on 2 CPUs, an idle sandbox holds about 40 host tasks and one with
// a 4-process multiprocessing pool about 75, while 500 threads of the code
// add almost none. Reaching the limit ends the whole sandbox (the run is
// reported as killed) rather than failing one fork, so the limit bounds a
// fork bomb but is not the code's exact process count.
const runscPidsOverhead = 64

// runtimePidsOverhead is what the runtime itself needs in the container's
// pids cgroup, on top of pidsOverhead.
func runtimePidsOverhead(runtime string) int64 {
	if runtime == profiles.RuntimeRunsc {
		return runscPidsOverhead
	}
	return 0
}
