# Bad input: every malformed request answers a 4xx with the error envelope
# {"error":{"code","message"}}, never a 5xx, and the node keeps serving.

import http.client
import json
import socket

import pytest

from dsec_harness import BUSYBOX, assert_error

SB = "/v1/sandboxes"

# (name, method, path, body (bytes/str/obj or None), status, code)
# "{sid}" in a path is replaced by a live sandbox id, "{node}" by the node id.
CASES = [
    ("malformed json", "POST", SB, b'{"layers": ["base/busybox@1"', 400, "invalid_argument"),
    ("not json at all", "POST", SB, b"hello", 400, "invalid_argument"),
    ("empty body", "POST", SB, b"", 400, "invalid_argument"),
    ("json array body", "POST", SB, [BUSYBOX], 400, "invalid_argument"),
    ("json null body", "POST", SB, b"null", 400, "invalid_argument"),
    ("missing layers", "POST", SB, {"cpu": 1}, 400, "invalid_argument"),
    ("empty layers", "POST", SB, {"layers": []}, 400, "invalid_argument"),
    ("layers not a list", "POST", SB, {"layers": BUSYBOX}, 400, "invalid_argument"),
    ("layer not a ref", "POST", SB, {"layers": ["busybox"]}, 400, "invalid_argument"),
    ("unknown layer", "POST", SB, {"layers": ["nope/missing@1"]}, 404, "not_found"),
    ("unknown layer version", "POST", SB, {"layers": ["base/busybox@999"]}, 404, "not_found"),
    ("negative memory", "POST", SB, {"layers": [BUSYBOX], "memory_mb": -1}, 400,
     "invalid_argument"),
    ("memory as string", "POST", SB, {"layers": [BUSYBOX], "memory_mb": "512"}, 400,
     "invalid_argument"),
    ("memory fractional", "POST", SB, {"layers": [BUSYBOX], "memory_mb": 1.5}, 400,
     "invalid_argument"),
    ("absurd memory", "POST", SB, {"layers": [BUSYBOX], "memory_mb": 10**12}, 400,
     "invalid_argument"),
    ("memory beyond int64", "POST", SB, b'{"layers":["base/busybox@1"],"memory_mb":'
     b'99999999999999999999999999}', 400, "invalid_argument"),
    ("cpu -1", "POST", SB, {"layers": [BUSYBOX], "cpu": -1}, 400, "invalid_argument"),
    ("cpu NaN-ish string", "POST", SB, {"layers": [BUSYBOX], "cpu": "NaN"}, 400,
     "invalid_argument"),
    ("pids 0", "POST", SB, {"layers": [BUSYBOX], "pids": 0}, 400, "invalid_argument"),
    ("ttl negative", "POST", SB, {"layers": [BUSYBOX], "ttl_s": -5}, 400, "invalid_argument"),
    ("unknown field", "POST", SB, {"layers": [BUSYBOX], "colour": "red"}, 400,
     "invalid_argument"),
    ("unknown backend", "POST", SB, {"layers": [BUSYBOX], "backend": "docker"}, 400,
     "invalid_argument"),
    ("labels not strings", "POST", SB, {"layers": [BUSYBOX], "labels": {"a": 1}}, 400,
     "invalid_argument"),
    ("env with = in name", "POST", SB, {"layers": [BUSYBOX], "env": {"A=B": "x"}}, 400,
     "invalid_argument"),
    ("batch count 0", "POST", SB + ":batch", {"spec": {"layers": [BUSYBOX]}, "count": 0}, 400,
     "invalid_argument"),
    ("batch without spec", "POST", SB + ":batch", {"count": 2}, 400, "invalid_argument"),
    ("batch absurd count", "POST", SB + ":batch", {"spec": {"layers": [BUSYBOX]},
                                                   "count": 10**9}, 400, "invalid_argument"),
    ("exec unknown sandbox", "POST", SB + "/{node}.nosuch/exec", {"cmd": "true"}, 404,
     "not_found"),
    ("get unknown sandbox", "GET", SB + "/{node}.nosuch", None, 404, "not_found"),
    ("malformed id", "GET", SB + "/%00%ff..%2F", None, (400, 404), None),
    ("malformed id exec", "POST", SB + "/not-an-id/exec", {"cmd": "true"}, (400, 404), None),
    ("id with unknown node", "GET", SB + "/othernode.abc", None, (404, 503), None),
    ("exec empty cmd", "POST", SB + "/{sid}/exec", {"cmd": ""}, 400, "invalid_argument"),
    ("exec empty argv", "POST", SB + "/{sid}/exec", {"cmd": []}, 400, "invalid_argument"),
    ("exec argv not strings", "POST", SB + "/{sid}/exec", {"cmd": ["ls", 1]}, 400,
     "invalid_argument"),
    ("exec missing cmd", "POST", SB + "/{sid}/exec", {}, 400, "invalid_argument"),
    ("exec unknown field", "POST", SB + "/{sid}/exec", {"cmd": "true", "uid": 0}, 400,
     "invalid_argument"),
    ("exec negative timeout", "POST", SB + "/{sid}/exec", {"cmd": "true", "timeout_s": -1}, 400,
     "invalid_argument"),
    ("exec relative cwd", "POST", SB + "/{sid}/exec", {"cmd": "true", "cwd": "tmp"}, 400,
     "invalid_argument"),
    ("exec malformed json", "POST", SB + "/{sid}/exec", b"{cmd:", 400, "invalid_argument"),
    ("files relative path", "GET", SB + "/{sid}/files?path=etc/passwd", None, 400,
     "invalid_argument"),
    ("files bad percent escape", "GET", SB + "/{sid}/files?path=%zz", None, 400,
     "invalid_argument"),
    ("label query without =", "GET", SB + "?label=novalue", None, 400, "invalid_argument"),
    ("wrong method on sandboxes", "PUT", SB, {}, 405, None),
    ("wrong method on healthz", "POST", "/healthz", {}, 405, None),
    ("wrong method on exec", "GET", SB + "/{sid}/exec", None, 405, None),
    ("wrong method on batch", "GET", SB + ":batch", None, 405, None),
    ("unknown route", "GET", "/v1/nothing", None, 404, "not_found"),
    ("unknown root route", "GET", "/", None, 404, "not_found"),
    ("unknown sandbox subroute", "POST", SB + "/{sid}/explode", {}, 404, "not_found"),
]


