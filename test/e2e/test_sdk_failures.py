# The SDK when the node fails: killed (-9) mid-call, stopped (SIGTERM) mid-call,
# stalled (SIGSTOP) past call_timeout_s, nothing listening, and a node that
# comes back. Every test uses its own node (node_factory) and restarts it on
# the same state dir after a kill -9, so the node reaps what it left behind and
# the factory's teardown can check the machine is clean.

import asyncio
import signal
import threading
import time

import pytest

from dsec_harness import BUSYBOX, assert_clean, free_port, import_sdk, wait_for

dsec = import_sdk()

FAIL_FAST_S = 10  # "failed promptly, did not hang" bound after a kill


def addr_of(n):
    return f"127.0.0.1:{n.listen_port}"


def kill9(n):
    """SIGKILLs this test's node process (only its own Popen pid)."""
    n.proc.kill()
    n.proc.wait(30)


def restart(n):
    """Starts the node again on the same state dir and ports; it reaps the
    sandboxes the killed process left behind."""
    n.start()
    return n


def test_kill9_mid_exec_fails_with_unavailable(node_factory):
    n = node_factory.start()
    c = dsec.Client(addr_of(n))
    sb = c.create([BUSYBOX])
    out = {}

    def long_exec():
        t0 = time.monotonic()
        try:
            out["result"] = sb.exec("sleep 30", timeout_s=120)
        except BaseException as e:  # checked below
            out["error"] = e
        out["took"] = time.monotonic() - t0

    th = threading.Thread(target=long_exec)
    th.start()
    wait_for(lambda: "sleep 30" in sb.exec(["ps", "-o", "args"]).stdout, 30,
             what="the long exec to start")
    killed_at = time.monotonic()
    kill9(n)
    th.join(FAIL_FAST_S + 5)
    assert not th.is_alive(), "exec still blocked after the node was killed"
    assert "error" in out, f"exec returned {out.get('result')} from a killed node"
    e = out["error"]
    assert isinstance(e, dsec.Unavailable), repr(e)
    assert e.code == "unavailable" and e.message
    assert isinstance(e, ConnectionError)
    assert time.monotonic() - killed_at < FAIL_FAST_S

    # later calls fail fast too while nothing listens
    t0 = time.monotonic()
    with pytest.raises(dsec.Unavailable):
        c.list()
    with pytest.raises(dsec.Unavailable):
        sb.exec("true")
    assert time.monotonic() - t0 < FAIL_FAST_S

    # the node comes back: the same Client reconnects, a new one works too
    restart(n)
    wait_for(lambda: _answers(c), 30, what="the old client to reconnect")
    # the restarted node adopted the sandbox: it runs on, same id, same client
    assert sb.info().state == "running"
    assert sb.exec("echo still here").stdout == "still here\n"
    assert sb.destroy() is True
    c2 = dsec.Client(addr_of(n))
    with c2.create([BUSYBOX]) as s2:
        assert s2.exec("echo back").stdout == "back\n"
    assert c.nodes()[0].id == n.node_id
    c.close()
    c2.close()
    assert_clean(n, allow_layer_mounts=True)


def _answers(c):
    try:
        return c.nodes()
    except dsec.Unavailable:
        return None


def test_kill9_mid_stream_and_mid_create(node_factory):
    n = node_factory.start()
    c = dsec.Client(addr_of(n))
    sb = c.create([BUSYBOX])
    s = sb.exec_stream("echo started; sleep 30; echo never")
    it = iter(s)
    assert next(it).data == b"started\n"
    kill9(n)
    t0 = time.monotonic()
    rest = list(it)  # ends, does not hang
    assert time.monotonic() - t0 < FAIL_FAST_S
    assert b"never" not in b"".join(ch.data for ch in rest)
    with pytest.raises(dsec.Unavailable):
        s.result
    restart(n)
    wait_for(lambda: _answers(c), 30, what="the client to reconnect")
    # the restarted node adopted the sandbox; destroying it takes the sleep too
    assert [i.id for i in c.list()] == [sb.id]
    assert sb.destroy() is True
    assert c.list() == []
    c.close()
    assert_clean(n, allow_layer_mounts=True)


