# The trainer's file API against an adversarial agent (DESIGN.md §7): paths
# resolve inside the sandbox root, so symlinks to /, /proc/*/root, `..` and a
# symlink swapped mid-read reach no host file, PUT through a symlink writes
# none, and special files the agent plants (FIFOs) neither hang the call nor
# wedge the sandbox.

import os
import socket
import time
import uuid

import pytest


# -- symlink escape --------------------------------------------------------------

def read_host(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


@pytest.fixture
def host_marker():
    """A host-only file with unique content, removed afterwards."""
    content = f"HOST-ONLY-{uuid.uuid4().hex}\n".encode()
    path = f"/var/tmp/dsec-e2e-marker-{uuid.uuid4().hex}"
    with open(path, "wb") as f:
        f.write(content)
    yield path, content
    os.unlink(path)


def assert_not_host(status, got, host_content, what):
    if status != 200:
        assert 400 <= status < 500, (what, status, got)
        return
    assert host_content is None or got != host_content, f"{what}: returned the HOST file"


def test_symlink_to_root_does_not_escape(client, sandbox, host_marker):
    marker, content = host_marker
    r = client.sh(sandbox, "ln -s / /tmp/root && ln -s /etc/shadow /tmp/shadow"
                           f" && ln -s {marker} /tmp/marker && ln -s ../../../../../../.. /tmp/up")
    assert r["exit_code"] == 0, r
    status, got = client.get_file(sandbox, "/tmp/root/etc/hostname")
    assert_not_host(status, got, read_host("/etc/hostname"), "GET /tmp/root/etc/hostname")
    status, got = client.get_file(sandbox, "/tmp/shadow")
    assert_not_host(status, got, read_host("/etc/shadow"), "GET /tmp/shadow")
    for p in ("/tmp/marker", "/tmp/root" + marker, "/tmp/up" + marker):
        status, got = client.get_file(sandbox, p)
        assert_not_host(status, got, content, "GET " + p)
        if status == 200:
            assert content not in got, p


def test_proc_root_symlink_does_not_escape(client, sandbox, host_marker):
    # /proc/1/root resolved by the node in ITS namespace would be the host root.
    marker, content = host_marker
    r = client.sh(sandbox, "ln -s /proc/1/root /tmp/pr; ln -s /proc/self/root /tmp/ps")
    assert r["exit_code"] == 0, r
    for p in ("/tmp/pr" + marker, "/tmp/ps" + marker, "/proc/1/root" + marker,
              "/proc/self/root" + marker):
        status, got = client.get_file(sandbox, p)
        assert_not_host(status, got, content, "GET " + p)


def test_dotdot_does_not_escape(client, sandbox, host_marker):
    marker, content = host_marker
    for p in ("/../../../../.." + marker, "/tmp/../../.." + marker):
        status, got = client.get_file(sandbox, p)
        assert_not_host(status, got, content, "GET " + p)


def test_put_through_symlink_does_not_touch_host(client, sandbox):
    client.sh(sandbox, "ln -s / /tmp/root; ln -s /tmp /tmp/hosttmp")
    name = f"dsec-escape-{uuid.uuid4().hex}"
    for p in (f"/tmp/root/tmp/{name}", f"/tmp/root/var/tmp/{name}", f"/tmp/hosttmp/{name}.2"):
        status, out = client.put_file(sandbox, p, b"escaped\n")
        assert status < 500, (p, status, out)
    for host in (f"/tmp/{name}", f"/var/tmp/{name}", f"/tmp/{name}.2"):
        assert not os.path.exists(host), f"PUT through a symlink wrote the host file {host}"


def test_put_symlink_leaf_to_host_file_does_not_modify_it(client, sandbox, host_marker):
    marker, content = host_marker
    client.sh(sandbox, f"ln -s {marker} /tmp/leaf")
    status, out = client.put_file(sandbox, "/tmp/leaf", b"OVERWRITTEN\n")
    assert status < 500, out
    assert read_host(marker) == content, "PUT through a symlink leaf modified a host file"


def test_symlink_swap_race_does_not_escape(client, sandbox, host_marker):
    # The agent flips /tmp/race between a dir and a symlink to / while we read.
    marker, content = host_marker
    client.sh(sandbox, f"mkdir -p /tmp/real{os.path.dirname(marker)} && "
                       f"echo inside > /tmp/real{marker}")
    import threading
    stop = threading.Event()

    def flipper():
        client.exec(sandbox, "end=$(( $(date +%s) + 8 )); while [ $(date +%s) -lt $end ]; do "
                             "ln -sfn /tmp/real /tmp/race; ln -sfn / /tmp/race; done",
                    timeout_s=20)
        stop.set()

    t = threading.Thread(target=flipper)
    t.start()
    try:
        while not stop.is_set():
            status, got = client.get_file(sandbox, "/tmp/race" + marker)
            if status == 200:
                assert got != content, "GET through a swapped symlink returned the HOST file"
    finally:
        t.join(60)


# -- special files planted by the agent ---------------------------------------------

def test_get_fifo_answers_at_once(client, sandbox):
    client.sh(sandbox, "mkfifo /tmp/fifo")
    t0 = time.monotonic()
    status, out = client.get_file(sandbox, "/tmp/fifo")
    assert 400 <= status < 500, (status, out)
    assert time.monotonic() - t0 < 5


def test_put_fifo_does_not_wedge_the_sandbox(node_factory):
    # An agent plants a FIFO where the trainer will upload. The PUT must fail
    # fast (nobody reads the FIFO) and the sandbox must stay deletable.
    node = node_factory.start()
    c = node.client
    sid = c.create_ok()
    c.created.remove(sid)
    c.sh(sid, "mkfifo /tmp/fifo")
    t0 = time.monotonic()
    try:
        status, _, body = c.raw("PUT", c.files_path(sid, "/tmp/fifo"), b"x", timeout=30)
        put = f"{status} {body[:200]!r}" if not 400 <= status < 500 else None
    except socket.timeout:
        put = f"PUT onto a FIFO hung for {time.monotonic() - t0:.0f}s"
    try:
        status, out = c.call("DELETE", f"/v1/sandboxes/{sid}", timeout=30)
        delete = None if status == 200 else f"DELETE answered {status} {out}"
    except socket.timeout:
        delete = "DELETE of the sandbox then hung for 30s"
    rc = node.stop()
    stop = None if rc == 0 else f"SIGTERM then exit code {rc} (None = hung > 60 s, killed)"
    problems = [p for p in (put, delete, stop) if p]
    assert not problems, "; ".join(problems)
