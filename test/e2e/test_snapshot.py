# Snapshots (DSec's pack_diff) and pause/resume, through REST and the SDK.
#
# A snapshot turns a sandbox's changes (new and edited files, deletions,
# directories it replaced) into a layer; creating with the source's layers +
# that ref branches any number of independent sandboxes from that point,
# while the source keeps running. Pause freezes every process (they survive,
# their files too). Any call on a paused sandbox (exec, files, snapshot,
# network) resumes it first and then runs: transparent resume.
import os
import time
import urllib.parse

import pytest

from dsec_harness import BUSYBOX, assert_error


def q(sid):
    return urllib.parse.quote(sid, safe="")


def snapshot(client, sid, body=None):
    status, out = client.call("POST", f"/v1/sandboxes/{q(sid)}/snapshot", body)
    assert status == 201, f"snapshot {sid}: {status} {out}"
    return out


# The source's changes: a new file, an edited lower file, a deleted lower
# file (whiteout), and a lower directory replaced wholesale (opaque dir).
CHANGES = (
    "mkdir -p /work && echo step-k > /work/state"
    " && echo edited > /etc/hostname"
    " && rm /etc/passwd"
    " && rm -rf /usr && mkdir -p /usr/only && echo mine > /usr/only/file"
)


def test_snapshot_branches_see_changes_and_deletions(client):
    src = client.create_ok()
    assert client.sh(src, "ls /usr | wc -l")["stdout"].strip() != "1"  # lower /usr has content
    client.sh(src, CHANGES)
    snap = snapshot(client, src)
    assert snap["ref"].startswith("snapshot/") and snap["digest"].startswith("sha256:")
    assert snap["layers"] == [BUSYBOX, snap["ref"]]

    # The source keeps running and its later changes do not reach branches.
    assert client.sh(src, "cat /work/state")["stdout"] == "step-k\n"
    client.sh(src, "echo after > /work/state")

    a = client.create_ok(layers=snap["layers"])
    b = client.create_ok(layers=snap["layers"])
    for sid in (a, b):
        assert client.sh(sid, "cat /work/state")["stdout"] == "step-k\n"
        assert client.sh(sid, "cat /etc/hostname")["stdout"] == "edited\n"
        assert "No such file" in client.sh(sid, "cat /etc/passwd 2>&1; true")["stdout"]
        assert client.sh(sid, "ls /usr")["stdout"] == "only\n"  # opaque: lower /usr gone
        assert client.sh(sid, "cat /usr/only/file")["stdout"] == "mine\n"
        assert client.sh(sid, "/bin/busybox true; echo $?")["stdout"] == "0\n"  # lower still there

    # Branches diverge independently.
    client.sh(a, "echo a > /work/state && rm /etc/hostname")
    client.sh(b, "echo b > /work/state")
    assert client.sh(a, "cat /work/state")["stdout"] == "a\n"
    assert client.sh(b, "cat /work/state")["stdout"] == "b\n"
    assert client.sh(b, "cat /etc/hostname")["stdout"] == "edited\n"
    assert client.sh(src, "cat /work/state")["stdout"] == "after\n"

    # A snapshot of a branch stacks on the first: step k+1.
    snap2 = snapshot(client, a, {"name": "test/branch-a", "version": str(time.time_ns())})
    assert snap2["layers"] == [BUSYBOX, snap["ref"], snap2["ref"]]
    c = client.create_ok(layers=snap2["layers"])
    assert client.sh(c, "cat /work/state")["stdout"] == "a\n"
    assert "No such file" in client.sh(c, "cat /etc/hostname 2>&1; true")["stdout"]

    status, layers = client.call("GET", "/v1/layers")
    kinds = {l["ref"]: l["kind"] for l in layers["layers"]}
    assert kinds[snap["ref"]] == "snapshot" and kinds[snap2["ref"]] == "snapshot"


def test_snapshot_name_conflict_and_bad_input(client):
    sid = client.create_ok()
    version = str(time.time_ns())
    client.sh(sid, "echo one > /one")
    snapshot(client, sid, {"name": "test/conflict", "version": version})
    client.sh(sid, "echo two > /two")
    status, out = client.call("POST", f"/v1/sandboxes/{q(sid)}/snapshot",
                              {"name": "test/conflict", "version": version})
    assert_error(status, out, 409, "conflict")
    status, out = client.call("POST", f"/v1/sandboxes/{q(sid)}/snapshot", {"name": "Bad Name!"})
    assert_error(status, out, 400, "invalid_argument")
    status, out = client.call("POST", f"/v1/sandboxes/{q(sid)}/snapshot", {"nme": "x"})
    assert_error(status, out, 400, "invalid_argument")
    status, out = client.call("POST", f"/v1/sandboxes/{q(sid)}/snapshot", "not json")
    assert_error(status, out, 400, "invalid_argument")
    status, out = client.call("POST", "/v1/sandboxes/nosuchnode.abc/snapshot")
    assert status in (404, 503), (status, out)
    status, out = client.call("GET", f"/v1/sandboxes/{q(sid)}/snapshot")
    assert status == 405


def test_pause_keeps_processes_and_files(client):
    sid = client.create_ok()
    client.sh(sid, "echo kept > /kept; (i=0; while true; do i=$((i+1)); echo $i > /count;"
                   " sleep 0.05; done) >/dev/null 2>&1 &")
    time.sleep(0.3)
    status, info = client.call("POST", f"/v1/sandboxes/{q(sid)}/pause")
    assert status == 200 and info["state"] == "paused", (status, info)
    assert client.get(sid)[1]["state"] == "paused"
    # Pause again is fine.
    assert client.call("POST", f"/v1/sandboxes/{q(sid)}/pause")[0] == 200
    # The counter does not move while frozen (read through a snapshot-free
    # path: the host sees the upper directly via a resumed read later).
    time.sleep(0.5)
    status, info = client.call("POST", f"/v1/sandboxes/{q(sid)}/resume")
    assert status == 200 and info["state"] == "running"
    first = int(client.sh(sid, "cat /count")["stdout"])
    time.sleep(0.4)
    second = int(client.sh(sid, "cat /count")["stdout"])
    assert second > first, "the background loop did not survive pause/resume"
    assert client.sh(sid, "cat /kept")["stdout"] == "kept\n"
    assert client.call("POST", f"/v1/sandboxes/{q(sid)}/resume")[0] == 200


