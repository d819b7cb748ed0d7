# The end-to-end harness shared by the pytest suites (test/e2e and
# test/security): real `dsec node` processes driven through REST, the CLI and
# the Python SDK (DESIGN.md §4). Standard library plus pytest only.
#
# Test modules import helpers from here (`from dsec_harness import Node`);
# each suite's conftest.py puts this folder on sys.path and re-exports the
# fixtures and the failure-report hook by name, so pytest registers them
# for that suite. One module, no copies.
#
# Environment:
#   DSEC_BIN         the dsec binary (default <repo>/build/cmd/dsec); missing is
#                    a failure ("build first"), never a skip.
#   DSEC_TEST_STORE  layer store with the default layers (default
#                    /var/lib/dsec-test/store); `dsec layer defaults` fills it
#                    once per session (skips layers already present).
#   DSEC_E2E_TMP     where node state dirs go (default /var/tmp: real disk, so
#                    overlay uppers and quotas behave as in production).
#
# Every test skips when not root (skip_unless_root, called by each conftest):
# the node needs namespaces, mounts, cgroups.

import http.client
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DSEC_BIN = os.environ.get("DSEC_BIN", str(REPO / "build" / "src" / "dsec"))
STORE = os.environ.get("DSEC_TEST_STORE", "/var/lib/dsec-test/store")
TMP_ROOT = os.environ.get("DSEC_E2E_TMP", "/var/tmp")
BUSYBOX = "base/busybox@1"
PYTHON = "base/python@3.11"

# Controllers the node puts each sandbox in (v1) plus the v2 hierarchy.
CGROUP_ROOTS = {
    "cpu": "/sys/fs/cgroup/cpu",
    "memory": "/sys/fs/cgroup/memory",
    "pids": "/sys/fs/cgroup/pids",
    "freezer": "/sys/fs/cgroup/freezer",
    "unified": "/sys/fs/cgroup/unified",
}

# Generous: a 2-core machine shared with builds.
HEALTH_WAIT_S = 20
STOP_WAIT_S = 60
HTTP_TIMEOUT_S = 180


# -- skip / fail policy -------------------------------------------------------

def skip_unless_root(items, directory, suite):
    """Marks the tests under `directory` skipped, saying why, when not root."""
    if os.geteuid() != 0:
        skip = pytest.mark.skip(
            reason=f"{suite} needs root: the node creates namespaces, mounts and cgroups "
                   f"(euid is {os.geteuid()})")
        for item in items:
            if directory in Path(str(item.fspath)).resolve().parents:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def dsec_bin():
    if not os.access(DSEC_BIN, os.X_OK):
        pytest.fail(f"dsec binary {DSEC_BIN} is missing: build first "
                    "(meson setup build && ninja -C build) or set DSEC_BIN", pytrace=False)
    return DSEC_BIN


@pytest.fixture(scope="session")
def store(dsec_bin):
    """The layer store, with the default layers built (skips present ones)."""
    os.makedirs(STORE, exist_ok=True)
    try:
        p = subprocess.run([dsec_bin, "layer", "defaults", "--store", STORE],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1200)
    except subprocess.TimeoutExpired:
        pytest.fail(f"dsec layer defaults --store {STORE} took over 20 min", pytrace=False)
    if p.returncode != 0:
        pytest.fail(f"dsec layer defaults --store {STORE} exited {p.returncode}:\n"
                    + p.stdout.decode(errors="replace"), pytrace=False)
    return STORE


# -- helpers -------------------------------------------------------------------

def free_port():
    """A loopback port free over TCP and UDP (a node's gossip uses the --listen
    number over UDP)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                u.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue


def wait_for(pred, timeout, interval=0.1, what="condition"):
    """Polls pred() until truthy; returns its value or raises AssertionError."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = pred()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def mounts_under(prefix):
    """Mount points (from /proc/self/mountinfo) at or below prefix."""
    prefix = os.path.realpath(prefix).rstrip("/")
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].replace("\\040", " ")
            if mp == prefix or mp.startswith(prefix + "/"):
                out.append(mp)
    return out


