package main

// Under gVisor the sandbox's init is not shielded from the code the way
// Linux shields a PID namespace's init: a process of the same uid may
// signal it and open its /proc entries (descriptors included) whatever
// PR_SET_DUMPABLE says. There the launcher runs as root with only
// CAP_SETUID, CAP_SETGID and CAP_KILL (inside gVisor's kernel, not the
// host's) and the code as the profile's user: another uid, which may
// neither signal the launcher nor open its descriptors or memory. Under
// runc the launcher and the code share the profile's uid, as before.

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// codeUserEnv names the code's uid:gid when the launcher runs as root.
const codeUserEnv = "SANDBOXD_CODE_USER"

// codeCred is the code's uid and gid when it is not the launcher's; nil
// when they are the same.
var codeCred *syscall.Credential

// setCodeUser reads the code's user: only a root launcher takes one, and
// a root launcher must have one (the code never runs as root).
func setCodeUser() error {
	v := os.Getenv(codeUserEnv)
	os.Unsetenv(codeUserEnv)
	if os.Getuid() != 0 {
		return nil
	}
	uid, gid, err := parseUser(v)
	if err != nil {
		return fmt.Errorf("the launcher runs as root, so %s must name the code's non-root uid:gid: %w", codeUserEnv, err)
	}
	codeCred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	return nil
}

// parseUser reads "uid:gid", both positive.
func parseUser(v string) (int, int, error) {
	a, b, ok := strings.Cut(v, ":")
	uid, err1 := strconv.Atoi(a)
	gid, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || uid <= 0 || gid <= 0 {
		return 0, 0, fmt.Errorf("%q is not a non-root uid:gid", v)
	}
	return uid, gid, nil
}

// asCode runs fn with the code's effective uid and gid, so that what the
// launcher reads and writes under /sandbox and /tmp it does as the code
// could (and what it creates belongs to the code). Only the calling
// thread's identity changes (raw setresuid, not Go's all-threads one; the
// real and saved ids stay root, so the code still cannot signal the
// launcher), so fn must not leave its goroutine. gVisor has no setfsuid,
// hence the effective ids.
//
// fn runs on a thread of its own that ends with it: the launcher's other
// threads never carry the code's identity, and a thread whose identity
// could not be given back (or, under gVisor, whose capabilities were not
// restored with its uid) is never used again; a cell host builds many
// cells, each needing the launcher's full rights.
func asCode(fn func() error) error {
	if codeCred == nil {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		// Locked and never unlocked: Go ends the thread with the goroutine.
		runtime.LockOSThread()
		if err := setEffective(int(codeCred.Uid), int(codeCred.Gid)); err != nil {
			done <- fmt.Errorf("taking the code's identity: %w", err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// setEffective sets the calling thread's effective uid and gid (the gid
// first, while the thread may still change it).
func setEffective(uid, gid int) error {
	keep := ^uintptr(0) // -1: unchanged
	if uid == 0 {
		// Back to root: the uid first, which gives back the capability to
		// set the gid.
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, 0, keep); e != 0 {
			return e
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(gid), keep); e != 0 {
			return e
		}
		return nil
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(gid), keep); e != 0 {
		return e
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(uid), keep); e != 0 {
		return e
	}
	return nil
}
