# Shell sessions (issue 26 part 2; DSec's chronus, SWE-ReX) on the container
# backend, through the Python SDK, REST, the CLI and a peer of a cluster.
#
# What users rely on: cwd, environment, shell variables, functions and
# aliases carry over between runs; a run's output is exactly what it printed
# (no trailing newline, look-alikes of a delimiter, large output); a timeout
# interrupts the run as Ctrl-C would and the session goes on; `exit` ends the
# session with a clear error on the next run; sessions survive pause and
# resume, are in the trajectory log and a replay rebuilds them; bad input is
# a 4xx naming what is wrong, and never wedges the node.

import asyncio
import json
import subprocess
import threading
import time
import urllib.parse

import pytest

from dsec_harness import BUSYBOX, PYTHON, Node, _finish_node, assert_error, import_sdk, wait_for

dsec = import_sdk()

LAYERS = [BUSYBOX, PYTHON]  # python's Debian userland has bash


@pytest.fixture
def sb(sdk):
    return sdk.create(LAYERS, cpu=1, memory_mb=512)


def q(x):
    return urllib.parse.quote(x, safe="")


# -- persistence -------------------------------------------------------------------

def test_cwd_env_variables_functions_and_aliases_persist(sb):
    s = sb.session()
    assert s.id == "s1" and s.shell == "/bin/bash"
    for cmd in ["mkdir -p /tmp/w/x && cd /tmp/w", "export GREETING=hello", "count=41",
                "inc() { count=$((count+1)); echo \"n=$count\"; }", "alias hi='echo hi-from-alias'",
                "cd x"]:
        r = s.run(cmd)
        assert r.exit_code == 0 and r.stdout == "" and r.stderr == "", (cmd, r)
    assert s.run("pwd").stdout == "/tmp/w/x\n"
    assert s.run("echo $GREETING; sh -c 'echo child:$GREETING'").stdout == "hello\nchild:hello\n"
    assert s.run("inc").stdout == "n=42\n"
    assert s.run("inc").stdout == "n=43\n"
    assert s.run("hi").stdout == "hi-from-alias\n"
    r = s.run("false")
    assert r.exit_code == 1 and not r.timed_out
    assert s.run("exit_code_is() { return $1; }; exit_code_is 7").exit_code == 7
    # A syntax error is the command's error, not the session's.
    r = s.run("echo 'unterminated")
    assert r.exit_code != 0 and ("unexpected EOF" in r.stderr or "matching" in r.stderr), r
    assert s.run("echo still-here").stdout == "still-here\n"
    s.close()


def test_exact_delimiting(sb):
    s = sb.session()
    assert s.run("printf abc").stdout == "abc"
    assert s.run("printf 'x\\ny'").stdout == "x\ny"
    r = s.run("printf err-no-newline >&2")
    assert r.stdout == "" and r.stderr == "err-no-newline"
    # Look-alikes of a delimiter: the marker's shape with another nonce, and
    # the very text a run is wrapped in.
    fake = "0123456789abcdef0123456789abcdef:0\n"
    r = s.run(f"printf '%s' '{fake}'; printf '%s' '{fake.strip()}' >&2")
    assert r.stdout == fake and r.stderr == fake.strip() and r.exit_code == 0, r
    r = s.run("echo \"for _ in 1; do eval 'x' </dev/null; done\"; echo '; printf \"%s\" >&2'")
    assert r.stdout == "for _ in 1; do eval 'x' </dev/null; done\n; printf \"%s\" >&2\n", r
    # Bytes that are not text, and quotes of every kind.
    r = s.run("printf '\\x00\\x01\\xff'")
    assert len(r.stdout) >= 3 and r.exit_code == 0, r
    assert s.run("echo \"a'b\" 'c\"d' $'e\\tf'").stdout == "a'b c\"d e\tf\n"
    # Large output, both streams.
    r = s.run("head -c 3000000 /dev/zero | tr '\\0' a; head -c 1000000 /dev/zero | tr '\\0' b >&2")
    assert r.stdout == "a" * 3000000 and r.stderr == "b" * 1000000, (len(r.stdout), len(r.stderr))
    # With `set -x`, the shell's trace of the markers does not end a run early.
    r = s.run("set -x; echo traced; set +x")
    assert r.stdout == "traced\n" and "echo traced" in r.stderr, r
    assert s.run("echo after").stdout == "after\n"
    # stdin is /dev/null: a command that reads it ends at once.
    r = s.run("cat; echo done", timeout_s=20)
    assert r.stdout == "done\n" and not r.timed_out, r
    # A command spanning lines, with a heredoc.
    r = s.run("cat <<'EOF'\nline1\nline2\nEOF\necho end")
    assert r.stdout == "line1\nline2\nend\n", r