def detached_dirs_held(pid):
    """Fds of process `pid` on directories of a mount that is in no mount
    table of its namespace: a sandbox root (they are detached mounts, or
    mounts in the sandbox's own namespace) still held after its sandbox is
    gone. Pipes, sockets, pidfds and memfds are on internal mounts too, but
    never directories."""
    try:
        with open(f"/proc/{pid}/mountinfo") as f:
            known = {line.split()[0] for line in f}
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    out = []
    for fd in fds:
        try:
            if not stat.S_ISDIR(os.stat(f"/proc/{pid}/fd/{fd}").st_mode):
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                mnt = [l.split()[1] for l in f if l.startswith("mnt_id:")]
        except OSError:
            continue
        if mnt and mnt[0] not in known:
            out.append(f"fd {fd} of pid {pid} on detached mount {mnt[0]}")
    return out
# The running node's own cpu group beside its sandboxes (cpu_class.hpp); it
# goes when the node stops.
NODE_CPU_GROUP = "_node"


# Batch sandboxes' cpu groups: <cpu>/dsec-batch/<node>/<sandbox> (cpu_class.hpp).
BATCH_CPU_TOP = "dsec-batch"


def cgroup_dirs(node_id, sandbox_id=None):
    """Existing cgroup dirs for the node (its sandboxes) or for one sandbox."""
    out = []
    bases = [os.path.join(root, "dsec", node_id) for root in CGROUP_ROOTS.values()]
    bases.append(os.path.join(CGROUP_ROOTS["cpu"], BATCH_CPU_TOP, node_id))
    for base in bases:
        if sandbox_id is None:
            if os.path.isdir(base):
                out += [os.path.join(base, d) for d in os.listdir(base)
                        if os.path.isdir(os.path.join(base, d)) and d != NODE_CPU_GROUP]
        elif os.path.isdir(os.path.join(base, sandbox_id)):
            out.append(os.path.join(base, sandbox_id))
    return out


def procs_in_node_cgroups(node_id):
    """(pid, cgroup line) of every process whose cgroup is under dsec/<node_id>
    (or dsec-batch/<node_id>, batch sandboxes' cpu groups).
    The node's own cpu group (dsec/<node_id>/_node) holds the node and what it
    runs beside the sandboxes (spare QEMUs, the fncall pool): skipped while the
    node runs in it, reported once it is gone."""
    needles = (f"/dsec/{node_id}/", f"/{BATCH_CPU_TOP}/{node_id}/")
    own = f"/dsec/{node_id}/{NODE_CPU_GROUP}"
    out, node_alive = [], False
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                text = f.read()
        except OSError:
            continue
        for line in text.splitlines():
            if any(n in line + "/" for n in needles):
                in_own = line.endswith(own) or own + "/" in line
                if in_own and _comm(pid) == "dsec":
                    node_alive = True
                    break
                out.append((int(pid), line, in_own))
                break
    return [(pid, line) for pid, line, in_own in out if not (in_own and node_alive)]


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


# -- the REST client -----------------------------------------------------------

