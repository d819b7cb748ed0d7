# The process features on a microVM guest, whose init is the container init
# in guest mode: survivors of a finished exec, a background command with its
# pid, output, wait and kill, the process table and kill by pid. One sandbox,
# few calls: every microVM create burns CPU under TCG.

import time
import urllib.parse

import pytest

from dsec_harness import BUSYBOX, _finish_node, assert_error, start_node, wait_for
from test_microvm import BOOT_TIMEOUT_S, QEMU, guest_kernel  # noqa: F401

pytestmark = pytest.mark.skipif(QEMU is None,
                                reason="qemu-system-x86_64 is not installed on this machine")


@pytest.fixture(scope="module")
def vm_node(dsec_bin, store, guest_kernel):  # noqa: F811
    n = start_node(dsec_bin, store, DSEC_GUEST_DIR=guest_kernel,
                   DSEC_VM_BOOT_TIMEOUT_S=BOOT_TIMEOUT_S)
    yield n
    _finish_node(n)


def test_microvm_survivors_background_and_processes(vm_node):
    c = vm_node.client
    sid = c.create_ok([BUSYBOX], backend="microvm", memory_mb=256)
    q = urllib.parse.quote(sid, safe="")
    try:
        r = c.sh(sid, "setsid sleep 7101 >/dev/null 2>&1 & sh -c 'sleep 1; echo tick; sleep 7102' &")
        assert r["exit_code"] == 0, r
        status, p = c.call("POST", f"/v1/sandboxes/{q}/exec?background=1",
                           {"cmd": "echo $$; sleep 7103"})
        assert status == 201, p
        pid = p["pid"]
        time.sleep(2)
        status, out = c.call("GET", f"/v1/sandboxes/{q}/processes")
        assert status == 200, out
        cmds = {x["cmd"]: x for x in out["processes"]}
        for n in (7101, 7102, 7103):
            assert f"sleep {n}" in cmds, sorted(cmds)
        assert any(x["pid"] == pid and x["background"] for x in out["processes"]), out
        status, st = c.call("GET", f"/v1/sandboxes/{q}/processes/{pid}")
        assert status == 200 and st["stdout"] == f"{pid}\n", st
        victim = cmds["sleep 7101"]["pid"]
        assert c.call("DELETE", f"/v1/sandboxes/{q}/processes/{victim}")[0] == 200
        status, out = c.call("DELETE", f"/v1/sandboxes/{q}/processes/1")
        assert_error(status, out, 400, "invalid_argument")
        assert c.call("POST", f"/v1/sandboxes/{q}/processes/{pid}/kill?group=1",
                      {"signal": 15})[0] == 200
        status, st = c.call("GET", f"/v1/sandboxes/{q}/processes/{pid}?wait=1&timeout_s=30")
        assert st["state"] == "exited" and st["exit_code"] == 128 + 15, st
        wait_for(lambda: "sleep 7101" not in c.sh(sid, "ps -o args")["stdout"], 15,
                 what="the killed sleep to go")
    finally:
        c.delete(sid)
