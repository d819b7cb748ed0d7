# Nothing leaks: after deletes, failed creates and SIGTERM, no mounts (but
# the shared layer mounts while the node runs), cgroups, sandbox dirs or
# processes remain. Each test uses a private node so the checks are exact.

import os
import threading

from dsec_harness import (BUSYBOX, CGROUP_ROOTS, assert_clean, cgroup_dirs, mounts_under, procs_in_node_cgroups,
                      wait_for)


def busy(client, n):
    """n running sandboxes, each with a live process inside."""
    ids = []
    for _ in range(n):
        sid = client.create_ok(memory_mb=128)
        client.sh(sid, "mkdir -p /data && echo x > /data/f")
        ids.append(sid)
    return ids


def test_delete_all_leaves_only_layer_mounts(node_factory):
    node = node_factory.start()
    c = node.client
    ids = busy(c, 3)
    for sid in ids:
        assert cgroup_dirs(node.node_id, sid), f"no cgroup dir for running {sid}"
        assert os.path.isdir(os.path.join(node.state_dir, "sandboxes", sid)), sid
    # Execs left running when the sandbox is deleted must not pin anything.
    t = threading.Thread(target=c.exec, args=(ids[0], "sleep 60"), kwargs={"timeout_s": 120})
    t.start()
    wait_for(lambda: "sleep 60" in c.sh(ids[0], "ps -o args")["stdout"], 20, what="sleep running")
    for sid in ids:
        status, out = c.delete(sid)
        assert status == 200 and out["deleted"] is True, out
    t.join(90)
    assert not t.is_alive(), "exec in a deleted sandbox never returned"
    c.created.clear()
    assert_clean(node, allow_layer_mounts=True)
    rc = node.stop()
    assert rc == 0, node.log_tail()
    assert mounts_under(node.state_dir) == [], "mounts left after SIGTERM"
    assert_clean(node, allow_layer_mounts=False, timeout=2)


def test_failed_create_leaves_nothing(node_factory):
    node = node_factory.start()
    c = node.client
    status, out = c.create([BUSYBOX, "nope/missing@1"])
    assert 400 <= status < 500, out
    assert out["error"]["code"] == "not_found", out
    status, h = c.healthz()
    assert h["sandboxes"] == 0, h
    assert_clean(node, allow_layer_mounts=True, timeout=2)
    status, out = c.list()
    assert out["sandboxes"] == [], out
    # And the node still creates fine afterwards.
    sid = c.create_ok()
    assert c.sh(sid, "echo ok")["stdout"] == "ok\n"


def test_sigterm_with_running_sandboxes(node_factory):
    node = node_factory.start()
    c = node.client
    ids = busy(c, 3)
    def long_exec():
        try:
            c.exec(ids[1], "sleep 120", timeout_s=200)
        except OSError:  # the node closes the connection when it stops
            pass

    t = threading.Thread(target=long_exec)
    t.daemon = True
    t.start()
    wait_for(lambda: "sleep 120" in c.sh(ids[1], "ps -o args")["stdout"], 20, what="sleep running")
    assert procs_in_node_cgroups(node.node_id), "no sandbox process found in the node's cgroups"
    rc = node.stop()
    assert rc == 0, f"exit {rc}\n{node.log_tail()}"
    c.created.clear()
    assert_clean(node, allow_layer_mounts=False, timeout=2)


def test_exit_code_zero_on_sigterm_idle(node_factory):
    node = node_factory.start()
    assert node.stop() == 0, node.log_tail()
    assert_clean(node, allow_layer_mounts=False, timeout=2)


def test_sigint_also_stops_cleanly(node_factory):
    import signal
    node = node_factory.start()
    node.client.create_ok()
    node.client.created.clear()
    node.proc.send_signal(signal.SIGINT)
    rc = node.proc.wait(timeout=60)
    assert rc == 0, node.log_tail()
    assert_clean(node, allow_layer_mounts=False, timeout=2)


def test_deleting_during_create_burst(node_factory):
    node = node_factory.start()
    c = node.client
    ids = []
    lock = threading.Lock()

    def make():
        status, out = c.create(memory_mb=64)
        if status == 201:
            with lock:
                ids.append(out["id"])

    threads = [threading.Thread(target=make) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert len(ids) == 6, ids
    dels = [threading.Thread(target=c.delete, args=(sid,)) for sid in ids]
    for t in dels:
        t.start()
    for t in dels:
        t.join(240)
    c.created.clear()
    assert_clean(node, allow_layer_mounts=True)


def test_node_cgroup_dirs_removed_after_stop(node_factory):
    # Each node run must not leave dsec/<node-id> behind in every controller:
    # node ids differ per run, so leftovers accumulate on a long-lived host.
    node = node_factory.start()
    node.client.create_ok()
    node.client.created.clear()
    assert node.stop() == 0, node.log_tail()
    left = [os.path.join(root, "dsec", node.node_id) for root in CGROUP_ROOTS.values()
            if os.path.isdir(os.path.join(root, "dsec", node.node_id))]
    assert left == [], f"node cgroup dirs left after SIGTERM: {left}"
