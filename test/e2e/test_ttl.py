# The TTL counts running time (DESIGN.md §6): it stands still while a sandbox
# is paused (expires_at null, ttl_remaining_s frozen) and goes on after resume;
# a paused sandbox is kept at most paused_ttl_s, then destroyed (logged), and
# nothing of it stays. Both hold across a node killed with -9 and restarted.
# Through REST, the SDK and the CLI; bad paused_ttl_s values are 400s.
import json
import os
import subprocess
import time

import pytest

from dsec_harness import BUSYBOX, assert_clean, assert_error, import_sdk, wait_for
from test_restart import kill9


def info(c, sid):
    status, out = c.get(sid)
    assert status == 200, out
    return out


def pause(c, sid):
    status, out = c.call("POST", f"/v1/sandboxes/{sid}/pause")
    assert status == 200, out
    return out


def resume(c, sid):
    status, out = c.call("POST", f"/v1/sandboxes/{sid}/resume")
    assert status == 200, out
    return out


def test_running_sandbox_reports_its_ttl(client):
    sid = client.create_ok(memory_mb=64, ttl_s=600)
    s = info(client, sid)
    assert s["state"] == "running" and s["expires_at"] is not None
    assert 0 < s["ttl_remaining_s"] <= 600
    assert s["paused_ttl_s"] == 86400 and s["paused_expires_at"] is None
    sid2 = client.create_ok(memory_mb=64, ttl_s=0)
    s2 = info(client, sid2)
    assert s2["expires_at"] is None and s2["ttl_remaining_s"] is None


def test_paused_sandbox_outlives_its_ttl_and_the_ttl_goes_on_after_resume(client, node):
    ttl = 4
    sid = client.create_ok(memory_mb=64, ttl_s=ttl)
    client.sh(sid, "echo kept > /tmp/f")
    p = pause(client, sid)
    assert p["state"] == "paused" and p["expires_at"] is None, p
    left = p["ttl_remaining_s"]
    assert 0 < left <= ttl, p
    assert p["paused_expires_at"] is not None
    # Paused for longer than the whole TTL: still there, its clock stood still.
    time.sleep(ttl + 2)
    s = info(client, sid)
    assert s["state"] == "paused" and s["expires_at"] is None, s
    assert s["ttl_remaining_s"] == left, (s, left)
    status, out = client.list()
    listed = {x["id"]: x for x in out["sandboxes"]}[sid]
    assert listed["expires_at"] is None and listed["ttl_remaining_s"] == left

    r = resume(client, sid)
    assert r["state"] == "running" and r["expires_at"] is not None, r
    assert 0 < r["ttl_remaining_s"] <= left and r["paused_expires_at"] is None, r
    assert r["expires_at"] > p["created_at"] + ttl, "the TTL did not move past the pause"
    assert client.sh(sid, "cat /tmp/f")["stdout"] == "kept\n"
    # ... and then it does run out.
    wait_for(lambda: client.get(sid)[0] == 404, left + 15, what=f"{sid} to expire after resume")
    client.created.remove(sid)


def test_transparent_resume_restarts_the_ttl(client):
    sid = client.create_ok(memory_mb=64, ttl_s=300)
    p = pause(client, sid)
    assert p["expires_at"] is None
    assert client.sh(sid, "echo hi")["stdout"] == "hi\n"  # resumes it first
    s = info(client, sid)
    assert s["state"] == "running" and s["expires_at"] is not None
    assert 0 < s["ttl_remaining_s"] <= p["ttl_remaining_s"]


def test_paused_ttl_expiry_destroys_the_sandbox_and_leaves_nothing(node_factory):
    n = node_factory.start()
    c = n.client
    sid = c.create_ok(memory_mb=64, ttl_s=3600, paused_ttl_s=2)
    c.sh(sid, "sleep 100000 &")
    keep = c.create_ok(memory_mb=64, ttl_s=3600, paused_ttl_s=3600)
    s = pause(c, sid)
    assert s["paused_ttl_s"] == 2
    assert abs(s["paused_expires_at"] - (time.time() + 2)) < 30, s
    pause(c, keep)
    wait_for(lambda: c.get(sid)[0] == 404, 20, what=f"{sid} destroyed after paused_ttl_s")
    c.created.remove(sid)
    wait_for(lambda: f"sandbox {sid}: paused for" in n.log_tail(500), 10,
             what="the destruction logged")
    assert "past its paused_ttl_s of 2 s" in n.log_tail(500)
    # The other paused sandbox is untouched.
    assert info(c, keep)["state"] == "paused"
    c.delete(keep)
    c.created.remove(keep)
    assert_clean(n, allow_layer_mounts=True)


