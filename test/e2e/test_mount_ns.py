# Sandbox roots live in their sandbox's own mount namespace, never in the
# host's: the host's mount table does not grow with the sandboxes (so a new
# sandbox, which copies that table, costs the same at any density), a
# sandbox's mount table names no other sandbox, the trainer's file calls and
# exec work as before (protected paths included), a node restart finds the
# roots again, and a destroy leaves no mount, held descriptor, process or
# directory. Inits come from the node's launch template (no host mount
# below the root, no pivot_root) and loopback-only sandboxes share one
# read-only sysfs.

import os
import signal

from dsec_harness import (assert_clean, cgroup_dirs, detached_dirs_held, mounts_under,
                      procs_in_node_cgroups, wait_for)

COUNT = 5


def host_mount_lines_naming(text):
    """Lines of the host's (this test's) mount table that mention `text`."""
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if text in line]


def sandbox_dir(node, sid):
    return os.path.join(os.path.realpath(node.state_dir), "sandboxes", sid)


def mountinfo_in(c, sid):
    return c.sh(sid, "cat /proc/self/mountinfo")["stdout"].splitlines()


def test_roots_stay_out_of_the_host_mount_table(node_factory):
    n = node_factory.start()
    c = n.client
    first = c.create_ok(memory_mb=64)
    # The first sandbox mounted the shared layer (and the quota volume is
    # there from the start): the node's mounts from now on.
    baseline = sorted(mounts_under(n.state_dir))
    ids = [first] + [c.create_ok(memory_mb=64) for _ in range(COUNT - 1)]
    for sid in ids:
        c.sh(sid, "sleep 600 >/dev/null 2>&1 &")
    assert sorted(mounts_under(n.state_dir)) == baseline
    for sid in ids:
        assert host_mount_lines_naming(sandbox_dir(n, sid)) == [], sid
        assert host_mount_lines_naming(sid) == [], sid
    # No overlay of this node anywhere in the host's table.
    assert [l for l in host_mount_lines_naming(os.path.realpath(n.state_dir))
            if " - overlay " in l] == []

    # Inside, the root is the sandbox's own overlay, and its table names no
    # other sandbox (nor does it grow with them).
    tables = {sid: mountinfo_in(c, sid) for sid in ids}
    for sid, table in tables.items():
        root = [l for l in table if l.split()[4] == "/"]
        assert len(root) == 1 and " - overlay " in root[0], table
        assert sandbox_dir(n, sid) + "/upper" in root[0], root
        for other in ids:
            if other != sid:
                assert not any(other in l for l in table), (sid, other, table)
    assert len({len(t) for t in tables.values()}) == 1, tables

    # Files and exec, both ways.
    for i, sid in enumerate(ids):
        status, out = c.put_file(sid, "/work/in.txt", f"to {i}\n".encode())
        assert status in (200, 201), out
        assert c.sh(sid, "cat /work/in.txt")["stdout"] == f"to {i}\n"
        c.sh(sid, f"echo from {i} > /tmp/out.txt")
        status, data = c.get_file(sid, "/tmp/out.txt")
        assert status == 200 and data == f"from {i}\n".encode(), (status, data)
    # The node holds one view of each root, on a mount outside its table.
    assert len(detached_dirs_held(n.proc.pid)) == COUNT

    # Destroy leaves nothing: no mount, held view, process or directory.
    for sid in ids:
        status, out = c.delete(sid)
        assert status == 200, out
        assert not os.path.exists(sandbox_dir(n, sid))
        assert not cgroup_dirs(n.node_id, sid)
    c.created.clear()
    assert_clean(n, allow_layer_mounts=True)
    assert detached_dirs_held(n.proc.pid) == []
    # (The layer may be unmounted now that nothing uses it.)
    assert set(mounts_under(n.state_dir)) <= set(baseline)


def test_failed_create_leaves_no_held_root(node_factory):
    n = node_factory.start()
    c = n.client
    # A protected path the layer lacks fails init's setup after the root was
    # attached in its namespace.
    status, out = c.create(memory_mb=64, protect={"readonly": ["/no/such/path"]})
    assert status == 400, out
    assert_clean(n, allow_layer_mounts=True)
    assert detached_dirs_held(n.proc.pid) == []


def kill9(n):
    """SIGKILLs this test's node process (only its own Popen pid)."""
    n.proc.kill()
    n.proc.wait(30)


