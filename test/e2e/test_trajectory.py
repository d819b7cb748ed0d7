# The trajectory log (README "Preemption and replay"): every exec and file
# write through REST, the Python SDK and the CLI is logged in order with a
# growing seq; GET .../trajectory answers NDJSON (since= for the tail); the log
# survives a node restart; an exec's `step` fast-forwards (also after kill -9
# of the node between two steps) and a changed step is a 409; POST
# .../replay rebuilds a destroyed sandbox, and one whose node was killed, from
# a log directory two nodes share. Bad input: bad step keys, unknown ids, bad
# since.

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid

import pytest

from dsec_harness import (BUSYBOX, TMP_ROOT, Node, _finish_node, assert_clean, assert_error,
                      wait_for)


def traj(client, sid, since=None):
    """(status, records or error body) of GET .../trajectory."""
    path = f"/v1/sandboxes/{sid}/trajectory" + (f"?since={since}" if since is not None else "")
    status, hdrs, data = client.raw("GET", path)
    if status != 200:
        return status, json.loads(data)
    assert hdrs.get("content-type", "").startswith("application/x-ndjson"), hdrs
    return status, [json.loads(line) for line in data.decode().splitlines() if line]


def records(client, sid, since=None):
    status, out = traj(client, sid, since)
    assert status == 200, out
    return out


def kinds(recs):
    return [r["kind"] for r in recs]


def exec_step(client, sid, cmd, step, **kw):
    return client.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": cmd, "step": step, **kw})


def kill9(n):
    n.proc.kill()
    n.proc.wait(30)


# -- the log: contents and order through every door -----------------------------

def test_rest_execs_and_writes_are_logged_in_order(client, sandbox):
    status, out = client.put_file(sandbox, "/tmp/a.txt", b"hello\n")
    assert status == 200, out
    r = client.exec(sandbox, "cat /tmp/a.txt; echo err >&2; exit 3",
                    cwd="/tmp", env={"K": "v"}, stdin="in-data")
    assert r[0] == 200 and r[1]["exit_code"] == 3 and r[1]["replayed"] is False, r
    recs = records(client, sandbox)
    assert kinds(recs) == ["spec", "file", "exec"], recs
    assert [x["seq"] for x in recs] == [0, 1, 2]
    spec = recs[0]
    assert spec["id"] == sandbox and spec["spec"]["layers"] == [BUSYBOX]
    f = recs[1]
    assert f["path"] == "/tmp/a.txt" and f["size"] == 6 and f["digest"].startswith("sha256:")
    e = recs[2]
    assert e["cmd"] == ["/bin/sh", "-c", "cat /tmp/a.txt; echo err >&2; exit 3"]
    assert e["cwd"] == "/tmp" and e["env"] == {"K": "v"}
    assert e["stdin"]["size"] == 7 and e["stdin"]["digest"].startswith("sha256:")
    assert e["exit_code"] == 3 and e["stdout"]["text"] == "hello\n"
    assert e["stderr"]["text"] == "err\n" and e["timed_out"] is False
    assert e["duration_ms"] >= 0 and e["at"] > spec["at"] - 1
    assert "step" not in e


def test_since_answers_the_tail(client, sandbox):
    for i in range(3):
        assert client.sh(sandbox, f"echo {i}")["exit_code"] == 0
    recs = records(client, sandbox)
    tail = records(client, sandbox, since=recs[1]["seq"])
    assert [r["seq"] for r in tail] == [r["seq"] for r in recs[2:]]
    assert records(client, sandbox, since=recs[-1]["seq"]) == []


