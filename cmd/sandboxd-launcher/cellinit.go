package main

// The init of a cell: the launcher's binary again, run by bubblewrap as
// pid 1 of the cell's PID namespace. It starts the interpreter with the
// descriptors it was given, reaps every process of the cell, and reports
// on its status descriptor exactly how the interpreter ended (bubblewrap's
// own exit code cannot tell a signal from an exit status); the launcher
// outside then kills the cell, and the namespace dies with its init.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

// cellInit runs as "sandboxd-launcher cell-init FD [--native UID:GID
// SANDBOX TMP SHM] -- PROGRAM ARGS...": under bubblewrap, or (--native,
// cellnative.go) as the root of namespaces the launcher made.
func cellInit(args []string) int {
	usage := func() int {
		fmt.Fprintln(os.Stderr, "usage: sandboxd-launcher cell-init STATUS-FD [--native UID:GID SANDBOX TMP SHM] -- PROGRAM [ARGS...]")
		return 2
	}
	if len(args) < 3 {
		return usage()
	}
	fd, err := strconv.Atoi(args[0])
	if err != nil || fd < 3 {
		fmt.Fprintln(os.Stderr, "cell-init: the status descriptor must be a number from 3")
		return 2
	}
	native, args, err := parseNative(args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "cell-init:", err)
		return 2
	}
	if len(args) < 2 || args[0] != "--" {
		return usage()
	}
	argv := args[1:] // the interpreter's command line
	// Like the container's launcher: not dumpable (the code, same uid,
	// cannot open its descriptors), every signal caught (the kernel keeps
	// SIGKILL and SIGSTOP from the namespace's init).
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	signal.Notify(make(chan os.Signal, 1))
	// The descriptors from fd 7 on (the status pipe, whatever bubblewrap
	// left open) came without close-on-exec: the interpreter must not
	// inherit them, or the code could write its own status.
	if err := cloexecFrom(7); err != nil {
		fmt.Fprintln(os.Stderr, "cell-init: marking descriptors close-on-exec:", err)
		return 2
	}
	var cred *syscall.Credential
	if native != nil {
		// The thread that sets the cell up is the one the interpreter is
		// forked from (the bounding set and no_new_privs are per thread).
		runtime.LockOSThread()
		if err := native.setUp(cellSeccompFD); err != nil {
			fmt.Fprintln(os.Stderr, "cell-init: building the cell:", err)
			return 2
		}
		cred = &syscall.Credential{Uid: uint32(native.uid), Gid: uint32(native.gid), Groups: []uint32{}}
	}
	status := os.NewFile(uintptr(fd), "status")
	report := func(st jobproto.CellStatus) int {
		_ = json.NewEncoder(status).Encode(st)
		status.Close()
		// Whatever is left of the cell ends with it.
		_ = syscall.Kill(-1, syscall.SIGKILL)
		reapAll()
		return 0
	}
	// The code, not the launcher outside, should be the OOM killer's
	// choice; children inherit it.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	files := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	for i := 3; i <= 6; i++ {
		files = append(files, os.NewFile(uintptr(i), "fd"+strconv.Itoa(i)))
	}
	// bubblewrap adds PWD; the code gets the environment a container's
	// code gets.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PWD=") })
	proc, err := os.StartProcess(argv[0], argv, &os.ProcAttr{
		Dir:   jobproto.WorkDir,
		Env:   env,
		Files: files,
		Sys:   &syscall.SysProcAttr{Setpgid: true, Credential: cred},
	})
	if err != nil {
		return report(jobproto.CellStatus{ExitCode: -1, Error: "starting the interpreter: " + err.Error()})
	}
	// Only the interpreter holds its pipes now: they end when it does.
	for _, f := range files {
		f.Close()
	}
	ws, ru, err := reapUntil(proc.Pid)
	if err != nil {
		return report(jobproto.CellStatus{ExitCode: -1, Error: "waiting for the interpreter: " + err.Error()})
	}
	st := jobproto.CellStatus{ExitCode: ws.ExitStatus(), MaxRSSKB: ru.Maxrss,
		UserCPUMS: ru.Utime.Sec*1000 + int64(ru.Utime.Usec)/1000, SysCPUMS: ru.Stime.Sec*1000 + int64(ru.Stime.Usec)/1000}
	if ws.Signaled() {
		st.ExitCode, st.Signal = -1, int(ws.Signal())
	}
	return report(st)
}

// cloexecFrom marks every descriptor from fd on close-on-exec: with
// close_range where the kernel has CLOSE_RANGE_CLOEXEC (gVisor's does
// not), else one by one from /proc/self/fd.
func cloexecFrom(fd int) error {
	if unix.CloseRange(uint(fd), ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return nil
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n < fd {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(n), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && err != unix.EBADF {
			return err
		}
	}
	return nil
}
