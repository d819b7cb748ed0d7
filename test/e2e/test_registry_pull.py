# `dsec layer pull` against a real registry (Debian's docker-registry, started
# here on loopback by test/pylib/registry.py, seeded with skopeo): anonymous
# over plain HTTP, Basic auth from a config.json over TLS with --registry-ca,
# the Bearer token flow against a token server, gzip + zstd + plain layers
# with whiteouts, Docker schema 2 media types, pulls by digest, identical
# blobs fetched once; and each bad input with a clear error, exit 1 and
# nothing in the store: wrong credentials, an untrusted certificate, unknown
# repository and tag, an index without linux/amd64, a tampered blob, the
# registry dying mid-pull.

import ctypes
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from dsec_harness import TMP_ROOT
from registry import (Layer, Registry, ThrottledProxy, make_index_layout, make_layout)

# A base layer needs bin/ at its top (the store checks it).
BIN = {"bin/sh": "not a shell\n"}
FILES_GZ = {**BIN, "etc/os-release": "NAME=test\n", "etc/gone": "will be deleted\n",
            "opt/keep/a": "a\n", "opt/wipe/old": "old\n"}
FILES_ZSTD = {"usr/share/z": "zstd layer\n", "opt/wipe/new": "new\n"}
FILES_PLAIN = {"usr/share/p": "plain layer\n"}
CONFIG = {"Env": ["PATH=/usr/bin:/bin", "LANG=C.UTF-8"], "WorkingDir": "/opt", "User": "1000"}


def three_layers():
    return [Layer(FILES_GZ, "gzip"),
            Layer(FILES_ZSTD, "zstd", whiteouts=["etc/gone"], opaque=["opt/wipe"]),
            Layer(FILES_PLAIN, None)]


@pytest.fixture(scope="module")
def work():
    d = Path(tempfile.mkdtemp(prefix="regpull-", dir=TMP_ROOT))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def plain_reg(work):
    """An anonymous plain-HTTP registry with img:1 (three layers), the same
    as Docker schema 2 (docker:1), an index without linux/amd64 (multi:1)
    and an image with one blob twice (twice:1)."""
    with Registry(work / "plain") as reg:
        reg.img = make_layout(work / "l-img", three_layers(), config=CONFIG)
        reg.push_layout(reg.img["layout"], "1", "team/img")  # byte for byte: plain stays plain
        reg.docker = make_layout(work / "l-docker", [Layer(FILES_GZ, "gzip"),
                                                     Layer(FILES_PLAIN, None)])
        reg.seed(reg.docker["layout"], "1", "team/docker", docker_format=True)
        multi = make_index_layout(work / "l-multi", [("linux", "arm64"), ("linux", "s390x")])
        reg.seed(multi["layout"], "1", "team/multi", all_platforms=True)
        same = Layer({**BIN, "same/file": os.urandom(64 << 10)}, "gzip")
        reg.twice = make_layout(work / "l-twice", [same, Layer({"x": "y"}, "gzip"), same])
        reg.seed(reg.twice["layout"], "1", "team/twice")
        yield reg


