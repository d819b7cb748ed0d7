"""The blocking client: :class:`Client` and its :class:`Sandbox` handles.

Calls release the GIL while they wait, so many threads may share one Client.
Ctrl-C interrupts a waiting call (an interrupted exec is killed on the node).

Fork (multiprocessing's default start method on Linux): a Client or Sandbox
inherited by a forked child works there; its first call in the child
reconnects. An ExecStream started before the fork raises Unavailable in the
child, since its output goes to the parent.
"""

from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Union

from . import _native
from . import _spec
from .errors import Error, InvalidArgument
from .job import JobResult, job_args, job_result
from .types import ExecResult, LayerInfo, NodeInfo, OutputChunk, SandboxInfo, SnapshotInfo
from .types import ProcessInfo, ProcessStatus, SandboxMetrics
from .process import Process, _pid, _processes, _signo
from .pty import Pty, pty_args
from .session import Session, SessionInfo, open_args as _session_open_args
from .ports import _port_number, _port_url

from . import interp as _interp
from .interp import CodeContext, Execution

__all__ = ["Client", "Sandbox", "ExecStream"]

#: Default cap of read_file, the node's own limit (256 MiB).
MAX_READ_BYTES = 256 << 20


def _info(d) -> SandboxInfo:
    return SandboxInfo(**d)


def _node_info(d) -> NodeInfo:
    return NodeInfo(**d)


_EGRESS_DIGEST = "egress-sources:"


def _nodes_info(rows) -> List[NodeInfo]:
    """The members as NodeInfo. Gossip carries a node's egress sources digest
    as the first entry of its layer list; it is moved to load["egress_sources"]
    ({"digest", "same_as_this_node"}, or None), as GET /v1/nodes shows it. The
    first row is the node asked."""
    rows = [dict(r) for r in rows]
    digests = []
    for r in rows:
        load = dict(r.get("load") or {})
        layers = list(load.get("layers") or [])
        found = [x for x in layers if isinstance(x, str) and x.startswith(_EGRESS_DIGEST)]
        if "layers" in load:
            load["layers"] = [x for x in layers if x not in found]
        digests.append(found[0][len(_EGRESS_DIGEST):] if found else None)
        r["load"] = load
    mine = digests[0] if digests else None
    for r, digest in zip(rows, digests):
        r["load"]["egress_sources"] = (None if digest is None else
                                       {"digest": digest, "same_as_this_node": digest == mine})
    return [_node_info(r) for r in rows]


class _Handle:
    """What a sandbox handle knows without asking: the facts fixed at create."""

    def __init__(self, client, info: SandboxInfo):
        self._client = client
        self.id: str = info.id
        self.node: str = info.node
        self.backend: str = info.backend
        self.layers: List[str] = list(info.layers)
        self.labels: Dict[str, str] = dict(info.labels)
        self.created_at: float = info.created_at

    def __repr__(self):
        return f"<dsec.{type(self).__name__} {self.id} on {self.node}>"


