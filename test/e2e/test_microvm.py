# The microvm and vm backends end to end (issue 7): a QEMU guest per sandbox
# booting Debian's kernel with our initramfs, under TCG on this machine. The
# same client script runs unchanged against a container, a microVM and a full
# (q35) VM; a microVM keeps a file and a running process across pause/resume;
# a destroyed guest leaves no QEMU process, no sandbox dir, no socket, no
# state file; a guest that never answers is retried and then refused with
# nothing left; a node without a guest kernel refuses with a 400 naming it.
# Templates: a microVM is a clone restored from a pre-booted template of the
# same machine (QEMU -incoming over the template's RAM file, share=off),
# behaves like a booted one, gets its own hostname, randomness and clock;
# destroying a clone leaves only the template; the templates go with the
# node; DSEC_VM_TEMPLATES=0 boots every guest. Spares: a template keeps one
# clone running, warmed; a create takes it (its logs and upper disk move into
# the sandbox dir) and a new one is made; a spare goes with its template and
# the node. The writable upper is a disk image in the sandbox dir, not guest
# RAM: a file larger than the guest's memory fits, disk_mb is the limit
# (ENOSPC past it), clones of one template each write their own copy.
#
# Needs qemu-system-x86_64 (skips without it) and the guest kernel, fetched
# once with scripts/guest_kernel.sh into $DSEC_GUEST_DIR (default
# /var/lib/dsec/guest) through Debian's apt.

import base64
import json
import os
import shutil
import struct
import subprocess
import threading
import time

import pytest

from dsec_harness import REPO, _finish_node, assert_error, start_node, wait_for

QEMU = shutil.which("qemu-system-x86_64")
GUEST_DIR = os.environ.get("DSEC_GUEST_DIR", "/var/lib/dsec/guest")
# Under TCG on 2 shared cores a boot takes 2-20 s; allow for a loaded machine.
BOOT_TIMEOUT_S = os.environ.get("DSEC_VM_BOOT_TIMEOUT_S", "90")

pytestmark = pytest.mark.skipif(QEMU is None,
                                reason="qemu-system-x86_64 is not installed on this machine")


