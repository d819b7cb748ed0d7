# Output pushed, never polled (issue 24 part 2), through REST on the
# container backend: GET /v1/sandboxes/{id}/processes/{pid}?follow=1 answers
# NDJSON in exec?stream=1's event format. A follower that comes late first gets
# what the command printed before, in the order it was printed; two followers
# each get every byte once; the exit event carries the status and no output
# (all of it went out as events); a follower that leaves does not take the
# command with it.

import http.client
import json
import threading
import time
import urllib.parse

import pytest

from dsec_harness import Node, _finish_node, assert_error, wait_for


def q(sid):
    return urllib.parse.quote(sid, safe="")


def bg(client, sid, cmd, **kw):
    body = {"cmd": cmd}
    body.update(kw)
    status, out = client.call("POST", f"/v1/sandboxes/{q(sid)}/exec?background=1", body)
    assert status == 201, (status, out)
    return out["pid"]


def follow(client, sid, pid, on_open=None):
    """[(monotonic time, event)] of one follow, until the stream ends."""
    conn = http.client.HTTPConnection(client.host, client.port, timeout=120)
    try:
        conn.request("GET", f"/v1/sandboxes/{q(sid)}/processes/{pid}?follow=1")
        r = conn.getresponse()
        assert r.status == 200, (r.status, r.read()[:2000])
        assert r.getheader("content-type", "").startswith("application/x-ndjson")
        if on_open:
            on_open()
        events = []
        while True:
            line = r.readline()
            if not line:
                return events
            if line.strip():
                events.append((time.monotonic(), json.loads(line)))
    finally:
        conn.close()


def output(events, kind="stdout"):
    return "".join(e["data"] for _, e in events if e.get("type") == kind)


def test_follow_streams_output_as_it_comes_then_the_exit(client, sandbox):
    pid = bg(client, sandbox, "for i in 1 2 3; do echo $i; sleep 0.4; done; echo e >&2; exit 4")
    events = follow(client, sandbox, pid)
    assert output(events) == "1\n2\n3\n", events
    assert output(events, "stderr") == "e\n", events
    last = events[-1][1]
    assert last["type"] == "exit" and last["exit_code"] == 4, last
    # No call moves output it already sent: the exit event carries none.
    assert last.get("stdout", "") == "" and last.get("stderr", "") == "", last
    # Pushed as printed, not at the end: the lines arrive apart.
    times = [t for t, e in events if e["type"] == "stdout"]
    assert len(times) >= 3 and times[-1] - times[0] > 0.5, events


def test_a_late_follower_first_gets_what_it_missed_in_order(client, sandbox):
    pid = bg(client, sandbox, "echo a; sleep 0.2; echo b >&2; sleep 0.2; echo c; sleep 1.5; "
                              "echo late")
    wait_for(lambda: "c" in client.call("GET", f"/v1/sandboxes/{q(sandbox)}/processes/{pid}")[1]
             .get("stdout", ""), 10, what="the early output")
    events = follow(client, sandbox, pid)
    streams = [(e["type"], e["data"]) for _, e in events if e.get("type") != "exit"]
    # What it missed comes first, as printed (stdout and stderr interleaved).
    assert streams[:3] == [("stdout", "a\n"), ("stderr", "b\n"), ("stdout", "c\n")], streams
    assert output(events) == "a\nc\nlate\n", events
    assert events[-1][1]["type"] == "exit" and events[-1][1]["exit_code"] == 0


def test_two_followers_each_get_the_output_once(client, sandbox):
    pid = bg(client, sandbox, "sleep 1; for i in $(seq 1 50); do echo line$i; done; sleep 0.3; "
                              "echo end")
    results = [None, None]
    opened = threading.Barrier(3, timeout=30)

    def run(i):
        results[i] = follow(client, sandbox, pid, on_open=opened.wait)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    opened.wait()
    for t in threads:
        t.join(60)
    want = "".join(f"line{i}\n" for i in range(1, 51)) + "end\n"
    for events in results:
        assert events is not None
        assert output(events) == want, events
        assert events[-1][1]["type"] == "exit"