def test_large_output_is_kept_once_as_a_blob(client, sandbox, node):
    # 8 KiB of output: over the 4 KiB inline cap, so stored by digest beside the log.
    r = client.sh(sandbox, "head -c 8192 /dev/zero | tr '\\0' x")
    assert len(r["stdout"]) == 8192
    r2 = client.sh(sandbox, "head -c 8192 /dev/zero | tr '\\0' x")
    e = records(client, sandbox)[-1]
    assert e["stdout"]["size"] == 8192 and e["stdout"].get("blob") is True
    assert "text" not in e["stdout"]
    blobs = os.path.join(node.state_dir, "trajectories", sandbox, "blobs")
    names = os.listdir(blobs)
    assert names == ["sha256-" + e["stdout"]["digest"].split(":")[1]], names


def test_sdk_and_cli_are_logged_too(client, node, dsec_sdk, cli):
    c = dsec_sdk.Client(f"127.0.0.1:{node.listen_port}")
    try:
        sb = c.create(layers=[BUSYBOX], memory_mb=128)
        client.created.append(sb.id)
        sb.write_file("/tmp/x", b"sdk")
        assert sb.exec("cat /tmp/x").stdout == "sdk"
        list(sb.exec_stream("echo streamed"))
        p = cli("exec", sb.id, "--step", "cli-1", "--", "echo", "from-cli")
        assert p.returncode == 0 and p.stdout == b"from-cli\n", p
        recs = sb.trajectory()
        assert kinds(recs) == ["spec", "file", "exec", "exec", "exec"], recs
        assert recs[3]["stdout"]["text"] == "streamed\n"
        assert recs[4]["step"] == "cli-1" and recs[4]["cmd"] == ["echo", "from-cli"]
        assert [r["seq"] for r in sb.trajectory(since=2)] == [3, 4]
        # The CLI verb prints one line per record.
        p = cli("trajectory", sb.id)
        assert p.returncode == 0, p
        lines = p.stdout.decode().splitlines()
        assert len(lines) == 5 and lines[1].startswith("1\tfile\t/tmp/x") and "cli-1" in lines[4]
        p = cli("trajectory", sb.id, "--since", "3", "--json")
        assert [json.loads(x)["seq"] for x in p.stdout.decode().splitlines()] == [4]
        # A streamed step replays as chunks of the recorded output.
        s1 = sb.exec_stream("echo one; echo two >&2", step="stream-1")
        first = [(ch.stream, ch.data) for ch in s1]
        s2 = sb.exec_stream("echo one; echo two >&2", step="stream-1")
        again = [(ch.stream, ch.data) for ch in s2]
        assert not s1.result.replayed and s2.result.replayed
        assert sorted(again) == sorted(first) == [("stderr", b"two\n"), ("stdout", b"one\n")]
        # The CLI rebuilds too: it prints the new sandbox's id.
        p = cli("replay", sb.id)
        assert p.returncode == 0, p
        new = p.stdout.decode().strip()
        client.created.append(new)
        assert sb.exec("cat /tmp/x").stdout == "sdk"
        assert c.get(new).exec("cat /tmp/x").stdout == "sdk"
    finally:
        c.close()


def test_async_sdk_trajectory_and_step(node, dsec_sdk):
    import asyncio

    async def main():
        c = dsec_sdk.AsyncClient(f"127.0.0.1:{node.listen_port}")
        try:
            sb = await c.create(layers=[BUSYBOX], memory_mb=128)
            try:
                r1 = await sb.exec("echo a", step="s1")
                r2 = await sb.exec("echo a", step="s1")
                assert (r1.replayed, r2.replayed) == (False, True) and r2.stdout == "a\n"
                recs = await sb.trajectory()
                assert kinds(recs) == ["spec", "exec"]
            finally:
                await sb.destroy()
        finally:
            c.close()

    asyncio.run(main())


# -- fast-forward -------------------------------------------------------------------