class Client:
    """Thin REST client. Methods return (status, json-or-bytes)."""

    def __init__(self, host, port, timeout=HTTP_TIMEOUT_S):
        self.host, self.port, self.timeout = host, port, timeout
        self.created = []

    # raw layer

    def raw(self, method, path, body=None, headers=None, timeout=None):
        """Returns (status, headers dict (lower-case keys), body bytes)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
            elif isinstance(body, str):
                body = body.encode()
            hdrs = {"Content-Type": "application/json"} if body is not None else {}
            hdrs.update(headers or {})
            conn.request(method, path, body=body, headers=hdrs)
            r = conn.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            conn.close()

    def call(self, method, path, body=None, timeout=None, headers=None):
        status, hdrs, data = self.raw(method, path, body, headers=headers, timeout=timeout)
        if "json" in hdrs.get("content-type", "") or data[:1] in (b"{", b"["):
            try:
                return status, json.loads(data)
            except ValueError:
                pass
        return status, data

    # API

    def healthz(self, timeout=None):
        return self.call("GET", "/healthz", timeout=timeout)

    def create(self, layers=None, **spec):
        body = {"layers": layers if layers is not None else [BUSYBOX]}
        body.update(spec)
        status, out = self.call("POST", "/v1/sandboxes", body)
        if status in (200, 201) and isinstance(out, dict) and "id" in out:
            self.created.append(out["id"])
        return status, out

    def create_ok(self, layers=None, **spec):
        status, out = self.create(layers, **spec)
        assert status == 201, f"create {layers} {spec}: {status} {out}"
        return out["id"]

    def batch(self, spec, count):
        status, out = self.call("POST", "/v1/sandboxes:batch", {"spec": spec, "count": count})
        if isinstance(out, dict):
            self.created += [s["id"] for s in out.get("sandboxes", []) if "id" in s]
        return status, out

    def get(self, sid):
        return self.call("GET", "/v1/sandboxes/" + urllib.parse.quote(sid, safe=""))

    def list(self, labels=None):
        q = "&".join("label=" + urllib.parse.quote(f"{k}={v}", safe="")
                     for k, v in (labels or {}).items())
        return self.call("GET", "/v1/sandboxes" + ("?" + q if q else ""))

    def delete(self, sid):
        return self.call("DELETE", "/v1/sandboxes/" + urllib.parse.quote(sid, safe=""))

    def exec(self, sid, cmd, timeout=None, **kw):
        body = {"cmd": cmd}
        body.update(kw)
        return self.call("POST", f"/v1/sandboxes/{urllib.parse.quote(sid, safe='')}/exec",
                         body, timeout=timeout)

    def sh(self, sid, cmd, **kw):
        """Exec that must answer 200; returns the result dict."""
        status, out = self.exec(sid, cmd, **kw)
        assert status == 200, f"exec {cmd!r}: {status} {out}"
        return out

    def exec_stream(self, sid, cmd, **kw):
        """Yields (monotonic time, event dict) for each NDJSON line."""
        body = {"cmd": cmd}
        body.update(kw)
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("POST", f"/v1/sandboxes/{urllib.parse.quote(sid, safe='')}/exec?stream=1",
                         body=json.dumps(body).encode(),
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            if r.status != 200:
                raise AssertionError(f"stream exec: {r.status} {r.read()[:2000]!r}")
            while True:
                line = r.readline()
                if not line:
                    return
                line = line.strip()
                if line:
                    yield time.monotonic(), json.loads(line)
        finally:
            conn.close()

    def files_path(self, sid, path):
        return (f"/v1/sandboxes/{urllib.parse.quote(sid, safe='')}/files?path="
                + urllib.parse.quote(path, safe="/"))

    def put_file(self, sid, path, data):
        status, _, body = self.raw("PUT", self.files_path(sid, path), data,
                                   headers={"Content-Type": "application/octet-stream"})
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body

    def get_file(self, sid, path):
        """Returns (status, bytes) for 200, (status, json error) otherwise."""
        status, _, body = self.raw("GET", self.files_path(sid, path))
        if status == 200:
            return status, body
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body

    def cleanup(self):
        for sid in reversed(self.created):
            try:
                self.delete(sid)
            except Exception:  # the node may be gone; its own teardown reports that
                pass
        self.created.clear()


def assert_error(status, body, want_status, want_code=None):
    """The error envelope of DESIGN.md §4."""
    assert status == want_status, f"want {want_status}, got {status}: {body!r}"
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), \
        f"not an error envelope: {body!r}"
    assert isinstance(body["error"].get("code"), str) and body["error"]["code"], body
    assert isinstance(body["error"].get("message"), str) and body["error"]["message"], body
    if want_code:
        assert body["error"]["code"] == want_code, body


# -- nodes ---------------------------------------------------------------------

class Node:
    """One `dsec node` process with its own state dir, ports and log."""

    def __init__(self, bin_path, store_dir, node_id=None, extra_args=(), env=None):
        self.extra_args = list(extra_args)
        # No zram swap unless a test asks (test_zram, test_pause_memory): the
        # suite starts many nodes and must not change the host's swap.
        if not any(a == "--zram-mb" or a.startswith("--zram-mb=") for a in self.extra_args):
            self.extra_args += ["--zram-mb", "0"]
        self.env = dict(env or {})  # added to the node's environment
        self.bin = bin_path
        self.store = store_dir
        self.node_id = node_id or f"e2e-{uuid.uuid4().hex[:6]}"
        self.state_dir = tempfile.mkdtemp(prefix=f"dsec-{self.node_id}-", dir=TMP_ROOT)
        self.log_path = self.state_dir + ".log"
        self.rest_port = free_port()
        self.listen_port = free_port()
        self.proc = None
        self.client = Client("127.0.0.1", self.rest_port)

    @property
    def rest(self):
        return f"127.0.0.1:{self.rest_port}"

    def log_tail(self, lines=150):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError as e:
            return f"(no log: {e})"

    def start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.bin, "node", "--state-dir", self.state_dir, "--store", self.store,
             "--rest", self.rest, "--listen", f"127.0.0.1:{self.listen_port}",
             "--node-id", self.node_id, *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(os.environ, **self.env))
        log.close()
        deadline = time.monotonic() + HEALTH_WAIT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"node {self.node_id} exited {self.proc.returncode} at start:\n"
                            + self.log_tail(), pytrace=False)
            try:
                status, _ = self.client.healthz(timeout=2)
                if status == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.proc.kill()
        self.proc.wait()
        pytest.fail(f"node {self.node_id} did not answer /healthz 200 within {HEALTH_WAIT_S}s:\n"
                    + self.log_tail(), pytrace=False)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=STOP_WAIT_S):
        """SIGTERM and wait; returns the exit code (None if it had to be killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def stop_ok(self):
        rc = self.stop()
        assert rc == 0, (f"node {self.node_id} SIGTERM exit code {rc} (None = hung > "
                         f"{STOP_WAIT_S}s and killed):\n{self.log_tail()}")

    def remove_state(self, keep_log=False):
        """Removes the state dir unless something is still mounted under it
        (rmtree through a leftover bind mount could reach host files), and the
        log unless `keep_log` (a failure report still needs it)."""
        if mounts_under(self.state_dir):
            return False
        shutil.rmtree(self.state_dir, ignore_errors=True)
        if not keep_log:
            try:
                os.unlink(self.log_path)
            except FileNotFoundError:
                pass
        return True

    def check_clean(self, allow_layer_mounts=True):
        """Everything a gone sandbox must leave behind: nothing. Returns a list of leftovers."""
        left = []
        mounts = mounts_under(self.state_dir)
        layer_root = os.path.join(os.path.realpath(self.state_dir), "mounts")
        # The node's own mounts while it runs: layers, and the quota volume
        # that holds the sandbox dirs (the sandboxes' own mounts are below it).
        volume = os.path.join(os.path.realpath(self.state_dir), "sandboxes")
        for m in mounts:
            if allow_layer_mounts and (m == layer_root or m.startswith(layer_root + "/")
                                       or m == volume):
                continue
            left.append(f"mount {m}")
        left += [f"cgroup {d}" for d in cgroup_dirs(self.node_id)]
        sb_dir = os.path.join(self.state_dir, "sandboxes")
        if os.path.isdir(sb_dir):
            left += [f"sandbox dir {sb_dir}/{d}" for d in os.listdir(sb_dir)]
        left += [f"process {pid} in {cg}" for pid, cg in procs_in_node_cgroups(self.node_id)]
        # Sandbox roots are detached mounts, never in the host's table: a
        # leaked one is a descriptor the node still holds.
        if self.alive():
            left += detached_dirs_held(self.proc.pid)
        return left


def assert_clean(node, allow_layer_mounts, timeout=15):
    """Polls until the node has no leftovers; fails listing them otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        left = node.check_clean(allow_layer_mounts)
        if not left:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"node {node.node_id} leftovers after {timeout}s: {left}")
        time.sleep(0.2)


def _finish_node(node):
    """Stops a node, asserts a clean exit and a clean machine, removes its state."""
    if node.alive():
        try:
            node.client.cleanup()
        except Exception:  # a dead gateway shows up in the exit code below
            pass
    rc = node.stop()
    left = node.check_clean(allow_layer_mounts=False) if rc == 0 else []
    removed = node.remove_state(keep_log=True)
    problems = []
    if rc != 0:
        problems.append(f"SIGTERM exit code {rc} (None = hung and killed)")
    if left:
        problems.append("leftovers after stop: " + ", ".join(left))
    if not removed:
        problems.append(f"state dir {node.state_dir} still has mounts; left in place")
    if not problems:
        os.unlink(node.log_path)  # failures above already printed it
        return
    if problems:
        pytest.fail(f"node {node.node_id}: " + "; ".join(problems) + "\n" + node.log_tail(),
                    pytrace=False)


@pytest.fixture(scope="module")
def node(dsec_bin, store):
    """One node per test module; stopped (and checked) when the module ends."""
    n = Node(dsec_bin, store).start()
    yield n
    _finish_node(n)


@pytest.fixture
def client(node):
    """The module node's client; sandboxes a test creates are deleted after it.
    Also asserts the node is still alive and healthy after the test."""
    if not node.alive():
        pytest.fail(f"node {node.node_id} died earlier (exit {node.proc.returncode}):\n"
                    + node.log_tail(), pytrace=False)
    c = node.client
    mark = len(c.created)
    yield c
    if not node.alive():
        pytest.fail(f"node {node.node_id} died during the test (exit {node.proc.returncode}):\n"
                    + node.log_tail(), pytrace=False)
    new = c.created[mark:]
    for sid in reversed(new):
        try:
            c.delete(sid)
        except Exception:
            pass
    del c.created[mark:]


@pytest.fixture
def sandbox(client):
    """A fresh busybox sandbox id."""
    return client.create_ok(cpu=1, memory_mb=512)


def start_node(dsec_bin, store, **env):
    """A started node with `env` added to its environment."""
    return Node(dsec_bin, store, env=env).start()


class NodeFactory:
    def __init__(self, bin_path, store_dir):
        self.bin, self.store = bin_path, store_dir
        self.nodes = []

    def start(self, *extra_args):
        n = Node(self.bin, self.store, extra_args=extra_args)
        self.nodes.append(n)
        return n.start()


@pytest.fixture
def node_factory(dsec_bin, store):
    """Private nodes for tests that stop or break them."""
    f = NodeFactory(dsec_bin, store)
    yield f
    for n in f.nodes:
        if n.alive():
            _finish_node(n)
        else:
            n.remove_state()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when != "call" or not rep.failed:
        return
    nodes = []
    for v in getattr(item, "funcargs", {}).values():
        if isinstance(v, Node):
            nodes.append(v)
        elif isinstance(v, NodeFactory):
            nodes += v.nodes
    seen = set()
    for n in nodes:
        if n.node_id in seen:
            continue
        seen.add(n.node_id)
        rep.sections.append((f"node {n.node_id} log (tail) {n.log_path}", n.log_tail()))


# -- CLI -------------------------------------------------------------------------

@pytest.fixture
def cli(node, dsec_bin):
    """Runs `dsec ARGS --rest <node>`; returns CompletedProcess (bytes)."""
    def run(*args, stdin=None, timeout=120, rest=True):
        argv = [dsec_bin, *args]
        if rest:
            # Flags after `--` would become part of the exec command: put --rest first.
            argv = [dsec_bin, args[0], "--rest", node.rest, *args[1:]]
        return subprocess.run(argv, input=stdin, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout)
    return run


# -- the Python SDK (`import dsec`) ------------------------------------------------
#
#   DSEC_PYTHONPATH  where the built `dsec` package is (default
#                    <repo>/build/bindings/python: the meson build copies the
#                    pure-Python files next to _native*.so there).

SDK_PATH = os.environ.get("DSEC_PYTHONPATH", str(REPO / "build" / "bindings" / "python"))


def import_sdk():
    """Imports the built `dsec` package (SDK_PATH first on sys.path). A missing
    build is a failure ("build first"), never a skip."""
    import importlib
    import sys
    if SDK_PATH not in sys.path:
        sys.path.insert(0, SDK_PATH)
    try:
        return importlib.import_module("dsec")
    except ImportError as e:
        pytest.fail(f"cannot import dsec from {SDK_PATH} ({e}): build first "
                    "(meson setup build && ninja -C build) or set DSEC_PYTHONPATH",
                    pytrace=False)


def sdk_env(addr=None):
    """Environment for a child process that imports dsec (and talks to addr)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = SDK_PATH + (os.pathsep + env["PYTHONPATH"]
                                    if env.get("PYTHONPATH") else "")
    if addr:
        env["DSEC_ADDR"] = addr
    return env


def destroy_all(c, keep=()):
    """Destroys (through SDK client c) every sandbox on its node not in keep."""
    for info in c.list():
        if info.id not in keep:
            try:
                c.get(info.id).destroy()
            except Exception:  # gone meanwhile; check_clean reports real leftovers
                pass


@pytest.fixture(scope="session")
def dsec_sdk():
    """The `dsec` module."""
    return import_sdk()


@pytest.fixture(scope="module")
def sdk_client(node, dsec_sdk):
    """One dsec.Client on the module node's native port (--listen)."""
    c = dsec_sdk.Client(f"127.0.0.1:{node.listen_port}")
    yield c
    if node.alive():
        try:
            destroy_all(c)
        except Exception:
            pass
    c.close()


@pytest.fixture
def sdk(node, sdk_client):
    """The module's dsec.Client; sandboxes a test leaves behind (made through any
    client) are destroyed after it, and the node must still be alive."""
    if not node.alive():
        pytest.fail(f"node {node.node_id} died earlier (exit {node.proc.returncode}):\n"
                    + node.log_tail(), pytrace=False)
    before = {i.id for i in sdk_client.list()}
    yield sdk_client
    if not node.alive():
        pytest.fail(f"node {node.node_id} died during the test (exit {node.proc.returncode}):\n"
                    + node.log_tail(), pytrace=False)
    destroy_all(sdk_client, keep=before)
