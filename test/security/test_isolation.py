# What a sandbox sees from inside (busybox): its own pid, uts, net and mount
# namespaces, no capabilities, no-new-privs, seccomp, and a private root
# (DESIGN.md §7). Agents are adversaries: each check is a denial that must hold.

import os
import socket
import threading
import uuid

from dsec_harness import wait_for


def status_fields(client, sid):
    r = client.sh(sid, ["cat", "/proc/self/status"])
    assert r["exit_code"] == 0, r
    out = {}
    for line in r["stdout"].splitlines():
        k, _, v = line.partition(":")
        out[k.strip()] = v.strip()
    return out


def test_pid_namespace(client, sandbox):
    r = client.sh(sandbox, "ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '")
    pids = [int(p) for p in r["stdout"].split()]
    assert 1 in pids, r
    assert len(pids) < 10, f"sandbox sees {len(pids)} processes: {pids}"
    init = client.sh(sandbox, ["cat", "/proc/1/cmdline"])["stdout"]
    with open("/proc/1/cmdline") as f:
        host_init = f.read()
    assert init and init != host_init, (init, host_init)
    ps = client.sh(sandbox, "ps -o pid,args")["stdout"]
    assert "dsec node" not in ps and "pytest" not in ps, ps


def test_node_pid_invisible(client, sandbox, node):
    # The node's own command line must not appear anywhere in the sandbox's /proc.
    r = client.sh(sandbox, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
    assert "--state-dir" not in r["stdout"], r


def test_hostname_is_the_sandbox_id(client, sandbox):
    h = client.sh(sandbox, "hostname")["stdout"].strip()
    assert h, "empty hostname"
    assert h != socket.gethostname(), h
    assert h == sandbox or (len(h) >= 8 and (sandbox.startswith(h) or h in sandbox)), (h, sandbox)


def test_only_loopback(client, sandbox):
    r = client.sh(sandbox, "ls /sys/class/net")
    assert r["stdout"].split() == ["lo"], r


def test_node_api_unreachable_from_inside(client, sandbox, node):
    r = client.sh(sandbox, f"wget -q -T 3 -O - http://127.0.0.1:{node.rest_port}/healthz",
                  timeout_s=20)
    assert r["exit_code"] != 0, f"node API reachable from inside: {r}"
    assert '"status"' not in r["stdout"], r


def test_no_capabilities(client, sandbox):
    st = status_fields(client, sandbox)
    for k in ("CapEff", "CapPrm", "CapBnd"):
        assert int(st[k], 16) == 0, (k, st[k])
    assert int(st.get("CapAmb", "0"), 16) == 0, st


def test_no_new_privs_and_seccomp(client, sandbox):
    st = status_fields(client, sandbox)
    assert st["NoNewPrivs"] == "1", st
    assert st["Seccomp"] == "2", st


def test_mount_denied(client, sandbox):
    r = client.sh(sandbox, "mkdir -p /tmp/m; mount -t tmpfs x /tmp/m && echo MOUNTED")
    assert r["exit_code"] != 0 and "MOUNTED" not in r["stdout"], r
    r = client.sh(sandbox, "mount -o remount,rw / && echo REMOUNTED")
    assert "REMOUNTED" not in r["stdout"], r


def test_unshare_denied(client, sandbox):
    for args in ("-m", "-n", "-U", "-p -f", "-r"):
        r = client.sh(sandbox, f"unshare {args} true && echo UNSHARED")
        assert "UNSHARED" not in r["stdout"], (args, r)


def test_chroot_and_mknod_denied(client, sandbox):
    r = client.sh(sandbox, "mknod /tmp/sda b 8 0 && echo MADE")
    assert "MADE" not in r["stdout"], r
    r = client.sh(sandbox, "chroot / true && echo CHROOTED")
    assert "CHROOTED" not in r["stdout"], r


def test_no_fd_leaked_in(client, sandbox):
    r = client.sh(sandbox, ["ls", "/proc/self/fd"])
    fds = {int(x) for x in r["stdout"].split()}
    assert fds <= {0, 1, 2, 3}, f"fds visible to a fresh process: {sorted(fds)}"


def test_sandboxes_do_not_share_files(client):
    a = client.create_ok()
    b = client.create_ok()
    name = f"/tmp/only-in-a-{uuid.uuid4().hex[:8]}"
    client.sh(a, f"echo secret > {name}; echo secret > /etc/only-a")
    assert client.sh(a, f"cat {name}")["stdout"] == "secret\n"
    r = client.sh(b, f"cat {name}; cat /etc/only-a")
    assert r["exit_code"] != 0 and "secret" not in r["stdout"], r


def test_sandboxes_do_not_see_each_other_processes(client):
    a = client.create_ok()
    b = client.create_ok()
    t = threading.Thread(target=client.exec, args=(a, "sleep 8"), kwargs={"timeout_s": 30})
    t.start()
    try:
        wait_for(lambda: "sleep 8" in client.sh(a, "ps -o args")["stdout"], 20,
                 what="sleep 8 visible in sandbox a")
        ps_b = client.sh(b, "ps -o args")["stdout"]
        assert "sleep 8" not in ps_b, ps_b
    finally:
        t.join(60)


def test_writes_under_root_stay_inside(client, sandbox):
    name = f"dsec-e2e-{uuid.uuid4().hex}"
    r = client.sh(sandbox, f"echo x > /{name} && echo x > /etc/{name} && echo x > /tmp/{name}"
                           f" && cat /{name}")
    assert r["exit_code"] == 0 and r["stdout"] == "x\n", r
    for host_path in (f"/{name}", f"/etc/{name}", f"/tmp/{name}"):
        assert not os.path.exists(host_path), f"sandbox write reached the host: {host_path}"


def test_root_is_not_the_host_root(client, sandbox):
    # A host-only marker file must not be visible inside.
    marker = f"/var/tmp/dsec-e2e-host-{uuid.uuid4().hex}"
    with open(marker, "w") as f:
        f.write("host")
    try:
        r = client.sh(sandbox, f"cat {marker}")
        assert r["exit_code"] != 0 and "host" not in r["stdout"], r
    finally:
        os.unlink(marker)


def test_proc_sysrq_and_kcore_masked(client, sandbox):
    r = client.sh(sandbox, "echo h > /proc/sysrq-trigger && echo WROTE")
    assert "WROTE" not in r["stdout"], r
    r = client.sh(sandbox, "head -c 16 /proc/kcore | wc -c")
    assert r["stdout"].strip() in ("0", ""), r
    r = client.sh(sandbox, "echo 1 > /proc/sys/kernel/panic && echo WROTE")
    assert "WROTE" not in r["stdout"], r
