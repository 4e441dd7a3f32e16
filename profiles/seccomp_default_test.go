package profiles

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	mobyseccomp "github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// profiles/seccomp/default.json is generated from Docker's default profile
// (github.com/moby/profiles/seccomp at the version in go.mod) by
// buildDefaultSeccomp. To change it, change the generator and run
//
//	go test ./profiles -run TestDefaultSeccompUpToDate -update
//
// The reasons for every removal are in profiles/seccomp/README.md.
var update = flag.Bool("update", false, "rewrite profiles/seccomp/default.json from the generator")

const defaultSeccompFile = "seccomp/default.json"

// keptArchMap are the architectures the profile applies to. On any other
// architecture every syscall is denied.
var keptArches = []specs.Arch{specs.ArchX86_64, specs.ArchAARCH64}

// keptArchNames are the arch names that includes/excludes "arches" use for
// keptArches and their sub-architectures.
var keptArchNames = []string{"amd64", "x32", "x86", "arm64", "arm"}

// removedSyscalls are taken out of every ALLOW rule of Docker's default
// profile. Syscalls that Docker allows only with a capability are gone with
// those rules already (sandboxes drop every capability); see the README.
// selfOnlySyscalls change a process's limits or scheduling by pid; they are
// allowed only on the caller itself (pid or who 0), and never for all of a
// uid's processes (whichUser, the "which" value that means a user).
var selfOnlySyscalls = []struct {
	name      string
	pidArg    uint
	whichUser int
}{
	{"prlimit64", 0, -1},
	{"setpriority", 1, 2}, // PRIO_USER
	{"ioprio_set", 1, 3},  // IOPRIO_WHO_USER
	{"sched_setaffinity", 0, -1},
	{"sched_setscheduler", 0, -1},
	{"sched_setparam", 0, -1},
	{"sched_setattr", 0, -1},
}

var removedSyscalls = []string{
	// Allowed only on the caller itself: see selfOnlySyscalls.
	"prlimit64", "setpriority", "ioprio_set", "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr",
	// Inspecting or writing other processes' memory (Docker allows them
	// without CAP_SYS_PTRACE on kernels >= 4.8).
	"ptrace", "process_vm_readv", "process_vm_writev",
	// Clock adjustment: setting needs CAP_SYS_TIME, reading is not used.
	"adjtimex", "clock_adjtime", "clock_adjtime64",
	// File handles: half of the open_by_handle_at container escape.
	"name_to_handle_at",
	// fanotify without fanotify_init (CAP_SYS_ADMIN) is dead weight.
	"fanotify_mark",
	// x86 LDT segments: unused by Python, a history of kernel bugs.
	"modify_ldt",
	// Multiplexed socket calls (32-bit x86): seccomp cannot see the real
	// call's arguments, so it would bypass the socket family filter below.
	"socketcall",
	// Anonymous files in memory: with execve("/proc/self/fd/N") they run
	// any native binary on a noexec system (how escape tools are dropped);
	// Python and its libraries do not need them.
	"memfd_create", "memfd_secret",
}

// allowedSocketFamilies are the address families socket(2) may create:
// AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK (glibc's getaddrinfo and
// if_nameindex use it). Docker's rule "family < 3" (AF_UNSPEC, AF_UNIX,
// AF_INET) is kept as it is.
var allowedSocketFamilies = []uint64{10, 16}

var socketComments = map[uint64]string{
	3:  "socket families below 3: AF_UNSPEC, AF_UNIX, AF_INET",
	10: "socket family AF_INET6",
	16: "socket family AF_NETLINK, protocol NETLINK_ROUTE only (glibc getaddrinfo, if_nameindex); audit, netfilter, xfrm and the rest are denied",
}

// networkSeccompFile is default.json plus IPv4 and IPv6 sockets, for exec
// profiles with an egress profile (they reach the egress proxy over TCP).
const networkSeccompFile = "seccomp/network.json"

