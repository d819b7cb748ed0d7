# A terminal on a microVM guest, whose init is the container init in guest
# mode with the same devpts setup: a shell with a controlling tty, stty size
# that follows a resize, Ctrl-C reaching the foreground job, reattach with
# scrollback, and the 409 of an exited terminal. One sandbox: every microVM
# create burns CPU under TCG.

import time

import pytest

from dsec_harness import BUSYBOX, _finish_node, import_sdk, start_node
from test_microvm import BOOT_TIMEOUT_S, QEMU, guest_kernel  # noqa: F401

pytestmark = pytest.mark.skipif(QEMU is None,
                                reason="qemu-system-x86_64 is not installed on this machine")

dsec = import_sdk()


@pytest.fixture(scope="module")
def vm_node(dsec_bin, store, guest_kernel):  # noqa: F811
    n = start_node(dsec_bin, store, DSEC_GUEST_DIR=guest_kernel,
                   DSEC_VM_BOOT_TIMEOUT_S=BOOT_TIMEOUT_S)
    yield n
    _finish_node(n)


def expect(t, pattern, timeout=60):
    got = t.read_until(pattern, timeout)
    assert pattern.encode() in got, f"no {pattern!r} within {timeout}s; got {got[-800:]!r}"


def test_microvm_terminal(vm_node):
    c = dsec.Client(f"127.0.0.1:{vm_node.listen_port}")
    try:
        sb = c.create([BUSYBOX], backend="microvm", memory_mb=256)
        try:
            t = sb.pty(cols=80, rows=24)  # busybox: the login shell is /bin/sh
            t.write("echo tty=$(tty); stty size\n")
            expect(t, "tty=/dev/pts/")
            expect(t, "24 80")
            t.resize(120, 33)
            t.write("stty size\n")
            expect(t, "33 120")
            t.write("sleep 100\n")
            time.sleep(1)
            t.write("\x03")
            t.write("echo vm-$((6*7))\n")
            expect(t, "vm-42")
            assert b"vm-42" in sb.pty_attach(t.pid).read_until("vm-42", 30)
            t.write("exit 4\n")
            assert t.wait(timeout=60).exit_code == 4
            with pytest.raises(dsec.Conflict):
                t.write("x")
        finally:
            sb.destroy()
    finally:
        c.close()
