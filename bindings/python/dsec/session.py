"""Shell sessions (DSec's chronus, SWE-ReX): a long-lived shell in a sandbox.

``s = sb.session()`` opens one (``/bin/bash`` unless ``shell=`` says
otherwise); ``s.run(cmd, timeout_s=...)`` runs a command line in it and
returns the usual :class:`ExecResult`. The working directory, environment,
shell variables, functions and aliases carry over from one run to the next.
A run's stdin is ``/dev/null``; its output is exactly what it printed (with or
without a trailing newline). One run at a time per session (another raises
Conflict). A run that passes ``timeout_s`` is interrupted as Ctrl-C would
(SIGINT to the shell's process group) and answers ``timed_out=True``,
``exit_code=130``; the session goes on. A shell that exits (``exit`` inside)
ends its session: later runs raise Conflict. ``s.close()`` (or ``with``)
kills the shell and every job it started.
"""

from dataclasses import dataclass
from typing import Mapping, Optional, Union

from ._spec import _number, _str_map, _string
from .errors import Error, InvalidArgument
from .types import ExecResult

__all__ = ["SessionInfo", "Session", "AsyncSession"]


@dataclass(frozen=True)
class SessionInfo:
    """A session as listed: ``alive`` is False once its shell ended, and
    ``reason`` says why."""
    id: str
    shell: str
    alive: bool
    runs: int
    created_at: float
    reason: str


def open_args(sandbox_id, shell, cwd, env):
    return (sandbox_id, _string("shell", shell) if shell is not None else "",
            _string("cwd", cwd) if cwd is not None else "",
            _str_map("env", env) if env is not None else {})


def run_args(sandbox_id, session_id, cmd, timeout_s):
    if isinstance(cmd, (bytes, bytearray)):
        cmd = bytes(cmd)
    elif not isinstance(cmd, str):
        raise InvalidArgument(f"cmd: must be a str or bytes, got {type(cmd).__name__}")
    if not cmd:
        raise InvalidArgument("cmd: must not be empty")
    timeout = 0.0 if timeout_s is None else float(_number("timeout_s", timeout_s, False))
    if timeout < 0:
        raise InvalidArgument("timeout_s: must be >= 0")
    return (sandbox_id, session_id, cmd, timeout)


class Session:
    """One shell session of a :class:`Sandbox` (see the module's text)."""

    def __init__(self, sandbox, info: SessionInfo):
        self._sandbox = sandbox
        self.id: str = info.id
        self.shell: str = info.shell

    def __repr__(self):
        return f"<dsec.Session {self.id} of {self._sandbox.id}>"

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc):
        try:
            self.close()
        except Error:
            if exc[0] is None:
                raise

    def run(self, cmd: Union[str, bytes], *, timeout_s: Optional[float] = None) -> ExecResult:
        """Runs ``cmd`` (a shell command line, may span lines) in the session."""
        return ExecResult._from_native(self._sandbox._client._call(
            "session_run", run_args(self._sandbox.id, self.id, cmd, timeout_s)))

    def close(self) -> None:
        """Ends the session: its shell and every job it started are killed."""
        self._sandbox._client._call("session_close", (self._sandbox.id, self.id))


class AsyncSession:
    """The same for an :class:`AsyncSandbox`: ``run`` and ``close`` are
    coroutines; ``async with`` closes it."""

    def __init__(self, sandbox, info: SessionInfo):
        self._sandbox = sandbox
        self.id: str = info.id
        self.shell: str = info.shell

    def __repr__(self):
        return f"<dsec.AsyncSession {self.id} of {self._sandbox.id}>"

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc):
        try:
            await self.close()
        except Error:
            if exc[0] is None:
                raise

    async def run(self, cmd: Union[str, bytes], *,
                  timeout_s: Optional[float] = None) -> ExecResult:
        """Runs ``cmd`` in the session (see Session.run)."""
        return ExecResult._from_native(await self._sandbox._client._call(
            "session_run", run_args(self._sandbox.id, self.id, cmd, timeout_s)))

    async def close(self) -> None:
        """Ends the session (see Session.close)."""
        await self._sandbox._client._call("session_close", (self._sandbox.id, self.id))