def dsec(dsec_bin, *args, timeout=120):
    return subprocess.run([dsec_bin, "layer", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def pull(dsec_bin, store, ref, *extra):
    return dsec(dsec_bin, "pull", ref, "--store", store, "--json", *extra)


def new_store(work, name):
    p = work / "stores" / name
    p.mkdir(parents=True)
    return p


def assert_nothing_made(dsec_bin, store):
    ls = dsec(dsec_bin, "ls", "--store", store, "--json")
    assert ls.returncode == 0, ls.stderr
    assert json.loads(ls.stdout)["layers"] == []
    assert not (store / "images.json").exists()
    tmp = store / "tmp"
    assert not tmp.exists() or os.listdir(tmp) == []
    blobs = store / "blobs"
    assert not blobs.exists() or os.listdir(blobs) == []


def mount_layer(store, digest, target):
    """Mounts a chunked layer (file-backed EROFS, device= its data blob)."""
    image = store / "blobs" / ("sha256-" + digest.split(":")[1] + ".erofs")
    datas = [b for b in os.listdir(store / "blobs") if b.endswith(".blob")]
    assert len(datas) == 1, datas
    libc = ctypes.CDLL(None, use_errno=True)
    opts = f"device={store / 'blobs' / datas[0]}".encode()
    if libc.mount(str(image).encode(), str(target).encode(), b"erofs", 1, opts) != 0:
        raise OSError(ctypes.get_errno(), f"mount {image}")


def umount(target):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.umount2(str(target).encode(), 2)


def test_pull_anonymous_applies_gzip_zstd_plain_layers_and_whiteouts(dsec_bin, work, plain_reg):
    store = new_store(work, "anon")
    ref = f"{plain_reg.host}/team/img:1"
    p = pull(dsec_bin, store, ref, "--insecure-registry", plain_reg.host)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["ref"].startswith(f"img/127.0.0.1-{plain_reg.port}/team/img@sha256-")
    assert out["kind"] == "base" and not out["artifact"]
    assert out["bytes_fetched"] > 0
    assert out["manifest_digest"] == plain_reg.img["manifest_digest"]
    kinds = [l["mediaType"].rsplit(".", 1)[1] for l in plain_reg.img["manifest"]["layers"]]
    assert kinds == ["tar+gzip", "tar+zstd", "tar"]
    # A chunked layer: a metadata image plus one data blob; `dsec layer ls` shows it.
    ls = dsec(dsec_bin, "ls", "--store", store, "--json")
    layers = json.loads(ls.stdout)["layers"]
    assert [l["ref"] for l in layers] == [out["ref"]]
    assert layers[0]["digest"] == out["digest"]
    assert len([b for b in os.listdir(store / "blobs") if b.endswith(".blob")]) == 1
    # The image config became the layer's exec defaults.
    cat = json.loads((store / "catalog.json").read_text())
    entry = cat["layers"][out["ref"]]
    if "config" in entry:
        assert entry["config"]["workdir"] == "/opt"
    # images.json maps the canonical reference to the layer and manifest.
    images = json.loads((store / "images.json").read_text())["images"]
    assert images[ref]["layer"] == out["ref"]
    assert images[ref]["manifest"] == out["manifest_digest"]
    assert os.listdir(store / "tmp") == []
    mnt = work / "mnt-anon"
    mnt.mkdir()
    mount_layer(store, out["digest"], mnt)
    try:
        assert (mnt / "etc/os-release").read_text() == "NAME=test\n"
        assert not (mnt / "etc/gone").exists()           # whiteout in the zstd layer
        assert (mnt / "opt/keep/a").read_text() == "a\n"
        assert sorted(os.listdir(mnt / "opt/wipe")) == ["new"]  # opaque dir
        assert (mnt / "usr/share/z").read_text() == "zstd layer\n"
        assert (mnt / "usr/share/p").read_text() == "plain layer\n"
        assert not any(n.startswith(".wh.") for _, ds, fs in os.walk(mnt) for n in ds + fs)
    finally:
        umount(mnt)

    # Again: the image is there already, nothing but the manifest is fetched.
    again = pull(dsec_bin, store, ref, "--insecure-registry", plain_reg.host)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["digest"] == out["digest"]
    assert json.loads(again.stdout)["bytes_fetched"] < 4096


def test_pull_by_digest_with_name_and_docker_media_types(dsec_bin, work, plain_reg):
    store = new_store(work, "digest")
    # The digest as the registry serves it (skopeo may re-serialise the manifest).
    r = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--raw",
                        f"docker://{plain_reg.host}/team/docker:1"], capture_output=True)
    assert r.returncode == 0, r.stderr
    manifest = json.loads(r.stdout)
    assert manifest["mediaType"] == "application/vnd.docker.distribution.manifest.v2+json"
    import hashlib
    digest = "sha256:" + hashlib.sha256(r.stdout).hexdigest()
    p = pull(dsec_bin, store, f"{plain_reg.host}/team/docker@{digest}", "--name", "team/docker",
             "--version", "1", "--kind", "toolkit", "--insecure-registry", plain_reg.host)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["ref"] == "team/docker@1" and out["kind"] == "toolkit"
    assert out["manifest_digest"] == digest


def test_identical_blobs_are_fetched_once(dsec_bin, work, plain_reg):
    store = new_store(work, "twice")
    same = plain_reg.twice["layer_digests"][0]
    assert plain_reg.twice["layer_digests"][2] == same
    before = plain_reg.blob_gets(same)
    p = pull(dsec_bin, store, f"{plain_reg.host}/team/twice:1", "--insecure-registry",
             plain_reg.host, "--max-concurrent", "3")
    assert p.returncode == 0, p.stderr
    assert plain_reg.blob_gets(same) - before == 1


