# The zygote and the server's handles on it and on its spares. The zygote is
# a child of the server, forked once after the preload, that does nothing but
# fork spares (spare.py): its pages stay shared and untouched, so neither it
# nor the server pays copy-on-write faults for the other's work, and each
# spare pays only for the pages it writes itself (in its warm-up). It reaps
# its spares and reports their exit statuses to the server.
#
# Server <-> zygote, over a SOCK_SEQPACKET pair: "spawn" asks for a spare;
# "spare <pid>" answers it with the spare's control socket, stdout, stderr and
# status pipes attached; "exit <pid> <wait status>" reports a reaped spare.
import fcntl, gc, io, os, select, signal, socket, sys, traceback

from . import layout
from .layout import CALL_DIR, CTL_FD, DEFAULT_SIGNALS, ENV, STATUS_FD, high_fd, libc, log
from .spare import spare_main

# How long a new spare may take to get warm before the worker is given up.
SPARE_WARM_TIMEOUT = 10.0


class Zygote:
    """The server's handle on its zygote."""

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


class Spare:
    """The server's handle on a forked, warmed process waiting for its one call."""

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


def zygote_main(sock):
    libc.prctl(36, 0, 0, 0, 0)  # orphans of the calls go to the server
    sock = socket.socket(fileno=high_fd(sock.detach()))
    layout.LOG_FD = fcntl.fcntl(2, fcntl.F_DUPFD_CLOEXEC, 16)
    try:
        zygote_loop(sock)
    except BaseException:
        log("zygote: " + traceback.format_exc())


def zygote_loop(sock):
    devnull = set_up_call_state()
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
                reap_spares(sock, r_wake)
                continue
            try:
                if not sock.recv(16):
                    return
            except ConnectionResetError:  # the server is gone
                return
            fork_spare(sock, devnull)


def set_up_call_state():
    """What every call process needs and no call changes for the next one is
    set up here once, so a spare inherits it instead of building it (each
    object a spare builds costs it copy-on-write faults): the environment,
    umask, signal dispositions and the text streams on fds 1 and 2 (which are
    pointed at each spare's pipes just around its fork). Returns /dev/null's fd."""
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
    return devnull


def reap_spares(sock, r_wake):
    """Drains the signal wake-up pipe and reports every exited spare."""
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


def fork_spare(sock, devnull):
    """Forks one spare with fresh pipes and hands the server their ends."""
    ctl_parent, ctl_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    r_st, w_st = os.pipe()
    # The call's stdout and stderr pass to what it executes; the status and
    # control fds do not.
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
