# E2B's user and home (issue 27, A1): the `base` template is base/e2b@1, built
# by `dsec layer defaults --e2b` (this module builds it into the test store
# when it is missing: a debootstrap of a few minutes, once). Through the
# unmodified `e2b` SDK (test/e2e/e2b/user.mjs): commands run as `user` in
# /home/user, relative paths start there, files written belong to the user,
# an explicit user wins, git through the SDK's helpers, python and pip. The
# native API on the same layer keeps its own defaults: root in /.
# `base` also stacks toolkit/e2b-sudo@1: `user` has passwordless sudo
# (test/e2e/e2b/sudo.mjs; dsec-init runs the command, backends/init/sudo_proto.hpp).

from test_e2b import e2b_module, e2b_node, key_file, keyed_node, run_js  # noqa: F401 (fixtures)
from dsec_harness import _finish_node

E2B_BASE = "base/e2b@1"
E2B_SUDO = "toolkit/e2b-sudo@1"  # stacked on it: /usr/bin/sudo and /etc/dsec/sudo-users


def test_e2b_calls_run_as_user_in_home(e2b_module, e2b_node, e2b_base):
    out = run_js(e2b_module, e2b_node, "user")
    assert out["ok"]


def test_the_base_template_is_the_e2b_layer(e2b_node, e2b_base):
    c = e2b_node.client
    status, sb = c.call("POST", "/v2/sandboxes", {"templateID": "base"})
    assert status == 201, sb
    try:
        status, info = c.get(sb["sandboxID"])
        assert status == 200 and info["layers"] == [E2B_BASE, E2B_SUDO], info
    finally:
        c.delete(sb["sandboxID"])


def test_native_calls_keep_their_defaults(e2b_node, e2b_base):
    """The same layer through the native API: root in /, files the node writes are root's."""
    c = e2b_node.client
    sid = c.create_ok(layers=[E2B_BASE])
    try:
        assert c.sh(sid, "whoami; pwd")["stdout"] == "root\n/\n"
        status, body = c.put_file(sid, "/home/user/native.txt", b"n")
        assert status == 200, body
        assert c.sh(sid, "stat -c %U /home/user/native.txt")["stdout"] == "root\n"
        # An explicit user on the native API is honoured as before.
        r = c.sh(sid, "whoami; echo $HOME", user="user")
        assert r["stdout"] == "user\n/home/user\n", r
    finally:
        c.delete(sid)


def test_an_unknown_user_is_refused_by_name(e2b_node, e2b_base):
    """envd's auth user names a user the sandbox lacks: a 400 naming it, not root."""
    c = e2b_node.client
    status, sb = c.call("POST", "/v2/sandboxes", {"templateID": "base"})
    assert status == 201, sb
    sid = sb["sandboxID"]
    try:
        headers = {"E2b-Sandbox-Id": sid, "X-Access-Token": sb.get("envdAccessToken") or ""}
        status, _, body = c.raw("GET", "/files?path=x&username=alice", headers=headers)
        assert status == 400 and b"alice" in body, (status, body)
        status, _, body = c.raw("POST", "/files?path=rel.txt", body=b"data",
                                headers=dict(headers, **{"Content-Type": "application/octet-stream"}))
        assert status == 200 and b"/home/user/rel.txt" in body, (status, body)
    finally:
        c.delete(sid)


def test_a_command_of_another_user_is_killed_at_its_timeout(e2b_node, e2b_base):
    """Init holds no CAP_KILL: a command run as `user` still dies at its timeout."""
    c = e2b_node.client
    sid = c.create_ok(layers=[E2B_BASE])
    try:
        status, r = c.exec(sid, "sleep 120", user="user", timeout_s=1)
        assert status == 200 and r["timed_out"] is True, r
        assert c.sh(sid, "ps -eo user,comm | grep -c '^user *sleep' || true")["stdout"] == "0\n"
    finally:
        c.delete(sid)


# -- sudo (issue 27): dsec-init runs sudo'd commands, no setuid anywhere ------


def test_e2b_user_has_passwordless_sudo(e2b_module, e2b_node, e2b_base):
    """Through the SDK: sudo as `user`, env_reset, -u/-i/-E, exit codes, kill, PTY, Ctrl-C."""
    out = run_js(e2b_module, e2b_node, "sudo")
    assert out["ok"]


def test_sudo_on_the_native_api(e2b_node, e2b_base):
    """The same layers natively: `user` may sudo, another user is refused by name and its
    command never runs; root may sudo too; a sandbox without the policy has no sudo socket."""
    c = e2b_node.client
    sid = c.create_ok(layers=[E2B_BASE, E2B_SUDO])
    try:
        r = c.sh(sid, "sudo whoami; sudo -n true && echo ok", user="user")
        assert r["stdout"] == "root\nok\n", r
        r = c.sh(sid, "sudo touch /refused; echo rc=$?", user="nobody")
        assert r["stdout"] == "rc=1\n" and "may not use sudo" in r["stderr"] \
            and "/etc/dsec/sudo-users" in r["stderr"], r
        assert c.sh(sid, "test -e /refused && echo there || echo absent")["stdout"] == "absent\n"
        assert c.sh(sid, "sudo -u user id -un")["stdout"] == "user\n"
    finally:
        c.delete(sid)
    plain = c.create_ok(layers=[E2B_BASE])
    try:
        r = c.sh(plain, "test -e /dev/dsec-sudo && echo socket || echo none")
        assert r["stdout"] == "none\n", r
    finally:
        c.delete(plain)


def test_a_quick_start_node_names_the_command_for_base(dsec_bin, key_file, tmp_path):
    """A store without E2B's base: template `base` is a 404 in E2B's shape naming
    `dsec layer defaults --e2b`."""
    n = keyed_node(dsec_bin, str(tmp_path / "empty-store"), key_file)
    try:
        status, body = n.client.call("POST", "/sandboxes", {"templateID": "base"})
        assert status == 404, (status, body)
        assert body["code"] == 404 and "dsec layer defaults --e2b" in body["message"], body
        assert "base/e2b@1" in body["message"], body
    finally:
        _finish_node(n)
