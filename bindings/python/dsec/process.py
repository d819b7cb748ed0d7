"""Background commands: :class:`Process` (blocking) and :class:`AsyncProcess`.

``sb.exec(cmd, background=True)`` starts ``cmd`` and returns at once with a
handle; the command keeps running after the call (and after the client
goes), until it exits, is killed, or the sandbox is destroyed. The node keeps
its output (16 MiB per stream) and, once it ended, its result; the last 64
finished background commands of a sandbox stay readable (at most 64 MiB of
their output in all, older ones dropped first).
"""

import signal as _signal
import time
from typing import Iterator, List, Optional, Union

from . import _spec
from .errors import Timeout
from .types import ExecResult, OutputChunk, ProcessInfo, ProcessStatus

__all__ = ["Process", "AsyncProcess", "ProcessStream"]

#: How long one wait call may take on the node; longer waits are several.
_WAIT_SLICE_S = 30.0


def _signo(sig) -> int:
    if isinstance(sig, bool) or not isinstance(sig, int):
        raise _spec.InvalidArgument(f"signal: must be an int or a signal.Signals, got {sig!r}")
    return int(sig)


def _pid(pid) -> int:
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 1 << 31:
        raise _spec.InvalidArgument(f"pid: must be a positive int, got {pid!r}")
    return pid


def _timeout(timeout) -> Optional[float]:
    if timeout is None:
        return None
    t = float(_spec._number("timeout", timeout, False))
    return t


def _processes(raw) -> List[ProcessInfo]:
    return [ProcessInfo(**d) for d in raw]


class _ProcessBase:
    def __init__(self, sandbox, status: ProcessStatus):
        self._sandbox = sandbox
        self.pid: int = status.pid
        self.argv: List[str] = list(status.argv)
        self.started_at: float = status.started_at
        self._last = status

    @property
    def cmd(self) -> str:
        """The command: the shell string, or argv joined by spaces."""
        if len(self.argv) == 3 and self.argv[:2] == ["/bin/sh", "-c"]:
            return self.argv[2]
        return " ".join(self.argv)

    def __repr__(self):
        return f"<dsec.{type(self).__name__} pid {self.pid} in {self._sandbox.id}: {self.cmd!r}>"

    # wait() in slices of at most _WAIT_SLICE_S on the node, shared by both forms.

    @staticmethod
    def _deadline(timeout: Optional[float]) -> Optional[float]:
        return None if timeout is None else time.monotonic() + timeout

    @staticmethod
    def _slice_ms(deadline: Optional[float]) -> int:
        left = _WAIT_SLICE_S if deadline is None else max(0.0, deadline - time.monotonic())
        return int(min(left, _WAIT_SLICE_S) * 1000)

    def _after_slice(self, native, timeout, deadline) -> Optional[ExecResult]:
        """The result once it ended, None to wait on; Timeout past the deadline."""
        st = ProcessStatus._from_native(native)
        self._last = st
        if not st.running:
            return st._result()
        if deadline is not None and time.monotonic() >= deadline:
            # The caller's own bound on the agent's command: not the platform's.
            raise Timeout(f"wait for pid {self.pid} in {self._sandbox.id}: still running "
                          f"after {timeout} s", "timeout", infra=False)
        return None


