# Lazy layers and pushes end to end, against a real docker-registry (CNCF
# distribution 2.8, test/pylib/registry.py) on loopback and the real lazy
# blob daemon (`dsec lazyfs`, FUSE):
#   - a sandbox reading one small file of a lazy chunked layer fetches a small
#     share of its data blob (the daemon's counters and /metrics say how much);
#   - kill -9 of the node leaves the daemon serving, and the sandbox, after
#     the node's restart, still reads (chunks it never read before too);
#   - the registry stopped mid-run: cached chunks still read, an uncached
#     read fails with EIO within the retry bound, and /metrics counts it;
#   - after a clean stop no FUSE mount, no daemon and no temp file remain;
#   - a dead daemon's stale mount is cleaned by the next node;
#   - a sandbox's snapshot pushed with `dsec layer push` and pulled back into
#     an empty store keeps its digest.
# The lazy layer is a chunked layer whose data blob is pushed to the registry
# and taken out of the store, its source registered as a lazy fetch does
# (<store>/lazy/sources, the blobs/ symlink into the daemon's mount, the chunk
# digest list). The daemon is started first with --insecure-registry (plain
# HTTP on loopback) and the node finds it running.

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest

from dsec_harness import TMP_ROOT, Node, wait_for
from registry import Registry

BUSYBOX_BIN = "/bin/busybox"
APPLETS = ["sh", "cat", "sha256sum", "wc", "head", "dd", "true"]
CHUNK = 128 << 10
FILES = 48
FILE_BYTES = 512 << 10


def push_blob(port, repo, data, digest):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/{repo}/blobs/uploads/",
                                 method="POST")
    loc = urllib.request.urlopen(req, timeout=30).headers["Location"]
    if loc.startswith("/"):
        loc = f"http://127.0.0.1:{port}{loc}"
    sep = "&" if "?" in loc else "?"
    req = urllib.request.Request(f"{loc}{sep}digest={digest}", data=data, method="PUT",
                                 headers={"Content-Type": "application/octet-stream"})
    assert urllib.request.urlopen(req, timeout=60).status == 201


