# The FnCall fork server: runs inside one pool sandbox (a container with
# base/python@3.11), started by the node as `python3 -c <this> <socket path>`.
#
# It preloads the interpreter and the common stdlib modules once (then
# gc.freeze(), so a child's collections never touch the shared heap), accepts
# ONE connection (the node's, through /proc/<init>/root), unlinks its socket so
# nothing in the sandbox can reach it, and then serves calls one at a time.
#
# Every call runs in a fresh process. For Python that process is forked
# *before* the call arrives (the "spare") by the zygote, a child of this
# server that does nothing but fork: the spare sets up its output pipes and
# streams and runs a small warm-up program, so most of the copy-on-write
# faults a fork costs (20-40 us each on a nested-virtualised host, hundreds per
# fork) are paid while the worker is idle, not on the call's path, and the
# server's own work never shares pages with a fresh fork. On the request the
# server writes the call directory and hands the spare a "go" with the stdin
# memfd; the spare runs the code, closes its output and reports its exit
# status on a status pipe before it exits, so the answer does not wait for the
# kernel to tear the process down. Bash calls are spawned with posix_spawn
# (vfork: no page tables copied), so no spare is kept while bash calls come.
#
# The answer goes out first; then the server kills every process left in the
# sandbox but the zygote (this server is the child subreaper), wipes every
# writable place, has the next spare forked and only then says "clean" (with
# the taint flag). The node sends the next call only to a clean worker; the root filesystem is
# read-only (the pool's protect.readonly list) except /tmp, /dev/shm, /dev
# and "/" itself: the first two are wiped, a change to the latter two marks
# the worker tainted and the node replaces the sandbox.
#
# This process runs as the sandbox's capability-less uid 0, like the calls.
# It is non-dumpable (so are its children until they exec), so a call cannot
# ptrace it or read its memory or fds.
#
# Wire format (both ways): u32 little-endian frame length, then fields, each
# a u32 length + bytes. Request: language, code, stdin, timeout_s (ascii),
# file count (ascii), then path, content pairs. Answers: "ack" once the
# request is read, then exit_code, timed_out, truncated, duration_ms,
# tainted (ascii), stdout, stderr, error; then "clean", tainted once the
# sandbox is reset and the next call may come.
import os, sys, socket, struct, time, signal, select, shutil, ctypes, builtins, io, gc
import fcntl, traceback, threading
# Preloaded for the calls: a child starts with these already imported.
import json, re, math, collections, itertools, functools, random, string, datetime
import typing, dataclasses, heapq, bisect, copy, decimal, fractions, statistics
import operator, enum, pathlib, textwrap, hashlib, base64, array, numbers
import unittest, argparse, csv, uuid, subprocess, tempfile, glob, contextlib, abc

CALL_DIR = "/tmp/call"
WIPED = ("/tmp", "/dev/shm")
OUT_CAP = 1 << 20
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "HOME": CALL_DIR, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
       "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}

libc = ctypes.CDLL(None, use_errno=True)


LOG_FD = 2  # the sandbox's log (the zygote keeps a copy above its fd 2)


def log(msg):
    os.write(LOG_FD, ("fncall server: %s\n" % msg).encode())


def high_fd(fd):
    """`fd` moved above the few numbers the zygote hands to its spares."""
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 16)
    os.close(fd)
    return new


def read_exact(conn, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def fields(payload):
    out, i = [], 0
    while i < len(payload):
        (n,) = struct.unpack_from("<I", payload, i)
        out.append(payload[i + 4:i + 4 + n])
        i += 4 + n
    return out


def frame(parts):
    body = b"".join(struct.pack("<I", len(p)) + p for p in parts)
    return struct.pack("<I", len(body)) + body


def fingerprint():
    # A call that adds, removes or replaces an entry of / or /dev changes the
    # directory's mtime; everything below them is read-only or wiped.
    return tuple(os.stat(p).st_mtime_ns for p in ("/", "/dev"))


STATUS_FD = 3
SPARE_WARM_TIMEOUT = 10.0
DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)
# Run by every spare before its call: compiles and runs a small program like
# a call's, so the pages a call writes are already copied.
WARM_UP = compile("import sys\nfor i in range(3):\n    print(i, 'x' * i, sep=':')\n"
                  "try:\n    raise ValueError(1)\nexcept ValueError:\n    pass\n",
                  "<warm-up>", "exec")


