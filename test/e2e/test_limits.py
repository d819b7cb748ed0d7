# Resource limits: memory, pids, disk, cpu and ttl. A sandbox that hits its
# limit suffers alone: neighbours and the node keep working.

import json
import os
import time

import pytest

from dsec_harness import CGROUP_ROOTS, PYTHON, cgroup_dirs, wait_for


def cg_file(node, sid, controller, name):
    return os.path.join(CGROUP_ROOTS[controller], "dsec", node.node_id, sid, name)


def read_cg(node, sid, controller, name):
    try:
        with open(cg_file(node, sid, controller, name)) as f:
            return f.read().strip()
    except OSError:
        return None


def wait_state(client, sid, want, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, sb = client.get(sid)
        if status == 200 and sb["state"] == want:
            return sb
        time.sleep(0.1)
    raise AssertionError(f"sandbox {sid} never became {want}: {client.get(sid)}")


def test_memory_limit_oom_kills_the_whole_sandbox_only(client, node):
    hog = client.create_ok(memory_mb=32)
    neighbour = client.create_ok(memory_mb=256)
    v1 = read_cg(node, hog, "memory", "memory.limit_in_bytes")
    v2 = read_cg(node, hog, "unified", "memory.max")
    assert v1 is not None or v2 is not None, "no memory cgroup for the sandbox in v1 or v2"
    limit = int(v1) if v1 is not None else int(v2)
    assert limit <= 32 * 1024 * 1024, f"memory limit is {limit} bytes, asked 32 MiB"

    # The exec dies with its sandbox: 503 naming the cause, or (rarely, if the
    # allocation fails before the OOM killer runs) a failed command.
    status, r = client.exec(hog, "dd if=/dev/zero of=/dev/null bs=100M count=1", timeout_s=60)
    assert status == 503 or (status == 200 and r["exit_code"] != 0), (status, r)
    if status == 503:
        sb = wait_state(client, hog, "failed")
        assert sb["reason"] == "oom", sb
    assert client.sh(neighbour, "echo alive")["stdout"] == "alive\n"
    assert client.healthz()[0] == 200


def test_oom_sandbox_is_reported_failed_and_deletes_cleanly(client, node):
    hog = client.create_ok(memory_mb=32)
    client.exec(hog, "(dd if=/dev/zero of=/dev/null bs=100M count=1 &) ; sleep 5", timeout_s=60)
    sb = wait_state(client, hog, "failed")
    assert sb["reason"] == "oom", sb
    status, out = client.exec(hog, "true")
    assert status == 503, (status, out)
    assert client.delete(hog)[0] == 200


def test_memory_within_limit_works(client):
    sid = client.create_ok(memory_mb=256)
    r = client.sh(sid, "dd if=/dev/zero of=/dev/null bs=64M count=1", timeout_s=60)
    assert r["exit_code"] == 0, r


def pids_in(client, sid):
    """Process count seen from inside, via one argv exec (no shell fork needed)."""
    r = client.sh(sid, ["ls", "/proc"], timeout_s=30)
    return sum(1 for x in r["stdout"].split() if x.isdigit())


def test_pids_limit_bounds_a_fork_bomb(client, node):
    sid = client.create_ok(pids=32)
    neighbour = client.create_ok()
    v1 = read_cg(node, sid, "pids", "pids.max")
    v2 = read_cg(node, sid, "unified", "pids.max")
    assert v1 == "32" or v2 == "32", f"pids.max v1={v1} v2={v2}, asked 32"

    t0 = time.monotonic()
    # busybox sh gives up at the first failed fork; the sleepers it started stay.
    r = client.sh(sid, "while true; do sleep 100 & done", timeout_s=10)
    assert time.monotonic() - t0 < 30, "fork loop with timeout_s=10 took too long to answer"
    assert r["timed_out"] or r["exit_code"] != 0, r
    assert "fork" in r["stderr"].lower() or r["timed_out"], \
        f"no fork failure reported: {r}"
    current = read_cg(node, sid, "pids", "pids.current") or read_cg(node, sid, "unified",
                                                                     "pids.current")
    assert current is not None and int(current) <= 32, current
    assert pids_in(client, sid) <= 32
    assert client.sh(neighbour, "echo ok")["stdout"] == "ok\n"
    assert client.healthz()[0] == 200


def test_pids_fork_loop_killed_by_timeout(client, node):
    # A loop that survives fork failures runs until the exec timeout kills it
    # and every child; then the sandbox answers again.
    sid = client.create_ok([PYTHON], pids=32, memory_mb=256)
    code = ("import os, time\n"
            "while True:\n"
            "    try:\n"
            "        if os.fork() == 0:\n"
            "            time.sleep(300); os._exit(0)\n"
            "    except OSError:\n"
            "        time.sleep(0.01)\n")
    t0 = time.monotonic()
    r = client.sh(sid, ["python3", "-c", code], timeout_s=5)
    assert r["timed_out"] is True, r
    assert time.monotonic() - t0 < 30, r
    r = wait_for(lambda: client.exec(sid, ["echo", "alive"], timeout_s=10)[1], 30,
                 what="sandbox answering after the fork loop was killed")
    assert r.get("stdout") == "alive\n", r
    wait_for(lambda: pids_in(client, sid) < 5, 10, what="the fork loop's children to be killed")
    assert client.healthz()[0] == 200


def test_disk_limit(client):
    """The upper sits on the node's quota volume: writing past disk_mb fails
    with a quota error inside the sandbox, and deleting frees the room."""
    sid = client.create_ok(disk_mb=50)
    r = client.sh(sid, "dd if=/dev/zero of=/tmp/fill bs=1M count=200 2>&1; sync; "
                       "du -m /tmp/fill | cut -f1", timeout_s=120)
    used = int(r["stdout"].split()[-1])
    assert used <= 60, f"wrote {used} MB into a disk_mb=50 sandbox: {r['stdout'][-300:]}"
    assert "quota" in r["stdout"].lower() or "space" in r["stdout"].lower(), r["stdout"][-300:]
    client.sh(sid, "rm -f /tmp/fill")
    assert client.sh(sid, "echo ok > /tmp/small && cat /tmp/small")["stdout"] == "ok\n"


def test_cpu_limit_in_cgroup(client, node):
    sid = client.create_ok(cpu=0.5)
    quota = read_cg(node, sid, "cpu", "cpu.cfs_quota_us")
    period = read_cg(node, sid, "cpu", "cpu.cfs_period_us")
    if quota is not None and period is not None:
        assert abs(int(quota) / int(period) - 0.5) < 0.01, (quota, period)
        return
    cpu_max = read_cg(node, sid, "unified", "cpu.max")
    assert cpu_max is not None, "no cpu cgroup for the sandbox in v1 or v2"
    q, p = cpu_max.split()
    assert q != "max" and abs(int(q) / int(p) - 0.5) < 0.01, cpu_max


def test_ttl_expires(client, node):
    t0 = time.monotonic()
    status, sb = client.create(ttl_s=2)
    assert status == 201, sb
    sid = sb["id"]
    assert sb["expires_at"] is not None and 1 <= sb["expires_at"] - sb["created_at"] <= 3, sb
    wait_for(lambda: client.get(sid)[0] == 404, 15, interval=0.2, what=f"{sid} to expire")
    took = time.monotonic() - t0
    assert took < 8, f"ttl_s=2 sandbox took {took:.1f}s to disappear"
    wait_for(lambda: not cgroup_or_dir(node, sid), 10, what=f"{sid} cgroups and dir removed")
    status, out = client.list()
    assert sid not in [s["id"] for s in out["sandboxes"]], out


def cgroup_or_dir(node, sid):
    left = cgroup_dirs(node.node_id, sid)
    d = os.path.join(node.state_dir, "sandboxes", sid)
    if os.path.exists(d):
        left.append(d)
    return left


@pytest.mark.parametrize("n", [8])
def test_many_sandboxes_at_once(client, n):
    ids = [client.create_ok(memory_mb=64) for _ in range(n)]
    for sid in ids:
        assert client.sh(sid, "hostname")["exit_code"] == 0


def test_capacity_answers_429_with_retry_after(node_factory):
    node = node_factory.start("--max-sandboxes", "2")
    c = node.client
    a = c.create_ok()
    c.create_ok()
    status, hdrs, body = c.raw("POST", "/v1/sandboxes", {"layers": ["base/busybox@1"]})
    assert status == 429, body
    assert json.loads(body)["error"]["code"] == "resource_exhausted", body
    assert "retry-after" in hdrs, hdrs
    c.delete(a)
    c.create_ok()