def test_timeout_interrupts_the_run_and_the_session_goes_on(sb):
    s = sb.session()
    s.run("export KEEP=yes; cd /tmp")
    t0 = time.monotonic()
    r = s.run("echo before; sleep 30; echo not-reached", timeout_s=1)
    assert r.timed_out and r.exit_code == 130, r
    assert r.stdout == "before\n", r
    assert time.monotonic() - t0 < 10
    # A loop in the shell itself, and a loop of children: both end.
    r = s.run("while :; do :; done", timeout_s=1)
    assert r.timed_out, r
    r = s.run("for i in 1 2 3 4 5; do sleep 10; done; echo loop-done", timeout_s=1)
    assert r.timed_out and "loop-done" not in r.stdout, r
    r = s.run("echo $KEEP; pwd")
    assert r.stdout == "yes\n/tmp\n" and not r.timed_out, r
    # Nothing of the interrupted runs is left running.
    assert "sleep" not in s.run("ps -eo args | grep '^sleep' || true").stdout


def test_a_run_that_ignores_sigint_ends_the_session(sb):
    s = sb.session()
    r = s.run("trap '' INT; sleep 60", timeout_s=1)
    assert r.timed_out, r
    with pytest.raises(dsec.Conflict, match="did not stop"):
        s.run("echo x")
    assert sb.session().run("echo fresh").stdout == "fresh\n"


def test_exit_inside_ends_the_session_and_a_new_one_works(sb):
    s = sb.session()
    r = s.run("echo bye; exit 3")
    assert r.exit_code == 3 and r.stdout == "bye\n", r
    with pytest.raises(dsec.Conflict, match="exited with status 3"):
        s.run("echo again")
    listed = {i.id: i for i in sb.sessions()}
    assert not listed[s.id].alive and "status 3" in listed[s.id].reason
    s2 = sb.session()
    assert s2.id != s.id and s2.run("echo new").stdout == "new\n"
    s.close()
    assert s.id not in {i.id for i in sb.sessions()}


def test_several_sessions_are_independent_and_close_ends_one(sb):
    a, b = sb.session(), sb.session(shell="/bin/sh")
    a.run("cd /tmp; X=from-a")
    b.run("cd /etc; X=from-b")
    assert a.run("echo $X $(pwd)").stdout == "from-a /tmp\n"
    assert b.run("echo $X $(pwd)").stdout == "from-b /etc\n"
    assert [i.id for i in sb.sessions()] == [a.id, b.id]
    b.run("sleep 7301 &")
    b.close()
    assert [i.id for i in sb.sessions()] == [a.id]
    with pytest.raises(dsec.NotFound):
        b.run("echo x")
    wait_for(lambda: "sleep 7301" not in sb.exec("ps -eo args").stdout, 10,
             what="the closed session's job to die")
    assert a.run("echo $X").stdout == "from-a\n"


def test_one_run_at_a_time_per_session(sb):
    s = sb.session()
    out = {}

    def first():
        out["first"] = s.run("sleep 2; echo one")

    t = threading.Thread(target=first)
    t.start()
    time.sleep(0.7)
    with pytest.raises(dsec.Conflict, match="one run at a time"):
        s.run("echo two")
    t.join()
    assert out["first"].stdout == "one\n"


def test_async_sessions(sdk, sb):
    async def go():
        ac = dsec.AsyncClient(sdk.addr)
        try:
            asb = await ac.get(sb.id)
            async with await asb.session() as s:
                await s.run("cd /usr; V=async")
                r = await s.run("echo $V; pwd")
                assert r.stdout == "async\n/usr\n"
                assert [i.id for i in await asb.sessions()] == [s.id]
            assert s.id not in [i.id for i in await asb.sessions()]
        finally:
            ac.close()

    asyncio.run(go())


