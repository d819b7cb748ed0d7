# Protected paths (spec `protect`): read-only paths stay read-only to root
# inside the sandbox, hidden paths show nothing, and no agent-side trick
# (remount, unmount, chmod, rename, symlink swap) undoes either. The trainer's
# own file API still reaches them: protections bind the agent, not the trainer.
import pytest

from dsec_harness import assert_error

# Paths the busybox layer holds: /etc and /bin (read-only: the tools a grader
# runs), /root and /etc/group (hidden).
PROTECT = {"readonly": ["/etc", "/bin"], "hidden": ["/root", "/etc/group"]}


@pytest.fixture
def guarded(client):
    return client.create_ok(protect=PROTECT)


def fails(client, sid, cmd):
    out = client.sh(sid, "(" + cmd + ") 2>&1; echo rc=$?")
    assert not out["stdout"].rstrip().endswith("rc=0"), f"{cmd!r} succeeded: {out}"
    return out["stdout"]


def test_readonly_paths_hold_for_root(client, guarded):
    sid = guarded
    assert client.sh(sid, "id -u")["stdout"] == "0\n"
    before = client.sh(sid, "cat /etc/passwd")["stdout"]
    assert "Read-only file system" in fails(client, sid, "echo pwned >> /etc/passwd")
    fails(client, sid, "rm -f /etc/passwd")
    fails(client, sid, "touch /etc/new")
    fails(client, sid, "mv /etc/passwd /etc/p2")
    fails(client, sid, "chmod 777 /etc/passwd")
    fails(client, sid, "ln -sf /tmp/x /etc/passwd")
    fails(client, sid, "cp /bin/busybox /bin/sh2")
    fails(client, sid, "echo x > /bin/sh")
    fails(client, sid, "mount -o remount,rw /etc")
    fails(client, sid, "umount /etc")
    fails(client, sid, "umount -l /bin")
    assert client.sh(sid, "cat /etc/passwd")["stdout"] == before
    # Everything else stays writable.
    assert client.sh(sid, "echo ok > /tmp/x && cat /tmp/x")["stdout"] == "ok\n"
    assert client.sh(sid, "mkdir -p /work/a && echo y > /work/a/f && cat /work/a/f")["stdout"] == "y\n"


def test_hidden_paths_show_nothing(client, guarded):
    sid = guarded
    assert client.sh(sid, "ls -A /root")["stdout"] == ""
    assert client.sh(sid, "cat /etc/group; echo end")["stdout"] == "end\n"
    fails(client, sid, "touch /root/x")
    fails(client, sid, "umount /root")
    fails(client, sid, "echo x > /etc/group")


def test_trainer_file_api_still_reaches_protected_paths(client, guarded):
    sid = guarded
    status, _ = client.put_file(sid, "/etc/answer_key", b"42")
    assert status in (200, 201)
    # The agent sees the planted file, read-only.
    assert client.sh(sid, "cat /etc/answer_key")["stdout"] == "42"
    fails(client, sid, "echo 41 > /etc/answer_key")


def test_bad_protected_paths_are_4xx(client):
    for protect, needle in (({"readonly": ["etc"]}, "protect.readonly"),
                            ({"hidden": ["/proc/1"]}, "/proc"),
                            ({"hidden": ["/"]}, "protect.hidden"),
                            ({"readonly": ["/no/such/dir"]}, "/no/such/dir")):
        status, out = client.create(protect=protect)
        assert_error(status, out, 400, "invalid_argument")
        assert needle in out["error"]["message"], out


def test_a_single_file_can_be_read_only(client):
    # /bin/sh is a symlink to busybox in the layer: it resolves inside the root.
    sid = client.create_ok(protect={"readonly": ["/bin/busybox"]})
    assert "Read-only" in fails(client, sid, "echo x > /bin/busybox")
    assert client.sh(sid, "echo still works")["stdout"] == "still works\n"


def test_python_sdk_protects_too(node, dsec_sdk):
    c = dsec_sdk.Client(f"127.0.0.1:{node.listen_port}")
    try:
        with c.create(layers=["base/busybox@1"], protect_readonly=["/bin"],
                      protect_hidden=["/root"]) as sb:
            r = sb.exec("echo x > /bin/busybox")
            assert r.exit_code != 0 and "Read-only" in r.stderr
            assert sb.exec("ls -A /root").stdout == ""
        with pytest.raises(dsec_sdk.InvalidArgument):
            c.create(layers=["base/busybox@1"], protect_hidden=["/nope"])
    finally:
        c.close()
