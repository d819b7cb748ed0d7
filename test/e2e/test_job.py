# Job-level pause and resume (POST /v1/sandboxes:pause|:resume, c.pause(labels=),
# dsec pause --label): a preempted trainer pauses every sandbox of its job,
# cluster-wide, in one call, and resumes them with their state intact. On 3
# real joined nodes: a job of 64 sandboxes spread over them, idempotence,
# per-item errors (a sandbox whose init was killed), bad input (400s), the
# SDK (sync and async) and the CLI. Each test uses its own job label.
import asyncio
import os
import signal
import subprocess
import uuid

import pytest

from dsec_harness import BUSYBOX, Node, _finish_node, assert_error, import_sdk, wait_for
from test_restart import gone, init_pid_of

JOIN_WAIT_S = 20


def alive_ids(node):
    status, out = node.client.call("GET", "/v1/nodes")
    assert status == 200, out
    return {m["id"] for m in out["nodes"] if m["state"] == "alive"}


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
        wait_for(lambda: alive_ids(n) == ids, JOIN_WAIT_S,
                 what=f"{n.node_id} to see all 3 members alive")
    yield nodes
    for n in nodes:
        if n.alive():
            _finish_node(n)
        else:
            n.remove_state()


def new_job():
    return f"job-{uuid.uuid4().hex[:8]}"


def make_job(cluster, job, n):
    """n sandboxes labelled job=<job>, created through the first node (placement
    spreads them); returns their ids."""
    c = cluster[0].client
    status, out = c.batch({"layers": [BUSYBOX], "memory_mb": 64, "labels": {"job": job}}, n)
    assert status == 201, out
    return [s["id"] for s in out["sandboxes"]]


def job_call(node, action, body):
    return node.client.call("POST", f"/v1/sandboxes:{action}", body)


def states(node, job):
    status, out = node.client.list({"job": job})
    assert status == 200, out
    return {s["id"]: s["state"] for s in out["sandboxes"]}


def cleanup(cluster, ids):
    for sid in ids:
        cluster[0].client.delete(sid)


def test_job_of_64_on_3_nodes_pauses_and_resumes_with_state_intact(cluster):
    job = new_job()
    ids = make_job(cluster, job, 64)
    bystander = cluster[0].client.create_ok(memory_mb=64, labels={"job": job + "-other"})
    try:
        owners = {sid.split(".")[0] for sid in ids}
        assert len(owners) >= 2, f"64 creates through one node all landed on {owners}"
        # State each sandbox must keep: a file and a running process.
        for sid in ids:
            c = next(n for n in cluster if n.node_id == sid.split(".")[0]).client
            c.sh(sid, f"echo {sid} > /tmp/state; sleep 100000 & echo $! > /tmp/pid")

        status, out = job_call(cluster[1], "pause", {"labels": {"job": job}})
        assert status == 200, out
        assert out["action"] == "pause" and out["labels"] == {"job": job}
        assert out["errors"] == [], out["errors"]
        assert sorted(out["done"]) == sorted(ids) and out["count"] == 64
        # Every one is paused, as any node sees it; the other job runs on.
        for n in cluster:
            assert set(states(n, job).values()) == {"paused"}, states(n, job)
        assert cluster[2].client.get(bystander)[1]["state"] == "running"

        # Idempotent: pausing a paused job again counts every one as done.
        status, again = job_call(cluster[2], "pause", {"labels": {"job": job}})
        assert status == 200 and again["errors"] == [] and sorted(again["done"]) == sorted(ids)

        status, out = job_call(cluster[2], "resume", {"labels": {"job": job}})
        assert status == 200, out
        assert out["errors"] == [] and sorted(out["done"]) == sorted(ids), out
        assert set(states(cluster[0], job).values()) == {"running"}
        status, again = job_call(cluster[0], "resume", {"labels": {"job": job}})
        assert status == 200 and again["errors"] == [] and sorted(again["done"]) == sorted(ids)

        # Files and processes are as they were.
        for sid in ids:
            r = cluster[0].client.sh(sid, "cat /tmp/state; kill -0 $(cat /tmp/pid) && echo alive")
            assert r["stdout"] == f"{sid}\nalive\n", (sid, r)
    finally:
        cleanup(cluster, ids + [bystander])


def test_a_job_with_no_sandboxes_is_an_empty_success(cluster):
    status, out = job_call(cluster[0], "pause", {"labels": {"job": new_job()}})
    assert status == 200, out
    assert out["done"] == [] and out["errors"] == [] and out["count"] == 0


def test_per_item_errors_name_the_sandbox_and_the_rest_is_done(cluster):
    job = new_job()
    ids = make_job(cluster, job, 6)
    try:
        victim = ids[0]
        owner = next(n for n in cluster if n.node_id == victim.split(".")[0])
        pid = init_pid_of(owner.node_id, victim)
        assert pid and pid > 1
        os.kill(pid, signal.SIGKILL)  # the sandbox dies under the node
        wait_for(lambda: gone(pid), 10, what=f"init {pid} of {victim} to die")
        wait_for(lambda: owner.client.get(victim)[1]["state"] == "failed", 10,
                 what=f"{victim} to be failed")

        status, out = job_call(cluster[0], "pause", {"labels": {"job": job}})
        assert status == 200, out
        assert sorted(out["done"]) == sorted(ids[1:]), out
        assert len(out["errors"]) == 1, out["errors"]
        e = out["errors"][0]
        assert e["id"] == victim and e["node"] == owner.node_id, e
        assert e["code"] == "unavailable" and victim in e["message"] and "failed" in e["message"]
        assert e["infra"] is True, e  # killed by the host, not the agent's doing
        status, out = job_call(cluster[0], "resume", {"labels": {"job": job}})
        assert status == 200 and sorted(out["done"]) == sorted(ids[1:]), out
        assert [x["id"] for x in out["errors"]] == [victim], out
    finally:
        cleanup(cluster, ids)


