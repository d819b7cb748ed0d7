# File transfer through REST: round trips, parent creation, errors. That paths
# resolve inside the sandbox root (no symlink escape, §7) is checked in
# test/security/test_file_api_escape.py.

import hashlib
import os

from dsec_harness import assert_error


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