def test_sessions_survive_pause_and_resume(sb):
    s = sb.session()
    s.run("cd /tmp; KEPT=across-pause")
    sb.pause()
    assert sb.info().state == "paused"
    assert s.run("echo $KEPT $(pwd)").stdout == "across-pause /tmp\n"  # resumes it
    sb.pause()
    sb.resume()
    assert s.run("echo $KEPT").stdout == "across-pause\n"


def test_trajectory_holds_runs_and_replay_rebuilds_the_session(sdk, sb):
    s = sb.session()
    s.run("mkdir -p /srv/app; cd /srv/app; export MODE=replayed")
    s.run("echo data > f.txt; greet() { echo \"hi $1 from $(pwd)\"; }")
    assert s.run("cat f.txt").stdout == "data\n"
    log = sdk.trajectory(sb.id)
    kinds = [r["kind"] for r in log]
    assert kinds.count("session_open") == 1 and kinds.count("session_run") == 3, kinds
    run = [r for r in log if r["kind"] == "session_run"][2]
    assert run["session"] == s.id and run["cmd"] == "cat f.txt" and run["exit_code"] == 0
    assert run["stdout"]["text"] == "data\n"
    copy = sdk.replay(sb.id)
    try:
        sessions = copy.sessions()
        assert [i.id for i in sessions] == [s.id]
        again = dsec.Session(copy, sessions[0])
        assert again.run("greet you; echo $MODE").stdout == "hi you from /srv/app\nreplayed\n"
    finally:
        copy.destroy()


# -- bad input ---------------------------------------------------------------------

def test_bad_input(sdk, sb):
    with pytest.raises(dsec.InvalidArgument, match="/bin/zsh"):
        sb.session(shell="/bin/zsh")
    with pytest.raises(dsec.InvalidArgument, match="absolute"):
        sb.session(shell="bash")
    with pytest.raises(dsec.NotFound):
        dsec.Session(sb, dsec.SessionInfo("s99", "/bin/bash", True, 0, 0.0, "")).run("true")
    s = sb.session()
    with pytest.raises(dsec.InvalidArgument, match="NUL"):
        s.run("echo a\0b")
    with pytest.raises(dsec.TooLarge):
        s.run("#" + "x" * (1 << 20))
    # A long line and binary garbage are just commands.
    r = s.run("echo " + "y" * 200000)
    assert r.stdout == "y" * 200000 + "\n"
    garbage = bytes(range(1, 256)).replace(b"'", b"") * 20
    r = s.run(b": '" + garbage + b"'; echo survived")
    assert r.stdout == "survived\n", r
    assert s.run("echo ok").stdout == "ok\n"
    sb.destroy()
    with pytest.raises(dsec.NotFound):
        s.run("true")
    with pytest.raises(dsec.NotFound):
        sb.session()


# -- REST and CLI ------------------------------------------------------------------

def test_rest_routes(client):
    sid = client.create_ok(LAYERS, cpu=1, memory_mb=512)
    base = f"/v1/sandboxes/{q(sid)}/sessions"
    status, s = client.call("POST", base, {"cwd": "/tmp", "env": {"FOO": "bar"}})
    assert status == 201 and s["id"] == "s1" and s["alive"], s
    run = f"{base}/{s['id']}/run"
    status, r = client.call("POST", run, {"cmd": "echo $FOO; pwd; printf tail"})
    assert status == 200 and r["stdout"] == "bar\n/tmp\ntail" and r["exit_code"] == 0, r
    status, r = client.call("POST", run, {"cmd": "sleep 20", "timeout_s": 0.5})
    assert status == 200 and r["timed_out"] and r["exit_code"] == 130, r
    status, out = client.call("GET", base)
    assert status == 200 and [x["id"] for x in out["sessions"]] == ["s1"], out
    assert out["sessions"][0]["runs"] == 2
    # Bad input: named, 4xx.
    assert_error(*client.call("POST", run, {"cmd": ""}), 400, "invalid_argument")
    assert_error(*client.call("POST", run, {"command": "x"}), 400, "invalid_argument")
    assert_error(*client.call("POST", run, {"cmd": "x", "timeout_s": -1}), 400, "invalid_argument")
    assert_error(*client.call("POST", run, b"\xff\xfe garbage"), 400, "invalid_argument")
    assert_error(*client.call("POST", f"{base}/nope/run", {"cmd": "true"}), 404, "not_found")
    status, out = client.call("POST", base, {"shell": "/no/such/shell"})
    assert_error(status, out, 400, "invalid_argument")
    assert "/no/such/shell" in out["error"]["message"]
    assert_error(*client.call("POST", base, {"shell": "/bin/sh", "tty": True}), 400,
                 "invalid_argument")
    status, out = client.call("DELETE", f"{base}/s1")
    assert status == 200 and out == {"closed": True}
    assert_error(*client.call("DELETE", f"{base}/s1"), 404, "not_found")
    client.delete(sid)
    assert_error(*client.call("POST", base, {}), 404, "not_found")
    assert_error(*client.call("POST", run, {"cmd": "true"}), 404, "not_found")


