# Red team, processes: tracing or killing the sandbox's init or a
# neighbour's processes, overwriting the node's or init's binary through
# /proc/*/exe, injecting terminal input (TIOCSTI, TIOCLINUX), and the
# privilege state of every thread of every exec'd process (seccomp mode 2,
# no_new_privs, no capabilities), plus the system calls the filter refuses,
# also when reached through the 32-bit and x32 entry points.
import os

from .redteam import CGROUP_ROOTS, PYTHON, attack, wait_for

EPERM, ESRCH, EACCES, ENOSYS, EIO = 1, 3, 13, 38, 5


def test_ptrace_and_kill_init(client, py, unharmed):
    got = attack(client, py, r"""
res = {}
res["ptrace_attach"] = -sc(101, 16, 1, 0, 0)    # PTRACE_ATTACH
res["ptrace_seize"] = -sc(101, 0x4206, 1, 0, 0)  # PTRACE_SEIZE
iov = (ctypes.c_char * 64)()
local = struct.pack("QQ", ctypes.addressof(iov), 64)
remote = struct.pack("QQ", 0x400000, 64)
res["process_vm_readv"] = -sc(310, 1, local, 1, remote, 1, 0)
res["process_vm_writev"] = -sc(311, 1, local, 1, remote, 1, 0)
res["mem"] = err_of(os.open, "/proc/1/mem", os.O_RDWR)
res["environ"] = err_of(lambda: open("/proc/1/environ", "rb").read())
pidfd = sc(434, 1, 0)  # pidfd_open works on a visible pid...
res["pidfd_getfd"] = -sc(438, pidfd, 3, 0) if pidfd >= 0 else -pidfd  # ...but steals nothing
# Signals: init ignores what it has no handler for; SIGKILL from inside the
# namespace does not reach it.
for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP, signal.SIGSEGV):
    err_of(os.kill, 1, sig)
out(res)
""")
    assert got == {"ptrace_attach": EPERM, "ptrace_seize": EPERM, "process_vm_readv": EPERM,
                   "process_vm_writev": EPERM, "mem": EACCES, "environ": EACCES,
                   "pidfd_getfd": EPERM}, got
    # Init survived all of it and still runs commands.
    status, info = client.get(py)
    assert status == 200 and info["state"] == "running", info
    assert client.sh(py, ["echo", "init-alive"])["stdout"] == "init-alive\n"
    unharmed()


