# The idle policy on a microVM guest: a guest with no call and an idle CPU is
# paused after idle_timeout_s, and a call resumes it with its files; a busy
# guest is not (the guest's own CPU count decides, not its QEMU's). One
# sandbox: every microVM create burns CPU under TCG.
import time

import pytest

from dsec_harness import BUSYBOX, wait_for
from test_microvm import QEMU, guest_kernel, vm_node  # noqa: F401

pytestmark = pytest.mark.skipif(QEMU is None,
                                reason="qemu-system-x86_64 is not installed on this machine")


def test_an_idle_microvm_is_paused_and_a_call_resumes_it(vm_node):
    c = vm_node.client
    sid = c.create_ok([BUSYBOX], backend="microvm", memory_mb=256, idle_timeout_s=5)
    try:
        c.sh(sid, "echo kept > /tmp/f", timeout_s=60)

        def state():
            return c.get(sid)[1].get("state")
        wait_for(lambda: state() == "paused", 90, what=f"microVM {sid} paused when idle")
        assert c.sh(sid, "cat /tmp/f", timeout_s=60)["stdout"] == "kept\n"
        assert state() == "running"
        # A guest whose CPU is busy is not idle, though no call comes.
        c.sh(sid, "(while :; do :; done) >/dev/null 2>&1 &", timeout_s=60)
        time.sleep(12)
        assert state() == "running", "a busy microVM guest was taken for idle"
    finally:
        c.call("DELETE", f"/v1/sandboxes/{sid}")
        c.created.remove(sid)
