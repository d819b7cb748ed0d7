# The Python SDK in a process that forks, as RL trainers do (multiprocessing's
# default start method on Linux, DataLoader workers, rollout pools), against a
# real node: pool workers that make their own Client; children that use a
# Client, Sandbox or AsyncClient inherited from the parent; forks while parent
# threads (or the parent's event loop) are mid-call; children that exit, are
# killed, or garbage-collect what they inherited; and the parent's connection
# through all of it. Every child is bounded: a hang fails the test, never CI.

import asyncio
import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from dsec_harness import BUSYBOX, import_sdk, sdk_env

dsec = import_sdk()

FORK = multiprocessing.get_context("fork")

CHILD_S = 90       # bound on one child's whole job on a shared 2-core machine
FIRST_CALL_S = 5   # the old failure was 10 s (new Client) or forever (inherited)


@pytest.fixture
def addr(node, sdk):
    """The node's native address; `sdk` removes what a test (or child) leaves."""
    return f"127.0.0.1:{node.listen_port}"


def start_child(fn):
    """Forks a child (multiprocessing "fork" Process) that runs fn() and sends
    back ("ok", value) or ("err", (exception class name, message, is dsec.Error))."""
    r, w = FORK.Pipe(duplex=False)

    def main():
        try:
            w.send(("ok", fn()))
        except BaseException as e:  # reported to the parent
            w.send(("err", (type(e).__name__, str(e), isinstance(e, dsec.Error))))

    p = FORK.Process(target=main)
    p.start()
    w.close()
    return p, r


def finish_child(p, r, bound=CHILD_S):
    """The child's answer; fails the test if it does not come within `bound`
    seconds (a hang) or the child does not then exit 0."""
    try:
        if not r.poll(bound):
            pytest.fail(f"forked child {p.pid} did not finish within {bound} s: it hung")
        out = r.recv()
    finally:
        p.join(bound)
        if p.is_alive():
            p.kill()
            p.join()
            pytest.fail(f"forked child {p.pid} answered but did not exit within {bound} s")
    assert p.exitcode == 0, f"forked child exited {p.exitcode}"
    return out


def in_child(fn, bound=CHILD_S):
    """Runs fn() in a forked child; see start_child and finish_child."""
    return finish_child(*start_child(fn), bound)


def ok(out):
    kind, v = out
    assert kind == "ok", f"child raised {v[0]}: {v[1]}"
    return v


def timed(f):
    t0 = time.monotonic()
    v = f()
    return v, time.monotonic() - t0


def report(what, seconds):
    # Visible with -s; the issue asks for these numbers.
    print(f"\n[fork timing] {what}: " + ", ".join(f"{s * 1000:.1f} ms" for s in seconds))


# -- the parent's native connection, seen by the kernel ------------------------------

def my_connections_to(port):
    """{local port: tcp state} of this process's TCP sockets to 127.0.0.1:port."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    out = {}
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            cols = line.split()
            local, remote, state, inode = cols[1], cols[2], cols[3], cols[9]
            if inode in inodes and int(remote.split(":")[1], 16) == port:
                out[int(local.split(":")[1], 16)] = state
    return out


ESTABLISHED = "01"


# -- pool workers ------------------------------------------------------------------------

def _worker_new_client(addr):
    """A pool job: its own Client, sandbox and exec. Timings in seconds."""
    c, connect_s = timed(lambda: dsec.Client(addr))
    sb, create_s = timed(lambda: c.create([BUSYBOX], cpu=0.5, memory_mb=128))
    try:
        r, exec_s = timed(lambda: sb.exec(["echo", f"hello from {os.getpid()}"]))
    finally:
        sb.destroy()
    c.close()
    return dict(pid=os.getpid(), connect_s=connect_s, create_s=create_s, exec_s=exec_s,
                exit_code=r.exit_code, stdout=r.stdout)


# Set before a pool forks its workers, which inherit it.
_INHERITED = {}


def _worker_inherited(i):
    """A pool job on the parent's Client and Sandbox (inherited at fork)."""
    c, sb = _INHERITED["client"], _INHERITED["sandbox"]
    r, first_s = timed(lambda: sb.exec(["echo", f"job {i}"]))
    own = c.create([BUSYBOX], cpu=0.5, memory_mb=128)
    try:
        r2 = own.exec("echo own")
    finally:
        own.destroy()
    return dict(pid=os.getpid(), first_s=first_s, stdout=r.stdout, own=r2.stdout)