def build(dsec_bin, src, store, name, *extra):
    p = subprocess.run([dsec_bin, "layer", "build", src, "--name", name, "--version", "1",
                        "--store", store, *extra], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode().split()[1]


def register_lazy(store, port, data_name, data):
    """What a lazy fetch of a layer artifact leaves in the store."""
    hexd = data_name[len("sha256-"):-len(".blob")]
    os.unlink(os.path.join(store, "blobs", data_name))
    sources = os.path.join(store, "lazy", "sources")
    os.makedirs(sources, exist_ok=True)
    with open(os.path.join(sources, f"sha256-{hexd}.json"), "w") as f:
        json.dump({"registry": f"127.0.0.1:{port}", "repository": "e2e/lazy",
                   "digest": "sha256:" + hexd, "size": len(data), "chunk_size": CHUNK}, f)
    with open(os.path.join(sources, f"sha256-{hexd}.chunks"), "wb") as f:
        for off in range(0, len(data), CHUNK):
            f.write(hashlib.sha256(data[off:off + CHUNK]).digest())
    os.symlink(f"../lazy/mnt/{data_name}", os.path.join(store, "blobs", data_name))


def fuse_mounts(store):
    with open("/proc/mounts") as f:
        return [l for l in f if " fuse" in l and os.path.realpath(store) in l]


def daemon_pid(store):
    try:
        with open(os.path.join(store, "lazy", "daemon.json")) as f:
            return json.load(f)["pid"]
    except (OSError, ValueError):
        return None


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def metric(node, name):
    with urllib.request.urlopen(f"http://{node.rest}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + "{"):
                return int(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture(scope="module")
def lazy(dsec_bin):
    if not os.path.exists("/dev/fuse"):
        pytest.fail("/dev/fuse missing: this machine kind has FUSE (modprobe fuse)")
    if not shutil.which("docker-registry"):
        pytest.fail("docker-registry missing: install it (scripts/deps.sh)")
    work = tempfile.mkdtemp(prefix="dsec-lazy-", dir=TMP_ROOT)
    store = os.path.join(work, "store")
    root = os.path.join(work, "root")
    os.makedirs(os.path.join(root, "bin"))
    shutil.copy(BUSYBOX_BIN, os.path.join(root, "bin", "busybox"))
    for a in APPLETS:
        os.symlink("busybox", os.path.join(root, "bin", a))
    build(dsec_bin, root, store, "test/lbusy")
    tree = os.path.join(work, "tree", "data")
    os.makedirs(tree)
    files = {}
    for i in range(FILES):
        files[f"f{i}"] = os.urandom(FILE_BYTES)
        with open(os.path.join(tree, f"f{i}"), "wb") as f:
            f.write(files[f"f{i}"])
    with open(os.path.join(tree, "small.txt"), "w") as f:
        f.write("read on demand\n")
    build(dsec_bin, os.path.dirname(tree), store, "test/ldata", "--chunked", "--kind",
          "workspace")
    data_name = next(b for b in os.listdir(os.path.join(store, "blobs")) if b.endswith(".blob"))
    with open(os.path.join(store, "blobs", data_name), "rb") as f:
        data = f.read()
    reg = Registry(os.path.join(work, "registry")).start()
    port = reg.port
    push_blob(port, "e2e/lazy", data, "sha256:" + data_name[7:-5])
    register_lazy(store, port, data_name, data)
    cache = os.path.join(work, "daemon-cache")
    daemon = subprocess.Popen([dsec_bin, "lazyfs", "--store", store, "--cache", cache,
                               "--chunk-cache-mb", "64", "--insecure-registry",
                               f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    wait_for(lambda: os.path.exists(os.path.join(store, "lazy", "mnt", data_name)), 15,
             what="the lazy blob daemon to serve the blob")
    state = {"work": work, "store": store, "cache": cache, "port": port, "reg": reg,
             "daemon": daemon, "blob_bytes": len(data), "files": files}
    yield state
    state["reg"].stop()
    subprocess.run([dsec_bin, "lazyfs", "--store", store, "--stop"], timeout=30)
    if daemon.poll() is None:
        daemon.kill()
    daemon.wait(10)
    if not fuse_mounts(store):
        shutil.rmtree(work, ignore_errors=True)


def stats(state):
    with open(os.path.join(state["cache"], "stats.json")) as f:
        return json.load(f)


def test_lazy_layer_reads_on_demand_survives_kill9_and_registry_loss(dsec_bin, lazy):
    node = Node(dsec_bin, lazy["store"])
    node.start()
    c = node.client
    try:
        assert "(running)" in node.log_tail(), node.log_tail()
        sid = c.create_ok(["test/lbusy@1", "test/ldata@1"], cpu=1, memory_mb=128)
        r = c.sh(sid, "cat /data/small.txt")
        assert r["exit_code"] == 0 and r["stdout"] == "read on demand\n", r
        # One small file: a chunk or two of the blob, not the blob.
        wait_for(lambda: stats(lazy)["bytes_fetched"] > 0, 5, what="the daemon's stats")
        fetched = stats(lazy)["bytes_fetched"]
        assert 0 < fetched < lazy["blob_bytes"] // 10, (fetched, lazy["blob_bytes"])
        wait_for(lambda: (metric(node, "dsec_lazy_bytes_fetched_total") or 0) >= fetched, 5,
                 what="/metrics to show the fetched bytes")
        r = c.sh(sid, "sha256sum /data/f1")
        assert r["stdout"].split()[0] == hashlib.sha256(lazy["files"]["f1"]).hexdigest(), r

        # kill -9 of the node: the daemon (own session) and the sandbox live on.
        pid = daemon_pid(lazy["store"])
        node.proc.kill()
        node.proc.wait(30)
        assert pid and alive(pid), pid
        node.start()
        r = c.sh(sid, "sha256sum /data/f2")
        assert r["exit_code"] == 0, r
        assert r["stdout"].split()[0] == hashlib.sha256(lazy["files"]["f2"]).hexdigest(), r
        assert daemon_pid(lazy["store"]) == pid

        # The registry stops: cached chunks read, an uncached one is EIO, soon.
        lazy["reg"].stop()
        r = c.sh(sid, "cat /data/small.txt && sha256sum /data/f1")
        assert r["exit_code"] == 0 and "read on demand" in r["stdout"], r
        t0 = time.monotonic()
        r = c.sh(sid, "cat /data/f40 > /dev/null", timeout_s=60)
        took = time.monotonic() - t0
        assert r["exit_code"] != 0, r
        assert "Input/output error" in r["stderr"], r
        assert took < 30, took
        wait_for(lambda: (metric(node, "dsec_lazy_read_errors_total") or 0) >= 1, 5,
                 what="/metrics to count the failed read")
        c.delete(sid)
        c.created.clear()
        node.stop_ok()
        # The last node out stops the daemon: no mount, no process, no temp files.
        assert not fuse_mounts(lazy["store"]), fuse_mounts(lazy["store"])
        wait_for(lambda: not alive(pid), 10, what=f"daemon {pid} to exit")
        assert os.listdir(os.path.join(lazy["store"], "tmp")) == []
        # The chunk cache is one sparse file per blob, nothing half-written.
        assert "tmp" not in os.listdir(lazy["cache"]), os.listdir(lazy["cache"])
        held = os.listdir(os.path.join(lazy["cache"], "blobs"))
        assert held and all(re.fullmatch(r"[0-9a-f]{64}-[0-9]+", n) for n in held), held
    finally:
        if node.alive():
            node.client.cleanup()
            node.stop()
        node.remove_state()


def test_a_dead_daemons_mount_is_cleaned_and_a_new_daemon_serves(dsec_bin):
    if not os.path.exists("/dev/fuse"):
        pytest.fail("/dev/fuse missing: this machine kind has FUSE (modprobe fuse)")
    work = tempfile.mkdtemp(prefix="dsec-lazy-stale-", dir=TMP_ROOT)
    store = os.path.join(work, "store")
    mnt = os.path.join(store, "lazy", "mnt")
    daemon = subprocess.Popen([dsec_bin, "lazyfs", "--store", store, "--cache",
                               os.path.join(work, "cache")], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    node = None
    try:
        wait_for(lambda: fuse_mounts(store), 15, what="the daemon's mount")
        daemon.kill()
        daemon.wait(10)
        with pytest.raises(OSError) as dead:
            os.listdir(mnt)
        assert dead.value.errno == 107, dead.value  # ENOTCONN: a stale FUSE mount
        node = Node(dsec_bin, store).start()
        assert "(started)" in node.log_tail(), node.log_tail()
        assert os.listdir(mnt) == []
        assert len(fuse_mounts(store)) == 1, fuse_mounts(store)
        pid = daemon_pid(store)
        assert pid and alive(pid)
        node.stop_ok()
        assert not fuse_mounts(store), fuse_mounts(store)
        wait_for(lambda: not alive(pid), 10, what=f"daemon {pid} to exit")
    finally:
        if daemon.poll() is None:
            daemon.kill()
        if node and node.alive():
            node.stop()
        for line in fuse_mounts(store):
            subprocess.run(["umount", "-l", line.split()[1]])
        if node:
            node.remove_state()
        shutil.rmtree(work, ignore_errors=True)


def test_a_snapshot_pushed_and_pulled_back_keeps_its_digest(dsec_bin, client, store):
    work = tempfile.mkdtemp(prefix="dsec-push-", dir=TMP_ROOT)
    reg = Registry(os.path.join(work, "registry")).start()
    host = reg.host
    try:
        sid = client.create_ok(memory_mb=128)
        client.sh(sid, "mkdir -p /work && echo pushed-snapshot > /work/state.txt")
        status, snap = client.call("POST", f"/v1/sandboxes/{sid}/snapshot", None)
        assert status == 201, snap
        push = subprocess.run([dsec_bin, "layer", "push", snap["ref"], f"{host}/e2e/snap:1",
                               "--store", store, "--insecure-registry", host],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        assert push.returncode == 0, push.stderr.decode()
        empty = os.path.join(work, "empty-store")
        pull = subprocess.run([dsec_bin, "layer", "pull", f"{host}/e2e/snap:1", "--store", empty,
                               "--insecure-registry", host],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        assert pull.returncode == 0, pull.stderr.decode()
        ls = subprocess.run([dsec_bin, "layer", "ls", "--store", empty, "--json"],
                            stdout=subprocess.PIPE, timeout=60)
        layers = {l["ref"]: l for l in json.loads(ls.stdout)["layers"]}
        assert snap["ref"] in layers, layers
        assert layers[snap["ref"]]["digest"] == snap["digest"]
        assert layers[snap["ref"]]["kind"] == "snapshot"
        assert not os.listdir(os.path.join(empty, "tmp"))
    finally:
        reg.stop()
        shutil.rmtree(work, ignore_errors=True)
