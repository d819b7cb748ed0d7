# E2B fidelity (issue 27): where E2B's API and envd answer in a way its SDK
# relies on, dsec answers the same. The SDK parts run test/e2e/e2b/fidelity.mjs
# with the unmodified `e2b` package (as test_e2b.py installs it); the rest is
# plain HTTP against a node with an API key: the lifecycle and network options
# of a create as the native API shows them, options dsec refuses by name,
# routes it does not implement, and the list's order and filters.

import json
import time
import urllib.parse

import pytest

from test_e2b import API_KEY, e2b_module, e2b_node, key_file, run_js  # noqa: F401 (fixtures)


def fidelity(module, node, part, **env):
    return run_js(module, node, "fidelity", PART=part, **env)


def create(c, body):
    status, sb = c.call("POST", "/v2/sandboxes", dict({"templateID": "busybox"}, **body))
    return status, sb


def native(c, sid):
    status, info = c.get(sid)
    assert status == 200, info
    return info


# -- through the SDK --------------------------------------------------------------------


def test_lifecycle_options_and_a_paused_sandbox(e2b_module, e2b_node):
    out = fidelity(e2b_module, e2b_node, "lifecycle")
    c = e2b_node.client
    plain, pausing, resuming = out["ids"]
    assert native(c, pausing)["on_timeout"] == "pause"
    assert native(c, pausing)["auto_resume"] is False
    assert native(c, resuming)["auto_resume"] is True
    assert native(c, plain)["on_timeout"] == "destroy"
    for sid in out["ids"]:
        c.delete(sid)


def test_calls_on_a_paused_sandbox_fail_until_connect(e2b_module, e2b_node):
    fidelity(e2b_module, e2b_node, "paused_calls")


def test_a_pause_without_memory_keeps_files_and_boots_again(e2b_module, e2b_node):
    fidelity(e2b_module, e2b_node, "files_pause")


def test_a_foreign_id_is_not_found(e2b_module, e2b_node):
    fidelity(e2b_module, e2b_node, "foreign")


def test_connect_only_extends(e2b_module, e2b_node):
    fidelity(e2b_module, e2b_node, "connect")


def test_files_as_envd_answers(e2b_module, e2b_node):
    fidelity(e2b_module, e2b_node, "files")


def test_a_failed_command_says_its_exit_status(e2b_module, e2b_node):
    out = fidelity(e2b_module, e2b_node, "commands")
    assert "exit status 3" in out["message"]


def test_a_command_of_a_killed_sandbox(e2b_module, e2b_node):
    out = fidelity(e2b_module, e2b_node, "killed")
    assert "killed" in out["message"], out


# -- plain HTTP -------------------------------------------------------------------------


@pytest.mark.parametrize("body, named", [
    ({"mcp": {"github": {}}}, "mcp"),
    ({"volumeMounts": [{"name": "v", "path": "/data"}]}, "volumeMounts"),
    ({"iam": {"tokens": {}}}, "iam"),
    ({"surprise": 1}, "surprise"),
    ({"secure": False}, "secure false"),
    ({"autoPause": True, "autoPauseMemory": False, "autoResume": {"enabled": True}},
     "autoResume true is not valid with autoPauseMemory false"),
    ({"network": {"rules": {}}}, "network.rules"),
    ({"network": {"egressProxy": {"address": "p:1"}}}, "network.egressProxy"),
    ({"network": {"denyOut": ["example.com"]}}, "network.denyOut"),
    ({"network": {"allowOut": ["not a host!"]}}, "network.allowOut"),
])
def test_options_dsec_does_not_implement_are_refused_by_name(e2b_node, body, named):
    status, out = create(e2b_node.client, body)
    assert status == 400, out
    assert out["code"] == 400 and named in out["message"], out


PROBE = """
import json, os, socket
def connect(host):
    s = socket.socket()
    s.settimeout(1)
    return s.connect_ex((host, 53))
print(json.dumps([sorted(os.listdir("/sys/class/net")), connect("8.8.8.8"), connect("1.1.1.1")]))
"""