// buildDefaultSeccomp is network.json without AF_INET and AF_INET6: a
// profile with egress none has no network, so its code creates no IP
// sockets at all.
func buildDefaultSeccomp(t testing.TB) *mobyseccomp.Seccomp {
	t.Helper()
	p := buildNetworkSeccomp(t)
	var rules []*mobyseccomp.Syscall
	for _, r := range p.Syscalls {
		if slices.Equal(r.Names, []string{"socket"}) && len(r.Args) == 1 {
			switch {
			case r.Args[0].Op == specs.OpLessThan && r.Args[0].Value == 3:
				r.Args[0].Value = 2
				r.Comment = "socket families below 2: AF_UNSPEC, AF_UNIX (no AF_INET: this filter is for profiles without network)"
			case r.Args[0].Op == specs.OpEqualTo && r.Args[0].Value == 10:
				continue // AF_INET6
			}
		}
		rules = append(rules, r)
	}
	p.Syscalls = rules
	return p
}

// buildNetworkSeccomp derives network.json from Docker's default profile.
func buildNetworkSeccomp(t testing.TB) *mobyseccomp.Seccomp {
	t.Helper()
	p := mobyseccomp.DefaultProfile()

	var archMap []mobyseccomp.Architecture
	for _, a := range p.ArchMap {
		if slices.Contains(keptArches, a.Arch) {
			archMap = append(archMap, a)
		}
	}
	p.ArchMap = archMap

	var rules []*mobyseccomp.Syscall
	for _, r := range p.Syscalls {
		// Rules that need a capability never apply: every capability is
		// dropped.
		if r.Includes != nil && len(r.Includes.Caps) > 0 {
			continue
		}
		// Exclusions by capability never trigger, for the same reason.
		if r.Excludes != nil {
			r.Excludes.Caps = nil
		}
		if r.Includes != nil && len(r.Includes.Arches) > 0 {
			r.Includes.Arches = keepArchNames(r.Includes.Arches)
			if len(r.Includes.Arches) == 0 {
				continue // only for architectures we do not support
			}
		}
		if r.Excludes != nil {
			r.Excludes.Arches = keepArchNames(r.Excludes.Arches)
		}
		r.Includes = emptyToNil(r.Includes)
		r.Excludes = emptyToNil(r.Excludes)

		if slices.Equal(r.Names, []string{"socket"}) && len(r.Args) == 1 && r.Args[0].Op == specs.OpEqualTo &&
			!slices.Contains(allowedSocketFamilies, r.Args[0].Value) {
			continue
		}

		if r.Action == specs.ActAllow {
			r.Names = slices.DeleteFunc(r.Names, func(n string) bool { return slices.Contains(removedSyscalls, n) })
			if len(r.Names) == 0 {
				continue
			}
		}
		if r.Includes != nil && r.Includes.MinKernel != nil {
			t.Fatalf("rule for %v has minKernel %s; the generator does not expect one, decide how to handle it", r.Names, r.Includes.MinKernel)
		}
		switch {
		case slices.Equal(r.Names, []string{"clone"}):
			r.Comment = "clone only without namespace flags (CLONE_NEWNS|CLONE_NEWUTS|CLONE_NEWIPC|CLONE_NEWUSER|CLONE_NEWPID|CLONE_NEWNET|CLONE_NEWCGROUP = 0x7E020000)"
		case slices.Equal(r.Names, []string{"clone3"}):
			r.Comment = "clone3 passes its flags in memory seccomp cannot read; ENOSYS makes glibc fall back to clone, whose flags are checked"
		case slices.Equal(r.Names, []string{"personality"}):
			r.Comment = "only the default persona values"
		case slices.Equal(r.Names, []string{"socket"}):
			r.Comment = socketComments[r.Args[0].Value]
			if r.Args[0].Op == specs.OpEqualTo && r.Args[0].Value == 16 {
				// protocol (the third argument) NETLINK_ROUTE (0).
				r.Args = append(r.Args, specs.LinuxSeccompArg{Index: 2, Value: 0, Op: specs.OpEqualTo})
			}
		}
		rules = append(rules, r)
	}
	for _, so := range selfOnlySyscalls {
		args := []specs.LinuxSeccompArg{{Index: so.pidArg, Value: 0, Op: specs.OpEqualTo}}
		if so.whichUser >= 0 {
			args = append(args, specs.LinuxSeccompArg{Index: 0, Value: uint64(so.whichUser), Op: specs.OpNotEqual})
		}
		rules = append(rules, &mobyseccomp.Syscall{
			LinuxSyscall: specs.LinuxSyscall{Names: []string{so.name}, Action: specs.ActAllow, Args: args},
			Comment:      "only for the caller itself: the code shares its uid with the launcher (the container's init), which must keep its limits and scheduling",
		})
	}
	p.Syscalls = rules

	eperm := uint(1)
	p.DefaultAction = specs.ActErrno
	p.DefaultErrnoRet = &eperm
	return p
}

