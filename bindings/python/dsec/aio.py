"""The asyncio client: :class:`AsyncClient` and :class:`AsyncSandbox`.

No thread per call: calls are submitted to the native client and their
results come back through one eventfd that the event loop watches, so
``asyncio.gather`` over hundreds of execs costs no more threads than one.
Cancelling the task of an exec kills the command on the node.

Fork: an AsyncClient inherited by a forked child works on the child's own
event loop (``asyncio.run`` in the child). Calls that were in flight in the
parent at the fork answer in the parent; in the child they raise Unavailable.
The child never touches the parent's loop: its epoll set is shared with the
parent's across fork, and removing our eventfd from it in the child would
remove it for the parent too.
"""

import asyncio
import itertools
import os
import weakref
from typing import List, Mapping, Optional, Sequence, Union

from . import _native
from . import _spec
from .client import MAX_READ_BYTES, _Handle, _info, _nodes_info
from .errors import Error, InvalidArgument, Unavailable
from .job import JobResult, job_args, job_result
from .ports import _port_number, _port_url
from .types import ExecResult, LayerInfo, NodeInfo, OutputChunk, SandboxInfo, SnapshotInfo
from .types import ProcessInfo, ProcessStatus, SandboxMetrics
from .process import AsyncProcess, _pid, _processes, _signo
from .pty import AsyncPty, pty_args
from .session import AsyncSession, SessionInfo, open_args as _session_open_args

from . import interp as _interp
from .interp import CodeContext, Execution

__all__ = ["AsyncClient", "AsyncSandbox", "AsyncExecStream"]


class _Dispatcher:
    """Routes completions from the native queue to futures on one loop."""

    def __init__(self, loop):
        self.loop = loop
        self.pid = os.getpid()
        self.queue = _native.CompletionQueue()
        self.tickets = itertools.count(1)
        self.futures = {}   # ticket -> Future (final result)
        self.streams = {}   # ticket -> asyncio.Queue of chunks
        loop.add_reader(self.queue.fd, self._drain)
        _dispatchers.add(self)

    def inherited(self) -> bool:
        """Made in the parent of this (forked) process."""
        return self.pid != os.getpid()

    def _fail_inherited(self):
        """In a forked child: ends the parent's calls in flight with Unavailable
        (their answers go to the parent), so nothing here awaits them forever."""
        futures, streams = self.futures, self.streams
        self.futures, self.streams = {}, {}
        for ticket, fut in futures.items():
            try:
                q = streams.pop(ticket, None)
                if q is not None:
                    q.put_nowait(None)
                if not fut.done():
                    fut.set_exception(Unavailable(
                        "call started before this process was forked: its answer goes to "
                        "the parent process; call again in this process (an AsyncClient "
                        "inherited across fork works on the child's own event loop)"))
                    # Usually nobody in the child awaits it: no "exception was
                    # never retrieved" log when it is collected.
                    fut._log_traceback = False
            except Exception:  # a closed loop: nobody can await these anyway
                pass

    def _drain(self):
        for ticket, final, exc, value in self.queue.drain():
            if not final:
                q = self.streams.get(ticket)
                if q is not None:
                    q.put_nowait(value)
                continue
            q = self.streams.pop(ticket, None)
            if q is not None:
                q.put_nowait(None)  # end of output
            fut = self.futures.pop(ticket, None)
            if fut is None or fut.done():
                continue
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(value)

    def submit(self, conn, op, args, stream=False):
        """Returns (ticket, token, future, chunk queue or None)."""
        ticket = next(self.tickets)
        fut = self.loop.create_future()
        self.futures[ticket] = fut
        q = None
        if stream:
            q = asyncio.Queue()
            self.streams[ticket] = q
        token = conn.submit(self.queue, ticket, op, args, stream)
        return ticket, token, fut, q

    def close(self):
        # In a child the loop's epoll set is the parent's: leave it alone.
        if not self.inherited() and not self.loop.is_closed():
            self.loop.remove_reader(self.queue.fd)


# Live dispatchers, so a forked child can end the parent's calls in flight.
_dispatchers = weakref.WeakSet()


