"""Exceptions raised by dsec.

Every failure the node reports arrives as a subclass of :class:`Error`, carrying
the node's message (it names the operation, the object and the cause) and the
stable ``code`` string of the REST API (``"not_found"``, ...)::

    try:
        sb.exec("true")
    except dsec.NotFound:
        ...        # the sandbox is gone (destroyed, expired, or its node lost)
    except dsec.Unavailable:
        ...        # the node went away mid-call, or nothing listens there

Every error also says whose failure it is: ``err.infra`` is True when the
platform failed (retry the rollout, or rebuild it) and False when the request
or the agent did (the rollout's own outcome). A trainer counts the two apart::

    except dsec.Error as err:
        lost_to_infra += err.infra

==========================  =====  =============================================
error (code)                infra  when
==========================  =====  =============================================
InvalidArgument, TooLarge   False  a bad field, unknown layer, a limit passed
NotFound                    False  no such sandbox (destroyed, or expired by its
                                   own ttl_s / paused_ttl_s), file or layer
Conflict                    False  request_id reused with another spec
ResourceExhausted           True   node or cluster out of memory, cpu or slots
Unavailable                 True   node lost / dead / left, connection dropped,
                                   node shutting down, sandbox lost with its node,
                                   its init killed by the node or the host
Unavailable "failed (oom)"  False  the agent went past its own memory_mb: the
                                   node enforced the spec, like a command's
                                   timeout_s (a timed-out command is a result,
                                   ``timed_out=True``, not an error)
Unavailable "ttl expired"   False  the sandbox outlived the spec's ttl_s (or,
                                   paused, its paused_ttl_s)
Timeout                     True   the platform did not answer within its bound
                                   (``Process.wait(timeout=)`` running out is the
                                   caller's bound on the agent's command: False)
Error (internal)            True   a bug or a host failure
==========================  =====  =============================================

The node decides (``core/error_kind.hpp``, the same table for REST's
``"infra"`` field); errors raised by the SDK itself before a call (bad
arguments) are InvalidArgument, ``infra=False``.
"""

__all__ = ["Error", "InvalidArgument", "TooLarge", "NotFound", "Conflict", "StepConflict",
           "ResourceExhausted", "Unavailable", "Timeout"]


class Error(Exception):
    """Base of every dsec error. ``code`` is the REST error code string;
    ``infra`` is True when the platform failed, False when the request or the
    agent did (table in this module's docstring)."""

    code = "internal"
    #: The class default; the node's own verdict, when it sent one, wins.
    infra = True

    def __init__(self, message: str, code: str = None, infra: bool = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if infra is not None:
            self.infra = bool(infra)


class InvalidArgument(Error, ValueError):
    """The request is malformed: a bad field, an unknown layer, a relative path."""

    code = "invalid_argument"
    infra = False


class TooLarge(InvalidArgument):
    """A body, a file or a list is past its size limit."""

    code = "too_large"


class NotFound(Error, LookupError):
    """No such sandbox (or file, or layer)."""

    code = "not_found"
    infra = False


class Conflict(Error):
    """The request_id was used before for another spec."""

    code = "conflict"
    infra = False


class StepConflict(Conflict):
    """An exec's ``step`` is in the sandbox's trajectory log with another
    request (the message names each field that differs: cmd, cwd, env,
    stdin), or the same step is running now. Nothing was run."""


class ResourceExhausted(Error):
    """The node (or cluster) is at capacity; retry later or elsewhere."""

    code = "resource_exhausted"
    infra = True


class Unavailable(Error, ConnectionError):
    """The node cannot be reached, went away mid-call, or is shutting down."""

    code = "unavailable"
    infra = True


class Timeout(Error, TimeoutError):
    """The node did not answer within the call's bound."""

    code = "timeout"
    infra = True
