# Exec through REST: shell string vs argv, exit codes, stdout/stderr, stdin,
# cwd, env, timeouts, concurrency, large output and NDJSON streaming.

import hashlib
import json
import socket
import threading
import time

import pytest

from dsec_harness import assert_error, wait_for


def test_string_runs_through_sh(client, sandbox):
    r = client.sh(sandbox, "echo a; echo b | tr b c; X=5; echo $((X*2))")
    assert r["exit_code"] == 0, r
    assert r["stdout"] == "a\nc\n10\n", r
    assert r["stderr"] == "", r
    assert r["timed_out"] is False, r
    assert r["truncated"] is False, r
    assert isinstance(r["duration_ms"], (int, float)) and r["duration_ms"] >= 0, r


def test_argv_is_not_shell_interpreted(client, sandbox):
    r = client.sh(sandbox, ["echo", "$HOME", "a;b", "*"])
    assert r["exit_code"] == 0, r
    assert r["stdout"] == "$HOME a;b *\n", r


def test_argv_unknown_program(client, sandbox):
    status, r = client.exec(sandbox, ["/no/such/program"])
    # Either a 200 with the shell-style 127 or a clean 4xx; never a 5xx.
    assert status < 500, r
    if status == 200:
        assert r["exit_code"] != 0, r


@pytest.mark.parametrize("code", [0, 1, 7, 42, 255])
def test_exit_codes(client, sandbox, code):
    r = client.sh(sandbox, f"exit {code}")
    assert r["exit_code"] == code, r


def test_killed_by_signal_is_nonzero(client, sandbox):
    r = client.sh(sandbox, "kill -9 $$")
    assert r["exit_code"] in (137, -9), r


def test_stderr_separate(client, sandbox):
    r = client.sh(sandbox, "echo out; echo err >&2; exit 3")
    assert r["stdout"] == "out\n", r
    assert r["stderr"] == "err\n", r
    assert r["exit_code"] == 3, r


def test_stdin(client, sandbox):
    r = client.sh(sandbox, "cat; echo; wc -l", stdin="line1\nline2\n")
    assert r["stdout"].startswith("line1\nline2\n"), r
    r = client.sh(sandbox, ["wc", "-c"], stdin="x" * 100000)
    assert r["stdout"].strip() == "100000", r


def test_no_stdin_means_eof(client, sandbox):
    # `cat` without stdin must see EOF at once, not hang.
    t0 = time.monotonic()
    r = client.sh(sandbox, "cat", timeout_s=20)
    assert r["timed_out"] is False and r["exit_code"] == 0, r
    assert time.monotonic() - t0 < 15


def test_cwd(client, sandbox):
    client.sh(sandbox, "mkdir -p /tmp/wd/sub")
    r = client.sh(sandbox, "pwd", cwd="/tmp/wd/sub")
    assert r["stdout"] == "/tmp/wd/sub\n", r
    r = client.sh(sandbox, ["pwd"], cwd="/")
    assert r["stdout"] == "/\n", r


def test_cwd_missing_is_an_error_not_a_5xx(client, sandbox):
    status, r = client.exec(sandbox, "pwd", cwd="/no/such/dir")
    assert status < 500, r
    if status == 200:
        assert r["exit_code"] != 0, r
    else:
        assert_error(status, r, status)


def test_env_from_spec_and_exec_overrides(client):
    sid = client.create_ok(env={"A": "spec-a", "B": "spec-b"})
    r = client.sh(sid, 'echo "$A $B $C"')
    assert r["stdout"] == "spec-a spec-b \n", r
    r = client.sh(sid, 'echo "$A $B $C"', env={"B": "exec-b", "C": "exec-c"})
    assert r["stdout"] == "spec-a exec-b exec-c\n", r
    # The override is per exec.
    r = client.sh(sid, 'echo "$B"')
    assert r["stdout"] == "spec-b\n", r


def test_env_has_a_usable_path(client, sandbox):
    r = client.sh(sandbox, ["sh", "-c", "echo $PATH; command -v ls"])
    assert r["exit_code"] == 0, r
    assert "/bin" in r["stdout"], r


def test_timeout(client, sandbox):
    t0 = time.monotonic()
    r = client.sh(sandbox, "sleep 30", timeout_s=1)
    took = time.monotonic() - t0
    assert r["timed_out"] is True, r
    assert r["exit_code"] != 0, r
    assert took < 5, f"timeout_s=1 answered after {took:.1f}s"
    # The sandbox still works and the sleeper is gone.
    wait_for(lambda: "sleep 30" not in client.sh(sandbox, "ps -o args")["stdout"], 5,
             what="the timed-out sleep to be killed")


def test_timeout_kills_the_whole_process_tree(client, sandbox):
    r = client.sh(sandbox, "(sleep 300 &) ; sleep 300", timeout_s=1)
    assert r["timed_out"] is True, r
    wait_for(lambda: "sleep 300" not in client.sh(sandbox, "ps -o args")["stdout"], 5,
             what="orphaned children of a timed-out exec to be killed")


def test_background_child_holding_stdout_does_not_hang_exec(client, sandbox):
    # A daemonized child keeps the pipe open; exec must still return once
    # the main command exits (or at the timeout), not hang forever.
    t0 = time.monotonic()
    status, r = client.exec(sandbox, "sleep 60 & echo started", timeout_s=10, timeout=90)
    assert status == 200, r
    assert "started" in r["stdout"], r
    assert time.monotonic() - t0 < 30, r


