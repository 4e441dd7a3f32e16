// Package seccompfile is the seccomp profile format that Docker Engine
// 20.10 reads (profiles/seccomp/*.json): profiles decodes it strictly to
// check a file, and `sandboxd seccomp check` decodes a checked file to
// compile it with libseccomp.
//
// Docker ignores fields it does not know, so a misspelt or newer field
// (e.g. "flags", "listenerPath") would be dropped without a word and the
// filter would not be what the file says: decode with
// DisallowUnknownFields to refuse them.
package seccompfile

// Profile is one seccomp profile file.
type Profile struct {
	// DefaultAction is nil when the file has none.
	DefaultAction   *string  `json:"defaultAction"`
	DefaultErrnoRet *uint16  `json:"defaultErrnoRet"`
	Architectures   []string `json:"architectures"`
	ArchMap         []Arch   `json:"archMap"`
	Syscalls        []Rule   `json:"syscalls"`
}

// Arch is an entry of archMap: an architecture and the ones that come
// with it.
type Arch struct {
	Architecture     string   `json:"architecture"`
	SubArchitectures []string `json:"subArchitectures"`
}

// Rule is an entry of syscalls: an action for the syscalls named, under
// conditions on their arguments, where Includes and Excludes apply.
type Rule struct {
	Name     string   `json:"name"`
	Names    []string `json:"names"`
	Action   string   `json:"action"`
	ErrnoRet *uint16  `json:"errnoRet"`
	Args     []Arg    `json:"args"`
	Comment  string   `json:"comment"`
	Includes *Filter  `json:"includes"`
	Excludes *Filter  `json:"excludes"`
}

// AllNames returns the syscalls the rule names: Name, then Names.
func (r Rule) AllNames() []string {
	if r.Name == "" {
		return r.Names
	}
	return append([]string{r.Name}, r.Names...)
}

// Arg is a condition on one syscall argument.
type Arg struct {
	Index    uint   `json:"index"`
	Value    uint64 `json:"value"`
	ValueTwo uint64 `json:"valueTwo"`
	Op       string `json:"op"`
}

// Filter says where a rule applies: capabilities, architectures (Go
// names) and a minimum kernel.
type Filter struct {
	Caps      []string `json:"caps"`
	Arches    []string `json:"arches"`
	MinKernel string   `json:"minKernel"`
}
