"""The registry of bench/registry_bench.py, made remote: Debian's docker-registry
(CNCF distribution) in its own network namespace behind tc shaping (netem rate
and delay each way, or tbf rate where the kernel lacks sch_netem), and the OCI
images the bench pushes to it (zstd layers, skopeo copy).

With storage="redirect" the registry serves blobs as registries backed by
object storage do (Docker Hub, GHCR, ECR, Harbor on S3): a blob GET answers
307 to the blob's file on a storage server (distribution's `redirect` storage
middleware), here nginx in the same namespace over the registry's own storage
directory, so range reads cost the storage server, not the registry.

Everything it makes, RemoteRegistry.teardown removes: the namespace, the veth
pair, the registry process and nginx.
"""

import hashlib
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request

from layers_bench import log, run

NETNS = "dsec-regbench"
VETH_HOST, VETH_NS = "drb-h", "drb-n"
HOST_IP, REG_IP = "10.231.7.1", "10.231.7.2"
REG = f"{REG_IP}:5000"
STORAGE = f"{REG_IP}:8080"
STORAGE_KINDS = ("registry", "redirect")


# -- the remote registry ----------------------------------------------------------

def rx_bytes():
    with open(f"/sys/class/net/{VETH_HOST}/statistics/rx_bytes") as f:
        return int(f.read())