def test_a_known_step_is_answered_from_the_log(client, sandbox):
    status, r1 = exec_step(client, sandbox, "echo run >> /tmp/count; wc -l < /tmp/count", "t1")
    assert status == 200 and r1["replayed"] is False and r1["stdout"].strip() == "1", r1
    status, r2 = exec_step(client, sandbox, "echo run >> /tmp/count; wc -l < /tmp/count", "t1")
    assert status == 200 and r2["replayed"] is True, r2
    assert r2["stdout"] == r1["stdout"] and r2["exit_code"] == r1["exit_code"]
    # It did not run again: the file has one line; a new step runs normally.
    assert client.sh(sandbox, "wc -l < /tmp/count")["stdout"].strip() == "1"
    status, r3 = exec_step(client, sandbox, "cat /tmp/count", "t2")
    assert status == 200 and r3["replayed"] is False
    # One record per step: the replayed answer added none.
    steps = [r.get("step") for r in records(client, sandbox) if r["kind"] == "exec"]
    assert steps == ["t1", None, "t2"], steps


def test_a_changed_step_is_a_409_naming_the_difference(client, sandbox, node, dsec_sdk):
    assert exec_step(client, sandbox, "echo one", "s", cwd="/tmp", env={"A": "1"})[0] == 200
    for change, field in (({"cmd": "echo two"}, "cmd"), ({"cwd": "/"}, "cwd"),
                          ({"env": {"A": "2"}}, "env"), ({"stdin": "x"}, "stdin")):
        body = {"cmd": "echo one", "step": "s", "cwd": "/tmp", "env": {"A": "1"}}
        body.update(change)
        status, out = client.call("POST", f"/v1/sandboxes/{sandbox}/exec", body)
        assert_error(status, out, 409, "conflict")
        assert f"{field} was" in out["error"]["message"] and '"s"' in out["error"]["message"], out
    c = dsec_sdk.Client(f"127.0.0.1:{node.listen_port}")
    try:
        with pytest.raises(dsec_sdk.StepConflict) as e:
            c.get(sandbox).exec("echo other", step="s", cwd="/tmp", env={"A": "1"})
        assert isinstance(e.value, dsec_sdk.Conflict) and "cmd was" in str(e.value)
    finally:
        c.close()


def test_bad_step_keys_are_400(client, sandbox, node, dsec_sdk):
    for step in ("", "a b", "x" * 129, "semi;colon", "new\nline", 7):
        status, out = client.call("POST", f"/v1/sandboxes/{sandbox}/exec",
                                  {"cmd": "true", "step": step})
        assert_error(status, out, 400, "invalid_argument")
        assert "step" in out["error"]["message"], out
    status, out = client.call("POST", f"/v1/sandboxes/{sandbox}/exec?background=1",
                              {"cmd": "true", "step": "bg"})
    assert_error(status, out, 400, "invalid_argument")
    c = dsec_sdk.Client(f"127.0.0.1:{node.listen_port}")
    try:
        with pytest.raises(dsec_sdk.InvalidArgument):
            c.get(sandbox).exec("true", step="has space")
    finally:
        c.close()


def test_fast_forward_after_kill9_between_steps(node_factory, dsec_sdk):
    n = node_factory.start()
    c = dsec_sdk.Client(f"127.0.0.1:{n.listen_port}")
    sb = c.create(layers=[BUSYBOX], memory_mb=128, ttl_s=600)
    r1 = sb.exec("echo x >> /tmp/ran; date +%s%N", step="turn-1")
    c.close()
    kill9(n)
    n.start()
    c = dsec_sdk.Client(f"127.0.0.1:{n.listen_port}")
    try:
        sb = c.get(sb.id)
        again = sb.exec("echo x >> /tmp/ran; date +%s%N", step="turn-1")
        assert again.replayed and again.stdout == r1.stdout
        r2 = sb.exec("echo x >> /tmp/ran; wc -l < /tmp/ran", step="turn-2")
        assert not r2.replayed and r2.stdout.strip() == "2"  # turn-1 ran once
        recs = sb.trajectory()
        assert kinds(recs) == ["spec", "exec", "exec"] and [r["seq"] for r in recs] == [0, 1, 2]
        sb.destroy()
        # The adopted sandbox's init was the killed node's child: the host
        # reaps it, so wait for that before the finish checks the machine.
        assert_clean(n, allow_layer_mounts=True)
    finally:
        c.close()


