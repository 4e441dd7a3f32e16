package seccompbpf

// Report is what compiling one profile gave.
type Report struct {
	File       string
	Libseccomp string   // version, e.g. 2.5.4
	Arches     []string // in the filter, the native one first
	Rules      int      // entries of "syscalls"
	Applied    int      // rules that apply on this host, to a sandbox
	// Rules left out, by reason.
	OtherArch, NeedsCap, KernelTooOld, SameAsDefault int
	// Syscalls is the number of (rule, syscall) pairs added to the filter.
	Syscalls int
	// NewerThanLib are names of real syscalls (Docker's own default profile
	// names them) that this libseccomp does not know; runc skips those
	// the same way, so the calls fall to the default action.
	NewerThanLib    []string
	BPFInstructions int
	// BPF is the program: BPFInstructions sock_filter entries of 8 bytes.
	BPF []byte
}
