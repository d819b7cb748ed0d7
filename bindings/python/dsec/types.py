"""Plain values returned by dsec calls: results, descriptions, output chunks."""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

__all__ = ["ExecResult", "OutputChunk", "SandboxInfo", "NodeInfo", "LayerInfo", "SnapshotInfo",
           "ProcessInfo", "ProcessStatus", "SandboxMetrics"]


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one command.

    ``stdout``/``stderr`` are the output decoded as UTF-8 (invalid bytes
    replaced); ``stdout_bytes``/``stderr_bytes`` are the raw bytes.
    ``exit_code`` is 128 + N when the command died of signal N (137 after a
    timeout). ``duration_ms`` is measured inside the sandbox; ``node_ms`` is the
    time the node spent on the call (a round trip minus ``node_ms`` is what the
    client and the network cost).
    """

    exit_code: int
    stdout_bytes: bytes
    stderr_bytes: bytes
    timed_out: bool
    duration_ms: float
    truncated: bool = False
    node_ms: float = 0.0
    #: True when the answer came from the trajectory log: the exec's ``step``
    #: ran before with the same request, so it was not run again.
    replayed: bool = False

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        """True when the command exited 0 and did not time out."""
        return self.exit_code == 0 and not self.timed_out

    @classmethod
    def _from_native(cls, t):
        return cls(*t)


@dataclass(frozen=True)
class OutputChunk:
    """A piece of output of a streamed exec, in the order the command wrote it."""

    stream: str  # "stdout" | "stderr"
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")

    @classmethod
    def _from_native(cls, t):
        return cls("stdout" if t[0] == 1 else "stderr", t[1])


@dataclass(frozen=True)
class SandboxInfo:
    """What the node knows of one sandbox. Times are Unix seconds."""

    # The fields are the keys the native layer derives from the one list in
    # C++ (src/core/spec_fields.hpp); test/e2e/test_spec_fields.py fails when
    # they drift apart (and from __init__.pyi).

    id: str
    node: str
    state: str  # creating | running | paused | stopped | failed | lost
    backend: str
    layers: List[str]
    labels: Dict[str, str]
    created_at: float
    expires_at: Optional[float]
    reason: str = ""
    cpu: float = 0.0
    memory_mb: int = 0
    disk_mb: int = 0
    #: What the sandbox tried and was refused: {"network": n, "syscall": n,
    #: "file": n, "recent": [last denied targets]}; filled by info()/get().
    denials: Dict[str, Any] = field(default_factory=dict)
    #: "latency" | "batch": the CPU class it runs in now (see Sandbox.update).
    cpu_class: str = "latency"
    #: Running time its TTL has left, seconds (None = no TTL). The TTL counts
    #: running time only: it stands still while paused (``expires_at`` is
    #: None then) and goes on after resume.
    ttl_remaining_s: Optional[float] = None
    #: A paused sandbox is destroyed after this long paused (spec field).
    paused_ttl_s: int = 0
    #: While paused: when the node destroys it unless resumed (Unix s).
    paused_expires_at: Optional[float] = None
    #: The image reference it was created from ("" = none); ``layers`` then
    #: begins with the layer that image resolved to on its node.
    image: str = ""
    #: What the end of its TTL does: "destroy" or "pause" (spec field).
    on_timeout: str = "destroy"
    #: Seconds with no call and no CPU after which on_idle happens; 0 = never.
    idle_timeout_s: int = 0
    #: "pause" or "destroy" (spec field).
    on_idle: str = "pause"
    #: Whether a call on it while paused resumes it first (spec field).
    auto_resume: bool = True


@dataclass(frozen=True)
class SnapshotInfo:
    """A snapshot layer: create with ``layers=snap.layers`` to branch from it."""

    ref: str
    digest: str
    layers: List[str]
    size_bytes: int
    duration_ms: float


@dataclass(frozen=True)
class SandboxMetrics:
    """One sample of what a sandbox uses, from its cgroup.

    ``cpu_used_pct`` is the CPU it used since the previous sample (or since
    it started), in percent of its ``cpu_count`` CPUs; memory is in bytes.
    """

    timestamp: float  # Unix seconds
    cpu_count: int
    cpu_used_pct: float
    mem_used_bytes: int
    mem_total_bytes: int

    @classmethod
    def _from_native(cls, d) -> "SandboxMetrics":
        d = dict(d)
        return cls(timestamp=d.pop("timestamp_ms") / 1000.0, **d)


@dataclass(frozen=True)
class NodeInfo:
    """One member of the cluster and its last load report.

    ``load`` has free_memory_mb, cpu_load (per core), sandboxes, creating,
    accepting (False while draining), layers (refs it has mounted) and
    egress_sources ({"digest", "same_as_this_node"} of its --egress-sources
    file, or None when it has not reported one).
    """

    id: str
    address: str
    state: str  # alive | suspect | dead | left
    incarnation: int = 0
    load: Dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class LayerInfo:
    """A layer in the store catalog."""

    ref: str
    name: str
    version: str
    kind: str
    digest: str
    size_bytes: int
    created_at: float


@dataclass(frozen=True)
class ProcessInfo:
    """One process running in a sandbox (``sb.processes()``).

    ``pid`` is the pid inside the sandbox (what ``echo $$`` there prints).
    ``state`` is the kernel's letter: R running, S sleeping, D disk wait,
    Z zombie, T stopped. ``background`` is True for the command of a
    background exec. ``started_at`` is Unix seconds.
    """

    pid: int
    ppid: int
    argv: List[str]
    name: str
    state: str
    started_at: float
    background: bool = False

    @property
    def cmd(self) -> str:
        """The command line (argv joined by spaces; ``[name]`` for a zombie)."""
        return " ".join(self.argv) if self.argv else f"[{self.name}]"


@dataclass(frozen=True)
class ProcessStatus:
    """A background command's state and output so far (``p.status()``).

    ``exit_code`` is None while it runs. Output is kept up to 16 MiB per
    stream (then ``truncated``), like a normal exec's.
    """

    pid: int
    argv: List[str]
    started_at: float
    running: bool
    exit_code: Optional[int]
    stdout_bytes: bytes
    stderr_bytes: bytes
    timed_out: bool
    truncated: bool
    duration_ms: float

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", "replace")

    @classmethod
    def _from_native(cls, t):
        pid, argv, started_at, running, res = t
        r = ExecResult._from_native(res)
        return cls(pid, list(argv), started_at, running, None if running else r.exit_code,
                   r.stdout_bytes, r.stderr_bytes, r.timed_out, r.truncated, r.duration_ms)

    def _result(self) -> "ExecResult":
        return ExecResult(self.exit_code if self.exit_code is not None else -1,
                          self.stdout_bytes, self.stderr_bytes, self.timed_out,
                          self.duration_ms, self.truncated)