def test_following_a_finished_command_replays_it_and_its_exit(client, sandbox):
    pid = bg(client, sandbox, "echo done; exit 3")
    status, out = client.call("GET", f"/v1/sandboxes/{q(sandbox)}/processes/{pid}"
                              "?wait=1&timeout_s=20")
    assert status == 200 and out["state"] == "exited", out
    events = follow(client, sandbox, pid)
    assert output(events) == "done\n"
    assert events[-1][1]["exit_code"] == 3


def test_a_follower_that_leaves_does_not_stop_the_command(client, sandbox):
    pid = bg(client, sandbox, "echo one; sleep 1.5; echo two")
    conn = http.client.HTTPConnection(client.host, client.port, timeout=30)
    conn.request("GET", f"/v1/sandboxes/{q(sandbox)}/processes/{pid}?follow=1")
    r = conn.getresponse()
    assert r.status == 200
    assert json.loads(r.readline())["data"] == "one\n"
    conn.close()  # leaves while the command runs
    status, out = client.call("GET", f"/v1/sandboxes/{q(sandbox)}/processes/{pid}"
                              "?wait=1&timeout_s=20")
    assert status == 200 and out["state"] == "exited" and out["exit_code"] == 0, out
    assert out["stdout"] == "one\ntwo\n"


def test_follow_of_an_unknown_pid_is_404(client, sandbox):
    status, out = client.call("GET", f"/v1/sandboxes/{q(sandbox)}/processes/99999?follow=1")
    assert_error(status, out, 404, "not_found")
    assert "99999" in out["error"]["message"]


def test_follow_on_an_unknown_sandbox_is_404(client, node):
    status, out = client.call("GET", f"/v1/sandboxes/{node.node_id}.nosuch/processes/5?follow=1")
    assert_error(status, out, 404, "not_found")


def test_a_follow_ends_with_its_sandbox(client):
    sid = client.create_ok(cpu=1, memory_mb=256)
    pid = bg(client, sid, "echo up; sleep 600")
    box = {}

    def run():
        box["events"] = follow(client, sid, pid)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)
    status, _ = client.call("DELETE", f"/v1/sandboxes/{q(sid)}")
    assert status == 200
    t.join(30)
    assert not t.is_alive(), "the follow outlived its sandbox"
    events = box["events"]
    assert output(events) == "up\n", events
    # The stream ends with the reason, in the error form of a streamed exec.
    assert "error" in events[-1][1] or events[-1][1].get("type") == "exit", events


# -- across nodes ----------------------------------------------------------------


@pytest.fixture(scope="module")
def pair(dsec_bin, store):
    """Two joined nodes."""
    first = Node(dsec_bin, store).start()
    second = Node(dsec_bin, store, extra_args=["--join", f"127.0.0.1:{first.listen_port}"]).start()
    ids = {first.node_id, second.node_id}

    def alive(n):
        status, out = n.client.call("GET", "/v1/nodes")
        return status == 200 and {m["id"] for m in out.get("nodes", [])
                                  if m.get("state") == "alive"} == ids

    for n in (first, second):
        wait_for(lambda: alive(n), 30, what=f"{n.node_id} to see both members")
    yield first, second
    for n in (first, second):
        _finish_node(n)


def test_followers_on_another_node_get_the_output_once(pair):
    first, second = pair
    sid = first.client.create_ok(node=second.node_id, cpu=1, memory_mb=256)
    pid = bg(first.client, sid, "echo early; sleep 1; for i in 1 2 3; do echo n$i; done; "
                                "sleep 0.3; exit 2")
    wait_for(lambda: "early" in second.client.call(
        "GET", f"/v1/sandboxes/{q(sid)}/processes/{pid}")[1].get("stdout", ""), 10,
        what="the early output")
    results = {}

    def run(name, client):
        results[name] = follow(client, sid, pid)

    # One follower through the owner, one through the other node (its sink,
    # the gateway's relay, lives there); both come late.
    threads = [threading.Thread(target=run, args=(n, c))
               for n, c in (("remote", first.client), ("owner", second.client))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for name, events in results.items():
        assert output(events) == "early\nn1\nn2\nn3\n", (name, events)
        assert events[-1][1]["type"] == "exit" and events[-1][1]["exit_code"] == 2, (name, events)
    assert set(results) == {"remote", "owner"}
    first.client.delete(sid)
