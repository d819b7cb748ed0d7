# Terminals (issue 26 part 1) on container sandboxes, against real nodes: bash
# on a pty behaves as in a real terminal (job control, stty size following a
# resize, Ctrl-C reaching the foreground job), a client that reattaches gets
# the scrollback, the Python SDK (blocking and asyncio), the REST WebSocket and
# JSON routes, a terminal through a peer of a 2-node cluster, and bad input
# (404 on a destroyed sandbox, 409 on an exited terminal, 400 on a bad size,
# resize storms and garbage that never wedge the node).

import asyncio
import os
import time
import urllib.parse

import pytest

from dsec_harness import BUSYBOX, PYTHON, Node, _finish_node, assert_error, import_sdk, wait_for
from ws_client import HandshakeError, WebSocket
from test_e2b import e2b_module, e2b_node, key_file, run_js  # noqa: F401  fixtures

dsec = import_sdk()

JOIN_WAIT_S = 20


@pytest.fixture
def sb(sdk):
    # The python layer is Debian's: root's login shell is bash.
    return sdk.create([BUSYBOX, PYTHON], cpu=1, memory_mb=256)


def q(sid):
    return urllib.parse.quote(sid, safe="")


def expect(t, pattern, timeout=15):
    got = t.read_until(pattern, timeout)
    assert pattern.encode() in got, f"no {pattern!r} within {timeout}s; got {got[-800:]!r}"
    return got


# -- a real terminal ---------------------------------------------------------------

def test_login_shell_job_control_resize_and_ctrl_c(sb):
    t = sb.pty(cols=80, rows=24)
    assert t.pid > 1
    t.write("echo shell=$0 tty=$(tty)\n")
    got = expect(t, "tty=/dev/pts/")
    assert b"bash" in got, got[-400:]
    t.write("stty size\n")
    expect(t, "24 80")
    t.resize(100, 40)
    t.write("stty size; echo sized\n")
    expect(t, "40 100")
    # A resize while a job runs in the foreground reaches it as SIGWINCH.
    t.write("python3 -c 'import os, signal, time; signal.signal(signal.SIGWINCH, lambda *a: "
            "print(\"winch-%dx%d\" % os.get_terminal_size()[::-1], flush=True)); "
            "print(\"wait\" + \"ing\", flush=True); time.sleep(60)'\n")
    expect(t, "waiting")
    t.resize(90, 30)
    expect(t, "winch-30x90")
    t.write("\x03")
    expect(t, "KeyboardInterrupt")
    # Job control: a background job, jobs, fg, then Ctrl-C interrupts it.
    t.write("sleep 100 &\n")
    expect(t, "[1]")
    t.write("jobs\n")
    got = expect(t, "sleep 100")
    assert b"Running" in got, got[-400:]
    t.write("fg\n")
    time.sleep(0.5)
    t.write("\x03")
    t.write("echo back-$((40+2)) jobs=$(jobs | wc -l)\n")
    expect(t, "back-42 jobs=0")
    # Ctrl-C reaches a foreground job started directly, and the shell stays.
    t.write("sleep 100\n")
    time.sleep(0.5)
    t.write("\x03")
    t.write("echo alive-$((2+3))\n")
    expect(t, "alive-5")
    t.write("exit 3\n")
    r = t.wait(timeout=15)
    assert r.exit_code == 3, r
    with pytest.raises(dsec.Conflict):
        t.write("echo too late\n")


def test_command_env_cwd_and_iteration(sb):
    sb.exec("mkdir -p /work/here")
    t = sb.pty(["/bin/sh", "-c", "echo cwd=$(pwd) v=$V; stty size"], cols=50, rows=7,
               env={"V": "x1"}, cwd="/work/here")
    out = b"".join(t)  # iteration ends when the terminal does
    assert b"cwd=/work/here v=x1" in out and b"7 50" in out, out
    assert t.wait(timeout=10).exit_code == 0


def test_reattach_gets_bounded_scrollback(sb):
    t = sb.pty(["/bin/bash", "--norc", "-i"])
    t.write("echo marker-$((6*7))\n")
    expect(t, "marker-42")
    again = sb.pty_attach(t.pid)
    assert b"marker-42" in again.read_until("marker-42", 10)
    # 300 KB of output: a late client gets at most the kept 64 KiB of it.
    t.write("head -c 300000 /dev/zero | tr '\\0' y; echo; echo end-$((1+1))\n")
    expect(t, "end-2", timeout=30)
    late = sb.pty_attach(t.pid)
    kept = late.read_until("end-2", 10)
    assert b"end-2" in kept and 60_000 <= len(kept) <= 64 * 1024 + 4096, len(kept)
    t.kill()
    assert t.wait(timeout=10).exit_code == 128 + 9