def _cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RemoteRegistry:
    """docker-registry in its own netns, reached over a shaped veth."""

    def __init__(self, work, rate, delay, storage="registry"):
        if storage not in STORAGE_KINDS:
            raise ValueError(f"storage {storage!r}: one of {', '.join(STORAGE_KINDS)}")
        if storage == "redirect" and not shutil.which("nginx"):
            raise RuntimeError("--storage redirect needs nginx (apt-get install nginx-light)")
        self.work, self.proc, self.nginx, self.storage = work, None, None, storage
        self.teardown()
        run(["ip", "netns", "add", NETNS])
        run(["ip", "link", "add", VETH_HOST, "type", "veth", "peer", "name", VETH_NS])
        run(["ip", "link", "set", VETH_NS, "netns", NETNS])
        run(["ip", "addr", "add", f"{HOST_IP}/30", "dev", VETH_HOST])
        run(["ip", "link", "set", VETH_HOST, "up"])
        ns = ["ip", "netns", "exec", NETNS]
        run(ns + ["ip", "addr", "add", f"{REG_IP}/30", "dev", VETH_NS])
        run(ns + ["ip", "link", "set", VETH_NS, "up"])
        run(ns + ["ip", "link", "set", "lo", "up"])
        # netem gives rate and delay; a kernel without sch_netem (this
        # machine's) gets the rate from tbf and no added delay (shaping notes it).
        self.shaping = f"netem rate {rate} delay {delay} each way"
        for pre, dev in (([], VETH_HOST), (ns, VETH_NS)):
            r = subprocess.run(pre + ["tc", "qdisc", "add", "dev", dev, "root", "netem", "delay",
                                      delay, "rate", rate, "limit", "100000"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if r.returncode != 0:
                run(pre + ["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
                           "burst", "256kb", "latency", "20ms"])
                self.shaping = (f"tbf rate {rate} each way; no added delay: the kernel lacks "
                                f"sch_netem ({r.stdout.decode(errors='replace').strip()})")
        data = os.path.join(work, "registry-data")
        os.makedirs(data, exist_ok=True)
        cfg = os.path.join(work, "registry.yml")
        with open(cfg, "w") as f:
            # The blob descriptor cache as Debian's /etc/docker/registry/config.yml
            # ships it: range requests skip the link-file reads and stats.
            f.write(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  cache:\n"
                    f"    blobdescriptor: inmemory\n  filesystem:\n"
                    f"    rootdirectory: {data}\n  delete:\n    enabled: true\n"
                    f"http:\n  addr: {REG}\n")
            if storage == "redirect":
                f.write(f"middleware:\n  storage:\n    - name: redirect\n      options:\n"
                        f"        baseurl: http://{STORAGE}\n")
        if storage == "redirect":
            self.nginx = self._start_nginx(ns)
        self.log = open(os.path.join(work, "registry.log"), "wb")
        self.proc = subprocess.Popen(ns + ["/usr/bin/docker-registry", "serve", cfg],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://{REG}/v2/", timeout=2).read()
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("docker-registry did not start: see registry.log")
                time.sleep(0.1)

    def _start_nginx(self, ns):
        """nginx over the registry's storage directory: the blob files at the
        paths the redirect names, with ranges (and multi-range) answered
        from the page cache by sendfile."""
        root = os.path.join(self.work, "registry-data")
        conf = os.path.join(self.work, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"daemon off;\nuser root;\nmaster_process on;\nworker_processes auto;\n"
                    f"pid {self.work}/nginx.pid;\nerror_log {self.work}/nginx.log warn;\n"
                    f"events {{ worker_connections 4096; }}\n"
                    f"http {{\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n"
                    f"  keepalive_requests 100000;\n  default_type application/octet-stream;\n"
                    f"  server {{ listen {STORAGE}; root {root}; }}\n}}\n")
        proc = subprocess.Popen(ns + ["nginx", "-c", conf], stdout=subprocess.DEVNULL,
                                stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            try:
                urllib.request.urlopen(f"http://{STORAGE}/", timeout=2).read()
            except urllib.error.HTTPError:
                return proc  # 403/404 of the root: it answers
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("nginx did not start: see nginx.log")
                time.sleep(0.1)
            else:
                return proc

    def teardown(self):
        for attr in ("proc", "nginx"):
            p = getattr(self, attr, None)
            if p:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                setattr(self, attr, None)
        subprocess.run(["ip", "link", "del", VETH_HOST], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", NETNS], stderr=subprocess.DEVNULL)

    def cpu_seconds(self):
        """The registry's CPU time so far (utime + stime; `ip netns exec`
        execs it in place, so the Popen pid is the registry's)."""
        return _cpu_seconds(self.proc.pid)

    def storage_cpu_seconds(self):
        """The storage server's CPU time so far (nginx's master and workers),
        0 when the registry serves its blobs itself."""
        if not self.nginx:
            return 0.0
        pids = [self.nginx.pid] + [int(p) for p in subprocess.run(
            ["pgrep", "-P", str(self.nginx.pid)], stdout=subprocess.PIPE,
            text=True).stdout.split()]
        return sum(_cpu_seconds(p) for p in pids)


    @staticmethod
    def manifest_digest(repo, tag):
        req = urllib.request.Request(
            f"http://{REG}/v2/{repo}/manifests/{tag}", method="HEAD",
            headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.headers["Docker-Content-Digest"]


# -- images -------------------------------------------------------------------------

def _blob(layout, data):
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(layout, "blobs", "sha256", digest), "wb") as f:
        f.write(data)
    return {"digest": "sha256:" + digest, "size": len(data)}


def _zstd_tar(tree):
    """(zstd-compressed tar of tree, sha256 of the tar) with fixed metadata."""
    tar = subprocess.run(["tar", "--sort=name", "--mtime=@1704067200", "--owner=0",
                          "--group=0", "--numeric-owner", "-cf", "-", "-C", tree, "."],
                         stdout=subprocess.PIPE, check=True).stdout
    comp = subprocess.run(["zstd", "-1", "-T2", "-q", "-c"], input=tar,
                          stdout=subprocess.PIPE, check=True).stdout
    return comp, "sha256:" + hashlib.sha256(tar).hexdigest()


def push_image(work, trees, repo, tag):
    """Writes an OCI layout with one zstd layer per tree and copies it to the
    registry with skopeo."""
    layout = os.path.join(work, "layout")
    shutil.rmtree(layout, ignore_errors=True)
    os.makedirs(os.path.join(layout, "blobs", "sha256"))
    layers, diff_ids = [], []
    for tree in trees:
        comp, diff_id = _zstd_tar(tree)
        layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd",
                       **_blob(layout, comp)})
        diff_ids.append(diff_id)
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "WorkingDir": "/"},
              "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    cdesc = {"mediaType": "application/vnd.oci.image.config.v1+json",
             **_blob(layout, json.dumps(config).encode())}
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": cdesc, "layers": layers}
    mdesc = {"mediaType": manifest["mediaType"], **_blob(layout, json.dumps(manifest).encode()),
             "annotations": {"org.opencontainers.image.ref.name": tag}}
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [mdesc]}, f)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        f.write('{"imageLayoutVersion":"1.0.0"}')
    run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{layout}:{tag}",
         f"docker://{REG}/{repo}:{tag}"])
    shutil.rmtree(layout)
