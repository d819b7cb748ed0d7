# Idle policies and what the end of a TTL does (spec idle_timeout_s, on_idle,
# on_timeout, auto_resume; actors/sandbox_idle.hpp): a sandbox with no call
# and no CPU for idle_timeout_s is paused (or destroyed), a busy one or one
# that keeps being called is not, on_timeout "pause" pauses at the TTL's end
# with the whole TTL kept for the next run, and auto_resume false makes a
# call on a paused sandbox fail until an explicit resume. Through REST, the
# SDK and the CLI; bad values are 400s that name the field.
import json
import subprocess
import time

import pytest

from dsec_harness import BUSYBOX, assert_clean, assert_error, import_sdk, wait_for


def state(c, sid):
    status, out = c.get(sid)
    return out["state"] if status == 200 else status


def test_an_idle_sandbox_is_paused_and_a_call_resumes_it(client, node):
    sid = client.create_ok(memory_mb=64, idle_timeout_s=3)
    client.sh(sid, "echo kept > /tmp/f")
    status, s = client.get(sid)
    assert s["idle_timeout_s"] == 3 and s["on_idle"] == "pause" and s["auto_resume"] is True
    wait_for(lambda: state(client, sid) == "paused", 30, what=f"{sid} paused when idle")
    assert "past its idle_timeout_s of 3 s: pausing it" in node.log_tail(300)
    # Any call resumes it, as for any paused sandbox; its files are kept.
    assert client.sh(sid, "cat /tmp/f")["stdout"] == "kept\n"
    assert state(client, sid) == "running"
    # ... and it is paused again once it is idle again.
    wait_for(lambda: state(client, sid) == "paused", 30, what=f"{sid} paused again")


def test_calls_and_cpu_keep_a_sandbox_running(client):
    called = client.create_ok(memory_mb=64, idle_timeout_s=3)
    busy = client.create_ok(memory_mb=64, idle_timeout_s=3)
    client.sh(busy, "(while :; do :; done) >/dev/null 2>&1 &")
    end = time.monotonic() + 9
    while time.monotonic() < end:  # three idle timeouts of calls, one a second
        client.sh(called, "true")
        assert state(client, called) == "running"
        time.sleep(1)
    assert state(client, busy) == "running", "a sandbox using CPU was taken for idle"
    # Once the calls stop, it goes idle.
    wait_for(lambda: state(client, called) == "paused", 30, what=f"{called} paused")
    assert state(client, busy) == "running"


def test_a_long_call_is_not_idle(client):
    sid = client.create_ok(memory_mb=64, idle_timeout_s=2)
    out = client.sh(sid, "sleep 7; echo done", timeout_s=30)  # no CPU, but a call in flight
    assert out["stdout"] == "done\n"


def test_on_idle_destroy_removes_the_sandbox_and_leaves_nothing(node_factory):
    n = node_factory.start()
    c = n.client
    sid = c.create_ok(memory_mb=64, idle_timeout_s=2, on_idle="destroy")
    keep = c.create_ok(memory_mb=64)
    wait_for(lambda: c.get(sid)[0] == 404, 30, what=f"{sid} destroyed when idle")
    c.created.remove(sid)
    assert "past its idle_timeout_s of 2 s: destroying it (on_idle destroy)" in n.log_tail(300)
    assert state(c, keep) == "running", "a sandbox without an idle policy was touched"
    c.call("DELETE", f"/v1/sandboxes/{keep}")
    c.created.remove(keep)
    assert_clean(n, allow_layer_mounts=True)


def test_on_timeout_pause_pauses_at_the_ttl_and_gives_it_again(client, node):
    sid = client.create_ok(memory_mb=64, ttl_s=3, on_timeout="pause")
    client.sh(sid, "echo kept > /tmp/f")
    wait_for(lambda: state(client, sid) == "paused", 30, what=f"{sid} paused at its ttl")
    assert "ran out: pausing it (on_timeout pause)" in node.log_tail(300)
    status, s = client.get(sid)
    assert s["on_timeout"] == "pause" and 2.5 < s["ttl_remaining_s"] <= 3, s  # the whole TTL
    status, r = client.call("POST", f"/v1/sandboxes/{sid}/resume")
    assert status == 200 and r["state"] == "running" and 2 <= r["ttl_remaining_s"] <= 3, r
    assert client.sh(sid, "cat /tmp/f")["stdout"] == "kept\n"
    wait_for(lambda: state(client, sid) == "paused", 30, what=f"{sid} paused at its ttl again")


