# File transfer through REST: round trips, parent creation, errors, and the
# rule that paths resolve inside the sandbox root (no symlink escape, §7).

import hashlib
import os
import socket
import time
import uuid

import pytest

from conftest import assert_error


def test_round_trip_binary(client, sandbox):
    data = bytes(range(256)) * 64 + b"\x00\x00tail\x00"
    status, out = client.put_file(sandbox, "/tmp/bin.dat", data)
    assert status == 200, out
    assert out == {"path": "/tmp/bin.dat", "size": len(data)}, out
    status, got = client.get_file(sandbox, "/tmp/bin.dat")
    assert status == 200, got
    assert got == data
    # Exec sees the same bytes.
    r = client.sh(sandbox, "wc -c < /tmp/bin.dat; sha256sum /tmp/bin.dat")
    size, digest = r["stdout"].split()[0], r["stdout"].split()[1]
    assert int(size) == len(data), r
    assert digest == hashlib.sha256(data).hexdigest(), r


def test_empty_file(client, sandbox):
    status, out = client.put_file(sandbox, "/tmp/empty", b"")
    assert status == 200 and out["size"] == 0, out
    status, got = client.get_file(sandbox, "/tmp/empty")
    assert status == 200 and got == b"", got


def test_overwrite_replaces(client, sandbox):
    client.put_file(sandbox, "/tmp/f", b"a much longer first version\n")
    client.put_file(sandbox, "/tmp/f", b"short\n")
    status, got = client.get_file(sandbox, "/tmp/f")
    assert status == 200 and got == b"short\n", got


def test_large_file(client, sandbox):
    data = os.urandom(16 * 1024 * 1024)
    status, out = client.put_file(sandbox, "/tmp/big", data)
    assert status == 200 and out["size"] == len(data), out
    status, got = client.get_file(sandbox, "/tmp/big")
    assert status == 200, got
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest(), len(got)


def test_parent_dirs_created(client, sandbox):
    status, out = client.put_file(sandbox, "/work/a/b/c/d.txt", b"deep\n")
    assert status == 200, out
    r = client.sh(sandbox, "cat /work/a/b/c/d.txt; test -d /work/a/b && echo DIR")
    assert r["stdout"] == "deep\nDIR\n", r


def test_file_written_by_exec_is_readable(client, sandbox):
    client.sh(sandbox, "mkdir -p /srv && printf 'from\\0exec' > /srv/x")
    status, got = client.get_file(sandbox, "/srv/x")
    assert status == 200 and got == b"from\x00exec", got


def test_path_with_spaces_and_unicode(client, sandbox):
    path = "/tmp/dir with space/\u00e9t\u00e9.txt"
    status, out = client.put_file(sandbox, path, b"ok")
    assert status == 200, out
    status, got = client.get_file(sandbox, path)
    assert status == 200 and got == b"ok", got
    r = client.sh(sandbox, ["cat", path])
    assert r["stdout"] == "ok", r


def test_missing_file_is_404(client, sandbox):
    status, out = client.get_file(sandbox, "/no/such/file")
    assert_error(status, out, 404, "not_found")


def test_relative_path_is_400(client, sandbox):
    status, out = client.get_file(sandbox, "tmp/x")
    assert_error(status, out, 400, "invalid_argument")
    status, out = client.put_file(sandbox, "tmp/x", b"x")
    assert_error(status, out, 400, "invalid_argument")


def test_missing_path_param_is_400(client, sandbox):
    status, out = client.call("GET", f"/v1/sandboxes/{sandbox}/files")
    assert_error(status, out, 400, "invalid_argument")


def test_directory_is_not_a_file(client, sandbox):
    status, out = client.get_file(sandbox, "/etc")
    assert 400 <= status < 500, (status, out)
    status, out = client.put_file(sandbox, "/etc", b"x")
    assert 400 <= status < 500, (status, out)


def test_files_on_unknown_sandbox_is_404(client, node):
    status, out = client.get_file(f"{node.node_id}.nosuch", "/etc/passwd")
    assert_error(status, out, 404, "not_found")
    status, out = client.put_file(f"{node.node_id}.nosuch", "/tmp/x", b"x")
    assert_error(status, out, 404, "not_found")


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
