# Red team, /proc and /sys: reading host files through /proc (init's root,
# every fd of every visible process, file handles), poking the kernel
# (sysrq), and the kernel and host information a container must not see
# (the paths runc masks, kallsyms addresses, firmware tables, hostname).
import socket

from .redteam import attack

EPERM, ENOENT, EACCES, EROFS = 1, 2, 13, 30


def test_proc_root_escape(client, py, host_files, unharmed):
    secret = str(host_files.secret)
    got = attack(client, py, f"""
res = {{}}
pids = [p for p in os.listdir("/proc") if p.isdigit()]
for pid in pids + ["self", "thread-self"]:
    for rel in ("root", "cwd"):
        p = f"/proc/{{pid}}/{{rel}}{secret}"
        try:
            with open(p) as f:
                res[p] = "READ:" + f.read()
        except OSError as e:
            res[p] = e.errno
# Init's own root and cwd links: a non-dumpable process hides them.
res["readlink_1_root"] = err_of(os.readlink, "/proc/1/root")
res["listdir_1_root"] = err_of(os.listdir, "/proc/1/root/")
out(res)
""")
    leaked = {k: v for k, v in got.items() if isinstance(v, str)}
    assert not leaked, f"host file read through /proc: {leaked}"
    assert got["readlink_1_root"] == EACCES and got["listdir_1_root"] == EACCES, got
    unharmed()


def test_proc_fd_walk(client, py, node, unharmed):
    got = attack(client, py, r"""
res = {"opened": [], "denied": 0, "targets": []}
me = str(os.getpid())
for pid in [p for p in os.listdir("/proc") if p.isdigit() and p != me]:
    for kind in ("fd", "map_files"):
        try:
            names = os.listdir(f"/proc/{pid}/{kind}")
        except OSError as e:
            res["denied"] += 1
            res.setdefault("list_" + kind + "_" + pid, e.errno)
            continue
        for n in names:
            p = f"/proc/{pid}/{kind}/{n}"
            try:
                res["targets"].append(os.readlink(p))
            except OSError:
                pass
            try:
                fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
                res["opened"].append((p, os.readlink(f"/proc/self/fd/{fd}")))
                os.close(fd)
            except OSError:
                pass
out(res)
""")
    # Init (pid 1) is not dumpable: its map_files list is closed, and so is
    # every fd link (the fd dir itself lists for uid 0: numbers only).
    assert got.get("list_map_files_1") == EACCES, got
    assert not [p for p, _ in got["opened"] if p.startswith("/proc/1/")], got
    # Whatever else is visible (the exec's own shell, if any) holds nothing
    # of the host: no node paths, no control socket, no layer store.
    for _, target in got["opened"] + [(None, t) for t in got["targets"]]:
        assert node.state_dir not in target and "ctl.sock" not in target \
            and "dsec" not in target, f"host object reachable through /proc: {got}"
    unharmed()


def test_open_by_handle_at(client, py, unharmed):
    got = attack(client, py, r"""
# struct file_handle with room for a 128-byte handle.
buf = ctypes.create_string_buffer(8 + 128)
struct.pack_into("I", buf, 0, 128)
mnt = ctypes.c_int(0)
n2h = sc(303, -100, b"/etc/passwd", buf, ctypes.byref(mnt), 0)  # name_to_handle_at
# A forged handle of the root inode of the filesystem (ext4/btrfs style:
# type 1, inode 2): the "shocker" escape.
forged = ctypes.create_string_buffer(8 + 8)
struct.pack_into("IiQ", forged, 0, 8, 1, 2)
root = os.open("/", os.O_RDONLY)
obh = sc(304, root, forged, os.O_RDONLY)  # open_by_handle_at
out({"name_to_handle_at": n2h, "open_by_handle_at": obh})
""")
    assert got["open_by_handle_at"] == -EPERM, got
    assert got["name_to_handle_at"] == -EPERM, got
    unharmed()


