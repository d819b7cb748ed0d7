# Red team, the in-sandbox init and its control channel: agent processes
# cannot reach, trace or forge them. Init is not dumpable (its fds, memory,
# environment and exe are closed to the agent), the channel is a socket
# that only init holds (made by the node in the host's network namespace),
# and nothing listens inside the sandbox.
from .redteam import attack

EPERM, ENOENT, EACCES, ECONNREFUSED = 1, 2, 13, 111


def test_init_unreachable(client, py, unharmed):
    got = attack(client, py, r"""
res = {}
# (/proc/1/fd itself lists for uid 0, which owns it: numbers, no links.)
for rel in ("fdinfo", "map_files", "root", "cwd", "exe"):
    res[rel] = err_of(os.listdir if rel in ("fdinfo", "map_files") else os.readlink,
                      f"/proc/1/{rel}")
for n in os.listdir("/proc/1/fd"):
    res[f"fd{n}"] = err_of(os.open, f"/proc/1/fd/{n}", os.O_RDWR)
    res[f"fd{n}_link"] = err_of(os.readlink, f"/proc/1/fd/{n}")
res["mem"] = err_of(os.open, "/proc/1/mem", os.O_RDONLY)
res["maps"] = err_of(lambda: open("/proc/1/maps").read())
res["ptrace"] = -sc(101, 16, 1, 0, 0)
st = {l.split(":")[0]: l.split(":", 1)[1].strip() for l in open("/proc/1/status")}
res["uid"] = st["Uid"].split()[0]
out(res)
""")
    uid = got.pop("uid")
    assert uid == "0", uid
    # A non-dumpable process: every fd, map and link is refused, not missing.
    for k, v in got.items():
        want = EPERM if k == "ptrace" else EACCES
        assert v == want, f"/proc/1/{k}: errno {v}, want {want} ({got})"
    unharmed()


def test_channel_unreachable(client, py, unharmed):
    got = attack(client, py, r"""
import socket
res = {}
# No listening socket of any family inside the sandbox's network namespace.
listening = []
for line in open("/proc/net/unix").read().splitlines()[1:]:
    f = line.split()
    if int(f[3], 16) & 0x10000:  # __SO_ACCEPTCON
        listening.append(line)
for name in ("tcp", "tcp6"):
    for line in open(f"/proc/net/{name}").read().splitlines()[1:]:
        if line.split()[3] == "0A":  # TCP_LISTEN
            listening.append(name + " " + line)
res["listening"] = listening
# No socket file anywhere in the sandbox's filesystem.
socks = []
for top in ("/", ):
    for d, dirs, files in os.walk(top):
        if d.startswith(("/proc", "/sys", "/usr")):  # /usr: layer files only
            dirs[:] = []
            continue
        for f in files:
            p = os.path.join(d, f)
            try:
                if os.lstat(p).st_mode & 0o170000 == 0o140000:
                    socks.append(p)
            except OSError:
                pass
res["socket_files"] = socks
# Forge a frame: connect to the channel's abstract or path names.
errs = []
for name in ("\0dsec", "\0dsec-init", "/ctl.sock", "/run/dsec.sock"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    errs.append(err_of(s.connect, name))
    s.close()
res["connect"] = errs
out(res)
""")
    assert got["listening"] == [], got
    assert got["socket_files"] == [], got
    assert all(e in (ENOENT, ECONNREFUSED) for e in got["connect"]), got
    # The channel still works: init answers the node.
    assert client.sh(py, ["echo", "channel-ok"])["stdout"] == "channel-ok\n"
    unharmed()
