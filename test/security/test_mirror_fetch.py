# Red team, issue 29 part 4: a fetch through an allowed mirror of a host the
# mirror should not proxy (agents used a Go module proxy to pull GitHub code
# and newer package versions). A sandbox allowed only the "pypi" source (a
# named rule on the mirror peer, test/pylib/egress_peer.py) asks the mirror
# for the "npm" host every way an HTTP client can.
#
# What the platform stops, asserted here: the other host's address (refused
# at connect and counted); a request or CONNECT whose Host names the other
# host, even at the allowed mirror's address (closed by the node's Host check
# and counted); a TLS hello naming it (closed). What it cannot stop, asserted
# too so the limit stays visible: a request whose Host is the mirror reaches
# the mirror whatever its target says (an absolute URI for another host, a
# CONNECT with the mirror's Host): what the mirror does with it (here: it
# answers for itself; a forward proxy would fetch) is the mirror's
# configuration (README, "Fetching through an allowed mirror"). Then the
# node, a neighbour and the host are checked (the `unharmed` fixture).
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pylib"))

from dsec_harness import Node, _finish_node  # noqa: E402
from egress_peer import MirrorPeer  # noqa: E402

from .redteam import PYTHON, attack  # noqa: E402

# One raw HTTP exchange: the first line of the answer, "closed", or the errno.
RAW = r"""
import socket, ssl
def raw(ip, port, data, sni=None):
    try:
        s = socket.create_connection((ip, port), timeout=5)
        if sni:
            ctx = ssl.create_default_context(); ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            try:
                s = ctx.wrap_socket(s, server_hostname=sni)
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
                return "closed"
        s.sendall(data.encode())
        got = b""
        while True:
            d = s.recv(4096)
            if not d:
                break
            got += d
        return got.split(b"\r\n", 1)[0].decode() + " | " + got.split(b"\r\n\r\n", 1)[-1].decode() \
            if got else "closed"
    except ConnectionResetError:
        return "closed"
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
    n = Node(dsec_bin, store, node_id="redteam-mirror-" + str(os.getpid() % 10000),
             extra_args=["--egress-sources", path, "--dns-upstream", peer.upstream]).start()
    yield n
    _finish_node(n)


def test_fetching_another_host_through_an_allowed_mirror(client, peer, unharmed):
    sid = client.create_ok([PYTHON], memory_mb=256, network={"allow": ["pypi"]})
    got = attack(client, sid, RAW + f"""
m, other = {peer.pypi!r}, {peer.npm!r}
res = {{}}
res["other_direct"] = raw(other, 80, "GET / HTTP/1.0\\r\\nHost: npm.mirror.test\\r\\n\\r\\n")
res["host_other"] = raw(m, 80, "GET / HTTP/1.0\\r\\nHost: npm.mirror.test\\r\\n\\r\\n")
res["absolute_uri_host_other"] = raw(
    m, 80, "GET http://npm.mirror.test/ HTTP/1.1\\r\\nHost: npm.mirror.test\\r\\n\\r\\n")
res["connect_host_other"] = raw(
    m, 80, "CONNECT npm.mirror.test:80 HTTP/1.1\\r\\nHost: npm.mirror.test:80\\r\\n\\r\\n")
res["sni_other"] = raw(m, 443, "GET / HTTP/1.0\\r\\nHost: npm.mirror.test\\r\\n\\r\\n",
                       sni="npm.mirror.test")
# What reaches the mirror: the Host is the mirror's own name.
res["absolute_uri_host_mirror"] = raw(
    m, 80, "GET http://npm.mirror.test/ HTTP/1.0\\r\\nHost: pypi.mirror.test\\r\\n\\r\\n")
res["connect_host_mirror"] = raw(
    m, 80, "CONNECT npm.mirror.test:80 HTTP/1.0\\r\\nHost: pypi.mirror.test\\r\\n\\r\\n")
out(res)
""", timeout_s=120)
    assert got["other_direct"] == "EPERM", got
    for k in ("host_other", "absolute_uri_host_other", "connect_host_other", "sni_other"):
        assert got[k] == "closed", (k, got)
    # The platform passes these to the mirror; the mirror peer serves only
    # itself (GET answers with the Host it got; CONNECT is not implemented).
    assert got["absolute_uri_host_mirror"] == "HTTP/1.0 200 OK | host=pypi.mirror.test", got
    assert got["connect_host_mirror"].startswith("HTTP/1.0 501"), got
    status, info = client.get(sid)
    d = info["denials"]
    assert d["network"] >= 5, d
    for r in (f"net {peer.npm}:80", f"host npm.mirror.test {peer.pypi}:80",
              f"sni npm.mirror.test {peer.pypi}:443"):
        assert r in d["recent"], (r, d)
    unharmed()
