# FnCall (POST /v1/fncall): short programs from the node's warm pool of
# fork-server sandboxes (backends/fncall). Output, exit codes, stdin, files,
# timeouts; nothing carried from one call to the next (files, processes, env,
# IPC); isolation as strict as a container sandbox; 32 calls at once; a killed
# fork server is replaced; bad input gets a 4xx.

import concurrent.futures
import os
import signal
import time
import uuid

import pytest

from dsec_harness import _finish_node, assert_error, start_node, wait_for


@pytest.fixture(scope="module")
def fnode(dsec_bin, store):
    """A node whose pool warms at start and retires extra workers quickly."""
    n = start_node(dsec_bin, store, DSEC_FNCALL_PREWARM="1", DSEC_FNCALL_IDLE_MS="3000")
    yield n
    _finish_node(n)


def fncall(node, language, code, expect=200, **kw):
    body = {"language": language, "code": code}
    body.update(kw)
    status, out = node.client.call("POST", "/v1/fncall", body)
    if expect is not None:
        assert status == expect, f"fncall {code[:80]!r}: {status} {out}\n{node.log_tail(40)}"
    return out


def server_pids(node):
    """Host pids of the node's fork servers (found through /proc)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/cgroup") as f:
                cg = f.read()
        except OSError:
            continue
        if b"fncall-server.sock" in cmd and f"/dsec/{node.node_id}/" in cg:
            out.append(int(pid))
    # Each server's zygote runs the same command line: keep the servers.
    return [p for p in out if parent_pid(p) not in out]


def parent_pid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


# -- results -------------------------------------------------------------------

def test_python_stdout_stderr_exit_code(fnode):
    r = fncall(fnode, "python", "import sys\nprint('out')\nprint('err', file=sys.stderr)\n"
                                "sys.exit(3)\n")
    assert (r["exit_code"], r["stdout"], r["stderr"]) == (3, "out\n", "err\n"), r
    assert r["timed_out"] is False and r["truncated"] is False, r
    assert r["duration_ms"] > 0, r


def test_python_print_and_exception(fnode):
    r = fncall(fnode, "python", "print(1)")
    assert (r["exit_code"], r["stdout"], r["stderr"]) == (0, "1\n", ""), r
    r = fncall(fnode, "python", "x = 1\nprint('before')\n1 / 0\n")
    assert r["exit_code"] == 1 and r["stdout"] == "before\n", r
    assert "Traceback" in r["stderr"] and "ZeroDivisionError" in r["stderr"], r
    assert 'main.py", line 3' in r["stderr"], r
    r = fncall(fnode, "python", "def f(:\n")
    assert r["exit_code"] == 1 and "SyntaxError" in r["stderr"], r
    r = fncall(fnode, "python", "raise SystemExit('bye')")
    assert r["exit_code"] == 1 and r["stderr"] == "bye\n", r


def test_bash(fnode):
    r = fncall(fnode, "bash", "echo hi; echo oops >&2; exit 5")
    assert (r["exit_code"], r["stdout"], r["stderr"]) == (5, "hi\n", "oops\n"), r
    r = fncall(fnode, "bash", "kill -TERM $$")
    assert r["exit_code"] == 128 + signal.SIGTERM, r


def test_stdin(fnode):
    r = fncall(fnode, "python", "import sys\nprint(sum(map(int, sys.stdin.read().split())))",
               stdin="1 2 3\n4\n")
    assert r["stdout"] == "10\n", r
    r = fncall(fnode, "python", "print(input() + '!')", stdin="abc\n")
    assert r["stdout"] == "abc!\n", r
    r = fncall(fnode, "bash", "read a; read b; echo \"$b $a\"", stdin="x\ny\n")
    assert r["stdout"] == "y x\n", r
    r = fncall(fnode, "python", "import sys; print(repr(sys.stdin.read()))")
    assert r["stdout"] == "''\n", r


def test_files_and_working_directory(fnode):
    files = {"data/in.txt": "hello", "helper.py": "X = 41\n"}
    r = fncall(fnode, "python", "import os, helper\nprint(open('data/in.txt').read(), helper.X + 1,"
                                " os.getcwd())", files=files)
    assert r["stdout"] == "hello 42 /tmp/call\n", r
    r = fncall(fnode, "bash", "cat data/in.txt; echo; ls", files=files)
    assert r["stdout"].startswith("hello\n") and "main.sh" in r["stdout"], r


def test_output_is_capped(fnode):
    r = fncall(fnode, "python", "import sys\nsys.stdout.write('x' * (3 << 20))\nprint('done',"
                                " file=sys.stderr)")
    assert r["truncated"] is True and len(r["stdout"]) == 1 << 20, (r["truncated"], len(r["stdout"]))
    assert r["stderr"] == "done\n" and r["exit_code"] == 0


def test_timeout_kills_fast(fnode):
    t0 = time.monotonic()
    r = fncall(fnode, "python", "while True:\n    pass\n", timeout_s=1)
    took = time.monotonic() - t0
    assert r["timed_out"] is True and r["exit_code"] == 137, r
    assert took < 4, f"a 1 s timeout took {took:.1f} s"
    r = fncall(fnode, "bash", "echo start; sleep 100", timeout_s=0.5)
    assert r["timed_out"] is True and r["stdout"] == "start\n", r
    # The worker is fine afterwards.
    assert fncall(fnode, "python", "print(2)")["stdout"] == "2\n"


# -- nothing carries over ------------------------------------------------------

LEAVE_STATE = r"""
import os, subprocess, builtins, json, ctypes
wrote = []
for p in ['/tmp/leak', '/tmp/call/leak', '/dev/shm/leak', '/var/tmp/leak', '/root/leak',
          '/etc/leak', '/usr/leak', '/leak', '/dev/leak', '/work/leak', '/home/leak']:
    try:
        with open(p, 'w') as f:
            f.write('x')
        wrote.append(p)
    except OSError:
        pass