def test_network_options_become_the_allow_list(e2b_node):
    """What a sandbox can reach: none (only lo), everything, or allowOut.
    An address the list refuses fails its connect with EPERM (1) at once."""
    c = e2b_node.client
    cases = [
        ({}, "none"),
        ({"allow_internet_access": False}, "none"),
        ({"allow_internet_access": True}, "all"),
        ({"network": {"allowOut": ["1.1.1.1", "2001:db8::/32"], "denyOut": ["0.0.0.0/0"]}},
         "1.1.1.1"),
        ({"secure": True}, "none"),  # the node has keys: envd needs the token anyway
    ]
    for body, reach in cases:
        status, sb = c.call("POST", "/v2/sandboxes", dict({"templateID": "base"}, **body))
        assert status == 201, (body, sb)
        try:
            out = c.sh(sb["sandboxID"], ["python3", "-c", PROBE])
            ifaces, google, cloudflare = json.loads(out["stdout"])
            if reach == "none":
                assert ifaces == ["lo"], (body, out)
            else:
                assert ifaces != ["lo"], (body, out)
                assert cloudflare != 1, (body, out)
                assert (google == 1) == (reach == "1.1.1.1"), (body, out)
        finally:
            c.delete(sb["sandboxID"])


# Template builds (POST /v3/templates and what follows) are served now
# (test_e2b_templates.py); listing templates and the older routes are not.
@pytest.mark.parametrize("method, path", [
    ("GET", "/templates"), ("GET", "/v2/templates/x"),
    ("GET", "/volumes"), ("DELETE", "/v2/volumes/x"),
])
def test_e2b_routes_dsec_lacks_answer_501(e2b_node, method, path):
    status, _, body = e2b_node.client.raw(method, path)
    out = json.loads(body)
    assert status == 501 and out["code"] == 501, (path, status, body)
    assert "not implemented by dsec" in out["message"] and path in out["message"], out


def test_a_foreign_id_is_404_over_plain_http(e2b_node):
    # Snapshots and fork are served now (test_e2b_control.py).
    status, out = e2b_node.client.call("DELETE", "/sandboxes/not-a-dsec-id")
    assert status == 404 and out["code"] == 404, out


def test_list_order_started_after_and_template(e2b_node):
    c = e2b_node.client
    tag = f"t{time.time_ns()}"
    ids, started = [], []
    for tpl in ("busybox", "base"):
        status, sb = c.call("POST", "/v2/sandboxes", {"templateID": tpl, "metadata": {"suite": tag}})
        assert status == 201, sb
        ids.append(sb["sandboxID"])
        started.append(sb["startedAt"])
        time.sleep(0.01)  # distinct start times (milliseconds)
    md = urllib.parse.quote(f"suite={tag}")

    def listed(query):
        status, _, body = c.raw("GET", f"/v2/sandboxes?metadata={md}&{query}")
        assert status == 200, body
        return [s["sandboxID"] for s in json.loads(body)]

    try:
        assert listed("order=asc") == ids
        status, _, body = c.raw("GET", f"/v2/sandboxes?metadata={md}")
        assert [s["metadata"] for s in json.loads(body)] == [{"suite": tag}] * 2  # no dsec labels
        assert listed("order=desc") == ids[::-1]
        assert listed("") == ids[::-1]
        assert listed("startedAfter=" + urllib.parse.quote(started[1])) == [ids[1]]
        assert listed("startedAfter=2000-01-01T00:00:00%2B01:00&order=asc") == ids
        assert listed("template=busybox") == [ids[0]]
        for bad, named in [("order=sideways", "order"), ("startedAfter=yesterday", "startedAfter"),
                           ("sort=name", "sort")]:
            status, _, body = c.raw("GET", f"/v2/sandboxes?{bad}")
            assert status == 400 and named in json.loads(body)["message"], (bad, body)
    finally:
        for sid in ids:
            c.delete(sid)