def test_log_survives_a_restart_and_a_destroy(node_factory):
    n = node_factory.start()
    sid = n.client.create_ok(memory_mb=128)
    n.client.sh(sid, "echo before")
    n.stop_ok()  # SIGTERM destroys the sandbox; its log stays
    n.start()
    recs = records(n.client, sid)
    assert kinds(recs) == ["spec", "exec", "destroyed"], recs
    assert recs[1]["stdout"]["text"] == "before\n"


# -- replay ---------------------------------------------------------------------------

def test_replay_of_a_destroyed_sandbox(client, node, dsec_sdk):
    sid = client.create_ok(memory_mb=128, labels={"job": "replay-test"})
    client.put_file(sid, "/work/big.bin", bytes(range(256)) * 64)  # 16 KiB, a blob
    client.sh(sid, "cat /work/big.bin | md5sum > /work/sum")
    exec_step(client, sid, "echo step-done > /work/step", "st-1")
    status, out = client.delete(sid)
    assert status == 200
    status, info = client.call("POST", f"/v1/sandboxes/{sid}/replay")
    assert status == 201, info
    new = info["id"]
    client.created.append(new)
    assert new != sid and info["labels"] == {"job": "replay-test"}
    assert client.sh(new, "cat /work/step")["stdout"] == "step-done\n"
    status, data = client.get_file(new, "/work/big.bin")
    assert status == 200 and data == bytes(range(256)) * 64
    assert client.sh(new, "md5sum < /work/big.bin | cmp - /work/sum && echo same")["stdout"] \
        == "same\n"
    recs = records(client, new)
    assert kinds(recs)[:5] == ["spec", "rebuilt", "file", "exec", "exec"], recs
    assert recs[1]["source"] == sid and recs[1]["upto_seq"] == 4
    # The rebuilt sandbox holds the steps: sending one again fast-forwards.
    status, r = exec_step(client, new, "echo step-done > /work/step", "st-1")
    assert status == 200 and r["replayed"] is True
    # upto_seq replays a prefix; the SDK form.
    c = dsec_sdk.Client(f"127.0.0.1:{node.listen_port}")
    try:
        part = c.replay(sid, upto_seq=1)
        client.created.append(part.id)
        assert kinds(part.trajectory()) == ["spec", "rebuilt", "file"]
        assert part.exec("test -e /work/sum || echo absent").stdout == "absent\n"
    finally:
        c.close()


def test_background_commands_are_logged_and_replayed(client, node):
    sid = client.create_ok(memory_mb=128)
    status, p = client.call("POST", f"/v1/sandboxes/{sid}/exec?background=1",
                            {"cmd": "echo bg-out; echo made > /work/bg.txt; exit 3"})
    assert status == 201, p
    status, out = client.call("GET", f"/v1/sandboxes/{sid}/processes/{p['pid']}?wait=1&timeout_s=30")
    assert status == 200 and out["state"] == "exited", out
    assert client.sh(sid, "cat /work/bg.txt")["stdout"] == "made\n"
    recs = wait_for(lambda: (lambda r: r if "exit" in kinds(r) else None)(records(client, sid)),
                    10, what="the background command's exit record")
    assert kinds(recs)[:4] == ["spec", "exec", "exit", "exec"], recs
    start, end = recs[1], recs[2]
    assert start["background"] is True and start["pid"] == p["pid"], start
    assert start["cmd"][-1].startswith("echo bg-out") and "exit_code" not in start, start
    assert end["pid"] == p["pid"] and end["exit_code"] == 3, end
    assert end["stdout"]["text"] == "bg-out\n", end
    # A rebuild starts it again, in the background, in its place in the log.
    status, info = client.call("POST", f"/v1/sandboxes/{sid}/replay")
    assert status == 201, info
    new = info["id"]
    wait_for(lambda: client.sh(new, "cat /work/bg.txt 2>/dev/null")["stdout"] == "made\n", 20,
             what="the replayed background command to write its file")
    client.delete(new)
    client.delete(sid)