def test_sysrq_trigger(client, py, unharmed):
    got = attack(client, py, r"""
res = {}
for mode in (os.O_WRONLY, os.O_RDWR):
    try:
        fd = os.open("/proc/sysrq-trigger", mode)
        try:
            os.write(fd, b"h")  # 'h' only prints help, harmless if it got through
            res[str(mode)] = 0
        except OSError as e:
            res[str(mode)] = e.errno
        os.close(fd)
    except OSError as e:
        res[str(mode)] = e.errno
res["sysctl"] = err_of(lambda: open("/proc/sys/kernel/sysrq", "w").write("1"))
res["core_pattern"] = err_of(lambda: open("/proc/sys/kernel/core_pattern", "w").write("|/x"))
out(res)
""")
    # ENOENT: a kernel without CONFIG_MAGIC_SYSRQ has no sysrq files at all.
    for k, v in got.items():
        want = (EROFS, EACCES, EPERM) if k == "core_pattern" else (EROFS, EACCES, EPERM, ENOENT)
        assert v in want, f"write {k} not refused: {got}"
    with open("/proc/sys/kernel/core_pattern") as f:
        assert not f.read().startswith("|/x")
    unharmed()


MASKED_FILES = ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
                "/proc/latency_stats", "/proc/kmsg", "/proc/kpagecount", "/proc/kpageflags",
                "/proc/kpagecgroup"]
MASKED_DIRS = ["/proc/acpi", "/proc/scsi", "/proc/asound", "/sys/firmware",
               "/sys/devices/virtual/powercap"]


def test_proc_sys_leaks(client, py, unharmed):
    got = attack(client, py, f"""
res = {{"files": {{}}, "dirs": {{}}}}
for p in {MASKED_FILES!r}:
    try:
        with open(p, "rb") as f:
            res["files"][p] = len(f.read(4096))
    except OSError as e:
        res["files"][p] = -e.errno
for p in {MASKED_DIRS!r}:
    try:
        res["dirs"][p] = os.listdir(p)
    except OSError as e:
        res["dirs"][p] = -e.errno
# kallsyms: readable, but every address must read as zero.
with open("/proc/kallsyms") as f:
    lines = f.read().splitlines()
res["kallsyms_lines"] = len(lines)
res["kallsyms_nonzero"] = [l for l in lines if int(l.split()[0], 16) != 0][:3]
res["sys_write"] = err_of(lambda: open("/sys/kernel/uevent_helper", "w").write("/x"))
out(res)
""")
    for p, n in got["files"].items():
        assert n <= 0, f"{p}: read {n} bytes (must be masked): {got}"
    for p, names in got["dirs"].items():
        assert names in ([], -ENOENT), f"{p} not masked: {names}"
    assert got["kallsyms_nonzero"] == [], f"kernel addresses leak: {got['kallsyms_nonzero']}"
    assert got["sys_write"] in (EROFS, EACCES, EPERM, ENOENT), got
    unharmed()


def test_host_info_leaks(client, py, unharmed):
    got = attack(client, py, r"""
res = {"hostname": os.uname().nodename}
with open("/proc/sys/kernel/hostname") as f:
    res["proc_hostname"] = f.read().strip()
with open("/proc/1/cmdline", "rb") as f:
    res["init_cmdline"] = f.read().decode(errors="replace")
res["net"] = sorted(os.listdir("/sys/class/net"))
res["cgroup_fs"] = sorted(os.listdir("/sys/fs/cgroup")) if os.path.isdir("/sys/fs/cgroup") else []
with open("/proc/self/cgroup") as f:
    res["cgroup"] = f.read()
res["environ"] = open("/proc/self/environ", "rb").read().decode(errors="replace")
out(res)
""")
    host = socket.gethostname()
    assert got["hostname"] != host and got["proc_hostname"] != host, got
    assert got["net"] == ["lo"], got
    assert got["cgroup_fs"] == [], f"host cgroup tree visible: {got['cgroup_fs']}"
    # The cgroup namespace hides the node's cgroup paths (dsec/<node>/<id>).
    assert "dsec" not in got["cgroup"], got["cgroup"]
    assert "dsec-init" in got["init_cmdline"] and "--state-dir" not in got["init_cmdline"], got
    unharmed()
