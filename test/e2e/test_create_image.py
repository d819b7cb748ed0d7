# Create straight from an image (issue 25, part 2): a spec's "image" names an
# image in a real registry (Debian's docker-registry on loopback, seeded with
# skopeo from an OCI layout made here of the host's static busybox). The
# first create pulls it, concurrent creates share that pull, a node that has
# the image does not touch the registry again, layers stack on it, bad
# references are 404s naming them, a registry that is down is a 503; through
# REST, the Python SDK (sync and async), the CLI, E2B and a 2-node cluster.

import asyncio
import os
import shutil
import subprocess
import tempfile
import threading

import pytest

from dsec_harness import TMP_ROOT, Node, _finish_node, assert_clean, import_sdk, wait_for
from registry_fixture import Registry, make_image_layout

IMAGE_TEXT = "only in the image\n"


def pulls(node, ref):
    """How many times `node` pulled `ref` (its log says so once per pull)."""
    with open(node.log_path, errors="replace") as f:
        return sum(1 for line in f if f"image {ref}: pulling" in line)


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    """An OCI layout of a busybox root fs with /image-only.txt."""
    return make_image_layout(tmp_path_factory.mktemp("oci"), {"image-only.txt": IMAGE_TEXT})


@pytest.fixture(scope="module")
def reg(layout):
    r = Registry().start()
    yield r
    r.remove()


@pytest.fixture(scope="module")
def private_store(dsec_bin):
    """A store of this module's own: pulls write to it (and to its images.json),
    and it holds a workspace layer to stack on images."""
    root = tempfile.mkdtemp(prefix="dsec-image-store-", dir=TMP_ROOT)
    src = tempfile.mkdtemp(prefix="dsec-ws-", dir=TMP_ROOT)
    with open(os.path.join(src, "stacked.txt"), "w") as f:
        f.write("from the layer\n")
    p = subprocess.run([dsec_bin, "layer", "build", src, "--name", "ws/stacked", "--version", "1",
                        "--kind", "workspace", "--store", root],
                       capture_output=True, text=True, timeout=300)
    shutil.rmtree(src)
    assert p.returncode == 0, p.stderr
    yield root
    shutil.rmtree(root, ignore_errors=True)


def image_node(dsec_bin, store_dir, reg, *extra):
    return Node(dsec_bin, store_dir, extra_args=["--insecure-registry", reg.host, *extra])


@pytest.fixture(scope="module")
def inode(dsec_bin, private_store, reg):
    n = image_node(dsec_bin, private_store, reg).start()
    yield n
    _finish_node(n)


@pytest.fixture
def ic(inode):
    """The image node's REST client; sandboxes a test made are deleted after it."""
    c = inode.client
    mark = len(c.created)
    yield c
    for sid in reversed(c.created[mark:]):
        c.delete(sid)
    del c.created[mark:]


def create_image(c, image, layers=None, **spec):
    body = {"image": image}
    if layers:
        body["layers"] = layers
    body.update(spec)
    status, out = c.call("POST", "/v1/sandboxes", body, timeout=300)
    if status == 201:
        c.created.append(out["id"])
    return status, out


# -- REST ---------------------------------------------------------------------------------


def test_rest_create_from_an_image_runs_its_files(ic, inode, reg, layout):
    ref = reg.push(layout, "team/rest", "1")
    status, info = create_image(ic, ref)
    assert status == 201, info
    assert info["image"] == ref
    assert info["layers"][0].startswith("img/"), info["layers"]
    r = ic.sh(info["id"], "cat /image-only.txt")
    assert r["exit_code"] == 0 and r["stdout"] == IMAGE_TEXT, r
    status, got = ic.get(info["id"])
    assert status == 200 and got["image"] == ref and got["layers"] == info["layers"]
    assert pulls(inode, ref) == 1


def test_layers_stack_on_the_image(ic, reg, layout):
    ref = reg.push(layout, "team/stacked", "1")
    status, info = create_image(ic, ref, layers=["ws/stacked@1"])
    assert status == 201, info
    assert info["layers"][1:] == ["ws/stacked@1"]
    r = ic.sh(info["id"], "cat /image-only.txt /stacked.txt")
    assert r["stdout"] == IMAGE_TEXT + "from the layer\n", r


