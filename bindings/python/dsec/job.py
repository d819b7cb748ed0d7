"""Job-level pause and resume: every sandbox of a job, cluster-wide.

A preempted trainer pauses its whole job as one call and resumes it when it
comes back::

    done = c.pause(labels={"job": "grpo-7"})     # every matching sandbox, every node
    print(len(done), done.errors)                # ids paused; per-item failures
    ...
    c.resume(labels={"job": "grpo-7"})

The call is idempotent (an already paused sandbox counts as done) and refuses
an empty selector (InvalidArgument), so it can never pause everything by
accident. A paused sandbox's TTL stands still; it is kept at most its
``paused_ttl_s`` (default 24 h).
"""

from dataclasses import dataclass
from typing import List, Optional

from . import _spec
from .errors import Error, InvalidArgument

__all__ = ["JobResult", "JobItemError"]


@dataclass(frozen=True)
class JobItemError:
    """One sandbox a job call failed on (``id`` None: a whole node failed,
    e.g. it did not answer). ``error`` is the dsec.Error it got (with
    ``infra``)."""

    id: Optional[str]
    node: str
    error: Error

    @property
    def code(self) -> str:
        return self.error.code

    @property
    def message(self) -> str:
        return self.error.message

    @property
    def infra(self) -> bool:
        return self.error.infra


class JobResult(list):
    """The ids a job call did (a list of str, sorted), plus ``errors``: the
    :class:`JobItemError` of every sandbox (or node) it failed on. Falsy
    ``errors`` means every matching sandbox is now in the state asked for."""

    def __init__(self, done, errors):
        super().__init__(done)
        self.errors: List[JobItemError] = list(errors)

    @property
    def done(self) -> List[str]:
        return list(self)

    @property
    def ok(self) -> bool:
        """True when nothing failed."""
        return not self.errors

    def __repr__(self):
        return f"JobResult(done={list(self)!r}, errors={self.errors!r})"


def job_args(labels, pause):
    """pause(labels=) / resume(labels=) -> the native (labels, pause) args."""
    what = "pause" if pause else "resume"
    if labels is None:
        raise InvalidArgument(f"{what}: labels= is required (e.g. {{'job': 'grpo-7'}}); "
                              "an empty selector would act on every sandbox of the cluster")
    lbl = _spec.labels_arg(labels)
    if not lbl:
        raise InvalidArgument(f"{what}: labels must name at least one label; an empty "
                              "selector would act on every sandbox of the cluster")
    return (lbl, bool(pause))


def job_result(native) -> JobResult:
    done, errors = native
    return JobResult(done, [JobItemError(i, n, e) for i, n, e in errors])