def test_cli(client, node, dsec_bin):
    sid = client.create_ok(LAYERS, cpu=1, memory_mb=512)

    def cli(verb, *words, check=True):
        p = subprocess.run([dsec_bin, "session", verb, "--rest", node.rest, *words],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        if check:
            assert p.returncode == 0, (words, p.returncode, p.stdout, p.stderr)
        return p

    for verb in ("open", "run", "close", "list"):
        p = cli(verb, "--help")
        assert b"dsec session" in p.stdout
    p = subprocess.run([dsec_bin, "session", "--help"], stdout=subprocess.PIPE, timeout=30)
    assert p.returncode == 0 and b"open" in p.stdout
    ses = cli("open", sid, "--cwd", "/tmp", "--env", "A=1").stdout.decode().strip()
    assert ses == "s1"
    cli("run", sid, ses, "--", "cd", "/etc;", "B=2")
    p = cli("run", sid, ses, "--", "echo $A$B $(pwd); exit_with() { return 5; }; exit_with",
            check=False)
    assert p.returncode == 5 and p.stdout == b"12 /etc\n", p
    p = cli("list", sid)
    assert b"s1" in p.stdout and b"/bin/bash" in p.stdout
    cli("close", sid, ses)
    p = cli("run", sid, ses, "true", check=False)
    assert p.returncode == 1 and b"not_found" in p.stderr, p
    p = cli("frobnicate", check=False)
    assert p.returncode == 2


# -- through a peer ------------------------------------------------------------------

def test_a_session_through_a_peer_of_a_two_node_cluster(dsec_bin, store):
    first = Node(dsec_bin, store).start()
    second = None
    try:
        second = Node(dsec_bin, store, extra_args=["--join", f"127.0.0.1:{first.listen_port}"]).start()

        def joined():
            status, out = second.client.call("GET", "/v1/nodes")
            return status == 200 and sum(m["state"] == "alive" for m in out["nodes"]) == 2

        wait_for(joined, 20, what="the two nodes to see each other")
        sid = second.client.create_ok(LAYERS, cpu=1, memory_mb=512, node=first.node_id)
        assert sid.startswith(first.node_id + ".")
        # REST through the peer that does not own it.
        base = f"/v1/sandboxes/{q(sid)}/sessions"
        status, s = second.client.call("POST", base, {})
        assert status == 201, s
        status, r = second.client.call("POST", f"{base}/{s['id']}/run", {"cmd": "cd /tmp; V=peer"})
        assert status == 200 and r["exit_code"] == 0, r
        status, r = second.client.call("POST", f"{base}/{s['id']}/run",
                                       {"cmd": "echo $V $(pwd)", "timeout_s": 30})
        assert status == 200 and r["stdout"] == "peer /tmp\n", r
        # The SDK through the peer, on the same session.
        c = dsec.Client(f"127.0.0.1:{second.listen_port}")
        try:
            psb = c.get(sid)
            ses = dsec.Session(psb, psb.sessions()[0])
            assert ses.run("echo $V").stdout == "peer\n"
            ses.close()
        finally:
            c.close()
        second.client.delete(sid)
    finally:
        if second is not None:
            _finish_node(second)
        _finish_node(first)
