# `dsec layer import`: OCI image layouts and `docker save` archives, built
# here with tarfile/json/hashlib/gzip from the host's static busybox (no
# network), imported into a private store, run in a sandbox on a node that
# uses that store. Checks whiteouts, opaque dirs, hardlinks and layer order
# from inside the sandbox, and that broken inputs fail with exit 1, a message
# naming the fault, no catalog entry and nothing left in <store>/tmp.

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile

import pytest

from dsec_harness import TMP_ROOT, Node, _finish_node

BUSYBOX_BIN = "/bin/busybox"
APPLETS = ["sh", "ls", "cat", "test", "stat", "echo", "wc", "grep"]

MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_TAR = "application/vnd.oci.image.layer.v1.tar"
MT_TAR_GZ = "application/vnd.oci.image.layer.v1.tar+gzip"


def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def make_tar(entries):
    """entries: (kind, path, data-or-target, mode); kind f/d/l/h."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for kind, path, data, mode in entries:
            ti = tarfile.TarInfo(path)
            ti.mode, ti.mtime = mode, 1700000000
            if kind == "f":
                ti.type, ti.size = tarfile.REGTYPE, len(data)
                tf.addfile(ti, io.BytesIO(data))
                continue
            if kind == "d":
                ti.type = tarfile.DIRTYPE
            elif kind == "l":
                ti.type, ti.linkname = tarfile.SYMTYPE, data
            elif kind == "h":
                ti.type, ti.linkname = tarfile.LNKTYPE, data
            tf.addfile(ti)
    return buf.getvalue()


def image_layers():
    """Three layers: a busybox root fs; then whiteouts, an opaque dir and an
    override (gzip); then another override and a dir whiteout (plain tar)."""
    with open(BUSYBOX_BIN, "rb") as f:
        bb = f.read()
    l1 = [("d", d, None, m) for d, m in [("bin", 0o755), ("etc", 0o755), ("tmp", 0o1777),
                                          ("root", 0o700), ("proc", 0o555), ("sys", 0o555),
                                          ("dev", 0o755), ("work", 0o755)]]
    l1 += [("f", "bin/busybox", bb, 0o755), ("h", "bin/bb-hardlink", "bin/busybox", 0o755)]
    l1 += [("l", "bin/" + a, "busybox", 0o777) for a in APPLETS]
    l1 += [("f", "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", 0o644),
           ("f", "etc/group", b"root:x:0:\n", 0o644),
           ("f", "keep.txt", b"lower", 0o644), ("f", "gone.txt", b"secret", 0o644),
           ("f", "top.txt", b"layer 1", 0o644),
           ("d", "d", None, 0o755), ("f", "d/old1", b"old", 0o644),
           ("d", "d/sub", None, 0o755), ("f", "d/sub/old2", b"old", 0o644),
           ("d", "removed_dir", None, 0o755), ("f", "removed_dir/x", b"x", 0o644)]
    l2 = [("f", ".wh.gone.txt", b"", 0o644), ("d", "d", None, 0o755),
          ("f", "d/.wh..wh..opq", b"", 0o644), ("f", "d/new", b"layer 2", 0o644),
          ("f", "top.txt", b"layer 2", 0o644)]
    l3 = [("f", "top.txt", b"layer 3", 0o644), ("f", ".wh.removed_dir", b"", 0o644)]
    return [make_tar(l1), make_tar(l2), make_tar(l3)]


def config_for(raws):
    return json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                       "rootfs": {"type": "layers", "diff_ids": [sha(r) for r in raws]}}).encode()


def write_blob(root, data):
    d = sha(data)
    path = os.path.join(root, "blobs", "sha256", d.split(":")[1])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return {"digest": d, "size": len(data)}


def write_oci_layout(root, raws):
    """An OCI layout whose index.json points at a nested index with an arm64
    and an amd64 manifest; layer 2 is gzip-compressed."""
    os.makedirs(root)
    with open(os.path.join(root, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    layers = []
    for i, raw in enumerate(raws):
        blob = gzip.compress(raw, mtime=0) if i == 1 else raw
        layers.append(dict(write_blob(root, blob), mediaType=MT_TAR_GZ if i == 1 else MT_TAR))
    cfg = dict(write_blob(root, config_for(raws)), mediaType=MT_CONFIG)
    manifest = json.dumps({"schemaVersion": 2, "mediaType": MT_MANIFEST, "config": cfg,
                           "layers": layers}).encode()
    mdesc = dict(write_blob(root, manifest), mediaType=MT_MANIFEST,
                 platform={"os": "linux", "architecture": "amd64"})
    other = {"mediaType": MT_MANIFEST, "digest": "sha256:" + "ab" * 32, "size": 10,
             "platform": {"os": "linux", "architecture": "arm64"}}
    nested = json.dumps({"schemaVersion": 2, "mediaType": MT_INDEX,
                         "manifests": [other, mdesc]}).encode()
    idesc = dict(write_blob(root, nested), mediaType=MT_INDEX)
    with open(os.path.join(root, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": [idesc]}, f)
    return {"layers": layers, "manifest": mdesc}


def write_docker_archive(path, raws, oci_blobs=False):
    """A `docker save` tarball: classic (<id>/layer.tar, <config-hex>.json) or,
    with oci_blobs, docker 25+ style (blobs/sha256/<hex> named by manifest.json,
    <id>/layer.tar kept as a symlink into blobs/)."""
    members, links, names = {}, {}, []
    for raw in raws:
        hexid = hashlib.sha256(raw).hexdigest()
        if oci_blobs:
            members[f"blobs/sha256/{hexid}"] = raw
            links[f"{hexid}/layer.tar"] = f"../blobs/sha256/{hexid}"
            names.append(f"blobs/sha256/{hexid}")
        else:
            members[f"{hexid}/layer.tar"] = raw
            members[f"{hexid}/VERSION"] = b"1.0"
            names.append(f"{hexid}/layer.tar")
    cfg = config_for(raws)
    cfg_hex = hashlib.sha256(cfg).hexdigest()
    cfg_name = f"blobs/sha256/{cfg_hex}" if oci_blobs else cfg_hex + ".json"
    members[cfg_name] = cfg
    members["manifest.json"] = json.dumps([{"Config": cfg_name, "RepoTags": ["t:1"],
                                            "Layers": names}]).encode()
    members["repositories"] = b'{"t":{"1":"x"}}'
    with tarfile.open(path, "w") as tf:
        for name, data in members.items():
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(data), 0o644
            tf.addfile(ti, io.BytesIO(data))
        for name, target in links.items():
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname = tarfile.SYMTYPE, target
            tf.addfile(ti)


# -- fixtures ------------------------------------------------------------------

@pytest.fixture(scope="module")
def work(dsec_bin):
    if not os.access(BUSYBOX_BIN, os.R_OK):
        pytest.fail(f"{BUSYBOX_BIN} missing: install busybox-static (scripts/deps.sh)")
    d = tempfile.mkdtemp(prefix="h1-oci-import-", dir=TMP_ROOT)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def raws():
    return image_layers()


def run_import(dsec_bin, src, store, name, version="1", *extra):
    return subprocess.run([dsec_bin, "layer", "import", src, "--name", name, "--version", version,
                           "--store", store, *extra], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=300)


def catalog_refs(store):
    try:
        with open(os.path.join(store, "catalog.json")) as f:
            return set(json.load(f)["layers"])
    except FileNotFoundError:
        return set()


def tmp_leftovers(store):
    d = os.path.join(store, "tmp")
    return os.listdir(d) if os.path.isdir(d) else []


# -- the happy path: both formats, run in a sandbox -----------------------------

def test_import_oci_layout_and_docker_archive_run(dsec_bin, work, raws):
    store = os.path.join(work, "store")
    oci = os.path.join(work, "oci")
    write_oci_layout(oci, raws)
    docker = os.path.join(work, "image.tar")
    write_docker_archive(docker, raws)

    p = run_import(dsec_bin, oci, store, "test/oci")
    assert p.returncode == 0, p.stderr.decode()
    ref, digest = p.stdout.decode().split()
    assert ref == "test/oci@1" and digest.startswith("sha256:"), p.stdout
    err = p.stderr.decode()
    assert "3 layer(s) from oci-layout" in err and "2 whiteouts" in err \
        and "1 opaque dirs" in err and "1 hardlinks" in err, err

    p = run_import(dsec_bin, docker, store, "test/docker")
    assert p.returncode == 0, p.stderr.decode()
    assert "from docker-archive" in p.stderr.decode(), p.stderr
    # Same tree, same EROFS image: both formats apply layers identically.
    assert p.stdout.decode().split()[1] == digest, (p.stdout, digest)
    docker25 = os.path.join(work, "image-oci-blobs.tar")
    write_docker_archive(docker25, raws, oci_blobs=True)
    p = run_import(dsec_bin, docker25, store, "test/docker25")
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode().split()[1] == digest, (p.stdout, digest)
    assert tmp_leftovers(store) == []

    # Importing the same ref again with other content is a conflict.
    raws2 = raws[:2] + [make_tar([("f", "top.txt", b"other", 0o644)])]
    oci2 = os.path.join(work, "oci2")
    write_oci_layout(oci2, raws2)
    p = run_import(dsec_bin, oci2, store, "test/oci")
    assert p.returncode == 1 and b"[conflict]" in p.stderr, p.stderr
    assert tmp_leftovers(store) == []

    node = Node(dsec_bin, store).start()
    try:
        c = node.client
        for ref in ("test/oci@1", "test/docker@1"):
            sid = c.create_ok([ref], cpu=1, memory_mb=256)
            r = c.sh(sid, "cat /top.txt; echo; cat /keep.txt; echo; ls /d; ls -a /d/ | wc -l")
            assert r["exit_code"] == 0, r
            # upper layers win, lower files stay, the opaque dir holds only layer 2's file
            assert r["stdout"].split("\n")[:4] == ["layer 3", "lower", "new", "3"], r
            r = c.sh(sid, "test -e /gone.txt || echo gone; test -e /removed_dir || echo rmdir;"
                          " test -e /d/old1 || echo old1; test -e /d/sub || echo sub;"
                          " ls -a / | grep -c '^.wh.' ; ls -a /d | grep -c wh;"
                          " stat -c %h /bin/bb-hardlink; stat -c %i /bin/busybox /bin/bb-hardlink")
            lines = r["stdout"].split("\n")
            assert lines[:4] == ["gone", "rmdir", "old1", "sub"], r
            assert lines[4:7] == ["0", "0", "2"], r
            assert lines[7] == lines[8], r  # one inode: the hardlink survived
            c.delete(sid)
    finally:
        _finish_node(node)


# -- broken inputs -----------------------------------------------------------------

def corrupt(kind, work, raws):
    """Builds a broken input; returns (path, words the error must contain)."""
    root = os.path.join(work, "bad-" + kind)
    if kind == "digest-mismatch":
        meta = write_oci_layout(root, raws)
        hexd = meta["layers"][2]["digest"].split(":")[1]
        path = os.path.join(root, "blobs", "sha256", hexd)
        data = bytearray(open(path, "rb").read())
        data[600] ^= 0xFF  # same size, other bytes
        open(path, "wb").write(bytes(data))
        return root, ["digest mismatch", hexd]
    if kind == "missing-blob":
        meta = write_oci_layout(root, raws)
        hexd = meta["layers"][1]["digest"].split(":")[1]
        os.unlink(os.path.join(root, "blobs", "sha256", hexd))
        return root, ["missing", hexd]
    if kind == "missing-index":
        write_oci_layout(root, raws)
        os.unlink(os.path.join(root, "index.json"))
        return root, ["index.json"]
    if kind == "garbage-layer":
        bad = b"\x00not a tar\x00" * 2000
        write_oci_layout(root, [raws[0], bad])
        return root, ["not a tar", "layer 2/2"]
    if kind == "garbage-archive":
        path = root + ".tar"
        with open(path, "wb") as f:
            f.write(b"garbage, not an archive\n" * 2000)
        return path, ["not a tar"]
    if kind == "docker-layer-tampered":
        path = root + ".tar"
        write_docker_archive(path, raws)
        # Rewrite the archive with a layer whose bytes differ from its diff_id.
        with tarfile.open(path) as tf:
            members = {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}
        victim = next(n for n in members if n.endswith("/layer.tar") and members[n] == raws[2])
        members[victim] = make_tar([("f", "x", b"y", 0o644)])
        with tarfile.open(path, "w") as tf:
            for name, data in members.items():
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
        return path, ["digest mismatch"]
    if kind == "docker-path-escape":
        path = root + ".tar"
        manifest = json.dumps([{"Config": "../../../../etc/passwd", "Layers": []}]).encode()
        with tarfile.open(path, "w") as tf:
            ti = tarfile.TarInfo("manifest.json")
            ti.size = len(manifest)
            tf.addfile(ti, io.BytesIO(manifest))
        return path, ["leaves the archive"]
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["digest-mismatch", "missing-blob", "missing-index",
                                  "garbage-layer", "garbage-archive", "docker-layer-tampered",
                                  "docker-path-escape"])
def test_broken_inputs_fail_cleanly(dsec_bin, work, raws, kind):
    store = os.path.join(work, "store-" + kind)
    src, words = corrupt(kind, work, raws)
    p = run_import(dsec_bin, src, store, "test/broken")
    err = p.stderr.decode()
    assert p.returncode == 1, (p.returncode, err)
    assert err.startswith("dsec layer: ") and "[invalid_argument]" in err, err
    for w in words:
        assert w in err, (w, err)
    assert "test/broken@1" not in catalog_refs(store)
    assert tmp_leftovers(store) == [], tmp_leftovers(store)
    assert not os.listdir(os.path.join(store, "blobs")), "a blob was stored"