def test_paused_sandbox_stays_paused_across_a_restart_with_its_ttl(node_factory):
    n = node_factory.start()
    c = n.client
    ttl = 5
    sid = c.create_ok(memory_mb=64, ttl_s=ttl, paused_ttl_s=3600)
    c.sh(sid, "echo before > /tmp/f; sleep 100000 & echo $! > /tmp/pid")
    left = pause(c, sid)["ttl_remaining_s"]
    doomed = c.create_ok(memory_mb=64, ttl_s=3600, paused_ttl_s=3)
    pause(c, doomed)
    # The state reaches the one record on the worker pool right after the pause answers.
    def record(x):
        return json.load(open(f"{n.state_dir}/sandboxes/{x}/record.json"))
    wait_for(lambda: all(record(x)["paused_at_ms"] for x in (sid, doomed)), 10,
             what="the paused state in record.json")
    assert not any(os.path.exists(f"{n.state_dir}/sandboxes/{x}/ttl.json") for x in (sid, doomed))
    kill9(n)
    # sid as a node before record version 2 left it: the TTL state apart, in
    # ttl.json. The restarted node still adopts it paused, and folds the
    # pair into one record.
    old = record(sid)
    with open(f"{n.state_dir}/sandboxes/{sid}/ttl.json", "w") as f:
        json.dump({"version": 1, "paused_at_ms": old.pop("paused_at_ms"),
                   "left_ms": old.pop("ttl_left_ms"), "expires_at_ms": 0}, f)
    old["version"] = 1
    with open(f"{n.state_dir}/sandboxes/{sid}/record.json", "w") as f:
        json.dump(old, f)
    time.sleep(ttl + 1)  # longer than the whole TTL, and than doomed's paused_ttl_s
    n.start()
    s = info(c, sid)
    assert s["state"] == "paused" and s["expires_at"] is None, s
    assert s["ttl_remaining_s"] == left, (s, left)
    assert not os.path.exists(f"{n.state_dir}/sandboxes/{sid}/ttl.json")
    assert record(sid)["version"] == 2 and record(sid)["paused_at_ms"], record(sid)
    # doomed was paused past its paused_ttl_s while the node was down: it goes at start.
    wait_for(lambda: c.get(doomed)[0] == 404, 20, what=f"{doomed} destroyed after restart")
    c.created.remove(doomed)
    # Resumed, it is as it was, and its TTL goes on.
    r = resume(c, sid)
    assert r["state"] == "running" and 0 < r["ttl_remaining_s"] <= left, r
    assert c.sh(sid, "cat /tmp/f; kill -0 $(cat /tmp/pid) && echo alive")["stdout"] == \
        "before\nalive\n"
    # A running sandbox whose TTL a resume moved keeps the moved expiry.
    kill9(n)
    n.start()
    again = info(c, sid)
    assert again["state"] == "running" and again["expires_at"] == r["expires_at"], (again, r)
    wait_for(lambda: c.get(sid)[0] == 404, left + 20, what=f"{sid} to expire")
    c.created.remove(sid)
    assert_clean(n, allow_layer_mounts=True)


@pytest.mark.parametrize("value", [0, -1, 1.5, "60", 2592001, True, None])
def test_bad_paused_ttl_is_400(client, value):
    if value is None:  # null means the default
        status, out = client.create(memory_mb=64, paused_ttl_s=None)
        assert status == 201 and out["paused_ttl_s"] == 86400, out
        return
    status, out = client.create(memory_mb=64, paused_ttl_s=value)
    assert_error(status, out, 400, "invalid_argument")
    assert "paused_ttl_s" in out["error"]["message"], out


def test_sdk_and_cli_show_the_ttl(node, client, dsec_bin):
    dsec = import_sdk()
    c = dsec.Client(f"127.0.0.1:{node.listen_port}")
    try:
        sb = c.create([BUSYBOX], memory_mb=64, ttl_s=120, paused_ttl_s=600)
        i = sb.info()
        assert 0 < i.ttl_remaining_s <= 120 and i.paused_ttl_s == 600 and i.paused_expires_at is None
        p = sb.pause()
        assert p.expires_at is None and p.paused_expires_at is not None and p.ttl_remaining_s > 0
        with pytest.raises(dsec.InvalidArgument) as exc:
            c.create([BUSYBOX], paused_ttl_s=0)
        assert "paused_ttl_s" in exc.value.message and exc.value.infra is False
        out = subprocess.run([dsec_bin, "inspect", "--rest", node.rest, sb.id],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        assert out.returncode == 0, out.stderr
        shown = json.loads(out.stdout)
        assert shown["state"] == "paused" and shown["expires_at"] is None
        assert shown["ttl_remaining_s"] == p.ttl_remaining_s and shown["paused_ttl_s"] == 600
        out = subprocess.run([dsec_bin, "create", "--rest", node.rest, "--paused-ttl-s", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        assert out.returncode == 1 and b"paused_ttl_s" in out.stderr, out
        sb.destroy()
    finally:
        c.close()
