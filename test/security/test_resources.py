# Red team, resources: an agent that tries to exhaust processes, memory,
# disk space, inodes, open files or CPU meets its own sandbox's limit; the
# node, a neighbour sandbox and the host feel nothing.
import os
import time

from .redteam import CGROUP_ROOTS, PYTHON, attack, cgroup_dirs, wait_for

EDQUOT, ENOSPC, EMFILE, EPERM, EAGAIN = 122, 28, 24, 1, 11


def cg_read(node, sid, controller, name):
    path = os.path.join(CGROUP_ROOTS[controller], "dsec", node.node_id, sid, name)
    with open(path) as f:
        return f.read()


def test_fork_bomb(client, node, unharmed):
    sid = client.create_ok(pids=48, memory_mb=256)
    t0 = time.monotonic()
    # The classic: every process starts two more, in the background.
    r = client.sh(sid, "f() { f | f & }; f; sleep 3; echo bomb-done", timeout_s=6)
    took = time.monotonic() - t0
    assert took < 30, f"fork bomb exec took {took:.1f}s to answer"
    peak = int(cg_read(node, sid, "pids", "pids.max").strip())
    assert peak == 48, peak
    # The limit held while the bomb ran: the pids controller counted failures.
    events = cg_read(node, sid, "pids", "pids.events") if os.path.exists(
        os.path.join(CGROUP_ROOTS["pids"], "dsec", node.node_id, sid, "pids.events")) else ""
    current = int(cg_read(node, sid, "pids", "pids.current"))
    assert current <= 48, current
    if events:
        assert int(events.split()[-1]) > 0, f"no fork was refused: pids.events {events!r} {r}"
    # The bomb outlives its exec (its processes are orphans in the sandbox),
    # still inside the limit; the trainer can always destroy the sandbox.
    assert int(cg_read(node, sid, "pids", "pids.current")) <= 48
    status, _ = client.delete(sid)
    assert status in (200, 204), status
    wait_for(lambda: not cgroup_dirs(node.node_id, sid), 20,
             what="the fork-bombed sandbox's cgroups removed")
    unharmed()


