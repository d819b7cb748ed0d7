# Ports (issue 26 part 3): a service inside a container sandbox reached
# through the node's REST port, by path (/v1/sandboxes/ID/ports/PORT/...),
# by E2B's host form (PORT-ID.DOMAIN with --sandbox-domain) and by E2B's
# client-proxy headers (E2b-Sandbox-Id, E2b-Sandbox-Port). A real HTTP
# server runs inside the sandbox (test/e2e/ports/port_server.py): plain
# answers, bodies, a streamed NDJSON answer produced over seconds, a
# WebSocket echo, a handler that never answers. Also: a `network: none`
# sandbox is reachable and still has no way out, access follows the node's
# API keys and the sandbox's traffic token, bad input gets 400/401/403/404/
# 502, hung upstreams and many connections leave no fds behind, the Python
# SDK's url(), `dsec url`, and a port reached through a peer of a cluster.

import base64
import http.client
import json
import os
import socket
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

from dsec_harness import PYTHON, Client, Node, _finish_node, assert_error, wait_for
from test_e2b import API_KEY as E2B_KEY, e2b_module, run_js  # noqa: F401 -- a fixture

API_KEY = "dsec_ports_test_key_0123456789abcdef"
DOMAIN = "sb.localhost"
PORT = 8000
SERVER_PATH = Path(__file__).resolve().parent / "ports" / "port_server.py"
SERVER = SERVER_PATH.read_bytes()


class KeyedClient(Client):
    def raw(self, method, path, body=None, headers=None, timeout=None):
        h = {"X-API-Key": API_KEY}
        h.update(headers or {})
        return super().raw(method, path, body, headers=h, timeout=timeout)


def q(sid):
    return urllib.parse.quote(sid, safe="")


def path(sid, port=PORT, rest="/"):
    return f"/v1/sandboxes/{q(sid)}/ports/{port}{rest}"


def start_server(client, sid, port=PORT):
    assert client.put_file(sid, "/tmp/port_server.py", SERVER)[0] == 200
    st, out = client.call("POST", f"/v1/sandboxes/{q(sid)}/exec?background=1",
                          {"cmd": ["python3", "/tmp/port_server.py", str(port)]})
    assert st in (200, 201), out
    wait_for(lambda: client.raw("GET", path(sid, port, "/"))[0] == 200, 20,
             what=f"the server on port {port} of {sid}")


@pytest.fixture(scope="module")
def key_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("keys") / "api-keys"
    p.write_text(f"{API_KEY}\n{E2B_KEY}\n")  # ours, and the one the E2B scripts send
    return p


@pytest.fixture(scope="module")
def pnode(dsec_bin, store, key_file):
    n = Node(dsec_bin, store, extra_args=["--api-key-file", str(key_file),
                                          "--sandbox-domain", DOMAIN])
    n.client = KeyedClient("127.0.0.1", n.rest_port)
    n.start()
    yield n
    _finish_node(n)


@pytest.fixture(scope="module")
def web(pnode):
    """A python sandbox (network: none, the default) serving port 8000."""
    sid = pnode.client.create_ok([PYTHON], cpu=1, memory_mb=512)
    start_server(pnode.client, sid)
    return sid


def get(node, target, headers=None, method="GET", body=None, timeout=30):
    return node.client.raw(method, target, body, headers=headers, timeout=timeout)


# -- the three forms -------------------------------------------------------------------


def test_path_form_passes_methods_bodies_queries_and_strips_node_credentials(pnode, web):
    st, _, body = get(pnode, path(web, rest="/"))
    assert (st, body) == (200, b"hello from the sandbox\n")
    payload = os.urandom(300_000)
    st, hdrs, body = get(pnode, path(web, rest="/echo"), method="POST", body=payload,
                         headers={"Content-Type": "application/octet-stream"})
    assert st == 200 and body == payload
    st, _, body = get(pnode, path(web, rest="/headers?a=1&b=x%20y"),
                      headers={"X-App": "kept"})
    seen = json.loads(body)
    assert seen["path"] == "/headers?a=1&b=x%20y"
    assert seen["headers"]["x-app"] == "kept"
    assert "x-api-key" not in seen["headers"], "the node's key must not reach the sandbox"
    st, hdrs, body = get(pnode, path(web, rest="/"), method="HEAD")
    assert st == 200 and body == b""
    # Without a trailing slash the port sees "/".
    assert get(pnode, f"/v1/sandboxes/{q(web)}/ports/{PORT}")[0] == 200


def test_host_form_routes_by_host_header(pnode, web):
    host = f"{PORT}-{web}.{DOMAIN}:{pnode.rest_port}"
    st, _, body = get(pnode, "/headers?via=host", headers={"Host": host})
    assert st == 200, body
    assert json.loads(body)["path"] == "/headers?via=host"
    # The domain without the node's port matches too.
    st, _, body = get(pnode, "/", headers={"Host": f"{PORT}-{web}.{DOMAIN}"})
    assert (st, body) == (200, b"hello from the sandbox\n")
    # The node's own API still answers on its own Host.
    assert get(pnode, "/healthz")[0] == 200


