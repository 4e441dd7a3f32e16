package security

// pyPrelude is put before every attack's code: marker printers, a raw
// syscall helper through ctypes (x86_64 numbers) and a write probe.
const pyPrelude = `import ctypes, errno as _errno, os, sys, time
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

def ename(e):
    return _errno.errorcode.get(e, str(e)) if isinstance(e, int) else str(e)

def say(*a):
    print(*a, flush=True)

def denied(tag, e):
    say("DENIED", tag, ename(e))

def allowed(tag, *info):
    say("ALLOWED", tag, *info)

# x86_64 system call numbers (the suite runs where the engine runs).
NR = dict(ptrace=101, mount=165, umount2=166, pivot_root=155, chroot=161,
    unshare=272, setns=308, clone=56, clone3=435, keyctl=250, add_key=248,
    request_key=249, bpf=321, perf_event_open=298, userfaultfd=323,
    io_uring_setup=425, kexec_load=246, kexec_file_load=320, init_module=175,
    finit_module=313, delete_module=176, reboot=169, swapon=167, swapoff=168,
    acct=163, quotactl=179, personality=135, process_vm_readv=310,
    process_vm_writev=311, open_by_handle_at=304, name_to_handle_at=303,
    syslog=103, settimeofday=164, clock_settime=227, fsopen=430, fsconfig=431,
    fsmount=432, open_tree=428, move_mount=429, fspick=433, mount_setattr=442,
    modify_ldt=154, iopl=172, ioperm=173, lookup_dcookie=212, fanotify_init=300,
    kcmp=312, pidfd_open=434, pidfd_getfd=438, mbind=237, set_mempolicy=238,
    get_mempolicy=239, migrate_pages=256, move_pages=279, vhangup=153,
    sethostname=170, setdomainname=171, adjtimex=159, clock_adjtime=305,
    uselib=134, nfsservctl=180, create_module=174, get_kernel_syms=177,
    query_module=178, ioprio_set=251)
if os.uname().machine != "x86_64":
    say("ARCH", os.uname().machine)

def _arg(a):
    return ctypes.c_long(a) if isinstance(a, int) else a

def raw(name, *args):
    """The raw system call; returns (rc, errno)."""
    ctypes.set_errno(0)
    rc = _libc.syscall(ctypes.c_long(NR[name]), *[_arg(a) for a in args])
    return rc, ctypes.get_errno()

def sc(tag, name, *args):
    """The raw system call, reported as DENIED/ALLOWED; returns rc."""
    rc, e = raw(name, *args)
    if rc == -1:
        denied(tag, e)
    else:
        allowed(tag, rc)
    return rc

def attempt(tag, fn, *a, **kw):
    """A Python call, reported as DENIED (OSError) or ALLOWED."""
    try:
        v = fn(*a, **kw)
    except OSError as e:
        denied(tag, e.errno if e.errno is not None else type(e).__name__)
        return None
    allowed(tag, "" if v is None else repr(v)[:120])
    return v if v is not None else True

def probe_write(tag, path, data=None):
    """Open path for writing; write data when given (never for files where a
    successful write would act on the host: those are only opened)."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as e:
        denied(tag, e.errno)
        return
    try:
        if data is None:
            allowed(tag, "opened-for-write")
        else:
            os.write(fd, data)
            allowed(tag, "written")
    except OSError as e:
        denied(tag, e.errno)
    finally:
        os.close(fd)

def probe_write_present(tag, path, data=None):
    """probe_write when path exists, ABSENT when it does not."""
    if os.path.exists(path):
        probe_write(tag, path, data)
    else:
        say("ABSENT", tag)

def probe_write_raise(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)

def raw_clone(tag, flags):
    """clone(2) with flags and SIGCHLD, fork-like; the child exits at once."""
    ctypes.set_errno(0)
    rc = _libc.syscall(ctypes.c_long(NR["clone"]), ctypes.c_long(flags | 17), ctypes.c_long(0),
                       ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
    if rc == 0:
        os._exit(0)
    e = ctypes.get_errno()
    if rc == -1:
        denied(tag, e)
    else:
        os.waitpid(rc, 0)
        allowed(tag, "child", rc)

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x2000000, 0x4000000, 0x8000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWTIME = 0x10000000, 0x20000000, 0x40000000, 0x80
# ---- attack ----
`