class Sandbox(_Handle):
    """A handle on one sandbox. ``with`` destroys it on exit, also on exceptions."""

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc):
        try:
            self.destroy()
        except Error:
            if exc[0] is None:  # don't hide the body's exception behind ours
                raise

    def info(self) -> SandboxInfo:
        """The sandbox's current description (state, expiry, limits)."""
        return _info(self._client._call("info", (self.id,)))

    def exec(self, cmd: Union[str, Sequence[str]], *, cwd: Optional[str] = None,
             env: Optional[Mapping[str, str]] = None,
             stdin: Union[bytes, str, None] = None,
             timeout_s: Optional[float] = None,
             background: bool = False,
             step: Optional[str] = None) -> Union[ExecResult, Process]:
        """Runs ``cmd`` and waits for it.

        ``cmd`` is a shell command (run by ``/bin/sh -c``) or an argv list.
        ``stdin`` is fed to the command, then closed. After ``timeout_s`` the
        command is killed and the result has ``timed_out=True``; a non-zero
        exit is a result, not an exception. Whatever the command leaves
        running (``server &``, ``nohup``, ``setsid``) keeps running after it;
        a timed-out or interrupted exec kills its own process group.

        With ``background=True`` it returns at once with a :class:`Process`
        (``pid``, ``wait()``, ``kill()``, ``stdout``/``stderr`` so far).

        ``step`` (1-128 chars of ``[A-Za-z0-9._:/@+=-]``, unique within the
        sandbox) makes the exec fast-forward: if the sandbox's trajectory log
        holds that step with the same cmd, cwd, env and stdin, the recorded
        result comes back (``replayed=True``) and nothing runs; with another
        request it raises StepConflict naming what differs.
        """
        args = _spec.make_exec(cmd, cwd, env, stdin, timeout_s, step)
        if background:
            return Process(self, ProcessStatus._from_native(
                self._client._call("exec_background", (self.id, args))))
        return ExecResult._from_native(self._client._call("exec", (self.id, args)))

    def processes(self) -> List[ProcessInfo]:
        """Every process running in the sandbox (pids as inside it), with its
        command line and start time."""
        return _processes(self._client._call("processes", (self.id,)))

    def process(self, pid: int) -> Process:
        """A handle on background command ``pid`` (running or among the last
        64 finished); NotFound if there is none."""
        st = ProcessStatus._from_native(self._client._call("process", (self.id, _pid(pid), 0)))
        return Process(self, st)

    def kill_process(self, pid: int, signal: int = 9) -> None:
        """Sends ``signal`` (default SIGKILL) to process ``pid`` in the
        sandbox. NotFound if there is no such process; InvalidArgument for
        pid 1 (the sandbox's init) or a bad signal."""
        self._client._call("signal_process", (self.id, _pid(pid), _signo(signal), False))

    def exec_stream(self, cmd: Union[str, Sequence[str]], *, cwd: Optional[str] = None,
                    env: Optional[Mapping[str, str]] = None,
                    stdin: Union[bytes, str, None] = None,
                    timeout_s: Optional[float] = None,
                    step: Optional[str] = None) -> "ExecStream":
        """Runs ``cmd`` and yields its output as it comes::

            s = sb.exec_stream("for i in 1 2 3; do echo $i; sleep 1; done")
            for chunk in s:
                print(chunk.stream, chunk.text)
            print(s.result.exit_code)

        ``step`` fast-forwards as for exec (a replayed step yields its
        recorded output as chunks).
        """
        args = _spec.make_exec(cmd, cwd, env, stdin, timeout_s, step)
        return ExecStream(self._client._conn.stream(self.id, args))

    def write_file(self, path: str, data: Union[bytes, str]) -> None:
        """Writes a whole file (parents created; str is UTF-8)."""
        self._client._call("write_file", (self.id, _spec.path_arg(path), _spec.file_data(data)))

    def read_file(self, path: str, *, max_bytes: int = MAX_READ_BYTES) -> bytes:
        """Reads a whole file; TooLarge past ``max_bytes``."""
        return self._client._call("read_file", (self.id, _spec.path_arg(path), int(max_bytes)))

    def destroy(self) -> bool:
        """Destroys the sandbox. Idempotent: False if it was already gone."""
        return self._client._call("destroy", (self.id,))

    def pause(self, *, keep_memory: bool = True) -> SandboxInfo:
        """Freezes every process and frees what memory it can; files and
        processes survive. Any later call (exec, files, snapshot, network)
        resumes it first (transparent resume). Idempotent.

        ``keep_memory=False`` keeps only the files (container sandboxes):
        every process ends and all its memory is freed; resume() boots the
        sandbox again on its files, with its layers' start command."""
        if not isinstance(keep_memory, bool):
            raise InvalidArgument("pause: keep_memory must be a bool")
        op = "pause" if keep_memory else "pause_files"
        return _info(self._client._call(op, (self.id,)))

    def resume(self) -> SandboxInfo:
        """Undoes pause(). Idempotent."""
        return _info(self._client._call("resume", (self.id,)))

    def snapshot(self, name: Optional[str] = None,
                 version: Optional[str] = None) -> SnapshotInfo:
        """The sandbox's changes (new files, edits and deletions) as a new
        snapshot layer; it keeps running. ``create(layers=snap.layers)``
        branches any number of sandboxes from this point."""
        d = self._client._call("snapshot", (self.id,) + _spec.snapshot_args(name, version))
        return SnapshotInfo(**d)

    def metrics(self) -> SandboxMetrics:
        """One sample of the sandbox's CPU (since the previous sample) and
        memory use. A paused sandbox stays paused."""
        return SandboxMetrics._from_native(self._client._call("metrics", (self.id,)))

    def url(self, port: int) -> str:
        """An HTTP URL that reaches TCP ``port`` inside the sandbox through
        its node's REST port (``/v1/sandboxes/ID/ports/PORT/``): HTTP,
        streamed answers and WebSocket upgrades (``ws://`` the same path)
        pass through; the node's API key goes in ``X-API-Key`` as for any
        REST call. Works for a ``network: none`` sandbox too: the node
        connects inside it. A paused sandbox is resumed."""
        r = self._client._call("port", (self.id, _port_number(port)))
        return _port_url(r["rest"], self.id, port)

    def set_network(self, allow: Optional[Sequence[str]] = None,
                    deny: Optional[Sequence[str]] = None) -> None:
        """Replaces the network policy: ``allow`` (``host:port``,
        ``cidr:port``, ``domain:port``; None or [] = loopback only) and
        ``deny`` (``["8.8.8.8:*", "10.0.0.0/8:443"]``: addresses and CIDRs
        closed although a catch-all allow entry, ``0.0.0.0/0:*``, opens them;
        every other allow entry wins, as create's ``network_deny``). New
        connections see it at once."""
        self._client._call("set_network", (self.id,) + _spec.make_set_network(allow, deny))

    def update(self, *, cpu_class: Optional[str] = None,
               network: Union[Sequence[str], Mapping[str, object], None] = None,
               network_deny: Optional[Sequence[str]] = None) -> SandboxInfo:
        """Changes a running sandbox, together: ``cpu_class`` ("latency" |
        "batch": a batch sandbox runs SCHED_IDLE with the least CPU weight,
        so latency sandboxes on the node stay fast), then ``network`` (an
        allow-list as for set_network, or ``{"mode": "none"}`` /
        ``{"allow": [...], "deny": [...]}``) with ``network_deny`` (the
        deny-list beside a list form, as set_network's ``deny``). The network
        policy is replaced whole. Existing and future processes take the class.
        A paused sandbox is resumed first. InvalidArgument for a bad value;
        returns the sandbox info after the change."""
        return _info(self._client._call(
            "update", (self.id,) + _spec.make_update(cpu_class, network, network_deny)))

    def set_cpu_class(self, cpu_class: str) -> SandboxInfo:
        """``update(cpu_class=cpu_class)``."""
        return self.update(cpu_class=cpu_class)

    def trajectory(self, since: Optional[int] = None) -> List[dict]:
        """The sandbox's trajectory log, one dict per record in seq order
        (``since``: only records after that seq). See Client.trajectory."""
        return self._client.trajectory(self.id, since=since)

    def replay(self, upto_seq: Optional[int] = None) -> "Sandbox":
        """A new sandbox rebuilt from this one's log (see Client.replay)."""
        return self._client.replay(self.id, upto_seq=upto_seq)

    # -- terminals (issue 26 part 1; dsec/pty.py) --

    def pty(self, cmd: Union[str, Sequence[str], None] = None, cols: int = 80, rows: int = 24,
            env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None) -> "Pty":
        """Opens a terminal running ``cmd`` (default: the user's login shell,
        else /bin/bash, else /bin/sh) of ``cols`` x ``rows`` (1..1000)."""
        st = ProcessStatus._from_native(
            self._client._call("pty_open", pty_args(self.id, cmd, cols, rows, env, cwd)))
        return Pty(self, st)

    def pty_attach(self, pid: int) -> "Pty":
        """A handle on terminal ``pid`` opened earlier (by any client): its
        first read gives the scrollback the node kept (64 KiB)."""
        return Pty(self, ProcessStatus._from_native(
            self._client._call("process", (self.id, _pid(pid), 0))))


    # -- shell sessions (issue 26 part 2; dsec/session.py) --

    def session(self, shell: Optional[str] = None, *, cwd: Optional[str] = None,
                env: Optional[Mapping[str, str]] = None) -> Session:
        """Opens a shell session (``/bin/bash`` by default; InvalidArgument
        naming the shell if the sandbox has none there). See dsec.session."""
        d = self._client._call("session_open", _session_open_args(self.id, shell, cwd, env))
        return Session(self, SessionInfo(**d))

    def sessions(self) -> List[SessionInfo]:
        """The sandbox's open sessions, oldest first (ended ones too, until
        closed)."""
        return [SessionInfo(**d) for d in self._client._call("session_list", (self.id,))]

    # -- issue 26 part 4: the stateful code interpreter (dsec/interp.py) -------

    def run_code(self, code: str, language: Optional[str] = "python",
                 context: Union["CodeContext", str, None] = None,
                 timeout_s: Optional[float] = None, *,
                 env: Optional[Mapping[str, str]] = None,
                 on_stdout=None, on_stderr=None, on_result=None) -> "Execution":
        """Runs a Python cell in the sandbox's code interpreter (a sandbox made
        from ``base/code-interpreter@1``) and returns a :class:`dsec.Execution`:
        ``text`` (the last expression's text/plain), ``results`` (mime bundles,
        ``image/png`` for matplotlib figures), ``stdout``, ``stderr``, ``error``.
        Globals persist between calls in a context (default: the sandbox's
        default context; ``code_context()`` makes another). ``on_stdout`` /
        ``on_stderr`` get text as the cell prints it, ``on_result`` each bundle.
        Past ``timeout_s`` the cell is interrupted: ``error.name`` is
        ``"TimeoutError"``, ``timed_out`` True, and the context survives. ``env``
        is set for this cell only. NotFound: no such sandbox or context;
        InterpreterNotRunning: the sandbox runs no interpreter."""
        return _interp.run_code(self, code, language, context, timeout_s, env,
                                on_stdout, on_stderr, on_result)

    def code_context(self, cwd: Optional[str] = None, language: str = "python") -> "CodeContext":
        """A new context of the code interpreter: its own globals (and working
        directory ``cwd``); pass it as ``run_code(..., context=ctx)``."""
        return _interp.context_call(self.exec, self.id, "code_context", "POST", "/contexts",
                                  _interp.context_body(self.id, cwd, language))

    def code_contexts(self) -> List["CodeContext"]:
        """The code interpreter's contexts (the default one first)."""
        return _interp.context_call(self.exec, self.id, "code_contexts", "GET", "/contexts")

    def remove_code_context(self, context: Union["CodeContext", str]) -> None:
        """Ends a context and its globals; NotFound if there is no such context."""
        _interp.context_call(self.exec, self.id, "remove_code_context", "DELETE",
                           "/contexts/" + _interp.context_id(context))

    def restart_code_context(self, context: Union["CodeContext", str]) -> None:
        """Restarts a context: its globals are gone, its id stays."""
        _interp.context_call(self.exec, self.id, "restart_code_context", "POST",
                           "/contexts/" + _interp.context_id(context) + "/restart")


