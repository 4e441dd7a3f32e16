package main

// Cells under gVisor. bubblewrap needs a user namespace, and this host's
// runsc neither has /proc/sys/kernel/overflowuid nor allows mounts in one;
// but a launcher that is root inside the gVisor sandbox (creds.go) may make
// the other namespaces itself. The launcher starts the cell's init with new
// PID, mount, network, IPC and UTS namespaces (Go's clone flags); the init,
// still root and with the host container's few capabilities (inside
// gVisor's kernel, not the host's), binds the cell's directories over
// /sandbox, /tmp and /dev/shm, mounts the cell's /proc with the host facts
// masked, names the host "sandbox", drops every capability from the
// bounding set, sets no_new_privs, installs the profile's seccomp filter
// on all its threads and starts the interpreter as the profile's user,
// which leaves it no capability at all.

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

// nativeCloneFlags are the namespaces of a cell built without bubblewrap.
const nativeCloneFlags = syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS

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
// cell, as bubblewrap does for cells under runc. The calling goroutine
// must hold its thread (runtime.LockOSThread): the bounding set and
// no_new_privs are the thread's, and the interpreter is forked from it.
func (n *nativeCell) setUp(seccompFD int) error {
	mount := func(src, dst, fstype string, flags uintptr, data string) error {
		if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
			return fmt.Errorf("mounting %s on %s: %w", src, dst, err)
		}
		return nil
	}
	// Mounts stay in the cell (gVisor refuses the change with EINVAL, and
	// its mounts do not propagate anyway).
	_ = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
	for _, b := range [][2]string{{n.dirs.sandbox, jobproto.WorkDir}, {n.dirs.tmp, "/tmp"}, {n.dirs.shm, "/dev/shm"}} {
		if err := mount(b[0], b[1], "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	if err := mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	for _, p := range jobproto.Masked {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			continue
		case fi.IsDir():
			err = mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555")
		default:
			err = mount("/dev/null", p, "", unix.MS_BIND, "")
		}
		if err != nil {
			return err
		}
	}
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"} {
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err == unix.EINVAL {
			// gVisor binds no part of its /proc; its kernel settings
			// are its own, and not writable by the code's user.
			continue
		} else if err != nil {
			return fmt.Errorf("mounting %s read-only: %w", p, err)
		}
		if err := mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return err
		}
	}
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
