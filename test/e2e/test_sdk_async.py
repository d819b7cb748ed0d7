# The asyncio SDK (dsec.AsyncClient) against a real node: every call awaited,
# errors, `async with`, hundreds of concurrent execs over a few sandboxes,
# streamed output, cancellation killing the command, and the rollout example.
# pytest-asyncio is not used: each test runs its coroutine with asyncio.run.

import asyncio
import os
import re
import subprocess
import time
import uuid

import pytest

from dsec_harness import BUSYBOX, PYTHON, REPO, assert_clean, destroy_all, import_sdk, sdk_env

dsec = import_sdk()

HANG_S = 120  # "did not hang" bound for a whole test body


def uniq(prefix="t"):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def run(coro, bound=HANG_S):
    """Runs coro on a fresh loop, failing (not hanging) past `bound` seconds."""
    async def bounded():
        return await asyncio.wait_for(coro, bound)
    return asyncio.run(bounded())


@pytest.fixture
def addr(node, sdk):
    """The node's native address; `sdk` cleans up whatever a test leaves."""
    return f"127.0.0.1:{node.listen_port}"


async def ps_args(sb):
    return (await sb.exec(["ps", "-o", "args"])).stdout


async def until(pred, bound, what):
    """Awaits pred() (a coroutine function) until truthy, polling."""
    deadline = time.monotonic() + bound
    while True:
        v = await pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {bound}s waiting for {what}")
        await asyncio.sleep(0.1)


# -- every call ------------------------------------------------------------------------

def test_every_call(addr, node):
    async def main():
        async with dsec.AsyncClient(addr) as c:
            assert c.addr == addr and addr in repr(c)
            nodes = await c.nodes()
            assert [n.id for n in nodes] == [node.node_id] and nodes[0].state == "alive"
            refs = {l.ref for l in await c.layers()}
            assert {BUSYBOX, PYTHON} <= refs

            job = uniq("job")
            sb = await c.create([BUSYBOX], cpu=1, memory_mb=256, ttl_s=300,
                                labels={"job": job}, env={"E": "e"})
            assert isinstance(sb, dsec.AsyncSandbox)
            assert sb.node == node.node_id and sb.labels == {"job": job}
            assert sb.layers == [BUSYBOX] and sb.backend == "container"
            assert sb.id in repr(sb)
            info = await sb.info()
            assert isinstance(info, dsec.SandboxInfo) and info.state == "running"
            assert info.memory_mb == 256

            assert [i.id for i in await c.list(labels={"job": job})] == [sb.id]
            g = await c.get(sb.id)
            assert isinstance(g, dsec.AsyncSandbox) and g.id == sb.id

            r = await sb.exec('echo "$E $X"; echo err >&2; exit 4', env={"X": "x"})
            assert isinstance(r, dsec.ExecResult)
            assert (r.exit_code, r.stdout, r.stderr, r.ok) == (4, "e x\n", "err\n", False)
            r = await sb.exec(["cat"], stdin=b"\x00\xff", cwd="/tmp")
            assert r.stdout_bytes == b"\x00\xff" and r.ok and r.node_ms > 0
            assert (await sb.exec("pwd", cwd="/tmp")).stdout == "/tmp\n"
            r = await sb.exec("sleep 30", timeout_s=1)
            assert r.timed_out and r.exit_code == 137

            data = bytes(range(256)) * 64
            assert await sb.write_file("/work/f.bin", data) is None
            assert await sb.read_file("/work/f.bin") == data
            await sb.write_file("/work/s.txt", "ünï")
            assert await sb.read_file("/work/s.txt") == "ünï".encode()

            assert await sb.destroy() is True
            assert await sb.destroy() is False
            with pytest.raises(dsec.NotFound):
                await c.get(sb.id)
            with pytest.raises(dsec.NotFound):
                await sb.exec("true")
            assert await c.list(labels={"job": job}) == []
    run(main())