def test_unknown_repository_and_tag_name_the_reference(dsec_bin, work, plain_reg):
    store = new_store(work, "unknown")
    for ref in (f"{plain_reg.host}/team/nosuch:1", f"{plain_reg.host}/team/img:nosuchtag"):
        p = pull(dsec_bin, store, ref, "--insecure-registry", plain_reg.host)
        assert p.returncode == 1, p.stdout
        assert ref in p.stderr and "[not_found]" in p.stderr, p.stderr
    assert_nothing_made(dsec_bin, store)


def test_index_without_linux_amd64_lists_its_platforms(dsec_bin, work, plain_reg):
    store = new_store(work, "multi")
    p = pull(dsec_bin, store, f"{plain_reg.host}/team/multi:1", "--insecure-registry",
             plain_reg.host)
    assert p.returncode == 1
    assert "no linux/amd64" in p.stderr and "linux/arm64" in p.stderr and "linux/s390x" in p.stderr
    assert_nothing_made(dsec_bin, store)


def test_plain_http_only_for_hosts_named_insecure(dsec_bin, work, plain_reg):
    store = new_store(work, "nohttp")
    p = pull(dsec_bin, store, f"{plain_reg.host}/team/img:1")
    assert p.returncode == 1
    assert plain_reg.host in p.stderr and "[unavailable]" in p.stderr, p.stderr
    assert_nothing_made(dsec_bin, store)


def test_tampered_blob_is_refused_and_nothing_is_kept(dsec_bin, work):
    with Registry(work / "tamper") as reg:
        img = make_layout(work / "l-tamper", [Layer({**BIN, "a": "a" * 1000}, None),
                                               Layer({"b": "b" * 1000}, None)])
        reg.push_layout(img["layout"], "1", "t/img")
        victim = reg.blob_data_path(img["layer_digests"][1])
        data = bytearray(victim.read_bytes())
        data[600] ^= 0xFF  # same size, other bytes
        victim.write_bytes(bytes(data))
        store = new_store(work, "tamper")
        p = pull(dsec_bin, store, f"{reg.host}/t/img:1", "--insecure-registry", reg.host)
        assert p.returncode == 1
        assert "digest mismatch" in p.stderr and img["layer_digests"][1] in p.stderr, p.stderr
        assert_nothing_made(dsec_bin, store)


def test_basic_auth_over_tls_with_registry_ca(dsec_bin, work):
    with Registry(work / "basic", auth=("alice", "s3cret"), tls=True) as reg:
        img = make_layout(work / "l-basic", [Layer(FILES_GZ, "gzip")])
        reg.seed(img["layout"], "1", "private/img")
        ref = f"{reg.host}/private/img:1"
        good = reg.write_auth_config(work / "basic-good.json")
        bad = reg.write_auth_config(work / "basic-bad.json", "alice", "wrong", style="userpass")

        store = new_store(work, "basic-ok")
        p = pull(dsec_bin, store, ref, "--registry-auth", good, "--registry-ca", reg.ca_file)
        assert p.returncode == 0, p.stderr

        # $DOCKER_CONFIG is read when --registry-auth is not given.
        cfgdir = work / "dockercfg"
        cfgdir.mkdir()
        shutil.copy(good, cfgdir / "config.json")
        store = new_store(work, "basic-env")
        env = dict(os.environ, DOCKER_CONFIG=str(cfgdir))
        p = subprocess.run([dsec_bin, "layer", "pull", ref, "--store", store, "--registry-ca",
                            reg.ca_file], capture_output=True, text=True, env=env, timeout=120)
        assert p.returncode == 0, p.stderr

        store = new_store(work, "basic-wrong")
        p = pull(dsec_bin, store, ref, "--registry-auth", bad, "--registry-ca", reg.ca_file)
        assert p.returncode == 1
        assert reg.host in p.stderr and "401" in p.stderr and "alice" in p.stderr, p.stderr
        assert_nothing_made(dsec_bin, store)

        store = new_store(work, "basic-anon")
        p = pull(dsec_bin, store, ref, "--registry-ca", reg.ca_file)
        assert p.returncode == 1
        assert reg.host in p.stderr and "401" in p.stderr and "credentials" in p.stderr
        assert_nothing_made(dsec_bin, store)

        store = new_store(work, "basic-noca")
        p = pull(dsec_bin, store, ref, "--registry-auth", good)
        assert p.returncode == 1
        assert "certificate" in p.stderr and reg.host in p.stderr, p.stderr
        assert_nothing_made(dsec_bin, store)


