# Red team, files: an agent that writes, chmods or sets xattrs on files of
# the lower layers changes only its own copy (overlay copy-up), never the
# shared layer, the host or a neighbour; protected paths (spec `protect`)
# refuse every kind of change; and the trainer's file API, raced by an
# agent swapping a path between a file and symlinks out of the root, never
# reads or writes outside the sandbox.
import http.client
import json
import os
import threading
import time
import urllib.parse
import uuid

from dsec_harness import detached_dirs_held

from .redteam import PYTHON, attack, wait_for

EPERM, ENOENT, EACCES, ETXTBSY, EROFS = 1, 2, 13, 26, 30

# Every way to change a file, as (name, python expression over `p`).
CHANGES = r"""
CHANGES = {
  "write": lambda p: os.close(os.open(p, os.O_WRONLY)),
  "truncate": lambda p: os.truncate(p, 0),
  "chmod": lambda p: os.chmod(p, 0o4777),
  "chown": lambda p: os.chown(p, 1000, 1000),
  "utime": lambda p: os.utime(p, (0, 0)),
  "setxattr_user": lambda p: os.setxattr(p, "user.redteam", b"x"),
  "setxattr_trusted_overlay": lambda p: os.setxattr(p, "trusted.overlay.redirect", b"/etc"),
  # A valid v2 file capability granting CAP_SYS_ADMIN (needs CAP_SETFCAP).
  "setxattr_security_capability": lambda p: os.setxattr(
      p, "security.capability", struct.pack("<IIIII", 0x02000001, 1 << 21, 0, 0, 0)),
  "rename": lambda p: os.rename(p, p + ".moved"),
  "unlink": lambda p: os.unlink(p),
  "link_into": lambda p: os.link("/tmp/redteam-src", os.path.dirname(p) + "/redteam-link"),
  "symlink_into": lambda p: os.symlink("/tmp", os.path.dirname(p) + "/redteam-sym"),
}
open("/tmp/redteam-src", "w").write("x")
"""


def test_lower_layer_write(client, py, host_files, neighbour, unharmed):
    got = attack(client, py, CHANGES + r"""
res = {}
for target in ("/usr/bin/python3.11", "/usr/bin/sha256sum", "/etc/passwd"):
    for name, fn in CHANGES.items():
        if name in ("rename", "unlink"):
            continue
        res[target + ":" + name] = err_of(fn, target)
out(res)
""")
    # Copy-up makes ordinary changes succeed on the sandbox's own copy; the
    # privileged xattrs (overlay's own metadata, file capabilities) never.
    for k, v in got.items():
        if k.endswith("setxattr_trusted_overlay") or k.endswith("setxattr_security_capability"):
            assert v == EPERM, f"{k}: {v} ({got})"
    assert got["/etc/passwd:write"] == 0, got  # the change did happen, inside only
    unharmed()  # host layer files (HostFiles) and the neighbour's busybox unchanged


PROTECT = {"readonly": ["/etc", "/usr/bin"], "hidden": ["/root"]}


def test_protected_write(client, unharmed):
    sid = client.create_ok([PYTHON], memory_mb=256, protect=PROTECT)
    got = attack(client, sid, CHANGES + r"""
res = {}
for target in ("/etc/passwd", "/usr/bin/python3.11"):
    for name, fn in CHANGES.items():
        res[target + ":" + name] = err_of(fn, target)
res["create"] = err_of(lambda: open("/etc/redteam-new", "w"))
# Undo the protection: remount, unmount, detach, open_tree + mount_setattr.
res["remount"] = -sc(165, b"none", b"/etc", None, 0x20 | 0x1000, None)  # MS_REMOUNT|MS_BIND
res["umount"] = -sc(166, b"/etc", 2)  # MNT_DETACH
res["open_tree"] = -sc(428, -100, b"/etc", 1)  # OPEN_TREE_CLONE
# Hidden: nothing to list, nothing to create.
try:
    res["hidden_list"] = os.listdir("/root")
except OSError as e:
    res["hidden_list"] = e.errno
res["hidden_create"] = err_of(lambda: open("/root/x", "w"))
out(res)
""")
    for k, v in got.items():
        if k == "hidden_list":
            assert v in ([], EACCES), f"/root not hidden: {v}"
        else:
            # ETXTBSY: python3.11 runs the attack, so writing it fails first.
            assert v in (EROFS, EPERM, EACCES, ETXTBSY), f"{k} not refused: {v} ({got})"
    assert client.sh(sid, ["cat", "/etc/passwd"])["stdout"].startswith("root:")
    unharmed()