class Process(_ProcessBase):
    """A command started by ``Sandbox.exec(..., background=True)``.

    ``pid`` is its pid inside the sandbox. ``stdout``/``stderr`` (and
    ``status()``) ask the node for the output so far; ``wait()`` returns the
    same ExecResult a normal exec does; ``kill()`` signals its process group.
    """

    def status(self) -> ProcessStatus:
        """State and output so far (exit_code None while it runs)."""
        self._last = ProcessStatus._from_native(
            self._sandbox._client._call("process", (self._sandbox.id, self.pid, 0)))
        return self._last

    def output(self) -> ProcessStatus:
        """Same as status(): the output so far and, once ended, the result."""
        return self.status()

    @property
    def stdout(self) -> str:
        """Its stdout so far (UTF-8, invalid bytes replaced)."""
        return self.status().stdout

    @property
    def stderr(self) -> str:
        """Its stderr so far (UTF-8, invalid bytes replaced)."""
        return self.status().stderr

    @property
    def running(self) -> bool:
        """True until it exited (asks the node)."""
        return self.status().running

    def wait(self, timeout: Optional[float] = None) -> ExecResult:
        """Waits for its end and returns its ExecResult; raises Timeout if it
        still runs after ``timeout`` seconds (None = as long as it takes)."""
        timeout = _timeout(timeout)
        deadline = self._deadline(timeout)
        while True:
            native = self._sandbox._client._call(
                "process", (self._sandbox.id, self.pid, self._slice_ms(deadline)))
            result = self._after_slice(native, timeout, deadline)
            if result is not None:
                return result

    def stream(self) -> "ProcessStream":
        """Its output as the node pushes it, nothing polled: first what it
        printed before (as much as the node keeps), then live output, until
        it ends::

            p = sb.exec("for i in 1 2 3; do echo $i; sleep 1; done", background=True)
            s = p.stream()
            for chunk in s:
                print(chunk.stream, chunk.text)
            print(s.result.exit_code)

        Any number of streams may follow one command, from any client.
        """
        return ProcessStream(self._sandbox._client._conn.follow(self._sandbox.id, self.pid))

    def kill(self, signal: int = _signal.SIGKILL) -> None:
        """Sends ``signal`` (default SIGKILL) to its process group."""
        self._sandbox._client._call(
            "signal_process", (self._sandbox.id, self.pid, _signo(signal), True))


class ProcessStream:
    """Output chunks of a followed background command (``Process.stream()``);
    ``result`` once iteration ended: its ExecResult, with the output the
    stream carried."""

    def __init__(self, native):
        self._native = native
        self._out: List[bytes] = []
        self._err: List[bytes] = []
        self._result: Optional[ExecResult] = None

    def __iter__(self) -> Iterator[OutputChunk]:
        for t in self._native:
            chunk = OutputChunk._from_native(t)
            (self._out if chunk.stream == "stdout" else self._err).append(chunk.data)
            yield chunk

    @property
    def result(self) -> ExecResult:
        """The ExecResult; raises the call's error. Iterate the stream first."""
        if self._result is None:
            st = ProcessStatus._from_native(self._native.result())
            r = st._result()
            self._result = ExecResult(r.exit_code, b"".join(self._out), b"".join(self._err),
                                      r.timed_out, r.duration_ms, r.truncated)
        return self._result

    def wait(self) -> ExecResult:
        """Reads the remaining output and returns the result."""
        for _ in self:
            pass
        return self.result


class AsyncProcess(_ProcessBase):
    """The asyncio form of :class:`Process` (``await sb.exec(..., background=True)``)."""

    async def status(self) -> ProcessStatus:
        """State and output so far (exit_code None while it runs)."""
        self._last = ProcessStatus._from_native(
            await self._sandbox._client._call("process", (self._sandbox.id, self.pid, 0)))
        return self._last

    async def output(self) -> ProcessStatus:
        """Same as status()."""
        return await self.status()

    async def wait(self, timeout: Optional[float] = None) -> ExecResult:
        """Waits for its end and returns its ExecResult; raises Timeout if it
        still runs after ``timeout`` seconds (None = as long as it takes)."""
        timeout = _timeout(timeout)
        deadline = self._deadline(timeout)
        while True:
            native = await self._sandbox._client._call(
                "process", (self._sandbox.id, self.pid, self._slice_ms(deadline)))
            result = self._after_slice(native, timeout, deadline)
            if result is not None:
                return result

    async def kill(self, signal: int = _signal.SIGKILL) -> None:
        """Sends ``signal`` (default SIGKILL) to its process group."""
        await self._sandbox._client._call(
            "signal_process", (self._sandbox.id, self.pid, _signo(signal), True))
