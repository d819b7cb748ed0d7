# CPU classes (DESIGN.md §6; PATCH /v1/sandboxes/{id}): a batch sandbox runs
# every process under SCHED_IDLE, init included (so whatever it forks later
# inherits it), in a cpu cgroup of minimum weight marked idle, placed under
# the top-level idle group dsec-batch so it loses to everything outside it
# (clients in the root cgroup included); a latency one runs SCHED_OTHER with
# the defaults under dsec. PATCH changes a running sandbox both ways, for its
# existing and its future processes, moving its cpu group between the two
# (the other controllers stay), and the class survives a node restart.
# Everything is read from the host: the sandbox's cpu cgroup
# (/sys/fs/cgroup/cpu/dsec-batch/<node>/<id> or .../cpu/dsec/<node>/<id>)
# lists its tasks, /proc/<tid>/cgroup where each is, /proc/<tid>/stat field
# 41 its policy.

import json
import os
import signal
import time
import urllib.parse

import pytest

from dsec_harness import CGROUP_ROOTS, assert_clean, assert_error, cgroup_dirs, import_sdk, wait_for

SCHED_OTHER = 0
SCHED_IDLE = 5
CPU_ROOT = CGROUP_ROOTS.get("cpu", "/sys/fs/cgroup/cpu")

# The kernel calls the weight of an idle group 3 whatever was written before.
LOW_SHARES = 3


BATCH_TOP = os.path.join(CPU_ROOT, "dsec-batch")


def latency_dir(node, sid):
    return os.path.join(CPU_ROOT, "dsec", node.node_id, sid)


def batch_dir(node, sid):
    return os.path.join(BATCH_TOP, node.node_id, sid)


def cpu_dir(node, sid):
    """The sandbox's cpu group, wherever its class put it."""
    return batch_dir(node, sid) if os.path.isdir(batch_dir(node, sid)) else latency_dir(node, sid)