func keepArchNames(names []string) []string {
	var out []string
	for _, n := range names {
		if slices.Contains(keptArchNames, n) {
			out = append(out, n)
		}
	}
	return out
}

func emptyToNil(f *mobyseccomp.Filter) *mobyseccomp.Filter {
	if f == nil || (len(f.Caps) == 0 && len(f.Arches) == 0 && f.MinKernel == nil) {
		return nil
	}
	return f
}

func marshalSeccomp(t testing.TB, p *mobyseccomp.Seccomp) []byte {
	t.Helper()
	b, err := json.MarshalIndent(p, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// gvisorSeccompFile is default.json for profiles with runtime runsc. The one
// difference: clone3 is allowed. gVisor's OCI seccomp support (runsc
// --oci-seccomp, as of the 20221219 release Debian ships) ignores errnoRet
// and denies with EPERM, so default.json's "clone3 -> ENOSYS" rule becomes
// EPERM, glibc does not fall back to clone, and the code cannot start a
// single thread. Allowed, clone3 reaches gVisor's kernel, which does not
// implement it (ENOSYS, so glibc falls back to the filtered clone); the host
// kernel never sees it. The loader refuses this file for runtime runc (see
// seccompAllowsClone3), where clone3 would let the code create namespaces.
const gvisorSeccompFile = "seccomp/gvisor.json"

// buildGvisorSeccomp derives gvisor.json from the default profile.
func buildGvisorSeccomp(t testing.TB) *mobyseccomp.Seccomp {
	t.Helper()
	p := buildDefaultSeccomp(t)
	n := 0
	for _, r := range p.Syscalls {
		if slices.Equal(r.Names, []string{"clone3"}) {
			r.Action = specs.ActAllow
			r.ErrnoRet = nil
			r.Comment = "runsc only: gVisor ignores errnoRet (EPERM would stop glibc from falling back to clone); gVisor's own kernel answers clone3 with ENOSYS, the host kernel never sees it"
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the default profile has %d clone3 rules, want 1", n)
	}
	return p
}

func TestDefaultSeccompUpToDate(t *testing.T) {
	for file, build := range map[string]func(testing.TB) *mobyseccomp.Seccomp{
		defaultSeccompFile: buildDefaultSeccomp,
		networkSeccompFile: buildNetworkSeccomp,
		gvisorSeccompFile:  buildGvisorSeccomp,
	} {
		want := marshalSeccomp(t, build(t))
		if *update {
			if err := os.WriteFile(file, want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what the generator in this file builds; change the generator, not the JSON, and run: go test ./profiles -run TestDefaultSeccompUpToDate -update", file)
		}
	}
}

// TestGvisorSeccompDiffersOnlyInClone3 holds whoever wrote the files.
func TestGvisorSeccompDiffersOnlyInClone3(t *testing.T) {
	def := loadSeccompFile(t, defaultSeccompFile)
	gv := loadSeccompFile(t, gvisorSeccompFile)
	if len(def.Syscalls) != len(gv.Syscalls) || def.DefaultAction != gv.DefaultAction {
		t.Fatalf("%s and %s differ in shape", defaultSeccompFile, gvisorSeccompFile)
	}
	for i := range def.Syscalls {
		d, g := *def.Syscalls[i], *gv.Syscalls[i]
		if slices.Equal(d.Names, []string{"clone3"}) {
			if g.Action != specs.ActAllow || !slices.Equal(g.Names, d.Names) || len(g.Args) != 0 {
				t.Errorf("gvisor.json clone3 rule %+v, want clone3 allowed", g)
			}
			continue
		}
		if !bytes.Equal(marshalJSON(t, d), marshalJSON(t, g)) {
			t.Errorf("syscalls[%d] differs between %s and %s", i, defaultSeccompFile, gvisorSeccompFile)
		}
	}
	if !seccompAllowsClone3(mustRead(t, gvisorSeccompFile)) || seccompAllowsClone3(mustRead(t, defaultSeccompFile)) {
		t.Error("seccompAllowsClone3 does not tell gvisor.json from default.json")
	}
}

func marshalJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustRead(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadDefaultSeccomp parses the shipped file (not the generator's output),
// so these tests hold whoever wrote the file.
func loadDefaultSeccomp(t *testing.T) *mobyseccomp.Seccomp {
	t.Helper()
	return loadSeccompFile(t, defaultSeccompFile)
}

func loadSeccompFile(t *testing.T, file string) *mobyseccomp.Seccomp {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSeccomp(file, data); err != nil {
		t.Fatalf("shipped profile fails our own seccomp check: %v", err)
	}
	var p mobyseccomp.Seccomp
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("parse %s: %v", file, err)
	}
	return &p
}

// allowRules returns the rules that allow, on our architectures, whatever
// their conditions.
func allowRules(p *mobyseccomp.Seccomp) []*mobyseccomp.Syscall {
	var out []*mobyseccomp.Syscall
	for _, r := range p.Syscalls {
		if r.Action == specs.ActAllow {
			out = append(out, r)
		}
	}
	return out
}

func TestDefaultSeccompDeniesDangerousSyscalls(t *testing.T) {
	p := loadDefaultSeccomp(t)
	denied := []string{
		"ptrace", "mount", "umount", "umount2", "pivot_root", "chroot", "unshare", "setns",
		"keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
		"io_uring_setup", "io_uring_enter", "io_uring_register",
		"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
		"reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd",
		"process_vm_readv", "process_vm_writev", "open_by_handle_at", "name_to_handle_at",
		"syslog", "settimeofday", "clock_settime", "clock_settime64", "clock_adjtime", "clock_adjtime64",
		"adjtimex", "stime", "lookup_dcookie", "fanotify_init", "fanotify_mark", "iopl", "ioperm",
		"move_pages", "migrate_pages", "mbind", "set_mempolicy", "set_mempolicy_home_node", "get_mempolicy",
		"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
		"sethostname", "setdomainname", "vhangup", "kcmp", "pidfd_getfd", "process_madvise",
		"modify_ldt", "socketcall", "nfsservctl", "uselib", "create_module", "get_kernel_syms",
		"memfd_create", "memfd_secret",
	}
	for i, r := range p.Syscalls {
		if r.Action != specs.ActAllow {
			continue
		}
		for _, n := range r.Names {
			if slices.Contains(denied, n) {
				t.Errorf("%s is allowed by syscalls[%d] (args %v, includes %+v); it must be denied", n, i, r.Args, r.Includes)
			}
		}
	}
}

func TestDefaultSeccompIsSubsetOfDocker(t *testing.T) {
	p := loadDefaultSeccomp(t)
	docker := make(map[string]bool)
	for _, r := range mobyseccomp.DefaultProfile().Syscalls {
		if r.Action == specs.ActAllow {
			for _, n := range r.Names {
				docker[n] = true
			}
		}
	}
	for _, r := range allowRules(p) {
		for _, n := range r.Names {
			if !docker[n] {
				t.Errorf("%s is allowed but Docker's default profile never allows it", n)
			}
		}
	}
}

func TestDefaultSeccompShape(t *testing.T) {
	p := loadDefaultSeccomp(t)
	if p.DefaultAction != specs.ActErrno {
		t.Errorf("defaultAction = %q, want SCMP_ACT_ERRNO", p.DefaultAction)
	}
	if p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != 1 {
		t.Errorf("defaultErrnoRet = %v, want 1 (EPERM)", p.DefaultErrnoRet)
	}
	if len(p.Architectures) != 0 {
		t.Errorf("architectures = %v; use archMap only", p.Architectures)
	}
	var arches []specs.Arch
	for _, a := range p.ArchMap {
		arches = append(arches, a.Arch)
		arches = append(arches, a.SubArches...)
	}
	slices.Sort(arches)
	wantArches := []specs.Arch{specs.ArchAARCH64, specs.ArchARM, specs.ArchX32, specs.ArchX86, specs.ArchX86_64}
	if !slices.Equal(arches, wantArches) {
		t.Errorf("architectures = %v, want %v", arches, wantArches)
	}
	if p.Flags != nil || p.ListenerPath != "" || p.ListenerMetadata != "" {
		t.Errorf("flags/listenerPath/listenerMetadata set; Docker Engine 20.10 does not apply them")
	}

	var cloneRules, clone3Rules, personality []*mobyseccomp.Syscall
	for _, r := range p.Syscalls {
		if r.Includes != nil && (len(r.Includes.Caps) > 0 || r.Includes.MinKernel != nil) {
			t.Errorf("rule %v has includes %+v; rules conditioned on capabilities or kernel versions are not wanted", r.Names, r.Includes)
		}
		if r.Excludes != nil && len(r.Excludes.Caps) > 0 {
			t.Errorf("rule %v excludes capabilities %v; sandboxes have none, drop the condition", r.Names, r.Excludes.Caps)
		}
		if slices.Contains(r.Names, "clone") {
			cloneRules = append(cloneRules, r)
		}
		if slices.Contains(r.Names, "clone3") {
			clone3Rules = append(clone3Rules, r)
		}
		if slices.Contains(r.Names, "personality") {
			personality = append(personality, r)
		}
	}

	// clone: exactly one rule, allowing clone only when no namespace flag
	// is set: (flags & 0x7E020000) == 0.
	if len(cloneRules) != 1 {
		t.Fatalf("clone appears in %d rules, want exactly 1", len(cloneRules))
	}
	c := cloneRules[0]
	wantArgs := []specs.LinuxSeccompArg{{Index: 0, Value: 0x7E020000, ValueTwo: 0, Op: specs.OpMaskedEqual}}
	if !slices.Equal(c.Names, []string{"clone"}) || c.Action != specs.ActAllow || !slices.Equal(c.Args, wantArgs) || c.Includes != nil {
		t.Errorf("clone rule = names %v action %s args %+v includes %+v; want clone allowed only with args %+v", c.Names, c.Action, c.Args, c.Includes, wantArgs)
	}

	if len(clone3Rules) != 1 {
		t.Fatalf("clone3 appears in %d rules, want exactly 1", len(clone3Rules))
	}
	c3 := clone3Rules[0]
	if c3.Action != specs.ActErrno || c3.ErrnoRet == nil || *c3.ErrnoRet != 38 || len(c3.Args) != 0 || c3.Includes != nil || c3.Excludes != nil {
		t.Errorf("clone3 rule = action %s errnoRet %v args %v includes %+v excludes %+v; want an unconditional SCMP_ACT_ERRNO with errnoRet 38 (ENOSYS)", c3.Action, c3.ErrnoRet, c3.Args, c3.Includes, c3.Excludes)
	}

	var personas []uint64
	for _, r := range personality {
		if len(r.Names) != 1 || r.Action != specs.ActAllow || len(r.Args) != 1 || r.Args[0].Index != 0 || r.Args[0].Op != specs.OpEqualTo {
			t.Errorf("personality rule %+v: want personality allowed only for one exact persona value", r)
			continue
		}
		personas = append(personas, r.Args[0].Value)
	}
	slices.Sort(personas)
	if want := []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}; !slices.Equal(personas, want) {
		t.Errorf("personality allowed for %#x, want %#x", personas, want)
	}

	// socket: only for the listed families, never unconditionally; no IP
	// sockets without network, IPv4 and IPv6 in network.json.
	if got := socketFamilies(t, p); !slices.Equal(got, []string{"SCMP_CMP_EQ 16", "SCMP_CMP_LT 2"}) {
		t.Errorf("%s: socket allowed for %v, want AF_UNSPEC, AF_UNIX and AF_NETLINK only", defaultSeccompFile, got)
	}
	if got := socketFamilies(t, loadSeccompFile(t, networkSeccompFile)); !slices.Equal(got, []string{"SCMP_CMP_EQ 10", "SCMP_CMP_EQ 16", "SCMP_CMP_LT 3"}) {
		t.Errorf("%s: socket allowed for %v, want AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK", networkSeccompFile, got)
	}
}

func socketFamilies(t *testing.T, p *mobyseccomp.Seccomp) []string {
	t.Helper()
	var families []string
	for _, r := range allowRules(p) {
		if !slices.Contains(r.Names, "socket") {
			continue
		}
		netlink := len(r.Args) == 2 && r.Args[0].Value == 16 && r.Args[1] == specs.LinuxSeccompArg{Index: 2, Value: 0, Op: specs.OpEqualTo}
		if len(r.Names) != 1 || (len(r.Args) != 1 && !netlink) || r.Args[0].Index != 0 {
			t.Errorf("socket allowed by rule %v with args %+v; want one family per rule (AF_NETLINK with protocol NETLINK_ROUTE only)", r.Names, r.Args)
			continue
		}
		if r.Args[0].Value == 16 && !netlink {
			t.Errorf("AF_NETLINK allowed for every protocol; want NETLINK_ROUTE (0) only")
		}
		families = append(families, string(r.Args[0].Op)+" "+jsonNumber(r.Args[0].Value))
	}
	slices.Sort(families)
	return families
}

func jsonNumber(v uint64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestDefaultSeccompKeepsPythonEssentials guards against the generator
// removing something the interpreter needs at start-up or for threads,
// subprocess and multiprocessing.
func TestDefaultSeccompKeepsPythonEssentials(t *testing.T) {
	p := loadDefaultSeccomp(t)
	allowed := make(map[string]bool)
	for _, r := range allowRules(p) {
		for _, n := range r.Names {
			allowed[n] = true
		}
	}
	for _, n := range []string{
		"read", "write", "openat", "close", "mmap", "mprotect", "munmap", "brk", "futex",
		"rt_sigaction", "rt_sigprocmask", "execve", "exit_group", "wait4", "vfork", "fork",
		"pipe2", "dup3", "getrandom", "set_robust_list", "rseq", "prlimit64", "newfstatat",
		"statx", "getdents64", "sched_getaffinity", "arch_prctl", "socketpair",
	} {
		if !allowed[n] {
			t.Errorf("%s is not allowed; Python needs it", n)
		}
	}
}

func TestShippedSeccompFilesAreValid(t *testing.T) {
	files, err := filepath.Glob("seccomp/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no seccomp files found (%v)", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkSeccomp(f, data); err != nil {
			t.Error(err)
		}
	}
}
