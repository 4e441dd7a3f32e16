//go:build cgo

// Package seccompbpf compiles a seccomp profile in Docker's JSON format
// with libseccomp for this host's architecture, the way Docker and runc do
// for a container without capabilities, into the BPF program the kernel
// loads: for sandboxd seccomp check, and for the filter a cell host's
// launcher installs before each run's code (the profile's own, stacked on
// the host's).
package seccompbpf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"

	mobyseccomp "github.com/moby/profiles/seccomp"
	libseccomp "github.com/seccomp/libseccomp-golang"

	"github.com/sandboxd/sandboxd/internal/seccompfile"
	"github.com/sandboxd/sandboxd/internal/yamlfile"
	"github.com/sandboxd/sandboxd/profiles"
	"golang.org/x/sys/unix"
)

// specArches maps Docker's SCMP_ARCH_* names to libseccomp's.
var specArches = map[string]string{
	"SCMP_ARCH_X86": "x86", "SCMP_ARCH_X86_64": "amd64", "SCMP_ARCH_X32": "x32",
	"SCMP_ARCH_ARM": "arm", "SCMP_ARCH_AARCH64": "arm64",
	"SCMP_ARCH_MIPS": "mips", "SCMP_ARCH_MIPS64": "mips64", "SCMP_ARCH_MIPS64N32": "mips64n32",
	"SCMP_ARCH_MIPSEL": "mipsel", "SCMP_ARCH_MIPSEL64": "mipsel64", "SCMP_ARCH_MIPSEL64N32": "mipsel64n32",
	"SCMP_ARCH_PPC": "ppc", "SCMP_ARCH_PPC64": "ppc64", "SCMP_ARCH_PPC64LE": "ppc64le",
	"SCMP_ARCH_S390": "s390", "SCMP_ARCH_S390X": "s390x",
	"SCMP_ARCH_PARISC": "parisc", "SCMP_ARCH_PARISC64": "parisc64",
	"SCMP_ARCH_RISCV64": "riscv64", "SCMP_ARCH_LOONGARCH64": "loong64",
}

var compareOps = map[string]libseccomp.ScmpCompareOp{
	"SCMP_CMP_NE": libseccomp.CompareNotEqual, "SCMP_CMP_LT": libseccomp.CompareLess,
	"SCMP_CMP_LE": libseccomp.CompareLessOrEqual, "SCMP_CMP_EQ": libseccomp.CompareEqual,
	"SCMP_CMP_GE": libseccomp.CompareGreaterEqual, "SCMP_CMP_GT": libseccomp.CompareGreater,
	"SCMP_CMP_MASKED_EQ": libseccomp.CompareMaskedEqual,
}

// scAction converts an action as runc does (SCMP_ACT_KILL kills the thread;
// ERRNO defaults to EPERM; TRACE passes errnoRet as the tracer's message).
func scAction(name string, errnoRet *uint16) (libseccomp.ScmpAction, error) {
	ret := int16(unix.EPERM)
	if errnoRet != nil {
		if *errnoRet > 4095 {
			return 0, fmt.Errorf("errnoRet %d is not an errno (at most 4095)", *errnoRet)
		}
		ret = int16(*errnoRet)
	}
	switch name {
	case "SCMP_ACT_ALLOW":
		return libseccomp.ActAllow, nil
	case "SCMP_ACT_ERRNO":
		return libseccomp.ActErrno.SetReturnCode(ret), nil
	case "SCMP_ACT_KILL", "SCMP_ACT_KILL_THREAD":
		return libseccomp.ActKillThread, nil
	case "SCMP_ACT_KILL_PROCESS":
		return libseccomp.ActKillProcess, nil
	case "SCMP_ACT_TRAP":
		return libseccomp.ActTrap, nil
	case "SCMP_ACT_TRACE":
		return libseccomp.ActTrace.SetReturnCode(ret), nil
	case "SCMP_ACT_LOG":
		return libseccomp.ActLog, nil
	}
	return 0, fmt.Errorf("action %q is not supported", name)
}

// CheckFile reads, validates and compiles file.
func CheckFile(file string) (*Report, error) {
	data, err := yamlfile.ReadFile(file, "the seccomp profile")
	if err != nil {
		return nil, err
	}
	if err := profiles.CheckSeccomp(file, data); err != nil {
		return nil, err
	}
	return Compile(file, data, KernelRelease())
}

func KernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// Compile builds the libseccomp filter that data describes for the
// native architecture, for a container without capabilities on a host
// running kernel, and exports its BPF program.
func Compile(file string, data []byte, kernel string) (*Report, error) {
	filter, rep, err := Build(file, data, kernel)
	if err != nil {
		return nil, err
	}
	defer filter.Release()
	bpf, err := exportBPF(filter)
	if err != nil {
		return nil, fmt.Errorf("exporting the BPF program: %w", err)
	}
	if len(bpf) == 0 || len(bpf)%8 != 0 {
		return nil, fmt.Errorf("the BPF program is %d bytes, not a whole number of 8-byte instructions", len(bpf))
	}
	rep.BPFInstructions = len(bpf) / 8
	rep.BPF = bpf
	return rep, nil
}

