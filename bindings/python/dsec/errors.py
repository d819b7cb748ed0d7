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
"""

__all__ = ["Error", "InvalidArgument", "TooLarge", "NotFound", "Conflict", "StepConflict",
           "ResourceExhausted", "Unavailable", "Timeout"]


class Error(Exception):
    """Base of every dsec error. ``code`` is the REST error code string."""

    code = "internal"

    def __init__(self, message: str, code: str = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidArgument(Error, ValueError):
    """The request is malformed: a bad field, an unknown layer, a relative path."""

    code = "invalid_argument"


class TooLarge(InvalidArgument):
    """A body, a file or a list is past its size limit."""

    code = "too_large"


class NotFound(Error, LookupError):
    """No such sandbox (or file, or layer)."""

    code = "not_found"


class Conflict(Error):
    """The request_id was used before for another spec."""

    code = "conflict"


class StepConflict(Conflict):
    """An exec's ``step`` is in the sandbox's trajectory log with another
    request (the message names each field that differs: cmd, cwd, env,
    stdin), or the same step is running now. Nothing was run."""


class ResourceExhausted(Error):
    """The node (or cluster) is at capacity; retry later or elsewhere."""

    code = "resource_exhausted"


class Unavailable(Error, ConnectionError):
    """The node cannot be reached, went away mid-call, or is shutting down."""

    code = "unavailable"


class Timeout(Error, TimeoutError):
    """The node did not answer within the call's bound."""

    code = "timeout"
