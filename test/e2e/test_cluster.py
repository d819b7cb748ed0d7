# A real cluster on loopback: 3 `dsec node` processes joined with --join.
# Membership through gossip, creates spread through one peer, every call about
# a sandbox routed through a non-owner, kill -9 detected by all, `lost`
# answers, graceful leave, and bad input (a --join address that answers
# nothing, garbage datagrams, a pinned node that does not exist).
import os
import signal
import socket
import time

import pytest

from dsec_harness import BUSYBOX, Node, _finish_node, assert_error, wait_for

# Detection bound for tests: the target is <= 5 s on an idle machine; CI shares
# 2 cores with the nodes' own work, so the tests allow more.
DEATH_WAIT_S = 30
JOIN_WAIT_S = 20


def members(node):
    status, out = node.client.call("GET", "/v1/nodes")
    assert status == 200, out
    return {m["id"]: m for m in out["nodes"]}


def states(node):
    return {i: m["state"] for i, m in members(node).items()}


@pytest.fixture(scope="module")
def cluster(dsec_bin, store):
    """Three joined nodes; the second and third join through the first."""
    first = Node(dsec_bin, store).start()
    nodes = [first]
    seed = f"127.0.0.1:{first.listen_port}"
    for _ in range(2):
        nodes.append(Node(dsec_bin, store, extra_args=["--join", seed]).start())
    ids = {n.node_id for n in nodes}
    for n in nodes:
        wait_for(lambda: {i for i, s in states(n).items() if s == "alive"} == ids, JOIN_WAIT_S,
                 what=f"{n.node_id} to see all 3 members alive")
    yield nodes
    for n in nodes:
        if n.alive():
            _finish_node(n)
        else:
            n.remove_state()


def test_every_node_sees_every_member_with_load(cluster):
    for n in cluster:
        view = members(n)
        assert set(view) == {m.node_id for m in cluster}
        for m in cluster:
            entry = view[m.node_id]
            assert entry["address"] == f"127.0.0.1:{m.listen_port}"
            assert entry["state"] == "alive"
        # Load reports arrive within a couple of seconds: measured free memory.
        wait_for(lambda: all(v["load"]["free_memory_mb"] > 0 for v in members(n).values()), 10,
                 what="load reports from every member")


def test_creates_through_one_peer_spread_and_route_through_any(cluster):
    entry = cluster[0].client
    ids = []
    for _ in range(9):
        ids.append(entry.create_ok(labels={"spread": "yes"}))
    owners = {sid.split(".")[0] for sid in ids}
    assert len(owners) >= 2, f"9 creates through one node all landed on {owners}"
    by_id = {n.node_id: n for n in cluster}
    try:
        for sid in ids:
            owner = sid.split(".")[0]
            other = next(n for n in cluster if n.node_id != owner)
            c = other.client
            out = c.sh(sid, "echo routed-$((6*7))")
            assert out["stdout"] == "routed-42\n"
            status, _ = c.put_file(sid, "/tmp/f", b"\x00via " + other.node_id.encode())
            assert status in (200, 201)
            status, data = by_id[owner].client.get_file(sid, "/tmp/f")
            assert status == 200 and data == b"\x00via " + other.node_id.encode()
            status, info = c.get(sid)
            assert status == 200 and info["node"] == owner and info["state"] == "running"
        # list answers cluster-wide from any peer
        for n in cluster:
            status, out = n.client.list({"spread": "yes"})
            assert status == 200
            assert sorted(s["id"] for s in out["sandboxes"]) == sorted(ids)
        # streamed exec through a non-owner reaches the caller in order
        sid = ids[0]
        other = next(n for n in cluster if n.node_id != sid.split(".")[0])
        events = [e for _, e in other.client.exec_stream(sid, "echo a; echo b >&2; echo c")]
        assert [e["type"] for e in events][-1] == "exit"
        assert "".join(e["data"] for e in events if e["type"] == "stdout") == "a\nc\n"
    finally:
        for sid in ids:
            owner = sid.split(".")[0]
            other = next(n for n in cluster if n.node_id != owner)
            status, out = other.client.delete(sid)
            assert status == 200 and out["deleted"] is True, out
    for sid in ids:
        status, out = cluster[0].client.get(sid)
        assert_error(status, out, 404, "not_found")


def test_pinned_creates(cluster):
    target = cluster[2]
    sid = cluster[0].client.create_ok(node=target.node_id)
    assert sid.startswith(target.node_id + ".")
    cluster[0].client.delete(sid)
    status, out = cluster[0].client.create(node="no-such-node")
    assert_error(status, out, 404, "not_found")
    assert "no-such-node" in out["error"]["message"]


def test_python_sdk_sees_the_cluster(cluster, dsec_sdk):
    c = dsec_sdk.Client(f"127.0.0.1:{cluster[1].listen_port}")
    try:
        assert {n.id for n in c.nodes()} == {n.node_id for n in cluster}
        sb = c.create(layers=[BUSYBOX], node=cluster[0].node_id)
        try:
            assert sb.node == cluster[0].node_id
            assert sb.exec("echo hi").stdout == "hi\n"
        finally:
            sb.destroy()
    finally:
        c.close()


def test_garbage_datagrams_do_not_hurt(cluster):
    n = cluster[0]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for payload in (b"", b"P", b"S\xff\xff\xff", os.urandom(1400), b"P" + os.urandom(600)):
            s.sendto(payload, ("127.0.0.1", n.listen_port))
    time.sleep(0.5)
    assert n.alive()
    assert set(states(n).values()) == {"alive"}


