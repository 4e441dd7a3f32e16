# The waiting interpreter of a sandbox: started by sandboxd-launcher before
# the job arrives, it imports the profile's preload modules (argv), then
# waits on fd 3 for the job and runs the code as __main__ in this process,
# which exists for this one job alone.
import os
import sys


def _sandboxd_wait():
    for name in sys.argv[1:]:
        try:
            __import__(name)
        except Exception:
            pass  # the job sees the same ImportError when it imports it
    data = b""
    while True:
        chunk = os.read(3, 65536)
        if not chunk:
            break
        data += chunk
    os.close(3)
    import json
    import types
    job = json.loads(data)
    os.environ.update(job.get("env") or {})
    path = job["path"]
    with open(path, "rb") as f:
        source = f.read()
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    sys.argv = [path]
    sys.path[0] = os.path.dirname(path)
    return source, path, main.__dict__


def _sandboxd_report(exc, tb):
    # As Python reports an uncaught exception: through sys.excepthook (the
    # code may have set its own), then exit status 1.
    exc.__traceback__ = tb
    sys.excepthook(type(exc), exc, tb)
    sys.exit(1)


_sandboxd_source, _sandboxd_path, _sandboxd_globals = _sandboxd_wait()
try:
    _sandboxd_code = compile(_sandboxd_source, _sandboxd_path, "exec")
except (SyntaxError, ValueError) as e:
    _sandboxd_report(e, None)
del _sandboxd_source
try:
    exec(_sandboxd_code, _sandboxd_globals)
except SystemExit:
    raise
except BaseException as e:
    # Leave this file's frame out: the traceback starts at the user's code.
    _sandboxd_report(e, e.__traceback__.tb_next)