class ExecStream:
    """Output chunks of a running command; ``result`` once iteration ended."""

    def __init__(self, native):
        self._native = native
        self._result = None

    def __iter__(self) -> Iterator[OutputChunk]:
        for t in self._native:
            yield OutputChunk._from_native(t)

    @property
    def result(self) -> ExecResult:
        """The ExecResult; raises the call's error. Iterate the stream first."""
        if self._result is None:
            self._result = ExecResult._from_native(self._native.result())
        return self._result

    def wait(self) -> ExecResult:
        """Drops the remaining output and returns the result."""
        for _ in self._native:
            pass
        return self.result

    def cancel(self) -> None:
        """Kills the command on the node."""
        self._native.cancel()


class Client:
    """A connection to one dsec node's native port (any node of a cluster).

    ``addr`` is ``"host:port"`` (the node's ``--listen``), else ``$DSEC_ADDR``,
    else ``127.0.0.1:7700``. Raises Unavailable if no node answers within
    ``connect_timeout_s``. Calls other than exec give up after
    ``call_timeout_s`` (Timeout); a node that goes away fails calls in flight
    with Unavailable at once, and the next call reconnects. A forked child may
    keep using the parent's Client (its first call there reconnects) or make
    its own.
    """

    def __init__(self, addr: Optional[str] = None, *, connect_timeout_s: float = 10.0,
                 call_timeout_s: float = 300.0):
        self.addr: str = _spec.resolve_addr(addr)
        self._conn = _native.Connection(self.addr, float(connect_timeout_s),
                                        float(call_timeout_s))

    def __repr__(self):
        return f"<dsec.Client {self.addr}>"

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Closes the connection; calls in flight fail with Unavailable."""
        self._conn.close()

    def _call(self, op, args=()):
        return self._conn.call(op, args)

    def create(self, layers: Optional[Sequence[str]] = None, *, backend: str = "container",
               cpu: Optional[float] = None, memory_mb: Optional[int] = None,
               disk_mb: Optional[int] = None, pids: Optional[int] = None,
               ttl_s: Optional[int] = None, network_allow: Optional[Sequence[str]] = None,
               env: Optional[Mapping[str, str]] = None,
               labels: Optional[Mapping[str, str]] = None, cpu_class: Optional[str] = None,
               node: Optional[str] = None, request_id: Optional[str] = None,
               protect_readonly: Optional[Sequence[str]] = None,
               protect_hidden: Optional[Sequence[str]] = None,
               paused_ttl_s: Optional[int] = None, image: Optional[str] = None,
               on_timeout: Optional[str] = None, idle_timeout_s: Optional[int] = None,
               on_idle: Optional[str] = None, auto_resume: Optional[bool] = None,
               network: Union[Sequence[str], Mapping[str, object], str, None] = None,
               network_deny: Optional[Sequence[str]] = None) -> Sandbox:
        """Creates a sandbox and waits until it runs.

        ``network`` is what the sandbox may reach, as in DSec's SDK: egress
        source names to booleans (``{"pypi": True, "npm": False}``: the
        names set True), a list of sources and ``host:port`` entries
        (``["pypi", "10.0.0.5:443"]``), or ``"none"`` (the default: no
        network). ``network_allow`` is the same allow-list under the spec
        field's name; pass one of the two.
        ``network_deny`` (``["10.0.0.0/8:*"]``, addresses and CIDRs) closes
        what only a catch-all allow entry (``0.0.0.0/0:*``) opens.

        ``layers`` are ``name@version`` refs, first = bottom. ``image`` (an
        image reference, ``"127.0.0.1:5000/team/py:3.11"``) starts it from an
        image of an OCI registry, with ``layers`` (may be omitted) stacked on
        top: the node pulls the image the first time, concurrent creates
        share that pull, later ones reuse it. Omitted limits
        take the node's defaults (1 cpu, 512 MiB, 3600 s ttl). ``ttl_s``
        counts running time (it stands still while paused); a paused sandbox
        is kept at most ``paused_ttl_s`` (default 86400). The same
        ``request_id`` with the same spec returns the same sandbox; with
        another spec it raises Conflict.

        ``on_timeout="pause"`` pauses the sandbox when its TTL runs out
        instead of destroying it (it gets the whole ``ttl_s`` again when it
        resumes). ``idle_timeout_s`` pauses it (``on_idle="pause"``, the
        default) or destroys it (``on_idle="destroy"``) after that long with
        no call and no CPU use. Any call on a paused sandbox resumes it
        first, unless ``auto_resume=False``: then calls raise Unavailable
        until ``resume()``.
        """
        spec = _spec.make_spec(dict(
            layers=layers, backend=backend, cpu=cpu, memory_mb=memory_mb, disk_mb=disk_mb,
            pids=pids, ttl_s=ttl_s, network_allow=network_allow, env=env, labels=labels,
            cpu_class=cpu_class, node=node, request_id=request_id,
            protect_readonly=protect_readonly, protect_hidden=protect_hidden,
            paused_ttl_s=paused_ttl_s, image=image, on_timeout=on_timeout,
            idle_timeout_s=idle_timeout_s, on_idle=on_idle, auto_resume=auto_resume,
            network=network, network_deny=network_deny))
        return Sandbox(self, _info(self._call("create", (spec,))))

    def create_many(self, n: int, layers: Optional[Sequence[str]] = None,
                    **spec) -> List[Sandbox]:
        """Creates ``n`` sandboxes concurrently (same spec, no request_id).

        If any create fails, the ones made are destroyed and the first error is
        raised, its message saying how many of ``n`` failed.
        """
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 100_000:
            raise _spec.InvalidArgument(f"n: must be an int between 1 and 100000, got {n!r}")
        if spec.get("request_id"):
            raise _spec.InvalidArgument("request_id: not allowed in create_many")
        native_spec = _spec.make_spec(dict(spec, layers=layers))
        results = self._conn.create_many(native_spec, n)
        made = [Sandbox(self, _info(info)) for exc, info in results if exc is None]
        failed = [exc for exc, _ in results if exc is not None]
        if not failed:
            return made
        for sb in made:
            try:
                sb.destroy()
            except Error:
                pass
        first = failed[0]
        raise type(first)(f"create_many: {len(failed)} of {n} creates failed "
                          f"(the {len(made)} made were destroyed); first error: {first.message}",
                          first.code, first.infra)

    def get(self, id: str) -> Sandbox:
        """A handle on an existing sandbox; NotFound if there is none."""
        return Sandbox(self, _info(self._call("info", (_spec._string("id", id),))))

    def list(self, labels: Optional[Mapping[str, str]] = None) -> List[SandboxInfo]:
        """Sandboxes whose labels include all of ``labels``, oldest first."""
        return [_info(d) for d in self._call("list", (_spec.labels_arg(labels),))]

    def pause(self, *, labels: Mapping[str, str]) -> JobResult:
        """Pauses every sandbox of the cluster whose labels include
        ``labels`` (a job), on every live node at once: their memory is
        freed, their state kept, their TTL stands still. Returns the ids
        paused (a list) with ``.errors`` per sandbox or node that failed.
        Idempotent; an empty selector raises InvalidArgument."""
        return job_result(self._call("job", job_args(labels, True)))

    def resume(self, *, labels: Mapping[str, str]) -> JobResult:
        """Resumes every sandbox of the job (see pause); their TTLs go on
        from where they stood. Idempotent."""
        return job_result(self._call("job", job_args(labels, False)))

    def nodes(self) -> List[NodeInfo]:
        """The cluster's members with their last load report."""
        return _nodes_info(self._call("nodes"))

    def layers(self) -> List[LayerInfo]:
        """The layers in the node's store catalog."""
        return [LayerInfo(**d) for d in self._call("layers")]

    def trajectory(self, id: str, since: Optional[int] = None) -> List[dict]:
        """Sandbox ``id``'s trajectory log as dicts, in seq order: seq 0 is
        ``{"kind": "spec", "spec": {...}}``, then one ``"exec"`` record per
        exec (cmd, cwd, env, stdin, exit_code, stdout, stderr, timed_out,
        duration_ms, at, step; a background command is an ``"exec"`` with
        ``"background": true`` and its pid when it starts, then an ``"exit"``
        record with its pid and result when it ends) and one ``"file"`` record per write (path,
        size, digest), plus ``"rebuilt"`` and ``"destroyed"``. ``since``: only
        records with a greater seq. Works for destroyed sandboxes too (their
        log is kept, see the node's --trajectory-keep-days)."""
        text = self._call("trajectory", (_spec._string("id", id), _spec.seq_arg("since", since)))
        return _spec.parse_trajectory(text)

    def replay(self, id: str, upto_seq: Optional[int] = None) -> Sandbox:
        """Creates a new sandbox with sandbox ``id``'s spec and re-applies its
        logged file writes and execs in order (up to ``upto_seq``, default
        all), steps included. Works after the original was destroyed or its
        node was lost, as long as its log is reachable."""
        info = self._call("replay", (_spec._string("id", id), _spec.seq_arg("upto_seq", upto_seq)))
        return Sandbox(self, _info(info))

    def fncall(self, language: str, code: Union[str, bytes], *,
               stdin: Union[bytes, str, None] = None, timeout_s: float = 10.0,
               files: Optional[Mapping[str, Union[bytes, str]]] = None) -> ExecResult:
        """Runs ``code`` ("python" or "bash") once in a fresh process from the
        node's warm pool and returns its result; nothing it does survives the
        call. ``files`` (relative path -> content) are written beside it."""
        args = _spec.make_fncall(language, code, stdin, timeout_s, files)
        return ExecResult._from_native(self._call("fncall", args))