def test_replay_bad_input(client, sandbox, cli):
    status, out = client.call("POST", "/v1/sandboxes/nosuchnode.abc123/replay")
    assert_error(status, out, 404, "not_found")
    status, out = traj(client, "nosuchnode.abc123")
    assert_error(status, out, 404, "not_found")
    status, out = traj(client, "not-an-id")
    assert_error(status, out, 400, "invalid_argument")
    for since in ("-1", "abc", "1.5", ""):
        status, out = traj(client, sandbox, since=since)
        assert_error(status, out, 400, "invalid_argument")
        assert "since" in out["error"]["message"]
    status, out = client.call("POST", f"/v1/sandboxes/{sandbox}/replay", {"upto_seq": "x"})
    assert_error(status, out, 400, "invalid_argument")
    status, out = client.call("POST", f"/v1/sandboxes/{sandbox}/replay", {"bogus": 1})
    assert_error(status, out, 400, "invalid_argument")
    p = cli("trajectory", "nosuchnode.abc123")
    assert p.returncode == 1 and b"not_found" in p.stderr, p
    p = cli("trajectory", sandbox, "--since", "x")
    assert p.returncode == 2, p


def test_replay_after_the_node_is_killed_with_a_shared_log_dir(dsec_bin, store):
    shared = tempfile.mkdtemp(prefix="dsec-traj-shared-", dir=TMP_ROOT)
    a = Node(dsec_bin, store, extra_args=["--trajectory-dir", shared]).start()
    b = Node(dsec_bin, store, extra_args=["--trajectory-dir", shared,
                                           "--join", f"127.0.0.1:{a.listen_port}"]).start()
    nodes = [a, b]
    try:
        def alive_both(n):
            status, out = n.client.call("GET", "/v1/nodes")
            return status == 200 and sum(m["state"] == "alive" for m in out["nodes"]) == 2
        for n in nodes:
            wait_for(lambda: alive_both(n), 30, what=f"{n.node_id} to see both nodes")
        sid = b.client.create_ok(memory_mb=128, node=b.node_id)
        b.client.put_file(sid, "/work/in.txt", b"payload\n")
        exec_step(b.client, sid, "tr a-z A-Z < /work/in.txt > /work/out.txt", "p1")
        # Any peer serves the log while its owner lives...
        assert kinds(records(a.client, sid)) == ["spec", "file", "exec"]
        kill9(b)
        # ...and after its owner is gone, from the shared directory.
        assert kinds(records(a.client, sid)) == ["spec", "file", "exec"]
        status, info = a.client.call("POST", f"/v1/sandboxes/{sid}/replay")
        assert status == 201, info
        assert info["node"] == a.node_id
        assert a.client.sh(info["id"], "cat /work/out.txt")["stdout"] == "PAYLOAD\n"
        a.client.delete(info["id"])
        # b's sandbox was left running by kill -9: a restart adopts it.
        b.start()
        b.client.delete(sid)
        assert_clean(b, allow_layer_mounts=True)
    finally:
        for n in nodes:
            if n.alive():
                _finish_node(n)
            else:
                n.remove_state()
        shutil.rmtree(shared, ignore_errors=True)


def test_no_trajectory_flag_turns_the_log_off(node_factory):
    n = node_factory.start("--no-trajectory")
    sid = n.client.create_ok(memory_mb=128)
    assert n.client.sh(sid, "echo hi")["stdout"] == "hi\n"
    status, out = traj(n.client, sid)
    assert_error(status, out, 404, "not_found")
    assert "--no-trajectory" in out["error"]["message"]
    assert not os.path.exists(os.path.join(n.state_dir, "trajectories"))
