# Per-sandbox metrics, the operation added through the operation table
# (actors/operations.hpp, sbmetrics_op): one sample of a sandbox's CPU and
# memory from its cgroup, through REST (GET /v1/sandboxes/{id}/metrics), the
# SDK (Sandbox.metrics) and E2B's GET /sandboxes/{id}/metrics (SandboxMetric
# array). Values must be plausible: memory in use is above zero and below the
# limit, a busy sandbox shows CPU, an idle one little.

import json
import time
import urllib.parse

from dsec_harness import BUSYBOX, assert_error


# A fresh idle sandbox may have nothing charged to its cgroup yet: write 8 MiB
# (page cache, charged to the writer's group) so memory in use is above zero.
FILL = ["sh", "-c", "dd if=/dev/zero of=/tmp/fill bs=1048576 count=8 2>/dev/null"]


def metrics_path(sid):
    return f"/v1/sandboxes/{urllib.parse.quote(sid, safe='')}/metrics"


def fill(client, sid):
    status, out = client.exec(sid, FILL, timeout_s=60)
    assert status == 200 and out["exit_code"] == 0, out


def test_rest_metrics_shape_and_values(client):
    sid = client.create_ok(cpu=1, memory_mb=256)
    fill(client, sid)
    t0 = time.time()
    status, m = client.call("GET", metrics_path(sid))
    assert status == 200, m
    assert set(m) == {"timestamp_ms", "cpu_count", "cpu_used_pct", "mem_used_bytes",
                      "mem_total_bytes"}, m
    assert abs(m["timestamp_ms"] / 1000.0 - t0) < 60, m
    assert m["cpu_count"] == 1, m
    assert m["mem_total_bytes"] == 256 << 20, m
    assert 0 < m["mem_used_bytes"] < m["mem_total_bytes"], m
    assert 0 <= m["cpu_used_pct"] <= 100, m


def test_rest_metrics_sees_a_busy_sandbox(client):
    sid = client.create_ok(cpu=1, memory_mb=256)
    client.call("GET", metrics_path(sid))  # the next sample counts from here
    status, out = client.exec(sid, ["sh", "-c", "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done"],
                              timeout_s=60)
    assert status == 200 and out["exit_code"] == 0, out
    status, busy = client.call("GET", metrics_path(sid))
    assert status == 200, busy
    assert busy["cpu_used_pct"] > 5, busy
    time.sleep(1.0)
    status, idle = client.call("GET", metrics_path(sid))
    assert status == 200, idle
    assert idle["cpu_used_pct"] < busy["cpu_used_pct"], (busy, idle)


def test_rest_metrics_errors(client, node):
    assert_error(*client.call("GET", metrics_path(node.node_id + ".nope")), 404, "not_found")
    sid = client.create_ok()
    status, out = client.call("POST", metrics_path(sid))
    assert status == 405, out


def test_rest_metrics_leaves_a_paused_sandbox_paused(client):
    sid = client.create_ok(cpu=1, memory_mb=256)
    status, out = client.call("POST", f"/v1/sandboxes/{sid}/pause")
    assert status == 200, out
    status, m = client.call("GET", metrics_path(sid))
    assert status == 200, m
    status, sb = client.get(sid)
    assert sb["state"] == "paused", sb


def test_sdk_metrics(sdk, dsec_sdk):
    dsec = dsec_sdk
    with sdk.create([BUSYBOX], cpu=1, memory_mb=256) as sb:
        assert sb.exec(FILL, timeout_s=60).exit_code == 0
        m = sb.metrics()
        assert isinstance(m, dsec.SandboxMetrics), m
        assert m.cpu_count == 1 and m.mem_total_bytes == 256 << 20, m
        assert 0 < m.mem_used_bytes < m.mem_total_bytes, m
        assert 0 <= m.cpu_used_pct <= 100, m
        assert abs(m.timestamp - time.time()) < 60, m
    try:  # destroyed on leaving the block
        sb.metrics()
        raise AssertionError("metrics of a destroyed sandbox answered")
    except dsec.NotFound:
        pass


def test_e2b_metrics_shape(client):
    sid = client.create_ok(cpu=1, memory_mb=256)
    fill(client, sid)
    status, out = client.call("GET", f"/sandboxes/{sid}/metrics")
    assert status == 200, out
    # The node's history (one sample per 5 s) and then the live sample.
    assert isinstance(out, list) and len(out) >= 1, out
    assert [x["timestamp"] for x in out] == sorted(x["timestamp"] for x in out), out
    m = out[-1]
    for key in ("timestamp", "cpuCount", "cpuUsedPct", "memUsed", "memTotal"):
        assert key in m, (key, m)
    assert m["timestamp"].endswith("Z"), m
    assert m["cpuCount"] == 1 and m["memTotal"] == 256 << 20, m
    assert 0 < m["memUsed"] < m["memTotal"], m
    status, out = client.call("GET", f"/sandboxes/{node_less(sid)}/metrics")
    assert status == 404, out


def test_e2b_metrics_range(client):
    sid = client.create_ok(cpu=1, memory_mb=256)
    now = int(time.time())
    base = f"/sandboxes/{sid}/metrics"
    status, out = client.call("GET", f"{base}?start={now - 60}&end={now + 60}")
    assert status == 200 and len(out) >= 1, out
    # A range that ended before the sandbox was made holds no sample.
    status, out = client.call("GET", f"{base}?start={now - 3600}&end={now - 1800}")
    assert status == 200 and out == [], out
    status, out = client.call("GET", f"{base}?start=yesterday")
    assert status == 400 and "start" in json.dumps(out), out


def node_less(sid):
    """An id on the same node that names no sandbox."""
    return sid.split(".", 1)[0] + ".nope"