@pytest.mark.parametrize("body, what", [
    ({"labels": {}}, "at least one label"),
    ({}, "at least one label"),
    ({"labels": None}, "at least one label"),
    ({"labels": ["job"]}, "labels must be an object"),
    ({"labels": {"job": 7}}, "must be a string"),
    ({"labels": {"job": "x"}, "all": True}, 'unknown field "all"'),
    ("not json", "not valid JSON"),
    ([], "must be a JSON object"),
])
def test_bad_input_is_400_and_pauses_nothing(cluster, body, what):
    job = new_job()
    ids = make_job(cluster, job, 2)
    try:
        for action in ("pause", "resume"):
            status, out = job_call(cluster[0], action, body)
            assert_error(status, out, 400, "invalid_argument")
            assert what in out["error"]["message"] and action + " job" in out["error"]["message"]
        assert set(states(cluster[0], job).values()) == {"running"}
    finally:
        cleanup(cluster, ids)


def test_wrong_method_is_405(cluster):
    status, out = cluster[0].client.call("GET", "/v1/sandboxes:pause")
    assert status == 405, out


def test_sdk_sync_and_async(cluster):
    dsec = import_sdk()
    job = new_job()
    ids = make_job(cluster, job, 5)
    c = dsec.Client(f"127.0.0.1:{cluster[2].listen_port}")
    try:
        done = c.pause(labels={"job": job})
        assert isinstance(done, list) and sorted(done) == sorted(ids) and done.errors == []
        assert done.ok
        assert {i.state for i in c.list(labels={"job": job})} == {"paused"}
        assert sorted(c.pause(labels={"job": job})) == sorted(ids)  # idempotent
        with pytest.raises(dsec.InvalidArgument) as exc:
            c.pause(labels={})
        assert exc.value.infra is False
        with pytest.raises(dsec.InvalidArgument):
            c.resume(labels=None)
        # The node refuses an empty selector too (not only the SDK).
        with pytest.raises(dsec.InvalidArgument) as exc:
            c._call("job", ({}, True))
        assert "at least one label" in exc.value.message

        async def run():
            ac = dsec.AsyncClient(f"127.0.0.1:{cluster[1].listen_port}")
            try:
                r = await ac.resume(labels={"job": job})
                assert sorted(r) == sorted(ids) and r.errors == []
                infos = await ac.list(labels={"job": job})
                assert {i.state for i in infos} == {"running"}
                p = await ac.pause(labels={"job": job})
                assert sorted(p.done) == sorted(ids)
                with pytest.raises(dsec.InvalidArgument):
                    await ac.pause(labels={})
            finally:
                ac.close()
        asyncio.run(run())
        assert {i.state for i in c.list(labels={"job": job})} == {"paused"}
        r = c.resume(labels={"job": job})
        assert sorted(r) == sorted(ids)
        # Per-item errors carry the dsec error, with its verdict.
        victim = ids[0]
        owner = victim.split(".")[0]
        pid = init_pid_of(owner, victim)
        assert pid and pid > 1
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: c.get(victim).info().state == "failed", 10, what=f"{victim} failed")
        r = c.pause(labels={"job": job})
        assert sorted(r) == sorted(ids[1:]) and not r.ok
        assert [(e.id, e.node) for e in r.errors] == [(victim, owner)]
        e = r.errors[0]
        assert isinstance(e.error, dsec.Unavailable) and e.infra is True and e.code == "unavailable"
        assert victim in e.message
    finally:
        c.close()
        cleanup(cluster, ids)


def test_cli_pause_and_resume_by_label(cluster, dsec_bin):
    job = new_job()
    ids = make_job(cluster, job, 3)

    def dsec(*args):
        return subprocess.run([dsec_bin, args[0], "--rest", cluster[1].rest, *args[1:]],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    try:
        p = dsec("pause", "--label", f"job={job}")
        assert p.returncode == 0, p.stderr
        assert sorted(p.stdout.decode().split()) == sorted(ids)
        assert set(states(cluster[0], job).values()) == {"paused"}
        p = dsec("resume", "--label", f"job={job}", "--label", "nope=1")  # labels AND
        assert p.returncode == 0 and p.stdout == b"", (p.stdout, p.stderr)
        assert set(states(cluster[0], job).values()) == {"paused"}
        p = dsec("resume", "--label", f"job={job}")
        assert p.returncode == 0 and sorted(p.stdout.decode().split()) == sorted(ids), p.stderr
        assert set(states(cluster[0], job).values()) == {"running"}
        # One sandbox by id still works.
        p = dsec("pause", ids[0])
        assert p.returncode == 0 and p.stdout.decode().split() == [ids[0]], p.stderr
        # Usage errors exit 2 with a message.
        for bad in (("pause",), ("pause", "--label", "novalue"), ("resume", ids[0], "--label", "a=b")):
            p = dsec(*bad)
            assert p.returncode == 2 and p.stderr.startswith(b"dsec " + bad[0].encode()), (bad, p)
    finally:
        cleanup(cluster, ids)
