package main

// Cells under gVisor. bubblewrap needs a user namespace, and this host's
// runsc neither has /proc/sys/kernel/overflowuid nor allows mounts in one;
// but a launcher that is root inside the gVisor sandbox (creds.go) may make
// the other namespaces itself. The launcher starts the cell's init with new
// PID, network, IPC and UTS namespaces (Go's clone flags); the init, still
// root and with the host container's few capabilities (inside gVisor's
// kernel, not the host's), names the host "sandbox", drops every
// capability from the bounding set, sets no_new_privs, installs the
// profile's seccomp filter on all its threads and starts the interpreter
// as the profile's user, which leaves it no capability at all.
//
// No mount namespace and no mount. Under this host's runsc a mount made
// in a new mount namespace shows in the parent's too (checked: a bind
// made after unshare(CLONE_NEWNS) in a child is seen by its parent; under
// runc it is not), so a cell's binds would land on the launcher's own
// places and stay there. Instead the cell uses the host's /sandbox, /tmp
// and /dev/shm themselves (each a tmpfs the engine made, sized and
// nosuid, nodev, /tmp and /dev/shm noexec), which the launcher empties
// after every run, before the next cell is built (one cell at a time);
// and the host's /proc, which gVisor's kernel synthesizes (the engine
// masks its host facts), where the cell's processes see the launcher
// and its init but, being another uid, can neither signal them nor read
// their descriptors, memory or environment.

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

// nativeCloneFlags are the namespaces of a cell built without bubblewrap.
const nativeCloneFlags = syscall.CLONE_NEWPID | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS

// nativeDirs are a native cell's places: the host's own.
func nativeDirs() cellDirs {
	return cellDirs{sandbox: jobproto.WorkDir, tmp: "/tmp", shm: "/dev/shm", own: true}
}

// emptyDir removes everything in dir, keeping dir.
func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var first error
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// nativeArgs is how the launcher starts a native cell's init.
func nativeArgs(d cellDirs, uid, gid int) []string {
	return []string{"sandboxd-launcher", "cell-init", strconv.Itoa(cellStatusFD), "--native",
		strconv.Itoa(uid) + ":" + strconv.Itoa(gid), d.sandbox, d.tmp, d.shm}
}

// nativeCell is what a native cell's init was told.
type nativeCell struct {
	dirs     cellDirs
	uid, gid int // the code's
}

// parseNative reads "--native UID:GID SANDBOX TMP SHM" off args.
func parseNative(args []string) (*nativeCell, []string, error) {
	if len(args) < 5 || args[0] != "--native" {
		return nil, args, nil
	}
	uid, gid, err := parseUser(args[1])
	if err != nil {
		return nil, nil, err
	}
	return &nativeCell{dirs: cellDirs{sandbox: args[2], tmp: args[3], shm: args[4]}, uid: uid, gid: gid}, args[5:], nil
}

// setUp makes the calling process (pid 1 of fresh namespaces, root) the
// cell, as bubblewrap does for cells under runc (less the mounts: see the
// file's comment). The calling goroutine
// must hold its thread (runtime.LockOSThread): the bounding set and
// no_new_privs are the thread's, and the interpreter is forked from it.
func (n *nativeCell) setUp(seccompFD int) error {
	if err := unix.Sethostname([]byte("sandbox")); err != nil {
		return fmt.Errorf("naming the cell: %w", err)
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	return installSeccomp(seccompFD)
}

// installSeccomp reads a BPF program (sock_filter array, native byte
// order) from fd and installs it on every thread of the process.
func installSeccomp(fd int) error {
	f := os.NewFile(uintptr(fd), "seccomp")
	prog, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("reading the cell's seccomp filter: %w", err)
	}
	const insn = int(unsafe.Sizeof(unix.SockFilter{}))
	if len(prog) == 0 || len(prog)%insn != 0 {
		return fmt.Errorf("the cell's seccomp filter is %d bytes, not whole instructions", len(prog))
	}
	fprog := unix.SockFprog{Len: uint16(len(prog) / insn), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0]))}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("installing the cell's seccomp filter: %w", errno)
	}
	return nil
}
