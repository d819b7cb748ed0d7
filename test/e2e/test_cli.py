# The CLI against a live node: create/exec/ls/get/cp/rm, exit codes, usage
# errors (exit 2) and node errors (exit 1 with the message on stderr).

import json
import os
import subprocess
import uuid

import pytest

from dsec_harness import BUSYBOX, free_port


def ok(p):
    assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    return p.stdout.decode()


@pytest.fixture
def cli_sandbox(cli, client):
    sid = ok(cli("create", "--layer", BUSYBOX, "--memory-mb", "256")).strip()
    client.created.append(sid)  # deleted after the test
    return sid


def test_create_prints_the_id(cli, client, node):
    tag = uuid.uuid4().hex[:8]
    out = ok(cli("create", "--layer", BUSYBOX, "--memory-mb", "256", "--label", f"t={tag}"))
    sid = out.strip()
    client.created.append(sid)
    assert out == sid + "\n" and sid.startswith(node.node_id + "."), out
    status, sb = client.get(sid)
    assert status == 200 and sb["labels"] == {"t": tag} and sb["memory_mb"] == 256, sb


def test_create_json(cli, client):
    out = ok(cli("create", "--layer", BUSYBOX, "--json"))
    sb = json.loads(out)
    client.created.append(sb["id"])
    assert sb["state"] == "running" and sb["layers"] == [BUSYBOX], sb


