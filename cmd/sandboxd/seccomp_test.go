//go:build cgo

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/seccompbpf"
	"golang.org/x/sys/unix"
)

const shippedSeccomp = "../../profiles/seccomp/default.json"

func TestSeccompCheckShippedProfiles(t *testing.T) {
	for _, file := range []string{shippedSeccomp, "../../profiles/seccomp/gvisor.json"} {
		rep, err := seccompbpf.CheckFile(file)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		t.Logf("%+v", rep)
		if rep.Rules == 0 || rep.Applied == 0 || rep.Syscalls < 300 || rep.BPFInstructions < 100 {
			t.Errorf("%s: rules %d, applied %d, syscalls %d, BPF instructions %d; want all well above 0", file, rep.Rules, rep.Applied, rep.Syscalls, rep.BPFInstructions)
		}
		if rep.Applied > rep.Rules {
			t.Errorf("%s: %d rules applied of %d", file, rep.Applied, rep.Rules)
		}
		// default.json has a rule for arm only (arm_fadvise64_64, ...) and
		// one for x86 only (arch_prctl); one of them is skipped anywhere.
		if rep.OtherArch == 0 {
			t.Errorf("%s: no rule was skipped for another architecture", file)
		}
		native := map[string]string{"amd64": "amd64", "arm64": "arm64"}[runtime.GOARCH]
		if native != "" && (len(rep.Arches) == 0 || rep.Arches[0] != native) {
			t.Errorf("%s: arches %v, want %s first", file, rep.Arches, native)
		}
		if runtime.GOARCH == "amd64" && strings.Join(rep.Arches, ",") != "amd64,x86,x32" {
			t.Errorf("%s: arches %v, want amd64, x86, x32 from the archMap", file, rep.Arches)
		}
	}

	var out, errOut bytes.Buffer
	if code := run([]string{"seccomp", "check", shippedSeccomp}, &out, &errOut); code != 0 {
		t.Fatalf("seccomp check exited %d: %s", code, errOut.String())
	}
	// The rule count is the file's: count its syscalls entries.
	raw, err := os.ReadFile(shippedSeccomp)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Syscalls []json.RawMessage }
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	rules := fmt.Sprintf("rules: %d in the file", len(doc.Syscalls))
	for _, want := range []string{shippedSeccomp + ": ok for ", rules, "syscalls: ", "BPF: ", " instructions ("} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestSeccompCheckDefaultFile(t *testing.T) {
	t.Chdir("../..")
	var out, errOut bytes.Buffer
	if code := run([]string{"seccomp", "check"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), defaultSeccompFile+": ok") {
		t.Fatalf("seccomp check without FILE: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}

func writeProfile(t *testing.T, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestSeccompCheckErrors(t *testing.T) {
	shipped, err := os.ReadFile(shippedSeccomp)
	if err != nil {
		t.Fatal(err)
	}
	bogus := strings.Replace(string(shipped), `"accept4",`, `"accept4",`+"\n\t\t\t\t"+`"bogus_syscall",`, 1)
	if bogus == string(shipped) {
		t.Fatal("could not insert a bogus name")
	}
	cases := []struct {
		name, content string
		want          []string
	}{
		{"bogus syscall name", bogus, []string{":24: syscalls[0]", `"bogus_syscall" is not a syscall libseccomp`}},
		{"bogus name in a rule for another arch", `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["nosuchcall"],"action":"SCMP_ACT_ALLOW","includes":{"arches":["s390x"]}}]}`,
			[]string{`"nosuchcall" is not a syscall`}},
		{"allow by default", `{"defaultAction":"SCMP_ACT_ALLOW"}`, []string{`defaultAction "SCMP_ACT_ALLOW" is not allowed`}},
		{"unknown field", `{"defaultAction":"SCMP_ACT_ERRNO","flags":["x"]}`, []string{`unknown field "flags"`}},
		{"unknown arch", `{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_VAX"],"syscalls":[]}`, []string{`unknown architecture "SCMP_ARCH_VAX"`}},
		{"bad op", `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":1,"op":"SCMP_CMP_XX"}]}]}`, []string{`op "SCMP_CMP_XX"`}},
		{"bad minKernel", `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW","includes":{"minKernel":"four"}}]}`, []string{`minKernel "four"`}},
		{"not JSON", `{"defaultAction":`, []string{"invalid JSON"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := writeProfile(t, tc.content)
			var out, errOut bytes.Buffer
			code := run([]string{"seccomp", "check", f}, &out, &errOut)
			if code == 0 {
				t.Fatalf("exit 0, want non-zero\n%s", out.String())
			}
			msg := errOut.String()
			if !strings.HasPrefix(msg, f+":") {
				t.Errorf("message %q does not start with the file", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
		})
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"seccomp", "check", "a", "b"}, &out, &errOut); code != 2 {
		t.Errorf("two files: exit %d, want 2 (usage)", code)
	}
}

// TestSeccompRuleSelection: includes/excludes by architecture, capability
// and kernel version, and rules that repeat the default action.
func TestSeccompRuleSelection(t *testing.T) {
	other := "s390x"
	if runtime.GOARCH == "s390x" {
		other = "amd64"
	}
	p := fmt.Sprintf(`{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[
		{"names":["read","write"],"action":"SCMP_ACT_ALLOW"},
		{"names":["getpid"],"action":"SCMP_ACT_ALLOW","includes":{"arches":[%q]}},
		{"names":["getppid"],"action":"SCMP_ACT_ALLOW","includes":{"arches":[%q]}},
		{"names":["gettid"],"action":"SCMP_ACT_ALLOW","excludes":{"arches":[%q]}},
		{"names":["mount"],"action":"SCMP_ACT_ALLOW","includes":{"caps":["CAP_SYS_ADMIN"]}},
		{"names":["uname"],"action":"SCMP_ACT_ALLOW","excludes":{"caps":["CAP_SYS_ADMIN"]}},
		{"names":["ptrace"],"action":"SCMP_ACT_ALLOW","includes":{"minKernel":"99.0"}},
		{"names":["getuid"],"action":"SCMP_ACT_ALLOW","includes":{"minKernel":"3.1"}},
		{"names":["getgid"],"action":"SCMP_ACT_ERRNO"},
		{"names":["clone3"],"action":"SCMP_ACT_ERRNO","errnoRet":38},
		{"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"},{"index":0,"value":8,"op":"SCMP_CMP_EQ"}]}
	]}`, runtime.GOARCH, other, other)
	rep, err := seccompbpf.Compile("t.json", []byte(p), "6.1.0-18-amd64")
	if err != nil {
		t.Fatal(err)
	}
	want := seccompbpf.Report{Rules: 11, Applied: 7, OtherArch: 1, NeedsCap: 1, KernelTooOld: 1, SameAsDefault: 1, Syscalls: 8}
	got := seccompbpf.Report{Rules: rep.Rules, Applied: rep.Applied, OtherArch: rep.OtherArch, NeedsCap: rep.NeedsCap, KernelTooOld: rep.KernelTooOld, SameAsDefault: rep.SameAsDefault, Syscalls: rep.Syscalls}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("report %+v, want %+v", got, want)
	}
}

func TestKernelAtLeast(t *testing.T) {
	for _, c := range []struct {
		release, min string
		want         bool
	}{
		{"6.1.0-18-amd64", "4.8", true}, {"4.8.0", "4.8", true}, {"4.7.10", "4.8", false},
		{"3.19", "4.8", false}, {"5.0", "4.19", true}, {"6.18.44-fc", "6.18", true},
	} {
		got, err := seccompbpf.KernelAtLeast(c.release, c.min)
		if err != nil || got != c.want {
			t.Errorf("seccompbpf.KernelAtLeast(%q, %q) = %v, %v; want %v", c.release, c.min, got, err, c.want)
		}
	}
	if _, err := seccompbpf.KernelAtLeast("6.1", "4.x"); err == nil {
		t.Error("minKernel 4.x accepted")
	}
}

// TestSeccompFilterBehaviour loads a compiled filter in a child process and
// checks that it does what the JSON says, including the operand order of
// SCMP_CMP_MASKED_EQ (value is the mask, valueTwo the datum, as in Docker's
// clone rule) and errnoRet.
func TestSeccompFilterBehaviour(t *testing.T) {
	if os.Getenv("SANDBOXD_SECCOMP_CHILD") == "1" {
		seccompChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSeccompFilterBehaviour$", "-test.v")
	cmd.Env = append(os.Environ(), "SANDBOXD_SECCOMP_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, want := range []string{
		"getpriority(0x13): errno 42", // (0x13 & 0xf0) == 0x10: the rule matches
		"getpriority(0x23): errno 22", // no match: the kernel's EINVAL
		"getpgid(12345): errno 99",    // SCMP_CMP_EQ on argument 0
		"getpgid(0): errno 0",         // no match: allowed by default
		"getsid(0): errno 1",          // SCMP_ACT_ERRNO without errnoRet: EPERM
		"sched_yield(): errno 0",      // untouched
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("child output lacks %q:\n%s", want, out)
		}
	}
}

func seccompChild() {
	// An allow-by-default profile, so the Go runtime keeps working; only
	// compileSeccomp's checks apply (CheckSeccomp would refuse it).
	p := `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
		{"names":["getpriority"],"action":"SCMP_ACT_ERRNO","errnoRet":42,"args":[{"index":0,"value":240,"valueTwo":16,"op":"SCMP_CMP_MASKED_EQ"}]},
		{"names":["getpgid"],"action":"SCMP_ACT_ERRNO","errnoRet":99,"args":[{"index":0,"value":12345,"op":"SCMP_CMP_EQ"}]},
		{"names":["getsid"],"action":"SCMP_ACT_ERRNO"}
	]}`
	filter, _, err := seccompbpf.Build("child.json", []byte(p), "6.1")
	if err != nil {
		fmt.Println("build:", err)
		os.Exit(1)
	}
	runtime.LockOSThread() // the filter applies to this thread (no TSYNC)
	if err := filter.Load(); err != nil {
		fmt.Println("load:", err)
		os.Exit(1)
	}
	errno := func(trap, a0 uintptr) int {
		_, _, e := syscall.RawSyscall(trap, a0, 0, 0)
		return int(e)
	}
	fmt.Printf("getpriority(0x13): errno %d\n", errno(unix.SYS_GETPRIORITY, 0x13))
	fmt.Printf("getpriority(0x23): errno %d\n", errno(unix.SYS_GETPRIORITY, 0x23))
	fmt.Printf("getpgid(12345): errno %d\n", errno(unix.SYS_GETPGID, 12345))
	fmt.Printf("getpgid(0): errno %d\n", errno(unix.SYS_GETPGID, 0))
	fmt.Printf("getsid(0): errno %d\n", errno(unix.SYS_GETSID, 0))
	fmt.Printf("sched_yield(): errno %d\n", errno(unix.SYS_SCHED_YIELD, 0))
	os.Exit(0)
}
