"""The stateful code interpreter: ``sb.run_code(code)`` (issue 26 part 4).

A sandbox made from the ``base/code-interpreter@1`` layer (E2B template
``code-interpreter-v1``) runs the interpreter's server on port 49999 from
its start. ``run_code`` reaches it through an ordinary exec of the client the
layer ships (``/usr/lib/dsec/interp_client.py``), so it works on every
backend and in ``network: none`` sandboxes::

    sb = c.create(layers=["base/code-interpreter@1"])
    sb.run_code("x = 1")
    sb.run_code("x + 1").text                 # '2'
    ex = sb.run_code("import matplotlib.pyplot as plt; plt.plot([1, 2]); plt.show()")
    ex.results[0]["image/png"]               # base64 PNG
    ctx = sb.code_context()                   # another, independent set of globals
    sb.run_code("x", context=ctx).error.name  # 'NameError'

A cell past ``timeout_s`` is interrupted (KeyboardInterrupt in the cell) and
comes back with ``error.name == "TimeoutError"`` and ``timed_out=True``; the
context keeps its state. Python is the only language.
"""

import json
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Union

from .errors import Error, InvalidArgument, NotFound

__all__ = ["Execution", "ExecutionError", "CodeContext", "InterpreterNotRunning"]

#: The layer that provides the interpreter, and its client inside the sandbox.
LAYER = "base/code-interpreter@1"
CLIENT = ["/usr/bin/python3", "-S", "/usr/lib/dsec/interp_client.py"]  # -S: no site, faster
LANGUAGES = ("python", "python3")
#: How long the client waits for the server to listen (it starts with the
#: sandbox; a microVM under emulation takes seconds).
WAIT_S = 60.0
#: Exec bound beyond a cell's own timeout: the interrupt, and a kill plus a
#: context restart if the cell ignores it.
GRACE_S = 30.0

# E2B result keys -> mime types.
MIME = {"text": "text/plain", "html": "text/html", "markdown": "text/markdown",
        "svg": "image/svg+xml", "png": "image/png", "jpeg": "image/jpeg",
        "pdf": "application/pdf", "latex": "text/latex", "json": "application/json",
        "javascript": "application/javascript"}


class InterpreterNotRunning(Error):
    """The sandbox runs no code interpreter (it was not made from the
    ``base/code-interpreter@1`` layer, or its server died)."""

    code = "failed_precondition"
    infra = False


@dataclass
class ExecutionError:
    """The exception a cell raised: its class name, str() and traceback."""

    name: str
    value: str
    traceback: str


@dataclass
class CodeContext:
    """A set of globals in the sandbox's interpreter (``sb.code_context()``)."""

    id: str
    language: str = "python"
    cwd: str = "/"


@dataclass
class Execution:
    """What one ``run_code`` produced.

    ``results`` are mime bundles (``{"text/plain": ..., "image/png": <base64>}``)
    in the order they were made: matplotlib figures, then the value of the
    cell's last expression (``is_main_result``). ``text`` is that value's
    text/plain, or None.
    """

    results: List[Dict[str, object]] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    error: Optional[ExecutionError] = None
    execution_count: Optional[int] = None
    timed_out: bool = False

    @property
    def text(self) -> Optional[str]:
        for r in self.results:
            if r.get("is_main_result"):
                return r.get("text/plain")
        return None


OnText = Optional[Callable[[str], object]]
OnResult = Optional[Callable[[Dict[str, object]], object]]


def execute_request(sandbox_id: str, code: str, language: Optional[str],
                    context: Union[CodeContext, str, None], timeout_s: Optional[float],
                    env: Optional[Dict[str, str]]):
    """(stdin for the client, the exec's timeout)."""
    if not isinstance(code, str):
        raise InvalidArgument("run_code: code must be a str")
    if language is not None and language not in LANGUAGES:
        raise InvalidArgument(f"run_code in {sandbox_id}: language {language!r} is not "
                              f"supported (the code interpreter runs python only)")
    if timeout_s is not None and (not isinstance(timeout_s, (int, float)) or timeout_s <= 0):
        raise InvalidArgument("run_code: timeout_s must be a number of seconds > 0")
    body = {"code": code}
    cid = context.id if isinstance(context, CodeContext) else context
    if cid is not None:
        if not isinstance(cid, str) or not cid:
            raise InvalidArgument("run_code: context must be a CodeContext or its id")
        body["context_id"] = cid
    if env:
        body["env_vars"] = {str(k): str(v) for k, v in env.items()}
    if timeout_s is not None:
        body["timeout"] = float(timeout_s)
    req = {"method": "POST", "path": "/execute", "body": body, "wait_s": WAIT_S}
    exec_timeout = WAIT_S + GRACE_S + (timeout_s if timeout_s is not None else 24 * 3600)
    return json.dumps(req), exec_timeout