class Zygote:
    """The process spares are forked from: a child of the server, forked once
    after the preload, that does nothing but fork. Its pages stay shared and
    untouched, so neither it nor the server pays copy-on-write faults for the
    other's work; each spare pays only for the pages it writes itself (in its
    warm-up). It reaps its spares and reports their exit statuses."""

    def __init__(self):
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.exits = {}
        self.pid = os.fork()
        if self.pid == 0:
            self.sock.close()
            try:
                zygote_main(child)
            finally:
                os._exit(0)
        child.close()

    def _recv(self):
        msg, fds, _, _ = socket.recv_fds(self.sock, 64, 4)
        if not msg:
            raise EOFError("the zygote is gone")
        parts = msg.split()
        if parts[0] == b"exit":
            if len(self.exits) > 64:
                self.exits.clear()
            self.exits[int(parts[1])] = int(parts[2])
        return parts, fds

    def spare(self):
        """A new spare, once it is warm."""
        self.sock.send(b"spawn")
        while True:
            parts, fds = self._recv()
            if parts[0] == b"spare" and len(fds) == 4:
                spare = Spare(int(parts[1]), *fds)
                spare.ctl.settimeout(SPARE_WARM_TIMEOUT)
                try:
                    if spare.ctl.recv(16) == b"warm":
                        spare.ctl.settimeout(None)
                        return spare
                except OSError:
                    pass
                spare.close()
                raise EOFError("the spare did not get warm")

    def exit_status(self, pid):
        """The wait status of spare `pid` (which has exited)."""
        while pid not in self.exits:
            self._recv()
        return self.exits.pop(pid)

    def alive(self):
        """Running or waiting: not dead, not stopped or traced by a call."""
        try:
            with open("/proc/%d/stat" % self.pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0] in ("S", "R", "D")
        except OSError:
            return False


CTL_FD = 4  # a spare's end of its control socket


def zygote_main(sock):
    global LOG_FD
    libc.prctl(36, 0, 0, 0, 0)  # orphans of the calls go to the server
    sock = socket.socket(fileno=high_fd(sock.detach()))
    LOG_FD = fcntl.fcntl(2, fcntl.F_DUPFD_CLOEXEC, 16)
    try:
        zygote_loop(sock)
    except BaseException:
        log("zygote: " + traceback.format_exc())


def zygote_loop(sock):
    # What every call process needs and no call changes for the next one is
    # set up here once, so a spare inherits it instead of building it (each
    # object a spare builds costs it copy-on-write faults): the environment,
    # umask, signal dispositions and the text streams on fds 1 and 2 (which
    # are pointed at each spare's pipes just around its fork).
    os.environ.clear()
    os.environ.update(ENV)
    os.umask(0o022)
    for s in DEFAULT_SIGNALS:
        signal.signal(s, signal.SIG_DFL)
    devnull = high_fd(os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC))
    for fd in (1, 2, STATUS_FD, CTL_FD):
        os.dup2(devnull, fd, inheritable=False)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", write_through=True)
    sys.__stdout__, sys.__stderr__ = sys.stdout, sys.stderr
    sys.argv = ["main.py"]
    sys.path[0] = CALL_DIR
    r_wake, w_wake = (high_fd(fd) for fd in os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC))
    signal.set_wakeup_fd(w_wake)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    poll = select.poll()
    poll.register(sock.fileno(), select.POLLIN)
    poll.register(r_wake, select.POLLIN)
    gc.collect()
    gc.freeze()
    while True:
        try:
            ready = poll.poll()
        except InterruptedError:
            ready = []
        for fd, _ in ready:
            if fd == r_wake:
                while True:
                    try:
                        os.read(r_wake, 256)
                    except BlockingIOError:
                        break
                while True:
                    try:
                        pid, st = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    sock.send(b"exit %d %d" % (pid, st))
                continue
            try:
                if not sock.recv(16):
                    return
            except ConnectionResetError:  # the server is gone
                return
            ctl_parent, ctl_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            r_out, w_out = os.pipe()
            r_err, w_err = os.pipe()
            r_st, w_st = os.pipe()
            # The call's stdout and stderr pass to what it executes; the
            # status and control fds do not.
            for src, dst in ((w_out, 1), (w_err, 2), (w_st, STATUS_FD), (ctl_child.fileno(), CTL_FD)):
                os.dup2(src, dst, inheritable=dst < STATUS_FD)
            pid = os.fork()
            if pid == 0:
                spare_main()  # never returns
            for fd in (1, 2, STATUS_FD, CTL_FD):
                os.dup2(devnull, fd, inheritable=False)
            ctl_child.close()
            for fd in (w_out, w_err, w_st):
                os.close(fd)
            socket.send_fds(sock, [b"spare %d" % pid], [ctl_parent.fileno(), r_out, r_err, r_st])
            ctl_parent.close()
            for fd in (r_out, r_err, r_st):
                os.close(fd)