def test_concurrent_execs(client, sandbox):
    results = {}
    errors = []

    def run(i):
        try:
            results[i] = client.exec(sandbox, f"sleep 1; echo {i}; echo e{i} >&2; exit {i % 5}",
                                     timeout_s=60)
        except Exception as e:  # reported below
            errors.append((i, e))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(10)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for i in range(10):
        status, r = results[i]
        assert status == 200, r
        assert r["stdout"] == f"{i}\n" and r["stderr"] == f"e{i}\n", r
        assert r["exit_code"] == i % 5, r
    # Ten 1-second sleeps run in parallel, not one after another.
    assert time.monotonic() - t0 < 9, "execs in one sandbox were serialized"


def test_large_output_intact(client, sandbox):
    # 5 MiB of deterministic, non-repeating-looking text.
    r = client.sh(sandbox, "seq 1 1000000 | head -c 5242880", timeout_s=120)
    assert r["exit_code"] == 0, {k: v for k, v in r.items() if k != "stdout"}
    out = r["stdout"]
    want = "".join(f"{i}\n" for i in range(1, 1000001))[:5242880]
    if r["truncated"]:
        pytest.fail(f"5 MiB of stdout was truncated to {len(out)} bytes")
    assert len(out) == len(want), len(out)
    assert hashlib.sha256(out.encode()).hexdigest() == hashlib.sha256(want.encode()).hexdigest()


def test_binary_output_survives_as_json(client, sandbox):
    # Non-UTF-8 output must not break the JSON answer.
    status, r = client.exec(sandbox, r"printf '\377\376ok\n'")
    assert status == 200, r
    assert r["exit_code"] == 0 and "ok" in r["stdout"], r


def test_stream_ndjson(client, sandbox):
    t0 = time.monotonic()
    events = []
    first_out_at = None
    exit_at = None
    for at, ev in client.exec_stream(sandbox, "echo first; sleep 2; echo second >&2; echo third",
                                     timeout_s=60):
        events.append(ev)
        if ev["type"] in ("stdout", "stderr") and first_out_at is None:
            first_out_at = at
        if ev["type"] == "exit":
            exit_at = at
    assert events, "no events"
    assert events[-1]["type"] == "exit", events
    assert exit_at is not None and first_out_at is not None, events
    assert first_out_at < exit_at - 1.0, \
        f"first chunk at {first_out_at - t0:.2f}s, exit at {exit_at - t0:.2f}s: not streamed"
    assert all(ev["type"] in ("stdout", "stderr", "exit") for ev in events), events
    stdout = "".join(ev["data"] for ev in events if ev["type"] == "stdout")
    stderr = "".join(ev["data"] for ev in events if ev["type"] == "stderr")
    assert stdout == "first\nthird\n", events
    assert stderr == "second\n", events
    assert events[-1]["exit_code"] == 0, events
    assert events[-1]["timed_out"] is False, events


def test_stream_exit_code_and_timeout(client, sandbox):
    events = [ev for _, ev in client.exec_stream(sandbox, "echo x; sleep 30", timeout_s=1)]
    assert events[-1]["type"] == "exit", events
    assert events[-1]["timed_out"] is True, events
    events = [ev for _, ev in client.exec_stream(sandbox, "exit 9")]
    assert events[-1]["type"] == "exit" and events[-1]["exit_code"] == 9, events


def test_stream_on_unknown_sandbox_is_404(client, node):
    status, out = client.call("POST", f"/v1/sandboxes/{node.node_id}.nosuch/exec?stream=1",
                              {"cmd": "true"})
    assert_error(status, out, 404, "not_found")



def test_stream_client_disconnect_stops_the_command(client, sandbox, node):
    # A trainer killed mid-rollout drops its connection; the command it was
    # streaming must not burn a CPU forever, and the node must stay healthy.
    body = json.dumps({"cmd": "yes"}).encode()
    s = socket.create_connection(("127.0.0.1", node.rest_port), timeout=30)
    s.sendall(f"POST /v1/sandboxes/{sandbox}/exec?stream=1 HTTP/1.1\r\nHost: x\r\n"
              f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
              .encode() + body)
    assert s.recv(64).startswith(b"HTTP/1.1 200"), "stream did not start"
    s.close()
    assert client.healthz()[0] == 200
    wait_for(lambda: "yes" not in client.sh(sandbox, "ps -o args")["stdout"].split(), 15,
             what="the streamed command to stop after its client disconnected")


def test_quiet_exec_is_cancelled_when_its_client_disconnects(client, sandbox, node):
    # No output to fail on: the node must notice the closed connection itself.
    body = json.dumps({"cmd": ["sleep", "1000"]}).encode()
    s = socket.create_connection(("127.0.0.1", node.rest_port), timeout=30)
    s.sendall(f"POST /v1/sandboxes/{sandbox}/exec HTTP/1.1\r\nHost: x\r\n"
              f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
              .encode() + body)
    wait_for(lambda: "sleep" in client.sh(sandbox, "ps -o args")["stdout"], 15,
             what="the command to start")
    s.close()
    wait_for(lambda: "sleep" not in client.sh(sandbox, "ps -o args")["stdout"], 15,
             what="the command to be killed after its client disconnected")
    assert client.sh(sandbox, "echo still-here")["stdout"] == "still-here\n"
