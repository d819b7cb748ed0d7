# Reclaim of idle sandboxes (actors/reclaim.hpp): a container sandbox whose
# python process holds ~100 MiB and then sleeps is found idle after
# --reclaim-idle-s and its cold memory goes to the node's zram swap: GET
# /v1/sandboxes/{id} shows reclaimed_bytes > 0 and a lower resident, /metrics
# the same per sandbox and for the node, and the sandbox still runs as before.
#
# Needs the container backend's usage()/reclaim() (cgroup counters, memory
# squeeze) and the node's own zram swap (--zram-mb): the test skips only when
# the node's backend answers "not supported", saying so.

import re
import subprocess

import pytest

from dsec_harness import PYTHON, wait_for

MiB = 1 << 20

# ~100 MiB of a repeating pattern (compressible, not zero pages), touched, then idle.
HOLD = ("python3 -c \"import time; b = bytes(range(256)) * (100 << 12); "
        "print(len(b), flush=True); time.sleep(3600)\" > /tmp/hold.out 2>&1 & echo $!")


def node_flags(dsec_bin):
    """--zram-mb when this binary has it (the node's own compressed swap)."""
    p = subprocess.run([dsec_bin, "node", "--no-such-flag"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=30)
    flags = ["--reclaim-idle-s=2", "--reclaim-interval-ms=250"]
    if b"--zram-mb" in p.stderr:
        flags.append("--zram-mb=512")
    return flags


def skip_if_unsupported(n):
    log = n.log_tail(400)
    if "not supported" in log and "reclaim" in log:
        line = next(l for l in log.splitlines() if "not supported" in l)
        pytest.skip("the container backend answers \"not supported\" to usage()/reclaim() "
                    f"on this build: {line.strip()}")


def metric(text, name, sid=None):
    pat = re.escape(name) + r"\{[^}]*" + (r'id="' + re.escape(sid) + '"' if sid else "") \
        + r"[^}]*\} (\d+)"
    m = re.search(pat, text)
    return int(m.group(1)) if m else None


def test_idle_sandbox_is_reclaimed_and_keeps_running(dsec_bin, node_factory):
    n = node_factory.start(*node_flags(dsec_bin))
    c = n.client
    sid = c.create_ok([PYTHON], memory_mb=512)
    pid = c.sh(sid, HOLD)["stdout"].strip()
    assert pid.isdigit(), pid
    # A paused one is left alone: its pause already freed what it could.
    paused = c.create_ok([PYTHON], memory_mb=512)
    c.sh(paused, HOLD)
    wait_for(lambda: c.sh(paused, "cat /tmp/hold.out")["stdout"].strip() == str(100 * MiB), 60,
             what="the paused sandbox's python to hold its memory")
    status, out = c.call("POST", f"/v1/sandboxes/{paused}/pause")
    assert status == 200 and out["state"] == "paused", out
    wait_for(lambda: c.sh(sid, "cat /tmp/hold.out")["stdout"].strip() == str(100 * MiB), 60,
             what="the python process to hold its memory")

    def info():
        status, out = c.get(sid)
        assert status == 200, out
        return out

    try:
        wait_for(lambda: info()["resident_bytes"] > 80 * MiB, 30, what="a measured resident")
    except AssertionError:
        skip_if_unsupported(n)
        raise
    peak = info()["resident_bytes"]

    def reclaimed():
        i = info()
        return i if i["reclaimed_bytes"] > 0 and i["resident_bytes"] < peak else None
    try:
        got = wait_for(reclaimed, 60, interval=0.5, what="reclaim of the idle sandbox")
    except AssertionError:
        skip_if_unsupported(n)
        raise
    assert got["idle_since"] is not None and got["idle_since"] > 0, got
    assert got["resident_bytes"] < peak - 40 * MiB, (peak, got)

    status, text = c.call("GET", "/metrics")
    assert status == 200
    text = text.decode() if isinstance(text, bytes) else text
    assert metric(text, "dsec_sandbox_reclaimed_bytes_total", sid) > 0, text
    assert metric(text, "dsec_sandbox_resident_bytes", sid) < peak, text
    assert metric(text, "dsec_node_reclaimed_bytes_total") > 0, text
    assert metric(text, "dsec_node_idle_sandboxes") >= 1, text

    status, p = c.get(paused)
    assert status == 200 and p["state"] == "paused" and p["reclaimed_bytes"] == 0, p
    assert p["idle_since"] is None, p
    assert metric(text, "dsec_sandbox_reclaimed_bytes_total", paused) == 0, text

    # Still the same sandbox: its process and its memory are there.
    r = c.sh(sid, f"kill -0 {pid} && cat /tmp/hold.out")
    assert r["exit_code"] == 0 and r["stdout"].strip() == str(100 * MiB), r
    # Work wakes it: busy again, it is no longer idle.
    c.sh(sid, "python3 -c 'sum(range(30000000))'")
    wait_for(lambda: info()["idle_since"] is None or info()["idle_since"] > got["idle_since"],
             10, what="the sandbox to leave idle after work")
    c.delete(sid)
    c.delete(paused)
    n.check_clean()
