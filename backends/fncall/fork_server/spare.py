# The spare: the fresh process of one Python call, forked by the zygote before
# the call arrives. It warms itself up (so most of the copy-on-write faults a
# fork costs are paid while the worker is idle), says "warm" and waits for a
# "go" carrying the stdin memfd; then it runs /tmp/call/main.py, closes its
# output and reports its exit status on the status pipe before it exits, so
# the answer does not wait for the kernel to tear the process down.
import builtins, io, os, signal, socket, sys, threading, traceback

from .layout import CALL_DIR, CTL_FD, STATUS_FD

# Run by every spare before its call: compiles and runs a small program like
# a call's, so the pages a call writes are already copied.
WARM_UP = compile("import sys\nfor i in range(3):\n    print(i, 'x' * i, sep=':')\n"
                  "try:\n    raise ValueError(1)\nexcept ValueError:\n    pass\n",
                  "<warm-up>", "exec")


def spare_main():
    # fds 1, 2, STATUS_FD and CTL_FD are this process's own (the zygote set
    # them just before the fork). Never returns.
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.closerange(CTL_FD + 1, 65536)
        ctl = socket.socket(fileno=CTL_FD)
        warm_up()
        ctl.send(b"warm")
        _, fds, _, _ = socket.recv_fds(ctl, 16, 1)
        if not fds:
            os._exit(0)  # the server closed: no call for this spare
        os.dup2(fds[0], 0)
        os.close(fds[0])
        ctl.close()
        rc = run_call()
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


def warm_up():
    sink = io.StringIO()
    exec(WARM_UP, {"__name__": "__warm__", "__builtins__": builtins,
                   "print": lambda *a, **k: print(*a, **dict(k, file=sink))})
    for stream in (sys.stdout, sys.stderr):  # touched now, not in the call
        stream.write("")
        stream.flush()
    compile("", "<warm-up>", "exec")


def run_call():
    """Runs main.py of the call directory as __main__; its exit code."""
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
    return rc