@pytest.fixture(scope="module")
def live_sandbox(node):
    status, out = node.client.create([BUSYBOX])
    assert status == 201, out
    yield out["id"]
    node.client.delete(out["id"])


@pytest.mark.parametrize("name,method,path,body,want,code", CASES, ids=[c[0] for c in CASES])
def test_bad_input(client, node, live_sandbox, name, method, path, body, want, code):
    path = path.replace("{sid}", live_sandbox).replace("{node}", node.node_id)
    _, before = client.healthz()
    status, out = client.call(method, path, body)
    assert status < 500, f"{method} {path} {body!r}: 5xx for bad input: {status} {out!r}"
    wants = want if isinstance(want, tuple) else (want,)
    assert status in wants, f"{method} {path} {body!r}: want {want}, got {status} {out!r}"
    assert_error(status, out, status, code)
    status, h = client.healthz()
    assert status == 200, h
    # A rejected create leaves no sandbox behind.
    assert h["sandboxes"] == before["sandboxes"], (before, h)


def test_error_has_json_content_type(client):
    status, hdrs, _ = client.raw("GET", "/v1/nothing")
    assert status == 404
    assert "application/json" in hdrs.get("content-type", ""), hdrs


def test_oversized_content_length(node, client):
    # Declares 300 MB (over the 256 MiB body limit) and sends a few bytes: the
    # node must answer 413 (or close the connection) without reading it all.
    s = socket.create_connection(("127.0.0.1", node.rest_port), timeout=30)
    try:
        s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 300000000\r\n\r\n{\"layers\":")
        data = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
                if b"\r\n\r\n" in data:
                    head, _, rest = data.partition(b"\r\n\r\n")
                    cl = [l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                    if cl and len(rest) >= int(cl[0].split(b":")[1]):
                        break
        except (ConnectionResetError, socket.timeout):
            pass
    finally:
        s.close()
    if data:
        status = int(data.split(b" ", 2)[1])
        assert status == 413, data[:500]
        body = data.partition(b"\r\n\r\n")[2]
        err = json.loads(body)
        assert err["error"]["code"] == "too_large", err
    assert client.healthz()[0] == 200


def test_garbage_http_request(node, client):
    s = socket.create_connection(("127.0.0.1", node.rest_port), timeout=10)
    try:
        s.sendall(b"\x16\x03\x01\x02\x00garbage not http\r\n\r\n")
        try:
            data = s.recv(4096)
        except (ConnectionResetError, socket.timeout):
            data = b""
    finally:
        s.close()
    if data.startswith(b"HTTP/"):
        status = int(data.split(b" ", 2)[1])
        assert 400 <= status < 500, data[:300]
    assert client.healthz()[0] == 200


def test_many_idle_connections_do_not_block(node, client):
    socks = [socket.create_connection(("127.0.0.1", node.rest_port), timeout=10)
             for _ in range(50)]
    try:
        status, _ = client.healthz(timeout=10)
        assert status == 200
    finally:
        for s in socks:
            s.close()


def test_huge_header_rejected_cleanly(node, client):
    conn = http.client.HTTPConnection("127.0.0.1", node.rest_port, timeout=30)
    try:
        conn.putrequest("GET", "/healthz")
        conn.putheader("X-Big", "a" * (1 << 20))
        conn.endheaders()
        try:
            r = conn.getresponse()
            assert r.status < 500 and (r.status == 200 or r.status >= 400), r.status
        except (ConnectionResetError, http.client.RemoteDisconnected, BrokenPipeError):
            pass
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        conn.close()
    assert client.healthz()[0] == 200