def test_async_pty(sdk):
    async def main():
        ac = dsec.AsyncClient(sdk.addr)
        try:
            asb = await ac.create([BUSYBOX, PYTHON], cpu=1, memory_mb=256)
            try:
                t = await asb.pty(["/bin/bash", "--norc", "-i"], cols=33, rows=11)
                await t.write("stty size\n")
                got = await t.read_until("11 33", 15)
                assert b"11 33" in got, got
                await t.resize(44, 12)
                await t.write(b"stty size; exit 5\n")
                chunks = [c async for c in t]
                assert b"12 44" in b"".join(chunks), chunks
                assert (await t.wait(timeout=10)).exit_code == 5
            finally:
                await asb.destroy()
        finally:
            ac.close()
    asyncio.run(main())


# -- bad input -----------------------------------------------------------------------

def test_bad_input_is_refused_clearly_and_never_wedges(sdk, node):
    c = node.client
    sb = sdk.create([BUSYBOX], cpu=1, memory_mb=128)
    sid = q(sb.id)
    for body in ({"cols": 0}, {"rows": 1001}, {"cols": -5, "rows": 10}):
        status, out = c.call("POST", f"/v1/sandboxes/{sid}/pty", body)
        assert_error(status, out, 400, "invalid_argument")
        assert "cols and rows must be 1..1000" in out["error"]["message"], out
    status, out = c.call("POST", f"/v1/sandboxes/{sid}/pty", {"shell": "x"})
    assert_error(status, out, 400, "invalid_argument")
    with pytest.raises(dsec.InvalidArgument):
        sb.pty(cols=0)
    t = sb.pty(["/bin/sh"])
    # A resize storm, binary garbage and an over-long line: the node stays
    # responsive and the terminal still answers.
    for i in range(300):
        t.resize(20 + i % 200, 10 + i % 50)
    status, out = c.call("POST", f"/v1/sandboxes/{sid}/pty/{t.pid}/resize", {"cols": 2000, "rows": 5})
    assert_error(status, out, 400, "invalid_argument")
    # Raw mode, so the garbage is data for head, not ^D or ^C for the shell.
    garbage = os.urandom(200_000) + b"x" * (2 << 20)
    t.write(f"stty raw -echo; echo ra''w-on; head -c {len(garbage)} >/dev/null; stty sane; "
            "echo gar''bage-done\n")
    expect(t, "raw-on")
    t.write(garbage)
    expect(t, "garbage-done", timeout=60)
    # An over-long line in canonical mode, then Ctrl-C discards it.
    t.write(b"y" * 100_000)
    t.write("\x03")
    assert sb.exec("echo fine").stdout == "fine\n"
    t.resize(61, 17)
    t.write("\x03stty size\n")
    expect(t, "17 61", timeout=30)
    # Writing to an exited terminal: 409; to a pid that is no terminal: 404.
    t.kill()
    t.wait(timeout=10)
    with pytest.raises(dsec.Conflict):
        t.write("x")
    status, out = c.call("POST", f"/v1/sandboxes/{sid}/pty/{t.pid}/input", b"x")
    assert_error(status, out, 409, "conflict")
    status, out = c.call("POST", f"/v1/sandboxes/{sid}/pty/{t.pid}/resize", {"cols": 80, "rows": 24})
    assert_error(status, out, 409, "conflict")
    status, out = c.call("POST", f"/v1/sandboxes/{sid}/pty/99999/input", b"x")
    assert_error(status, out, 404, "not_found")
    # A destroyed sandbox: 404 on every door.
    live = sb.pty(["/bin/sh"])
    sb.destroy()
    with pytest.raises(dsec.NotFound):
        sb.pty()
    with pytest.raises(dsec.NotFound):
        live.write("x")
    status, out = c.call("POST", f"/v1/sandboxes/{sid}/pty", {})
    assert_error(status, out, 404, "not_found")
    with pytest.raises(HandshakeError) as e:
        WebSocket("127.0.0.1", node.rest_port, f"/v1/sandboxes/{sid}/pty/{live.pid}")
    assert e.value.status == 404
    wait_for(lambda: (live.read(timeout=0.5), live.exited)[1], 15,
             what="the destroyed sandbox's terminal output to end")


# -- REST: JSON routes and the WebSocket -------------------------------------------------

def ws_until(ws, pattern, timeout=15):
    got, deadline = b"", time.monotonic() + timeout
    while pattern not in got and time.monotonic() < deadline:
        is_text, data = ws.recv(timeout=max(0.1, deadline - time.monotonic()))
        if is_text is None:
            break
        if not is_text:
            got += data
    assert pattern in got, f"no {pattern!r}: {got[-500:]!r}"
    return got


