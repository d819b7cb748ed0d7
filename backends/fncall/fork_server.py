# The FnCall fork server: runs inside one pool sandbox (a container with
# base/python@3.11), started by the node as `python3 -c <this> <socket path>`.
#
# It preloads the interpreter and the common stdlib modules once, accepts ONE
# connection (the node's, through /proc/<init>/root), unlinks its socket so
# nothing in the sandbox can reach it, and then serves calls one at a time:
# each call forks a fresh child (python: exec of the compiled code with fresh
# globals; bash: execve of /bin/bash), captures stdout/stderr up to a cap,
# enforces the timeout, then kills every process left in the sandbox
# (kill(-1) from the child subreaper) and wipes every writable place. The
# root filesystem is read-only (the pool's protect.readonly list) except /tmp,
# /dev/shm, /dev and "/" itself; the first two are wiped, a change to the
# latter two marks the worker tainted and the node replaces the sandbox.
#
# This process runs as the sandbox's capability-less uid 0, like the calls.
# It is non-dumpable, so a call cannot ptrace it or read its memory or fds.
#
# Wire format (both ways): u32 little-endian frame length, then fields, each
# a u32 length + bytes. Request: language, code, stdin, timeout_s (ascii),
# file count (ascii), then path, content pairs. Answers: "ack" once the
# request is read, then exit_code, timed_out,
# truncated, duration_ms, tainted (ascii), stdout, stderr, error.
import os, sys, socket, struct, time, signal, select, shutil, ctypes, builtins, io
import errno, traceback, threading
# Preloaded for the calls: a child starts with these already imported.
import json, re, math, collections, itertools, functools, random, string, datetime
import typing, dataclasses, heapq, bisect, copy, decimal, fractions, statistics
import operator, enum, pathlib, textwrap, hashlib, base64, array, numbers, time
import unittest, argparse, csv, uuid, subprocess, tempfile, glob, contextlib, abc

CALL_DIR = "/tmp/call"
WIPED = ("/tmp", "/dev/shm")
OUT_CAP = 1 << 20
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "HOME": CALL_DIR, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
       "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}

libc = ctypes.CDLL(None, use_errno=True)


def log(msg):
    os.write(2, ("fncall server: %s\n" % msg).encode())


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


def run_child(lang, code, stdin_fd, w_out, w_err, conn_fd):
    # The fresh process of one call. Never returns.
    try:
        os.setsid()
        os.dup2(stdin_fd, 0)
        os.dup2(w_out, 1)
        os.dup2(w_err, 2)
        os.closerange(3, 65536)
        os.chdir(CALL_DIR)
        os.umask(0o022)
        for s in (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(s, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(ENV)
        if lang == "bash":
            os.execve("/bin/bash", ["bash", CALL_DIR + "/main.sh"], ENV)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8",
                                     errors="surrogateescape")
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                      errors="backslashreplace", write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                      errors="backslashreplace", write_through=True)
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        sys.argv = ["main.py"]
        sys.path[0] = CALL_DIR
        path = CALL_DIR + "/main.py"
        rc = 0
        try:
            compiled = compile(code, path, "exec")
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
        os._exit(rc)
    except BaseException:
        try:
            traceback.print_exc()
        finally:
            os._exit(127)


def sweep():
    # Kills every process of the sandbox except init and this server, and
    # reaps them (the server is the child subreaper: orphans come here).
    for _ in range(100):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
            except InterruptedError:
                continue
        me = str(os.getpid())
        if all(p in ("1", me) for p in os.listdir("/proc") if p.isdigit()):
            return True
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


def call(req):
    lang = req[0].decode()
    code, stdin_data = req[1], req[2]
    timeout = float(req[3].decode())
    nfiles = int(req[4].decode())
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
    stdin_fd = os.memfd_create("stdin")
    os.write(stdin_fd, stdin_data) if stdin_data else None
    os.lseek(stdin_fd, 0, 0)
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    start = time.monotonic()
    if lang == "bash":
        # vfork-based: no copy of this server's page tables (~ms under load).
        # Every fd of the server is close-on-exec (PEP 446); only 0-2 pass.
        os.chdir(CALL_DIR)
        try:
            pid = os.posix_spawn(
                "/bin/bash", ["bash", CALL_DIR + "/main.sh"], ENV, setsid=True,
                setsigdef=(signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD),
                file_actions=[(os.POSIX_SPAWN_DUP2, stdin_fd, 0),
                              (os.POSIX_SPAWN_DUP2, w_out, 1),
                              (os.POSIX_SPAWN_DUP2, w_err, 2)])
        finally:
            os.chdir("/")
    else:
        pid = os.fork()
        if pid == 0:
            run_child(lang, code.decode("utf-8", "surrogateescape"), stdin_fd, w_out, w_err, 0)
    for fd in (stdin_fd, w_out, w_err):
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    bufs = {r_out: bytearray(), r_err: bytearray()}
    truncated = timed_out = False
    deadline = start + timeout
    poll = select.poll()
    for fd in (r_out, r_err, pidfd):
        poll.register(fd, select.POLLIN)
    open_pipes, exited = 2, False
    status = 0
    while not exited:
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
            if not data:
                poll.unregister(fd)
                open_pipes -= 1
                continue
            room = OUT_CAP - len(bufs[fd])
            if len(data) > room:
                truncated = True
                data = data[:max(room, 0)]
            bufs[fd] += data
    # Output still in the pipes once the child exited (background processes
    # may hold the write ends open: do not wait for EOF).
    for fd in (r_out, r_err):
        os.set_blocking(fd, False)
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not data:
                break
            room = OUT_CAP - len(bufs[fd])
            if len(data) > room:
                truncated = True
                data = data[:max(room, 0)]
            bufs[fd] += data
    _, status = os.waitpid(pid, 0)
    duration_ms = (time.monotonic() - start) * 1000.0
    exit_code = 137 if timed_out else os.waitstatus_to_exitcode(status)
    if exit_code < 0:
        exit_code = 128 - exit_code
    for fd in (r_out, r_err, pidfd):
        os.close(fd)
    tainted = not sweep()
    for d in WIPED:
        tainted = (not wipe(d)) or tainted
    tainted = (not drop_sysv_ipc()) or tainted
    tainted = tainted or fingerprint() != BASELINE
    return [str(exit_code).encode(), b"1" if timed_out else b"0", b"1" if truncated else b"0",
            ("%.3f" % duration_ms).encode(), b"1" if tainted else b"0",
            bytes(bufs[r_out]), bytes(bufs[r_err]), b""]


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
        try:
            out = call(req)
        except Exception as e:
            # The call could not start (bad file, no memory): answer it and
            # let the node replace this worker.
            sweep()
            for d in WIPED:
                wipe(d)
            out = [b"-1", b"0", b"0", b"0", b"1", b"", b"", str(e).encode()]
        conn.sendall(frame(out))


main()