def wait_failed(client, sid, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, info = client.get(sid)
        if status == 200 and info["state"] != "running":
            return info
        time.sleep(0.1)
    return client.get(sid)[1]


def test_memory_bomb(client, node, unharmed):
    """An OOM anywhere takes the whole sandbox: it is reported failed with
    reason "oom", and nothing outside it is harmed."""
    sid = client.create_ok([PYTHON], memory_mb=64)
    limit = int(cg_read(node, sid, "memory", "memory.limit_in_bytes"))
    assert limit <= 64 << 20, limit
    status, r = attack(client, sid, r"""
# Several processes, each touching memory until the cgroup runs out.
for _ in range(3):
    if os.fork() == 0:
        hog = []
        while True:
            hog.append(bytearray(4 << 20))
os.wait()
""", timeout_s=60, check=None)
    assert status in (200, 503), (status, r)
    info = wait_failed(client, sid)
    assert info["state"] == "failed" and info.get("reason") == "oom", info
    assert client.exec(sid, "true")[0] == 503
    unharmed()


def test_memory_bomb_tmpfs(client, node, unharmed):
    """Memory no process owns: files in /dev/shm are charged to the sandbox's
    memory cgroup; filling it past the limit OOM-kills the sandbox."""
    sid = client.create_ok([PYTHON], memory_mb=64)
    status, r = client.exec(sid, ["sh", "-c", "dd if=/dev/zero of=/dev/shm/fill bs=1M count=256;"
                                              " echo rc=$?"], timeout_s=60)
    assert status in (200, 503), (status, r)
    info = wait_failed(client, sid, timeout=10)
    if info["state"] == "running":  # dd stopped short (ENOSPC/ENOMEM): nothing over the limit
        written = client.sh(sid, ["du", "-m", "/dev/shm/fill"], timeout_s=20)
        assert int(written["stdout"].split()[0]) <= 64, f"{written} in /dev/shm under 64 MiB"
    else:
        assert info["state"] == "failed" and info.get("reason") == "oom", info
    # However wedged the sandbox is, the trainer destroys it cleanly.
    status, _ = client.delete(sid)
    assert status in (200, 204), status
    wait_for(lambda: not cgroup_dirs(node.node_id, sid), 20, what="the sandbox's cgroups removed")
    unharmed()


def test_disk_fill(client, unharmed):
    sid = client.create_ok([PYTHON], memory_mb=256, disk_mb=32)
    got = attack(client, sid, r"""
buf = b"\xa5" * (1 << 20)
n, err = 0, 0
try:
    with open("/tmp/fill", "wb") as f:
        while n < 512:
            f.write(buf); f.flush(); os.fsync(f.fileno()); n += 1
except OSError as e:
    err = e.errno
out({"mb": n, "errno": err})
""", timeout_s=120)
    assert got["errno"] in (EDQUOT, ENOSPC), f"wrote {got['mb']} MB under disk_mb=32: {got}"
    assert got["mb"] <= 40, got
    # Freed space is usable again; the neighbour's writes never failed.
    assert client.sh(sid, "rm /tmp/fill && echo ok > /tmp/small && cat /tmp/small")[
        "stdout"] == "ok\n"
    unharmed()


def test_inode_fill(client, unharmed):
    sid = client.create_ok([PYTHON], memory_mb=256, disk_mb=8)
    got = attack(client, sid, r"""
# Empty files with long names: metadata only, no data blocks.
os.mkdir("/tmp/i")
dfd = os.open("/tmp/i", os.O_RDONLY)
stem = "x" * 200
n, err, t0 = 0, 0, time.monotonic()
try:
    while time.monotonic() - t0 < 40:
        for _ in range(500):
            os.close(os.open(f"/tmp/i/{stem}{n}", os.O_CREAT | os.O_WRONLY, 0o644))
            n += 1
        libc.syncfs(dfd)  # quota usage is counted at commit; this fs only
except OSError as e:
    err = e.errno
out({"files": n, "errno": err, "s": time.monotonic() - t0})
""", timeout_s=90)
    assert got["errno"] in (EDQUOT, ENOSPC), \
        f"{got['files']} empty files in {got['s']:.0f}s and no quota error: {got}"
    unharmed()


def test_open_files_limit(client, py, unharmed):
    got = attack(client, py, r"""
import resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
# Raw prlimit64 (python's resource module refuses before asking the kernel).
def prlimit(pid, soft, hard):
    new = struct.pack("QQ", soft, hard)
    return -sc(302, pid, resource.RLIMIT_NOFILE, new, None)
raise_err = prlimit(0, hard + 1, hard + 1)
prlimit_init = prlimit(1, 1 << 20, 1 << 20)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
fds, err = [], 0
try:
    while len(fds) < (1 << 21):
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e:
    err = e.errno
out({"soft": soft, "hard": hard, "raise": raise_err, "prlimit_init": prlimit_init,
     "opened": len(fds), "errno": err})
""")
    assert got["hard"] <= 65536, f"RLIMIT_NOFILE hard limit {got['hard']} (> 65536)"
    assert got["raise"] == EPERM, got
    assert got["prlimit_init"] == EPERM, got
    assert got["errno"] == EMFILE and got["opened"] <= got["hard"], got
    unharmed()


def test_cpu_limit(client, node, unharmed):
    sid = client.create_ok([PYTHON], memory_mb=128, cpu=0.5)
    got = attack(client, sid, r"""
# Four spinning processes for 2 s of wall time; their CPU time is what the
# cgroup let them have.
t0 = time.monotonic()
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            pass
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
t = os.times()
out({"cpu": t.children_user + t.children_system, "wall": time.monotonic() - t0})
""")
    assert got["cpu"] <= 0.5 * got["wall"] * 1.25 + 0.1, f"cpu=0.5 sandbox used {got}"
    quota = int(cg_read(node, sid, "cpu", "cpu.cfs_quota_us"))
    period = int(cg_read(node, sid, "cpu", "cpu.cfs_period_us"))
    assert abs(quota / period - 0.5) < 0.01, (quota, period)
    unharmed()


def test_core_dumps_off(client, py, unharmed):
    # A crash inside must not start the host's core_pattern helper (which
    # runs on the host as root): the core limit is 0 and cannot be raised.
    got = attack(client, py, r"""
import resource
soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
raise_err = -sc(302, 0, resource.RLIMIT_CORE, struct.pack("QQ", 1 << 30, 1 << 30), None)
pid = os.fork()
if pid == 0:
    os.kill(os.getpid(), signal.SIGSEGV)
_, st = os.waitpid(pid, 0)
out({"soft": soft, "hard": hard, "raise": raise_err, "cored": os.WCOREDUMP(st)})
""")
    assert got == {"soft": 0, "hard": 0, "raise": EPERM, "cored": False}, got
    unharmed()
