# One call: its directory, its process (a warm spare for Python, posix_spawn
# for bash: vfork, no page tables copied, so no spare is kept while bash
# calls come), its output collected up to OUT_CAP per stream, its deadline,
# and the answer's fields.
import os, select, signal, time

from .layout import CALL_DIR, DEFAULT_SIGNALS, ENV, OUT_CAP


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


def call(req, spare, zygote):
    """Runs one call; returns (answer fields, spare used). `spare` is the warm
    one to use for Python (None: one is asked of `zygote`)."""
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
        used = spare or zygote.spare()
        # Before go: the zygote reaps a call that ends at once, and a pid
        # opened after that is gone (ESRCH) or someone else's.
        try:
            pidfd = os.pidfd_open(used.pid)
        except ProcessLookupError:  # the spare died while it waited
            used.close()
            used = zygote.spare()
            pidfd = os.pidfd_open(used.pid)
        used.go(stdin_fd)
        pid, r_out, r_err, r_status = used.pid, used.r_out, used.r_err, used.r_status
    os.close(stdin_fd)
    outs = {r_out: Output(), r_err: Output()}
    timed_out, exited, status = collect(pid, pidfd, r_out, r_err, r_status, outs,
                                        start + timeout)
    if timed_out:
        exit_code = 137
    elif status is not None and not exited:
        exit_code = status
    else:
        st = zygote.exit_status(pid) if used else os.waitpid(pid, 0)[1]
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


def collect(pid, pidfd, r_out, r_err, r_status, outs, deadline):
    """Reads the call's output into `outs` until it is done or `deadline`
    passes (then kills it); returns (timed_out, exited, reported status)."""
    timed_out = False
    status = None
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
    return timed_out, exited, status
