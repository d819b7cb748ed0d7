# Putting the sandbox back to its baseline after a call: every process but
# init, the server and the zygote killed and reaped, the writable places
# wiped, SysV IPC objects dropped, and "/" and /dev compared with the
# fingerprint taken at start. The root filesystem is read-only (the pool's
# protect.readonly list) except /tmp, /dev/shm, /dev and "/" itself: the first
# two are wiped, a change to the latter two marks the worker tainted and the
# node replaces the sandbox.
import os, shutil, signal, time

from .layout import WIPED, libc, log


def fingerprint():
    # A call that adds, removes or replaces an entry of / or /dev changes the
    # directory's mtime; everything below them is read-only or wiped.
    return tuple(os.stat(p).st_mtime_ns for p in ("/", "/dev"))


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


def reset(zygote, baseline):
    """Kills and reaps everything but init, this server and `zygote`, wipes
    the writable places; True if the sandbox is back to `baseline`."""
    tainted = not (zygote.alive() and sweep(zygote.pid))
    for d in WIPED:
        tainted = (not wipe(d)) or tainted
    tainted = (not drop_sysv_ipc()) or tainted
    return not (tainted or fingerprint() != baseline)
