package profiles

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/internal/seccompfile"
	"github.com/sandboxd/sandboxd/internal/yamlfile"
)

// denyActions are the default actions that refuse what the profile does not
// list. A filter that allows by default would not confine anything.
var denyActions = map[string]bool{
	"SCMP_ACT_ERRNO":        true,
	"SCMP_ACT_KILL":         true,
	"SCMP_ACT_KILL_PROCESS": true,
	"SCMP_ACT_KILL_THREAD":  true,
	"SCMP_ACT_TRAP":         true,
}

// ruleActions are the actions a syscall rule may take.
var ruleActions = map[string]bool{
	"SCMP_ACT_ALLOW":        true,
	"SCMP_ACT_ERRNO":        true,
	"SCMP_ACT_KILL":         true,
	"SCMP_ACT_KILL_PROCESS": true,
	"SCMP_ACT_KILL_THREAD":  true,
	"SCMP_ACT_TRAP":         true,
	"SCMP_ACT_TRACE":        true,
	"SCMP_ACT_LOG":          true,
}

var argOps = map[string]bool{
	"SCMP_CMP_NE":        true,
	"SCMP_CMP_LT":        true,
	"SCMP_CMP_LE":        true,
	"SCMP_CMP_EQ":        true,
	"SCMP_CMP_GE":        true,
	"SCMP_CMP_GT":        true,
	"SCMP_CMP_MASKED_EQ": true,
}

var unknownField = regexp.MustCompile(`^json: unknown field "(.*)"$`)

// checkSeccomp validates the content of a seccomp profile file.
func checkSeccomp(file string, data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p seccompfile.Profile
	if err := dec.Decode(&p); err != nil {
		return seccompDecodeError(file, data, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &Error{File: file, Line: lineAt(data, dec.InputOffset()), Msg: "unexpected content after the JSON object; a seccomp file holds exactly one object"}
	}
	fail := func(format string, args ...any) error {
		return &Error{File: file, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case p.DefaultAction == nil:
		return fail(`defaultAction is missing; set "defaultAction": "SCMP_ACT_ERRNO" so that unlisted syscalls are denied`)
	case !denyActions[*p.DefaultAction]:
		return fail("defaultAction %q is not allowed; use one that denies unlisted syscalls: SCMP_ACT_ERRNO (recommended), SCMP_ACT_KILL_PROCESS, SCMP_ACT_KILL_THREAD, SCMP_ACT_KILL or SCMP_ACT_TRAP", *p.DefaultAction)
	}
	// Docker Engine 20.10 drops defaultErrnoRet on the way to runc (tested:
	// a profile with 13 still yields EPERM), and runc denies with EPERM.
	if p.DefaultErrnoRet != nil && *p.DefaultErrnoRet != 1 {
		return &Error{File: file, Line: lineOfKey(data, "defaultErrnoRet"), Msg: fmt.Sprintf("defaultErrnoRet %d would be ignored: Docker Engine 20.10 always denies with EPERM; set 1 (EPERM) or remove it", *p.DefaultErrnoRet)}
	}
	for i, s := range p.Syscalls {
		if s.Name == "" && len(s.Names) == 0 {
			return fail("syscalls[%d] names no syscall; set \"names\": [...]", i)
		}
		for _, n := range s.AllNames() {
			if n == "" || strings.ContainsFunc(n, isSpaceOrControl) {
				return fail("syscalls[%d] has the syscall name %q; names must be non-empty and without spaces", i, n)
			}
		}
		if !ruleActions[s.Action] {
			return fail("syscalls[%d] (%s) has action %q; allowed actions: %s", i, ruleName(s), s.Action, keys(ruleActions))
		}
		for _, a := range s.Args {
			if !argOps[a.Op] {
				return fail("syscalls[%d] (%s) has argument op %q; allowed ops: %s", i, ruleName(s), a.Op, keys(argOps))
			}
			if a.Index > 5 {
				return fail("syscalls[%d] (%s) filters argument index %d; syscalls have arguments 0 to 5", i, ruleName(s), a.Index)
			}
		}
	}
	return nil
}

func ruleName(s seccompfile.Rule) string {
	if len(s.Names) > 0 {
		return strings.Join(s.Names, ", ")
	}
	return s.Name
}

func keys(m map[string]bool) string {
	return strings.Join(slices.Sorted(maps.Keys(m)), ", ")
}

// seccompFields are the fields of a seccomp file and of its rules, for
// "did you mean" hints.
var seccompFields = []string{"defaultAction", "defaultErrnoRet", "architectures", "archMap", "syscalls",
	"architecture", "subArchitectures", "name", "names", "action", "errnoRet", "args", "comment", "includes", "excludes",
	"index", "value", "valueTwo", "op", "caps", "arches", "minKernel"}

// seccompDecodeError turns a JSON decoding error into an *Error with the
// line it happened on, where the decoder tells.
func seccompDecodeError(file string, data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return &Error{File: file, Msg: "file is empty; a seccomp file is a JSON object with at least \"defaultAction\""}
	case errors.As(err, &syn):
		return &Error{File: file, Line: lineAt(data, syn.Offset), Msg: "invalid JSON: " + syn.Error()}
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return &Error{File: file, Line: lineAt(data, typ.Offset), Msg: fmt.Sprintf("must be a JSON object, got a JSON %s", typ.Value)}
		}
		return &Error{File: file, Line: lineAt(data, typ.Offset), Msg: fmt.Sprintf("field %s has the wrong type: got a JSON %s, want %s", field, typ.Value, jsonKind(typ.Type.String()))}
	}
	if m := unknownField.FindStringSubmatch(err.Error()); m != nil {
		hint := ""
		if g := yamlfile.Suggest(m[1], seccompFields); g != "" {
			hint = "; did you mean " + g + "?"
		}
		return &Error{File: file, Line: lineOfKey(data, m[1]), Msg: fmt.Sprintf("unknown field %q%s; allowed fields: defaultAction, defaultErrnoRet, architectures, archMap, syscalls (with names, action, args, errnoRet, comment, includes, excludes) — fields that Docker Engine 20.10 would ignore are refused", m[1], hint)}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return &Error{File: file, Line: lineAt(data, int64(len(data))), Msg: "invalid JSON: the file ends in the middle of a value"}
	}
	return &Error{File: file, Msg: "invalid JSON: " + err.Error()}
}