def _after_fork_in_child():
    for d in list(_dispatchers):
        d._fail_inherited()


os.register_at_fork(after_in_child=_after_fork_in_child)


class AsyncSandbox(_Handle):
    """A handle on one sandbox; ``async with`` destroys it on exit."""

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc):
        try:
            await self.destroy()
        except Error:
            if exc[0] is None:
                raise

    async def info(self) -> SandboxInfo:
        """The sandbox's current description."""
        return _info(await self._client._call("info", (self.id,)))

    async def exec(self, cmd: Union[str, Sequence[str]], *, cwd: Optional[str] = None,
                   env: Optional[Mapping[str, str]] = None,
                   stdin: Union[bytes, str, None] = None,
                   timeout_s: Optional[float] = None,
                   background: bool = False,
                   step: Optional[str] = None) -> Union[ExecResult, AsyncProcess]:
        """Runs ``cmd`` (shell string or argv list) and returns its result.
        Cancelling the awaiting task kills the command (what it left running
        in the background survives, as in Sandbox.exec). With
        ``background=True`` returns at once with an :class:`AsyncProcess`.
        ``step`` fast-forwards from the trajectory log (see Sandbox.exec)."""
        args = _spec.make_exec(cmd, cwd, env, stdin, timeout_s, step)
        if background:
            return AsyncProcess(self, ProcessStatus._from_native(
                await self._client._call("exec_background", (self.id, args))))
        return ExecResult._from_native(await self._client._call("exec", (self.id, args)))

    async def processes(self) -> List[ProcessInfo]:
        """Every process running in the sandbox (see Sandbox.processes)."""
        return _processes(await self._client._call("processes", (self.id,)))

    async def process(self, pid: int) -> AsyncProcess:
        """A handle on background command ``pid`` (see Sandbox.process)."""
        st = ProcessStatus._from_native(
            await self._client._call("process", (self.id, _pid(pid), 0)))
        return AsyncProcess(self, st)

    async def kill_process(self, pid: int, signal: int = 9) -> None:
        """Sends ``signal`` (default SIGKILL) to process ``pid`` (see
        Sandbox.kill_process)."""
        await self._client._call("signal_process", (self.id, _pid(pid), _signo(signal), False))

    def exec_stream(self, cmd: Union[str, Sequence[str]], *, cwd: Optional[str] = None,
                    env: Optional[Mapping[str, str]] = None,
                    stdin: Union[bytes, str, None] = None,
                    timeout_s: Optional[float] = None,
                    step: Optional[str] = None) -> "AsyncExecStream":
        """Runs ``cmd``; ``async for chunk in stream`` yields output as it
        comes, then ``stream.result`` (or ``await stream.wait()``) is the result."""
        args = _spec.make_exec(cmd, cwd, env, stdin, timeout_s, step)
        return AsyncExecStream(self._client, self.id, args)

    async def write_file(self, path: str, data: Union[bytes, str]) -> None:
        """Writes a whole file (parents created; str is UTF-8)."""
        await self._client._call("write_file",
                                 (self.id, _spec.path_arg(path), _spec.file_data(data)))

    async def read_file(self, path: str, *, max_bytes: int = MAX_READ_BYTES) -> bytes:
        """Reads a whole file; TooLarge past ``max_bytes``."""
        return await self._client._call("read_file",
                                        (self.id, _spec.path_arg(path), int(max_bytes)))

    async def destroy(self) -> bool:
        """Destroys the sandbox; False if it was already gone."""
        return await self._client._call("destroy", (self.id,))

    async def pause(self, *, keep_memory: bool = True) -> SandboxInfo:
        """Freezes the sandbox and frees what memory it can; with
        ``keep_memory=False`` keeps only its files (see Sandbox.pause)."""
        if not isinstance(keep_memory, bool):
            raise InvalidArgument("pause: keep_memory must be a bool")
        op = "pause" if keep_memory else "pause_files"
        return _info(await self._client._call(op, (self.id,)))

    async def resume(self) -> SandboxInfo:
        """Undoes pause()."""
        return _info(await self._client._call("resume", (self.id,)))

    async def snapshot(self, name: Optional[str] = None,
                       version: Optional[str] = None) -> SnapshotInfo:
        """The sandbox's changes as a snapshot layer (see Sandbox.snapshot)."""
        d = await self._client._call("snapshot", (self.id,) + _spec.snapshot_args(name, version))
        return SnapshotInfo(**d)

    async def metrics(self) -> SandboxMetrics:
        """One sample of the sandbox's CPU and memory use (see Sandbox.metrics)."""
        return SandboxMetrics._from_native(await self._client._call("metrics", (self.id,)))

    async def url(self, port: int) -> str:
        """An HTTP URL that reaches ``port`` inside the sandbox (see Sandbox.url)."""
        r = await self._client._call("port", (self.id, _port_number(port)))
        return _port_url(r["rest"], self.id, port)

    async def set_network(self, allow: Optional[Sequence[str]] = None,
                          deny: Optional[Sequence[str]] = None) -> None:
        """Replaces the network policy (see Sandbox.set_network)."""
        await self._client._call("set_network", (self.id,) + _spec.make_set_network(allow, deny))

    async def update(self, *, cpu_class: Optional[str] = None,
                     network: Union[Sequence[str], Mapping[str, object], None] = None,
                     network_deny: Optional[Sequence[str]] = None) -> SandboxInfo:
        """Changes cpu class and/or network together (see Sandbox.update)."""
        args = (self.id,) + _spec.make_update(cpu_class, network, network_deny)
        return _info(await self._client._call("update", args))

    async def trajectory(self, since: Optional[int] = None) -> List[dict]:
        """The sandbox's trajectory log as dicts (see Client.trajectory)."""
        return await self._client.trajectory(self.id, since=since)

    async def replay(self, upto_seq: Optional[int] = None) -> "AsyncSandbox":
        """A new sandbox rebuilt from this one's log (see Client.replay)."""
        return await self._client.replay(self.id, upto_seq=upto_seq)

    async def set_cpu_class(self, cpu_class: str) -> SandboxInfo:
        """``await update(cpu_class=cpu_class)``."""
        return await self.update(cpu_class=cpu_class)

    # -- terminals (issue 26 part 1; dsec/pty.py) --

    async def pty(self, cmd: Union[str, Sequence[str], None] = None, cols: int = 80,
                  rows: int = 24, env: Optional[Mapping[str, str]] = None,
                  cwd: Optional[str] = None) -> AsyncPty:
        """Opens a terminal (see Sandbox.pty)."""
        st = ProcessStatus._from_native(
            await self._client._call("pty_open", pty_args(self.id, cmd, cols, rows, env, cwd)))
        return AsyncPty(self, st)

    async def pty_attach(self, pid: int) -> AsyncPty:
        """A handle on terminal ``pid`` opened earlier (see Sandbox.pty_attach)."""
        return AsyncPty(self, ProcessStatus._from_native(
            await self._client._call("process", (self.id, _pid(pid), 0))))


    # -- shell sessions (issue 26 part 2; dsec/session.py) --

    async def session(self, shell: Optional[str] = None, *, cwd: Optional[str] = None,
                      env: Optional[Mapping[str, str]] = None) -> AsyncSession:
        """Opens a shell session (see Sandbox.session)."""
        d = await self._client._call("session_open",
                                     _session_open_args(self.id, shell, cwd, env))
        return AsyncSession(self, SessionInfo(**d))

    async def sessions(self) -> List[SessionInfo]:
        """The sandbox's sessions (see Sandbox.sessions)."""
        return [SessionInfo(**d)
                for d in await self._client._call("session_list", (self.id,))]

    # -- issue 26 part 4: the stateful code interpreter (dsec/interp.py) -------

    async def run_code(self, code: str, language: Optional[str] = "python",
                       context: Union[CodeContext, str, None] = None,
                       timeout_s: Optional[float] = None, *,
                       env: Optional[Mapping[str, str]] = None,
                       on_stdout=None, on_stderr=None, on_result=None) -> Execution:
        """Runs a Python cell in the sandbox's code interpreter (see
        Sandbox.run_code); callbacks may be plain or coroutine functions."""
        return await _interp.run_code_async(self, code, language, context, timeout_s, env,
                                            on_stdout, on_stderr, on_result)

    async def code_context(self, cwd: Optional[str] = None,
                           language: str = "python") -> CodeContext:
        """A new context of the code interpreter (see Sandbox.code_context)."""
        return await _interp.context_call_async(self.exec, self.id, "code_context", "POST",
                                                "/contexts",
                                                _interp.context_body(self.id, cwd, language))

    async def code_contexts(self) -> List[CodeContext]:
        """The code interpreter's contexts."""
        return await _interp.context_call_async(self.exec, self.id, "code_contexts", "GET",
                                                "/contexts")

    async def remove_code_context(self, context: Union[CodeContext, str]) -> None:
        """Ends a context and its globals; NotFound if there is no such context."""
        await _interp.context_call_async(self.exec, self.id, "remove_code_context", "DELETE",
                                         "/contexts/" + _interp.context_id(context))

    async def restart_code_context(self, context: Union[CodeContext, str]) -> None:
        """Restarts a context: its globals are gone, its id stays."""
        await _interp.context_call_async(self.exec, self.id, "restart_code_context", "POST",
                                         "/contexts/" + _interp.context_id(context) + "/restart")


