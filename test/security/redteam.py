# Red-team suite helpers (see conftest.py): the attack runner (a python
# script with raw-syscall helpers run inside a sandbox, answering one JSON
# object), the neighbour sandbox and the watched host files. Nodes, the REST
# client and the polling helpers come from the shared harness
# (test/pylib/dsec_harness.py). A module of its own, not conftest, so test
# modules can import it while test/e2e is collected in the same run.

import hashlib
import json
import os
import uuid
from pathlib import Path

from dsec_harness import (  # noqa: F401  re-exported to the attack modules
    BUSYBOX, CGROUP_ROOTS, PYTHON, TMP_ROOT, Client, Node, cgroup_dirs, wait_for)

# A variable in the node's environment that no sandbox process may see.
CANARY_ENV = "DSEC_REDTEAM_CANARY"
CANARY_VALUE = os.environ.setdefault(CANARY_ENV, "canary-" + uuid.uuid4().hex)


# -- attacks ---------------------------------------------------------------------

# Prepended to every attack script: raw system calls through ctypes.
PRELUDE = r"""
import ctypes, ctypes.util, errno, json, os, signal, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *args):
    # Raw syscall: 0 or the result on success, -errno on failure.
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a
                                         for a in args])
    return -ctypes.get_errno() if r == -1 else r
def err_of(fn, *a, **kw):
    # 0 if fn succeeded, else the errno it raised.
    try:
        fn(*a, **kw)
        return 0
    except OSError as e:
        return e.errno
def out(obj):
    print(json.dumps(obj))
"""


def attack(client, sid, code, timeout_s=60, check=True):
    """Runs PRELUDE + code with python3 inside `sid`; returns the JSON object
    it printed last (or the raw exec result when check is False, or the
    (status, body) of an exec that may not answer 200 when check is None)."""
    path = f"/tmp/attack-{uuid.uuid4().hex[:8]}.py"
    status, body = client.put_file(sid, path, (PRELUDE + code).encode())
    assert status in (200, 201, 204), f"put {path}: {status} {body}"
    if check is None:  # the attack may take the sandbox down: (status, body)
        return client.exec(sid, ["python3", path], timeout_s=timeout_s)
    r = client.sh(sid, ["python3", path], timeout_s=timeout_s)
    if not check:
        return r
    assert r["exit_code"] == 0 and not r["timed_out"], f"attack script failed: {r}"
    lines = [l for l in r["stdout"].splitlines() if l.startswith("{")]
    assert lines, f"attack printed no JSON: {r}"
    return json.loads(lines[-1])


# -- the neighbour and the host ----------------------------------------------------

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Neighbour:
    """A sandbox made before the attacks, holding a file with known bytes."""

    BINARY = "/usr/bin/python3.11"  # a lower-layer file the attacks go after

    def __init__(self, client, node_id):
        self.client = client
        self.client_node_id = node_id
        self.sid = client.create_ok([PYTHON], memory_mb=256)
        self.marker = "/tmp/neighbour-" + uuid.uuid4().hex
        self.data = uuid.uuid4().bytes * 64
        status, body = client.put_file(self.sid, self.marker, self.data)
        assert status in (200, 201, 204), body
        self.binary_sum = self.sum(self.BINARY)

    def sum(self, path):
        r = self.client.sh(self.sid, ["sha256sum", path], timeout_s=30)
        assert r["exit_code"] == 0, r
        return r["stdout"].split()[0]

    def check(self):
        r = self.client.sh(self.sid, ["echo", "neighbour-ok"], timeout_s=30)
        assert r["exit_code"] == 0 and r["stdout"] == "neighbour-ok\n", \
            f"neighbour {self.sid} cannot exec after the attack: {r}"
        status, got = self.client.get_file(self.sid, self.marker)
        assert status == 200 and got == self.data, \
            f"neighbour {self.sid} file {self.marker} changed: {status} {got[:100]!r}"
        assert self.sum(self.BINARY) == self.binary_sum, f"neighbour's {self.BINARY} changed"


class HostFiles:
    """Files on the host that no sandbox may read or change: a secret file
    (content, mode, mtime), the dsec and dsec-init binaries, and one file of
    each default layer as the node mounted it."""

    def __init__(self, node, dsec_bin):
        self.dir = Path(TMP_ROOT) / f"dsec-redteam-host-{uuid.uuid4().hex[:8]}"
        self.dir.mkdir(mode=0o755)
        self.secret_value = "host-secret-" + uuid.uuid4().hex
        self.secret = self.dir / "secret"
        self.secret.write_text(self.secret_value)
        self.watched = {str(self.secret): None, dsec_bin: None, "/etc/passwd": None}
        init = Path(dsec_bin).resolve().parent.parent / "backends" / "dsec-init"
        if init.exists():
            self.watched[str(init)] = None
        mounts = Path(node.state_dir) / "mounts"
        for rel in ("bin/busybox", "usr/bin/python3.11", "etc/passwd"):
            for p in mounts.glob("*/" + rel):
                self.watched[str(p)] = None
        self.watched = {p: self.stat(p) for p in self.watched}

    @staticmethod
    def stat(path):
        st = os.stat(path)
        return (sha256(path), st.st_mode, st.st_mtime_ns, st.st_uid)

    def check(self):
        for p, want in self.watched.items():
            assert self.stat(p) == want, f"host file {p} changed"
        names = sorted(os.listdir(self.dir))
        assert names == ["secret"], f"files appeared in host dir {self.dir}: {names}"

    def remove(self):
        for p in self.dir.iterdir():
            p.unlink()
        self.dir.rmdir()


