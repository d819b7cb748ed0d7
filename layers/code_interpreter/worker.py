# One context of the code interpreter: a Python process holding the context's
# globals between cells. The server (server.py) starts it as
#
#   python3 -u worker.py CONTROL_IN_FD CONTROL_OUT_FD
#
# and sends one JSON line per cell on CONTROL_IN ({"code", "env_vars"}); the
# worker answers on CONTROL_OUT with JSON lines in the order things happened:
# {"type": "stdout"|"stderr", "text"}, {"type": "result", <E2B keys>},
# {"type": "error", "name", "value", "traceback"}, and {"type": "done"} last.
# Output written to fds 1 and 2 directly (subprocesses, C code) reaches the
# server through its own pipes. SIGINT interrupts the running cell
# (KeyboardInterrupt); the globals survive it.
import ast
import base64
import builtins
import io
import json
import linecache
import os
import signal
import sys
import traceback
import types

# Output the server streams line by line (a partial line at a flush, at
# the cell's end or past this many characters).
FLUSH_AT = 4096

# The Jupyter repr methods and the E2B result keys they fill.
REPR_KEYS = (("_repr_html_", "html"), ("_repr_markdown_", "markdown"), ("_repr_svg_", "svg"),
             ("_repr_png_", "png"), ("_repr_jpeg_", "jpeg"), ("_repr_latex_", "latex"),
             ("_repr_json_", "json"), ("_repr_javascript_", "javascript"),
             ("_repr_pdf_", "pdf"))

_out = None  # CONTROL_OUT, binary, unbuffered


def send(msg):
    _out.write((json.dumps(msg) + "\n").encode())


class _Stream(io.TextIOBase):
    """sys.stdout / sys.stderr of the cells: text to the server, in order
    with the results."""

    def __init__(self, name):
        self.name = name
        self._buf = ""

    def writable(self):
        return True

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        self._buf += s
        if len(self._buf) >= FLUSH_AT:
            self.flush()
        elif "\n" in s:
            cut = self._buf.rindex("\n") + 1
            send({"type": self.name, "text": self._buf[:cut]})
            self._buf = self._buf[cut:]
        return len(s)

    def flush(self):
        if self._buf:
            text, self._buf = self._buf, ""
            send({"type": self.name, "text": text})

    def isatty(self):
        return False

    def fileno(self):
        return 1 if self.name == "stdout" else 2


def flush_streams():
    sys.stdout.flush()
    sys.stderr.flush()


def _b64(data):
    return base64.b64encode(data).decode("ascii")


def figure_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return _b64(buf.getvalue())


def flush_figures():
    """Every open matplotlib figure as a result with image/png, then closed
    (what plt.show() does here, and the end of every cell)."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    flush_streams()
    for num in plt.get_fignums():
        fig = plt.figure(num)
        try:
            send({"type": "result", "png": figure_png(fig), "text": repr(fig),
                  "is_main_result": False})
        except Exception as e:  # a broken figure must not lose the cell
            send({"type": "stderr", "text": f"figure {num}: cannot render: {e!r}\n"})
    plt.close("all")


def bundle(value):
    """The E2B result keys of a value: text (repr) plus its Jupyter reprs."""
    out = {"text": repr(value)}
    if isinstance(value, type):
        return out
    if type(value).__module__ == "matplotlib.figure":
        out["png"] = figure_png(value)
        return out
    for meth, key in REPR_KEYS:
        f = getattr(value, meth, None)
        if not callable(f):
            continue
        try:
            r = f()
        except Exception:
            continue
        if isinstance(r, tuple):  # (data, metadata)
            r = r[0]
        if r is None:
            continue
        if isinstance(r, bytes):
            r = _b64(r)
        out[key] = r
    return out


def _user_frames(tb):
    """Skips the worker's own frames at the top of a traceback."""
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb


def report_error(e):
    flush_streams()
    tb = "".join(traceback.format_exception(type(e), e, _user_frames(e.__traceback__)))
    send({"type": "error", "name": type(e).__name__, "value": str(e), "traceback": tb})


def run_cell(ns, count, code):
    name = f"<cell-{count}>"
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    tree = ast.parse(code, name, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, name, "exec"), ns)
    value = eval(compile(last, name, "eval"), ns) if last is not None else None
    flush_figures()
    if value is not None:
        ns["_"] = value
        flush_streams()
        res = bundle(value)
        res.update({"type": "result", "is_main_result": True})
        send(res)


def with_env(env_vars, f):
    """Runs f() with `env_vars` set in os.environ, then puts them back."""
    saved = {k: os.environ.get(k) for k in env_vars}
    os.environ.update({str(k): str(v) for k, v in env_vars.items()})
    try:
        f()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main():
    global _out
    # SIGINT interrupts a cell even if whoever started the server ignored it
    # (a shell's background job does; Python then installs no handler).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cin = os.fdopen(int(sys.argv[1]), "rb", buffering=0)
    _out = os.fdopen(int(sys.argv[2]), "wb", buffering=0)
    sys.modules["__dsec_worker__"] = sys.modules[__name__]
    # The cells' globals are a module of their own named __main__ (pickle
    # and `import __main__` find what the cells defined).
    main_mod = types.ModuleType("__main__")
    main_mod.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main_mod
    ns = main_mod.__dict__
    sys.stdout, sys.stderr = _Stream("stdout"), _Stream("stderr")
    count = 0
    pending = b""
    while True:
        try:
            while b"\n" not in pending:
                chunk = cin.read(65536)
                if not chunk:
                    return
                pending += chunk
        except KeyboardInterrupt:
            continue  # came after the cell ended: nothing to stop
        line, pending = pending.split(b"\n", 1)
        req = json.loads(line)
        count += 1
        try:
            with_env(req.get("env_vars") or {}, lambda: run_cell(ns, count, req["code"]))
        except BaseException as e:  # the cell's failure, SystemExit and ^C too
            report_error(e)
            plt = sys.modules.get("matplotlib.pyplot")
            if plt is not None:
                plt.close("all")
        done = False
        while not done:  # "done" must reach the server, whatever interrupts
            try:
                flush_streams()
                send({"type": "done"})
                done = True
            except KeyboardInterrupt:
                pass

if __name__ == "__main__":
    main()