def test_exec_argv_and_exit_code(cli, cli_sandbox):
    p = cli("exec", cli_sandbox, "--", "echo", "hello", "world")
    assert ok(p) == "hello world\n"
    p = cli("exec", cli_sandbox, "sh", "-c", "exit 7")
    assert p.returncode == 7, (p.stdout, p.stderr)
    p = cli("exec", cli_sandbox, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert p.returncode == 3 and p.stdout == b"out\n" and p.stderr == b"err\n", p


def test_exec_one_word_runs_through_sh(cli, cli_sandbox):
    p = cli("exec", cli_sandbox, "echo a; echo b; exit 5")
    assert p.returncode == 5 and p.stdout == b"a\nb\n", p


def test_exec_flags(cli, cli_sandbox, tmp_path):
    ok(cli("exec", cli_sandbox, "mkdir -p /tmp/wd"))
    assert ok(cli("exec", "--cwd", "/tmp/wd", cli_sandbox, "pwd")) == "/tmp/wd\n"
    assert ok(cli("exec", cli_sandbox, "--env", "A=1", "--env", "B=two",
                  "--", "sh", "-c", 'echo "$A-$B"')) == "1-two\n"
    f = tmp_path / "in.txt"
    f.write_bytes(b"from file\n")
    assert ok(cli("exec", cli_sandbox, "--stdin", str(f), "cat")) == "from file\n"
    assert ok(cli("exec", cli_sandbox, "--stdin", "-", "cat", stdin=b"from pipe\n")) \
        == "from pipe\n"
    p = cli("exec", cli_sandbox, "--timeout-s", "1", "sleep 30", timeout=60)
    assert p.returncode != 0, p
    assert b"timed out" in p.stderr, p.stderr


def test_ls_get_rm(cli, client):
    tag = uuid.uuid4().hex[:8]
    sid = ok(cli("create", "--label", f"ls={tag}")).strip()
    client.created.append(sid)
    other = ok(cli("create")).strip()
    client.created.append(other)
    out = ok(cli("ls", "--label", f"ls={tag}"))
    assert sid in out and other not in out, out
    assert "running" in out, out
    assert other in ok(cli("ls"))
    listed = json.loads(ok(cli("ls", "--label", f"ls={tag}", "--json")))
    assert [s["id"] for s in listed["sandboxes"]] == [sid], listed
    got = json.loads(ok(cli("get", sid)))
    assert got["id"] == sid and got["state"] == "running", got
    assert ok(cli("rm", sid, other)).split() == [sid, other]
    assert client.get(sid)[0] == 404 and client.get(other)[0] == 404
    # rm again: idempotent, like DELETE.
    p = cli("rm", sid)
    assert p.returncode == 0, p


def test_cp_round_trip(cli, cli_sandbox, tmp_path):
    data = bytes(range(256)) * 100 + b"\x00end"
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    ok(cli("cp", str(src), f"{cli_sandbox}:/work/dir/f.bin"))
    dst = tmp_path / "dst.bin"
    ok(cli("cp", f"{cli_sandbox}:/work/dir/f.bin", str(dst)))
    assert dst.read_bytes() == data
    p = cli("cp", f"{cli_sandbox}:/work/dir/f.bin", "-")
    assert p.returncode == 0 and p.stdout == data
    ok(cli("cp", "-", f"{cli_sandbox}:/tmp/piped", stdin=b"piped\n"))
    assert ok(cli("exec", cli_sandbox, "cat /tmp/piped")) == "piped\n"


def test_cp_missing_remote_file_exits_1(cli, cli_sandbox, tmp_path):
    p = cli("cp", f"{cli_sandbox}:/no/such", str(tmp_path / "x"))
    assert p.returncode == 1, p
    assert p.stderr.strip(), p
    assert not (tmp_path / "x").exists() or (tmp_path / "x").read_bytes() == b""


@pytest.mark.parametrize("args", [
    ("exec",),
    ("exec", "only-an-id"),
    ("create", "--bogus-flag"),
    ("create", "--memory-mb", "lots"),
    ("create", "--label", "novalue"),
    ("ls", "extra-arg"),
    ("get",),
    ("rm",),
    ("cp", "a", "b"),
    ("cp", "onlyone"),
], ids=lambda a: " ".join(a))
def test_usage_errors_exit_2(cli, args):
    p = cli(*args)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert p.stderr.strip(), "usage error without a message"


def test_unknown_command_exit_2(cli):
    p = cli("frobnicate", rest=False)
    assert p.returncode == 2 and p.stderr.strip(), p


@pytest.mark.parametrize("verb", ["exec", "get"])
def test_unknown_sandbox_exit_1(cli, node, verb):
    sid = f"{node.node_id}.nosuch{uuid.uuid4().hex[:6]}"
    if verb == "exec":
        p = cli("exec", sid, "true")
    else:
        p = cli("get", sid)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    err = p.stderr.decode()
    assert "not_found" in err or "not found" in err.lower() or "no sandbox" in err.lower(), err


def test_node_error_message_on_stderr(cli):
    p = cli("create", "--layer", "nope/missing@1")
    assert p.returncode == 1, p
    assert b"nope/missing@1" in p.stderr or b"not_found" in p.stderr, p.stderr


def test_unreachable_node_exit_1(dsec_bin):
    port = free_port()
    p = subprocess.run([dsec_bin, "ls", "--rest", f"127.0.0.1:{port}"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 1, p
    assert p.stderr.strip(), p


def test_dsec_rest_env(dsec_bin, node):
    env = dict(os.environ, DSEC_REST=node.rest)
    p = subprocess.run([dsec_bin, "ls", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=env, timeout=60)
    assert p.returncode == 0, p
    assert "sandboxes" in json.loads(p.stdout)


def test_node_on_listen_port_0_runs_alone(dsec_bin, store, tmp_path):
    """--listen HOST:0 (a kernel-chosen native port) is a lone node: no gossip
    address needed; it serves REST and stops cleanly."""
    import http.client
    import signal
    import time
    rest = free_port()
    state = tmp_path / "state"
    p = subprocess.Popen([dsec_bin, "node", "--state-dir", str(state), "--store", store,
                          "--rest", f"127.0.0.1:{rest}", "--listen", "127.0.0.1:0"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        ok = False
        while time.monotonic() < deadline and p.poll() is None and not ok:
            try:
                c = http.client.HTTPConnection("127.0.0.1", rest, timeout=2)
                c.request("GET", "/healthz")
                ok = c.getresponse().status == 200
                c.close()
            except OSError:
                time.sleep(0.1)
        assert ok, p.stdout.read().decode() if p.poll() is not None else "no /healthz"
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0
    # --join needs a fixed port: a usage error, not a silent lone node.
    q = subprocess.run([dsec_bin, "node", "--state-dir", str(state), "--store", store,
                        "--listen", "127.0.0.1:0", "--join", "127.0.0.1:9"],
                       capture_output=True, timeout=30)
    assert q.returncode == 2, q