def test_e2b_headers_route_to_the_port_and_envd_stays_the_nodes(pnode, web):
    h = {"E2b-Sandbox-Id": web, "E2b-Sandbox-Port": str(PORT)}
    st, _, body = get(pnode, "/headers", headers=h)
    assert st == 200, body
    seen = json.loads(body)["headers"]
    assert "e2b-sandbox-id" not in seen and "e2b-sandbox-port" not in seen
    # envd's port is the node's own (E2B's /health answers 204 there).
    st, _, _ = get(pnode, "/health", headers={"E2b-Sandbox-Id": web,
                                              "E2b-Sandbox-Port": "49983"})
    assert st in (200, 204)


# -- streaming, close-delimited answers, WebSocket ---------------------------------------


def test_streamed_answer_arrives_as_produced(pnode, web):
    conn = http.client.HTTPConnection("127.0.0.1", pnode.rest_port, timeout=30)
    t0 = time.monotonic()
    conn.request("GET", path(web, rest="/stream?n=5&every=0.5"), headers={"X-API-Key": API_KEY})
    r = conn.getresponse()
    assert r.status == 200
    times = []
    while True:
        line = r.readline()
        if not line:
            break
        times.append(time.monotonic() - t0)
        assert json.loads(line)["i"] == len(times) - 1
    conn.close()
    assert len(times) == 5
    # Produced over 2 s: the first line must not wait for the last.
    assert times[-1] - times[0] > 1.5, times


def test_close_delimited_answer_is_rechunked_and_the_connection_kept(pnode, web):
    conn = http.client.HTTPConnection("127.0.0.1", pnode.rest_port, timeout=30)
    for _ in range(3):  # the same client connection serves the next request
        conn.request("GET", path(web, rest="/close"), headers={"X-API-Key": API_KEY})
        r = conn.getresponse()
        assert (r.status, r.read()) == (200, b"until close\n")
    conn.request("GET", "/healthz", headers={"X-API-Key": API_KEY})
    assert conn.getresponse().status == 200
    conn.close()


def ws_frame(data: bytes) -> bytes:
    mask = os.urandom(4)
    head = bytes([0x81])
    head += bytes([0x80 | len(data)]) if len(data) < 126 else bytes([0xFE]) + len(data).to_bytes(2, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))


