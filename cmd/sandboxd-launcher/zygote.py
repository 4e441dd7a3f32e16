# The waiting interpreter of a sandbox: started by sandboxd-launcher before
# the job arrives, it imports the profile's preload modules (argv), then
# waits on fd 3 for the job and runs the code as __main__ in this process,
# which exists for this one job alone (or, in a session, serves calls as the
# session's kernel: see kernel.py).
import os
import sys

# What the handover and the exit below use, imported while the sandbox
# waits rather than on the job's clock: json alone costs about 25 ms here
# (it pulls in re and enum), which was most of a trivial job's run.
import atexit
import gc
import json
import threading
import types


def _sandboxd_mplconfig():
    # A writable copy of the font cache built into the image (see
    # images/python/Dockerfile), so matplotlib starts at once.
    src = "/usr/share/sandboxd/mplconfig"
    if "MPLCONFIGDIR" in os.environ or not os.path.isdir(src):
        return
    dst = "/tmp/.matplotlib"
    try:
        os.makedirs(dst, exist_ok=True)
        for name in os.listdir(src):
            path = os.path.join(src, name)
            if os.path.isfile(path):
                with open(path, "rb") as f, open(os.path.join(dst, name), "wb") as g:
                    g.write(f.read())
        os.environ["MPLCONFIGDIR"] = dst
    except OSError:
        pass


def _sandboxd_wait():
    _sandboxd_mplconfig()
    for name in sys.argv[1:]:
        try:
            __import__(name)
        except Exception:
            pass  # the job sees the same ImportError when it imports it
    # The first compile in a process costs about 2.5 ms here (the parser's
    # first use), fifty times a later one: it is paid while the sandbox
    # waits, not on the job's clock.
    compile("def _f(a, *b, **c):\n    return [x for x in b if x] or f'{a!r}'\nclass _C(int): pass\n", "<sandboxd-warmup>", "exec")
    # Everything made so far (the preload's modules above all) is moved out
    # of the collector's reach, so the job's collections, and the one at
    # its exit, scan only what the job made.
    gc.freeze()
    # Tell the launcher the preload is done (fd 6): the job's clock starts
    # now, not while a cold sandbox imports pandas.
    try:
        os.write(6, b"r")
    except OSError:
        pass
    try:
        os.close(6)
    except OSError:
        pass
    data = b""
    while True:
        chunk = os.read(3, 65536)
        if not chunk:
            break
        data += chunk
    os.close(3)
    job = json.loads(data)
    if "kernel" in job:
        # A session: this interpreter becomes its kernel (kernel.py), which
        # serves calls on fds 4 and 5 until the launcher closes them.
        exec(compile(job["kernel"], "<sandboxd-kernel>", "exec"), {"__name__": "__sandboxd_kernel__", "__builtins__": __builtins__})
        os._exit(0)
    for fd in (4, 5):
        # The kernel's channel, unused by a job.
        try:
            os.close(fd)
        except OSError:
            pass
    os.environ.update(job.get("env") or {})
    path = job["path"]
    if job.get("source") is not None:
        # A cell: the code comes with the job, and is written where the
        # code finds itself (its /tmp is the cell's own).
        source = job["source"].encode("utf-8", "surrogateescape")
        with open(path, "wb") as f:
            f.write(source)
    else:
        with open(path, "rb") as f:
            source = f.read()
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    sys.argv = [path]
    sys.path[0] = os.path.dirname(path)
    return source, path, main.__dict__


def _sandboxd_exit(code):
    # What Python does at exit (wait for non-daemon threads, run atexit
    # handlers, flush), without tearing down every module one by one, which
    # costs a large share of the run with numpy and pandas loaded. Clearing
    # the code's globals first closes, and so flushes, files it left open.
    try:
        threading._shutdown()
    except BaseException:
        pass
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    try:
        _sandboxd_globals.clear()
        gc.collect()
    except BaseException:
        pass
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            pass
    os._exit(code)


def _sandboxd_report(exc, tb):
    # As Python reports an uncaught exception: through sys.excepthook (the
    # code may have set its own), then exit status 1.
    exc.__traceback__ = tb
    try:
        sys.excepthook(type(exc), exc, tb)
    except BaseException:
        pass
    _sandboxd_exit(1)


_sandboxd_source, _sandboxd_path, _sandboxd_globals = _sandboxd_wait()
try:
    _sandboxd_code = compile(_sandboxd_source, _sandboxd_path, "exec")
except (SyntaxError, ValueError) as e:
    _sandboxd_report(e, None)
del _sandboxd_source
try:
    exec(_sandboxd_code, _sandboxd_globals)
except SystemExit as e:
    # As Python: None is 0, an integer is the status, anything else is
    # printed to stderr and the status is 1.
    _code = e.code
    if _code is None:
        _code = 0
    elif not isinstance(_code, int):
        try:
            print(_code, file=sys.stderr)
        except BaseException:
            pass
        _code = 1
    _sandboxd_exit(_code & 0xFF)
except BaseException as e:
    # Leave this file's frame out: the traceback starts at the user's code.
    _sandboxd_report(e, e.__traceback__.tb_next)
_sandboxd_exit(0)