def upper_file(node, sid, path):
    """A file of the sandbox as the host sees it in its overlay upper (no
    call on the sandbox, so it stays paused)."""
    with open(os.path.join(node.state_dir, "sandboxes", sid, "upper", path.lstrip("/"))) as f:
        return f.read()


def test_frozen_loop_does_not_run_while_paused(node, client):
    sid = client.create_ok()
    client.sh(sid, "(i=0; while true; do i=$((i+1)); echo $i > /t.tmp; mv /t.tmp /tick; sleep 0.02; done)"
                   " >/dev/null 2>&1 &")
    time.sleep(0.3)
    assert client.call("POST", f"/v1/sandboxes/{q(sid)}/pause")[0] == 200
    frozen = upper_file(node, sid, "/tick")
    time.sleep(0.5)
    assert upper_file(node, sid, "/tick") == frozen, "the loop ran while paused"
    assert client.get(sid)[1]["state"] == "paused"
    assert client.call("POST", f"/v1/sandboxes/{q(sid)}/resume")[0] == 200
    time.sleep(0.2)
    assert int(client.sh(sid, "cat /tick")["stdout"]) > int(frozen)


@pytest.mark.parametrize("call", ["exec", "read", "write", "snapshot", "network"])
def test_a_call_on_a_paused_sandbox_resumes_it(node, client, call):
    sid = client.create_ok()
    client.sh(sid, "echo kept > /kept; (i=0; while true; do i=$((i+1)); echo $i > /t.tmp;"
                   " mv /t.tmp /tick; sleep 0.02; done) >/dev/null 2>&1 &")
    time.sleep(0.2)
    assert client.call("POST", f"/v1/sandboxes/{q(sid)}/pause")[1]["state"] == "paused"
    frozen = int(upper_file(node, sid, "/tick"))
    if call == "exec":
        r = client.sh(sid, "cat /kept")
        assert r["exit_code"] == 0 and r["stdout"] == "kept\n", r
    elif call == "read":
        status, body = client.get_file(sid, "/kept")
        assert status == 200 and body == b"kept\n", (status, body)
    elif call == "write":
        status, _ = client.put_file(sid, "/new", b"new")
        assert status in (200, 201, 204)
    elif call == "snapshot":
        snap = snapshot(client, sid)
        b = client.create_ok(layers=snap["layers"])
        assert client.sh(b, "cat /kept")["stdout"] == "kept\n"
    else:
        status, out = client.call("PUT", f"/v1/sandboxes/{q(sid)}/network", {"mode": "none"})
        assert status == 200, (status, out)
    # Resumed: running, and its processes go on where they stood.
    assert client.get(sid)[1]["state"] == "running"
    listed = client.list()[1]["sandboxes"]
    assert [s["state"] for s in listed if s["id"] == sid] == ["running"], listed
    time.sleep(0.2)
    assert int(client.sh(sid, "cat /tick")["stdout"]) > frozen


def test_destroy_paused_sandbox_leaves_nothing(node, client):
    sid = client.create_ok()
    client.sh(sid, "sleep 1000 >/dev/null 2>&1 &")
    assert client.call("POST", f"/v1/sandboxes/{q(sid)}/pause")[0] == 200
    status, out = client.delete(sid)
    assert status == 200 and out["deleted"], (status, out)
    assert client.get(sid)[0] == 404
    node.check_clean()


def test_pause_and_network_bad_input(client):
    for path in ("pause", "resume"):
        assert_error(*client.call("POST", f"/v1/sandboxes/nosuch.x/{path}"), 404)
        assert client.call("GET", f"/v1/sandboxes/nosuch.x/{path}")[0] == 405
    sid = client.create_ok()
    bad = [{"allow": "x"}, {"allow": ["no-port"]}, {"allow": ["1.2.3.4:99999"]},
           {"mode": "open"}, {"allow": [""]}, "[]", "nope"]
    for body in bad:
        status, out = client.call("PUT", f"/v1/sandboxes/{q(sid)}/network", body)
        assert_error(status, out, 400, "invalid_argument")
    assert_error(*client.call("PUT", "/v1/sandboxes/nosuch.x/network", {"mode": "none"}), 404)
    status, out = client.call("PUT", f"/v1/sandboxes/{q(sid)}/network", {"mode": "none"})
    assert status == 200, (status, out)


def test_sdk_pause_resume_snapshot(node, sdk):
    with sdk.create(layers=[BUSYBOX]) as sb:
        sb.exec("echo sdk > /sdk")
        assert sb.pause().state == "paused"
        # A call on a paused sandbox resumes it (transparent resume).
        assert sb.exec("cat /sdk").stdout == "sdk\n"
        assert sb.info().state == "running"
        assert sb.pause().state == "paused"
        assert sb.resume().state == "running"
        snap = sb.snapshot()
        assert snap.layers[-1] == snap.ref
        with sdk.create(layers=snap.layers) as br:
            assert br.exec("cat /sdk").stdout == "sdk\n"
        info = sb.info()
        assert set(info.denials) >= {"network", "syscall", "file", "recent"}
        sb.set_network([])
