# The kernel of a sandboxd session: the interpreter that stays alive across
# calls. sandboxd-launcher starts it as a waiting interpreter (zygote.py,
# which has imported the profile's preload modules) and hands it this file
# instead of a job. It reads one request at a time on fd 4 and answers on
# fd 5, each message a 4-byte big-endian length and JSON:
#
#   launcher -> kernel  {"n", "code", "stdin" (base64), "marker",
#                        "max_text", "max_figure", "max_figures"}
#   kernel -> launcher  {"t": "ready"}                 once, at start
#                       {"t": "result", "kind", ...}   per result of a call
#                       {"t": "end", "status", ...}    last, per call
#
# The code runs in this process, in one __main__ namespace kept between
# calls. Its stdout and stderr are the launcher's pipes; after each call the
# kernel writes the call's marker (a random string the launcher chose) to
# both, so the launcher knows it has every byte of the call's output.
#
# Nothing here is trusted by the launcher or sandboxd: the code can read
# and rewrite all of it. It is the protocol of a cooperating interpreter;
# the launcher caps what it forwards and sandboxd enforces every limit.

import ast
import base64
import builtins
import io
import json
import linecache
import os
import signal
import struct
import sys
import traceback
import types

_REQ_FD, _RESP_FD = 4, 5
_NOVALUE = object()

_dumps, _loads = json.dumps, json.loads
_pack, _unpack = struct.pack, struct.unpack
_stdout, _stderr = sys.stdout, sys.stderr


