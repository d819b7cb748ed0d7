# A pause that keeps only the files (E2B's keepMemory false; native
# `POST /v1/sandboxes/{id}/pause {"keep_memory": false}`, `sb.pause(keep_memory=False)`,
# `dsec pause --no-memory`, `on_timeout: "pause_files"`): every process of the
# sandbox ends and its cgroups, namespaces and memory go; its files stay, new,
# changed and deleted ones alike; the resume boots it again on them, with a new
# boot id, as a VM that was shut down and started. A node killed while the
# sandbox is powered off finds it again; a destroy removes what is left.

import json
import os
import signal
import time

from dsec_harness import BUSYBOX, assert_clean, cgroup_dirs, procs_in_node_cgroups, wait_for

BOOT_ID = "/proc/sys/kernel/random/boot_id"


def sh_ok(c, sid, cmd):
    status, out = c.exec(sid, ["sh", "-c", cmd])
    assert status == 200 and out["exit_code"] == 0, (cmd, status, out)
    return out["stdout"]


def pause(c, sid, body=None):
    return c.call("POST", f"/v1/sandboxes/{sid}/pause", body)


def procs_of(node_id, sid):
    needle = f"/dsec/{node_id}/{sid}"
    return [p for p, line in procs_in_node_cgroups(node_id)
            if line.endswith(needle) or needle + "/" in line]


def prepare(c, sid):
    """Files of every kind of change, a process, and the boot id."""
    sh_ok(c, sid, "echo kept > /root/kept.txt && mkdir -p /work && echo w > /work/w.txt"
                  " && rm /etc/hostname && (sleep 1000 &) ; true")
    return sh_ok(c, sid, f"cat {BOOT_ID}").strip()


def check_booted_again(c, sid, boot_before):
    assert sh_ok(c, sid, "cat /root/kept.txt /work/w.txt") == "kept\nw\n"
    # The deleted file stays deleted (its whiteout is in the kept upper).
    assert sh_ok(c, sid, "test -e /etc/hostname && echo there || echo gone") == "gone\n"
    # Nothing of the processes before: no sleep, and a new boot id.
    assert "sleep 1000" not in sh_ok(c, sid, "ps -o args")
    boot_after = sh_ok(c, sid, f"cat {BOOT_ID}").strip()
    assert len(boot_after) == 36 and boot_after != boot_before


def test_pause_without_memory_keeps_files_and_boots_again(node):
    c = node.client
    sid = c.create_ok(memory_mb=128, labels={"suite": "pause-files"})
    boot = prepare(c, sid)
    # Each sandbox has its own boot id, not the host's.
    with open(BOOT_ID) as f:
        assert f.read().strip() != boot
    status, info = pause(c, sid, {"keep_memory": False})
    assert status == 200 and info["state"] == "paused", info
    # Powered off: no process, no cgroup; its directory is all that is left.
    assert procs_of(node.node_id, sid) == []
    assert cgroup_dirs(node.node_id, sid) == []
    assert os.path.isdir(os.path.join(node.state_dir, "sandboxes", sid, "upper"))
    status, again = pause(c, sid, {"keep_memory": False})
    assert status == 200 and again["state"] == "paused", again  # idempotent
    status, info = c.call("POST", f"/v1/sandboxes/{sid}/resume")
    assert status == 200 and info["state"] == "running", info
    check_booted_again(c, sid, boot)
    # It pauses and resumes as any sandbox afterwards, memory kept.
    status, _ = pause(c, sid)
    assert status == 200
    assert sh_ok(c, sid, "cat /root/kept.txt") == "kept\n"  # the transparent resume
    assert c.delete(sid)[0] == 200


def test_a_call_boots_a_powered_off_sandbox_and_destroy_removes_it(node):
    c = node.client
    sid = c.create_ok(memory_mb=128)
    boot = prepare(c, sid)
    assert pause(c, sid, {"keep_memory": False})[0] == 200
    # auto_resume (the native default): the exec boots it again first.
    check_booted_again(c, sid, boot)
    assert pause(c, sid, {"keep_memory": False})[0] == 200
    assert c.delete(sid)[0] == 200
    wait_for(lambda: not os.path.exists(os.path.join(node.state_dir, "sandboxes", sid)), 10,
             what=f"the directory of {sid} to go")
    assert cgroup_dirs(node.node_id, sid) == []


