"""The registry of bench/registry_bench.py, made remote: Debian's docker-registry
(CNCF distribution) in its own network namespace behind tc shaping (netem rate
and delay each way, or tbf rate where the kernel lacks sch_netem), and the OCI
images the bench pushes to it (zstd layers, skopeo copy).

Everything it makes, RemoteRegistry.teardown removes: the namespace, the veth
pair and the registry process.
"""

import hashlib
import json
import os
import shutil
import subprocess
import time
import urllib.request

from layers_bench import log, run

NETNS = "dsec-regbench"
VETH_HOST, VETH_NS = "drb-h", "drb-n"
HOST_IP, REG_IP = "10.231.7.1", "10.231.7.2"
REG = f"{REG_IP}:5000"


# -- the remote registry ----------------------------------------------------------

def rx_bytes():
    with open(f"/sys/class/net/{VETH_HOST}/statistics/rx_bytes") as f:
        return int(f.read())


class RemoteRegistry:
    """docker-registry in its own netns, reached over a shaped veth."""

    def __init__(self, work, rate, delay):
        self.work, self.proc = work, None
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
        storage = os.path.join(work, "registry-data")
        os.makedirs(storage, exist_ok=True)
        cfg = os.path.join(work, "registry.yml")
        with open(cfg, "w") as f:
            # The blob descriptor cache as Debian's /etc/docker/registry/config.yml
            # ships it: range requests skip the link-file reads and stats.
            f.write(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  cache:\n"
                    f"    blobdescriptor: inmemory\n  filesystem:\n"
                    f"    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
                    f"http:\n  addr: {REG}\n")
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

    def teardown(self):
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None
        subprocess.run(["ip", "link", "del", VETH_HOST], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", NETNS], stderr=subprocess.DEVNULL)

    def cpu_seconds(self):
        """The registry's CPU time so far (utime + stime; `ip netns exec`
        execs it in place, so the Popen pid is the registry's)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

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
