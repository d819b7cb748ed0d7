# Sandbox lifecycle through REST: create, get, list by label, delete,
# idempotency, batch, and the read-only endpoints (DESIGN.md §3, §4).

import time
import uuid

from dsec_harness import BUSYBOX, assert_error


def test_healthz(client, node):
    status, body = client.healthz()
    assert status == 200, body
    assert body["status"] == "ok", body
    assert body["node"] == node.node_id, body
    assert body["pid"] == node.proc.pid, body
    assert isinstance(body["sandboxes"], int), body


def test_create_answers_the_sandbox(client, node):
    t0 = time.time()
    status, sb = client.create([BUSYBOX], cpu=1, memory_mb=512, ttl_s=600,
                               labels={"suite": "e2e"})
    assert status == 201, sb
    assert sb["id"].startswith(node.node_id + "."), sb
    assert sb["node"] == node.node_id, sb
    assert sb["state"] == "running", sb
    assert sb["backend"] == "container", sb
    assert sb["layers"] == [BUSYBOX], sb
    assert sb["labels"] == {"suite": "e2e"}, sb
    assert abs(sb["created_at"] - t0) < 120, sb
    assert sb["expires_at"] is not None and abs(sb["expires_at"] - sb["created_at"] - 600) < 5, sb


def test_get_returns_the_same_sandbox(client, sandbox):
    status, sb = client.get(sandbox)
    assert status == 200, sb
    assert sb["id"] == sandbox and sb["state"] == "running", sb


def test_ids_are_unique(client):
    a = client.create_ok()
    b = client.create_ok()
    assert a != b


def test_list_by_label(client):
    tag = uuid.uuid4().hex[:8]
    a = client.create_ok(labels={"job": tag, "role": "a"})
    b = client.create_ok(labels={"job": tag, "role": "b"})
    other = client.create_ok(labels={"job": "other-" + tag})

    status, out = client.list({"job": tag})
    assert status == 200, out
    ids = {s["id"] for s in out["sandboxes"]}
    assert ids == {a, b}, out

    status, out = client.list({"job": tag, "role": "b"})
    assert status == 200, out
    assert [s["id"] for s in out["sandboxes"]] == [b], out

    status, out = client.list()
    assert status == 200, out
    assert {a, b, other} <= {s["id"] for s in out["sandboxes"]}, out

    status, out = client.list({"job": "no-such-" + tag})
    assert status == 200 and out["sandboxes"] == [], out


def test_delete_then_get_is_404_and_delete_is_idempotent(client):
    sid = client.create_ok()
    status, out = client.delete(sid)
    assert status == 200, out
    assert out == {"id": sid, "deleted": True}, out
    status, out = client.get(sid)
    assert_error(status, out, 404, "not_found")
    status, out = client.delete(sid)
    assert status == 200, out
    assert out == {"id": sid, "deleted": False}, out
    status, out = client.exec(sid, "true")
    assert_error(status, out, 404, "not_found")
    status, out = client.list()
    assert sid not in {s["id"] for s in out["sandboxes"]}, out


def test_delete_unknown_id_is_200_deleted_false(client, node):
    sid = f"{node.node_id}.doesnotexist{uuid.uuid4().hex[:6]}"
    status, out = client.delete(sid)
    assert status == 200, out
    assert out.get("deleted") is False, out


def test_request_id_idempotent(client):
    rid = "req-" + uuid.uuid4().hex
    spec = dict(cpu=1, memory_mb=256, labels={"k": "v"}, request_id=rid)
    status, first = client.create([BUSYBOX], **spec)
    assert status == 201, first
    status, again = client.create([BUSYBOX], **spec)
    assert status in (200, 201), again
    assert again["id"] == first["id"], (first, again)
    status, out = client.list({"k": "v"})
    assert [s["id"] for s in out["sandboxes"]].count(first["id"]) == 1, out

    other = dict(spec, memory_mb=384)
    status, out = client.create([BUSYBOX], **other)
    assert_error(status, out, 409, "conflict")


def test_request_id_after_delete_does_not_resurrect(client):
    # Ids are never reused (§3): after a delete, the same request id must not
    # resurrect the old id.
    rid = "req-" + uuid.uuid4().hex
    first = client.create_ok(request_id=rid)
    client.delete(first)
    status, out = client.create([BUSYBOX], request_id=rid)
    assert status in (201, 200, 404, 409), out
    if status in (200, 201):
        assert out["id"] != first or out["state"] != "running", out


def test_batch_create_five(client):
    tag = uuid.uuid4().hex[:8]
    status, out = client.batch({"layers": [BUSYBOX], "memory_mb": 256, "labels": {"b": tag}}, 5)
    assert status in (200, 201), out
    assert out["errors"] == [], out
    ids = [s["id"] for s in out["sandboxes"]]
    assert len(ids) == 5 and len(set(ids)) == 5, out
    assert all(s["state"] == "running" for s in out["sandboxes"]), out
    status, listed = client.list({"b": tag})
    assert {s["id"] for s in listed["sandboxes"]} == set(ids), listed
    for sid in ids:
        assert client.sh(sid, "echo hi")["stdout"] == "hi\n"


def test_batch_with_unknown_layer_reports_errors(client):
    status, out = client.batch({"layers": ["nope/none@1"]}, 2)
    assert status in (200, 207, 404), out
    if status == 200:
        assert out["sandboxes"] == [], out
        assert len(out["errors"]) == 2, out
        for e in out["errors"]:
            assert e["code"] == "not_found" or e.get("error", {}).get("code") == "not_found", out


def test_layers_catalog(client):
    status, out = client.call("GET", "/v1/layers")
    assert status == 200, out
    refs = {l["ref"]: l for l in out["layers"]}
    assert BUSYBOX in refs, out
    assert refs[BUSYBOX]["digest"].startswith("sha256:"), out
    assert refs[BUSYBOX]["kind"] == "base", out


def test_nodes(client, node):
    status, out = client.call("GET", "/v1/nodes")
    assert status == 200, out
    assert node.node_id in [n["id"] for n in out["nodes"]], out


def test_metrics_is_prometheus_text(client, sandbox):
    status, hdrs, body = client.raw("GET", "/metrics")
    assert status == 200, body
    assert hdrs.get("content-type", "").startswith("text/plain"), hdrs
    text = body.decode()
    samples = [l for l in text.splitlines() if l and not l.startswith("#")]
    assert samples, text
    for l in samples:
        name_labels, _, value = l.rpartition(" ")
        float(value)  # every sample ends in a number
        assert name_labels, l
    assert "# TYPE " in text and "# HELP " in text, text


def test_healthz_counts_sandboxes(client):
    _, before = client.healthz()
    sid = client.create_ok()
    _, during = client.healthz()
    assert during["sandboxes"] == before["sandboxes"] + 1, (before, during)
    client.delete(sid)
    _, after = client.healthz()
    assert after["sandboxes"] == before["sandboxes"], (before, after)