class Spare:
    """A forked, warmed process waiting for its one call."""

    def __init__(self, pid, ctl, r_out, r_err, r_status):
        self.pid, self.ctl = pid, socket.socket(fileno=ctl)
        self.r_out, self.r_err, self.r_status = r_out, r_err, r_status

    def go(self, stdin_fd):
        socket.send_fds(self.ctl, [b"go"], [stdin_fd])

    def close(self):
        self.ctl.close()
        for fd in (self.r_out, self.r_err, self.r_status):
            try:
                os.close(fd)
            except OSError:
                pass
        self.r_out = self.r_err = self.r_status = -1


def spare_main():
    # The fresh process of one call: fds 1, 2, STATUS_FD and CTL_FD are its
    # own (the zygote set them just before the fork). Never returns.
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.closerange(CTL_FD + 1, 65536)
        ctl = socket.socket(fileno=CTL_FD)
        sink = io.StringIO()
        exec(WARM_UP, {"__name__": "__warm__", "__builtins__": builtins,
                       "print": lambda *a, **k: print(*a, **dict(k, file=sink))})
        for stream in (sys.stdout, sys.stderr):  # touched now, not in the call
            stream.write("")
            stream.flush()
        compile("", "<warm-up>", "exec")
        ctl.send(b"warm")
        _, fds, _, _ = socket.recv_fds(ctl, 16, 1)
        if not fds:
            os._exit(0)  # the server closed: no call for this spare
        os.dup2(fds[0], 0)
        os.close(fds[0])
        ctl.close()
        os.chdir(CALL_DIR)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8",
                                     errors="surrogateescape")
        sys.__stdin__ = sys.stdin
        path = CALL_DIR + "/main.py"
        with open(path, "rb") as f:
            code = f.read().decode("utf-8", "surrogateescape")
        rc = 0
        try:
            compiled = compile(code, path, "exec")
            del code
            g = {"__name__": "__main__", "__file__": path, "__builtins__": builtins}
            exec(compiled, g)
        except SystemExit as e:
            if e.code is None:
                rc = 0
            elif isinstance(e.code, int):
                rc = e.code & 0xFF
            else:
                print(e.code, file=sys.stderr)
                rc = 1
        except BaseException:
            traceback.print_exc()
            rc = 1
        try:
            threading._shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        # Output first (EOF for the server), then the status: the answer does
        # not wait for this process's teardown.
        for fd in (1, 2):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.write(STATUS_FD, b"%d" % rc)
        except OSError:
            pass
        os._exit(rc)
    except BaseException:
        try:
            traceback.print_exc()
        finally:
            os._exit(127)


def sweep(keep):
    # Kills every process of the sandbox except init, this server and the
    # zygote (`keep`), and reaps the server's (it is the child subreaper:
    # orphans come here; the zygote reaps its spares).
    keep = {"1", str(os.getpid()), str(keep)}
    for _ in range(1000):
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        victims = [p for p in os.listdir("/proc") if p.isdigit() and p not in keep]
        if not victims:
            return True
        for p in victims:
            try:
                os.kill(int(p), signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.0002)
    return False