def _read_exact(n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(_REQ_FD, n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def _recv():
    (n,) = _unpack(">I", _read_exact(4))
    return _loads(_read_exact(n))


def _send(msg):
    data = _dumps(msg).encode("utf-8")
    view = memoryview(_pack(">I", len(data)) + data)
    while view:
        n = os.write(_RESP_FD, view)
        view = view[n:]


def _cut(text, limit):
    """text cut to at most limit UTF-8 bytes, and whether it was cut."""
    b = text.encode("utf-8", "replace")
    if len(b) <= limit:
        return b.decode("utf-8", "replace"), False
    return b[:limit].decode("utf-8", "ignore"), True


def _safe_str(e):
    try:
        return str(e)
    except BaseException:
        return "<unprintable %s>" % type(e).__name__


def _type_name(t):
    mod = getattr(t, "__module__", "") or ""
    name = getattr(t, "__qualname__", None) or getattr(t, "__name__", "?")
    if mod in ("builtins", "__main__", ""):
        return name
    return mod + "." + name


def _pyplot():
    return sys.modules.get("matplotlib.pyplot")


def _fignums():
    plt = _pyplot()
    if plt is None:
        return set()
    try:
        return set(plt.get_fignums())
    except BaseException:
        return set()


def _png(fig, req):
    """A figure as a result: PNG data, or why it is left out."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", bbox_inches="tight")
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        return {"kind": "image/png", "omitted": "the figure could not be rendered: %s: %s" % (type(e).__name__, _safe_str(e))}
    data = buf.getvalue()
    if len(data) > req["max_figure"]:
        return {"kind": "image/png", "omitted": "the figure is %d bytes as PNG, over the %d-byte cap" % (len(data), req["max_figure"])}
    return {"kind": "image/png", "data": base64.b64encode(data).decode("ascii")}


def _is_figure(v):
    t = type(v)
    return t.__name__ == "Figure" and (t.__module__ or "").startswith("matplotlib")


def _display(value, req, shown):
    """The result of the call's final expression."""
    if _is_figure(value):
        shown.add(id(value))
        return _png(value, req)
    t = type(value)
    kind = "repr"
    try:
        if t.__name__ == "DataFrame" and (t.__module__ or "").startswith("pandas"):
            text = value.to_string(max_rows=60, max_cols=20, show_dimensions=True)
            kind = "table"
        else:
            text = repr(value)
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        text = "<repr() failed: %s: %s>" % (_type_name(type(e)), _safe_str(e))
    if not isinstance(text, str):
        text = "<repr() returned %s>" % type(text).__name__
    text, truncated = _cut(text, req["max_text"])
    return {"kind": kind, "text": text, "truncated": truncated}


def _figures(before, req, shown):
    """Every pyplot figure the call created, as PNG; each is closed."""
    plt = _pyplot()
    if plt is None:
        return []
    out = []
    try:
        nums = sorted(set(plt.get_fignums()) - before)
    except BaseException:
        return []
    for num in nums:
        try:
            manager = plt._pylab_helpers.Gcf.get_fig_manager(num)
            fig = manager.canvas.figure if manager is not None else None
        except BaseException:
            fig = None
        if fig is None:
            continue
        if id(fig) not in shown:
            if len(out) >= req["max_figures"]:
                out.append({"kind": "image/png", "omitted": "figure %s: the call made more than %d figures" % (num, req["max_figures"])})
            else:
                out.append(_png(fig, req))
        try:
            plt.close(fig)
        except BaseException:
            pass
    return out


def _exit_status(e):
    """As Python: None is 0, an integer is the status, anything else is
    printed to stderr and the status is 1."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def _report(e, tb):
    """Print an exception as Python would and describe it."""
    try:
        if isinstance(e, SyntaxError) and tb is None:
            text = "".join(traceback.format_exception_only(type(e), e))
        else:
            text = "".join(traceback.format_exception(type(e), e, tb))
    except BaseException:
        text = "%s: %s\n" % (_type_name(type(e)), _safe_str(e))
    try:
        (sys.stderr or _stderr).write(text)
    except BaseException:
        pass
    return {"type": _type_name(type(e)), "message": _safe_str(e), "traceback": text}


def _call(req, ns):
    n = req["n"]
    source = req["code"]
    filename = "<call %d>" % n
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    sys.stdout, sys.stderr = _stdout, _stderr
    sys.stdin = io.TextIOWrapper(io.BytesIO(base64.b64decode(req.get("stdin") or "")), encoding="utf-8")
    before = _fignums()
    shown = set()
    results = []
    end = {"t": "end", "status": "ok", "exit_code": 0}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        try:
            tree = ast.parse(source, filename, "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr) and not source.rstrip().endswith(";"):
                last = ast.Expression(tree.body.pop().value)
            code = compile(tree, filename, "exec")
        except (SyntaxError, ValueError) as e:
            end.update(status="error", exit_code=1, exception=_report(e, None))
        else:
            try:
                exec(code, ns)
                if last is not None:
                    value = eval(compile(last, filename, "eval"), ns)
                    if value is not None:
                        ns["_"] = value
                        results.append(_display(value, req, shown))
            except SystemExit as e:
                status = _exit_status(e)
                end.update(status="ok" if status == 0 else "error", exit_code=status)
            except KeyboardInterrupt as e:
                end.update(status="interrupted", exit_code=130, exception=_report(e, e.__traceback__.tb_next))
            except BaseException as e:
                # Leave this file's frame out: the traceback starts at the code.
                end.update(status="error", exit_code=1, exception=_report(e, e.__traceback__.tb_next))
        results.extend(_figures(before, req, shown))
    except KeyboardInterrupt:
        end.update(status="interrupted", exit_code=130)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    for r in results:
        r["t"] = "result"
        _send(r)
    return end


def _finish(req, end):
    """Flush the streams, mark their end for the launcher, report."""
    for f in (sys.stdout, sys.stderr, _stdout, _stderr):
        try:
            f.flush()
        except BaseException:
            pass
    marker = req["marker"].encode("ascii")
    for fd in (1, 2):
        try:
            os.write(fd, marker)
        except OSError:
            pass
    _send(end)


def _setup():
    os.environ["MPLBACKEND"] = "Agg"
    if "matplotlib" in sys.modules:
        try:
            plt = _pyplot()
            if plt is not None:
                plt.switch_backend("Agg")
            else:
                sys.modules["matplotlib"].use("Agg")
        except BaseException:
            pass
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.argv = [""]
    if sys.path:
        sys.path[0] = "/sandbox"
    try:
        os.chdir("/sandbox")
    except OSError:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return main.__dict__


def _main():
    ns = _setup()
    _send({"t": "ready"})
    while True:
        try:
            req = _recv()
        except EOFError:
            os._exit(0)
        end = {"t": "end", "status": "error", "exit_code": 1}
        try:
            end = _call(req, ns)
        except BaseException as e:
            end["exception"] = {"type": _type_name(type(e)), "message": _safe_str(e), "traceback": ""}
        _finish(req, end)


_main()
