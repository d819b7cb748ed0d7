# Shell sessions (issue 26 part 2) on a microVM guest, whose init is the
# container init in guest mode: persistence, exact output, a timeout that
# interrupts the run, `exit` inside, pause/resume survival and close, in one
# sandbox with few calls (every microVM create burns CPU under TCG).

import urllib.parse

import pytest

from dsec_harness import BUSYBOX, _finish_node, assert_error, start_node
from test_microvm import BOOT_TIMEOUT_S, QEMU, guest_kernel  # noqa: F401

pytestmark = pytest.mark.skipif(QEMU is None,
                                reason="qemu-system-x86_64 is not installed on this machine")


@pytest.fixture(scope="module")
def vm_node(dsec_bin, store, guest_kernel):  # noqa: F811
    n = start_node(dsec_bin, store, DSEC_GUEST_DIR=guest_kernel,
                   DSEC_VM_BOOT_TIMEOUT_S=BOOT_TIMEOUT_S)
    yield n
    _finish_node(n)


def test_microvm_session(vm_node):
    c = vm_node.client
    sid = c.create_ok([BUSYBOX], backend="microvm", memory_mb=256)
    base = f"/v1/sandboxes/{urllib.parse.quote(sid, safe='')}/sessions"

    def run(ses, cmd, **kw):
        status, r = c.call("POST", f"{base}/{ses}/run", dict(cmd=cmd, **kw))
        assert status == 200, r
        return r

    try:
        # busybox has no bash: the shell that is not there is named.
        status, out = c.call("POST", base, {})
        assert_error(status, out, 400, "invalid_argument")
        assert "/bin/bash" in out["error"]["message"]
        status, s = c.call("POST", base, {"shell": "/bin/sh"})
        assert status == 201, s
        ses = s["id"]
        assert run(ses, "cd /tmp; export E=vm; f() { echo fn-$E; }; alias a='echo alias'")[
            "exit_code"] == 0
        r = run(ses, "pwd; f; a; printf no-newline")
        assert r["stdout"] == "/tmp\nfn-vm\nalias\nno-newline", r
        r = run(ses, "echo start; sleep 60", timeout_s=2)
        assert r["timed_out"] and r["exit_code"] == 130 and r["stdout"] == "start\n", r
        assert run(ses, "echo $E")["stdout"] == "vm\n"
        assert c.call("POST", f"/v1/sandboxes/{urllib.parse.quote(sid, safe='')}/pause")[0] == 200
        assert run(ses, "echo $E $(pwd)")["stdout"] == "vm /tmp\n"  # resumed first
        r = run(ses, "exit 4")
        assert r["exit_code"] == 4, r
        status, out = c.call("POST", f"{base}/{ses}/run", {"cmd": "true"})
        assert_error(status, out, 409, "conflict")
        status, s2 = c.call("POST", base, {"shell": "/bin/sh"})
        assert status == 201 and s2["id"] != ses
        assert run(s2["id"], "echo fresh")["stdout"] == "fresh\n"
        assert c.call("DELETE", f"{base}/{s2['id']}")[0] == 200
    finally:
        c.delete(sid)
