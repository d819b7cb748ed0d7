"""Ports inside a sandbox (issue 26 part 3): the URL a port is reached at
through a node's REST port. ``Sandbox.url(port)`` asks the sandbox's owner
for its REST address (the native protocol knows no REST address by itself)
and builds the path form ``http://HOST:PORT/v1/sandboxes/ID/ports/PORT/``."""

import urllib.parse

from .errors import InvalidArgument


def _port_number(port) -> int:
    """``port`` as an int in 1..65535, or InvalidArgument naming it."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InvalidArgument(f"port {port!r}: must be an integer between 1 and 65535")
    return port


def _port_url(rest: str, sandbox_id: str, port: int) -> str:
    return (f"http://{rest}/v1/sandboxes/{urllib.parse.quote(sandbox_id, safe='')}"
            f"/ports/{port}/")