def procs(sb):
    """Command lines of the processes in sandbox `sb` (no ps in the layer)."""
    r = sb.client.sh(sb.sid, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '; true")
    return r["stdout"].replace(" ", "")


def test_ptrace_and_kill_neighbour(client, neighbour, unharmed):
    # A process in the neighbour to aim at (in the background: the exec
    # answers at once and the sleep lives on).
    nb = neighbour.client
    nb.sh(neighbour.sid, "sleep 60 >/dev/null 2>&1 &")
    try:
        wait_for(lambda: "sleep60" in procs(neighbour), 20, what="the neighbour's sleep")
        # The neighbour's processes by their host pids (what a leak of pid
        # numbers would give an agent), and every small pid number.
        procs_file = os.path.join(CGROUP_ROOTS["pids"], "dsec", neighbour.client_node_id,
                                  neighbour.sid, "cgroup.procs")
        with open(procs_file) as f:
            host_pids = [int(p) for p in f.read().split()]
        assert len(host_pids) >= 2, host_pids
        sid = client.create_ok([PYTHON], memory_mb=256)
        got = attack(client, sid, f"""
mine = {{int(p) for p in os.listdir("/proc") if p.isdigit()}}
hits = {{"kill": [], "ptrace": [], "pidfd": []}}
for pid in {host_pids!r} + list(range(2, 4096)):
    if pid in mine:
        continue
    if sc(62, pid, 0) != -3:  # kill(pid, 0): ESRCH = no such process here
        hits["kill"].append(pid)
    if sc(62, pid, 9) != -3:
        hits["kill"].append(pid)
    if sc(101, 16, pid, 0, 0) not in (-1, -3):  # PTRACE_ATTACH: EPERM (filter) or ESRCH
        hits["ptrace"].append(pid)
    if sc(434, pid, 0) != -3:  # pidfd_open
        hits["pidfd"].append(pid)
out(hits)
""", timeout_s=120)
        assert got == {"kill": [], "ptrace": [], "pidfd": []}, \
            f"processes outside the sandbox reachable: {got}"
        ps = procs(neighbour)
        assert "sleep60" in ps, f"the neighbour's process is gone: {ps}"
    finally:
        nb.sh(neighbour.sid, "for p in /proc/[0-9]*; do grep -qx sleep $p/comm 2>/dev/null"
                             " && kill ${p#/proc/}; done; true")
    unharmed()


def test_overwrite_binaries_via_proc_exe(client, py, host_files, unharmed):
    got = attack(client, py, r"""
res = {}
res["init_exe_write"] = err_of(os.open, "/proc/1/exe", os.O_WRONLY)
res["init_exe_readlink"] = err_of(os.readlink, "/proc/1/exe")
res["init_exe_read"] = err_of(os.open, "/proc/1/exe", os.O_RDONLY)
res["self_exe_write"] = err_of(os.open, "/proc/self/exe", os.O_WRONLY)
# Race: catch processes the node starts in here (exec) and open their exe.
seen, opened = set(), []
end = time.monotonic() + 2
kid = os.fork()
if kid == 0:
    for _ in range(20):
        os.spawnv(os.P_WAIT, "/bin/sh", ["sh", "-c", "true"])
    os._exit(0)
while time.monotonic() < end:
    for p in os.listdir("/proc"):
        if p.isdigit() and p not in seen:
            seen.add(p)
            try:
                fd = os.open(f"/proc/{p}/exe", os.O_WRONLY)
                opened.append(p)
                os.close(fd)
            except OSError:
                pass
os.waitpid(kid, 0)
res["opened_for_write"] = opened
out(res)
""")
    assert got["init_exe_write"] in (EACCES, EPERM), got
    assert got["init_exe_readlink"] == EACCES and got["init_exe_read"] == EACCES, got
    assert got["self_exe_write"] == 26, got  # ETXTBSY: a running binary
    assert got["opened_for_write"] == [], got
    unharmed()  # the dsec and dsec-init binaries on the host are unchanged


def test_tiocsti_and_tioclinux(client, py, unharmed):
    got = attack(client, py, r"""
import fcntl, pty, termios
master, slave = pty.openpty()
c = ctypes.c_char(b"x")
def ioctl(fd, req, arg):
    r = libc.ioctl(fd, ctypes.c_ulong(req), arg)
    return 0 if r == 0 else ctypes.get_errno()
res = {
  "tiocsti": ioctl(slave, termios.TIOCSTI, ctypes.byref(c)),
  "tiocsti_high_bits": ioctl(slave, (1 << 32) | termios.TIOCSTI, ctypes.byref(c)),
  "tiocsti_master": ioctl(master, termios.TIOCSTI, ctypes.byref(c)),
  "tioclinux": ioctl(slave, 0x541C, ctypes.byref(ctypes.c_char(b"\x06"))),
  "tioclinux_high_bits": ioctl(slave, (1 << 32) | 0x541C, ctypes.byref(ctypes.c_char(b"\x06"))),
}
# Nothing was injected: the master reads no 'x'.
os.set_blocking(master, False)
res["injected"] = err_of(os.read, master, 16) == 0
out(res)
""")
    assert got.pop("injected") is False, "TIOCSTI injected input"
    for k, v in got.items():
        assert v == EPERM, f"{k}: errno {v}, want EPERM from the seccomp filter ({got})"
    unharmed()


STATUS_KEYS = ("Seccomp", "NoNewPrivs", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


def test_seccomp_nnp_every_thread(client, py, unharmed):
    got = attack(client, py, r"""
import threading
keys = STATUS_KEYS
def fields(path):
    d = {}
    for line in open(path):
        k, _, v = line.partition(":")
        if k in keys:
            d[k] = v.strip()
    return d
stop = threading.Event()
threads = [threading.Thread(target=stop.wait) for _ in range(4)]
for t in threads:
    t.start()
res = {}
for tid in os.listdir("/proc/self/task"):
    res["self/" + tid] = fields(f"/proc/self/task/{tid}/status")
# A grandchild started by a shell, and init's own status (world-readable).
kid = os.fork()
if kid == 0:
    os.execv("/bin/sh", ["sh", "-c", "cat /proc/self/status > /tmp/child-status"])
os.waitpid(kid, 0)
res["grandchild"] = fields("/tmp/child-status")
for tid in os.listdir("/proc/1/task"):
    res["init/" + tid] = fields(f"/proc/1/task/{tid}/status")
stop.set()
out(res)
""".replace("STATUS_KEYS", repr(STATUS_KEYS)))
    assert len([k for k in got if k.startswith("self/")]) >= 5, got
    assert any(k.startswith("init/") for k in got), got
    for who, f in got.items():
        assert f.get("Seccomp") == "2", f"{who}: {f}"
        assert f.get("NoNewPrivs") == "1", f"{who}: {f}"
        for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            # Init alone keeps CAP_SETGID|CAP_SETUID (bits 6, 7) permitted,
            # never effective, to start execs as another user.
            allowed = 0xC0 if who.startswith("init/") and cap == "CapPrm" else 0
            assert int(f.get(cap, "1"), 16) == allowed, f"{who}: {cap} {f}"
    unharmed()


# (name, x86_64 number, args); every one must answer EPERM (clone3: ENOSYS,
# so libc falls back to clone, whose flags the filter can read).
DENIED = [
    ("mount", 165, (b"none", b"/tmp", b"tmpfs", 0, None)),
    ("umount2", 166, (b"/proc", 2)),
    ("pivot_root", 155, (b"/tmp", b"/tmp")),
    ("ptrace_traceme", 101, (0, 0, 0, 0)),
    ("bpf", 321, (0, None, 0)),
    ("perf_event_open", 298, (None, 0, -1, -1, 0)),
    ("kexec_load", 246, (0, 0, None, 0)),
    ("kexec_file_load", 320, (-1, -1, 0, None, 0)),
    ("keyctl", 250, (0, -3, 0)),
    ("add_key", 248, (b"user", b"redteam", b"x", 1, -3)),
    ("request_key", 249, (b"user", b"redteam", None, -3)),
    ("userfaultfd", 323, (0,)),
    ("io_uring_setup", 425, (8, None)),
    ("unshare_user", 272, (0x10000000,)),
    ("unshare_mount", 272, (0x00020000,)),
    ("clone_newuser", 56, (0x10000000 | 17, 0, 0, 0, 0)),
    ("setns", 308, (0, 0)),
    ("open_by_handle_at", 304, (-100, None, 0)),
    ("fsopen", 430, (b"tmpfs", 0)),
    ("open_tree", 428, (-100, b"/", 1)),
    ("move_mount", 429, (-100, b"/tmp", -100, b"/mnt", 0)),
    ("init_module", 175, (None, 0, b"")),
    ("finit_module", 313, (0, b"", 0)),
    ("reboot", 169, (0xfee1dead, 672274793, 0x1234567, None)),
    ("swapon", 167, (b"/tmp/x", 0)),
    ("syslog", 103, (3, None, 0)),
    ("clock_settime", 227, (0, None)),
]


def test_seccomp_denies(client, py, unharmed):
    got = attack(client, py, f"""
res = {{}}
for name, nr, args in {DENIED!r}:
    res[name] = -sc(nr, *args)
res["clone3"] = -sc(435, None, 0)
out(res)
""")
    want = {name: EPERM for name, _, _ in DENIED}
    want["clone3"] = ENOSYS
    assert got == want, {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
    unharmed()


def test_seccomp_other_abis(client, py, unharmed):
    """unshare(CLONE_NEWUSER) through int 0x80 (i386 numbers) and through the
    x32 bit: the filter matches x86_64 numbers only, so both must be killed
    or refused, never run."""
    got = attack(client, py, r"""
import mmap
def run_child(fn):
    pid = os.fork()
    if pid == 0:
        os._exit(100 if fn() == 0 else 101)
    _, st = os.waitpid(pid, 0)
    return ("signal", os.WTERMSIG(st)) if os.WIFSIGNALED(st) else ("exit", os.WEXITSTATUS(st))
# push rbx; mov eax, 310 (i386 unshare); mov ebx, CLONE_NEWUSER; int 0x80; pop rbx; ret
code = bytes.fromhex("53b836010000bb00000010cd805bc3")
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(code)
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
int80 = ctypes.CFUNCTYPE(ctypes.c_int)(addr)
res = {"int80": run_child(lambda: int80()),
       "x32": run_child(lambda: sc(0x40000000 | 272, 0x10000000))}
out(res)
""")
    for abi, (how, val) in got.items():
        # SIGSYS: the filter's wrong-architecture action; SIGSEGV: a kernel
        # without 32-bit emulation; exit 101: refused with an errno.
        assert (how, val) in (("signal", 31), ("signal", 11), ("exit", 101)), \
            f"unshare through {abi} not stopped: {how} {val}"
    unharmed()