func jsonKind(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case goType == "string" || goType == "*string":
		return "a string"
	case strings.Contains(goType, "int"):
		return "a non-negative whole number in range"
	}
	return "an object"
}

// lineAt returns the 1-based line of byte offset off in data.
func lineAt(data []byte, off int64) int {
	if off < 0 {
		return 0
	}
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	return bytes.Count(data[:off], []byte("\n")) + 1
}

// lineOfKey returns the line of the first `"key":` in data, or 0. The JSON
// decoder does not report where an unknown field is, so this finds it.
func lineOfKey(data []byte, key string) int {
	re, err := regexp.Compile(`"` + regexp.QuoteMeta(key) + `"\s*:`)
	if err != nil {
		return 0
	}
	if loc := re.FindIndex(data); loc != nil {
		return lineAt(data, int64(loc[0]))
	}
	return 0
}

// CheckSeccomp validates the content of a seccomp profile file the way Load
// does (strict fields, a default action that denies, known actions and
// argument ops), for `sandboxd seccomp check`. file names it in the error,
// which is an *Error.
func CheckSeccomp(file string, data []byte) error {
	return checkSeccomp(file, data)
}

// seccompAllowsClone3 reports whether a (checked) seccomp file lets clone3
// through. clone3 passes its flags in memory, which seccomp cannot read, so
// under runc an allowed clone3 lets the code create namespaces (a user
// namespace, then the rest) however clone's flags are filtered. Under runsc
// the call reaches gVisor's kernel instead (see seccomp/gvisor.json).
func seccompAllowsClone3(data []byte) bool {
	var p seccompfile.Profile
	if err := json.Unmarshal(data, &p); err != nil {
		return false // checkSeccomp has refused it already
	}
	for _, s := range p.Syscalls {
		if s.Action != "SCMP_ACT_ALLOW" && s.Action != "SCMP_ACT_LOG" {
			continue
		}
		if s.Name == "clone3" || slices.Contains(s.Names, "clone3") {
			return true
		}
	}
	return false
}
