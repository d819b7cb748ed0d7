# E2B's control plane beyond create and kill (issue 27): snapshots, fork,
# updateNetwork, metrics over time, secure sandboxes with signed file URLs.
# The SDK parts run test/e2e/e2b/control.mjs with the unmodified `e2b`
# package (as test_e2b.py installs it) against a node with an API key; the
# rest is plain HTTP: what each route refuses, by name.

import json

import pytest

from test_e2b import API_KEY, e2b_module, e2b_node, key_file, run_js  # noqa: F401 (fixtures)


def control(module, node, part, **env):
    return run_js(module, node, "control", PART=part, **env)


def created(c, body=None):
    status, sb = c.call("POST", "/v2/sandboxes", dict({"templateID": "base"}, **(body or {})))
    assert status == 201, sb
    return sb["sandboxID"]


# -- through the SDK --------------------------------------------------------------------


def test_snapshots_create_list_branch_and_delete(e2b_module, e2b_node):
    control(e2b_module, e2b_node, "snapshots")


def test_fork_gives_independent_copies(e2b_module, e2b_node):
    control(e2b_module, e2b_node, "fork")


def test_network_allow_out_and_update_network(e2b_module, e2b_node):
    control(e2b_module, e2b_node, "network")


def test_metrics_are_a_history_with_disk(e2b_module, e2b_node):
    out = control(e2b_module, e2b_node, "metrics")
    assert out["samples"] >= 3


def test_secure_sandbox_and_signed_urls(e2b_module, e2b_node):
    control(e2b_module, e2b_node, "secure")


# -- plain HTTP -------------------------------------------------------------------------


@pytest.mark.parametrize("body, named", [
    ({"count": 101}, "count"),
    ({"count": 0}, "count"),
    ({"count": 2, "memoryMB": 1}, "memoryMB"),
])
def test_fork_refuses_what_it_cannot_do_by_name(e2b_node, body, named):
    c = e2b_node.client
    sid = created(c)
    try:
        status, out = c.call("POST", f"/sandboxes/{sid}/fork", body)
        assert status == 400 and named in out["message"], out
    finally:
        c.delete(sid)


def test_snapshot_names_and_queries_are_checked(e2b_node):
    c = e2b_node.client
    sid = created(c)
    try:
        for body, named in [({"name": "team/x"}, "team/x"), ({"name": "x:v2"}, "x:v2"),
                            ({"name": "Upper"}, "Upper"), ({"tag": "v1"}, "tag")]:
            status, out = c.call("POST", f"/sandboxes/{sid}/snapshots", body)
            assert status == 400 and named in out["message"], out
        status, _, body = c.raw("GET", "/snapshots?teamID=x")
        assert status == 400 and "teamID" in json.loads(body)["message"], body
        status, _, body = c.raw("DELETE", "/templates/no-such-snapshot")
        assert status == 404, body
        gone = sid.split(".")[0] + ".nosuchsandbox"
        status, out = c.call("POST", f"/sandboxes/{gone}/snapshots", {})
        assert status == 404, out
    finally:
        c.delete(sid)


def test_update_network_refuses_by_name(e2b_node):
    c = e2b_node.client
    sid = created(c)
    try:
        for body, named in [({"egressProxy": {"address": "p:1"}}, "egressProxy"),
                            ({"rules": {}}, "rules"), ({"denyOut": ["example.com"]}, "denyOut"),
                            ({"allowOut": ["not a host!"]}, "allowOut")]:
            status, out = c.call("PUT", f"/sandboxes/{sid}/network", body)
            assert status == 400 and named in out["message"] and sid in out["message"], out
    finally:
        c.delete(sid)


def test_metrics_of_many_sandboxes(e2b_node):
    c = e2b_node.client
    a, b = created(c), created(c)
    try:
        gone = a.split(".")[0] + ".gone"
        status, _, body = c.raw("GET", f"/sandboxes/metrics?sandbox_ids={a},{b},{gone}")
        assert status == 200, body
        got = json.loads(body)["sandboxes"]
        assert set(got) == {a, b}, got
        assert all(m["memTotal"] > 0 and "diskUsed" in m for m in got.values()), got
        status, _, body = c.raw("GET", "/sandboxes/metrics")
        assert status == 400 and "sandbox_ids" in json.loads(body)["message"], body
        status, _, body = c.raw("GET", f"/sandboxes/{a}/metrics?step=5")
        assert status == 400 and "step" in json.loads(body)["message"], body
        status, _, body = c.raw("GET", f"/sandboxes/{a}/metrics?start=yesterday")
        assert status == 400 and "start" in json.loads(body)["message"], body
    finally:
        c.delete(a)
        c.delete(b)


def test_a_signature_for_no_sandbox_is_refused(e2b_node):
    status, _, body = e2b_node.client.raw("GET", "/files?path=/etc/hostname&signature=v1_bogus")
    assert status == 401 and json.loads(body)["message"] == "invalid signature", body


def test_fork_makes_up_to_100(e2b_node):
    """A fork of 100 answers 100 results, each a sandbox of its own (on this
    node they all fit: busybox, the node's default limits)."""
    c = e2b_node.client
    status, sb = c.call("POST", "/v2/sandboxes", {"templateID": "busybox"})
    assert status == 201, sb
    sid, made = sb["sandboxID"], []
    try:
        c.sh(sid, "echo forked > /state")
        status, out = c.call("POST", f"/sandboxes/{sid}/fork", {"count": 100, "timeout": 120})
        assert status == 201 and len(out) == 100, (status, out[:3])
        made = [r["sandbox"]["sandboxID"] for r in out if "sandbox" in r]
        assert len(made) == 100, [r for r in out if "error" in r][:3]
        assert len(set(made)) == 100 and sid not in made
        assert c.sh(made[-1], "cat /state")["stdout"] == "forked\n"
    finally:
        for i in made:
            c.delete(i)
        c.delete(sid)