def test_pool_workers_make_their_own_clients(addr, sdk):
    assert sdk.list() is not None  # the parent has connected: the case that used to hang
    with FORK.Pool(4) as pool:
        res = pool.map_async(_worker_new_client, [addr] * 8).get(CHILD_S * 2)
    for r in res:
        assert r["exit_code"] == 0 and r["stdout"] == f"hello from {r['pid']}\n", r
        assert r["connect_s"] < FIRST_CALL_S, f"Client() in a forked worker took {r}"
    report("pool worker: new Client() (connect + status)", [r["connect_s"] for r in res])
    report("pool worker: first exec on its own sandbox", [r["exec_s"] for r in res])
    with sdk.create([BUSYBOX]) as sb:
        assert sb.exec("echo parent").stdout == "parent\n"


def test_pool_workers_use_the_inherited_client_and_sandbox(addr, sdk):
    sb = sdk.create([BUSYBOX])
    assert sb.exec("true").exit_code == 0  # calls have gone over the connection
    _INHERITED.update(client=sdk, sandbox=sb)
    try:
        with FORK.Pool(3) as pool:
            res = pool.map_async(_worker_inherited, range(6)).get(CHILD_S * 2)
    finally:
        _INHERITED.clear()
    for i, r in enumerate(res):
        assert r["stdout"] == f"job {i}\n" and r["own"] == "own\n", r
        assert r["first_s"] < FIRST_CALL_S, f"first inherited call in a pool worker: {r}"
    report("pool worker: first call on an inherited Sandbox (reconnect included)",
           [r["first_s"] for r in res])
    assert sb.exec("echo parent").stdout == "parent\n"


# -- single children ---------------------------------------------------------------------

def test_child_uses_inherited_client_and_sandbox(addr, sdk):
    sb = sdk.create([BUSYBOX])
    sb.write_file("/tmp/from-parent", "p")

    def child():
        r, first_s = timed(lambda: sb.exec("cat /tmp/from-parent; echo -n c"))
        info = sb.info()
        other = sdk.create([BUSYBOX], labels={"made": "in-child"})
        other.exec("true")
        other.destroy()
        return first_s, r.stdout, info.id, info.state

    first_s, out, sid, state = ok(in_child(child))
    assert (out, sid, state) == ("pc", sb.id, "running")
    assert first_s < FIRST_CALL_S, f"first call on an inherited Sandbox took {first_s:.1f} s"
    report("child: first call on an inherited Sandbox", [first_s])
    # The parent's handles carry on, and nothing the child made is left.
    assert sb.exec("echo -n parent").stdout == "parent"
    assert not sdk.list(labels={"made": "in-child"})


def test_child_new_client_answers_at_once(addr, sdk):
    sdk.list()

    def child():
        c, connect_s = timed(lambda: dsec.Client(addr, connect_timeout_s=30))
        _, status_s = timed(lambda: c.list())
        return connect_s, status_s

    times = [ok(in_child(child)) for _ in range(3)]
    for connect_s, _ in times:
        assert connect_s < FIRST_CALL_S, f"dsec.Client() in a forked child took {connect_s:.1f} s"
    report("child: new Client() (connect + status)", [t[0] for t in times])
    report("child: next call on it (list)", [t[1] for t in times])


def test_exec_stream_started_before_fork_raises_in_child(addr, sdk):
    sb = sdk.create([BUSYBOX])
    s = sb.exec_stream("echo one; sleep 2; echo two")
    it = iter(s)
    assert next(it).text == "one\n"

    def child():
        try:
            for _ in it:
                pass
        except dsec.Unavailable as e:
            s.cancel()  # a no-op here: the command belongs to the parent
            return str(e)
        return "no error"

    msg = ok(in_child(child, bound=30))
    assert "forked" in msg and "start it again" in msg, msg
    # The parent's stream goes on to the end: the child neither read nor cancelled it.
    assert "".join(c.text for c in it) == "two\n"
    assert s.result.exit_code == 0


# -- children while parent threads are mid-call -----------------------------------------