try:
    os.mkdir('/tmp/locked'); os.mkdir('/tmp/locked/inner'); os.chmod('/tmp/locked', 0)
except OSError:
    pass
subprocess.Popen(['sleep', '1000'], start_new_session=True)
subprocess.Popen('nohup sleep 1001 >/dev/null 2>&1 &', shell=True)
if os.fork() == 0:
    if os.fork() == 0:
        os.setsid()
        import time
        time.sleep(1002)
    os._exit(0)
os.environ['LEAK'] = '1'
builtins.LEAK = 1
json.dumps = None
libc = ctypes.CDLL(None)
shm = libc.shmget(0x5eed, 4096, 0o1666)
print(','.join(wrote), shm >= 0)
"""

CHECK_STATE = r"""
import os, builtins, json
paths = ['/tmp/leak', '/tmp/call/leak', '/dev/shm/leak', '/var/tmp/leak', '/root/leak',
         '/etc/leak', '/usr/leak', '/leak', '/dev/leak', '/work/leak', '/home/leak', '/tmp/locked']
left = [p for p in paths if os.path.lexists(p)]
me = os.getpid()
procs = []
# Besides init and this call: the fork server and its zygote (this call's
# parent), both `python3 -c <fork_server.py>`.
for p in os.listdir('/proc'):
    if p.isdigit() and int(p) not in (1, me):
        cmd = open('/proc/%s/cmdline' % p).read().replace('\0', ' ')
        if not cmd.startswith('/usr/bin/python3 -c # The FnCall fork server'):
            procs.append(cmd)
rows = open('/proc/sysvipc/shm').read().splitlines()[1:]
print(repr((left, procs, 'LEAK' in os.environ, hasattr(builtins, 'LEAK'),
            json.dumps is None, len(rows), sorted(os.listdir('/tmp')))))
"""


def test_no_state_carries_to_the_next_call(fnode):
    r = fncall(fnode, "python", LEAVE_STATE)
    assert r["exit_code"] == 0, r
    # Only the wiped places (and "/" itself, which retires the worker) took writes.
    wrote = set(r["stdout"].split()[0].split(","))
    assert wrote <= {"/tmp/leak", "/tmp/call/leak", "/dev/shm/leak", "/leak", "/dev/leak"}, r
    # Sequential calls go to the most recently used worker; several calls
    # reach every warm worker too.
    for _ in range(4):
        r2 = fncall(fnode, "python", CHECK_STATE)
        # /tmp holds only this call's own directory.
        assert r2["stdout"] == "([], [], False, False, False, 0, ['call'])\n", r2
    # From the host: none of the background sleeps survived.
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        assert not cmd.startswith(b"sleep\x00100"), f"pid {pid} survived: {cmd!r}"


@pytest.mark.parametrize("language,bomb", [
    ("bash", ":(){ :|:& };: ; sleep 1; echo survived"),
    ("python", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"),
])
def test_fork_bomb_is_swept(fnode, language, bomb):
    # The sandbox's pids limit stops the bomb, the timeout ends the call and
    # the reset kills every process it made; the next call finds only init,
    # the fork server, its zygote and itself.
    r = fncall(fnode, language, bomb, timeout_s=2)
    assert r["exit_code"] in (0, 137), r
    for _ in range(3):
        r = fncall(fnode, "python",
                   "import os; print(len([p for p in os.listdir('/proc') if p.isdigit()]))")
        assert r["stdout"] == "4\n", r


def test_bash_background_jobs_are_killed(fnode):
    r = fncall(fnode, "bash", "setsid sleep 1000 & (sleep 1001 &) ; nohup sleep 1002 >/dev/null "
                              "2>&1 & disown; echo started")
    assert r["stdout"] == "started\n", r
    r = fncall(fnode, "bash", "cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -c '[s]leep 10' || true")
    assert r["stdout"] == "0\n", r


# -- isolation -----------------------------------------------------------------

def test_isolation(fnode):
    marker = f"/tmp/dsec-fncall-host-{uuid.uuid4().hex}"
    with open(marker, "w") as f:
        f.write("host secret")
    try:
        code = f"""
import os, socket, ctypes, errno
out = []
try:
    open({marker!r}).read(); out.append('HOSTFILE')
except OSError:
    pass
