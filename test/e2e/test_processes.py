# Processes that outlive the exec that started them, background commands
# (POST .../exec?background=1) and the sandbox's process table
# (GET/DELETE .../processes), through REST on the container backend.
#
# What users rely on: whatever a finished exec left running keeps running
# (nohup, setsid, `&`, double fork, redirections, output written after the
# exec returned); a timed-out or disconnected exec kills its own process
# group; destroy kills everything.

import json
import os
import socket
import time
import urllib.parse

import pytest

from dsec_harness import BUSYBOX, PYTHON, assert_error, procs_in_node_cgroups, wait_for

LAYERS = [BUSYBOX, PYTHON]  # python's Debian userland: coreutils nohup, setsid, bash

LIST_PROCS = ('for p in /proc/[0-9]*; do '
              'echo "${p#/proc/} $(tr "\\0" " " < $p/cmdline 2>/dev/null)"; done')


def q(sid):
    return urllib.parse.quote(sid, safe="")


def cmdlines(client, sid):
    """{pid: command line} of the sandbox's processes, read from its /proc."""
    out = {}
    for line in client.sh(sid, LIST_PROCS)["stdout"].splitlines():
        pid, _, cmd = line.partition(" ")
        if pid.isdigit() and cmd.strip():
            out[int(pid)] = cmd.strip()
    return out


def running(client, sid, needle):
    return any(needle in c for c in cmdlines(client, sid).values())


@pytest.fixture
def psb(client):
    """A sandbox with the python layer (coreutils, bash)."""
    return client.create_ok(LAYERS, cpu=1, memory_mb=512)


# -- what survives a finished exec ---------------------------------------------

SURVIVORS = [
    ("nohup sleep 9101 >/dev/null 2>&1 &", "sleep 9101"),
    ("nohup sleep 9102 &", "sleep 9102"),
    ("setsid sleep 9103 >/dev/null 2>&1 &", "sleep 9103"),
    ("setsid sleep 9104 &", "sleep 9104"),
    ("sleep 9105 &", "sleep 9105"),
    ("sleep 9106 >/dev/null 2>&1 </dev/null &", "sleep 9106"),
    ("(sleep 9107 &)", "sleep 9107"),  # double fork: reparented to init
    ("bash -c 'sleep 9108 & disown'", "sleep 9108"),
    ("trap '' HUP; sleep 9109 &", "sleep 9109"),
]


@pytest.mark.parametrize("cmd,needle", SURVIVORS, ids=[c for c, _ in SURVIVORS])
def test_a_finished_exec_leaves_its_background_processes_running(client, psb, cmd, needle):
    r = client.sh(psb, cmd, timeout_s=30)
    assert r["exit_code"] == 0, r
    time.sleep(0.5)
    assert running(client, psb, needle), (cmd, cmdlines(client, psb))
    # Later execs (and their ends) do not touch it either.
    client.sh(psb, "true")
    client.sh(psb, "sleep 0.3 &")
    time.sleep(0.5)
    assert running(client, psb, needle), (cmd, cmdlines(client, psb))


def test_background_writer_survives_writing_after_the_exec_returned(client, psb):
    # It inherited the exec's stdout: its writes after the exec's end must not
    # kill it (SIGPIPE) but go nowhere.
    r = client.sh(psb, "sh -c 'sleep 1; echo tick; echo tock >&2; sleep 9201' &")
    assert r["exit_code"] == 0, r
    time.sleep(2.5)
    assert running(client, psb, "sleep 9201"), cmdlines(client, psb)


def test_server_started_with_ampersand_serves_and_logs(client, psb):
    # `python -m http.server &` logs every request to its stderr, the exec's pipe.
    client.sh(psb, "cd /tmp && python3 -m http.server 8765 &")
    fetch = ("python3 -c \"import urllib.request as u; "
             "print(u.urlopen('http://127.0.0.1:8765/', timeout=5).status)\"")
    wait_for(lambda: client.sh(psb, fetch)["stdout"].strip() == "200", 20,
             what="http.server to answer")
    for _ in range(3):
        r = client.sh(psb, fetch)
        assert r["stdout"].strip() == "200", r
    assert running(client, psb, "http.server 8765")


# -- what an exec's end still kills --------------------------------------------

def test_timed_out_exec_kills_its_process_group_only(client, psb):
    r = client.sh(psb, "sleep 9301 & setsid sleep 9302 & sleep 9303", timeout_s=1)
    assert r["timed_out"] is True, r
    wait_for(lambda: not running(client, psb, "sleep 9301")
             and not running(client, psb, "sleep 9303"), 10,
             what="the timed-out exec's group to be killed")
    # A process that left the group on purpose (its own session) is its own.
    assert running(client, psb, "sleep 9302"), cmdlines(client, psb)


