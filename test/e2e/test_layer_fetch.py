# Image fetch between real nodes with SEPARATE local stores (DESIGN.md §5): a
# layer built only in node A's store is fetched by node B when a sandbox on B
# needs it; the digest is verified, concurrent creates share one fetch, a
# corrupt copy at a peer is rejected (and the next peer tried, or a clear
# error when there is none) and never reaches B's blobs/, and fetched images
# are evicted least recently used under --layer-cache-mb, never while a
# sandbox uses them, and fetched again on demand.
import json
import os
import shutil
import tempfile
import threading

import pytest

from dsec_harness import BUSYBOX, STORE, TMP_ROOT, Node, _finish_node, wait_for

JOIN_WAIT_S = 30
# Node ids sort the candidate peers (after those advertising the layer): the
# node with the corrupt copy sorts first, so B tries it before the good one.
CORRUPT_ID = "h2fa-corrupt"
GOOD_ID = "h2fb-good"
FETCHER_ID = "h2fc-fetch"
LEAN_ID = "h2fd-lean"


def make_store(path, refs=(BUSYBOX,)):
    """A store holding copies (not links: tests corrupt them) of `refs` from
    the test store."""
    os.makedirs(os.path.join(path, "blobs"), exist_ok=True)
    os.makedirs(os.path.join(path, "tmp"), exist_ok=True)
    with open(os.path.join(STORE, "catalog.json")) as f:
        src = json.load(f)
    cat = {"version": 1, "layers": {}}
    for ref in refs:
        entry = src["layers"][ref]
        cat["layers"][ref] = entry
        blob = "sha256-" + entry["digest"].split(":")[1] + ".erofs"
        shutil.copyfile(os.path.join(STORE, "blobs", blob), os.path.join(path, "blobs", blob))
    with open(os.path.join(path, "catalog.json"), "w") as f:
        json.dump(cat, f)
    return path


def catalog(store):
    with open(os.path.join(store, "catalog.json")) as f:
        return json.load(f)["layers"]


def blob_path(store, digest):
    return os.path.join(store, "blobs", "sha256-" + digest.split(":")[1] + ".erofs")