def test_errors(addr, node):
    async def main():
        async with dsec.AsyncClient(addr) as c:
            with pytest.raises(dsec.NotFound) as ei:
                await c.get(f"{node.node_id}.nosuch")
            assert ei.value.code == "not_found" and ei.value.message
            with pytest.raises(dsec.InvalidArgument) as ei:
                await c.get("garbage")
            assert ei.value.code == "invalid_argument"
            with pytest.raises(dsec.NotFound):
                await c.create(["no/such-layer@1"])
            with pytest.raises(dsec.InvalidArgument) as ei:
                await c.create([BUSYBOX], memory_mb=-1)
            assert ei.value.code == "invalid_argument"
            with pytest.raises(dsec.InvalidArgument):
                await c.create([BUSYBOX], memory_mb="x")  # SDK-side check
            with pytest.raises(dsec.InvalidArgument):
                await c.create([BUSYBOX], bogus=1)  # unknown keyword

            rid = uniq("rid")
            a = await c.create([BUSYBOX], request_id=rid)
            assert (await c.create([BUSYBOX], request_id=rid)).id == a.id
            with pytest.raises(dsec.Conflict) as ei:
                await c.create([BUSYBOX], memory_mb=300, request_id=rid)
            assert ei.value.code == "conflict"

            await a.write_file("/tmp/ten", b"0123456789")
            with pytest.raises(dsec.TooLarge) as ei:
                await a.read_file("/tmp/ten", max_bytes=3)
            assert ei.value.code == "too_large" and isinstance(ei.value, dsec.InvalidArgument)
            with pytest.raises(dsec.NotFound):
                await a.read_file("/no/such")
            with pytest.raises(dsec.InvalidArgument):
                await a.write_file("rel/path", b"x")
            with pytest.raises(dsec.InvalidArgument):
                await a.exec("")
            await a.destroy()
    run(main())


def test_async_with_sandbox_destroys_also_on_exception(addr):
    async def main():
        async with dsec.AsyncClient(addr) as c:
            async with await c.create([BUSYBOX]) as sb:
                assert (await sb.exec("echo hi")).stdout == "hi\n"
                first = sb.id
            with pytest.raises(dsec.NotFound):
                await c.get(first)

            with pytest.raises(ZeroDivisionError):
                async with await c.create([BUSYBOX]) as sb:
                    second = sb.id
                    1 / 0
            with pytest.raises(dsec.NotFound):
                await c.get(second)
        # the client is closed after `async with`
        with pytest.raises(dsec.Unavailable):
            await c.nodes()
    run(main())


def test_create_many_and_failure_cleanup(addr):
    async def main():
        async with dsec.AsyncClient(addr) as c:
            job = uniq("many")
            sbs = await c.create_many(8, [BUSYBOX], memory_mb=256, labels={"job": job})
            assert len({s.id for s in sbs}) == 8
            outs = await asyncio.gather(*(s.exec(["echo", s.id]) for s in sbs))
            assert [o.stdout for o in outs] == [s.id + "\n" for s in sbs]
            assert {i.id for i in await c.list(labels={"job": job})} == {s.id for s in sbs}
            assert all(await asyncio.gather(*(s.destroy() for s in sbs)))
            assert await c.list(labels={"job": job}) == []

            before = {i.id for i in await c.list()}
            with pytest.raises(dsec.InvalidArgument) as ei:
                await c.create_many(5, [BUSYBOX], memory_mb=-1)
            assert "5 of 5 creates failed" in ei.value.message
            with pytest.raises(dsec.InvalidArgument):
                await c.create_many(0, [BUSYBOX])
            with pytest.raises(dsec.InvalidArgument):
                await c.create_many(2, [BUSYBOX], request_id="r")
            assert {i.id for i in await c.list()} == before
    run(main())


def test_create_many_over_capacity(node_factory):
    n = node_factory.start("--max-sandboxes", "3")

    async def main():
        async with dsec.AsyncClient(f"127.0.0.1:{n.listen_port}") as c:
            with pytest.raises(dsec.ResourceExhausted) as ei:
                await c.create_many(6, [BUSYBOX])
            m = re.search(r"(\d+) of 6 creates failed", ei.value.message)
            assert m and int(m.group(1)) >= 3, ei.value.message
            assert ei.value.code == "resource_exhausted"
            assert await c.list() == []
    run(main())
    assert_clean(n, allow_layer_mounts=True)


# -- concurrency -----------------------------------------------------------------------

