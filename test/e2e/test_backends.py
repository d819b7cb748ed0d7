# One parameter switches the backend (issue 7): the same code runner, the way
# an evaluation harness calls it ("run this program with these files and this
# stdin, give me exit code, stdout, stderr"), answers the same on all four
# backends: fncall (POST /v1/fncall, the warm pool) and a container, a
# microVM and a full VM (create, put the files, exec, destroy). Only the
# backend name differs between the runs.
#
# The microVM and VM runs need qemu-system-x86_64 and the guest kernel (see
# test_microvm.py); without QEMU they skip and say so.

import json

import pytest

from test_microvm import BOOT_TIMEOUT_S, QEMU, guest_kernel  # noqa: F401
from dsec_harness import _finish_node, start_node

CALL_DIR = "/tmp/call"  # where fncall runs a program (backends/fncall/fork_server/)

PROGRAM = r"""
import sys, json, os
cfg = json.load(open("cfg/params.json"))
data = sys.stdin.read()
print("words", len(data.split()), "scale", cfg["scale"] * 2)
print("cwd", os.getcwd())
print("warn", file=sys.stderr)
if cfg["fail"]:
    raise ValueError("asked to fail")
sys.exit(cfg["code"])
"""

CASES = [
    ({"scale": 21, "fail": False, "code": 0}, "a b c"),
    ({"scale": 1, "fail": False, "code": 3}, ""),
    ({"scale": 2, "fail": True, "code": 0}, "x\ny"),
]


@pytest.fixture(scope="module")
def node(dsec_bin, store, guest_kernel):  # noqa: F811
    n = start_node(dsec_bin, store, DSEC_GUEST_DIR=guest_kernel,
                   DSEC_VM_BOOT_TIMEOUT_S=BOOT_TIMEOUT_S)
    yield n
    _finish_node(n)


def run_program(c, backend, code, stdin, files):
    """The harness's one call: `backend` is the only thing that varies."""
    if backend == "fncall":
        status, out = c.call("POST", "/v1/fncall", {"language": "python", "code": code,
                                                   "stdin": stdin, "files": files})
        assert status == 200, out
        return out
    sid = c.create_ok(["base/python@3.11"], backend=backend, memory_mb=256)
    try:
        for path, content in dict(files, **{"main.py": code}).items():
            status, _ = c.put_file(sid, f"{CALL_DIR}/{path}", content.encode())
            assert status in (200, 201, 204), status
        return c.sh(sid, ["python3", "main.py"], stdin=stdin, cwd=CALL_DIR)
    finally:
        c.delete(sid)
        c.created.remove(sid)


@pytest.mark.parametrize("backend", ["fncall", "container", "microvm", "vm"])
def test_same_program_same_answer_on_every_backend(node, backend):
    if backend in ("microvm", "vm") and QEMU is None:
        pytest.skip("qemu-system-x86_64 is not installed on this machine")
    for cfg, stdin in CASES:
        out = run_program(node.client, backend, PROGRAM, stdin,
                          {"cfg/params.json": json.dumps(cfg)})
        words = len(stdin.split())
        assert out["stdout"] == f"words {words} scale {cfg['scale'] * 2}\ncwd {CALL_DIR}\n", out
        if cfg["fail"]:
            assert out["exit_code"] == 1, out
            assert out["stderr"].startswith("warn\nTraceback (most recent call last):\n"), out
            assert f'File "{CALL_DIR}/main.py", line 9' in out["stderr"], out
            assert out["stderr"].endswith("ValueError: asked to fail\n"), out
        else:
            assert (out["exit_code"], out["stderr"]) == (cfg["code"], "warn\n"), out
        assert out["timed_out"] is False, out


@pytest.mark.parametrize("backend", ["container", "microvm", "vm"])
def test_a_call_on_a_paused_sandbox_resumes_it_on_every_backend(node, backend):
    """Transparent resume: a trainer back from preemption calls exec and files
    on sandboxes it paused, without resuming them itself."""
    if backend in ("microvm", "vm") and QEMU is None:
        pytest.skip("qemu-system-x86_64 is not installed on this machine")
    c = node.client
    sid = c.create_ok(["base/busybox@1"], backend=backend, memory_mb=256)
    try:
        assert c.put_file(sid, "/root/kept", b"kept")[0] in (200, 201, 204)
        sleeper = c.sh(sid, ["sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!"])["stdout"].strip()
        status, info = c.call("POST", f"/v1/sandboxes/{sid}/pause")
        assert status == 200 and info["state"] == "paused", info
        r = c.sh(sid, ["sh", "-c", f"cat /root/kept; kill -0 {sleeper} && echo ' alive'"])
        assert r["stdout"] == "kept alive\n", r
        assert c.get(sid)[1]["state"] == "running"
        assert c.call("POST", f"/v1/sandboxes/{sid}/pause")[0] == 200
        status, body = c.get_file(sid, "/root/kept")
        assert (status, body) == (200, b"kept")
        assert c.get(sid)[1]["state"] == "running"
    finally:
        c.delete(sid)
        c.created.remove(sid)