def test_bad_pause_bodies_are_refused_by_name(node):
    c = node.client
    sid = c.create_ok(memory_mb=128)
    for body, named in (({"keep_memory": "no"}, "keep_memory must be a boolean"),
                        ({"keep_memory": False, "surprise": 1}, "surprise"),
                        ("[1]", "JSON object")):
        status, out = pause(c, sid, body)
        assert status == 400, (body, status, out)
        assert named in out["error"]["message"], out
    assert c.get(sid)[1]["state"] == "running"
    status, out = c.create(memory_mb=128, on_timeout="pause_files", backend="fncall")
    assert status == 400 and "pause_files" in out["error"]["message"], out
    status, out = c.create(memory_mb=128, on_timeout="hibernate")
    assert status == 400 and "pause_files" in out["error"]["message"], out
    assert c.delete(sid)[0] == 200


def test_on_timeout_pause_files(node):
    c = node.client
    sid = c.create_ok(memory_mb=128, ttl_s=3, on_timeout="pause_files")
    boot = prepare(c, sid)
    wait_for(lambda: c.get(sid)[1]["state"] == "paused", 20, what=f"{sid} paused at its TTL")
    wait_for(lambda: procs_of(node.node_id, sid) == [], 10, what=f"{sid} powered off")
    assert c.get(sid)[1]["on_timeout"] == "pause_files"
    check_booted_again(c, sid, boot)
    assert c.delete(sid)[0] == 200


def test_a_node_killed_while_a_sandbox_is_powered_off_keeps_it(node_factory):
    n = node_factory.start()
    c = n.client
    sid = c.create_ok(memory_mb=128, ttl_s=3600, labels={"suite": "pause-files"})
    other = c.create_ok(memory_mb=128, ttl_s=3600, labels={"suite": "pause-files"})
    boot, other_boot = prepare(c, sid), prepare(c, other)
    assert pause(c, sid, {"keep_memory": False})[0] == 200
    assert pause(c, other, {"keep_memory": False})[0] == 200
    n.proc.send_signal(signal.SIGKILL)
    n.proc.wait(30)
    # The node answers a pause before its record says so (written on a
    # worker): a kill in between leaves a record of a running sandbox.
    record = os.path.join(n.state_dir, "sandboxes", other, "record.json")
    with open(record) as f:
        rec = json.load(f)
    rec.update(paused_at_ms=0, ttl_left_ms=0, expires_at_ms=int(time.time() * 1000) + 3_600_000)
    with open(record, "w") as f:
        json.dump(rec, f)
    n.start()  # same state dir, ports and node id
    listed = {i["id"]: i["state"] for i in c.list({"suite": "pause-files"})[1]["sandboxes"]}
    for s in (sid, other):
        assert f"recovered sandbox {s}" in n.log_tail(), n.log_tail()
        status, info = c.get(s)
        assert status == 200 and info["state"] == "paused", info
        assert listed[s] == "paused", listed
    check_booted_again(c, sid, boot)
    check_booted_again(c, other, other_boot)
    assert c.delete(sid)[0] == 200 and c.delete(other)[0] == 200
    n.stop_ok()
    assert_clean(n, allow_layer_mounts=False)


def test_python_and_cli_pause_without_memory(node, sdk, dsec_sdk, cli):
    sb = sdk.create(layers=[BUSYBOX], memory_mb=128)
    sb.write_file("/root/kept.txt", "kept")
    assert sb.exec(["sh", "-c", "sleep 1000 &"]).exit_code == 0
    info = sb.pause(keep_memory=False)
    assert info.state == "paused"
    assert procs_of(node.node_id, sb.id) == []
    assert sb.resume().state == "running"
    assert sb.read_file("/root/kept.txt") == b"kept"
    try:
        sb.pause(keep_memory="no")
        raise AssertionError("keep_memory='no' was accepted")
    except dsec_sdk.InvalidArgument as e:
        assert "keep_memory" in str(e)
    # The CLI: by id; a whole job by label is refused by name.
    r = cli("pause", "--no-memory", sb.id)
    assert r.returncode == 0 and sb.id in r.stdout.decode(), (r.stdout, r.stderr)
    assert procs_of(node.node_id, sb.id) == []
    r = cli("pause", "--no-memory", "--label", "a=b")
    assert r.returncode == 2 and b"--no-memory" in r.stderr, (r.stdout, r.stderr)
    r = cli("resume", "--no-memory", sb.id)
    assert r.returncode == 2 and b"--no-memory" in r.stderr, (r.stdout, r.stderr)
    assert sb.resume().state == "running"
    sb.destroy()


def test_pause_and_resume_answer_help(cli):
    for verb in ("pause", "resume"):
        r = cli(verb, "--help", rest=False)
        assert r.returncode == 0 and b"usage: dsec " + verb.encode() in r.stdout, r
    assert b"--no-memory" in cli("pause", "--help", rest=False).stdout
