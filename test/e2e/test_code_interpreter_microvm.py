# The code interpreter on a microVM guest: the layer's start command runs the
# server in the guest (through the same init as a container), run_code keeps
# state, streams, reports errors and PNG results, and a timeout interrupts
# the cell. One sandbox, few calls: every microVM create burns CPU under TCG.

import base64

import pytest

from dsec_harness import _finish_node, import_sdk, start_node
from test_microvm import BOOT_TIMEOUT_S, QEMU, guest_kernel  # noqa: F401

dsec = import_sdk()

pytestmark = pytest.mark.skipif(QEMU is None,
                                reason="qemu-system-x86_64 is not installed on this machine")


@pytest.fixture(scope="module")
def vm_node(dsec_bin, store, guest_kernel):  # noqa: F811
    n = start_node(dsec_bin, store, DSEC_GUEST_DIR=guest_kernel,
                   DSEC_VM_BOOT_TIMEOUT_S=BOOT_TIMEOUT_S)
    yield n
    _finish_node(n)


def test_microvm_run_code(vm_node):
    c = dsec.Client(f"127.0.0.1:{vm_node.listen_port}")
    sb = c.create(["base/code-interpreter@1"], backend="microvm", memory_mb=768)
    try:
        assert sb.run_code("x = 1").error is None
        ex = sb.run_code("print('hi'); x + 1")
        assert ex.text == "2" and ex.stdout == "hi\n", ex
        ex = sb.run_code("1 / 0")
        assert ex.error.name == "ZeroDivisionError" and "Traceback" in ex.error.traceback
        ex = sb.run_code("import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])\nplt.show()",
                         timeout_s=300)
        pngs = [r["image/png"] for r in ex.results if "image/png" in r]
        assert pngs and base64.b64decode(pngs[0]).startswith(b"\x89PNG\r\n\x1a\n"), ex
        ex = sb.run_code("while True: pass", timeout_s=3)
        assert ex.timed_out and ex.error.name == "TimeoutError", ex
        assert sb.run_code("x * 10").text == "10"
        other = sb.code_context()
        assert sb.run_code("x", context=other).error.name == "NameError"
        sb.destroy()
        with pytest.raises(dsec.NotFound):
            sb.run_code("1")
    finally:
        sb.destroy()
        c.close()