// Build builds the filter; the caller releases it.
func Build(file string, data []byte, kernel string) (_ *libseccomp.ScmpFilter, _ *Report, err error) {
	fail := func(line int, format string, args ...any) error {
		return &profiles.Error{File: file, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	// The file has passed profiles.CheckSeccomp, which refuses unknown
	// fields, or is a test's.
	var p seccompfile.Profile
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, nil, fail(0, "invalid JSON: %v", err)
	}
	maj, min, mic := libseccomp.GetLibraryVersion()
	rep := &Report{File: file, Libseccomp: fmt.Sprintf("%d.%d.%d", maj, min, mic), Rules: len(p.Syscalls)}

	native, err := libseccomp.GetNativeArch()
	if err != nil {
		return nil, nil, fmt.Errorf("libseccomp does not know this architecture: %w", err)
	}
	var defName string
	if p.DefaultAction != nil {
		defName = *p.DefaultAction
	}
	defAct, err := scAction(defName, p.DefaultErrnoRet)
	if err != nil {
		return nil, nil, fail(lineOf(data, "defaultAction"), "defaultAction: %v", err)
	}
	filter, err := libseccomp.NewFilter(defAct)
	if err != nil {
		return nil, nil, fmt.Errorf("creating a libseccomp filter: %w", err)
	}
	defer func() {
		if err != nil {
			filter.Release()
		}
	}()

	// Architectures: "architectures" as given, or, from "archMap", the
	// entry of the native architecture with its sub-architectures (what
	// Docker does). The native one is always in the filter.
	rep.Arches = []string{native.String()}
	var arches []string
	switch {
	case len(p.Architectures) > 0 && len(p.ArchMap) > 0:
		return nil, nil, fail(lineOf(data, "architectures"), `use "architectures" or "archMap", not both (Docker refuses both)`)
	case len(p.Architectures) > 0:
		arches = p.Architectures
	default:
		for _, a := range p.ArchMap {
			if specArches[a.Architecture] == native.String() {
				arches = append(append(arches, a.Architecture), a.SubArchitectures...)
			}
		}
	}
	for _, a := range arches {
		name, ok := specArches[a]
		if !ok {
			return nil, nil, fail(lineOf(data, a), "unknown architecture %q; use SCMP_ARCH_X86_64, SCMP_ARCH_AARCH64 and the like", a)
		}
		arch, err := libseccomp.GetArchFromString(name)
		if err != nil {
			return nil, nil, fail(lineOf(data, a), "architecture %q: %v", a, err)
		}
		if slices.Contains(rep.Arches, arch.String()) {
			continue
		}
		if err := filter.AddArch(arch); err != nil {
			return nil, nil, fail(lineOf(data, a), "adding architecture %q: %v", a, err)
		}
		rep.Arches = append(rep.Arches, arch.String())
	}

	// Docker names the native architecture by its Go name in includes
	// and excludes ("amd64", "arm64", ...).
	goArch := runtime.GOARCH
	docker := dockerSyscallNames()
	for i, r := range p.Syscalls {
		names := r.AllNames()
		where := fmt.Sprintf("syscalls[%d] (%s)", i, strings.Join(names, ", "))
		if len(where) > 80 {
			where = fmt.Sprintf("syscalls[%d]", i)
		}
		switch applies, why, err := ruleApplies(r, goArch, kernel); {
		case err != nil:
			return nil, nil, fail(lineOf(data, "minKernel"), "%s: %v", where, err)
		case !applies:
			switch why {
			case "arch":
				rep.OtherArch++
			case "caps":
				rep.NeedsCap++
			case "kernel":
				rep.KernelTooOld++
			}
			// Names are checked even in rules that do not apply here.
			for _, n := range names {
				if _, err := libseccomp.GetSyscallFromName(n); err != nil && !docker[n] {
					return nil, nil, fail(lineOf(data, n), "%s: %q is not a syscall libseccomp %s knows on any architecture", where, n, rep.Libseccomp)
				}
			}
			continue
		}
		act, err := scAction(r.Action, r.ErrnoRet)
		if err != nil {
			return nil, nil, fail(0, "%s: %v", where, err)
		}
		if act == defAct {
			rep.SameAsDefault++ // libseccomp refuses these; runc skips them
			continue
		}
		conds, separate, err := scConditions(r.Args)
		if err != nil {
			return nil, nil, fail(0, "%s: %v", where, err)
		}
		rep.Applied++
		for _, n := range names {
			call, err := libseccomp.GetSyscallFromName(n)
			if err != nil {
				if docker[n] {
					if !slices.Contains(rep.NewerThanLib, n) {
						rep.NewerThanLib = append(rep.NewerThanLib, n)
					}
					continue
				}
				return nil, nil, fail(lineOf(data, n), "%s: %q is not a syscall libseccomp %s knows on any architecture; fix the name or remove it", where, n, rep.Libseccomp)
			}
			switch {
			case len(conds) == 0:
				err = filter.AddRule(call, act)
			case separate:
				// Two conditions on one argument: one rule each, as runc
				// does (libseccomp cannot AND them on one argument).
				for _, c := range conds {
					if err = filter.AddRuleConditional(call, act, []libseccomp.ScmpCondition{c}); err != nil {
						break
					}
				}
			default:
				err = filter.AddRuleConditional(call, act, conds)
			}
			if err != nil {
				return nil, nil, fail(lineOf(data, n), "%s: libseccomp refused the rule for %s: %v", where, n, err)
			}
			rep.Syscalls++
		}
	}

	slices.Sort(rep.NewerThanLib)
	return filter, rep, nil
}

// ruleApplies evaluates a rule's includes and excludes the way Docker does
// for a container without capabilities, on goArch and kernel.
func ruleApplies(r seccompfile.Rule, goArch, kernel string) (bool, string, error) {
	if in := r.Includes; in != nil {
		if len(in.Arches) > 0 && !slices.Contains(in.Arches, goArch) {
			return false, "arch", nil
		}
		if len(in.Caps) > 0 {
			return false, "caps", nil
		}
		if in.MinKernel != "" {
			ok, err := KernelAtLeast(kernel, in.MinKernel)
			if err != nil {
				return false, "", err
			}
			if !ok {
				return false, "kernel", nil
			}
		}
	}
	if ex := r.Excludes; ex != nil {
		if slices.Contains(ex.Arches, goArch) {
			return false, "arch", nil
		}
		// excludes.caps never match: sandboxes have no capabilities.
		if ex.MinKernel != "" {
			ok, err := KernelAtLeast(kernel, ex.MinKernel)
			if err != nil {
				return false, "", err
			}
			if ok {
				return false, "kernel", nil
			}
		}
	}
	return true, "", nil
}

var kernelVersionRe = regexp.MustCompile(`^(\d+)\.(\d+)`)

// KernelAtLeast reports whether release (e.g. 6.1.0-18-amd64) is at least
// min (e.g. 4.8), comparing major and minor as Docker does.
func KernelAtLeast(release, min string) (bool, error) {
	m := kernelVersionRe.FindStringSubmatch(min)
	if m == nil || m[0] != min {
		return false, fmt.Errorf("minKernel %q is not a version such as 4.8", min)
	}
	h := kernelVersionRe.FindStringSubmatch(release)
	if h == nil {
		return false, fmt.Errorf("cannot read this kernel's version from %q", release)
	}
	num := func(s string) int { n, _ := strconv.Atoi(s); return n }
	if num(h[1]) != num(m[1]) {
		return num(h[1]) > num(m[1]), nil
	}
	return num(h[2]) >= num(m[2]), nil
}

// scConditions converts a rule's args. separate says that two of them test
// the same argument, which runc turns into one rule per condition.
func scConditions(args []seccompfile.Arg) ([]libseccomp.ScmpCondition, bool, error) {
	var conds []libseccomp.ScmpCondition
	seen := map[uint]bool{}
	separate := false
	for _, a := range args {
		op, ok := compareOps[a.Op]
		if !ok {
			return nil, false, fmt.Errorf("argument op %q is not supported", a.Op)
		}
		values := []uint64{a.Value}
		if op == libseccomp.CompareMaskedEqual {
			// Docker's and runc's order: value is the mask, valueTwo the
			// datum: (arg & value) == valueTwo.
			values = append(values, a.ValueTwo)
		}
		c, err := libseccomp.MakeCondition(a.Index, op, values...)
		if err != nil {
			return nil, false, err
		}
		separate = separate || seen[a.Index]
		seen[a.Index] = true
		conds = append(conds, c)
	}
	return conds, separate, nil
}

// exportBPF writes the filter's BPF program to a pipe and reads it back.
func exportBPF(filter *libseccomp.ScmpFilter) ([]byte, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	type result struct {
		b   []byte
		err error
	}
	read := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(r)
		read <- result{b, err}
	}()
	exportErr := filter.ExportBPF(w)
	w.Close()
	res := <-read
	if exportErr != nil {
		return nil, exportErr
	}
	return res.b, res.err
}

// dockerSyscallNames are the syscall names in Docker's own default profile
// (github.com/moby/profiles/seccomp, the version in go.mod): real syscalls,
// some newer than the libseccomp this binary is linked with.
func dockerSyscallNames() map[string]bool {
	names := map[string]bool{}
	for _, r := range mobyseccomp.DefaultProfile().Syscalls {
		for _, n := range r.Names {
			names[n] = true
		}
	}
	return names
}

// lineOf returns the line of the first occurrence of the JSON string s in
// data, or 0.
func lineOf(data []byte, s string) int {
	if s == "" {
		return 0
	}
	q, _ := json.Marshal(s)
	if i := bytes.Index(data, q); i >= 0 {
		return bytes.Count(data[:i], []byte("\n")) + 1
	}
	return 0
}
