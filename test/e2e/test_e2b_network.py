# E2B's network options that close single addresses and mask the Host of
# port requests (issue 27), end to end as root: a peer in its own network
# namespace with two addresses, each serving HTTP on port 80
# (test/pylib/egress_peer.py), stands in for "the internet".
#   - denyOut of an address beside the open internet: the sandbox cannot
#     connect to it (EPERM, counted in its denials) while the other address
#     still answers; allowOut of the same address wins; a CIDR works; E2B's
#     updateNetwork (PUT /sandboxes/{id}/network) and dsec's own PUT/PATCH
#     with network.deny change it at the next connect.
#   - maskRequestHost: a server in the sandbox that echoes its request
#     headers sees the mask, ${PORT} replaced, whichever way the request came
#     (E2B's headers or dsec's path form); without it, the Host as sent.
import json
import sys
import urllib.parse
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pylib"))

from dsec_harness import _finish_node, wait_for  # noqa: E402
from egress_peer import MirrorPeer, probe  # noqa: E402
from test_e2b import keyed_node, key_file  # noqa: E402,F401 (fixture)

SERVER = (Path(__file__).resolve().parent / "ports" / "port_server.py").read_bytes()
PORT = 8080


@pytest.fixture(scope="module")
def peer():
    p = MirrorPeer()
    yield p
    p.close()


@pytest.fixture(scope="module")
def node(dsec_bin, store, key_file, e2b_base):  # noqa: F811
    n = keyed_node(dsec_bin, store, key_file)
    yield n
    _finish_node(n)


def q(sid):
    return urllib.parse.quote(sid, safe="")


def create(c, body):
    status, sb = c.call("POST", "/v2/sandboxes", dict({"templateID": "base"}, **body))
    assert status == 201, (body, sb)
    c.created.append(sb["sandboxID"])
    return sb["sandboxID"]


def reach(c, sid, peer):
    """What the sandbox gets dialing each peer address on port 80."""
    return probe(c, sid, [["tcp", peer.pypi, 80], ["tcp", peer.npm, 80]])


def denials(c, sid):
    status, info = c.get(sid)
    assert status == 200, info
    return info["denials"]


def test_deny_out_closes_one_address_of_the_open_internet(node, peer):
    c = node.client
    sid = create(c, {"allow_internet_access": True, "network": {"denyOut": [peer.pypi]}})
    assert reach(c, sid, peer) == ["EPERM", "ok"]
    d = denials(c, sid)
    assert d["network"] >= 1 and f"net {peer.pypi}:80" in d["recent"], d
    # The SDK sends no allow_internet_access unless asked: E2B's default
    # (open) holds beside a deny of single addresses; a CIDR closes its range.
    sid = create(c, {"network": {"denyOut": [peer.pypi.rsplit(".", 1)[0] + ".0/24"]}})
    assert reach(c, sid, peer) == ["EPERM", "EPERM"]


def test_allow_out_wins_over_deny_out(node, peer):
    c = node.client
    sid = create(c, {"allow_internet_access": True,
                     "network": {"allowOut": [peer.pypi], "denyOut": [peer.pypi, peer.npm]}})
    assert reach(c, sid, peer) == ["ok", "EPERM"]
    # ...also over a denied range that holds it, and beside allowOut 0.0.0.0/0.
    cidr = peer.pypi.rsplit(".", 1)[0] + ".0/24"
    sid = create(c, {"network": {"allowOut": ["0.0.0.0/0", peer.npm], "denyOut": [cidr]}})
    assert reach(c, sid, peer) == ["EPERM", "ok"]


