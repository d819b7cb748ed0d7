# A node killed with -9 and started again on the same state dir gets its
# running sandboxes back (DESIGN.md §4: "running sandboxes survive a node
# restart on the same state dir"): same ids, labels, created_at, files and
# request_ids, exec works. A sandbox that died while the node was down is
# reaped at the restart. SIGTERM still stops everything and leaves the machine
# clean. Each test uses its own node (node_factory) and kills only that node's
# own Popen pid.

import json
import os
import signal
import time
import uuid

from dsec_harness import BUSYBOX, assert_clean, cgroup_dirs, procs_in_node_cgroups, wait_for


def kill9(n):
    """SIGKILLs this test's node process (only its own Popen pid)."""
    n.proc.kill()
    n.proc.wait(30)


def init_pid_of(node_id, sid):
    """Host pid of the sandbox's init: the process in its cgroup that is pid 1
    of its own pid namespace."""
    needle = f"/dsec/{node_id}/{sid}"
    for pid, line in procs_in_node_cgroups(node_id):
        if not (line.endswith(needle) or needle + "/" in line):
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                for row in f:
                    if row.startswith("NSpid:") and row.split()[-1] == "1":
                        return pid
        except OSError:
            continue
    return None


def gone(pid):
    """True once `pid` is no longer a live process (exited or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def same_spec_body(labels, request_id):
    return {"layers": [BUSYBOX], "memory_mb": 128, "ttl_s": 3600, "labels": labels,
            "request_id": request_id}


def test_kill9_restart_recovers_running_sandboxes(node_factory):
    n = node_factory.start()
    c = n.client
    rid = f"restart-{uuid.uuid4().hex[:8]}"
    body_a = same_spec_body({"suite": "restart", "name": "a"}, rid)
    status, a = c.call("POST", "/v1/sandboxes", body_a)
    assert status == 201, a
    c.created.append(a["id"])
    b_id = c.create_ok(memory_mb=128, labels={"suite": "restart", "name": "b"})
    doomed = c.create_ok(memory_mb=128, labels={"suite": "restart", "name": "doomed"})
    status, b = c.get(b_id)
    assert status == 200, b
    status, out = c.put_file(a["id"], "/work/kept.txt", b"survives a restart\n")
    assert status in (200, 201), out
    c.sh(b_id, "mkdir -p /data && echo written-before > /data/f")
    before = {s["id"]: s for s in c.list()[1]["sandboxes"]}
    assert set(before) == {a["id"], b_id, doomed}

    kill9(n)
    # The sandboxes outlive the node process.
    assert cgroup_dirs(n.node_id, a["id"]) and cgroup_dirs(n.node_id, b_id)
    # One of them dies while the node is down.
    pid = init_pid_of(n.node_id, doomed)
    assert pid and pid > 1, f"no init found for {doomed}: {procs_in_node_cgroups(n.node_id)}"
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: gone(pid), 10, what=f"init {pid} of {doomed} to die")

    n.start()  # same state dir, ports and node id
    log = n.log_tail()
    assert f"reaped sandbox {doomed}" in log, log
    status, out = c.list()
    assert status == 200, out
    after = {s["id"]: s for s in out["sandboxes"]}
    assert set(after) == {a["id"], b_id}, after
    for sid in (a["id"], b_id):
        s, was = after[sid], before[sid]
        assert s["state"] == "running", s
        for key in ("labels", "created_at", "expires_at", "layers", "node", "backend"):
            assert s[key] == was[key], (key, s, was)
    status, out = c.list({"name": "b"})
    assert [s["id"] for s in out["sandboxes"]] == [b_id], out

    # Exec, files, the idempotency key: as before the restart.
    assert c.sh(a["id"], "echo back")["stdout"] == "back\n"
    status, data = c.get_file(a["id"], "/work/kept.txt")
    assert status == 200 and data == b"survives a restart\n", (status, data)
    assert c.sh(b_id, "cat /data/f")["stdout"] == "written-before\n"
    status, again = c.call("POST", "/v1/sandboxes", body_a)
    assert status in (200, 201) and again["id"] == a["id"], (status, again)
    status, out = c.call("POST", "/v1/sandboxes",
                         dict(body_a, memory_mb=256))  # same key, other spec
    assert status == 409, out

    # The reaped one is gone for good, and left nothing behind.
    status, out = c.get(doomed)
    assert status == 404 and out["error"]["code"] == "not_found", out
    assert not cgroup_dirs(n.node_id, doomed)
    assert not os.path.exists(os.path.join(n.state_dir, "sandboxes", doomed))
    c.created.remove(doomed)

    # Destroy works on adopted sandboxes and releases everything.
    for sid in (a["id"], b_id):
        status, out = c.delete(sid)
        assert status == 200 and out["deleted"] is True, out
        status, out = c.get(sid)
        assert status == 404, out
    c.created.clear()
    assert_clean(n, allow_layer_mounts=True)
    status, h = c.healthz()
    assert h["sandboxes"] == 0, h


def test_restart_twice_then_sigterm_leaves_machine_clean(node_factory):
    n = node_factory.start()
    c = n.client
    sid = c.create_ok(memory_mb=128, ttl_s=600, labels={"suite": "restart"})
    c.sh(sid, "echo 1 > /tmp/gen")
    for gen in (2, 3):
        kill9(n)
        n.start()
        assert c.sh(sid, f"cat /tmp/gen && echo {gen} > /tmp/gen")["stdout"] == f"{gen - 1}\n"
    # A sandbox made after the restart shares the layer mounts the adopted one holds.
    other = c.create_ok(memory_mb=128)
    assert c.sh(other, "echo new")["stdout"] == "new\n"
    status, out = c.list()
    assert {s["id"] for s in out["sandboxes"]} == {sid, other}, out
    # SIGTERM destroys every sandbox, adopted or not, and unmounts everything
    # (the factory's teardown checks the machine is clean).
    rc = n.stop()
    assert rc == 0, n.log_tail()
    assert_clean(n, allow_layer_mounts=False, timeout=5)
    c.created.clear()


def test_expired_while_down_is_destroyed_at_restart(node_factory):
    n = node_factory.start()
    c = n.client
    short = c.create_ok(memory_mb=128, ttl_s=3)
    keep = c.create_ok(memory_mb=128, ttl_s=600)
    kill9(n)
    time.sleep(3.5)  # the TTL runs out while no node watches
    n.start()
    wait_for(lambda: c.get(short)[0] == 404, 10, what=f"expired {short} to be destroyed")
    assert c.get(keep)[1]["state"] == "running"
    assert not cgroup_dirs(n.node_id, short)
    c.delete(keep)
    c.created.clear()
    assert_clean(n, allow_layer_mounts=True)


def lose_record_write(n, sid, paused_at_ms):
    """Puts back the sandbox record's pause state as it was before the last
    pause or resume: the node answers those before its worker writes the
    record, and a node killed in between leaves exactly this."""
    path = os.path.join(n.state_dir, "sandboxes", sid, "record.json")
    with open(path) as f:
        rec = json.load(f)
    now = int(time.time() * 1000)
    if paused_at_ms:
        rec.update(paused_at_ms=paused_at_ms, ttl_left_ms=3_600_000, expires_at_ms=0)
    else:
        rec.update(paused_at_ms=0, ttl_left_ms=0, expires_at_ms=now + 3_600_000)
    with open(path, "w") as f:
        json.dump(rec, f)


def test_a_pause_or_resume_whose_record_was_lost_is_taken_back_as_it_is(node_factory):
    # Killed between a pause's answer and its record: the sandbox is frozen
    # but recorded running. Between a resume's answer and its record: it runs
    # but is recorded paused. The restarted node goes by the freezer.
    n = node_factory.start()
    c = n.client
    labels = {"suite": "lost-record"}
    frozen = c.create_ok(memory_mb=128, ttl_s=3600, labels=labels)
    thawed = c.create_ok(memory_mb=128, ttl_s=3600, labels=labels)
    for sid in (frozen, thawed):
        c.sh(sid, "echo kept > /tmp/kept")
        assert c.call("POST", f"/v1/sandboxes/{sid}/pause")[0] == 200
    assert c.call("POST", f"/v1/sandboxes/{thawed}/resume")[0] == 200
    kill9(n)
    lose_record_write(n, frozen, 0)
    lose_record_write(n, thawed, int(time.time() * 1000) - 1000)
    n.start()
    listed = {s["id"]: s["state"] for s in c.list(labels)[1]["sandboxes"]}
    assert c.get(frozen)[1]["state"] == "paused" and listed[frozen] == "paused", listed
    assert c.get(thawed)[1]["state"] == "running" and listed[thawed] == "running", listed
    # Both answer as what they are: the frozen one resumes (and is not
    # refused as running), the thawed one runs a command at once.
    assert c.call("POST", f"/v1/sandboxes/{frozen}/resume")[0] == 200
    for sid in (frozen, thawed):
        r = c.sh(sid, "cat /tmp/kept")
        assert r["stdout"] == "kept\n", r
    c.delete(frozen)
    c.delete(thawed)
    c.created.clear()
    assert_clean(n, allow_layer_mounts=True)