def ws_read(sock) -> bytes:
    def exactly(n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            assert chunk, "tunnel closed"
            buf += chunk
        return buf
    head = exactly(2)
    ln = head[1] & 0x7F
    if ln == 126:
        ln = int.from_bytes(exactly(2), "big")
    return exactly(ln)


def ws_connect(rest_port, target, extra=""):
    s = socket.create_connection(("127.0.0.1", rest_port), timeout=20)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET {target} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               f"Sec-WebSocket-Version: 13\r\nX-API-Key: {API_KEY}\r\n{extra}\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        assert chunk, head
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    return s


def test_websocket_echo_both_ways(pnode, web):
    s = ws_connect(pnode.rest_port, path(web, rest="/ws"))
    for msg in (b"hello", b"x" * 1000, "é unicode".encode()):
        s.sendall(ws_frame(msg))
        assert ws_read(s) == msg
    s.close()


# -- network: none ------------------------------------------------------------------------


def test_a_network_none_sandbox_is_reachable_and_still_has_no_way_out(pnode, web):
    st, info = pnode.client.get(web)
    assert st == 200 and info.get("network", {}).get("mode", "none") == "none", info
    assert get(pnode, path(web, rest="/"))[0] == 200
    probe = ("import socket\n"
             "for addr in [('1.1.1.1', 53), ('127.0.0.1', %d), ('10.0.2.2', 80)]:\n"
             "    s = socket.socket(); s.settimeout(2)\n"
             "    try:\n        s.connect(addr); print('OPEN', addr)\n"
             "    except OSError as e:\n        print('closed', addr, e)\n" % pnode.rest_port)
    r = pnode.client.sh(web, ["python3", "-c", probe], timeout_s=30)
    assert "OPEN" not in r["stdout"], r


# -- access and bad input --------------------------------------------------------------------


def test_api_keys_and_the_envd_token_guard_ports(pnode, web):
    plain = Client("127.0.0.1", pnode.rest_port)
    st, body = plain.call("GET", path(web, rest="/"))
    assert_error(st, body, 401, "unauthenticated")
    st, body = plain.call("GET", "/", headers={"E2b-Sandbox-Id": web, "E2b-Sandbox-Port": "8000"})
    assert st == 401
    st, body = plain.call("GET", "/", headers={"Host": f"{PORT}-{web}.{DOMAIN}"})
    assert st == 401
    st, _ = plain.call("GET", path(web, rest="/"), headers={"X-API-Key": "wrong" * 8})
    assert st == 401


def test_a_traffic_token_is_required_when_the_sandbox_has_one(pnode):
    sid = pnode.client.create_ok([PYTHON], cpu=1, memory_mb=256,
                                 labels={"dsec.traffic_token": "tok-0123456789"})
    start_server_checked = False
    assert pnode.client.put_file(sid, "/tmp/port_server.py", SERVER)[0] == 200
    pnode.client.call("POST", f"/v1/sandboxes/{q(sid)}/exec?background=1",
                      {"cmd": ["python3", "/tmp/port_server.py", "8001"]})
    ok = {"e2b-traffic-access-token": "tok-0123456789"}
    wait_for(lambda: get(pnode, path(sid, 8001), headers=ok)[0] == 200, 20, what="server")
    st, _, body = get(pnode, path(sid, 8001))
    assert st == 401 and b"e2b-traffic-access-token" in body
    st, _, body = get(pnode, path(sid, 8001), headers={"e2b-traffic-access-token": "nope"})
    assert st == 403, body
    assert not start_server_checked
    pnode.client.delete(sid)


@pytest.mark.parametrize("port", ["0", "65536", "99999", "abc", "-1", "80a"])
def test_a_port_outside_1_65535_is_400(pnode, web, port):
    st, _, body = get(pnode, f"/v1/sandboxes/{q(web)}/ports/{port}/")
    assert st == 400, body
    assert json.loads(body)["error"]["code"] == "invalid_argument"
    assert port in json.loads(body)["error"]["message"]


def test_a_port_nothing_listens_on_is_502_naming_it(pnode, web):
    st, _, body = get(pnode, path(web, 9))
    assert st == 502, body
    msg = json.loads(body)["error"]["message"]
    assert "port 9" in msg and web in msg, msg
    # The connection stays usable and the node serves on.
    assert get(pnode, path(web))[0] == 200


def test_unknown_and_destroyed_sandboxes_are_404(pnode):
    st, _, body = get(pnode, path(pnode.node_id + ".nosuchsandbox"))
    assert st == 404, body
    sid = pnode.client.create_ok([PYTHON], cpu=1, memory_mb=256)
    start_server(pnode.client, sid, 8002)
    pnode.client.delete(sid)
    st, _, body = get(pnode, path(sid, 8002))
    assert st == 404, body


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_hung_upstreams_and_many_connections_leave_no_fds(pnode, web):
    pid = pnode.proc.pid
    get(pnode, path(web))  # warm: the dialer thread and its descriptors exist
    before = fd_count(pid)
    # Clients that give up on a port that never answers.
    hung = []
    for _ in range(10):
        s = socket.create_connection(("127.0.0.1", pnode.rest_port))
        s.sendall(f"GET {path(web, rest='/hang')} HTTP/1.1\r\nHost: x\r\n"
                  f"X-API-Key: {API_KEY}\r\n\r\n".encode())
        hung.append(s)
    # Meanwhile the gateway serves others, in parallel.
    errors = []

    def hit():
        try:
            st, _, _ = get(pnode, path(web), timeout=30)
            if st != 200:
                errors.append(st)
        except Exception as e:  # noqa: BLE001 -- counted, asserted below
            errors.append(repr(e))
    threads = [threading.Thread(target=hit) for _ in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    for s in hung:
        s.close()
    wait_for(lambda: fd_count(pid) <= before + 2, 15,
             what=f"node fds back to {before} (now {fd_count(pid)})")


def test_upstream_connections_are_kept_alive_and_closed_with_their_sandbox(pnode):
    """Requests to one port reuse the node's connection into the sandbox
    (several clients, one after another); a destroy leaves none behind and
    the port answers 404 after it."""
    pid = pnode.proc.pid
    sid = pnode.client.create_ok([PYTHON], cpu=1, memory_mb=256)
    before = fd_count(pid)
    start_server(pnode.client, sid, 8003)
    seen = set()
    for _ in range(5):
        st, _, body = get(pnode, path(sid, 8003, "/conn"))
        assert st == 200, body
        seen.add(body)
    assert len(seen) == 1, f"the port saw {len(seen)} connections for 5 requests: {seen}"
    # A POST on its own connection, then a GET: both answered whole.
    st, _, body = get(pnode, path(sid, 8003, "/echo"), method="POST", body=b"x" * 1000)
    assert (st, body) == (200, b"x" * 1000)
    assert get(pnode, path(sid, 8003, "/conn"))[0] == 200
    pnode.client.delete(sid)
    st, _, body = get(pnode, path(sid, 8003, "/conn"))
    assert st == 404, body
    wait_for(lambda: fd_count(pid) <= before, 15,
             what=f"node fds back to {before} after the destroy (now {fd_count(pid)})")


def test_a_paused_sandbox_port_resumes_it_and_answers(pnode, web):
    assert get(pnode, path(web, rest="/conn"))[0] == 200  # a kept connection exists
    st, out = pnode.client.call("POST", f"/v1/sandboxes/{q(web)}/pause", {})
    assert st == 200, out
    st, _, body = get(pnode, path(web, rest="/"))
    assert (st, body) == (200, b"hello from the sandbox\n")


# -- SDK and CLI --------------------------------------------------------------------------------


def test_python_sdk_url_reaches_the_port(pnode, web, dsec_sdk):
    c = dsec_sdk.Client(f"127.0.0.1:{pnode.listen_port}")
    url = c.get(web).url(PORT)
    assert url == f"http://127.0.0.1:{pnode.rest_port}/v1/sandboxes/{q(web)}/ports/{PORT}/"
    u = urllib.parse.urlsplit(url)
    st, _, body = get(pnode, u.path + "headers")
    assert st == 200 and json.loads(body)["path"] == "/headers"
    with pytest.raises(dsec_sdk.InvalidArgument):
        c.get(web).url(70000)


def test_cli_url(pnode, web, dsec_bin):
    env = dict(os.environ, DSEC_API_KEY=API_KEY)
    h = subprocess.run([dsec_bin, "url", "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "PORT" in h.stdout
    p = subprocess.run([dsec_bin, "url", web, str(PORT), "--rest", pnode.rest], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"http://{pnode.rest}/v1/sandboxes/{q(web)}/ports/{PORT}/"
    p = subprocess.run([dsec_bin, "url", web, "0", "--rest", pnode.rest], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "1 and 65535" in p.stderr
    p = subprocess.run([dsec_bin, "url", pnode.node_id + ".nosuch", "80", "--rest", pnode.rest],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "not_found" in p.stderr


# -- through a peer of a cluster ---------------------------------------------------------------


def test_a_port_through_a_peer_of_a_cluster(dsec_bin, store, key_file):
    first = Node(dsec_bin, store, extra_args=["--api-key-file", str(key_file),
                                              "--sandbox-domain", DOMAIN])
    first.client = KeyedClient("127.0.0.1", first.rest_port)
    first.start()
    second = None
    try:
        second = Node(dsec_bin, store, extra_args=["--api-key-file", str(key_file),
                                                   "--sandbox-domain", DOMAIN,
                                                   "--join", f"127.0.0.1:{first.listen_port}"])
        second.client = KeyedClient("127.0.0.1", second.rest_port)
        second.start()

        def alive():
            st, out = first.client.call("GET", "/v1/nodes")
            return st == 200 and sum(m.get("state") == "alive" for m in out["nodes"]) == 2
        wait_for(alive, 30, what="two alive members")
        sid = first.client.create_ok([PYTHON], cpu=1, memory_mb=256, node=second.node_id)
        assert sid.startswith(second.node_id + ".")
        start_server(second.client, sid)
        # Path form, host form and E2B headers, all through the node that does not own it.
        st, _, body = get(first, path(sid, rest="/headers?peer=1"))
        assert st == 200 and json.loads(body)["path"] == "/headers?peer=1", body
        st, _, body = get(first, "/", headers={"Host": f"{PORT}-{sid}.{DOMAIN}"})
        assert (st, body) == (200, b"hello from the sandbox\n")
        st, _, body = get(first, "/", headers={"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "8000"})
        assert st == 200, body
        # Streaming and WebSocket through the peer.
        conn = http.client.HTTPConnection("127.0.0.1", first.rest_port, timeout=30)
        conn.request("GET", path(sid, rest="/stream?n=3&every=0.5"), headers={"X-API-Key": API_KEY})
        r = conn.getresponse()
        t = []
        while r.readline():
            t.append(time.monotonic())
        assert len(t) == 3 and t[-1] - t[0] > 0.8, t
        s = ws_connect(first.rest_port, path(sid, rest="/ws"))
        s.sendall(ws_frame(b"through a peer"))
        assert ws_read(s) == b"through a peer"
        s.close()
        st, _, body = get(first, path(sid, 9))
        assert st == 502 and b"port 9" in body
        first.client.delete(sid)
    finally:
        if second:
            _finish_node(second)
        _finish_node(first)



# -- the E2B JS SDK: getHost, proxy headers, traffic token ------------------------------------


def test_e2b_get_host_proxy_headers_and_traffic_token(e2b_module, pnode, e2b_base):
    out = run_js(e2b_module, pnode, "ports", PORT_SERVER=str(SERVER_PATH), DOMAIN=DOMAIN)
    assert out["ok"]