def test_bearer_token_flow(dsec_bin, work):
    with Registry(work / "token", token=("bob", "tok-pw")) as reg:
        img = make_layout(work / "l-token", [Layer(FILES_GZ, "gzip"), Layer(FILES_PLAIN, None)])
        reg.seed(img["layout"], "1", "tok/img")
        ref = f"{reg.host}/tok/img:1"
        good = reg.write_auth_config(work / "tok-good.json")
        bad = reg.write_auth_config(work / "tok-bad.json", "bob", "nope")
        before = reg._token_server.requests

        store = new_store(work, "tok-ok")
        p = pull(dsec_bin, store, ref, "--registry-auth", good, "--insecure-registry", reg.host)
        assert p.returncode == 0, p.stderr
        # One token for the pull scope, reused for the manifest, config and blobs.
        assert reg._token_server.requests - before == 1

        store = new_store(work, "tok-bad")
        p = pull(dsec_bin, store, ref, "--registry-auth", bad, "--insecure-registry", reg.host)
        assert p.returncode == 1
        assert reg.host in p.stderr and "401" in p.stderr and "bob" in p.stderr, p.stderr
        assert_nothing_made(dsec_bin, store)

        # Anonymous: the token grants nothing; the registry's 401 names the reference.
        store = new_store(work, "tok-anon")
        p = pull(dsec_bin, store, ref, "--insecure-registry", reg.host)
        assert p.returncode == 1
        assert "tok/img" in p.stderr and "401" in p.stderr, p.stderr
        assert_nothing_made(dsec_bin, store)


def test_registry_dying_mid_pull_leaves_no_partial_layer(dsec_bin, work):
    with Registry(work / "dies") as reg:
        img = make_layout(work / "l-big", [Layer({**BIN, f"big/{i}": os.urandom(4 << 20)}, None)
                                           for i in range(3)])
        reg.seed(img["layout"], "1", "big/img")
        # 4 MB/s through the proxy: the 12 MB pull takes ~3 s; the registry dies after 1.
        with ThrottledProxy(reg.host, 4 << 20) as proxy:
            store = new_store(work, "dies")
            killer = threading.Timer(1.0, reg.kill)
            killer.start()
            try:
                t0 = time.monotonic()
                p = pull(dsec_bin, store, f"{proxy.host}/big/img:1", "--insecure-registry",
                         proxy.host, "--max-concurrent", "1")
            finally:
                killer.cancel()
            assert p.returncode == 1, p.stdout
            assert time.monotonic() - t0 < 60
            assert proxy.host in p.stderr and "big/img" in p.stderr, p.stderr
            assert_nothing_made(dsec_bin, store)


def test_cli_usage(dsec_bin, work):
    h = dsec(dsec_bin, "pull", "--help")
    assert h.returncode == 0 and "dsec layer pull" in h.stdout and "--registry-ca" in h.stdout
    assert "dsec layer push LAYER_REF" in h.stdout
    store = new_store(work, "usage")
    for args, says in ((["pull"], "exactly one image reference"),
                       (["pull", "a.io/x:1", "--name", "n"], "--name and --version together"),
                       (["pull", "a.io/x:1", "--chunked"], "--chunked does not apply"),
                       (["push", "a@1"], "LAYER_REF REGISTRY/REPO:TAG")):
        p = dsec(dsec_bin, *args, "--store", store)
        assert p.returncode == 2 and says in p.stderr, (args, p.stderr)
    for args, says in ((["pull", "Bad/Ref"], "repository"),
                       (["pull", "a.io/x:1", "--registry-mirror", "a.io"], "--registry-mirror"),
                       (["pull", "a.io/x:1", "--max-concurrent", "0"], "--max-concurrent"),
                       (["pull", "a.io/x:1", "--registry-auth", "/nonexistent.json"],
                        "/nonexistent.json"),
                       (["pull", "a.io/x:1", "--registry-ca", "/nonexistent.pem"],
                        "/nonexistent.pem")):
        p = dsec(dsec_bin, *args, "--store", store)
        assert p.returncode == 1 and says in p.stderr, (args, p.stderr)
    assert_nothing_made(dsec_bin, store)