def test_without_auto_resume_a_call_on_a_paused_sandbox_fails(client):
    sid = client.create_ok(memory_mb=64, auto_resume=False)
    status, out = client.call("POST", f"/v1/sandboxes/{sid}/pause")
    assert status == 200, out
    status, out = client.exec(sid, "true")
    assert_error(status, out, 503, "unavailable")
    assert "is paused" in out["error"]["message"] and "auto_resume" in out["error"]["message"]
    assert state(client, sid) == "paused"
    status, out = client.call("POST", f"/v1/sandboxes/{sid}/resume")
    assert status == 200, out
    assert client.sh(sid, "echo hi")["stdout"] == "hi\n"


@pytest.mark.parametrize("field,value", [
    ("on_idle", "sleep"), ("on_timeout", "kill"), ("idle_timeout_s", -1),
    ("idle_timeout_s", 2592001), ("idle_timeout_s", "5"), ("auto_resume", "yes"),
])
def test_bad_values_are_400s_that_name_the_field(client, field, value):
    status, out = client.create(memory_mb=64, **{field: value})
    assert_error(status, out, 400, "invalid_argument")
    assert field in out["error"]["message"], out


def test_fncall_cannot_pause(client):
    status, out = client.create(backend="fncall", on_timeout="pause")
    assert_error(status, out, 400, "invalid_argument")
    assert "on_timeout" in out["error"]["message"] and "fncall" in out["error"]["message"]


def test_sdk_and_cli(node, dsec_bin):
    dsec = import_sdk()
    with dsec.Client(f"127.0.0.1:{node.listen_port}") as c:
        sb = c.create([BUSYBOX], memory_mb=64, idle_timeout_s=2, on_idle="destroy")
        i = sb.info()
        assert (i.idle_timeout_s, i.on_idle, i.on_timeout, i.auto_resume) == \
            (2, "destroy", "destroy", True)
        wait_for(lambda: sb.id not in {s.id for s in c.list()}, 30,
                 what=f"{sb.id} destroyed when idle")
        with pytest.raises(dsec.InvalidArgument) as exc:
            c.create([BUSYBOX], on_idle="later")
        assert "on_idle" in exc.value.message
        with pytest.raises(dsec.InvalidArgument):
            c.create([BUSYBOX], auto_resume="no")
        p = c.create([BUSYBOX], memory_mb=64, auto_resume=False)
        p.pause()
        with pytest.raises(dsec.Unavailable) as exc:
            p.exec(["true"])
        assert "is paused" in exc.value.message
        p.resume()
        assert p.exec(["echo", "ok"]).stdout == "ok\n"
        p.destroy()

    rest = f"127.0.0.1:{node.rest_port}"
    out = subprocess.run([dsec_bin, "create", "--rest", rest, "--memory-mb", "64",
                          "--idle-timeout-s", "30", "--on-idle", "destroy",
                          "--on-timeout", "pause", "--no-auto-resume", "--json"],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out
    made = json.loads(out.stdout)
    assert (made["idle_timeout_s"], made["on_idle"], made["on_timeout"], made["auto_resume"]) \
        == (30, "destroy", "pause", False), made
    node.client.call("DELETE", f"/v1/sandboxes/{made['id']}")
    bad = subprocess.run([dsec_bin, "create", "--rest", rest, "--on-idle", "nap"],
                         capture_output=True, timeout=60)
    assert bad.returncode != 0 and b"on_idle" in bad.stderr, bad
    helptext = subprocess.run([dsec_bin, "create", "--help"], capture_output=True, timeout=30)
    assert b"--idle-timeout-s" in helptext.stdout and b"--no-auto-resume" in helptext.stdout