def test_garbage_on_the_native_port_does_not_hurt(cluster):
    n = cluster[1]
    for payload in (b"GET / HTTP/1.1\r\n\r\n", os.urandom(4096), b"\x00" * 64):
        with socket.create_connection(("127.0.0.1", n.listen_port), timeout=5) as s:
            try:
                s.sendall(payload)
                s.settimeout(2)
                s.recv(100)
            except OSError:
                pass
    assert n.alive()
    sid = cluster[0].client.create_ok(node=n.node_id)
    assert cluster[0].client.sh(sid, "echo fine")["stdout"] == "fine\n"
    cluster[0].client.delete(sid)


def test_join_address_that_answers_nothing(node_factory):
    # A port nobody listens on: the node starts alone and keeps serving.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    n = node_factory.start("--join", f"127.0.0.1:{dead_port}")
    assert list(states(n)) == [n.node_id]
    sid = n.client.create_ok()
    assert n.client.sh(sid, "echo ok")["stdout"] == "ok\n"


def test_bad_join_flag_is_a_usage_error(dsec_bin, store, tmp_path):
    import subprocess
    p = subprocess.run([dsec_bin, "node", "--state-dir", str(tmp_path), "--store", store,
                        "--join", "nohostport"], capture_output=True, timeout=30)
    assert p.returncode == 2
    assert b"--join" in p.stderr


def test_kill_9_is_detected_and_its_sandboxes_are_lost(dsec_bin, store):
    a = Node(dsec_bin, store).start()
    seed = f"127.0.0.1:{a.listen_port}"
    b = Node(dsec_bin, store, extra_args=["--join", seed]).start()
    c = Node(dsec_bin, store, extra_args=["--join", seed]).start()
    nodes = [a, b, c]
    try:
        ids = {n.node_id for n in nodes}
        for n in nodes:
            wait_for(lambda: {i for i, s in states(n).items() if s == "alive"} == ids,
                     JOIN_WAIT_S, what="join")
        sid = a.client.create_ok(node=c.node_id)
        c.proc.send_signal(signal.SIGKILL)
        c.proc.wait()
        t0 = time.monotonic()
        for n in (a, b):
            wait_for(lambda: states(n).get(c.node_id) == "dead", DEATH_WAIT_S,
                     what=f"{n.node_id} to declare {c.node_id} dead")
        print(f"kill -9 -> dead everywhere in {time.monotonic() - t0:.1f} s")
        # Its sandbox answers `lost`, never a hang.
        status, info = a.client.get(sid)
        assert status == 200 and info["state"] == "lost", info
        status, out = b.client.exec(sid, "true", timeout=20)
        assert_error(status, out, 503, "unavailable")
        assert c.node_id in out["error"]["message"]
        # Delete is not answered "deleted: false" while the node may be alive
        # behind a partition (issue 28): a retryable 503 naming it.
        status, out = a.client.delete(sid)
        assert_error(status, out, 503, "unavailable")
        assert c.node_id in out["error"]["message"]
        # The survivors still serve.
        sid2 = b.client.create_ok()
        assert sid2.split(".")[0] in (a.node_id, b.node_id)
        assert b.client.sh(sid2, "echo alive")["stdout"] == "alive\n"
        b.client.delete(sid2)
        # Restarted on the same state dir: it rejoins as alive.
        c.start()
        for n in (a, b):
            wait_for(lambda: states(n).get(c.node_id) == "alive", JOIN_WAIT_S,
                     what=f"{n.node_id} to see {c.node_id} back")
    finally:
        for n in nodes:
            if n.alive():
                _finish_node(n)
            else:
                n.remove_state()


def test_sigterm_leaves_gracefully(dsec_bin, store):
    a = Node(dsec_bin, store).start()
    b = Node(dsec_bin, store, extra_args=["--join", f"127.0.0.1:{a.listen_port}"]).start()
    try:
        wait_for(lambda: states(a).get(b.node_id) == "alive", JOIN_WAIT_S, what="join")
        b.stop_ok()
        wait_for(lambda: states(a).get(b.node_id) == "left", 10,
                 what=f"{a.node_id} to see {b.node_id} left")
        # Left, not suspected: no suspicion storm before it.
        assert states(a).get(b.node_id) == "left"
    finally:
        for n in (a, b):
            if n.alive():
                _finish_node(n)
            else:
                n.remove_state()


def test_a_node_stalled_for_2s_is_not_declared_dead(cluster):
    """SIGSTOP for 2 s: peers may suspect it, but it refutes; never dead."""
    stalled = cluster[2]
    watchers = cluster[:2]
    seen = set()
    stalled.proc.send_signal(signal.SIGSTOP)
    try:
        t_end = time.monotonic() + 2.0
        while time.monotonic() < t_end:
            for w in watchers:
                seen.add(states(w).get(stalled.node_id))
            time.sleep(0.1)
    finally:
        stalled.proc.send_signal(signal.SIGCONT)
    # Watch through the suspicion window after it wakes up.
    t_end = time.monotonic() + 8.0
    while time.monotonic() < t_end:
        for w in watchers:
            seen.add(states(w).get(stalled.node_id))
        time.sleep(0.1)
    assert "dead" not in seen, seen
    for w in watchers:
        assert states(w).get(stalled.node_id) == "alive"
    # and it still serves
    sid = cluster[0].client.create_ok(node=stalled.node_id)
    assert cluster[0].client.sh(sid, "echo up")["stdout"] == "up\n"
    cluster[0].client.delete(sid)
