# Red team, sudo without setuid (issue 27; backends/init/sudo_proto.hpp): in a
# sandbox of E2B's base (base/e2b@1 + toolkit/e2b-sudo@1) `user` may become
# root through dsec-init's sudo socket. Root there is what every native exec
# already is (uid 0, no capabilities, no_new_privs, the seccomp filter), so
# the sudo path must reach nothing more: the same privileges and the same
# refusals as a root exec; a user the policy does not name is refused at
# accept, before init reads a byte of its request; malformed requests of a
# permitted user are answered and init keeps serving; no setuid file and no
# file a user could change decides anything; a killed sudo leaves no root
# process behind.
import json
import subprocess
import time

import pytest

from .redteam import PRELUDE

E2B_LAYERS = ["base/e2b@1", "toolkit/e2b-sudo@1"]


@pytest.fixture(scope="module")
def e2b_layers(dsec_bin, store):
    """E2B's base and its sudo: built by `dsec layer defaults --e2b` when the store lacks
    them (a debootstrap of a few minutes, once; the sudo layer takes seconds)."""
    p = subprocess.run([dsec_bin, "layer", "defaults", "--e2b", "--store", store],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    assert p.returncode == 0, p.stdout[-3000:]
    return E2B_LAYERS


@pytest.fixture
def e2b(client, e2b_layers):
    return client.create_ok(layers=e2b_layers)


def run_py(client, sid, code, user=None, sudo=False):
    """Runs PRELUDE + code with python3 as `user` (sudo'd if asked); its last JSON line."""
    path = f"/tmp/probe-{time.monotonic_ns()}.py"
    status, body = client.put_file(sid, path, (PRELUDE + code).encode())
    assert status in (200, 201, 204), body
    client.sh(sid, ["chmod", "644", path])
    argv = (["sudo", "python3", path] if sudo else ["python3", path])
    r = client.sh(sid, argv, user=user) if user else client.sh(sid, argv)
    assert r["exit_code"] == 0, r
    return json.loads([l for l in r["stdout"].splitlines() if l.startswith("{")][-1])


PROBE = r"""
st = {l.split(":")[0]: l.split(":", 1)[1].strip() for l in open("/proc/self/status")}
res = {k: st[k] for k in ("Uid", "Gid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
                          "NoNewPrivs", "Seccomp", "Seccomp_filters")}
res["ns"] = {n: os.readlink(f"/proc/self/ns/{n}") for n in sorted(os.listdir("/proc/self/ns"))}
res["cgroup"] = open("/proc/self/cgroup").read()
res["mounts"] = len(open("/proc/self/mountinfo").read().splitlines())
MS_BIND, CLONE_NEWNS, CLONE_NEWUSER = 4096, 0x20000, 0x10000000
res["mount"] = -sc(165, b"none", b"/mnt", b"tmpfs", 0, 0)
res["bind"] = -sc(165, b"/", b"/mnt", 0, MS_BIND, 0)
res["unshare_user"] = -sc(272, CLONE_NEWUSER)
res["unshare_mnt"] = -sc(272, CLONE_NEWNS)
res["chroot"] = err_of(os.chroot, "/tmp")
res["ptrace_init"] = -sc(101, 16, 1, 0, 0)
res["init_mem"] = err_of(os.open, "/proc/1/mem", os.O_RDONLY)
res["mknod"] = err_of(os.mknod, "/tmp/probe-dev", 0o600 | 0o020000, os.makedev(1, 1))
res["kill_init"] = err_of(os.kill, 1, 0)
out(res)
"""


def test_sudo_reaches_nothing_root_could_not(client, e2b, unharmed):
    """`sudo` from `user` and a native root exec: the same ids, capability sets, filter,
    namespaces and cgroups, and the same refusals."""
    native = run_py(client, e2b, PROBE)
    sudoed = run_py(client, e2b, PROBE, user="user", sudo=True)
    assert sudoed == native, {k: (native[k], sudoed.get(k)) for k in native if native[k] != sudoed.get(k)}
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(sudoed[cap], 16) == 0, sudoed
    assert sudoed["NoNewPrivs"] == "1" and sudoed["Seccomp"] == "2", sudoed
    for k in ("mount", "bind", "unshare_user", "unshare_mnt", "chroot", "ptrace_init", "init_mem",
              "mknod"):
        assert sudoed[k] != 0, (k, sudoed)
    plain = run_py(client, e2b, PROBE, user="user")
    assert plain["Uid"].split()[0] == "1000" and sudoed["Uid"].split()[0] == "0"
    unharmed()


FORGE = r"""
import socket, array
def ask(payload, fds=(0, 1, 2)):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect("/dev/dsec-sudo")
    try:
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        s.sendmsg([payload], anc)
    except OSError:
        pass
    answer = b""
    for _ in range(3):
        try:
            answer = s.recv(4096)
            break
        except ConnectionResetError:
            continue
    s.close()
    return answer.decode(errors="replace")
def req(argv, user="", cwd="/"):
    parts = ["dsec-sudo 1", user, cwd, str(len(argv)), *argv, "0"]
    return b"".join(p.encode() + b"\0" for p in parts)
res = {"uid": os.getuid()}
res["forged"] = ask(req(["/bin/sh", "-c", "touch /forged"], user="0"))
res["garbage"] = ask(b"\xff" * 64)
res["no_fds"] = ask(req(["/bin/true"]), fds=())
res["wrong_magic"] = ask(b"dsec-sudo 9\0\0/\0" + b"1\0/bin/true\0" + b"0\0")
res["lying_count"] = ask(b"dsec-sudo 1\0\0/\0" + b"9\0/bin/true\0")
res["huge"] = ask(b"x" * (150 << 10))
res["relative_cwd"] = ask(req(["/bin/true"], cwd="tmp"))
res["no_user"] = ask(req(["/bin/true"], user="ghost"))
time.sleep(0.2)
res["forged_ran"] = os.path.exists("/forged")
out(res)
"""


def test_an_unlisted_user_is_refused_before_init_reads(client, e2b, unharmed):
    got = run_py(client, e2b, FORGE, user="nobody")
    assert got["uid"] == 65534
    assert got["forged_ran"] is False, got
    for k in ("forged", "garbage", "no_fds", "wrong_magic", "lying_count", "huge", "relative_cwd",
              "no_user"):
        # The same answer whatever was sent: decided by uid at accept.
        assert got[k].startswith("Esudo: uid 65534 may not use sudo"), (k, got)
    unharmed()


def test_malformed_requests_of_a_listed_user_are_answered(client, e2b, unharmed):
    got = run_py(client, e2b, FORGE, user="user")
    assert got["uid"] == 1000
    want = {"garbage": "NUL-terminated", "no_fds": "descriptors", "wrong_magic": "dsec-sudo 1",
            "lying_count": "truncated", "huge": "larger than", "relative_cwd": "not absolute",
            "no_user": "ghost"}
    for k, text in want.items():
        assert got[k].startswith("Esudo: ") and text in got[k], (k, got[k])
    # The forged request was a valid one from a permitted user: it ran, as root.
    assert got["forged"].startswith("X0"), got
    assert client.sh(e2b, "stat -c %U /forged")["stdout"] == "root\n"
    # Init still serves.
    assert client.sh(e2b, "sudo whoami", user="user")["stdout"] == "root\n"
    unharmed()


def test_nothing_setuid_or_user_writable_decides(client, e2b, unharmed):
    r = client.sh(e2b, "stat -c '%a %U' /usr/bin/sudo /etc/dsec/sudo-users /dev/dsec-sudo /dev")
    assert r["stdout"] == "755 root\n644 root\n666 root\n755 root\n", r
    r = client.sh(e2b, "echo nobody >> /etc/dsec/sudo-users; echo rc=$?; "
                  "rm -f /dev/dsec-sudo; echo rc=$?; find / -xdev -perm -4000 2>/dev/null | "
                  "grep -c . || true", user="user")
    assert "rc=0" not in r["stdout"].splitlines()[:2], r
    assert client.sh(e2b, "grep -v '^#' /etc/dsec/sudo-users")["stdout"] == "user\n"
    assert client.sh(e2b, "stat -c %F /dev/dsec-sudo")["stdout"] == "socket\n"
    # The layers' setuid files (Debian's su, mount...) are inert: no_new_privs.
    r = client.sh(e2b, "su -c id root </dev/null; echo rc=$?", user="user")
    assert "uid=0" not in r["stdout"], r
    unharmed()


def test_a_killed_sudo_leaves_no_root_process(client, e2b, unharmed):
    status, r = client.exec(e2b, "sudo sleep 300", user="user", timeout_s=1)
    assert status == 200 and r["timed_out"] is True, r
    left = "1"
    for _ in range(50):
        left = client.sh(e2b, "pgrep -u root -x sleep | wc -l")["stdout"].strip()
        if left == "0":
            break
        time.sleep(0.1)
    assert left == "0", "the sudo'd sleep outlived its killed sudo"
    unharmed()