SWAPPER = r"""
# Swaps /work/t between a regular file, a symlink to / and a symlink to the
# host secret, and /work/d between a directory and a symlink to the host
# dir, with atomic renameat2(RENAME_EXCHANGE), until /work/stop appears
# (and at least SWAPS times).
os.makedirs("/work/d", exist_ok=True)
open("/work/t", "w").write("sandbox-file")
os.symlink("/", "/work/.root")
os.symlink(SECRET, "/work/.secret")
os.symlink(HOSTDIR, "/work/.hostdir")
def exchange(a, b):
    return sc(316, -100, a.encode(), -100, b.encode(), 2)  # renameat2, RENAME_EXCHANGE
cycle = [("/work/t", "/work/.root"), ("/work/d", "/work/.hostdir"),
         ("/work/t", "/work/.root"), ("/work/t", "/work/.secret"),
         ("/work/d", "/work/.hostdir"), ("/work/t", "/work/.secret")]
open("/work/started", "w").close()
n, failed, t0 = 0, 0, time.monotonic()
while (n < SWAPS or not os.path.exists("/work/stop")) and time.monotonic() - t0 < 120:
    a, b = cycle[n % len(cycle)]
    failed += exchange(a, b) != 0
    n += 1
out({"swaps": n, "failed": failed})
"""


class KeepAlive:
    """One HTTP/1.1 connection for many requests (reconnects if dropped)."""

    def __init__(self, port):
        self.port, self.conn = port, None

    def request(self, method, path, body=None):
        for attempt in (0, 1):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                self.conn.request(method, path, body=body,
                                  headers={"Content-Type": "application/octet-stream"})
                r = self.conn.getresponse()
                return r.status, r.read()
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise


def test_file_api_symlink_race(client, node, host_files, unharmed):
    sid = client.create_ok([PYTHON], memory_mb=256)
    secret = str(host_files.secret)
    hostdir = str(host_files.dir)
    swaps = 10_000
    code = f"SECRET, HOSTDIR, SWAPS = {secret!r}, {hostdir!r}, {swaps}\n" + SWAPPER
    result = {}
    with open("/etc/passwd", "rb") as f:
        host_passwd = f.read()

    def swapper():
        result["r"] = attack(client, sid, code, timeout_s=150, check=False)

    t = threading.Thread(target=swapper)
    t.start()
    wait_for(lambda: client.get_file(sid, "/work/started")[0] == 200 or not t.is_alive(), 60,
             what="the swapper to start")
    http_ = KeepAlive(node.rest_port)
    base = f"/v1/sandboxes/{urllib.parse.quote(sid, safe='')}/files?path="
    statuses = {}
    reads = 0
    t0 = time.monotonic()
    try:
        i = 0
        while t.is_alive() or i < 200:
            for path in ("/work/t", "/work/d/f", "/work/t/etc/passwd"):
                body = f"trainer-{i}".encode()
                st, _ = http_.request("PUT", base + urllib.parse.quote(path), body)
                statuses[("PUT", st)] = statuses.get(("PUT", st), 0) + 1
                st, data = http_.request("GET", base + urllib.parse.quote(path))
                statuses[("GET", st)] = statuses.get(("GET", st), 0) + 1
                assert host_files.secret_value.encode() not in data, \
                    f"GET {path} returned the host secret"
                assert data != host_passwd, f"GET {path} returned the host's /etc/passwd"
                reads += st == 200
            i += 1
            if i == 300:  # enough rounds: let the swapper finish its count
                status, _ = client.put_file(sid, "/work/stop", b"")
            assert time.monotonic() - t0 < 170, "race test ran too long"
    finally:
        client.put_file(sid, "/work/stop", b"")
        t.join(180)
    r = result.get("r")
    assert r and r["exit_code"] == 0, f"swapper failed: {r}"
    done = json.loads(r["stdout"].splitlines()[-1])
    assert done["swaps"] >= swaps and done["failed"] == 0, done
    # Only in-sandbox outcomes: written/read (200/201/204), refused symlink
    # or non-file (400), missing (404). Never a 500.
    assert all(st in (200, 201, 204, 400, 404) for _, st in statuses), statuses
    assert reads > 0, statuses
    unharmed()  # host dir still holds only the secret, unchanged


