"""Terminals: :class:`Pty` (blocking) and :class:`AsyncPty`.

``sb.pty()`` runs the user's login shell (or ``cmd``) on a new
pseudo-terminal inside the sandbox, as a terminal emulator would: job
control, ``stty size`` that follows ``resize()``, Ctrl-C (``"\\x03"``)
reaching the foreground job. Its output is pushed by the node as it comes
(never polled) and read with ``read(timeout=...)`` or by iterating; the node
keeps the last 64 KiB, so ``sb.pty_attach(pid)`` from any client gets what
it missed first. The terminal lives until its command exits, ``kill()``, or
the sandbox is destroyed; writing to one that exited raises Conflict.
"""

import queue
import signal as _signal
import threading
import time
from typing import Iterator, Mapping, Optional, Sequence, Union

from . import _spec
from .errors import InvalidArgument
from .types import ExecResult, ProcessStatus

__all__ = ["Pty", "AsyncPty"]


def pty_args(sandbox_id, cmd, cols, rows, env, cwd):
    """sb.pty() arguments -> the native (id, exec args or None, cols, rows)."""
    for name, v in (("cols", cols), ("rows", rows)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1000:
            raise InvalidArgument(f"pty: {name} must be an int in 1..1000, got {v!r}")
    if cmd is None:
        args = ([], _spec._string("cwd", cwd) if cwd is not None else "",
                _spec._str_map("env", env) if env is not None else {}, b"", 0.0)
    else:
        args = _spec.make_exec(cmd, cwd, env, None, None)
    return (sandbox_id, args, cols, rows)


def _data(data) -> bytes:
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise InvalidArgument(f"pty write: data must be bytes or str, got {type(data).__name__}")


class _Output:
    """The terminal's pushed output, taken off the native stream by a daemon
    thread (it waits with the GIL released) into a queue."""

    def __init__(self, native):
        self._q: "queue.Queue[Optional[bytes]]" = queue.Queue()
        self.ended = False
        self._native = native
        t = threading.Thread(target=self._pump, name="dsec-pty", daemon=True)
        t.start()

    def _pump(self):
        try:
            for _stream, data in self._native:
                self._q.put(bytes(data))
        except Exception:  # the stream's error is the wait()'s to report
            pass
        self._q.put(None)

    def read(self, timeout: Optional[float]) -> bytes:
        """What arrived within ``timeout`` s of waiting for the first bytes
        (None: until some come or the terminal ends), b"" if nothing did."""
        if self.ended and self._q.empty():
            return b""
        out = []
        try:
            first = self._q.get(timeout=timeout) if timeout is None or timeout > 0 \
                else self._q.get_nowait()
        except queue.Empty:
            return b""
        item = first
        while True:
            if item is None:
                self.ended = True
                break
            out.append(item)
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                break
        return b"".join(out)


class _PtyBase:
    def __init__(self, sandbox, status: ProcessStatus):
        self._sandbox = sandbox
        self.pid: int = status.pid
        self._out = _Output(sandbox._client._conn.follow(sandbox.id, self.pid))

    def __repr__(self):
        return f"<dsec.{type(self).__name__} pid {self.pid} in {self._sandbox.id}>"

    @property
    def exited(self) -> bool:
        """True once its output ended (the command exited and was read to the end)."""
        return self._out.ended

    def _read_until(self, pattern, timeout: float) -> bytes:
        pattern = _data(pattern)
        deadline = time.monotonic() + timeout
        got = b""
        while pattern not in got:
            left = deadline - time.monotonic()
            if left <= 0 or self._out.ended:
                break
            got += self._out.read(min(left, 0.5))
        return got


class Pty(_PtyBase):
    """A terminal in a sandbox (``Sandbox.pty()``). ``pid`` is its command's
    pid inside the sandbox."""

    def write(self, data: Union[bytes, str]) -> None:
        """Types ``data`` (str as UTF-8) at the terminal; ``"\\x03"`` is Ctrl-C."""
        self._sandbox._client._call("pty_write", (self._sandbox.id, self.pid, _data(data)))

    def resize(self, cols: int, rows: int) -> None:
        """Sets the terminal's size (its foreground job gets SIGWINCH)."""
        pty_args(self._sandbox.id, None, cols, rows, None, None)
        self._sandbox._client._call("pty_resize", (self._sandbox.id, self.pid, cols, rows))

    def read(self, timeout: Optional[float] = 1.0) -> bytes:
        """The output that arrived, waiting up to ``timeout`` s for the first
        bytes; b"" if none came (or the terminal ended)."""
        return self._out.read(timeout)

    def read_until(self, pattern: Union[bytes, str], timeout: float = 10.0) -> bytes:
        """Reads until ``pattern`` was seen or ``timeout`` s passed; returns all it read."""
        return self._read_until(pattern, timeout)

    def __iter__(self) -> Iterator[bytes]:
        """Its output as it comes, until the terminal ends."""
        while True:
            data = self._out.read(None)
            if not data and self._out.ended:
                return
            if data:
                yield data

    def kill(self, signal: int = _signal.SIGKILL) -> None:
        """Sends ``signal`` (default SIGKILL) to the terminal's command's process group."""
        self._sandbox._client._call("signal_process",
                                    (self._sandbox.id, self.pid, int(signal), True))

    def wait(self, timeout: Optional[float] = None) -> ExecResult:
        """Waits for its command's end; the ExecResult's stdout is the kept
        scrollback. Raises Timeout past ``timeout`` s."""
        return self._sandbox.process(self.pid).wait(timeout)


class AsyncPty(_PtyBase):
    """The asyncio form of :class:`Pty` (``await sb.pty()``)."""

    async def write(self, data: Union[bytes, str]) -> None:
        await self._sandbox._client._call("pty_write", (self._sandbox.id, self.pid, _data(data)))

    async def resize(self, cols: int, rows: int) -> None:
        pty_args(self._sandbox.id, None, cols, rows, None, None)
        await self._sandbox._client._call("pty_resize", (self._sandbox.id, self.pid, cols, rows))

    async def read(self, timeout: Optional[float] = 1.0) -> bytes:
        import asyncio
        return await asyncio.get_running_loop().run_in_executor(None, self._out.read, timeout)

    async def read_until(self, pattern: Union[bytes, str], timeout: float = 10.0) -> bytes:
        import asyncio
        return await asyncio.get_running_loop().run_in_executor(
            None, self._read_until, pattern, timeout)

    def __aiter__(self):
        return self

    async def __anext__(self) -> bytes:
        while True:
            data = await self.read(None)
            if data:
                return data
            if self._out.ended:
                raise StopAsyncIteration

    async def kill(self, signal: int = _signal.SIGKILL) -> None:
        await self._sandbox._client._call("signal_process",
                                          (self._sandbox.id, self.pid, int(signal), True))

    async def wait(self, timeout: Optional[float] = None) -> ExecResult:
        return await (await self._sandbox.process(self.pid)).wait(timeout)
