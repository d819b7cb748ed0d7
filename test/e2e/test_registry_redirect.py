# A registry that keeps its blobs in object storage (Docker Hub, GHCR, ECR,
# Harbor on S3) answers a blob GET with a redirect to a storage URL. The lazy
# blob daemon reads a blob in many ranges: after the first, it reads the rest
# straight from the storage URL, so the registry answers about one request per
# blob, not one per range; a storage URL that stops working (an expired or
# revoked grant) is dropped and the registry asked again, and the read still
# succeeds. Real parts: docker-registry with distribution's redirect storage
# middleware, nginx serving its storage directory (test/pylib/blob_storage.py),
# the real daemon (`dsec lazyfs`, FUSE) reading a chunked layer's data blob.

import json
import os
import shutil
import subprocess
import tempfile

import pytest

from blob_storage import BlobStorage
from dsec_harness import TMP_ROOT, wait_for
from registry import Registry
from test_registry_lazy import CHUNK, build, fuse_mounts, push_blob, register_lazy

BLOB_BYTES = 96 * CHUNK


def stats(cache):
    try:
        with open(os.path.join(cache, "stats.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


@pytest.fixture
def redirected(dsec_bin):
    if not os.path.exists("/dev/fuse"):
        pytest.fail("/dev/fuse missing: this machine kind has FUSE (modprobe fuse)")
    for tool in ("docker-registry", "nginx"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} missing: install it (scripts/deps.sh)")
    work = tempfile.mkdtemp(prefix="dsec-redirect-", dir=TMP_ROOT)
    store = os.path.join(work, "store")
    tree = os.path.join(work, "tree", "data")
    os.makedirs(tree)
    with open(os.path.join(tree, "big"), "wb") as f:
        f.write(os.urandom(BLOB_BYTES))
    build(dsec_bin, os.path.dirname(tree), store, "test/rdata", "--chunked", "--kind",
          "workspace")
    data_name = next(b for b in os.listdir(os.path.join(store, "blobs")) if b.endswith(".blob"))
    with open(os.path.join(store, "blobs", data_name), "rb") as f:
        data = f.read()
    reg = Registry(os.path.join(work, "registry"))
    storage = BlobStorage(os.path.join(work, "nginx"), reg.storage, ports=2).start()
    reg.redirect_to = storage.base_url(0)
    reg.start()
    digest = "sha256:" + data_name[7:-5]
    push_blob(reg.port, "e2e/lazy", data, digest)
    register_lazy(store, reg.port, data_name, data)
    cache = os.path.join(work, "cache")
    daemon = subprocess.Popen([dsec_bin, "lazyfs", "--store", store, "--cache", cache,
                               "--chunk-cache-mb", "64", "--insecure-registry", reg.host],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    blob = os.path.join(store, "lazy", "mnt", data_name)
    try:
        wait_for(lambda: os.path.exists(blob), 15, what="the lazy blob daemon to serve the blob")
        yield {"reg": reg, "storage": storage, "blob": blob, "data": data, "digest": digest,
               "cache": cache}
    finally:
        subprocess.run([dsec_bin, "lazyfs", "--store", store, "--stop"], timeout=30)
        if daemon.poll() is None:
            daemon.kill()
        daemon.wait(10)
        reg.stop()
        storage.stop()
        leftover = fuse_mounts(store)
        if not leftover:
            shutil.rmtree(work, ignore_errors=True)
        assert not leftover, leftover


def read_at(path, offset, n):
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, n, offset)
    finally:
        os.close(fd)


def test_ranges_go_to_storage_after_the_first_redirect_and_a_revoked_url_is_replaced(
        redirected):
    r, data = redirected, redirected["data"]
    reg, storage = r["reg"], r["storage"]
    # Reads far apart: each misses the cache and needs its own range request.
    offsets = [k * 12 * CHUNK + 100 for k in range(6)]
    for off in offsets:
        assert read_at(r["blob"], off, 4096) == data[off:off + 4096], off
    # The registry answered the first range (a redirect); the rest went to
    # storage without it.
    assert reg.blob_gets(r["digest"]) == 1, reg.requests()
    ranged = [q for q in storage.requests(0) if q[0] == 206]
    assert len(ranged) >= len(offsets), storage.requests(0)
    wait_for(lambda: stats(r["cache"]).get("storage_reads", 0) >= len(offsets) - 1, 10,
             what="the daemon to count its reads past the registry")

    # The grant is revoked (every request there is 403) and the registry now
    # redirects elsewhere: the next read drops the old URL, asks the registry
    # once more and reads from the new place.
    storage.revoke(0)
    reg.stop()
    reg.redirect_to = storage.base_url(1)
    reg.start()
    off = 90 * CHUNK + 7
    got = read_at(r["blob"], off, 8192)
    assert got == data[off:off + 8192]
    assert storage.requests(0, status=403), storage.requests(0)
    assert reg.blob_gets(r["digest"]) == 2, reg.requests()
    assert [q for q in storage.requests(1) if q[0] == 206], storage.requests(1)
    # And later ranges stay on the new place.
    off2 = 60 * CHUNK + 3
    assert read_at(r["blob"], off2, 4096) == data[off2:off2 + 4096]
    assert reg.blob_gets(r["digest"]) == 2, reg.requests()