def test_file_api_special_files(client, py, host_files, unharmed):
    # Objects the agent plants where the trainer will read or write: a FIFO
    # (would block an unguarded open), a unix socket, magic links into /proc
    # and absolute symlinks to host paths.
    attack(client, py, f"""
import socket
os.makedirs("/work", exist_ok=True)
os.mkfifo("/work/fifo")
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("/work/sock")
os.symlink("/proc/self/root", "/work/selfroot")
os.symlink("/proc/1/root", "/work/initroot")
os.symlink({str(host_files.secret)!r}, "/work/secret")
os.symlink({str(host_files.dir)!r}, "/work/hostdir")
out({{}})
""")
    for path in ("/work/fifo", "/work/sock", "/work/secret", "/work/selfroot/etc/passwd",
                 "/work/initroot/etc/passwd", "/work/hostdir/secret"):
        t0 = time.monotonic()
        st, body = client.get_file(py, path)
        assert st in (400, 404) or (st == 200 and host_files.secret_value.encode() not in body), \
            f"GET {path}: {st} {body!r}"
        st, body = client.put_file(py, path, b"trainer")
        assert st in (200, 201, 204, 400, 404), f"PUT {path}: {st} {body!r}"
        assert time.monotonic() - t0 < 10, f"{path} took {time.monotonic() - t0:.1f}s"
    unharmed()  # the host dir still holds only the unchanged secret


def test_setuid_and_devices_inert(client, py, node, unharmed):
    # The agent owns its upper dir on the host: a setuid-root copy of a shell
    # made inside must mean nothing on the host side of the mount (nor inside,
    # where no_new_privs holds anyway), and neither may a device node.
    got = attack(client, py, r"""
import shutil
shutil.copy("/bin/dash", "/tmp/rootshell")
os.chmod("/tmp/rootshell", 0o4755)
res = {"mode": oct(os.stat("/tmp/rootshell").st_mode & 0o7777),
       "mknod": err_of(os.mknod, "/tmp/sda", 0o600 | 0o60000, os.makedev(8, 0))}
out(res)
""")
    assert got["mknod"] == EPERM, got
    # The root is never mounted on the host; where it is mounted (the
    # sandbox's own namespace, and the node's detached view for file calls)
    # it is nosuid and nodev.
    rootfs = os.path.realpath(os.path.join(node.state_dir, "sandboxes", py, "rootfs"))
    with open("/proc/self/mountinfo") as f:
        assert not [l for l in f if l.split()[4] == rootfs], f"{rootfs} mounted on the host"
    inside = client.sh(py, "cat /proc/self/mountinfo")["stdout"].splitlines()
    opts = [l.split()[5].split(",") for l in inside if l.split()[4] == "/"]
    assert opts and "nosuid" in opts[-1] and "nodev" in opts[-1], inside
    views = [f"/proc/{node.proc.pid}/fd/{d.split()[1]}" for d in detached_dirs_held(node.proc.pid)]
    assert views, "the node holds no view of the sandbox root"
    for v in views:
        flags = os.statvfs(v).f_flag
        assert flags & os.ST_NOSUID and flags & os.ST_NODEV, f"node view {v}: flags {flags:#x}"
    unharmed()