def test_disconnected_exec_kills_its_process_group(client, psb, node):
    body = json.dumps({"cmd": "sleep 9401 & sleep 9402"}).encode()
    s = socket.create_connection(("127.0.0.1", node.rest_port), timeout=30)
    s.sendall(f"POST /v1/sandboxes/{psb}/exec HTTP/1.1\r\nHost: x\r\n"
              f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
              .encode() + body)
    wait_for(lambda: running(client, psb, "sleep 9402"), 15, what="the command to start")
    s.close()
    wait_for(lambda: not running(client, psb, "sleep 940"), 15,
             what="the disconnected exec's group to be killed")


def host_sleepers(marker):
    """Host pids whose command line contains `marker`."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            out.append(int(pid))
    return out


def test_destroy_kills_survivors_and_background_processes(client, node):
    sid = client.create_ok(LAYERS, cpu=1, memory_mb=512)
    client.sh(sid, "nohup sleep 9501 >/dev/null 2>&1 &")
    client.sh(sid, "setsid sleep 9502 &")
    status, out = client.call("POST", f"/v1/sandboxes/{q(sid)}/exec?background=1",
                              {"cmd": "sleep 9503"})
    assert status in (200, 201), out
    wait_for(lambda: all(host_sleepers(f"sleep 950{i}") for i in (1, 2, 3)), 10,
             what="three sleepers on the host")
    status, _ = client.delete(sid)
    assert status == 200
    wait_for(lambda: not host_sleepers("sleep 950"), 10, what="destroy to kill every sleeper")
    assert not [p for p in procs_in_node_cgroups(node.node_id) if sid in p[1]]


# -- background commands (POST .../exec?background=1) --------------------------

def bg(client, sid, cmd, **kw):
    body = {"cmd": cmd}
    body.update(kw)
    status, out = client.call("POST", f"/v1/sandboxes/{q(sid)}/exec?background=1", body)
    assert status == 201, (status, out)
    return out


def proc(client, sid, pid, query=""):
    return client.call("GET", f"/v1/sandboxes/{q(sid)}/processes/{pid}{query}")


def test_background_exec_answers_at_once_with_the_pid_inside(client, sandbox):
    t0 = time.monotonic()
    p = bg(client, sandbox, "echo $$ > /tmp/pid; echo started; sleep 30; echo never")
    assert time.monotonic() - t0 < 5, p
    assert p["state"] == "running" and p["exit_code"] is None, p
    assert p["cmd"].startswith("echo $$"), p
    assert p["argv"][:2] == ["/bin/sh", "-c"], p
    assert abs(p["started_at"] - time.time()) < 60, p
    pid = p["pid"]
    assert isinstance(pid, int) and pid > 1, p
    # The pid is the one the command itself sees.
    wait_for(lambda: client.sh(sandbox, "cat /tmp/pid 2>/dev/null")["stdout"].strip() == str(pid),
             10, what="the command to write its own pid")
    # Output so far, while it runs.
    status, out = wait_for(lambda: (lambda r: r if "started" in r[1].get("stdout", "") else None)(
        proc(client, sandbox, pid)), 10, what="output while running")
    assert status == 200 and out["state"] == "running", out
    assert out["stdout"] == "started\n", out
    status, _ = client.call("POST", f"/v1/sandboxes/{q(sandbox)}/processes/{pid}/kill",
                            {"signal": "SIGTERM"})
    assert status == 200
    status, out = proc(client, sandbox, pid, "?wait=1&timeout_s=20")
    assert status == 200 and out["state"] == "exited", out
    assert out["exit_code"] == 128 + 15, out
    assert "never" not in out["stdout"], out


def test_background_exit_code_output_and_wait(client, sandbox):
    p = bg(client, sandbox, "echo out; echo err >&2; sleep 1; exit 7")
    status, out = proc(client, sandbox, p["pid"], "?wait=1&timeout_s=30")
    assert status == 200, out
    assert out["state"] == "exited" and out["exit_code"] == 7, out
    assert out["stdout"] == "out\n" and out["stderr"] == "err\n", out
    assert out["duration_ms"] >= 900, out
    # Still readable afterwards.
    status, again = proc(client, sandbox, p["pid"])
    assert status == 200 and again["exit_code"] == 7 and again["stdout"] == "out\n", again


def test_background_wait_with_a_short_timeout_answers_running(client, sandbox):
    p = bg(client, sandbox, "sleep 30")
    t0 = time.monotonic()
    status, out = proc(client, sandbox, p["pid"], "?wait=1&timeout_s=0.5")
    assert status == 200 and out["state"] == "running", out
    assert time.monotonic() - t0 < 10


def test_background_survives_its_client_and_timeout_still_applies(client, sandbox):
    p = bg(client, sandbox, "sleep 60", timeout_s=1)
    status, out = proc(client, sandbox, p["pid"], "?wait=1&timeout_s=30")
    assert out["state"] == "exited" and out["timed_out"] is True, out


def test_background_output_is_bounded(client, sandbox):
    p = bg(client, sandbox, "head -c 20000000 /dev/zero | tr '\\0' x")
    status, out = proc(client, sandbox, p["pid"], "?wait=1&timeout_s=60")
    assert out["state"] == "exited", {k: v for k, v in out.items() if k != "stdout"}
    assert len(out["stdout"]) == 16 << 20 and out["truncated"] is True


def test_wait_in_progress_ends_when_the_sandbox_is_destroyed(client):
    import threading
    sid = client.create_ok(cpu=1, memory_mb=256)
    p = bg(client, sid, "sleep 9551")
    got = {}

    def waiter():
        t0 = time.monotonic()
        got["answer"] = proc(client, sid, p["pid"], "?wait=1&timeout_s=120")
        got["took"] = time.monotonic() - t0

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.5)
    assert client.delete(sid)[0] == 200
    t.join(60)
    assert not t.is_alive(), "the wait outlived its sandbox"
    status, out = got["answer"]
    assert status in (200, 503), out
    assert status == 503 or out["state"] == "exited", out
    assert got["took"] < 30, got


def test_the_last_64_finished_background_commands_are_kept(client, sandbox):
    # Records are dropped in the order the commands finished: each one ends
    # before the next starts, so that order is the start order (on a loaded
    # host `echo 0` could otherwise finish after `echo 1`).
    pids = []
    for i in range(66):
        pids.append(bg(client, sandbox, f"echo {i}")["pid"])
        status, out = proc(client, sandbox, pids[-1], "?wait=1&timeout_s=30")
        assert out["state"] == "exited", out
    wait_for(lambda: proc(client, sandbox, pids[0])[0] == 404, 30,
             what="the oldest finished record to be dropped")
    status, out = proc(client, sandbox, pids[-1])
    assert status == 200 and out["stdout"] == "65\n", out
    wait_for(lambda: sum(proc(client, sandbox, pid)[0] == 200 for pid in pids) == 64, 30,
             what="exactly 64 finished records")


def test_background_and_stream_cannot_be_combined(client, sandbox):
    status, out = client.call("POST", f"/v1/sandboxes/{q(sandbox)}/exec?background=1&stream=1",
                              {"cmd": "true"})
    assert_error(status, out, 400, "invalid_argument")


def test_background_on_unknown_sandbox_is_404(client, node):
    status, out = client.call("POST", f"/v1/sandboxes/{node.node_id}.nosuch/exec?background=1",
                              {"cmd": "true"})
    assert_error(status, out, 404, "not_found")


# -- the process table (GET/DELETE .../processes) -------------------------------

def test_processes_lists_everything_with_pid_command_and_start(client, sandbox):
    client.sh(sandbox, "sleep 9601 &")
    p = bg(client, sandbox, "sleep 9602")
    status, out = client.call("GET", f"/v1/sandboxes/{q(sandbox)}/processes")
    assert status == 200, out
    procs = out["processes"]
    by_cmd = {x["cmd"]: x for x in procs}
    assert "sleep 9601" in by_cmd, procs
    s1 = by_cmd["sleep 9601"]
    assert s1["argv"] == ["sleep", "9601"] and s1["background"] is False, s1
    assert abs(s1["started_at"] - time.time()) < 60, s1
    # The pid is the sandbox's: the sleep can be found under it in /proc inside.
    inside = client.sh(sandbox, f"cat /proc/{s1['pid']}/cmdline | tr '\\0' ' '")["stdout"]
    assert inside.strip() == "sleep 9601", inside
    mine = [x for x in procs if x["pid"] == p["pid"]]
    assert mine and mine[0]["background"] is True, procs
    init = [x for x in procs if x["pid"] == 1]
    assert init and init[0]["cmd"] == "dsec-init", procs


def test_process_calls_on_a_paused_sandbox_resume_it(client, sandbox):
    p = bg(client, sandbox, "sleep 9651")
    # A background command's record reads as it stands, and the sandbox
    # stays paused.
    assert client.call("POST", f"/v1/sandboxes/{q(sandbox)}/pause")[0] == 200
    status, out = proc(client, sandbox, p["pid"])
    assert status == 200 and out["state"] == "running", out
    assert client.get(sandbox)[1]["state"] == "paused"
    for call in ("list", "wait", "background", "kill"):
        status, info = client.call("POST", f"/v1/sandboxes/{q(sandbox)}/pause")
        assert status == 200 and info["state"] == "paused", info
        if call == "list":
            status, out = client.call("GET", f"/v1/sandboxes/{q(sandbox)}/processes")
            assert status == 200 and any(x["pid"] == p["pid"] for x in out["processes"]), out
        elif call == "wait":  # waiting for a frozen process resumes it
            status, out = proc(client, sandbox, p["pid"], "?wait=1&timeout_s=0.2")
            assert status == 200 and out["state"] == "running", out
        elif call == "background":
            assert bg(client, sandbox, "sleep 9652")["pid"] > 1
        else:
            status, out = client.call("POST", f"/v1/sandboxes/{q(sandbox)}/processes/{p['pid']}/kill",
                                      {"signal": "SIGKILL"})
            assert status == 200, out
        assert client.get(sandbox)[1]["state"] == "running", call


def test_kill_process_makes_it_go(client, sandbox):
    client.sh(sandbox, "sleep 9701 &")
    status, out = client.call("GET", f"/v1/sandboxes/{q(sandbox)}/processes")
    pid = [x["pid"] for x in out["processes"] if x["cmd"] == "sleep 9701"][0]
    status, out = client.call("DELETE", f"/v1/sandboxes/{q(sandbox)}/processes/{pid}")
    assert status == 200 and out == {"pid": pid, "signal": 9, "group": False}, out
    wait_for(lambda: "sleep 9701" not in client.sh(sandbox, "ps -o args")["stdout"], 10,
             what="the killed sleep to go")
    status, out = client.call("DELETE", f"/v1/sandboxes/{q(sandbox)}/processes/{pid}")
    assert_error(status, out, 404, "not_found")


@pytest.mark.parametrize("path,method,body,want", [
    ("processes/1", "DELETE", None, 400),                       # init
    ("processes/1/kill", "POST", {"signal": 15}, 400),
    ("processes/999999/kill", "POST", {"signal": 9}, 404),      # no such process
    ("processes/999999", "GET", None, 404),
    ("processes/abc", "GET", None, 400),                        # not a pid
    ("processes/-5", "DELETE", None, 400),
    ("processes/0", "DELETE", None, 400),
    ("processes/2/kill", "POST", {"signal": 0}, 400),           # bad signals
    ("processes/2/kill", "POST", {"signal": 65}, 400),
    ("processes/2/kill", "POST", {"signal": "SIGNOPE"}, 400),
    ("processes/2/kill", "POST", {"signal": 9, "extra": 1}, 400),
    ("processes/2/kill", "POST", "not json", 400),
    ("processes?signal=x", "PUT", None, 405),
])
def test_process_route_errors(client, sandbox, path, method, body, want):
    status, out = client.call(method, f"/v1/sandboxes/{q(sandbox)}/{path}", body)
    assert_error(status, out, want)


def test_kill_process_bad_signal_in_query_is_400(client, sandbox):
    client.sh(sandbox, "sleep 9801 &")
    status, out = client.call("DELETE", f"/v1/sandboxes/{q(sandbox)}/processes/2?signal=99")
    assert_error(status, out, 400, "invalid_argument")


def test_processes_of_unknown_sandbox_is_404(client, node):
    status, out = client.call("GET", f"/v1/sandboxes/{node.node_id}.nosuch/processes")
    assert_error(status, out, 404, "not_found")


# -- the CLI -----------------------------------------------------------------------

def test_cli_background_ps_and_kill(cli, client, sandbox):
    p = cli("exec", "--background", sandbox, "--", "sh", "-c", "sleep 9901")
    assert p.returncode == 0, p.stderr
    pid = int(p.stdout.decode().strip())
    p = cli("ps", sandbox)
    assert p.returncode == 0, p.stderr
    assert any(line.split("\t")[0] == str(pid) for line in p.stdout.decode().splitlines()), p.stdout
    p = cli("kill", sandbox, str(pid), "--signal", "TERM")
    assert p.returncode == 0, p.stderr
    status, out = proc(client, sandbox, pid, "?wait=1&timeout_s=20")
    assert out["state"] == "exited" and out["exit_code"] == 128 + 15, out
    p = cli("kill", sandbox, "1")
    assert p.returncode == 1 and b"init" in p.stderr, p.stderr