def context_request(method: str, path: str, body=None) -> str:
    return json.dumps({"method": method, "path": path, "body": body, "wait_s": WAIT_S})


def raise_http(sandbox_id: str, what: str, status: int, message: str):
    if status == 503:
        raise InterpreterNotRunning(
            f"{what} in {sandbox_id}: {message}; the code interpreter runs in sandboxes made "
            f"from the {LAYER} layer (E2B template code-interpreter-v1)")
    if status == 404:
        raise NotFound(f"{what} in {sandbox_id}: {message}")
    if status == 400:
        raise InvalidArgument(f"{what} in {sandbox_id}: {message}")
    raise Error(f"{what} in {sandbox_id}: the code interpreter answered {status}: {message}")


def no_client(sandbox_id: str, what: str, exit_code: int, stderr: str):
    """The client could not run at all (no python3 or no client file)."""
    raise InterpreterNotRunning(
        f"{what} in {sandbox_id}: the code interpreter is not running: its client "
        f"{CLIENT[-1]} could not run (exit {exit_code}: {stderr.strip()[:300]}); the code "
        f"interpreter runs in sandboxes made from the {LAYER} layer (E2B template "
        f"code-interpreter-v1)")


class Collector:
    """Builds an Execution from the client's NDJSON lines, calling the
    callbacks as they come."""

    def __init__(self, sandbox_id: str, on_stdout: OnText = None, on_stderr: OnText = None,
                 on_result: OnResult = None):
        self.sandbox_id = sandbox_id
        self.ex = Execution()
        self.cb = {"stdout": on_stdout, "stderr": on_stderr}
        self.on_result = on_result
        self.pending = b""
        self.out: List[str] = []
        self.err: List[str] = []
        self.http_error = None
        self.body = None
        self.ended = False

    def feed(self, data: bytes):
        """Consumes output bytes; returns the callbacks to call, in order."""
        self.pending += data
        calls = []
        while b"\n" in self.pending:
            line, self.pending = self.pending.split(b"\n", 1)
            if line.strip():
                calls.extend(self._line(line))
        return calls

    def _line(self, line: bytes):
        try:
            msg = json.loads(line)
        except ValueError:
            return []
        t = msg.get("type")
        if t in ("stdout", "stderr"):
            (self.out if t == "stdout" else self.err).append(msg.get("text", ""))
            f = self.cb[t]
            return [(f, msg.get("text", ""))] if f else []
        if t == "result":
            bundle = {MIME.get(k, k): v for k, v in msg.items()
                      if k not in ("type", "is_main_result")}
            bundle["is_main_result"] = bool(msg.get("is_main_result"))
            self.ex.results.append(bundle)
            return [(self.on_result, bundle)] if self.on_result else []
        if t == "error":
            self.ex.error = ExecutionError(msg.get("name", ""), msg.get("value", ""),
                                           msg.get("traceback", ""))
            if self.ex.error.name == "TimeoutError":
                self.ex.timed_out = True
        elif t == "number_of_executions":
            self.ex.execution_count = msg.get("execution_count")
        elif t == "end_of_execution":
            self.ended = True
        elif t == "http_error":
            self.http_error = (int(msg.get("status", 500)), msg.get("message", ""))
        elif t == "http_body":
            self.body = msg.get("body", "")
        return []

    def finish(self, what: str, exit_code: int, stderr: str) -> Execution:
        if self.http_error is not None:
            raise_http(self.sandbox_id, what, *self.http_error)
        if not self.ended and self.body is None:
            if exit_code in (126, 127, 2) or not self.out and not self.ex.results:
                no_client(self.sandbox_id, what, exit_code, stderr)
            raise Error(f"{what} in {self.sandbox_id}: the code interpreter's answer ended "
                        f"early (client exit {exit_code}: {stderr.strip()[:300]})")
        self.ex.stdout = "".join(self.out)
        self.ex.stderr = "".join(self.err)
        return self.ex