def test_256_concurrent_execs_on_four_sandboxes(addr):
    N = 256

    async def main():
        async with dsec.AsyncClient(addr) as c:
            sbs = await c.create_many(4, [BUSYBOX], cpu=1, memory_mb=256)
            for i, s in enumerate(sbs):
                await s.write_file("/tmp/who", f"sb{i}")

            async def one(i):
                s = sbs[i % 4]
                r = await s.exec(["sh", "-c", 'echo "$0 $(cat /tmp/who) $(cat)"; echo e$0 >&2; '
                                  'exit $(($0 % 7))', str(i)], stdin=f"in{i}")
                return i, r

            t0 = time.monotonic()
            results = await asyncio.gather(*(one(i) for i in range(N)))
            took = time.monotonic() - t0
            assert len(results) == N
            for i, r in results:
                assert r.stdout == f"{i} sb{i % 4} in{i}\n", (i, r)
                assert r.stderr == f"e{i}\n", (i, r)
                assert r.exit_code == i % 7 and not r.timed_out, (i, r)
            for s in sbs:
                await s.destroy()
            return took
    took = run(main(), bound=300)
    print(f"{N} concurrent execs in {took:.2f}s")


def test_mixed_concurrent_calls(addr):
    # creates, execs, file writes/reads, infos and destroys all in flight together
    async def main():
        async with dsec.AsyncClient(addr) as c:
            async def life(i):
                async with await c.create([BUSYBOX], labels={"mix": str(i)}) as sb:
                    payload = os.urandom(4096)
                    await sb.write_file(f"/work/{i}.bin", payload)
                    r, back, info = await asyncio.gather(
                        sb.exec(f"echo {i}"), sb.read_file(f"/work/{i}.bin"), sb.info())
                    assert r.stdout == f"{i}\n" and back == payload and info.state == "running"
                    return sb.id
            ids = await asyncio.gather(*(life(i) for i in range(16)))
            assert len(set(ids)) == 16
            for i in range(16):
                assert await c.list(labels={"mix": str(i)}) == []
    run(main(), bound=300)


def test_client_survives_two_event_loops(addr):
    c = dsec.AsyncClient(addr)
    try:
        async def make():
            return await c.create([BUSYBOX])
        sb = asyncio.run(make())

        async def use():
            r = await sb.exec("echo second-loop")
            await sb.destroy()
            return r
        assert asyncio.run(use()).stdout == "second-loop\n"
    finally:
        c.close()


# -- streaming ---------------------------------------------------------------------------

def test_exec_stream(addr):
    async def main():
        async with dsec.AsyncClient(addr) as c:
            async with await c.create([BUSYBOX]) as sb:
                s = sb.exec_stream("echo first; sleep 2; echo second >&2; sleep 0.2; echo third",
                                   timeout_s=60)
                assert isinstance(s, dsec.AsyncExecStream)
                with pytest.raises(dsec.InvalidArgument):
                    s.result  # not ended yet
                got = []
                async for chunk in s:
                    assert isinstance(chunk, dsec.OutputChunk)
                    got.append((time.monotonic(), chunk))
                ended = time.monotonic()
                assert got and got[0][0] < ended - 1.0, "first chunk did not arrive early"
                out = b"".join(ch.data for _, ch in got if ch.stream == "stdout")
                err = b"".join(ch.data for _, ch in got if ch.stream == "stderr")
                assert (out, err) == (b"first\nthird\n", b"second\n")
                text = "".join(ch.text for _, ch in got)
                assert text.index("first") < text.index("second") < text.index("third")
                assert s.result.ok

                s2 = sb.exec_stream(["sh", "-c", "cat; exit 5"], stdin=b"abc")
                r = await s2.wait()
                assert r.exit_code == 5
                assert r.stdout_bytes in (b"", b"abc")  # the result may repeat the output
                assert s2.result.exit_code == 5

                # many streams at once
                streams = [sb.exec_stream(["sh", "-c", "echo $0; sleep 0.5; echo $0", str(i)])
                           for i in range(20)]

                async def collect(st):
                    return b"".join([ch.data async for ch in st])
                outs = await asyncio.gather(*(collect(st) for st in streams))
                assert outs == [f"{i}\n{i}\n".encode() for i in range(20)]
    run(main())