def cgroup_of(tid, controller):
    """The task's path in one v1 hierarchy (/proc/<tid>/cgroup); None if gone."""
    try:
        with open(f"/proc/{tid}/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                if controller in ctrls.split(","):
                    return path
    except OSError:
        return None
    return None


def knob(node, sid, name):
    with open(os.path.join(cpu_dir(node, sid), name)) as f:
        return int(f.read().strip())


def has_idle_knob():
    return os.path.exists(os.path.join(CPU_ROOT, "cpu.idle"))


def tasks(node, sid):
    """Host tids of every task (threads too) in the sandbox's cpu cgroup."""
    with open(os.path.join(cpu_dir(node, sid), "tasks")) as f:
        return [int(x) for x in f.read().split()]


def policy(tid):
    """Field 41 of /proc/<tid>/stat; None if the task is gone."""
    try:
        with open(f"/proc/{tid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[38])
    except (OSError, IndexError):
        return None


def cmdline(tid):
    try:
        with open(f"/proc/{tid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def ns_pid(tid):
    """The task's pid inside the sandbox (last NSpid entry)."""
    try:
        with open(f"/proc/{tid}/status") as f:
            for row in f:
                if row.startswith("NSpid:"):
                    return int(row.split()[-1])
    except OSError:
        return None
    return None


def host_pid_of(node, sid, argv_prefix):
    """The host tid of the sandbox's process whose argv starts with argv_prefix."""
    want = [a.encode() for a in argv_prefix]
    for tid in tasks(node, sid):
        if cmdline(tid)[:len(want)] == want:
            return tid
    return None


def policies(node, sid):
    """{tid: policy} of every live task of the sandbox."""
    out = {t: policy(t) for t in tasks(node, sid)}
    return {t: p for t, p in out.items() if p is not None}


def patch(client, sid, body):
    return client.call("PATCH", "/v1/sandboxes/" + urllib.parse.quote(sid, safe=""), body)


def background(client, sid, cmd):
    status, out = client.call(
        "POST", f"/v1/sandboxes/{urllib.parse.quote(sid, safe='')}/exec?background=1",
        {"cmd": cmd})
    assert status == 201, out
    return out["pid"]


# A background shell that forks `sleep <tag>` once /tmp/go-<tag> exists: the
# "child forked later" of a process started before the class changed.
def start_late_forker(client, sid, tag):
    background(client, sid, f"while [ ! -e /tmp/go-{tag} ]; do sleep 0.05; done; "
                            f"exec sleep {tag}")


def release_late_forker(client, node, sid, tag):
    client.sh(sid, f"touch /tmp/go-{tag}")
    wait_for(lambda: host_pid_of(node, sid, ["sleep", str(tag)]) is not None, 10,
             what=f"sleep {tag} in {sid}")
    return host_pid_of(node, sid, ["sleep", str(tag)])


def exec_policy(client, sid):
    """The policy of a process started by a (foreground) exec, read by itself."""
    out = client.sh(sid, "cat /proc/self/stat")
    assert out["exit_code"] == 0, out
    return int(out["stdout"].rsplit(")", 1)[1].split()[38])


def assert_place(node, sid, batch):
    """The cpu group is at the class's place and only there; every task is in
    it in the cpu hierarchy and under dsec/<node>/<sid> in the others; for
    batch the top-level group is idle."""
    want, other = (batch_dir, latency_dir) if batch else (latency_dir, batch_dir)
    assert os.path.isdir(want(node, sid)), f"{want(node, sid)} missing"
    assert not os.path.exists(other(node, sid)), f"{other(node, sid)} left behind"
    rel = os.path.relpath(want(node, sid), CPU_ROOT)
    for t in tasks(node, sid):
        cpu, mem = cgroup_of(t, "cpu"), cgroup_of(t, "memory")
        if cpu is None or mem is None:
            continue  # exited meanwhile
        assert cpu == "/" + rel, f"task {t} of {sid} in cpu group {cpu}"
        assert mem == f"/dsec/{node.node_id}/{sid}", f"task {t} of {sid} in memory group {mem}"
    if batch and has_idle_knob():
        with open(os.path.join(BATCH_TOP, "cpu.idle")) as f:
            assert f.read().strip() == "1", "dsec-batch is not an idle group"


def assert_class(node, sid, want_policy):
    assert_place(node, sid, want_policy == SCHED_IDLE)
    pols = policies(node, sid)
    assert pols, f"no tasks in {cpu_dir(node, sid)}"
    wrong = {t: p for t, p in pols.items() if p != want_policy}
    assert not wrong, f"tasks of {sid} not in policy {want_policy}: {wrong}"
    if want_policy == SCHED_IDLE:
        assert knob(node, sid, "cpu.shares") <= LOW_SHARES
        if has_idle_knob():
            assert knob(node, sid, "cpu.idle") == 1
    else:
        assert knob(node, sid, "cpu.shares") == 1024
        if has_idle_knob():
            assert knob(node, sid, "cpu.idle") == 0


def init_tid(node, sid):
    for t in tasks(node, sid):
        if ns_pid(t) == 1:
            return t
    return None


def test_batch_sandbox_runs_every_process_sched_idle(client, node):
    status, info = client.create(cpu=1, memory_mb=128, cpu_class="batch")
    assert status == 201, info
    sid = info["id"]
    assert info["cpu_class"] == "batch"
    init = init_tid(node, sid)
    assert init is not None
    assert policy(init) == SCHED_IDLE
    assert exec_policy(client, sid) == SCHED_IDLE
    background(client, sid, "exec sleep 201")
    start_late_forker(client, sid, 202)
    # Answered once init started the shell; the exec of sleep comes after.
    wait_for(lambda: host_pid_of(node, sid, ["sleep", "201"]) is not None, 10,
             what=f"sleep 201 in {sid}")
    started = host_pid_of(node, sid, ["sleep", "201"])
    assert policy(started) == SCHED_IDLE
    late = release_late_forker(client, node, sid, 202)
    assert policy(late) == SCHED_IDLE
    assert_class(node, sid, SCHED_IDLE)
    status, got = client.get(sid)
    assert status == 200 and got["cpu_class"] == "batch", got


def test_latency_sandbox_runs_sched_other(client, node):
    status, info = client.create(cpu=1, memory_mb=128)
    assert status == 201, info
    sid = info["id"]
    assert info["cpu_class"] == "latency"
    background(client, sid, "exec sleep 211")
    assert exec_policy(client, sid) == SCHED_OTHER
    assert_class(node, sid, SCHED_OTHER)


def test_the_node_runs_in_its_own_group_at_sixteen_sandboxes_weight(node):
    # It serves every sandbox (and reclaim compresses on its threads): a burst
    # of busy agents must not starve it at one sandbox's weight.
    own = os.path.join(CPU_ROOT, "dsec", node.node_id, "_node")
    with open(os.path.join(own, "cpu.shares")) as f:
        assert int(f.read()) == 16384
    with open(os.path.join(own, "cgroup.procs")) as f:
        assert str(node.proc.pid) in f.read().split()


def test_patch_demotes_and_promotes_a_running_sandbox(client, node):
    sid = client.create_ok(cpu=1, memory_mb=128)
    background(client, sid, "exec sleep 221")
    start_late_forker(client, sid, 222)
    assert_class(node, sid, SCHED_OTHER)

    status, out = patch(client, sid, {"cpu_class": "batch"})
    assert status == 200, out
    assert out["id"] == sid and out["cpu_class"] == "batch" and out["applied"] == ["cpu_class"]
    assert_class(node, sid, SCHED_IDLE)           # existing processes, init included
    assert policy(init_tid(node, sid)) == SCHED_IDLE
    assert exec_policy(client, sid) == SCHED_IDLE  # a new exec
    late = release_late_forker(client, node, sid, 222)
    assert policy(late) == SCHED_IDLE              # forked later by an old process
    status, got = client.get(sid)
    assert got["cpu_class"] == "batch"

    status, out = patch(client, sid, {"cpu_class": "latency"})
    assert status == 200 and out["cpu_class"] == "latency", out
    assert_class(node, sid, SCHED_OTHER)
    assert exec_policy(client, sid) == SCHED_OTHER
    status, got = client.get(sid)
    assert got["cpu_class"] == "latency"


def test_patch_cpu_class_and_network_together(client, node):
    sid = client.create_ok(cpu=1, memory_mb=128)
    status, out = patch(client, sid, {"cpu_class": "batch", "network": {"mode": "none"}})
    assert status == 200, out
    assert out["applied"] == ["cpu_class", "network"]
    assert_class(node, sid, SCHED_IDLE)
    status, out = patch(client, sid, {"network": {"mode": "none"}})
    assert status == 200 and out["applied"] == ["network"] and out["cpu_class"] == "batch", out
    # Setting the class it already has is fine (the kernel refuses shares on
    # an idle group; the node must not write them then).
    status, out = patch(client, sid, {"cpu_class": "batch"})
    assert status == 200, out
    assert_class(node, sid, SCHED_IDLE)


def test_patch_on_a_paused_sandbox_resumes_it_first(client, node):
    sid = client.create_ok(cpu=1, memory_mb=128)
    status, out = client.call("POST", f"/v1/sandboxes/{sid}/pause")
    assert status == 200 and out["state"] == "paused", out
    status, out = patch(client, sid, {"cpu_class": "batch"})
    assert status == 200, out
    assert out["state"] == "running" and out["cpu_class"] == "batch", out
    assert_class(node, sid, SCHED_IDLE)


def test_pause_and_resume_a_busy_batch_sandbox(client, node):
    # Its tasks must run to freeze; under the idle dsec-batch a busy host
    # would starve them past the freezer's deadline (the node moves the
    # group out for the freeze). They stay batch across pause and resume.
    sid = client.create_ok(cpu=1, memory_mb=128, cpu_class="batch")
    background(client, sid, "while :; do :; done")
    background(client, sid, "while :; do :; done")
    status, out = client.call("POST", f"/v1/sandboxes/{sid}/pause")
    assert status == 200 and out["state"] == "paused", out
    assert_class(node, sid, SCHED_IDLE)
    status, out = client.call("POST", f"/v1/sandboxes/{sid}/resume")
    assert status == 200 and out["state"] == "running", out
    assert_class(node, sid, SCHED_IDLE)
    assert exec_policy(client, sid) == SCHED_IDLE


@pytest.mark.parametrize("body,why", [
    ({"cpu_class": "fast"}, "cpu_class"),
    ({"cpu_class": 1}, "cpu_class"),
    ({}, "nothing to change"),
    ("", "empty"),
    ("{oops", "JSON"),
    ({"cpu_class": "batch", "memory_mb": 64}, "memory_mb"),
    ({"network": {"allow": ["no port here"]}}, "network"),
])
def test_patch_bad_input_is_400_and_changes_nothing(client, node, sandbox, body, why):
    status, out = patch(client, sandbox, body)
    assert_error(status, out, 400, "invalid_argument")
    assert why in out["error"]["message"], out
    status, got = client.get(sandbox)
    assert got["cpu_class"] == "latency"
    assert_class(node, sandbox, SCHED_OTHER)


def test_patch_unknown_sandbox_is_404(client, node):
    status, out = patch(client, f"{node.node_id}.nosuch", {"cpu_class": "batch"})
    assert_error(status, out, 404, "not_found")


def test_bad_class_at_create_is_400(client):
    status, out = client.create(cpu_class="idle")
    assert_error(status, out, 400, "invalid_argument")
    assert "cpu_class" in out["error"]["message"]


def test_class_survives_a_node_restart(node_factory):
    n = node_factory.start()
    c = n.client
    sid = c.create_ok(cpu=1, memory_mb=128)
    status, out = patch(c, sid, {"cpu_class": "batch"})
    assert status == 200, out
    n.proc.kill()  # only this test's node
    n.proc.wait(30)
    n.start()
    status, got = c.get(sid)
    assert status == 200 and got["cpu_class"] == "batch", got
    assert_class(n, sid, SCHED_IDLE)
    assert exec_policy(c, sid) == SCHED_IDLE
    status, _ = c.delete(sid)
    assert status == 200
    c.created.clear()
    # An adopted init is not the new node's child: its new parent reaps it.
    assert_clean(n, allow_layer_mounts=True)


# -- the batch place: made, moved, removed, pruned ---------------------------------

def test_batch_create_that_fails_leaves_no_group(client, node):
    # init refuses the protected path after the cgroups (batch one included) exist.
    status, out = client.create(cpu_class="batch", protect={"readonly": ["/no/such/dir"]})
    assert_error(status, out, 400, "invalid_argument")
    left = [d for d in cgroup_dirs(node.node_id) if d.startswith(BATCH_TOP + "/")]
    assert not left, left
    assert_clean(node, allow_layer_mounts=True)


def test_batch_groups_go_with_destroy_and_clean_stop(node_factory):
    n = node_factory.start()
    c = n.client
    born = c.create_ok(cpu=1, memory_mb=128, cpu_class="batch")
    demoted = c.create_ok(cpu=1, memory_mb=128)
    status, out = patch(c, demoted, {"cpu_class": "batch"})
    assert status == 200, out
    assert_place(n, born, True)
    assert_place(n, demoted, True)
    for sid in (born, demoted):
        status, _ = c.delete(sid)
        assert status == 200
        assert not os.path.exists(batch_dir(n, sid)) and not os.path.exists(latency_dir(n, sid))
    c.created.clear()
    assert_clean(n, allow_layer_mounts=True)
    c.create_ok(cpu=1, memory_mb=128, cpu_class="batch")  # left for the stop to destroy
    n.stop_ok()
    node_dir = os.path.join(BATCH_TOP, n.node_id)
    assert not os.path.exists(node_dir), f"{node_dir} left after a clean stop"


def test_stale_batch_groups_are_pruned_at_start(node_factory):
    n = node_factory.start()
    n.proc.kill()  # only this test's node
    n.proc.wait(30)
    # What a node killed with -9 leaves: its own batch groups whose tasks
    # died (a microVM's QEMU), and another node's, which no longer runs.
    own = os.path.join(BATCH_TOP, n.node_id, f"{n.node_id}.stale")
    dead = os.path.join(BATCH_TOP, f"{n.node_id}-gone")
    os.makedirs(own)
    os.makedirs(dead, exist_ok=True)
    try:
        n.start()
        assert not os.path.exists(own), f"{own} not pruned"
        assert not os.path.exists(dead), f"{dead} not pruned"
    finally:
        for d in (own, dead):
            if os.path.isdir(d):
                os.rmdir(d)


# -- the Python SDK and the CLI ------------------------------------------------------

def test_sdk_update_and_set_cpu_class(sdk, node):
    dsec = import_sdk()
    sb = sdk.create(layers=["base/busybox@1"], memory_mb=128, cpu_class="batch")
    assert sb.info().cpu_class == "batch"
    assert_class(node, sb.id, SCHED_IDLE)
    info = sb.set_cpu_class("latency")
    assert info.cpu_class == "latency"
    assert_class(node, sb.id, SCHED_OTHER)
    info = sb.update(cpu_class="batch", network=[])
    assert info.cpu_class == "batch"
    assert_class(node, sb.id, SCHED_IDLE)
    info = sb.update(network={"mode": "none"})
    assert info.cpu_class == "batch"
    with pytest.raises(dsec.InvalidArgument):
        sb.set_cpu_class("fast")
    with pytest.raises(dsec.InvalidArgument):
        sb.update()
    with pytest.raises(dsec.InvalidArgument):
        sb.update(network={"block": []})
    sb.destroy()
    with pytest.raises(dsec.NotFound):
        sb.set_cpu_class("batch")


def test_async_sdk_update(node):
    import asyncio
    dsec = import_sdk()

    async def main():
        async with dsec.AsyncClient(f"127.0.0.1:{node.listen_port}") as c:
            sb = await c.create(layers=["base/busybox@1"], memory_mb=128)
            try:
                info = await sb.set_cpu_class("batch")
                assert info.cpu_class == "batch"
                assert_class(node, sb.id, SCHED_IDLE)
                info = await sb.update(cpu_class="latency", network=[])
                assert info.cpu_class == "latency"
                assert_class(node, sb.id, SCHED_OTHER)
                with pytest.raises(dsec.InvalidArgument):
                    await sb.update(cpu_class="slow")
            finally:
                await sb.destroy()

    asyncio.run(main())


def test_cli_update(cli, client, node):
    sid = client.create_ok(cpu=1, memory_mb=128)
    r = cli("update", sid, "--cpu-class", "batch")
    assert r.returncode == 0, r.stderr
    assert b"cpu_class=batch" in r.stdout and b"applied=cpu_class" in r.stdout, r.stdout
    assert_class(node, sid, SCHED_IDLE)
    r = cli("update", sid, "--cpu-class", "latency", "--no-network", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["cpu_class"] == "latency" and out["applied"] == ["cpu_class", "network"]
    assert_class(node, sid, SCHED_OTHER)
    r = cli("update", sid, "--cpu-class", "fast")
    assert r.returncode == 1 and b"cpu_class" in r.stderr, r.stderr
    r = cli("update", sid)
    assert r.returncode == 2 and b"usage: dsec update" in r.stderr, r.stderr
    r = cli("create", "--cpu-class", "batch", "--json")
    assert r.returncode == 0, r.stderr
    created = json.loads(r.stdout)
    client.created.append(created["id"])
    assert created["cpu_class"] == "batch"
    assert_class(node, created["id"], SCHED_IDLE)


# -- microvm: QEMU's threads (it has no cgroup of its own) ------------------------

def qemu_thread_policies(pid):
    return {int(t): policy(int(t)) for t in os.listdir(f"/proc/{pid}/task")}


def test_microvm_batch_runs_qemu_sched_idle(dsec_bin, store):
    tm = pytest.importorskip("test_microvm")
    if tm.QEMU is None:
        pytest.skip("qemu-system-x86_64 is not installed on this machine")
    guest = tm.GUEST_DIR
    if not os.path.isdir(guest):
        pytest.skip(f"no guest kernel in {guest} (scripts/guest_kernel.sh fetches it)")
    from dsec_harness import _finish_node, start_node
    n = start_node(dsec_bin, store, DSEC_GUEST_DIR=guest, DSEC_VM_BOOT_TIMEOUT_S=tm.BOOT_TIMEOUT_S)
    try:
        c = n.client
        status, info = c.create(backend="microvm", memory_mb=256, cpu_class="batch")
        assert status == 201, info
        sid = info["id"]
        assert info["cpu_class"] == "batch"
        [pid] = tm.qemu_pids(tm.sandbox_dir(n, sid))
        pols = qemu_thread_policies(pid)
        assert pols and all(p == SCHED_IDLE for p in pols.values()), pols
        # QEMU's process in the batch place, in the cpu hierarchy only.
        assert cgroup_of(pid, "cpu") == f"/dsec-batch/{n.node_id}/{sid}", cgroup_of(pid, "cpu")
        status, out = patch(c, sid, {"cpu_class": "latency"})
        assert status == 200 and out["cpu_class"] == "latency", out
        pols = qemu_thread_policies(pid)
        assert all(p == SCHED_OTHER for p in pols.values() if p is not None), pols
        assert not cgroup_of(pid, "cpu").startswith("/dsec-batch/"), cgroup_of(pid, "cpu")
        assert not os.path.exists(batch_dir(n, sid))
        status, out = patch(c, sid, {"cpu_class": "batch"})
        assert status == 200, out
        # A resumed microVM is a new QEMU: it gets the class too.
        status, out = c.call("POST", f"/v1/sandboxes/{sid}/pause")
        assert status == 200, out
        status, out = c.call("POST", f"/v1/sandboxes/{sid}/resume")
        assert status == 200, out
        [pid] = tm.qemu_pids(tm.sandbox_dir(n, sid))
        pols = qemu_thread_policies(pid)
        assert all(p == SCHED_IDLE for p in pols.values() if p is not None), pols
        assert cgroup_of(pid, "cpu") == f"/dsec-batch/{n.node_id}/{sid}", cgroup_of(pid, "cpu")
        c.delete(sid)
        assert not os.path.exists(batch_dir(n, sid))
    finally:
        _finish_node(n)


# -- a cluster: PATCH through any peer ----------------------------------------------

def test_patch_through_a_peer_reaches_the_owner(dsec_bin, store):
    from dsec_harness import Node, _finish_node
    first = Node(dsec_bin, store).start()
    nodes = [first]
    try:
        nodes.append(Node(dsec_bin, store,
                          extra_args=["--join", f"127.0.0.1:{first.listen_port}"]).start())
        ids = {n.node_id for n in nodes}

        def alive(n):
            status, out = n.client.call("GET", "/v1/nodes")
            return status == 200 and {m["id"] for m in out["nodes"]
                                      if m["state"] == "alive"} == ids
        for n in nodes:
            wait_for(lambda: alive(n), 20, what=f"{n.node_id} to see both members")
        owner, peer = nodes
        sid = owner.client.create_ok(cpu=1, memory_mb=128, node=owner.node_id)
        status, out = patch(peer.client, sid, {"cpu_class": "batch"})
        assert status == 200 and out["cpu_class"] == "batch" and out["node"] == owner.node_id, out
        assert_class(owner, sid, SCHED_IDLE)
        status, out = patch(peer.client, f"{owner.node_id}.nosuch", {"cpu_class": "batch"})
        assert_error(status, out, 404, "not_found")
        owner.client.delete(sid)
        owner.client.created.clear()
    finally:
        for n in reversed(nodes):
            _finish_node(n)
