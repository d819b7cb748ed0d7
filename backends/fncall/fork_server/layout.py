# What every process of the fork server agrees on: where a call's files go,
# the places wiped after it, the environment a call starts with, the fd
# numbers the zygote hands to each spare, the output cap, and the log.
import ctypes, fcntl, os, signal

CALL_DIR = "/tmp/call"
WIPED = ("/tmp", "/dev/shm")
# Per stream; beyond it output is dropped and the answer says "truncated".
OUT_CAP = 1 << 20
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "HOME": CALL_DIR, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
       "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
# Put back to their defaults in every call process.
DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)

# A spare's fds besides 0-2: its status pipe and its end of the control socket.
STATUS_FD = 3
CTL_FD = 4

libc = ctypes.CDLL(None, use_errno=True)

LOG_FD = 2  # the sandbox's log (the zygote keeps a copy above its fd 2)


def log(msg):
    os.write(LOG_FD, ("fncall server: %s\n" % msg).encode())


def high_fd(fd):
    """`fd` moved above the few numbers the zygote hands to its spares."""
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 16)
    os.close(fd)
    return new