def test_concurrent_creates_share_one_pull(ic, inode, reg, layout):
    ref = reg.push(layout, "team/burst", "1")
    before = reg.blob_gets("team/burst")
    results = [None] * 8

    def one(i):
        results[i] = create_image(ic, ref)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(s == 201 for s, _ in results), results
    assert len({out["layers"][0] for _, out in results}) == 1
    # One pull: the node's log says so once, and the registry served the
    # image's blobs (config and one layer) once each.
    assert pulls(inode, ref) == 1, inode.log_tail(40)
    assert reg.blob_gets("team/burst") - before == 2, reg.log_tail()
    for _, out in results[:2]:
        assert ic.sh(out["id"], "cat /image-only.txt")["stdout"] == IMAGE_TEXT


def test_unknown_tag_is_a_404_naming_it_and_leaves_nothing(ic, inode, reg, layout):
    reg.push(layout, "team/bb", "known")
    ref = f"{reg.host}/team/bb:no-such-tag"
    status, body = create_image(ic, ref)
    assert status == 404, body
    assert ref in body["error"]["message"], body
    status, body = create_image(ic, f"{reg.host}/team/no-such-repo:1")
    assert status == 404 and "team/no-such-repo" in body["error"]["message"], body
    # Nothing half-made: no sandbox dir, no mount, no cgroup.
    wait_for(lambda: not inode.check_clean(allow_layer_mounts=True), 15, what="clean node")


def test_bad_references_and_backends_are_400s(ic, reg):
    for spec, want in [({"image": "Not A Ref"}, "image"),
                       ({"image": f"{reg.host}/team/bb:1", "backend": "microvm"}, "microvm"),
                       ({"image": f"{reg.host}/team/bb:1", "backend": "fncall"}, "fncall")]:
        status, body = ic.call("POST", "/v1/sandboxes", spec)
        assert status == 400 and want in body["error"]["message"], (spec, body)


# -- SDK and CLI --------------------------------------------------------------------------


def test_sdk_create_from_an_image_sync_and_async(inode, reg, layout):
    dsec = import_sdk()
    ref = reg.push(layout, "team/sdk", "1")
    addr = f"127.0.0.1:{inode.listen_port}"
    with dsec.Client(addr) as c:
        with c.create(image=ref, layers=["ws/stacked@1"]) as sb:
            assert sb.layers[0].startswith("img/") and sb.layers[1] == "ws/stacked@1"
            assert sb.exec("cat /image-only.txt").stdout == IMAGE_TEXT
            assert sb.info().image == ref
        with pytest.raises(dsec.NotFound) as e:
            c.create(image=f"{reg.host}/team/sdk:missing")
        assert f"{reg.host}/team/sdk:missing" in str(e.value)
        with pytest.raises(dsec.InvalidArgument):
            c.create()  # neither layers nor an image

    async def go():
        async with dsec.AsyncClient(addr) as ac:
            sb = await ac.create(image=ref)
            try:
                return (await sb.exec("cat /image-only.txt")).stdout
            finally:
                await sb.destroy()

    assert asyncio.run(go()) == IMAGE_TEXT
    assert pulls(inode, ref) == 1