class AsyncExecStream:
    """Output of a running command as an async iterator of OutputChunk."""

    def __init__(self, client, sandbox_id, args):
        self._client = client
        self._id = sandbox_id
        d = client._dispatcher()
        _, self._token, self._fut, self._chunks = d.submit(client._conn, "exec",
                                                           (sandbox_id, args), stream=True)
        self._pid = os.getpid()
        self._ended = False

    def __aiter__(self):
        return self

    async def __anext__(self) -> OutputChunk:
        if self._ended:
            raise StopAsyncIteration
        try:
            t = await self._chunks.get()
        except asyncio.CancelledError:
            self.cancel()
            raise
        if t is None:
            self._ended = True
            raise StopAsyncIteration
        return OutputChunk._from_native(t)

    @property
    def result(self) -> ExecResult:
        """The ExecResult once the output ended; raises the call's error."""
        if not self._fut.done():
            raise InvalidArgument("the stream has not ended; iterate it or await wait()")
        return ExecResult._from_native(self._fut.result())

    async def wait(self) -> ExecResult:
        """Drops the remaining output and returns the result."""
        async for _ in self:
            pass
        return ExecResult._from_native(await self._fut)

    def cancel(self) -> None:
        """Kills the command on the node (not from a forked child: the command
        belongs to the process that started it)."""
        if self._pid == os.getpid():
            self._client._conn.cancel(self._id, self._token)