def build_layer(dsec_bin, store, name, files):
    """Builds `files` ({relative path: bytes}) as workspace layer name@1 into
    `store`; returns its catalog entry."""
    import subprocess
    src = tempfile.mkdtemp(prefix="h2f-src-", dir=TMP_ROOT)
    try:
        for rel, data in files.items():
            p = os.path.join(src, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(data)
        p = subprocess.run([dsec_bin, "layer", "build", src, "--name", name, "--version", "1",
                            "--kind", "workspace", "--store", store],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        assert p.returncode == 0, p.stdout.decode(errors="replace")
    finally:
        shutil.rmtree(src, ignore_errors=True)
    return catalog(store)[name + "@1"]


def copy_layer(src_store, dst_store, ref, corrupt=False):
    """Copies `ref`'s entry and image into dst_store; with corrupt, flips bytes
    in the middle of the copy (same size, same entry)."""
    entry = catalog(src_store)[ref]
    dst = blob_path(dst_store, entry["digest"])
    shutil.copyfile(blob_path(src_store, entry["digest"]), dst)
    if corrupt:
        with open(dst, "r+b") as f:
            f.seek(entry["size_bytes"] // 2)
            b = f.read(64)
            f.seek(entry["size_bytes"] // 2)
            f.write(bytes(x ^ 0x5A for x in b))
    path = os.path.join(dst_store, "catalog.json")
    with open(path) as f:
        cat = json.load(f)
    cat["layers"][ref] = entry
    with open(path + ".tmp", "w") as f:
        json.dump(cat, f)
    os.replace(path + ".tmp", path)


def fetch_lines(node, ref):
    with open(node.log_path, errors="replace") as f:
        return [l for l in f if "image_fetch: fetched layer " + ref + " " in l]


def tmp_files(store):
    return [f for f in os.listdir(os.path.join(store, "tmp")) if f.startswith("fetch-")]


def alive_ids(node):
    status, out = node.client.call("GET", "/v1/nodes")
    assert status == 200, out
    return {m["id"] for m in out["nodes"] if m["state"] == "alive"}


def join_all(nodes):
    ids = {n.node_id for n in nodes}
    for n in nodes:
        wait_for(lambda: alive_ids(n) >= ids, JOIN_WAIT_S, what=f"{n.node_id} to see {ids}")


@pytest.fixture(scope="module")
def cluster(dsec_bin, store):
    """A (holds the layers) and B (fetches), each with its own store."""
    root = tempfile.mkdtemp(prefix="h2f-stores-", dir=TMP_ROOT)
    stores = {k: make_store(os.path.join(root, k)) for k in ("a", "b", "c", "scratch")}
    a = Node(dsec_bin, stores["a"], node_id=GOOD_ID).start()
    seed = ["--join", f"127.0.0.1:{a.listen_port}"]
    b = Node(dsec_bin, stores["b"], node_id=FETCHER_ID, extra_args=seed).start()
    nodes = {"a": a, "b": b}
    join_all([a, b])
    state = {"nodes": nodes, "stores": stores, "seed": seed, "bin": dsec_bin}
    yield state
    for n in list(nodes.values()):
        _finish_node(n)
    shutil.rmtree(root, ignore_errors=True)


def test_create_on_b_fetches_layer_from_a(cluster, dsec_bin):
    a, b = cluster["nodes"]["a"], cluster["nodes"]["b"]
    sa, sb = cluster["stores"]["a"], cluster["stores"]["b"]
    big = os.urandom(5 * 1024 * 1024 + 4321)  # several chunks, not a multiple
    entry = build_layer(dsec_bin, sa, "h2f/one", {"h2f/hello.txt": b"hello from A\n",
                                                   "h2f/big.bin": big})
    assert "h2f/one@1" not in catalog(sb)
    sid = b.client.create_ok(layers=[BUSYBOX, "h2f/one@1"], node=b.node_id)
    assert sid.split(".")[0] == b.node_id
    out = b.client.sh(sid, "cat /h2f/hello.txt; sha256sum /h2f/big.bin")
    import hashlib
    assert out["stdout"] == "hello from A\n" + hashlib.sha256(big).hexdigest() + "  /h2f/big.bin\n"
    # B's store now holds the same image under the same digest.
    assert catalog(sb)["h2f/one@1"]["digest"] == entry["digest"]
    with open(blob_path(sb, entry["digest"]), "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == entry["digest"].split(":")[1]
    assert len(fetch_lines(b, "h2f/one@1")) == 1
    assert f"from node {a.node_id}" in fetch_lines(b, "h2f/one@1")[0]
    assert tmp_files(sb) == []
    # Held now: a second create fetches nothing.
    b.client.create_ok(layers=[BUSYBOX, "h2f/one@1"], node=b.node_id)
    assert len(fetch_lines(b, "h2f/one@1")) == 1
    b.client.cleanup()


def test_concurrent_creates_share_one_fetch(cluster, dsec_bin):
    a, b = cluster["nodes"]["a"], cluster["nodes"]["b"]
    build_layer(dsec_bin, cluster["stores"]["a"], "h2f/two",
                {"h2f/two.bin": os.urandom(24 * 1024 * 1024), "h2f/two.txt": b"two\n"})
    results = []

    def create():
        results.append(b.client.create(layers=[BUSYBOX, "h2f/two@1"], node=b.node_id))

    threads = [threading.Thread(target=create) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [s for s, _ in results] == [201, 201, 201], results
    for _, out in results:
        assert b.client.sh(out["id"], "cat /h2f/two.txt")["stdout"] == "two\n"
    assert len(fetch_lines(b, "h2f/two@1")) == 1, fetch_lines(b, "h2f/two@1")
    b.client.cleanup()


def test_unknown_layer_is_not_found_everywhere(cluster):
    b = cluster["nodes"]["b"]
    status, out = b.client.create(layers=[BUSYBOX, "h2f/nowhere@1"], node=b.node_id)
    assert status == 404, out
    assert "h2f/nowhere@1" in out["error"]["message"]
    assert tmp_files(cluster["stores"]["b"]) == []


def test_corrupt_copy_is_rejected_and_next_peer_used(cluster, dsec_bin):
    nodes, stores = cluster["nodes"], cluster["stores"]
    a, b = nodes["a"], nodes["b"]
    entry = build_layer(dsec_bin, stores["a"], "h2f/three", {"h2f/three.txt": b"three\n",
                                                             "h2f/pad.bin": os.urandom(3 << 20)})
    copy_layer(stores["a"], stores["c"], "h2f/three@1", corrupt=True)
    c = Node(dsec_bin, stores["c"], node_id=CORRUPT_ID, extra_args=cluster["seed"]).start()
    nodes["c"] = c
    join_all([a, b, c])
    sid = b.client.create_ok(layers=[BUSYBOX, "h2f/three@1"], node=b.node_id)
    assert b.client.sh(sid, "cat /h2f/three.txt")["stdout"] == "three\n"
    log = open(b.log_path, errors="replace").read()
    assert (f"fetch layer h2f/three@1 from node {CORRUPT_ID} failed" in log
            and "digest mismatch" in log), b.log_tail()
    assert f"from node {GOOD_ID}" in fetch_lines(b, "h2f/three@1")[0]
    assert catalog(stores["b"])["h2f/three@1"]["digest"] == entry["digest"]
    assert tmp_files(stores["b"]) == []
    b.client.cleanup()


def test_only_corrupt_copy_gives_clear_error_and_nothing_stored(cluster, dsec_bin):
    nodes, stores = cluster["nodes"], cluster["stores"]
    b = nodes["b"]
    assert "c" in nodes, "runs after test_corrupt_copy_is_rejected_and_next_peer_used"
    # Built in D's store only to get an image, then given (corrupt) to C alone.
    entry = build_layer(dsec_bin, stores["scratch"], "h2f/four", {"h2f/four.txt": b"four\n"})
    copy_layer(stores["scratch"], stores["c"], "h2f/four@1", corrupt=True)
    status, out = b.client.create(layers=[BUSYBOX, "h2f/four@1"], node=b.node_id)
    assert status == 503, out
    msg = out["error"]["message"]
    assert "h2f/four@1" in msg and "digest mismatch" in msg and CORRUPT_ID in msg, msg
    assert "h2f/four@1" not in catalog(stores["b"])
    assert not os.path.exists(blob_path(stores["b"], entry["digest"]))
    assert tmp_files(stores["b"]) == []
    # The failed create left no sandbox behind.
    status, out = b.client.list()
    assert status == 200 and out["sandboxes"] == [], out


def test_eviction_under_tiny_budget(cluster, dsec_bin):
    nodes, stores = cluster["nodes"], cluster["stores"]
    a = nodes["a"]
    e1 = build_layer(dsec_bin, stores["a"], "h2f/e1", {"h2f/e.txt": b"e1\n",
                                                       "h2f/pad": os.urandom(2 << 20)})
    e2 = build_layer(dsec_bin, stores["a"], "h2f/e2", {"h2f/e.txt": b"e2\n",
                                                       "h2f/pad": os.urandom(2 << 20)})
    sd = make_store(os.path.join(os.path.dirname(stores["scratch"]), "lean"))
    # 1 MiB: less than busybox alone, so every fetched image not in use goes.
    d = Node(dsec_bin, sd, node_id=LEAN_ID,
             extra_args=cluster["seed"] + ["--layer-cache-mb", "1"]).start()
    nodes["d"] = d
    join_all([a, d])
    s1 = d.client.create_ok(layers=[BUSYBOX, "h2f/e1@1"], node=d.node_id)
    s2 = d.client.create_ok(layers=[BUSYBOX, "h2f/e2@1"], node=d.node_id)
    # Both in use: over budget, yet neither image may go.
    assert os.path.exists(blob_path(sd, e1["digest"]))
    assert os.path.exists(blob_path(sd, e2["digest"]))
    # Built (here: copied in, not fetched) images are never evicted.
    assert os.path.exists(blob_path(sd, catalog(sd)[BUSYBOX]["digest"]))
    status, _ = d.client.delete(s1)
    assert status in (200, 204)
    wait_for(lambda: not os.path.exists(blob_path(sd, e1["digest"])), 15,
             what="e1's image to be evicted once unused")
    assert os.path.exists(blob_path(sd, e2["digest"])), "e2 is in use by s2"
    assert d.client.sh(s2, "cat /h2f/e.txt")["stdout"] == "e2\n"
    # The entry stays; the image comes back from a peer on demand.
    assert catalog(sd)["h2f/e1@1"]["digest"] == e1["digest"]
    s3 = d.client.create_ok(layers=[BUSYBOX, "h2f/e1@1"], node=d.node_id)
    assert d.client.sh(s3, "cat /h2f/e.txt")["stdout"] == "e1\n"
    assert len(fetch_lines(d, "h2f/e1@1")) == 2
    d.client.cleanup()