def test_cli_create_image(dsec_bin, inode, reg, layout):
    ref = reg.push(layout, "team/cli", "1")
    p = subprocess.run([dsec_bin, "create", "--help"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "--image" in p.stdout, p
    p = subprocess.run([dsec_bin, "create", "--image", ref, "--rest", inode.rest],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    sid = p.stdout.strip()
    try:
        status, info = inode.client.get(sid)
        assert status == 200 and info["image"] == ref
    finally:
        inode.client.delete(sid)
    p = subprocess.run([dsec_bin, "create", "--image", f"{reg.host}/team/cli:nope", "--rest",
                        inode.rest], capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "team/cli:nope" in p.stderr, p


def test_dockerfile_from_an_image_pulls_it_once_on_the_node(dsec_bin, inode, reg, layout,
                                                           tmp_path):
    ref = reg.push(layout, "team/dockerfile", "1")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {ref}\nRUN cp /image-only.txt /built-on-it.txt\n")

    def build(version):
        return subprocess.run([dsec_bin, "layer", "build", "--dockerfile", str(ctx / "Dockerfile"),
                               "--name", "app/on-image", "--version", version,
                               "--store", inode.store, "--rest", inode.rest],
                              capture_output=True, text=True, timeout=600)
    p = build("1")
    assert p.returncode == 0, p.stderr
    assert f"Pulling {ref}" in p.stderr and "FROM " + ref + ": layer img/" in p.stderr, p.stderr
    status, info = inode.client.create(["app/on-image@1"])
    assert status == 201, info
    try:
        r = inode.client.sh(info["id"], "cat /built-on-it.txt")
        assert r["exit_code"] == 0 and r["stdout"] == IMAGE_TEXT, r
    finally:
        inode.client.delete(info["id"])
    # The image is now in the store: a rebuild asks no registry, its step is cached.
    p = build("2")
    assert p.returncode == 0, p.stderr
    assert "Pulling" not in p.stderr and "CACHED" in p.stderr, p.stderr
    assert pulls(inode, ref) == 1
    # A reference the registry lacks names it; a FROM that is neither is refused.
    (ctx / "Dockerfile").write_text(f"FROM {reg.host}/team/dockerfile:nope\nRUN true\n")
    p = build("3")
    assert p.returncode != 0 and "team/dockerfile:nope" in p.stderr, p.stderr
    (ctx / "Dockerfile").write_text("FROM just-a-name\nRUN true\n")
    p = build("4")
    assert p.returncode != 0 and "neither a layer ref" in p.stderr, p.stderr
    status, out = inode.client.list({"dsec-build": "1"})
    assert status == 200 and out["sandboxes"] == [], out


# -- E2B ----------------------------------------------------------------------------------


def test_e2b_template_id_that_is_an_image_reference(inode, reg, layout):
    ref = reg.push(layout, "team/e2b", "1")
    c = inode.client
    status, body = c.call("POST", "/sandboxes", {"templateID": ref}, timeout=300)
    assert status == 201, body
    sid = body["sandboxID"]
    try:
        assert body["templateID"] == ref
        status, info = c.get(sid)
        assert status == 200 and info["image"] == ref, info
        assert c.sh(sid, "cat /image-only.txt")["stdout"] == IMAGE_TEXT
    finally:
        c.delete(sid)
    status, body = c.call("POST", "/sandboxes", {"templateID": f"{reg.host}/team/e2b:nope"},
                          timeout=300)
    assert status == 404, body


# -- a node that has the image; the registry down ------------------------------------------


def test_a_node_that_has_the_image_does_not_touch_the_registry(dsec_bin, layout, tmp_path):
    r = Registry().start()
    store = tempfile.mkdtemp(prefix="dsec-image-store-", dir=TMP_ROOT)
    n = image_node(dsec_bin, store, r).start()
    try:
        ref = r.push(layout, "team/offline", "1")
        status, info = create_image(n.client, ref)
        assert status == 201, info
        n.client.delete(info["id"])
        never = f"{r.host}/team/offline:never-pulled"
        r.stop()
        # The registry is gone: the image it has is still created from...
        status, info = create_image(n.client, ref)
        assert status == 201, info
        assert n.client.sh(info["id"], "cat /image-only.txt")["stdout"] == IMAGE_TEXT
        n.client.delete(info["id"])
        assert pulls(n, ref) == 1
        # ... and one it never pulled is a 503 naming the image.
        status, body = create_image(n.client, never)
        assert status == 503, body
        assert never in body["error"]["message"], body
    finally:
        try:
            _finish_node(n)
        finally:
            r.remove()
            shutil.rmtree(store, ignore_errors=True)


# -- a cluster ---------------------------------------------------------------------------


def test_create_through_the_other_peer_pulls_on_the_node_that_creates(dsec_bin, layout, reg):
    stores = [tempfile.mkdtemp(prefix="dsec-image-store-", dir=TMP_ROOT) for _ in range(2)]
    a = image_node(dsec_bin, stores[0], reg).start()
    b = image_node(dsec_bin, stores[1], reg, "--join", f"127.0.0.1:{a.listen_port}").start()
    try:
        def members(n):
            status, body = n.client.call("GET", "/v1/nodes")
            return {m["id"]: m["state"] for m in body["nodes"]} if status == 200 else {}

        wait_for(lambda: members(a).get(b.node_id) == "alive", 30, what="join")
        ref = reg.push(layout, "team/cluster", "1")
        # Through a, pinned to b: b pulls and runs it, a forwards.
        status, info = create_image(a.client, ref, node=b.node_id)
        assert status == 201, info
        assert info["node"] == b.node_id and info["image"] == ref
        assert a.client.sh(info["id"], "cat /image-only.txt")["stdout"] == IMAGE_TEXT
        assert pulls(b, ref) == 1 and pulls(a, ref) == 0
        assert os.path.exists(os.path.join(stores[1], "images.json"))
        a.client.delete(info["id"])
        # b published its conversion: a, with a store of its own, takes it
        # instead of converting again.
        status, info = create_image(a.client, ref, node=a.node_id)
        assert status == 201, info
        assert a.client.sh(info["id"], "cat /image-only.txt")["stdout"] == IMAGE_TEXT
        assert pulls(a, ref) == 0, a.log_tail(40)
        with open(a.log_path, errors="replace") as f:
            assert f"image {ref}: using the conversion published" in f.read()
        a.client.delete(info["id"])
    finally:
        try:
            _finish_node(b)
        finally:
            try:
                _finish_node(a)
            finally:
                for s in stores:
                    shutil.rmtree(s, ignore_errors=True)


def test_a_sandbox_from_an_image_survives_a_node_restart(dsec_bin, layout, reg):
    """Its record holds the image's layer first: the restarted node adopts it
    with the same mounts, and no second pull."""
    store = tempfile.mkdtemp(prefix="dsec-image-store-", dir=TMP_ROOT)
    n = image_node(dsec_bin, store, reg).start()
    try:
        ref = reg.push(layout, "team/restart", "1")
        status, info = create_image(n.client, ref)
        assert status == 201, info
        n.proc.kill()  # this test's own node process
        n.proc.wait()
        n.start()  # same state dir, ports and node id
        status, got = n.client.get(info["id"])
        assert status == 200 and got["state"] == "running", got
        assert got["image"] == ref and got["layers"] == info["layers"]
        assert n.client.sh(info["id"], "cat /image-only.txt")["stdout"] == IMAGE_TEXT
        assert pulls(n, ref) == 1
        # Destroy releases the adopted sandbox's mounts like any other.
        status, out = n.client.delete(info["id"])
        assert status == 200 and out["deleted"] is True, out
        n.client.created.remove(info["id"])
        assert_clean(n, allow_layer_mounts=True)
    finally:
        try:
            _finish_node(n)
        finally:
            shutil.rmtree(store, ignore_errors=True)


def test_credentials_come_from_registry_auth_and_wrong_ones_name_the_401(dsec_bin, layout,
                                                                         tmp_path):
    from registry import Registry as AuthRegistry  # test/pylib: htpasswd Basic auth
    with AuthRegistry(tmp_path / "reg", auth=("agent", "s3cret")) as r:
        ref = r.seed(layout, "src", "team/private", dest_tag="1")
        good = r.write_auth_config(tmp_path / "good.json")
        bad = r.write_auth_config(tmp_path / "bad.json", password="wrong")
        stores = [tempfile.mkdtemp(prefix="dsec-image-store-", dir=TMP_ROOT) for _ in range(2)]
        nodes = []
        try:
            ok = image_node(dsec_bin, stores[0], r, "--registry-auth", str(good)).start()
            nodes.append(ok)
            status, info = create_image(ok.client, ref)
            assert status == 201, info
            assert ok.client.sh(info["id"], "cat /image-only.txt")["stdout"] == IMAGE_TEXT
            denied = image_node(dsec_bin, stores[1], r, "--registry-auth", str(bad)).start()
            nodes.append(denied)
            status, body = create_image(denied.client, ref)
            assert 400 <= status < 500, body
            msg = body["error"]["message"]
            assert r.host in msg and "401" in msg, msg
            wait_for(lambda: not denied.check_clean(allow_layer_mounts=True), 15,
                     what="nothing left by the refused create")
        finally:
            try:
                for n in nodes:
                    _finish_node(n)
            finally:
                for s in stores:
                    shutil.rmtree(s, ignore_errors=True)


def test_node_flags_are_checked_at_start(dsec_bin, tmp_path):
    for flags, want in [(["--registry-auth", str(tmp_path / "nope.json")], "--registry-auth"),
                        (["--registry-ca", str(tmp_path / "nope.pem")], "--registry-ca"),
                        (["--registry-mirror", "no-equals-sign"], "--registry-mirror"),
                        (["--insecure-registry", "a/b"], "--insecure-registry"),
                        (["--chunk-cache-mb", "0"], "--chunk-cache-mb")]:
        p = subprocess.run([dsec_bin, "node", "--state-dir", str(tmp_path / "state"), *flags],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and want in p.stderr, (flags, p.stderr)
    p = subprocess.run([dsec_bin, "node", "--help"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "--insecure-registry" in p.stdout and "--no-publish" in p.stdout