def test_restart_takes_the_roots_back(node_factory):
    n = node_factory.start()
    c = n.client
    protect = {"readonly": ["/etc"]}
    a = c.create_ok(memory_mb=64, protect=protect)
    b = c.create_ok(memory_mb=64)
    status, out = c.put_file(a, "/work/kept.txt", b"kept\n")
    assert status in (200, 201), out
    c.sh(b, "echo from-b > /tmp/b.txt")

    kill9(n)
    n.start()
    assert len(detached_dirs_held(n.proc.pid)) == 2
    status, data = c.get_file(a, "/work/kept.txt")
    assert status == 200 and data == b"kept\n", (status, data)
    status, data = c.get_file(b, "/tmp/b.txt")
    assert status == 200 and data == b"from-b\n", (status, data)
    # The recovered view is the plain root, as at create: the trainer still
    # writes below a path protected from the agent.
    status, out = c.put_file(a, "/etc/after_restart", b"x")
    assert status in (200, 201), out
    assert c.sh(a, "cat /etc/after_restart")["stdout"] == "x"
    out = c.sh(a, "echo y > /etc/after_restart 2>&1; echo rc=$?")["stdout"]
    assert "rc=0" not in out, out
    status, out = c.put_file(b, "/work/new.txt", b"new\n")
    assert status in (200, 201), out
    assert c.sh(b, "cat /work/new.txt")["stdout"] == "new\n"
    assert host_mount_lines_naming(sandbox_dir(n, a)) == []

    for sid in (a, b):
        status, out = c.delete(sid)
        assert status == 200, out
    c.created.clear()
    assert_clean(n, allow_layer_mounts=True)
    assert detached_dirs_held(n.proc.pid) == []


def test_restart_reaps_a_sandbox_whose_init_died(node_factory):
    n = node_factory.start()
    c = n.client
    sid = c.create_ok(memory_mb=64)
    kill9(n)
    inits = [pid for pid, line in procs_in_node_cgroups(n.node_id) if sid in line]
    assert inits, procs_in_node_cgroups(n.node_id)
    for pid in inits:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not procs_in_node_cgroups(n.node_id), 10, what="sandbox processes to die")
    n.start()
    assert f"reaped sandbox {sid}" in n.log_tail()
    c.created.clear()
    assert_clean(n, allow_layer_mounts=True)
    assert not os.path.exists(sandbox_dir(n, sid))


def mount_line(table, mountpoint):
    return [l for l in table if l.split()[4] == mountpoint]


def test_root_sits_on_an_empty_template_with_no_way_out(node_factory):
    # Inits are cloned from the node's launch template (a mount namespace
    # that holds only an empty read-only root) and chroot onto their root
    # instead of pivot_root: nothing of the host lies below it, and the agent
    # cannot leave the chroot (chroot itself needs CAP_SYS_CHROOT).
    n = node_factory.start()
    c = n.client
    sid = c.create_ok(memory_mb=64)
    table = mountinfo_in(c, sid)
    assert len(mount_line(table, "/")) == 1 and " - overlay " in mount_line(table, "/")[0], table
    # Only the sandbox's own mounts: its root, /dev, /proc, /sys and their
    # masks; no path of the host's table (e.g. the node's state dir as a
    # mount point, or /run).
    state = os.path.realpath(n.state_dir)
    for line in table:
        mp = line.split()[4]
        assert mp == "/" or mp.startswith(("/dev", "/proc", "/sys")), (mp, table)
        assert state not in mp, line
    r = c.sh(sid, "chroot / /bin/true 2>&1; echo rc=$?")
    assert "rc=0" not in r["stdout"], r
    assert c.sh(sid, "ls -a /.. | sort")["stdout"] == c.sh(sid, "ls -a / | sort")["stdout"]
    assert c.sh(sid, "cd /../../..; pwd")["stdout"].strip() == "/"


def test_loopback_sandboxes_share_one_read_only_sysfs(node_factory):
    # One sysfs superblock for every sandbox without network (a sysfs per
    # sandbox made each create compare against all of them, and grew every
    # memory cgroup's shrinker table); /sys reads as before.
    n = node_factory.start()
    c = n.client
    a, b = c.create_ok(memory_mb=64), c.create_ok(memory_mb=64)
    devs = set()
    for sid in (a, b):
        sys_line = mount_line(mountinfo_in(c, sid), "/sys")
        assert len(sys_line) == 1 and " - sysfs " in sys_line[0], sys_line
        assert sys_line[0].split()[5].startswith("ro,"), sys_line
        devs.add(sys_line[0].split()[2])
        assert c.sh(sid, "ls /sys/class/net")["stdout"].split() == ["lo"]
        assert c.sh(sid, "cat /sys/class/net/lo/flags")["stdout"].strip() == "0x9"
        assert c.sh(sid, "ls /sys/firmware | wc -l")["stdout"].strip() == "0"
        r = c.sh(sid, "echo x > /sys/kernel/uevent_helper 2>&1; echo rc=$?")
        assert "rc=0" not in r["stdout"], r
        assert c.sh(sid, "cat /sys/devices/system/cpu/online")["stdout"].strip()
    assert len(devs) == 1, devs
    for sid in (a, b):
        status, out = c.delete(sid)
        assert status == 200, out
    c.created.clear()
    assert_clean(n, allow_layer_mounts=True)