# -- cancellation ---------------------------------------------------------------------------

def test_cancelling_an_exec_task_kills_the_command(addr):
    async def main():
        async with dsec.AsyncClient(addr) as c:
            async with await c.create([BUSYBOX]) as sb:
                task = asyncio.ensure_future(
                    sb.exec("touch /tmp/started; sleep 62; touch /tmp/finished", timeout_s=120))
                await until(lambda: _exists(sb, "/tmp/started"), 30, "the command to start")
                assert "sleep 62" in await ps_args(sb)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                await until(lambda: _gone(sb, "sleep 62"), 15, "the cancelled command to die")
                # the shell was killed too: it will never run its next command
                assert "touch /tmp/finished" not in await ps_args(sb)
                assert not await _exists(sb, "/tmp/finished")
                assert (await sb.exec("echo still-fine")).stdout == "still-fine\n"
    run(main())


def test_wait_for_timeout_cancels_the_exec(addr):
    async def main():
        async with dsec.AsyncClient(addr) as c:
            async with await c.create([BUSYBOX]) as sb:
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(sb.exec("sleep 63"), 1.0)
                await until(lambda: _gone(sb, "sleep 63"), 15, "the timed-out command to die")
    run(main())


def test_cancelling_a_stream_kills_the_command(addr):
    async def main():
        async with dsec.AsyncClient(addr) as c:
            async with await c.create([BUSYBOX]) as sb:
                started = asyncio.Event()

                async def consume():
                    async for chunk in sb.exec_stream("echo started; sleep 64; echo never"):
                        assert b"never" not in chunk.data
                        started.set()
                task = asyncio.ensure_future(consume())
                await asyncio.wait_for(started.wait(), 30)
                assert "sleep 64" in await ps_args(sb)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                await until(lambda: _gone(sb, "sleep 64"), 15, "the cancelled stream to die")

                # explicit cancel() on the stream object
                s = sb.exec_stream("echo go; sleep 65")
                it = s.__aiter__()
                assert (await it.__anext__()).data == b"go\n"
                s.cancel()
                rest = [ch async for ch in it]
                assert rest == [] or all(b"go" not in ch.data for ch in rest)
                await until(lambda: _gone(sb, "sleep 65"), 15, "the cancelled stream to die")
    run(main())


def test_cancelling_one_of_many_leaves_the_others(addr):
    async def main():
        async with dsec.AsyncClient(addr) as c:
            async with await c.create([BUSYBOX]) as sb:
                keep = [asyncio.ensure_future(sb.exec(["sh", "-c", "sleep 1; echo $0", str(i)]))
                        for i in range(10)]
                victim = asyncio.ensure_future(sb.exec("sleep 66"))
                await until(lambda: _ps_has(sb, "sleep 66"), 30, "the victim to start")
                victim.cancel()
                outs = await asyncio.gather(*keep)
                assert [o.stdout for o in outs] == [f"{i}\n" for i in range(10)]
                with pytest.raises(asyncio.CancelledError):
                    await victim
                await until(lambda: _gone(sb, "sleep 66"), 15, "the victim to die")
    run(main())


async def _exists(sb, path):
    return (await sb.exec(["test", "-e", path])).exit_code == 0


async def _gone(sb, needle):
    return needle not in await ps_args(sb)


async def _ps_has(sb, needle):
    return needle in await ps_args(sb)


# -- the rollout example ---------------------------------------------------------------------

def test_rollout_example_runs(node, sdk):
    p = subprocess.run(
        ["/usr/bin/python3", str(REPO / "examples" / "rollout.py"), "--groups", "2",
         "--rollouts", "4"],
        env=sdk_env(f"127.0.0.1:{node.listen_port}"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 0, out + p.stderr.decode(errors="replace")
    assert len(re.findall(r"^group\s+\d+", out, re.M)) == 2, out
    assert "rollouts/s" in out, out
    assert sdk.list(labels={"app": "rollout-example"}) == [], "the example left sandboxes"


def test_zz_node_left_clean(sdk, node):
    destroy_all(sdk)
    assert sdk.list() == []
    assert_clean(node, allow_layer_mounts=True)