class AsyncClient:
    """The asyncio form of :class:`dsec.Client`: the same calls, awaitable.

    Construct it anywhere (connecting blocks briefly); use it from one event
    loop at a time. ``async with dsec.AsyncClient(addr) as c:`` closes it on
    exit. After fork it works in the child, on the child's own loop.
    """

    def __init__(self, addr: Optional[str] = None, *, connect_timeout_s: float = 10.0,
                 call_timeout_s: float = 300.0):
        self.addr: str = _spec.resolve_addr(addr)
        self._conn = _native.Connection(self.addr, float(connect_timeout_s),
                                        float(call_timeout_s))
        self._disp = None

    def __repr__(self):
        return f"<dsec.AsyncClient {self.addr}>"

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Closes the connection; calls in flight fail with Unavailable."""
        self._conn.close()
        if self._disp is not None:
            self._disp.close()
            self._disp = None

    def _dispatcher(self):
        loop = asyncio.get_running_loop()
        d = self._disp
        if d is None or d.loop is not loop or d.inherited():
            if d is not None:
                d.close()  # a no-op for one inherited across fork
            self._disp = _Dispatcher(loop)
        return self._disp

    async def _call(self, op, args=()):
        _, token, fut, _ = self._dispatcher().submit(self._conn, op, args)
        try:
            return await fut
        except asyncio.CancelledError:
            if token:
                self._conn.cancel(args[0], token)
            raise

    async def create(self, layers: Optional[Sequence[str]] = None, **spec) -> AsyncSandbox:
        """Creates a sandbox (same keywords as Client.create) and waits until it runs."""
        native_spec = _spec.make_spec(dict(spec, layers=layers))
        return AsyncSandbox(self, _info(await self._call("create", (native_spec,))))

    async def create_many(self, n: int, layers: Optional[Sequence[str]] = None,
                          **spec) -> List[AsyncSandbox]:
        """Creates ``n`` sandboxes concurrently; on any failure destroys the
        ones made and raises the first error, saying how many failed."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 100_000:
            raise InvalidArgument(f"n: must be an int between 1 and 100000, got {n!r}")
        if spec.get("request_id"):
            raise InvalidArgument("request_id: not allowed in create_many")
        native_spec = _spec.make_spec(dict(spec, layers=layers))
        results = await asyncio.gather(*(self._call("create", (native_spec,)) for _ in range(n)),
                                       return_exceptions=True)
        made = [AsyncSandbox(self, _info(r)) for r in results if not isinstance(r, BaseException)]
        failed = [r for r in results if isinstance(r, BaseException)]
        if not failed:
            return made
        await asyncio.gather(*(sb.destroy() for sb in made), return_exceptions=True)
        first = failed[0]
        if not isinstance(first, Error):
            raise first
        raise type(first)(f"create_many: {len(failed)} of {n} creates failed "
                          f"(the {len(made)} made were destroyed); first error: {first.message}",
                          first.code, first.infra)

    async def get(self, id: str) -> AsyncSandbox:
        """A handle on an existing sandbox; NotFound if there is none."""
        return AsyncSandbox(self, _info(await self._call("info", (_spec._string("id", id),))))

    async def list(self, labels: Optional[Mapping[str, str]] = None) -> List[SandboxInfo]:
        """Sandboxes whose labels include all of ``labels``, oldest first."""
        return [_info(d) for d in await self._call("list", (_spec.labels_arg(labels),))]

    async def pause(self, *, labels: Mapping[str, str]) -> JobResult:
        """Pauses every sandbox of the job, cluster-wide (see Client.pause)."""
        return job_result(await self._call("job", job_args(labels, True)))

    async def resume(self, *, labels: Mapping[str, str]) -> JobResult:
        """Resumes every sandbox of the job, cluster-wide (see Client.resume)."""
        return job_result(await self._call("job", job_args(labels, False)))

    async def nodes(self) -> List[NodeInfo]:
        """The cluster's members with their last load report."""
        return _nodes_info(await self._call("nodes"))

    async def layers(self) -> List[LayerInfo]:
        """The layers in the node's store catalog."""
        return [LayerInfo(**d) for d in await self._call("layers")]

    async def trajectory(self, id: str, since: Optional[int] = None) -> List[dict]:
        """Sandbox ``id``'s trajectory log as dicts (see Client.trajectory)."""
        text = await self._call("trajectory",
                                (_spec._string("id", id), _spec.seq_arg("since", since)))
        return _spec.parse_trajectory(text)

    async def replay(self, id: str, upto_seq: Optional[int] = None) -> AsyncSandbox:
        """A new sandbox rebuilt from sandbox ``id``'s log (see Client.replay)."""
        info = await self._call("replay", (_spec._string("id", id),
                                           _spec.seq_arg("upto_seq", upto_seq)))
        return AsyncSandbox(self, _info(info))

    async def fncall(self, language: str, code: Union[str, bytes], *,
                     stdin: Union[bytes, str, None] = None, timeout_s: float = 10.0,
                     files: Optional[Mapping[str, Union[bytes, str]]] = None) -> ExecResult:
        """Runs ``code`` once from the node's warm pool (see Client.fncall)."""
        args = _spec.make_fncall(language, code, stdin, timeout_s, files)
        return ExecResult._from_native(await self._call("fncall", args))
