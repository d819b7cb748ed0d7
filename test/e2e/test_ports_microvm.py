# Ports on a microVM guest (issue 26 part 3): the guest has no network
# device, so the node reaches a port through the guest's init over the
# control channel (port streams, backends/init/ports.cpp). One sandbox, a
# few requests: plain and body, a streamed answer arriving as produced, a
# WebSocket echo, a port nothing listens on. TCG is slow: timeouts are wide.

import http.client
import json
import os
import time
import urllib.parse

import pytest

from dsec_harness import PYTHON, _finish_node, start_node, wait_for
from test_microvm import BOOT_TIMEOUT_S, QEMU, guest_kernel  # noqa: F401
from test_ports import SERVER, ws_connect, ws_frame, ws_read

pytestmark = pytest.mark.skipif(QEMU is None,
                                reason="qemu-system-x86_64 is not installed on this machine")


@pytest.fixture(scope="module")
def vm_node(dsec_bin, store, guest_kernel):  # noqa: F811
    n = start_node(dsec_bin, store, DSEC_GUEST_DIR=guest_kernel,
                   DSEC_VM_BOOT_TIMEOUT_S=BOOT_TIMEOUT_S)
    yield n
    _finish_node(n)


def test_microvm_port_http_stream_websocket_and_502(vm_node):
    c = vm_node.client
    sid = c.create_ok([PYTHON], backend="microvm", memory_mb=512)
    q = urllib.parse.quote(sid, safe="")
    base = f"/v1/sandboxes/{q}/ports/8000"
    try:
        assert c.put_file(sid, "/tmp/port_server.py", SERVER)[0] == 200
        st, out = c.call("POST", f"/v1/sandboxes/{q}/exec?background=1",
                         {"cmd": ["python3", "/tmp/port_server.py", "8000"]})
        assert st in (200, 201), out
        wait_for(lambda: c.raw("GET", base + "/", timeout=60)[0] == 200, 120,
                 interval=1, what="the server inside the guest")
        st, _, body = c.raw("GET", base + "/")
        assert (st, body) == (200, b"hello from the sandbox\n")
        payload = os.urandom(200_000)
        st, _, body = c.raw("POST", base + "/echo", payload,
                            headers={"Content-Type": "application/octet-stream"}, timeout=120)
        assert st == 200 and body == payload
        conn = http.client.HTTPConnection("127.0.0.1", vm_node.rest_port, timeout=120)
        conn.request("GET", base + "/stream?n=4&every=1")
        r = conn.getresponse()
        assert r.status == 200
        t = []
        while True:
            line = r.readline()
            if not line:
                break
            t.append(time.monotonic())
            json.loads(line)
        conn.close()
        assert len(t) == 4 and t[-1] - t[0] > 2, t
        s = ws_connect(vm_node.rest_port, base + "/ws")
        s.settimeout(60)
        s.sendall(ws_frame(b"hello guest"))
        assert ws_read(s) == b"hello guest"
        s.close()
        # Flow control over the control channel (protocol version 3): answers
        # and uploads many windows long pass whole, and one read slowly too.
        payload = os.urandom(3 << 20)
        st, _, body = c.raw("POST", base + "/echo", payload,
                            headers={"Content-Type": "application/octet-stream"}, timeout=300)
        assert st == 200 and body == payload
        conn = http.client.HTTPConnection("127.0.0.1", vm_node.rest_port, timeout=300)
        conn.request("GET", base + "/big?mb=16")
        r = conn.getresponse()
        assert r.status == 200
        got, block = 0, bytes(range(256)) * 256
        while True:
            chunk = r.read(len(block))
            if not chunk:
                break
            assert chunk == block[:len(chunk)]
            got += len(chunk)
            if got < (2 << 20):
                time.sleep(0.05)  # a slow reader for the first 2 MiB
        conn.close()
        assert got == 16 << 20
        st, _, body = c.raw("GET", f"/v1/sandboxes/{q}/ports/9/", timeout=60)
        assert st == 502 and b"port 9" in body, body
        st, _, body = c.raw("GET", base + "/")  # still served after all that
        assert st == 200
    finally:
        c.delete(sid)