@pytest.fixture(scope="module")
def guest_kernel():
    p = subprocess.run([str(REPO / "scripts" / "guest_kernel.sh"), GUEST_DIR],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    if p.returncode != 0:
        pytest.fail("scripts/guest_kernel.sh failed:\n" + p.stdout.decode(errors="replace"),
                    pytrace=False)
    return GUEST_DIR


@pytest.fixture(scope="module")
def vm_node(dsec_bin, store, guest_kernel):
    n = start_node(dsec_bin, store, DSEC_GUEST_DIR=guest_kernel,
                   DSEC_VM_BOOT_TIMEOUT_S=BOOT_TIMEOUT_S)
    yield n
    _finish_node(n)


@pytest.fixture
def vc(vm_node):
    c = vm_node.client
    mark = len(c.created)
    yield c
    for sid in reversed(c.created[mark:]):
        c.delete(sid)
    del c.created[mark:]


def open_files(pid):
    out = []
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                pass
    except OSError:
        pass
    return out


def qemu_pids(path):
    """QEMU processes whose command line names a path below `path`, or with a
    file open below it: a taken spare's command line names the spare's
    files, its console was moved into the sandbox dir."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if args and args[0].endswith(b"qemu-system-x86_64") and \
                (any(path.encode() in a for a in args) or
                 any(f.startswith(path + "/") for f in open_files(pid))):
            out.append(int(pid))
    return out


def spare_pids(node):
    """Spare clones: QEMU on the spare dir's files, in no sandbox."""
    sb = os.path.join(node.state_dir, "sandboxes") + "/"
    return [p for p in qemu_pids(os.path.join(node.state_dir, "vm", "spares"))
            if not any(f.startswith(sb) for f in open_files(p))]


def upper_of(pid):
    """The upper disk image a guest's QEMU has open: <sandbox dir>/upper.img,
    or a taken spare's in the spare dir when the sandboxes are on another
    filesystem (the node's quota volume) and it could not be moved."""
    [img] = {f for f in open_files(pid) if f.endswith("upper.img")}
    return img


def qemu_args(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\0")]


def template_root(node):
    return f"/dev/shm/dsec-{node.node_id}"


def files_under(path):
    return sorted(os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs)


def sandbox_dir(node, sid):
    return os.path.join(node.state_dir, "sandboxes", sid)


def sockets_under(path):
    found = []
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            try:
                if os.path.stat.S_ISSOCK(os.lstat(p).st_mode):
                    found.append(p)
            except OSError:
                pass
    return found


def client_script(c, sid):
    """What a user's agent does; must behave the same on every backend."""
    r = c.sh(sid, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (r["stdout"], r["stderr"], r["exit_code"]) == ("out\n", "err\n", 3), r
    r = c.sh(sid, ["cat"], stdin="piped in")
    assert r["stdout"] == "piped in", r
    r = c.sh(sid, ["sh", "-c", "echo $GREETING; hostname"], env={"GREETING": "hello"})
    assert r["stdout"].split("\n")[0] == "hello", r
    status, _ = c.put_file(sid, "/work/dir/data.bin", bytes(range(256)) * 64)
    assert status in (200, 201, 204), status
    status, body = c.get_file(sid, "/work/dir/data.bin")
    assert status == 200 and body == bytes(range(256)) * 64
    r = c.sh(sid, ["sh", "-c", "wc -c < /work/dir/data.bin; echo made >> /work/dir/data.bin"])
    assert r["stdout"].strip() == "16384", r
    status, body = c.get_file(sid, "/work/dir/data.bin")
    assert status == 200 and body.endswith(b"made\n")
    status, body = c.get_file(sid, "/no/such/file")
    assert_error(status, body, 404)
    status, body = c.get_file(sid, "/work/dir")
    assert_error(status, body, 400)
    r = c.sh(sid, ["no-such-command"])
    assert r["exit_code"] == 127, r
    r = c.sh(sid, ["sleep", "30"], timeout_s=1)
    assert r["timed_out"] is True, r


def test_healthz_shows_each_backend_and_the_accelerator(vm_node):
    # The accelerator is proven at start (test_vm_accel.py), not read off
    # /dev/kvm; healthz says which and why.
    def decided():
        status, body = vm_node.client.healthz()
        assert status == 200, body
        b = body["backends"]
        return b if b["microvm"].get("accel") != "probing" else None
    b = wait_for(decided, 30, 0.2, what="the accelerator decision")
    assert b["container"] == {"available": True}, b
    for name in ("microvm", "vm"):
        assert b[name]["available"] is True, b
        assert b[name]["accel"] in ("kvm", "tcg") and b[name]["accel_reason"], b
    assert b["microvm"]["accel"] == b["vm"]["accel"], b
    print(f"accelerator {b['microvm']['accel']}: {b['microvm']['accel_reason']}")


@pytest.mark.parametrize("backend", ["container", "microvm", "vm"])
def test_same_client_script_on_every_backend(vc, vm_node, backend):
    t0 = time.monotonic()
    sid = vc.create_ok(backend=backend, memory_mb=256)
    boot = time.monotonic() - t0
    if backend != "container":
        assert len(qemu_pids(vm_node.state_dir)) >= 1
        r = vc.sh(sid, ["uname", "-r"])
        assert r["stdout"].strip() != os.uname().release, "a VM runs its own kernel"
    client_script(vc, sid)
    status, _ = vc.delete(sid)
    assert status in (200, 204)
    vc.created.remove(sid)
    wait_for(lambda: not os.path.exists(sandbox_dir(vm_node, sid)), 30, what="sandbox dir gone")
    assert not qemu_pids(sandbox_dir(vm_node, sid))
    print(f"{backend}: create {boot:.2f} s")


def envd_stdout(body):
    """The stdout bytes of a process.Process/Start stream (Connect envelopes)."""
    out, at = b"", 0
    while at + 5 <= len(body):
        flags, n = struct.unpack(">BI", body[at:at + 5])
        msg = json.loads(body[at + 5:at + 5 + n] or b"{}")
        at += 5 + n
        data = msg.get("event", {}).get("data", {}) if flags == 0 else {}
        if "stdout" in data:
            out += base64.b64decode(data["stdout"])
    return out


@pytest.mark.parametrize("backend", ["container", "microvm"])
def test_stdin_reaches_a_background_process(vc, backend):
    """E2B's Process.Start with stdin, then SendInput and CloseStdin: the
    input reaches the command on both channel backends (the microVM once
    lacked send_stdin and answered SendInput with an error)."""
    sid = vc.create_ok(backend=backend, memory_mb=256)
    h = {"E2b-Sandbox-Id": sid}
    start = json.dumps({"process": {"cmd": "/bin/sh",
                                    "args": ["-c", "read a; echo got:$a; cat; echo end"]},
                        "stdin": True}).encode()
    got = {}

    def run():
        got["start"] = vc.raw("POST", "/process.Process/Start",
                              struct.pack(">BI", 0, len(start)) + start,
                              headers=dict(h, **{"Content-Type": "application/connect+json"}),
                              timeout=120)
    t = threading.Thread(target=run)
    t.start()

    def started():
        status, out = vc.call("POST", "/process.Process/List", {}, headers=h)
        assert status == 200, out
        procs = [p for p in out.get("processes", []) if "read a" in json.dumps(p)]
        return procs[0]["pid"] if procs else None
    pid = wait_for(started, 60, 0.2, what="the command to start")

    def send(text):
        body = {"process": {"pid": pid}, "input": {"stdin": base64.b64encode(text).decode()}}
        status, out = vc.call("POST", "/process.Process/SendInput", body, headers=h)
        assert status == 200, (backend, out)
    send(b"hello\n")
    send(b"more\n")
    status, out = vc.call("POST", "/process.Process/CloseStdin", {"process": {"pid": pid}},
                          headers=h)
    assert status == 200, (backend, out)
    t.join(120)
    assert not t.is_alive(), "the stream did not end once stdin closed"
    status, _, body = got["start"]
    assert status == 200, body
    assert envd_stdout(body) == b"got:hello\nmore\nend\n", body[:500]


def test_microvm_pause_resume_keeps_files_and_processes(vc, vm_node):
    sid = vc.create_ok(backend="microvm", memory_mb=256)
    d = sandbox_dir(vm_node, sid)
    [pid] = qemu_pids(d)
    upper = upper_of(pid)
    status, _ = vc.put_file(sid, "/root/keep.txt", b"still here")
    assert status in (200, 201, 204)
    r = vc.sh(sid, ["sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!"])
    sleeper = r["stdout"].strip()
    status, body = vc.call("POST", f"/v1/sandboxes/{sid}/pause")
    assert status == 200, body
    # The machine is on disk, QEMU is gone and its memory with it.
    assert not qemu_pids(d), "QEMU still runs while paused"
    assert not os.path.exists(f"/proc/{pid}")
    assert os.path.getsize(os.path.join(d, "state")) > 1 << 20
    assert os.path.isfile(upper), "the upper disk stays while paused"
    status, body = vc.call("POST", f"/v1/sandboxes/{sid}/resume")
    assert status == 200, body
    assert len(qemu_pids(d)) == 1
    assert not os.path.exists(os.path.join(d, "state"))
    status, body = vc.get_file(sid, "/root/keep.txt")
    assert status == 200 and body == b"still here"
    r = vc.sh(sid, ["sh", "-c", f"kill -0 {sleeper} && echo alive"])
    assert r["stdout"].strip() == "alive", r
    # Paused again, then destroyed while paused: nothing remains.
    assert vc.call("POST", f"/v1/sandboxes/{sid}/pause")[0] == 200
    status, _ = vc.delete(sid)
    assert status in (200, 204)
    vc.created.remove(sid)
    wait_for(lambda: not os.path.exists(d), 30, what="sandbox dir gone")
    assert not qemu_pids(d)
    assert not os.path.exists(upper)


def test_destroy_leaves_nothing(vc, vm_node):
    sid = vc.create_ok(backend="microvm", memory_mb=128)
    d = sandbox_dir(vm_node, sid)
    assert qemu_pids(d) and os.path.isdir(d)
    upper = upper_of(qemu_pids(d)[0])
    assert not sockets_under(vm_node.state_dir), "channels are socketpairs, never socket files"
    status, _ = vc.delete(sid)
    assert status in (200, 204)
    vc.created.remove(sid)
    assert not qemu_pids(d)
    assert not os.path.exists(d) and not os.path.exists(upper)
    assert not sockets_under(vm_node.state_dir)
    assert not vm_node.check_clean()


def test_guest_that_never_answers_is_retried_then_refused(dsec_bin, store, guest_kernel):
    # A deadline no boot can meet: every attempt is killed, the create fails
    # naming the attempts, and nothing is left behind.
    n = start_node(dsec_bin, store, DSEC_GUEST_DIR=guest_kernel, DSEC_VM_BOOT_TIMEOUT_S="0.3")
    try:
        status, body = n.client.create(backend="microvm", memory_mb=128)
        assert_error(status, body, 503)
        msg = body["error"]["message"]
        assert "did not boot after 3 attempts" in msg and "attempt 3" in msg, msg
        assert not qemu_pids(n.state_dir)
        sb = os.path.join(n.state_dir, "sandboxes")
        assert not os.path.isdir(sb) or not os.listdir(sb)
    finally:
        _finish_node(n)


def test_missing_guest_kernel_is_a_clear_400(dsec_bin, store, tmp_path):
    n = start_node(dsec_bin, store, DSEC_GUEST_DIR=str(tmp_path / "no-kernel"))
    try:
        for backend in ("microvm", "vm"):
            status, body = n.client.create(backend=backend)
            assert_error(status, body, 400)
            assert "guest kernel" in body["error"]["message"], body
        # The container backend is unaffected.
        sid = n.client.create_ok()
        assert n.client.sh(sid, ["true"])["exit_code"] == 0
    finally:
        _finish_node(n)


def test_microvm_is_a_clone_of_a_template_and_behaves_the_same(vc, vm_node):
    sids = [vc.create_ok(backend="microvm", memory_mb=192) for _ in range(2)]
    root = template_root(vm_node)
    mems = [f for f in files_under(root) if f.endswith("/mem")]
    assert len(mems) >= 1, f"no template RAM file under {root}: {files_under(root)}"
    for sid in sids:
        [pid] = qemu_pids(sandbox_dir(vm_node, sid))
        args = " ".join(qemu_args(pid))
        # Restored, not booted: no kernel, the template's RAM file mapped
        # private (copy-on-write), the device state loaded with -incoming.
        assert "-incoming" in args and "-kernel" not in args, args
        assert any(f"mem-path={m},share=off" in args for m in mems), args
        r = vc.sh(sid, ["hostname"])
        assert r["stdout"].strip() == sid[:64], r
    client_script(vc, sids[0])
    # The clones' writable layers are their own: a file one writes is not in
    # the other.
    vc.put_file(sids[0], "/root/only-here", b"x")
    status, _ = vc.get_file(sids[1], "/root/only-here")
    assert status == 404
    # ... each on its own upper disk image in its sandbox dir.
    uppers = [upper_of(qemu_pids(sandbox_dir(vm_node, sid))[0]) for sid in sids]
    assert os.stat(uppers[0]).st_ino != os.stat(uppers[1]).st_ino, uppers
    r = vc.sh(sids[1], ["sh", "-c", "echo two > /root/only-there; sync; ls /root"])
    assert "only-here" not in r["stdout"], r
    assert vc.get_file(sids[0], "/root/only-there")[0] == 404


def test_template_clones_have_their_own_randomness_and_clock(vc, vm_node):
    sids = [vc.create_ok(backend="microvm", memory_mb=192) for _ in range(2)]
    for sid in sids:
        assert "-incoming" in qemu_args(qemu_pids(sandbox_dir(vm_node, sid))[0])
    cmd = ["sh", "-c", "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo;"
           " cat /proc/sys/kernel/random/uuid; date +%s"]
    outs = []
    for sid in sids:
        r = vc.sh(sid, cmd)
        host_now = time.time()
        rand, uuid, clock = r["stdout"].split()
        assert len(rand) == 32, r
        # The template was made earlier: a clone still on its clock would lag.
        assert abs(int(clock) - host_now) < 5, (clock, host_now)
        outs.append((rand, uuid))
    assert outs[0][0] != outs[1][0], "two clones read the same bytes from /dev/urandom"
    assert outs[0][1] != outs[1][1], "two clones made the same random uuid"


def test_destroying_a_clone_leaves_only_the_template(vc, vm_node):
    sid = vc.create_ok(backend="microvm", memory_mb=192)
    root = template_root(vm_node)
    d = sandbox_dir(vm_node, sid)
    [pid] = qemu_pids(d)
    shm_before = set(os.listdir("/dev/shm"))
    template_files = files_under(root)
    status, _ = vc.delete(sid)
    assert status in (200, 204)
    vc.created.remove(sid)
    assert not os.path.exists(f"/proc/{pid}")
    assert not qemu_pids(d) and not os.path.exists(d)
    assert not sockets_under(vm_node.state_dir)
    assert set(os.listdir("/dev/shm")) == shm_before
    # The template stays for the next create, and nothing else is there:
    # one directory per template, its RAM, device state and logs.
    assert files_under(root) == template_files
    assert {os.path.basename(f) for f in template_files} <= \
        {"mem", "state", "upper.img", "console.log", "qemu.log"}, template_files
    assert not vm_node.check_clean()


def test_templates_go_with_the_node_and_can_be_turned_off(dsec_bin, store, guest_kernel):
    n = start_node(dsec_bin, store, DSEC_GUEST_DIR=guest_kernel,
                   DSEC_VM_BOOT_TIMEOUT_S=BOOT_TIMEOUT_S)
    try:
        sid = n.client.create_ok(backend="microvm", memory_mb=128)
        assert n.client.sh(sid, ["true"])["exit_code"] == 0
        assert any(f.endswith("/mem") for f in files_under(template_root(n)))
        n.client.delete(sid)
    finally:
        _finish_node(n)
    assert not os.path.exists(template_root(n)), files_under(template_root(n))
    assert not qemu_pids(n.state_dir)

    off = start_node(dsec_bin, store, DSEC_GUEST_DIR=guest_kernel,
                     DSEC_VM_BOOT_TIMEOUT_S=BOOT_TIMEOUT_S, DSEC_VM_TEMPLATES="0")
    try:
        sid = off.client.create_ok(backend="microvm", memory_mb=128)
        [pid] = qemu_pids(sandbox_dir(off, sid))
        args = qemu_args(pid)
        assert "-kernel" in args and "-incoming" not in args, args
        assert not os.path.exists(template_root(off))
        assert off.client.sh(sid, ["true"])["exit_code"] == 0
    finally:
        _finish_node(off)


def test_a_create_takes_the_spare_and_spares_go_with_their_template(dsec_bin, store,
                                                                    guest_kernel):
    n = start_node(dsec_bin, store, DSEC_GUEST_DIR=guest_kernel,
                   DSEC_VM_BOOT_TIMEOUT_S=BOOT_TIMEOUT_S, DSEC_VM_TEMPLATES="1")
    try:
        c = n.client
        first = c.create_ok(backend="microvm", memory_mb=128)
        wait_for(lambda: len(spare_pids(n)) == 1, 60, what="a spare clone")
        [spare] = spare_pids(n)
        assert "-incoming" in qemu_args(spare)
        sid = c.create_ok(backend="microvm", memory_mb=128)
        d = sandbox_dir(n, sid)
        # The create took the spare: same QEMU, its logs now the sandbox's.
        assert qemu_pids(d) == [spare]
        assert os.path.join(d, "console.log") in open_files(spare)
        assert upper_of(spare) in (os.path.join(d, "upper.img"),
                                   os.path.join(n.state_dir, "vm", "spares", "") +
                                   os.path.basename(upper_of(spare)))
        assert os.path.isfile(os.path.join(d, "qemu.log"))
        r = c.sh(sid, ["hostname"])
        assert (r["exit_code"], r["stdout"].strip()) == (0, sid[:64]), r
        wait_for(lambda: len(spare_pids(n)) == 1, 60, what="the next spare")
        [second] = spare_pids(n)
        assert second != spare
        # Another machine shape: its template evicts the first (max 1), and
        # the first one's spare goes with it.
        other = c.create_ok(backend="microvm", memory_mb=160)
        wait_for(lambda: not os.path.exists(f"/proc/{second}"), 30, what="the old spare killed")
        wait_for(lambda: len(spare_pids(n)) == 1, 60, what="the new template's spare")
        for s in (first, sid, other):
            assert c.sh(s, ["true"])["exit_code"] == 0
            c.delete(s)
        assert len(spare_pids(n)) == 1
    finally:
        _finish_node(n)
    # The node took its spare with it.
    assert not qemu_pids(n.state_dir)


def test_an_unused_template_keeps_no_spare(dsec_bin, store, guest_kernel):
    n = start_node(dsec_bin, store, DSEC_GUEST_DIR=guest_kernel,
                   DSEC_VM_BOOT_TIMEOUT_S=BOOT_TIMEOUT_S, DSEC_VM_SPARE_IDLE_S="3")
    try:
        c = n.client
        sid = c.create_ok(backend="microvm", memory_mb=128)
        wait_for(lambda: len(spare_pids(n)) == 1, 60, what="a spare clone")
        [spare] = spare_pids(n)
        # No create for 3 s: the spare is killed, the template stays.
        wait_for(lambda: not os.path.exists(f"/proc/{spare}"), 30, what="the idle spare killed")
        assert any(f.endswith("/mem") for f in files_under(template_root(n)))
        assert not spare_pids(n)
        # The next create brings one back.
        other = c.create_ok(backend="microvm", memory_mb=128)
        wait_for(lambda: len(spare_pids(n)) == 1, 60, what="a new spare")
        for s in (sid, other):
            assert c.sh(s, ["true"])["exit_code"] == 0
    finally:
        _finish_node(n)
    assert not qemu_pids(n.state_dir)


def test_microvm_writes_go_to_its_upper_disk_limited_by_disk_mb(vc, vm_node):
    # 128 MiB of guest RAM, a 512 MiB disk: a 300 MiB file fits (a tmpfs
    # upper in guest RAM could not hold it), going past disk_mb is ENOSPC.
    sid = vc.create_ok(backend="microvm", memory_mb=128, disk_mb=512)
    d = sandbox_dir(vm_node, sid)
    img = upper_of(qemu_pids(d)[0])
    assert os.path.getsize(img) == 512 << 20
    t0 = time.monotonic()
    r = vc.sh(sid, ["sh", "-c", "dd if=/dev/zero of=/root/big bs=4M count=75 2>&1 && sync"
                                " && stat -c %s /root/big"], timeout_s=300)
    took = time.monotonic() - t0
    assert r["exit_code"] == 0 and r["stdout"].split()[-1] == str(300 << 20), r
    assert os.stat(img).st_blocks * 512 >= 300 << 20, "the data is in the image on the host"
    r = vc.sh(sid, ["sh", "-c", "dd if=/dev/zero of=/root/more bs=4M count=132"], timeout_s=300)
    assert r["exit_code"] != 0 and "No space left" in r["stdout"] + r["stderr"], r
    r = vc.sh(sid, ["sh", "-c", "rm /root/more && echo ok > /root/after && cat /root/after"])
    assert r["stdout"].strip() == "ok", r
    status, _ = vc.delete(sid)
    assert status in (200, 204)
    vc.created.remove(sid)
    assert not os.path.exists(img) and not os.path.exists(d)
    print(f"300 MiB written in {took:.1f} s")
