# A real registry for the e2e tests of images: Debian's docker-registry
# (CNCF distribution 2.8) on a free loopback port, plain HTTP, its storage
# and access log in a temp dir; images seeded with skopeo from OCI layouts
# made here of the host's static busybox (no network).

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import urllib.request

from dsec_harness import TMP_ROOT, free_port

REGISTRY_BIN = "/usr/bin/docker-registry"
BUSYBOX_BIN = "/bin/busybox"
APPLETS = ["sh", "ls", "cat", "echo", "test", "sleep", "true"]


def _sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _tar(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for kind, path, data, mode in entries:
            ti = tarfile.TarInfo(path)
            ti.mode, ti.mtime = mode, 1700000000
            if kind == "f":
                ti.type, ti.size = tarfile.REGTYPE, len(data)
                tf.addfile(ti, io.BytesIO(data))
            elif kind == "d":
                ti.type = tarfile.DIRTYPE
                tf.addfile(ti)
            else:
                ti.type, ti.linkname = tarfile.SYMTYPE, data
                tf.addfile(ti)
    return buf.getvalue()


def make_image_layout(dest, files):
    """An OCI layout at `dest` (one gzip layer: a busybox root fs plus
    `files`, name -> text) with no tag yet; returns its path."""
    with open(BUSYBOX_BIN, "rb") as f:
        bb = f.read()
    entries = [("d", d, None, 0o755) for d in ("bin", "etc", "tmp", "root", "proc", "sys",
                                                 "dev", "work")]
    entries += [("f", "bin/busybox", bb, 0o755)]
    entries += [("l", "bin/" + a, "busybox", 0o777) for a in APPLETS]
    entries += [("f", "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", 0o644)]
    entries += [("f", name, text.encode(), 0o644) for name, text in files.items()]
    raw = _tar(entries)
    layer = gzip.compress(raw, mtime=0)
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Env": ["PATH=/bin"], "WorkingDir": "/"},
                         "rootfs": {"type": "layers", "diff_ids": [_sha(raw)]}}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": _sha(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _sha(layer), "size": len(layer)}]}).encode()
    blobs = os.path.join(dest, "blobs", "sha256")
    os.makedirs(blobs, exist_ok=True)
    for data in (layer, config, manifest):
        with open(os.path.join(blobs, _sha(data)[7:]), "wb") as f:
            f.write(data)
    with open(os.path.join(dest, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    with open(os.path.join(dest, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": _sha(manifest), "size": len(manifest),
            "annotations": {"org.opencontainers.image.ref.name": "src"}}]}, f)
    return str(dest)


class Registry:
    """docker-registry on 127.0.0.1:<free port>, plain HTTP, no auth."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="dsec-registry-", dir=TMP_ROOT)
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.log_path = os.path.join(self.dir, "registry.log")
        self.proc = None

    def start(self):
        cfg = os.path.join(self.dir, "config.yml")
        with open(cfg, "w") as f:
            f.write("version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\n"
                    f"storage:\n  filesystem:\n    rootdirectory: {self.dir}/data\n"
                    f"http:\n  addr: {self.host}\n")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([REGISTRY_BIN, "serve", cfg], stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise AssertionError(f"docker-registry did not answer on {self.host}:\n{self.log_tail()}")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def remove(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def push(self, layout, repo, tag):
        """Copies the layout's image to repo:tag; returns the reference."""
        ref = f"{self.host}/{repo}:{tag}"
        p = subprocess.run(["skopeo", "copy", "--dest-tls-verify=false", f"oci:{layout}:src",
                            f"docker://{ref}"], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, f"skopeo copy to {ref}: {p.stderr}"
        return ref

    def log_tail(self, lines=40):
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])

    def blob_gets(self, repo):
        """GETs of `repo`'s blobs the registry answered so far (its access log)."""
        want = f'"GET /v2/{repo}/blobs/sha256:'
        with open(self.log_path, errors="replace") as f:
            return sum(1 for line in f if want in line)