s = socket.socket(); s.settimeout(2)
try:
    s.connect(('1.1.1.1', 80)); out.append('NET')
except OSError:
    pass
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x20000) == 0: out.append('UNSHARE')
if libc.mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0: out.append('MOUNT')
status = open('/proc/self/status').read()
if 'Seccomp:\\t2' not in status: out.append('NOSECCOMP')
if 'CapEff:\\t0000000000000000' not in status: out.append('CAPS')
ppid = os.getppid()
for p in ('/proc/%d/mem' % ppid, '/proc/%d/environ' % ppid):
    try:
        open(p, 'rb').read(1); out.append('READ ' + p)
    except OSError:
        pass
# The server's fds (its connection to the node) cannot be reached.
try:
    fds = os.listdir('/proc/%d/fd' % ppid)
except OSError:
    fds = []
for fd in fds:
    for get in (os.readlink, lambda p: os.close(os.open(p, os.O_RDONLY))):
        try:
            get('/proc/%d/fd/%s' % (ppid, fd)); out.append('SERVERFD ' + fd)
        except OSError:
            pass
print(out)
"""
        r = fncall(fnode, "python", code)
        assert r["stdout"] == "[]\n", r
    finally:
        os.unlink(marker)


# -- load and failures ---------------------------------------------------------

def test_32_parallel_calls(fnode):
    def one(i):
        return i, fncall(fnode, "python", f"import time; time.sleep(0.05); print({i} * 2)")
    with concurrent.futures.ThreadPoolExecutor(32) as ex:
        results = list(ex.map(one, range(32)))
    for i, r in results:
        assert r["exit_code"] == 0 and r["stdout"] == f"{i * 2}\n", (i, r)


def test_killed_fork_server_is_replaced(fnode):
    fncall(fnode, "python", "print(0)")
    pids = wait_for(lambda: server_pids(fnode), 20, what="fork servers")
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for i in range(6):
        r = fncall(fnode, "python", f"print({i})")
        assert r["stdout"] == f"{i}\n", r
    new = wait_for(lambda: server_pids(fnode), 20, what="replacement fork servers")
    assert not set(new) & set(pids), (pids, new)


GRANDPARENT = "int(open('/proc/%d/stat' % os.getppid()).read().rsplit(')', 1)[1].split()[1])"


@pytest.mark.parametrize("attack", [
    "os.kill(os.getppid(), signal.SIGKILL)",   # the zygote the call was forked from
    "os.kill(os.getppid(), signal.SIGSTOP)",   # a stopped zygote forks nothing
    f"os.kill({GRANDPARENT}, signal.SIGKILL)",  # the fork server
])
def test_call_that_kills_its_server(fnode, attack):
    # The call itself kills or stops the server's processes: that call may
    # fail, the worker is replaced, the next calls work.
    out = fncall(fnode, "python", "import os, signal\n" + attack, expect=None)
    assert isinstance(out, dict)
    for i in range(3):
        assert fncall(fnode, "python", f"print({i})")["stdout"] == f"{i}\n"


def test_pool_shrinks_back_when_idle(fnode):
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda i: fncall(fnode, "python", "import time; time.sleep(0.3)"), range(16)))
    grown = len(server_pids(fnode))
    assert grown > 2, f"the pool did not grow under load ({grown} servers)"
    wait_for(lambda: len(server_pids(fnode)) <= 2, 60, interval=0.5, what="the pool to shrink")


# -- bad input -----------------------------------------------------------------

@pytest.mark.parametrize("body,status,code", [
    ({"language": "ruby", "code": "puts 1"}, 400, "invalid_argument"),
    ({"code": "print(1)"}, 400, "invalid_argument"),
    ({"language": "python", "code": "x" * ((1 << 20) + 1)}, 413, "too_large"),
    ({"language": "python", "code": "print(1)", "timeout_s": 0}, 400, "invalid_argument"),
    ({"language": "python", "code": "print(1)", "timeout_s": 1000}, 400, "invalid_argument"),
    ({"language": "python", "code": "1", "files": {"../x": "a"}}, 400, "invalid_argument"),
    ({"language": "python", "code": "1", "files": {"a/../../x": "a"}}, 400, "invalid_argument"),
    ({"language": "python", "code": "1", "files": {"/etc/passwd": "a"}}, 400, "invalid_argument"),
    ({"language": "python", "code": "1", "memroy": 1}, 400, "invalid_argument"),
])
def test_bad_input(fnode, body, status, code):
    st, out = fnode.client.call("POST", "/v1/fncall", body)
    assert_error(st, out, status, code)


def test_wrong_method(fnode):
    st, out = fnode.client.call("GET", "/v1/fncall")
    assert st == 405, (st, out)


def test_fncall_is_not_a_sandbox_backend(fnode):
    # backend="fncall" on create says where FnCall is instead of a bare 400.
    st, out = fnode.client.call("POST", "/v1/sandboxes", {"backend": "fncall",
                                                          "layers": ["base/python@3.11"]})
    assert st == 400 and out["error"]["code"] == "invalid_argument", out
    assert "POST /v1/fncall" in out["error"]["message"], out
