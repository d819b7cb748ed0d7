# Chunked layers end to end: `dsec layer build --chunked` puts metadata in
# blobs/sha256-<hex>.erofs and file data in blobs/sha256-<data hex>.blob (named
# by its own digest, which the image records), a node on that store mounts
# the layers with -o device=<data blob>, and a sandbox stacking a chunked
# busybox root and a chunked data layer reads the right bytes. Also: a data
# blob the node cannot find fails the create (not_found) and leaves nothing
# behind; --chunked with --prune-git is a usage error.

import hashlib
import os
import shutil
import subprocess
import tempfile

import pytest

from dsec_harness import TMP_ROOT, Node, _finish_node, assert_clean

BUSYBOX_BIN = "/bin/busybox"
APPLETS = ["sh", "cat", "sha256sum", "wc", "ls"]


def build(dsec_bin, src, store, name, *extra):
    return subprocess.run([dsec_bin, "layer", "build", src, "--name", name, "--version", "1",
                           "--store", store, *extra], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=300)


@pytest.fixture(scope="module")
def work():
    if not os.access(BUSYBOX_BIN, os.R_OK):
        pytest.fail(f"{BUSYBOX_BIN} missing: install busybox-static (scripts/deps.sh)")
    d = tempfile.mkdtemp(prefix="h3-chunked-", dir=TMP_ROOT)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def chunked(dsec_bin, work):
    """A private store with a chunked busybox root and a chunked data layer.
    Returns (store, bytes of /data/big.bin, data blob file names)."""
    store = os.path.join(work, "store")
    root = os.path.join(work, "root")
    os.makedirs(os.path.join(root, "bin"))
    shutil.copy(BUSYBOX_BIN, os.path.join(root, "bin", "busybox"))
    for a in APPLETS:
        os.symlink("busybox", os.path.join(root, "bin", a))
    data_dir = os.path.join(work, "data")
    os.makedirs(os.path.join(data_dir, "data"))
    big = os.urandom(5 << 20)
    with open(os.path.join(data_dir, "data", "big.bin"), "wb") as f:
        f.write(big)
    p = build(dsec_bin, root, store, "test/cbusy", "--chunked")
    assert p.returncode == 0, p.stderr.decode()
    p = build(dsec_bin, data_dir, store, "test/cdata", "--chunked", "--kind", "workspace")
    assert p.returncode == 0, p.stderr.decode()
    digest = p.stdout.decode().split()[1]
    blobs = os.listdir(os.path.join(store, "blobs"))
    datas = [b for b in blobs if b.endswith(".blob")]
    assert len(datas) == 2, blobs
    # Each data blob is named by its own digest; the data layer's image is small.
    for b in datas:
        with open(os.path.join(store, "blobs", b), "rb") as f:
            assert b == "sha256-" + hashlib.sha256(f.read()).hexdigest() + ".blob"
    image = os.path.join(store, "blobs", "sha256-" + digest.split(":")[1] + ".erofs")
    assert os.path.getsize(image) < 64 << 10
    return store, big, datas


def test_chunked_layers_run_in_a_sandbox(dsec_bin, chunked):
    store, big, _ = chunked
    node = Node(dsec_bin, store).start()
    try:
        c = node.client
        sid = c.create_ok(["test/cbusy@1", "test/cdata@1"], cpu=1, memory_mb=256)
        r = c.sh(sid, "sha256sum /data/big.bin; wc -c < /data/big.bin")
        assert r["exit_code"] == 0, r
        assert r["stdout"].split()[0] == hashlib.sha256(big).hexdigest(), r
        assert r["stdout"].split()[2] == str(len(big)), r
        c.delete(sid)
        assert_clean(node, allow_layer_mounts=True)
    finally:
        _finish_node(node)


def test_missing_data_blob_fails_the_create_cleanly(dsec_bin, work, chunked):
    # Hide the data layer's blob: the layer counts as missing from the store
    # (the node asks its peers, it has none): not_found naming the ref, and
    # nothing left behind.
    store, big, datas = chunked
    data_blob = [b for b in datas if os.path.getsize(os.path.join(store, "blobs", b)) >= len(big)][0]
    hidden = os.path.join(work, data_blob)
    os.rename(os.path.join(store, "blobs", data_blob), hidden)
    node = Node(dsec_bin, store).start()
    try:
        status, body = node.client.create(["test/cbusy@1", "test/cdata@1"], cpu=1, memory_mb=256)
        assert status == 404, (status, body)
        assert body["error"]["code"] == "not_found", body
        assert "test/cdata@1" in body["error"]["message"], body
        assert_clean(node, allow_layer_mounts=True)
    finally:
        os.rename(hidden, os.path.join(store, "blobs", data_blob))
        _finish_node(node)


def test_chunked_with_prune_git_is_a_usage_error(dsec_bin, work):
    p = build(dsec_bin, work, os.path.join(work, "store2"), "test/x", "--chunked", "--prune-git")
    assert p.returncode == 2, p
    assert b"--prune-git and --chunked cannot be combined" in p.stderr, p.stderr