def test_fork_while_parent_threads_are_mid_call(addr, sdk):
    sbs = [sdk.create([BUSYBOX]) for _ in range(2)]
    stop = threading.Event()
    calls, errors = [0], []

    def hammer(t):
        sb = sbs[t % 2]
        while not stop.is_set():
            try:
                if t == 3:
                    sdk.create([BUSYBOX], labels={"hammer": "1"}).destroy()
                else:
                    r = sb.exec(["echo", str(t)])
                    assert r.stdout == f"{t}\n", r
                calls[0] += 1
            except BaseException as e:  # reported below
                errors.append(e)
                return

    threads = [threading.Thread(target=hammer, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    firsts = []
    try:
        wait_calls = calls[0]
        for i in range(10):
            # Fork at varied points of the threads' calls (locks held, answers in flight).
            time.sleep(0.013 * (i % 4))

            def child(i=i):
                r, first_s = timed(lambda: sbs[i % 2].exec(["echo", f"child {i}"]))
                c = dsec.Client(addr)
                r2 = c.get(sbs[0].id).exec("echo new")
                return first_s, r.stdout, r2.stdout

            first_s, out, out2 = ok(in_child(child))
            assert (out, out2) == (f"child {i}\n", "new\n")
            firsts.append(first_s)
        with FORK.Pool(3) as pool:
            res = pool.map_async(_worker_new_client, [addr] * 6).get(CHILD_S * 2)
        assert all(r["exit_code"] == 0 for r in res), res
    finally:
        stop.set()
        for th in threads:
            th.join(CHILD_S)
    assert not any(th.is_alive() for th in threads), "a parent thread hung"
    assert not errors, f"parent threads failed while children forked: {errors[:3]}"
    assert calls[0] > wait_calls, "the parent threads made no calls while children forked"
    report("child forked mid-call: first call on an inherited Sandbox", firsts)
    assert sbs[0].exec("echo after").stdout == "after\n"


# -- AsyncClient -------------------------------------------------------------------------

def test_async_child_with_inherited_and_new_async_client(addr, sdk):
    ac = dsec.AsyncClient(addr)

    async def parent_setup():
        sb = await ac.create([BUSYBOX])
        assert (await sb.exec("echo p")).stdout == "p\n"
        return sb

    sb = asyncio.run(parent_setup())  # the dispatcher is bound to that (closed) loop

    def child():
        async def main():
            t0 = time.monotonic()
            r = await sb.exec("echo inherited")
            first_s = time.monotonic() - t0
            async with dsec.AsyncClient(addr) as own:
                other = await own.create([BUSYBOX])
                r2 = await other.exec("echo own")
                chunks = [c.text async for c in other.exec_stream("echo s1; echo s2")]
                await other.destroy()
            return first_s, r.stdout, r2.stdout, "".join(chunks)
        return asyncio.run(asyncio.wait_for(main(), CHILD_S))

    first_s, out, out2, streamed = ok(in_child(child))
    assert (out, out2, streamed) == ("inherited\n", "own\n", "s1\ns2\n")
    report("child: first call on an inherited AsyncSandbox", [first_s])

    async def parent_after():
        assert (await sb.exec("echo again")).stdout == "again\n"
        await sb.destroy()

    asyncio.run(parent_after())
    ac.close()


def test_fork_inside_the_running_loop_with_calls_in_flight(addr, sdk):
    """A child forked from inside the parent's event loop while execs are in
    flight: the parent's execs still complete (the child did not take the
    parent's eventfd out of the shared epoll set, nor read its wake-ups), and
    the child uses the inherited AsyncClient on its own loop."""
    ac = dsec.AsyncClient(addr)

    def child_closes():
        ac.close()  # its dispatcher is the parent's: must leave the parent's loop alone
        return "closed"

    def child_uses():
        async def main():
            sb = await ac.create([BUSYBOX])
            r = await sb.exec("echo child")
            await sb.destroy()
            return r.stdout
        return asyncio.run(asyncio.wait_for(main(), CHILD_S))

    def child_reads_parent_stream():
        async def main():
            try:
                await stream.wait()
            except dsec.Unavailable as e:
                stream.cancel()  # a no-op here: the command belongs to the parent
                return str(e)
            return "no error"
        return asyncio.run(asyncio.wait_for(main(), CHILD_S))

    stream = None

    async def main():
        nonlocal stream
        sb = await ac.create([BUSYBOX])
        loop = asyncio.get_running_loop()
        inflight = [asyncio.ensure_future(sb.exec(f"sleep 1; echo {i}")) for i in range(4)]
        stream = sb.exec_stream("sleep 1; echo streamed")
        await asyncio.sleep(0.2)  # the execs are running on the node
        outs = []
        for fn in (child_closes, child_uses, child_reads_parent_stream):
            # Forked on the loop's thread, the loop running; awaited off it.
            # (Not forked from an executor thread: Python 3.11 children forked
            # from one exit 1 at their threading shutdown, dsec or not.)
            p, r = start_child(fn)
            outs.append(await loop.run_in_executor(None, finish_child, p, r))
        results = await asyncio.wait_for(asyncio.gather(*inflight), 30)
        streamed = await asyncio.wait_for(stream.wait(), 30)
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(4)]
        assert streamed.exit_code == 0  # the child did not cancel or consume it
        assert (await sb.exec("echo after")).stdout == "after\n"
        await sb.destroy()
        return outs

    outs = asyncio.run(asyncio.wait_for(main(), CHILD_S * 3))
    assert ok(outs[0]) == "closed"
    assert ok(outs[1]) == "child\n"
    assert "forked" in ok(outs[2]), outs[2]
    ac.close()


# -- children that end -------------------------------------------------------------------

def test_children_ending_leave_the_parent_connection_alone(addr, sdk, node):
    """Children that exit, garbage-collect inherited objects or are killed
    mid-call must not close or disturb the parent's connection: the kernel sees
    the same established socket before and after, and the parent's next calls
    go over it without a reconnect."""
    sb = sdk.create([BUSYBOX])
    sb.exec("true")
    before = {p for p, st in my_connections_to(node.listen_port).items() if st == ESTABLISHED}
    assert before, my_connections_to(node.listen_port)

    def child_exits():
        return "bye"

    def child_collects():
        r = sb.exec("echo gc")
        local = {"c": sdk, "s": sb}
        local.clear()
        gc.collect()
        return r.stdout

    assert ok(in_child(child_exits)) == "bye"
    assert ok(in_child(child_collects)) == "gc\n"
    # Killed mid-call: its own connection dies with it, the parent's must not.
    p = FORK.Process(target=lambda: sb.exec("sleep 30"))
    p.start()
    time.sleep(1.0)
    p.kill()
    p.join(CHILD_S)
    assert p.exitcode == -signal.SIGKILL
    after = my_connections_to(node.listen_port)
    for port in before:
        assert after.get(port) == ESTABLISHED, (before, after)
    assert sb.exec("echo still").stdout == "still\n"
    assert sdk.list() is not None
    assert my_connections_to(node.listen_port).keys() == after.keys(), \
        "the parent reconnected: its connection was broken by a child"


SCRIPT = textwrap.dedent("""
    # A trainer's life cycle with plain os.fork(): children that leave through
    # normal interpreter exit (atexit runs dsec's shutdown, finalization
    # destroys the inherited objects), with and without using them first.
    import gc, os, sys, time
    import dsec

    c = dsec.Client()
    sb = c.create(["%s"])
    sb.exec("true")
    for mode in ("idle", "use", "use-new", "collect"):
        pid = os.fork()
        if pid == 0:
            if mode in ("use", "collect"):
                assert sb.exec("echo " + mode).stdout == mode + "\\n"
            if mode == "use-new":
                assert dsec.Client().get(sb.id).exec("echo n").stdout == "n\\n"
            if mode == "collect":
                del sb, c
                gc.collect()
            sys.exit(0)
        t0 = time.monotonic()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, (mode, status)
        print(mode, "exit", round(time.monotonic() - t0, 3), flush=True)
        assert sb.exec("echo parent").stdout == "parent\\n", mode
    sb.destroy()
    print("done", flush=True)
""" % BUSYBOX)


def test_children_exiting_normally_run_atexit_without_hanging(addr, sdk):
    p = subprocess.run([sys.executable, "-c", SCRIPT], env=sdk_env(addr), capture_output=True,
                       text=True, timeout=CHILD_S * 2)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[-1] == "done", p.stdout + p.stderr
    assert [ln.split()[0] for ln in lines[:-1]] == ["idle", "use", "use-new", "collect"]
