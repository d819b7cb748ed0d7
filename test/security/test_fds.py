# Red team, descriptors and environment: an exec'd process holds exactly
# 0, 1 and 2 (pipes or /dev/null from init), and so do its children and
# threads; nothing of the node (sockets, the init memfd, layer or state
# files) is inherited, and neither is the node's environment.
from .redteam import CANARY_ENV, CANARY_VALUE, attack

EACCES = 13


def test_fds_leaked(client, py, node, unharmed):
    got = attack(client, py, r"""
def fds(pid):
    out = {}
    d = f"/proc/{pid}/fd"
    for n in os.listdir(d):
        try:
            out[n] = os.readlink(f"{d}/{n}")
        except OSError:
            pass
    return out
res = {"self": fds("self")}
# A grandchild through a shell (what an agent's tool would be).
kid = os.fork()
if kid == 0:
    os.execv("/bin/sh", ["sh", "-c", "ls -l /proc/self/fd/ > /tmp/kid-fds 2>&1"])
os.waitpid(kid, 0)
res["grandchild"] = open("/tmp/kid-fds").read()
# Init's descriptors: names may list (uid 0 owns the dir), links must not open.
res["init"] = sorted({err_of(os.readlink, f"/proc/1/fd/{n}") for n in os.listdir("/proc/1/fd")}
                     | {err_of(os.open, f"/proc/1/fd/{n}", os.O_RDONLY)
                        for n in os.listdir("/proc/1/fd")})
out(res)
""")
    mine = got["self"]
    # The listing's own directory fd shows up as /proc/<pid>/fd; drop it.
    inherited = {n: t for n, t in mine.items() if "/fd" not in t}
    assert sorted(inherited, key=int) == ["0", "1", "2"], f"fds of an exec: {mine}"
    for n, t in inherited.items():
        assert t.startswith("pipe:") or t == "/dev/null", f"fd {n} is {t}"
    kid = [l.split()[-3] for l in got["grandchild"].splitlines()
           if "->" in l and "/fd" not in l.split()[-1]]
    assert sorted(kid, key=int) == ["0", "1", "2"], got["grandchild"]
    assert got["init"] == [EACCES], got
    unharmed()


def test_node_env_not_leaked(client, py, unharmed):
    got = attack(client, py, r"""
out({"environ": open("/proc/self/environ", "rb").read().decode(errors="replace"),
     "init_environ": err_of(lambda: open("/proc/1/environ", "rb").read())})
""")
    assert CANARY_VALUE not in got["environ"] and CANARY_ENV not in got["environ"], got
    assert got["init_environ"] == EACCES, got
    unharmed()
