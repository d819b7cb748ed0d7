# Helpers the Python benches share: a free local port and a small REST client.
# Benches run as `python3 bench/<name>.py`, so this directory is on sys.path.

import http.client
import json
import socket


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _endpoint(where):
    """"host:port" or a port on 127.0.0.1."""
    if isinstance(where, int):
        return "127.0.0.1", where
    host, port = where.rsplit(":", 1)
    return host, int(port)


def _send(conn, method, path, body):
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data,
                 headers={"Content-Type": "application/json"} if data else {})
    r = conn.getresponse()
    return r.status, r.read()


class Rest:
    """REST on one keep-alive connection; call() raises on an error status."""

    def __init__(self, where, timeout=120):
        self.conn = http.client.HTTPConnection(*_endpoint(where), timeout=timeout)

    def call(self, method, path, body=None):
        status, out = _send(self.conn, method, path, body)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {out[:300]!r}")
        return json.loads(out) if out else None


def request(where, method, path, body=None, timeout=30):
    """One request on its own connection: (status, parsed JSON or raw bytes)."""
    conn = http.client.HTTPConnection(*_endpoint(where), timeout=timeout)
    try:
        status, out = _send(conn, method, path, body)
    finally:
        conn.close()
    try:
        return status, json.loads(out)
    except ValueError:
        return status, out