def wipe(path):
    ok = True
    for name in os.listdir(path):
        p = os.path.join(path, name)
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                # A call may have chmod'ed directories to 000: the owner can
                # give itself access back before removing them.
                os.chmod(p, 0o700)
                for root, dirs, _ in os.walk(p):
                    for d in dirs:
                        try:
                            os.chmod(os.path.join(root, d), 0o700, follow_symlinks=False)
                        except OSError:
                            pass
                shutil.rmtree(p)
            else:
                os.unlink(p)
        except OSError as e:
            log("wipe %s: %s" % (p, e))
            ok = False
    return ok and not os.listdir(path)


def drop_sysv_ipc():
    # SysV objects live in the sandbox's IPC namespace, not in a process.
    ok = True
    for kind, rm in (("shm", lambda i: libc.shmctl(i, 0, None)),
                     ("sem", lambda i: libc.semctl(i, 0, 0)),
                     ("msg", lambda i: libc.msgctl(i, 0, None))):
        try:
            with open("/proc/sysvipc/" + kind) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 1 and rm(int(cols[1])) != 0:
                ok = False
    return ok


def write_call_dir(lang, code, req, nfiles):
    os.mkdir(CALL_DIR, 0o755)
    for i in range(nfiles):
        rel = req[5 + 2 * i].decode("utf-8", "surrogateescape")
        p = os.path.normpath(os.path.join(CALL_DIR, rel))
        if not p.startswith(CALL_DIR + "/"):
            raise ValueError("file path %r leaves the call directory" % rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(req[6 + 2 * i])
    with open(CALL_DIR + ("/main.py" if lang == "python" else "/main.sh"), "wb") as f:
        f.write(code)


def spawn_bash(stdin_fd):
    # vfork-based: no copy of this server's page tables. Every fd of the
    # server is close-on-exec (PEP 446); only 0-2 pass.
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    os.chdir(CALL_DIR)
    try:
        pid = os.posix_spawn(
            "/bin/bash", ["bash", CALL_DIR + "/main.sh"], ENV, setsid=True,
            setsigdef=DEFAULT_SIGNALS,
            file_actions=[(os.POSIX_SPAWN_DUP2, stdin_fd, 0),
                          (os.POSIX_SPAWN_DUP2, w_out, 1),
                          (os.POSIX_SPAWN_DUP2, w_err, 2)])
    finally:
        os.chdir("/")
        os.close(w_out)
        os.close(w_err)
    return pid, r_out, r_err, None


class Output:
    def __init__(self):
        self.data = bytearray()
        self.truncated = False

    def add(self, data):
        room = OUT_CAP - len(self.data)
        if len(data) > room:
            self.truncated = True
            data = data[:max(room, 0)]
        self.data += data


def call(req, spare):
    """Runs one call; returns (answer fields, spare used)."""
    lang = req[0].decode()
    code, stdin_data = req[1], req[2]
    timeout = float(req[3].decode())
    nfiles = int(req[4].decode())
    write_call_dir(lang, code, req, nfiles)
    stdin_fd = os.memfd_create("stdin")
    if stdin_data:
        os.write(stdin_fd, stdin_data)
        os.lseek(stdin_fd, 0, 0)
    start = time.monotonic()
    used = None
    if lang == "bash":
        pid, r_out, r_err, r_status = spawn_bash(stdin_fd)
        pidfd = os.pidfd_open(pid)  # our child: it stays until we reap it
    else:
        used = spare or ZYGOTE.spare()
        # Before go: the zygote reaps a call that ends at once, and a pid
        # opened after that is gone (ESRCH) or someone else's.
        try:
            pidfd = os.pidfd_open(used.pid)
        except ProcessLookupError:  # the spare died while it waited
            used.close()
            used = ZYGOTE.spare()
            pidfd = os.pidfd_open(used.pid)
        used.go(stdin_fd)
        pid, r_out, r_err, r_status = used.pid, used.r_out, used.r_err, used.r_status
    os.close(stdin_fd)
    outs = {r_out: Output(), r_err: Output()}
    timed_out = False
    status = None
    deadline = start + timeout
    poll = select.poll()
    for fd in (r_out, r_err, pidfd) + ((r_status,) if r_status is not None else ()):
        poll.register(fd, select.POLLIN)
    open_pipes, exited = 2, False
    # Done when the process exited, or when it reported its status and closed
    # its output (background processes may hold the pipes open: no waiting).
    while not exited and not (status is not None and open_pipes == 0):
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            for kill in (os.killpg, os.kill):  # the group, and the child wherever it went
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            break
        for fd, _ in poll.poll(max(1, int(left * 1000))):
            if fd == pidfd:
                exited = True
                continue
            data = os.read(fd, 65536)
            if fd == r_status:
                poll.unregister(fd)
                try:
                    status = int(data.decode())
                except ValueError:
                    pass
                continue
            if not data:
                poll.unregister(fd)
                open_pipes -= 1
                continue
            outs[fd].add(data)
    for fd in (r_out, r_err):
        os.set_blocking(fd, False)
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not data:
                break
            outs[fd].add(data)
    if timed_out:
        exit_code = 137
    elif status is not None and not exited:
        exit_code = status
    else:
        st = ZYGOTE.exit_status(pid) if used else os.waitpid(pid, 0)[1]
        exit_code = os.waitstatus_to_exitcode(st)
        if exit_code < 0:
            exit_code = 128 - exit_code
    duration_ms = (time.monotonic() - start) * 1000.0
    os.close(pidfd)
    if used:
        used.close()
    else:
        os.close(r_out)
        os.close(r_err)
    out = [str(exit_code).encode(), b"1" if timed_out else b"0",
           b"1" if outs[r_out].truncated or outs[r_err].truncated else b"0",
           ("%.3f" % duration_ms).encode(), b"0",
           bytes(outs[r_out].data), bytes(outs[r_err].data), b""]
    return out, used


def reset():
    """Kills and reaps everything but init and this server, wipes the
    writable places; True if the sandbox is back to its baseline."""
    tainted = not (ZYGOTE.alive() and sweep(ZYGOTE.pid))
    for d in WIPED:
        tainted = (not wipe(d)) or tainted
    tainted = (not drop_sysv_ipc()) or tainted
    return not (tainted or fingerprint() != BASELINE)


def main():
    if os.getppid() != 1:
        sys.exit("fncall server: refusing to run outside a sandbox (its parent must be init)")
    libc.prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE 0
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    path = sys.argv[1]
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    srv.settimeout(60)
    conn, _ = srv.accept()
    srv.close()
    os.unlink(path)
    conn.settimeout(None)
    global BASELINE
    for d in WIPED:
        wipe(d)
    BASELINE = fingerprint()
    gc.collect()
    gc.freeze()
    global ZYGOTE
    ZYGOTE = Zygote()
    spare = ZYGOTE.spare()
    conn.sendall(frame([b"ready"]))
    while True:
        try:
            (n,) = struct.unpack("<I", read_exact(conn, 4))
            req = fields(read_exact(conn, n))
        except EOFError:
            return
        # Taken: from here on the call may run. A server that dies before
        # this frame lets the node retry the call on another worker.
        conn.sendall(frame([b"ack"]))
        python = req[0] == b"python"
        try:
            out, used = call(req, spare if python else None)
            if used is not spare and spare is not None:
                spare.close()  # a bash call: the spare is killed in the reset
        except Exception as e:
            # The call could not start (bad file, no memory): answer it and
            # let the node replace this worker.
            out = [b"-1", b"0", b"0", b"0", b"1", b"", b"", str(e).encode()]
        conn.sendall(frame(out))
        clean = reset()
        # The next spare, from the clean server, only while Python calls come.
        spare = None
        if python and clean:
            try:
                spare = ZYGOTE.spare()
            except (EOFError, OSError) as e:
                log("no spare: %s" % e)
                clean = False
        conn.sendall(frame([b"clean", b"0" if clean else b"1"]))


main()
