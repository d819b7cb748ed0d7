"""dsec: sandboxes for agentic RL training and evaluation.

Connect to any node's native port and drive sandboxes::

    import dsec
    c = dsec.Client("127.0.0.1:7700")          # or $DSEC_ADDR
    with c.create(layers=["base/python@3.11"], memory_mb=512, ttl_s=900) as sb:
        r = sb.exec("python3 -c 'print(6*7)'", timeout_s=30)
        print(r.exit_code, r.stdout)

:class:`AsyncClient` offers the same calls as coroutines for asyncio rollout
loops. Every node error is a :class:`dsec.Error` subclass.
"""

import atexit as _atexit

from .errors import (Conflict, Error, InvalidArgument, NotFound, ResourceExhausted, Timeout,
                     TooLarge, Unavailable)
from .errors import StepConflict
from .types import ExecResult, LayerInfo, NodeInfo, OutputChunk, SandboxInfo, SnapshotInfo
from .types import ProcessInfo, ProcessStatus, SandboxMetrics
from .process import AsyncProcess, Process, ProcessStream
from .job import JobItemError, JobResult
from . import _native
from .client import Client, ExecStream, Sandbox
from .aio import AsyncClient, AsyncExecStream, AsyncSandbox
from .pty import AsyncPty, Pty
from .session import AsyncSession, Session, SessionInfo
from .interp import CodeContext, Execution, ExecutionError, InterpreterNotRunning

__version__ = "0.1.0"

__all__ = [
    "Client", "Sandbox", "ExecStream", "AsyncClient", "AsyncSandbox", "AsyncExecStream",
    "ExecResult", "OutputChunk", "SandboxInfo", "NodeInfo", "LayerInfo", "SnapshotInfo",
    "Error", "InvalidArgument", "TooLarge", "NotFound", "Conflict", "ResourceExhausted",
    "Unavailable", "Timeout", "StepConflict", "Process", "AsyncProcess", "ProcessInfo",
    "ProcessStatus", "ProcessStream", "JobResult", "JobItemError", "SandboxMetrics",
    "Session", "AsyncSession", "SessionInfo",
]
__all__ += ["CodeContext", "Execution", "ExecutionError", "InterpreterNotRunning"]

__all__ += ["Pty", "AsyncPty"]  # terminals (issue 26 part 1)

# The native actor system must stop before the interpreter tears down.
_atexit.register(_native.shutdown)
