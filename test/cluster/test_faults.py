# A 5-node cluster in network namespaces under real faults (issue 28): the
# regressions the first probe found, each as a test, then one seeded run with
# every fault kind once and the checker over its history.
#
# Bounds asserted are the invariants' own: a call for a sandbox across a cut
# fails within 2 s with a 503 naming its node; membership converges within
# 10 s of a heal.
import json
import os
import subprocess
import time

import pytest

import checker
import fault_run
import netns_cluster

UNREACHABLE_BOUND_S = 2.0
CONVERGE_BOUND_S = 10.0
SEED = int(os.environ.get("DSEC_FAULT_SEED", "28"))


def wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return time.monotonic()
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def retrying(fn, bound_s=20.0):
    """fn() -> (status, out), retried while 503: right after a heal a peer link
    may still wait out TCP's retransmission backoff, and 503 says retry."""
    deadline = time.monotonic() + bound_s
    while True:
        status, out = fn()
        if status != 503 or time.monotonic() > deadline:
            return status, out
        time.sleep(0.5)


def heal_and_converge(c):
    c.heal()
    t0 = time.monotonic()
    t1 = wait(c.converged, 30, "membership to converge after the heal")
    assert t1 - t0 <= CONVERGE_BOUND_S, f"membership converged {t1 - t0:.1f}s after the heal"


def test_a_call_across_a_cut_fails_fast_with_503_naming_the_node(cluster):
    c = cluster
    far, entry = c.nodes[-1], c.nodes[0]
    sid = entry.client.create_ok(node=far.node_id, memory_mb=64, labels={"t": "cut"})
    try:
        assert entry.client.sh(sid, "echo before")["stdout"] == "before\n"
        c.partition([[n for n in c.nodes if n is not far], [far]])
        # In flight at the cut, and again once gossip noticed: both bounded.
        for _ in range(2):
            t0 = time.monotonic()
            status, hdrs, body = entry.client.raw(
                "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "true"}, timeout=40)
            took = time.monotonic() - t0
            out = json.loads(body)
            assert status == 503, (status, out)
            msg = out["error"]["message"]
            assert far.node_id in msg and "unreachable" in msg, msg
            assert hdrs.get("retry-after"), hdrs
            assert took <= UNREACHABLE_BOUND_S, f"failed after {took:.2f}s: {msg}"
        # The cut-off node still serves its own sandbox and creates.
        assert far.client.sh(sid, "echo inside")["stdout"] == "inside\n"
        lone = far.client.create_ok(memory_mb=64, labels={"t": "cut"})
        assert lone.split(".")[0] == far.node_id
        far.client.delete(lone)
        # The majority keeps creating.
        other = entry.client.create_ok(memory_mb=64, labels={"t": "cut"})
        assert other.split(".")[0] != far.node_id
        entry.client.delete(other)
    finally:
        heal_and_converge(c)
    status, out = retrying(lambda: entry.client.exec(sid, "echo after"))
    assert status == 200 and out["stdout"] == "after\n", (status, out)
    entry.client.delete(sid)


def test_a_request_id_never_makes_two_sandboxes_across_a_partition(cluster):
    c = cluster
    majority, minority = c.nodes[:3], c.nodes[3:]
    tag = f"rid{os.getpid()}"
    rids = [f"{tag}-{i}" for i in range(6)]
    c.partition([majority, minority])
    answers = {}
    try:
        def cut_seen():
            for side, other in ((majority, minority), (minority, majority)):
                far = {n.node_id for n in other}
                if not all(s in ("suspect", "dead") for i, s in c.states(side[0]).items()
                           if i in far):
                    return False
            return True
        wait(cut_seen, 15, "each side to suspect the other")
        for rid in rids:
            body = {"layers": ["base/busybox@1"], "memory_mb": 64, "request_id": rid,
                    "labels": {"t": tag, "rid": rid}}
            got = []
            for side in (majority, minority):
                status, hdrs, raw = side[0].client.raw("POST", "/v1/sandboxes", body)
                got.append((status, hdrs, json.loads(raw)))
            answers[rid] = (body, got)
            made = [g for g in got if g[0] == 201]
            refused = [g for g in got if g[0] != 201]
            # The owner's side creates, the other side refuses retryably, naming it.
            assert len(made) == 1 and len(refused) == 1, [(g[0], g[2]) for g in got]
            status, hdrs, out = refused[0]
            assert status == 503 and hdrs.get("retry-after"), (status, out)
            owner = made[0][2]["id"].split(".")[0]
            assert owner in out["error"]["message"] and rid in out["error"]["message"], out
    finally:
        heal_and_converge(c)
    # After the heal, the retry through the side that was refused answers the
    # same sandbox; each key has exactly one.
    for rid, (body, got) in answers.items():
        made_id = next(g[2]["id"] for g in got if g[0] == 201)
        for n in c.nodes:
            status, out = retrying(lambda: n.client.call("POST", "/v1/sandboxes", body))
            assert status in (200, 201) and out["id"] == made_id, (n.node_id, status, out)
        status, out = c.nodes[0].client.list({"rid": rid})
        assert [s["id"] for s in out["sandboxes"]] == [made_id], out
        c.nodes[0].client.delete(made_id)


def test_a_killed_group_spares_sandboxes_and_the_restart_adopts_them(cluster):
    c = cluster
    victim = c.nodes[1]
    sid = c.nodes[0].client.create_ok(node=victim.node_id, memory_mb=64, labels={"t": "grp"})
    c.nodes[0].client.put_file(sid, "/tmp/k", b"kept\n")
    victim.kill9()  # the whole process group of the node
    victim.start()
    wait(c.converged, 30, "the restarted node to rejoin")
    status, out = retrying(lambda: c.nodes[0].client.exec(sid, "cat /tmp/k"))
    assert status == 200 and out["stdout"] == "kept\n", (status, out)
    c.nodes[0].client.delete(sid)


def test_seeded_run_with_every_fault_kind_passes_the_checker(cluster, tmp_path):
    out = os.environ.get("DSEC_FAULT_HISTORY", str(tmp_path / "history.json"))
    summary, violations = fault_run.run(cluster, SEED, history_path=out)
    print(json.dumps({k: v for k, v in summary.items() if k != "violations"}, indent=1))
    assert not violations, f"{len(violations)} violations (history: {out}):\n" + \
        "\n".join(violations[:40])


def test_the_harness_removes_everything_it_made(dsec_bin, store):
    c = netns_cluster.NetnsCluster(dsec_bin, store, n=2)
    names = [n.ns for n in c.nodes]
    try:
        c.setup()
    finally:
        errors = c.close()
    assert not errors, errors
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [ns for ns in names if ns in netns.split()], netns
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert c.bridge not in links and c.tag + "h" not in links, links
    assert not netns_cluster.mounts_under(c.root)
    assert not os.path.exists(c.root)


def test_delay_is_refused_by_name(cluster):
    with pytest.raises(netns_cluster.Refused, match="sch_netem"):
        cluster.delay(cluster.nodes[0], 100)
