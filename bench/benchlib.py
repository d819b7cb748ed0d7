# Helpers the Python benches share: a free local port and a small REST client.
# Benches run as `python3 bench/<name>.py`, so this directory is on sys.path.

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request


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


@contextlib.contextmanager
def private_node(bin_, store, node_id, start_timeout_s=30):
    """A node of its own on loopback (no zram), for one bench run: yields
    (rest, listen) once /healthz answers; stops it (SIGTERM, then KILL) and
    removes its state directory and log after."""
    state = tempfile.mkdtemp(prefix=f"dsec-{node_id}-", dir="/var/tmp")
    rest, listen = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    log = open(state + ".log", "wb")
    node = subprocess.Popen([bin_, "node", "--state-dir", state, "--store", store, "--rest",
                             rest, "--listen", listen, "--node-id", node_id, "--zram-mb", "0"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                urllib.request.urlopen(f"http://{rest}/healthz", timeout=2).read()
                break
            except Exception:
                if time.monotonic() > deadline or node.poll() is not None:
                    raise RuntimeError("node did not start; see " + state + ".log")
                time.sleep(0.2)
        yield rest, listen
    finally:
        node.send_signal(signal.SIGTERM)
        try:
            node.wait(timeout=60)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait()
        log.close()
        shutil.rmtree(state, ignore_errors=True)
        os.unlink(state + ".log")