def test_kill9_fails_many_async_calls_in_flight(node_factory):
    n = node_factory.start()

    async def main():
        c = dsec.AsyncClient(addr_of(n))
        sbs = await c.create_many(2, [BUSYBOX])
        tasks = [asyncio.ensure_future(sbs[i % 2].exec(f"sleep 30; echo {i}", timeout_s=120))
                 for i in range(40)]
        stream = sbs[0].exec_stream("echo s; sleep 30")
        first = await asyncio.wait_for(stream.__anext__(), 30)
        assert first.data == b"s\n"

        async def sleeping():
            r = await sbs[1].exec(["sh", "-c", "ps -o args | grep -c '[s]leep 30'"])
            return int(r.stdout or 0) >= 20
        deadline = time.monotonic() + 60
        while not await sleeping():
            assert time.monotonic() < deadline, "the execs did not start"
            await asyncio.sleep(0.2)

        kill9(n)
        t0 = time.monotonic()
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True),
                                         FAIL_FAST_S)
        assert all(isinstance(r, dsec.Unavailable) for r in results), \
            [repr(r) for r in results if not isinstance(r, dsec.Unavailable)][:3]
        rest = await asyncio.wait_for(_drain(stream), FAIL_FAST_S)
        assert rest == b""
        with pytest.raises(dsec.Unavailable):
            await stream.wait()
        with pytest.raises(dsec.Unavailable):
            await c.nodes()
        assert time.monotonic() - t0 < FAIL_FAST_S * 2
        c.close()

    asyncio.run(asyncio.wait_for(main(), 180))
    restart(n)
    c = dsec.AsyncClient(addr_of(n))

    async def after():
        async with c:
            # adopted at restart: still there until destroyed
            for info in await c.list():
                await (await c.get(info.id)).destroy()
            assert await c.list() == []
            async with await c.create([BUSYBOX]) as sb:
                assert (await sb.exec("echo ok")).stdout == "ok\n"
    asyncio.run(after())
    assert_clean(n, allow_layer_mounts=True)


async def _drain(stream):
    return b"".join([ch.data async for ch in stream])


def test_sigterm_mid_exec_fails_with_unavailable(node_factory):
    n = node_factory.start()
    c = dsec.Client(addr_of(n))
    sb = c.create([BUSYBOX])
    out = {}

    def long_exec():
        try:
            out["result"] = sb.exec("sleep 30", timeout_s=120)
        except BaseException as e:
            out["error"] = e

    th = threading.Thread(target=long_exec)
    th.start()
    wait_for(lambda: "sleep 30" in sb.exec(["ps", "-o", "args"]).stdout, 30,
             what="the long exec to start")
    assert n.stop() == 0, n.log_tail()  # a clean stop destroys its sandboxes
    th.join(FAIL_FAST_S + 5)
    assert not th.is_alive(), "exec still blocked after the node stopped"
    if "error" in out:
        assert isinstance(out["error"], dsec.Unavailable), repr(out["error"])
    else:  # the node may answer the killed command before it goes
        assert not out["result"].ok, out["result"]
    with pytest.raises(dsec.Unavailable):
        c.nodes()
    assert_clean(n, allow_layer_mounts=False)
    restart(n)
    assert [i.id for i in dsec.Client(addr_of(n)).list()] == []


def test_nothing_listening_is_unavailable_fast():
    port = free_port()  # bound and released: nothing listens there now
    t0 = time.monotonic()
    with pytest.raises(dsec.Unavailable) as ei:
        dsec.Client(f"127.0.0.1:{port}", connect_timeout_s=5)
    assert ei.value.code == "unavailable" and str(port) in ei.value.message
    with pytest.raises(dsec.Unavailable):
        dsec.AsyncClient(f"127.0.0.1:{port}", connect_timeout_s=5)
    assert time.monotonic() - t0 < 10 + 2, "connect to a closed port hung"


def sigstop(n):
    """Stops the node process and waits until the kernel shows it stopped."""
    n.proc.send_signal(signal.SIGSTOP)

    def stopped():
        with open(f"/proc/{n.proc.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    wait_for(stopped, 10, interval=0.01, what="the node to be stopped")


def test_stalled_node_gives_timeout(node_factory):
    # SIGSTOP freezes the node (it does not close its socket, so the client sees
    # no disconnect); a call then outlives call_timeout_s and raises Timeout.
    # The middleman's 10 s connection timeout would only then turn it into
    # Unavailable, so a 1 s call bound makes Timeout deterministic.
    n = node_factory.start()
    c = dsec.Client(addr_of(n), call_timeout_s=1.0)
    sb = c.create([BUSYBOX])
    sigstop(n)
    try:
        t0 = time.monotonic()
        with pytest.raises(dsec.Timeout) as ei:
            c.list()
        took = time.monotonic() - t0
        assert ei.value.code == "timeout" and isinstance(ei.value, TimeoutError)
        assert took < 8, f"Timeout after {took:.1f}s with call_timeout_s=1"
        with pytest.raises(dsec.Timeout):
            sb.info()
    finally:
        n.proc.send_signal(signal.SIGCONT)
    # the node thaws and the client goes on
    wait_for(lambda: _answers(c), 30, what="the client to answer after SIGCONT")
    assert sb.exec("echo thawed").stdout == "thawed\n"
    assert sb.destroy() is True
    c.close()


def test_stalled_node_async_timeout(node_factory):
    n = node_factory.start()

    async def main():
        c = dsec.AsyncClient(addr_of(n), call_timeout_s=1.0)
        sigstop(n)
        try:
            with pytest.raises(dsec.Timeout):
                await asyncio.wait_for(c.list(), 15)
        finally:
            n.proc.send_signal(signal.SIGCONT)
        c.close()
    asyncio.run(main())