def parse_body(sandbox_id: str, what: str, result) -> object:
    """The JSON body of a /contexts answer, from the client's ExecResult."""
    c = Collector(sandbox_id)
    c.feed(result.stdout_bytes + b"\n")
    if c.http_error is not None:
        raise_http(sandbox_id, what, *c.http_error)
    if c.body is None:
        no_client(sandbox_id, what, result.exit_code, result.stderr)
    return json.loads(c.body) if c.body else None


def _client_failed(sandbox_id: str, what: str, e: Error):
    """An exec that cannot start the client (no python3 in the sandbox) is
    InterpreterNotRunning; the sandbox's own errors (NotFound once destroyed,
    Unavailable, Timeout) pass as they are."""
    if isinstance(e, InvalidArgument) and not isinstance(e, NotFound):
        no_client(sandbox_id, what, -1, str(e))
    raise e


def context_body(sandbox_id: str, cwd: Optional[str], language: str) -> dict:
    if language not in LANGUAGES:
        raise InvalidArgument(f"code_context in {sandbox_id}: language {language!r} is not "
                              f"supported (the code interpreter runs python only)")
    if cwd is not None and (not isinstance(cwd, str) or not cwd.startswith("/")):
        raise InvalidArgument(f"code_context in {sandbox_id}: cwd must be an absolute path")
    body = {"language": "python"}
    if cwd is not None:
        body["cwd"] = cwd
    return body


def context_id(context: Union[CodeContext, str]) -> str:
    cid = context.id if isinstance(context, CodeContext) else context
    if not isinstance(cid, str) or not cid or "/" in cid:
        raise InvalidArgument("code context: expected a CodeContext or its id")
    return cid


def _answer(method: str, path: str, d):
    if method == "POST" and path == "/contexts":
        return CodeContext(d["id"], d.get("language", "python"), d.get("cwd", "/"))
    if method == "GET":
        return [CodeContext(x["id"], x.get("language", "python"), x.get("cwd", "/")) for x in d]
    return None


def context_call(exec_fn, sandbox_id: str, what: str, method: str, path: str, body=None):
    """A /contexts request through the client, by a sync exec."""
    stdin = context_request(method, path, body)
    try:
        r = exec_fn(CLIENT, stdin=stdin, timeout_s=WAIT_S + 30)
    except Error as e:
        _client_failed(sandbox_id, what, e)
    return _answer(method, path, parse_body(sandbox_id, what, r))


async def context_call_async(exec_fn, sandbox_id: str, what: str, method: str, path: str,
                             body=None):
    """context_call by an async exec."""
    stdin = context_request(method, path, body)
    try:
        r = await exec_fn(CLIENT, stdin=stdin, timeout_s=WAIT_S + 30)
    except Error as e:
        _client_failed(sandbox_id, what, e)
    return _answer(method, path, parse_body(sandbox_id, what, r))


def run_code(sb, code, language, context, timeout_s, env, on_stdout, on_stderr, on_result):
    """Sandbox.run_code: the client's output streamed through exec_stream."""
    stdin, t = execute_request(sb.id, code, language, context, timeout_s, env)
    c = Collector(sb.id, on_stdout, on_stderr, on_result)
    err = []
    try:
        s = sb.exec_stream(CLIENT, stdin=stdin, timeout_s=t)
        for chunk in s:
            if chunk.stream == "stdout":
                for f, arg in c.feed(chunk.data):
                    f(arg)
            else:
                err.append(chunk.data)
        r = s.result
    except Error as e:
        _client_failed(sb.id, "run_code", e)
    for f, arg in c.feed(b"\n"):
        f(arg)
    return c.finish("run_code", r.exit_code, b"".join(err).decode("utf-8", "replace"))


async def run_code_async(sb, code, language, context, timeout_s, env, on_stdout, on_stderr,
                         on_result):
    """AsyncSandbox.run_code; callbacks may be coroutine functions."""
    import inspect
    stdin, t = execute_request(sb.id, code, language, context, timeout_s, env)
    c = Collector(sb.id, on_stdout, on_stderr, on_result)
    err = []

    async def call(calls):
        for f, arg in calls:
            r = f(arg)
            if inspect.isawaitable(r):
                await r
    try:
        s = sb.exec_stream(CLIENT, stdin=stdin, timeout_s=t)
        async for chunk in s:
            if chunk.stream == "stdout":
                await call(c.feed(chunk.data))
            else:
                err.append(chunk.data)
        r = s.result
    except Error as e:
        _client_failed(sb.id, "run_code", e)
    await call(c.feed(b"\n"))
    return c.finish("run_code", r.exit_code, b"".join(err).decode("utf-8", "replace"))
