# Red team, issue 29 part 4: the DSec report's recursive `grep` from `/` read
# /proc/kpagecgroup and crashed a whole node through a kernel bug. The
# kpage files (kpagecgroup, kpageflags, kpagecount: one entry per page of the
# HOST's memory) stay masked inside a sandbox: bound to /dev/null on every
# path that leads to them, reads at any offset get nothing, and the mask
# cannot be removed. On the host the same files hold data, so the mask is
# what stops the read. A recursive grep over / and a walk that reads every
# file under /proc (kpage files included) both finish. Then the
# node, a neighbour and the host are checked (the `unharmed` fixture).
import os

import pytest

from .redteam import attack

KPAGE = ["/proc/kpagecgroup", "/proc/kpageflags", "/proc/kpagecount"]
# Other ways to name the same files from inside.
PREFIXES = ["", "/proc/self/root", "/proc/1/root", "/proc/thread-self/root", "/proc/../proc/.."]


def host_reads(path):
    """Bytes the host reads from `path` at the offset of page 4096."""
    with open(path, "rb") as f:
        f.seek(4096 * 8)
        return len(f.read(64))


def test_kpage_files_stay_masked_on_every_path(client, py, unharmed):
    present = [p for p in KPAGE if os.path.exists(p)]
    if not present:
        pytest.skip("this kernel has no /proc/kpage* files (CONFIG_PROC_PAGE_MONITOR off)")
    for p in present:  # the host sees page data: the mask is what stops it
        assert host_reads(p) == 64, p
    got = attack(client, py, f"""
import stat
res = {{}}
for pre in {PREFIXES!r}:
    for p in {KPAGE!r}:
        path = pre + p
        r = res[path] = {{}}
        try:
            st = os.stat(path)
            r["chr"] = stat.S_ISCHR(st.st_mode)
            r["rdev"] = [os.major(st.st_rdev), os.minor(st.st_rdev)]
            fd = os.open(path, os.O_RDONLY)
            r["read"] = len(os.read(fd, 1 << 16))
            r["pread"] = [len(os.pread(fd, 64, off)) for off in (8, 4096 * 8, 1 << 33)]
            os.close(fd)
        except OSError as e:
            r["errno"] = e.errno
# Take a mask away: umount it, mount a fresh procfs without masks, or do
# that in new user and mount namespaces.
MNT_DETACH, CLONE_NEWNS, CLONE_NEWUSER = 2, 0x20000, 0x10000000
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_void_p]
res["umount"] = [libc.umount2(p.encode(), MNT_DETACH) == 0 or ctypes.get_errno()
                 for p in {KPAGE!r}]
os.makedirs("/tmp/freshproc", exist_ok=True)
def fresh_proc():
    if libc.mount(b"proc", b"/tmp/freshproc", b"proc", 0, None) != 0:
        return ctypes.get_errno()
    return True  # a procfs of its own at all is the failure
res["fresh_proc"] = fresh_proc()
res["unshare"] = libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0 or ctypes.get_errno()
res["fresh_proc_userns"] = fresh_proc() if res["unshare"] is True else res["unshare"]
out(res)
""")
    for path, r in got.items():
        if path in ("umount", "fresh_proc", "unshare", "fresh_proc_userns"):
            continue
        if "errno" in r:  # not there at all on this path is fine too
            assert r["errno"] in (2, 13, 1), (path, r)  # ENOENT, EACCES, EPERM
            continue
        assert r["chr"] and r["rdev"] == [1, 3], f"{path} is not /dev/null: {r}"
        assert r["read"] == 0 and r["pread"] == [0, 0, 0], f"{path} gave data: {r}"
    assert all(x is not True for x in got["umount"]), got["umount"]
    assert got["fresh_proc"] is not True and got["fresh_proc_userns"] is not True, got
    unharmed()


def test_recursive_grep_over_root_finishes_without_reaching_kernel_pages(client, py, unharmed):
    # GNU grep as an agent runs it (recursing, it skips devices and FIFOs,
    # so the masks themselves are not read; the walk below reads them).
    r = client.sh(py, ["sh", "-c", "grep -r -I -s -c dsec-needle-$$ / > /tmp/grep.out; "
                       "echo rc=$?; grep -c . /tmp/grep.out"],
                  timeout_s=900, timeout=1000)
    assert r["timed_out"] is False, f"grep over / did not finish: {r}"
    lines = r["stdout"].split()
    assert lines[0] in ("rc=1", "rc=2"), r  # no match; 2 = some files unreadable
    assert int(lines[1]) > 1000, f"grep read too few files to mean anything: {r}"
    # A walk that reads the start of every file under /proc, kpage files included.
    got = attack(client, py, """
res = {"files": 0, "bytes": 0, "kpage": {}}
for root, dirs, files in os.walk("/proc"):
    if root != "/proc" and os.path.basename(root).isdigit():
        dirs[:] = []
        continue
    for n in files:
        p = os.path.join(root, n)
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            k = len(os.read(fd, 1 << 16))
        except OSError:
            k = 0
        os.close(fd)
        res["files"] += 1
        res["bytes"] += k
        if n.startswith("kpage"):
            res["kpage"][p] = k
out(res)
""", timeout_s=600)
    assert got["files"] > 50, got
    assert all(v == 0 for v in got["kpage"].values()), got["kpage"]
    unharmed()