def test_update_network_moves_the_deny(node, peer):
    c = node.client
    sid = create(c, {"allow_internet_access": True, "network": {"denyOut": [peer.pypi]}})
    assert reach(c, sid, peer) == ["EPERM", "ok"]
    status, out = c.call("PUT", f"/sandboxes/{sid}/network", {"denyOut": [peer.npm]})
    assert status == 204 or status == 200, out
    assert reach(c, sid, peer) == ["ok", "EPERM"]
    status, out = c.call("PUT", f"/sandboxes/{sid}/network", {"allow_internet_access": True})
    assert status in (200, 204), out
    assert reach(c, sid, peer) == ["ok", "ok"]
    # dsec's own PUT and PATCH take network.deny beside the allow-list.
    status, out = c.call("PUT", f"/v1/sandboxes/{q(sid)}/network",
                         {"allow": ["0.0.0.0/0:*"], "deny": [f"{peer.pypi}:80"]})
    assert status == 200, out
    assert reach(c, sid, peer) == ["EPERM", "ok"]
    status, out = c.call("PATCH", f"/v1/sandboxes/{q(sid)}",
                         {"network": {"allow": ["0.0.0.0/0:*", f"{peer.pypi}:*"],
                                      "deny": [f"{peer.npm}:*", f"{peer.pypi}:*"]}})
    assert status == 200, out
    assert reach(c, sid, peer) == ["ok", "EPERM"]
    status, out = c.call("PUT", f"/v1/sandboxes/{q(sid)}/network",
                         {"allow": ["0.0.0.0/0:*"], "deny": ["pypi.example:*"]})
    assert status == 400 and 'network.deny entry "pypi.example:*"' in out["error"]["message"], out


def test_native_create_takes_network_deny(node, peer):
    c = node.client
    sid = c.create_ok(["base/python@3.11"], memory_mb=256,
                      network={"allow": ["0.0.0.0/0:*"], "deny": [f"{peer.npm}:*"]})
    assert reach(c, sid, peer) == ["ok", "EPERM"]
    assert f"net {peer.npm}:80" in denials(c, sid)["recent"]


def start_server(c, sid):
    assert c.put_file(sid, "/tmp/port_server.py", SERVER)[0] == 200
    status, out = c.call("POST", f"/v1/sandboxes/{q(sid)}/exec?background=1",
                         {"cmd": ["python3", "/tmp/port_server.py", str(PORT)]})
    assert status in (200, 201), out
    wait_for(lambda: c.raw("GET", f"/v1/sandboxes/{q(sid)}/ports/{PORT}/")[0] == 200, 20,
             what=f"the server on port {PORT} of {sid}")


def host_seen(c, sid, **headers):
    """The Host header the server in the sandbox got, by E2B's headers or the path form."""
    if headers.pop("path_form", False):
        status, _, body = c.raw("GET", f"/v1/sandboxes/{q(sid)}/ports/{PORT}/headers",
                                headers=headers)
    else:
        status, _, body = c.raw("GET", "/headers", headers=dict(
            {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": str(PORT)}, **headers))
    assert status == 200, body
    return json.loads(body)["headers"].get("host")


def test_mask_request_host_is_the_host_a_port_sees(node):
    c = node.client
    mask = "custom-host.example.com:${PORT}"
    sid = create(c, {"network": {"maskRequestHost": mask}})
    start_server(c, sid)
    want = f"custom-host.example.com:{PORT}"
    assert host_seen(c, sid) == want
    assert host_seen(c, sid, path_form=True) == want
    assert host_seen(c, sid, Host="somewhere.else") == want
    # E2B's getInfo shows it; the metadata does not carry the label.
    status, info = c.call("GET", f"/sandboxes/{sid}")
    assert status == 200, info
    assert info["network"]["maskRequestHost"] == mask, info
    assert "dsec.mask_request_host" not in (info.get("metadata") or {}), info
    # Without a mask the port sees the Host as sent.
    plain = create(c, {})
    start_server(c, plain)
    assert host_seen(c, plain, Host="as-sent.test:1") == "as-sent.test:1"


@pytest.mark.parametrize("mask", ["two words", "x\r\nX-Injected: 1", 7])
def test_a_bad_mask_is_refused_by_name(node, mask):
    status, out = node.client.call("POST", "/v2/sandboxes", {
        "templateID": "base", "network": {"maskRequestHost": mask}})
    assert status == 400 and "network.maskRequestHost" in out["message"], out
