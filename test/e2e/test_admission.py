# Admission by measured memory (policy/reclaim_policy.hpp): a node short of
# memory answers a create with 429 resource_exhausted, a Retry-After header and
# a message that names memory, through REST and the Python SDK
# (dsec.ResourceExhausted), and keeps serving every other call. The node is
# made short by flags (--memory-headroom-mb beyond the host's RAM,
# --overcommit tiny), not by filling the machine's memory.

import json
import subprocess

import pytest

from dsec_harness import BUSYBOX, assert_error, import_sdk, wait_for

dsec = import_sdk()

HUGE_HEADROOM = "--memory-headroom-mb=100000000"  # 95 TiB: no host has that free


def addr_of(n):
    return f"127.0.0.1:{n.listen_port}"


def test_create_short_of_memory_answers_429_with_retry_after_naming_memory(node_factory):
    n = node_factory.start(HUGE_HEADROOM)
    c = n.client
    status, hdrs, body = c.raw("POST", "/v1/sandboxes", {"layers": [BUSYBOX]})
    out = json.loads(body)
    assert_error(status, out, 429, "resource_exhausted")
    assert hdrs.get("retry-after", "").isdigit(), hdrs
    msg = out["error"]["message"]
    assert "memory" in msg and "MiB" in msg and n.node_id in msg, msg
    assert "headroom" in msg and "retry later or elsewhere" in msg, msg
    # Nothing was made: the table is empty and the machine clean.
    status, listed = c.list()
    assert status == 200 and listed["sandboxes"] == [], listed
    # The node still serves every other call.
    status, health = c.healthz()
    assert status == 200, health
    assert health["memory"]["available_mb"] > 0, health
    assert health["memory"]["free_mb"] == 0, health  # what admission still gives
    status, metrics = c.call("GET", "/metrics")
    assert status == 200 and b"dsec_node_memory_free_bytes" in metrics, metrics[:2000]
    status, layers = c.call("GET", "/v1/layers")
    assert status == 200, layers
    n.check_clean()


def test_sdk_create_short_of_memory_raises_resource_exhausted(node_factory):
    n = node_factory.start(HUGE_HEADROOM)
    c = dsec.Client(addr_of(n))
    with pytest.raises(dsec.ResourceExhausted) as e:
        c.create([BUSYBOX])
    assert "memory" in str(e.value) and "MiB" in str(e.value), str(e.value)
    assert isinstance(e.value, dsec.Error)
    assert c.list() == []  # the connection and the node still serve


def test_gossip_reports_the_figure_admission_uses(node_factory):
    short = node_factory.start(HUGE_HEADROOM)
    # Placement scores peers by free_memory_mb: a node whose admission gives
    # nothing must not advertise MemAvailable.
    def load():
        status, out = short.client.call("GET", "/v1/nodes")
        assert status == 200, out
        me = [m for m in out["nodes"] if m["id"] == short.node_id]
        return me and me[0]["load"]
    wait_for(lambda: load() and load()["free_memory_mb"] == 0, 15,
             what="the short node to gossip free_memory_mb 0")
    roomy = node_factory.start()
    status, health = roomy.client.healthz()
    assert status == 200 and health["memory"]["free_mb"] > 0, health
    sid = roomy.client.create_ok()  # the usual headroom admits
    roomy.client.delete(sid)


def test_overcommit_cap_refuses_with_429(node_factory):
    n = node_factory.start("--overcommit=0.001")  # ~25 MiB of limits on a 24 GiB host
    status, out = n.client.create(memory_mb=256)
    assert_error(status, out, 429, "resource_exhausted")
    assert "overcommit" in out["error"]["message"] and "memory" in out["error"]["message"], out
    n.check_clean()


@pytest.mark.parametrize("flag", ["--overcommit=-1", "--memory-headroom-mb=lots",
                                  "--reclaim-idle-s=-2", "--reclaim-interval-ms=1"])
def test_bad_memory_flags_exit_2_naming_the_flag(dsec_bin, flag):
    p = subprocess.run([dsec_bin, "node", "--state-dir", "/nonexistent-dsec", flag],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert flag.split("=")[0].encode() in p.stderr, p.stderr
