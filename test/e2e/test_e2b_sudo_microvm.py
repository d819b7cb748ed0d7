# E2B base's sudo (issue 27) on a microVM guest, whose init is the container
# init in guest mode: the same /dev/dsec-sudo socket, `user` becomes root
# with the guest's filter and no capabilities, another user is refused.
# One sandbox: every microVM create burns CPU under TCG.

import pytest

from dsec_harness import _finish_node, start_node
from test_microvm import BOOT_TIMEOUT_S, QEMU, guest_kernel  # noqa: F401

pytestmark = pytest.mark.skipif(QEMU is None,
                                reason="qemu-system-x86_64 is not installed on this machine")


@pytest.fixture(scope="module")
def vm_node(dsec_bin, store, guest_kernel, e2b_base):  # noqa: F811
    n = start_node(dsec_bin, store, DSEC_GUEST_DIR=guest_kernel,
                   DSEC_VM_BOOT_TIMEOUT_S=BOOT_TIMEOUT_S)
    yield n
    _finish_node(n)


def test_sudo_in_a_microvm(vm_node):
    c = vm_node.client
    sid = c.create_ok(layers=["base/e2b@1", "toolkit/e2b-sudo@1"], backend="microvm",
                      memory_mb=256)
    try:
        r = c.sh(sid, "whoami; sudo whoami; sudo grep -E '^(CapEff|NoNewPrivs):' /proc/self/status; "
                 "echo piped | sudo cat", user="user", timeout_s=120)
        assert r["stdout"] == "user\nroot\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\npiped\n", r
        r = c.sh(sid, "sudo true; echo rc=$?", user="nobody", timeout_s=60)
        assert r["stdout"] == "rc=1\n" and "may not use sudo" in r["stderr"], r
    finally:
        c.delete(sid)