def test_websocket_open_type_resize_reattach_and_exit(node, sdk, sb):
    port = node.rest_port
    ws = WebSocket("127.0.0.1", port, f"/v1/sandboxes/{q(sb.id)}/pty?cols=70&rows=20"
                                      "&cmd=exec%20/bin/bash%20--norc%20-i")
    is_text, msg = ws.recv(timeout=15)
    assert is_text and '"started"' in msg, msg
    pid = __import__("json").loads(msg)["pid"]
    ws.send_binary(b"stty size\n")
    ws_until(ws, b"20 70")
    ws.send_text({"type": "resize", "cols": 81, "rows": 25})
    ws.send_binary(b"stty size; echo ws-$((3*3))\n")
    ws_until(ws, b"ws-9")
    ws.send_text({"type": "resize", "cols": 0, "rows": 25})
    is_text, msg = ws.recv(timeout=15)
    while not is_text:
        is_text, msg = ws.recv(timeout=15)
    assert '"invalid_argument"' in msg, msg
    # A second client attaches: the scrollback first, then both see live output.
    ws2 = WebSocket("127.0.0.1", port, f"/v1/sandboxes/{q(sb.id)}/pty/{pid}")
    assert '"started"' in ws2.recv(timeout=15)[1]
    ws_until(ws2, b"ws-9")
    # The JSON routes on the same terminal.
    c = node.client
    assert c.call("POST", f"/v1/sandboxes/{q(sb.id)}/pty/{pid}/input", b"echo via-$((5+5))\n")[0] == 200
    ws_until(ws2, b"via-10")
    ws.send_binary(b"exit 7\n")
    for w in (ws, ws2):
        while True:
            is_text, msg = w.recv(timeout=15)
            assert is_text is not None, "closed before the exit message"
            if is_text and '"exit"' in msg:
                assert '"exit_code":7' in msg, msg
                break
        assert w.recv(timeout=15) == (None, None)
        w.close()
    status, st = c.call("GET", f"/v1/sandboxes/{q(sb.id)}/pty/{pid}")
    assert status == 200 and st["exit_code"] == 7, st


def test_json_routes_open_and_kill(node, sb):
    c = node.client
    status, p = c.call("POST", f"/v1/sandboxes/{q(sb.id)}/pty",
                       {"cmd": ["/bin/sh"], "cols": 40, "rows": 10, "env": {"A": "b"}})
    assert status == 201, p
    pid = p["pid"]
    status, out = c.call("GET", f"/v1/sandboxes/{q(sb.id)}/pty")  # no upgrade
    assert_error(status, out, 400, "invalid_argument")
    assert c.call("POST", f"/v1/sandboxes/{q(sb.id)}/pty/{pid}/kill")[0] == 200
    status, st = c.call("GET", f"/v1/sandboxes/{q(sb.id)}/processes/{pid}?wait=1&timeout_s=20")
    assert st["exit_code"] == 128 + 9, st


# -- through a peer ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pair(dsec_bin, store):
    first = Node(dsec_bin, store).start()
    second = Node(dsec_bin, store,
                  extra_args=["--join", f"127.0.0.1:{first.listen_port}"]).start()
    ids = {first.node_id, second.node_id}

    def alive(n):
        status, out = n.client.call("GET", "/v1/nodes")
        return status == 200 and {m["id"] for m in out["nodes"] if m["state"] == "alive"} == ids
    for n in (first, second):
        wait_for(lambda: alive(n), JOIN_WAIT_S, what=f"{n.node_id} to see both nodes")
    yield first, second
    for n in (first, second):
        _finish_node(n)


def test_pty_through_a_peer(pair):
    entry, owner = pair
    c = dsec.Client(f"127.0.0.1:{entry.listen_port}")
    try:
        sb = c.create([BUSYBOX], cpu=1, memory_mb=128, node=owner.node_id)
        assert sb.node == owner.node_id
        t = sb.pty(["/bin/sh"], cols=52, rows=13)
        t.write("stty size; echo peer-$((7*6))\n")
        expect(t, "peer-42")
        t.resize(53, 14)
        t.write("stty size\n")
        expect(t, "14 53")
        ws = WebSocket("127.0.0.1", entry.rest_port, f"/v1/sandboxes/{q(sb.id)}/pty/{t.pid}")
        assert '"started"' in ws.recv(timeout=15)[1]
        ws_until(ws, b"peer-42")
        ws.send_binary(b"echo ws-peer-$((1+2))\n")
        ws_until(ws, b"ws-peer-3")
        ws.close()
        t.write("exit\n")
        assert t.wait(timeout=15).exit_code == 0
        sb.destroy()
    finally:
        c.close()


# -- E2B: the unmodified JS SDK's pty -------------------------------------------------------

def test_e2b_js_pty(e2b_module, e2b_node):
    out = run_js(e2b_module, e2b_node, "pty")
    assert out["ok"] and out["pid"] > 1, out


# -- the CLI ----------------------------------------------------------------------------------

def test_cli_pty(node, sdk, dsec_bin):
    import subprocess
    sb = sdk.create([BUSYBOX], cpu=1, memory_mb=128)
    env = dict(os.environ, DSEC_REST=node.rest)
    p = subprocess.run([dsec_bin, "pty", sb.id, "--cmd", "stty size; echo cli-$((2*21)); exit 5",
                        "--cols", "90", "--rows", "21"], env=env, capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    assert p.returncode == 5, (p.returncode, p.stdout, p.stderr)
    assert b"21 90" in p.stdout and b"cli-42" in p.stdout, p.stdout
    p = subprocess.run([dsec_bin, "pty", "nosuch.node-x"], env=env, capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    assert p.returncode == 1 and b"dsec pty:" in p.stderr, (p.returncode, p.stderr)
    assert subprocess.run([dsec_bin, "pty", "--help"], capture_output=True).returncode == 0
