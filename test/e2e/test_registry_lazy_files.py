# Whole-file lazy reads (issue 25, on-demand reads): a node that creates from
# an image another node converted and published reads each file it opens in
# ONE range request, the whole file, and nothing of the files beside it in the
# data blob. The real path end to end: Debian's docker-registry on loopback,
# a converting node that publishes, a second node with its own store that
# fetches only the metadata image, registers the data blob with its file
# extents (read from the EROFS metadata) and mounts it with directio through
# the lazy blob daemon.

import contextlib
import hashlib
import json
import os
import random
import shutil
import tempfile
import time
import urllib.request

import pytest

from dsec_harness import TMP_ROOT, Node, _finish_node, wait_for
from registry_fixture import Registry, make_image_layout

FILES = 8
FILE_CHARS = 300_000


def metric(node, name):
    with urllib.request.urlopen(f"http://{node.rest}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


@contextlib.contextmanager
def lazy_sandbox(dsec_bin, texts, repo):
    """An image of `texts` pushed to a fresh registry, converted and published by
    one node, then created from on a second node with a store of its own, which
    reads it on demand: yields (that node, the sandbox id, the image ref).
    Removes the nodes, registry, layout and stores afterwards."""
    layout = make_image_layout(tempfile.mkdtemp(prefix="dsec-oci-", dir=TMP_ROOT), texts)
    reg = Registry().start()
    stores = [tempfile.mkdtemp(prefix=f"dsec-{repo}-store-", dir=TMP_ROOT) for _ in range(2)]
    nodes = []
    try:
        ref = reg.push(layout, f"team/{repo}", "1")
        # The first node converts the image and publishes the conversion.
        conv = Node(dsec_bin, stores[0], extra_args=["--insecure-registry", reg.host]).start()
        nodes.append(conv)
        status, info = conv.client.call("POST", "/v1/sandboxes", {"image": ref}, timeout=300)
        assert status == 201, info
        conv.client.delete(info["id"])
        _finish_node(nodes.pop())
        # A second node with a store of its own reads it on demand.
        node = Node(dsec_bin, stores[1], extra_args=["--insecure-registry", reg.host]).start()
        nodes.append(node)
        status, info = node.client.call("POST", "/v1/sandboxes", {"image": ref}, timeout=300)
        assert status == 201, info
        yield node, info["id"], ref
        node.client.delete(info["id"])
    finally:
        try:
            while nodes:
                _finish_node(nodes.pop())
        finally:
            reg.remove()
            shutil.rmtree(layout, ignore_errors=True)
            for st in stores:
                shutil.rmtree(st, ignore_errors=True)


def test_a_lazily_read_file_is_one_range_request_and_nothing_beside_it(dsec_bin):
    rng = random.Random(25)
    texts = {f"data/f{i}.txt": "".join(rng.choice("0123456789abcdef") for _ in range(FILE_CHARS))
             for i in range(FILES)}
    with lazy_sandbox(dsec_bin, texts, "lazyfiles") as (node, sid, ref):
        with open(node.log_path, errors="replace") as f:
            assert f"image {ref}: using the conversion published" in f.read(), node.log_tail()
        # busybox itself (the shell, cat) is read first; count from there.
        assert node.client.sh(sid, "true")["exit_code"] == 0
        wait_for(lambda: metric(node, "dsec_lazy_range_requests_total") > 0, 10,
                 what="the lazy daemon's first reads in /metrics")
        req0 = metric(node, "dsec_lazy_range_requests_total")
        bytes0 = metric(node, "dsec_lazy_bytes_fetched_total")
        r = node.client.sh(sid, "sha256sum /data/f1.txt /data/f4.txt /data/f6.txt")
        assert r["exit_code"] == 0, r
        got = {line.split()[1]: line.split()[0] for line in r["stdout"].splitlines()}
        for name in ("f1", "f4", "f6"):
            want = hashlib.sha256(texts[f"data/{name}.txt"].encode()).hexdigest()
            assert got[f"/data/{name}.txt"] == want, r
        # The daemon's stats reach /metrics within a second or so.
        wait_for(lambda: metric(node, "dsec_lazy_bytes_fetched_total") >= bytes0 + 3 * FILE_CHARS,
                 10, what="/metrics to count the three files' bytes")
        requests = metric(node, "dsec_lazy_range_requests_total") - req0
        fetched = metric(node, "dsec_lazy_bytes_fetched_total") - bytes0
        # One request per file, and at most a 16 KiB chunk of a neighbour on
        # each side of it: not the kernel's readahead into the next files.
        assert requests == 3, (requests, fetched)
        assert fetched <= 3 * (FILE_CHARS + 2 * 16384), (requests, fetched)


def test_concurrent_misses_on_a_blob_share_multi_range_requests(dsec_bin):
    # Many readers of one image at once: misses that queue behind the blob's
    # request in flight go out together as ONE multi-range request, which
    # docker-registry answers as multipart/byteranges; every byte still
    # verifies against the chunk list, and no read falls back to one range
    # per request.
    rng = random.Random(2525)
    texts = {f"data/g{i:03d}.txt": "".join(rng.choice("0123456789abcdef") for _ in range(40_000))
             for i in range(144)}
    with lazy_sandbox(dsec_bin, texts, "lazybatch") as (node, sid, ref):
        batch = os.path.join(node.state_dir, "lazy-cache", "batch.json")

        def counts():
            try:
                with open(batch) as f:
                    return json.load(f)
            except (OSError, ValueError):
                return None
        # Rounds of 24 files read at once, spread over the blob, each checked;
        # a round whose misses happened not to overlap is followed by another.
        for rnd in range(3):
            names = sorted(texts)[2 * rnd::6]
            cmd = " ".join(f"cat /{n} >/dev/null &" for n in names) + " wait; sha256sum " + \
                " ".join(f"/{n}" for n in names)
            r = node.client.sh(sid, cmd)
            assert r["exit_code"] == 0, r
            got = {line.split()[1]: line.split()[0] for line in r["stdout"].splitlines()}
            for n in names:
                assert got[f"/{n}"] == hashlib.sha256(texts[n].encode()).hexdigest(), n
            wait_for(lambda: (counts() or {}).get("ranges", 0) > 0, 10,
                     what="the daemon's batch.json to count the readers' ranges")
            time.sleep(2)  # the daemon rewrites it within a second of a change
            c = counts()
            print("round", rnd, "batch.json:", c)
            if c["requests"] < c["ranges"]:
                break
        # Some requests carried several readers' ranges ...
        assert c["requests"] < c["ranges"], c
        # ... and the registry answered them as such (no fallback).
        with open(os.path.join(node.state_dir, "lazy-cache", "daemon.log"), errors="replace") as f:
            assert "one range per request" not in f.read()
