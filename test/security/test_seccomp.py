# Red-team checks of the seccomp filter from inside a python sandbox: ioctls
# that inject terminal input or swap/clone extents are refused, also when the
# request number carries high bits (the kernel reads 32 of them), and the
# namespace and mount families stay closed.
import json

PYTHON = "base/python@3.11"

PROBE = r"""
import ctypes, errno, fcntl, json, os
libc = ctypes.CDLL(None, use_errno=True)
def ioctl(fd, req, arg=0):
    r = libc.ioctl(fd, ctypes.c_ulong(req), ctypes.c_ulong(arg))
    return 0 if r == 0 else ctypes.get_errno()
a = os.open("/tmp/a", os.O_RDWR | os.O_CREAT); os.write(a, b"x" * 4096)
b = os.open("/tmp/b", os.O_RDWR | os.O_CREAT)
out = {
  "ficlone": ioctl(b, 0x40049409, a),
  "ficlonerange": ioctl(b, 0x4020940d, 0),
  "fideduperange": ioctl(a, 0xc0189436, 0),
  "xfs_swapext": ioctl(a, 0xc0c0586d, 0),
  "tiocsti": ioctl(0, 0x5412, 0),
  "tiocsti_high_bits": ioctl(0, (1 << 32) | 0x5412, 0),
  "unshare_user": 0 if libc.unshare(0x10000000) == 0 else ctypes.get_errno(),
  "mount": 0 if libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) == 0 else ctypes.get_errno(),
}
print(json.dumps(out))
"""


def test_dangerous_ioctls_and_syscalls_are_refused(client):
    sid = client.create_ok([PYTHON], memory_mb=256)
    client.put_file(sid, "/tmp/probe.py", PROBE.encode())
    r = client.sh(sid, "python3 /tmp/probe.py", timeout_s=60)
    assert r["exit_code"] == 0, r
    got = json.loads(r["stdout"])
    for name, err in got.items():
        assert err == 1, f"{name}: expected EPERM (1), got errno {err}: {got}"
