# Background commands and the process table through the Python SDK, blocking
# (dsec.Client) and asyncio (dsec.AsyncClient), against a real node.

import asyncio
import signal
import time

import pytest

from dsec_harness import BUSYBOX, PYTHON, import_sdk, wait_for

dsec = import_sdk()

HANG_S = 120


@pytest.fixture
def sb(sdk):
    return sdk.create([BUSYBOX], cpu=1, memory_mb=256)


def sleeping(sb, needle):
    return any(p.cmd == needle for p in sb.processes())


# -- blocking --------------------------------------------------------------------

def test_nohup_and_setsid_survivors(sdk):
    sb = sdk.create([BUSYBOX, PYTHON], cpu=1, memory_mb=256)
    assert sb.exec("nohup sleep 8101 >/dev/null 2>&1 &").exit_code == 0
    assert sb.exec("setsid sleep 8102 &").exit_code == 0
    assert sb.exec("(sleep 8103 &)").exit_code == 0
    time.sleep(0.5)
    for n in (8101, 8102, 8103):
        assert sleeping(sb, f"sleep {n}"), [p.cmd for p in sb.processes()]


def test_timed_out_exec_kills_its_group(sb):
    r = sb.exec("sleep 8201 & sleep 8202", timeout_s=1)
    assert r.timed_out
    wait_for(lambda: not any(p.cmd.startswith("sleep 820") for p in sb.processes()), 10,
             what="the timed-out exec's group to go")


def test_stream_pushes_output_late_followers_first_get_what_they_missed(sb):
    # The first line is printed before anyone follows; the rest come live.
    p = sb.exec("echo early; sleep 1; for i in 1 2 3; do echo line$i; sleep 0.2; done; "
                "echo oops >&2; exit 4", background=True)
    wait_for(lambda: "early" in p.stdout, 10, what="the first line")
    first, second = p.stream(), p.stream()
    seen = []
    for chunk in first:
        seen.append((chunk.stream, chunk.text))
    out = "".join(t for s, t in seen if s == "stdout")
    assert out == "early\nline1\nline2\nline3\n", seen
    assert "".join(t for s, t in seen if s == "stderr") == "oops\n", seen
    assert first.result.exit_code == 4 and first.result.stdout == out
    # The second follower got the same output, once.
    r = second.wait()
    assert r.exit_code == 4 and r.stdout == out and r.stderr == "oops\n", r
    # A stream of a command that already ended gives what was kept, then its end.
    late = p.stream().wait()
    assert late.exit_code == 4 and late.stdout == out, late


def test_background_handle(sb):
    t0 = time.monotonic()
    p = sb.exec("echo $$; echo hello; sleep 1; echo bye >&2; exit 3", background=True)
    assert time.monotonic() - t0 < 5
    assert isinstance(p, dsec.Process) and p.pid > 1, p
    assert p.cmd.startswith("echo $$") and repr(p)
    wait_for(lambda: "hello" in p.stdout, 10, what="output while running")
    assert p.stdout.splitlines()[0] == str(p.pid)  # the pid the command sees
    r = p.wait(timeout=30)
    assert isinstance(r, dsec.ExecResult)
    assert r.exit_code == 3 and r.stdout == f"{p.pid}\nhello\n" and r.stderr == "bye\n", r
    st = p.status()
    assert not st.running and st.exit_code == 3 and st.stdout == r.stdout
    # A handle by pid reads the same record.
    assert sb.process(p.pid).wait().exit_code == 3


def test_background_wait_timeout_and_kill(sb):
    p = sb.exec(["sleep", "8301"], background=True)
    with pytest.raises(dsec.Timeout):
        p.wait(timeout=0.5)
    assert p.running
    assert any(x.pid == p.pid and x.background for x in sb.processes())
    p.kill()
    r = p.wait(timeout=20)
    assert r.exit_code == 128 + signal.SIGKILL, r
    assert not sleeping(sb, "sleep 8301")


def test_background_kill_with_signal_kills_the_group(sb):
    p = sb.exec("sleep 8401 & sleep 8402", background=True)
    wait_for(lambda: sleeping(sb, "sleep 8401") and sleeping(sb, "sleep 8402"), 10,
             what="both sleeps")
    p.kill(signal.SIGTERM)
    assert p.wait(timeout=20).exit_code == 128 + signal.SIGTERM
    wait_for(lambda: not sleeping(sb, "sleep 8401"), 10, what="the group to go")


def test_processes_and_kill_process(sb):
    sb.exec("sleep 8501 &")
    procs = sb.processes()
    assert all(isinstance(p, dsec.ProcessInfo) for p in procs)
    mine = [p for p in procs if p.cmd == "sleep 8501"]
    assert mine, [p.cmd for p in procs]
    s = mine[0]
    assert s.argv == ["sleep", "8501"] and s.name == "sleep" and s.state in "SR"
    assert abs(s.started_at - time.time()) < 60
    assert sb.exec(f"cat /proc/{s.pid}/cmdline").stdout == "sleep\x008501\x00"
    sb.kill_process(s.pid, signal=signal.SIGTERM)
    wait_for(lambda: not sleeping(sb, "sleep 8501"), 10, what="the killed sleep to go")
    with pytest.raises(dsec.NotFound):
        sb.kill_process(s.pid)


@pytest.mark.parametrize("pid,sig,cls", [
    (1, 9, dsec.InvalidArgument),
    (999999, 9, dsec.NotFound),
    (2, 0, dsec.InvalidArgument),
    (2, 65, dsec.InvalidArgument),
    (0, 9, dsec.InvalidArgument),
    ("2", 9, dsec.InvalidArgument),
    (2, "TERM", dsec.InvalidArgument),
])
def test_kill_process_errors(sb, pid, sig, cls):
    with pytest.raises(cls):
        sb.kill_process(pid, signal=sig)


def test_process_of_unknown_pid_is_not_found(sb):
    with pytest.raises(dsec.NotFound):
        sb.process(999999)


# -- asyncio ----------------------------------------------------------------------

def run(coro, bound=HANG_S):
    async def bounded():
        return await asyncio.wait_for(coro, bound)
    return asyncio.run(bounded())


def test_async_background_processes_and_kill(node, sdk):
    async def main():
        async with dsec.AsyncClient(f"127.0.0.1:{node.listen_port}") as c:
            sb = await c.create([BUSYBOX], cpu=1, memory_mb=256)
            async with sb:
                p = await sb.exec("echo hi; sleep 1; exit 5", background=True)
                assert isinstance(p, dsec.AsyncProcess) and p.pid > 1
                r = await p.wait(timeout=30)
                assert r.exit_code == 5 and r.stdout == "hi\n", r
                assert (await p.status()).exit_code == 5

                q = await sb.exec(["sleep", "8601"], background=True)
                with pytest.raises(dsec.Timeout):
                    await q.wait(timeout=0.3)
                procs = await sb.processes()
                assert any(x.pid == q.pid and x.background for x in procs), procs
                await q.kill()
                assert (await q.wait(timeout=20)).exit_code == 137

                await sb.exec("sleep 8602 &")
                pid = [x.pid for x in await sb.processes() if x.cmd == "sleep 8602"][0]
                await sb.kill_process(pid)
                with pytest.raises(dsec.InvalidArgument):
                    await sb.kill_process(1)
                for _ in range(100):
                    if not any(x.pid == pid for x in await sb.processes()):
                        break
                    await asyncio.sleep(0.1)
                else:
                    raise AssertionError("sleep 8602 did not go")
    run(main())
