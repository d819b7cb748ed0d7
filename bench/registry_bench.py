#!/usr/bin/env python3
"""Images from a registry, DSec's experiment: on-demand reads against full
pulls, with the registry remote (its own network namespace behind tc shaping,
1 Gbit/s and 1 ms each way by default).

M images (each >= 200 MB: a busybox layer they all share plus a python-like
tree of thousands of files of mixed sizes, random incompressible bytes, zstd
layers) are pushed to a real registry (Debian's docker-registry, CNCF
distribution). A burst of N sandboxes is created from them through a real
`dsec node` over REST (`{"image": REF}` or the layer a pull made), each
sandbox reading a random 4-13 % (by bytes) of its image's files, whole files,
in one of two read patterns (--patterns, each run side by side):

  random    each sandbox reads its own random files: sandboxes of one image
            share almost nothing (the worst case for on-demand reads).
  shared    each image has one order of its files (what its task touches
            first); each sandbox reads the first 4-13 % of it, so sandboxes
            of one image read largely the same files, as sandboxes of a task
            image that run the same harness do.

Modes, each on a fresh node (empty store, empty chunk cache; the registry's
data blobs warm, read before each mode, or with --cold-registry the page
cache dropped before each, the registry's too):

  convert   pull + convert on this node: the first create of each image pulls
            its layers whole and builds the EROFS layer here (--no-publish,
            so nothing is shared; run before any conversion is published);
            later creates wait on that one pull.
  full      full pull of the converted layer before the burst: `dsec layer
            pull` of the conversion another node published (metadata image
            and whole data blob; 4 images at a time), then the burst over the
            local layers.
  ondemand  the node finds the published conversion, fetches only its
            metadata image and reads data chunks when sandboxes touch them
            (the lazy blob daemon, HTTP range requests, chunk cache).

Before the modes a publisher node converts each image once and publishes it
(timed as publish_s). Also measured: on a cold node, create -> first exec of
an image converted elsewhere, and the bytes a sandbox reading 5 % of the
image makes the node fetch.

--storage redirect: the registry redirects blob reads to a storage server
(nginx over its storage directory, in its namespace), as registries backed by
object storage do; the node then reads a blob's later ranges straight from
storage (per_request.past_registry), and storage_cpu_s is nginx's CPU.

Bytes fetched from the registry = rx bytes of the host side of the veth to the
registry's namespace (everything that crossed the wire, headers included).
Bytes written locally = write-sector delta of the disk (noisy: other writers)
and `du` of the node's state and store (exact).

    python3 bench/registry_bench.py [--quick] [--n 64,256] [--modes convert,full,ondemand]
Needs root, docker-registry, iproute2 (tc); writes bench/results/registry-<date>.json
(+ .png with matplotlib) and removes everything it created.
"""

import argparse
import concurrent.futures as cf
import datetime
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Rest  # noqa: E402
from layers_bench import (ROOT, Node, busybox_tree, disk_of, disk_sectors,  # noqa: E402
                          drop_caches, du_bytes, log, make_image_tree, pick_reads, run,
                          sh_cat, unmount_under)
from remote_registry import REG, STORAGE_KINDS, RemoteRegistry, push_image, rx_bytes  # noqa: E402


# -- bursts ---------------------------------------------------------------------------

def burst(rest, specs_and_reads, workers, t0):
    """Creates each spec and reads its files, `workers` at a time. Returns
    (ids, done times since t0, failures)."""
    local = {}

    def one(job):
        spec, paths = job
        c = local.setdefault(threading.get_ident(), Rest(rest, 900))
        sb = c.call("POST", "/v1/sandboxes", {**spec, "cpu": 0.5, "memory_mb": 256})
        r = c.call("POST", f"/v1/sandboxes/{sb['id']}/exec",
                   {"cmd": sh_cat(paths), "timeout_s": 900})
        ok = r.get("exit_code") == 0
        return sb["id"], time.monotonic() - t0, None if ok else (r.get("stderr") or "")[:300]

    ids, done, fails = [], [], []
    with cf.ThreadPoolExecutor(workers) as ex:
        for fut in cf.as_completed([ex.submit(one, j) for j in specs_and_reads]):
            try:
                sid, t, err = fut.result()
                ids.append(sid)
                done.append(t)
                if err is not None:
                    fails.append(err)
            except Exception as e:  # noqa: BLE001 - counted and reported
                fails.append(str(e)[:300])
    return ids, done, fails


def lazy_metrics(rest):
    """The node's dsec_lazy_* counters (range requests, chunks, fetch time)."""
    text = urllib.request.urlopen(f"http://{rest}/metrics", timeout=30).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("dsec_lazy_") and "_total" in line:
            name, value = line.split("{", 1)[0], line.rsplit(" ", 1)[1]
            out[name[len("dsec_lazy_"):-len("_total")]] = float(value)
    return out


def http_requests(state):
    """The HTTP requests the lazy blob daemon sent and the range requests
    they carried (several when misses on one blob queued together), from its
    batch.json; empty for a daemon that does not batch."""
    try:
        with open(os.path.join(state, "lazy-cache", "batch.json")) as f:
            b = json.load(f)
        return {"http_requests": b["requests"], "ranges_sent": b["ranges"]}
    except (OSError, ValueError, KeyError):
        return {}


class Bench:
    def __init__(self, a):
        self.a = a
        self.work = a.work
        self.images = []   # [{"ref", "repo", "files", "bytes", "manifest"}]
        self.reg = None
        self.disk = None
        self.node_flags = ["--insecure-registry", REG]
        if a.chunk_cache_mb:
            self.node_flags += ["--chunk-cache-mb", str(a.chunk_cache_mb)]
        self.published_s = None  # set when kept images were published by an earlier run

    def setup(self):
        a = self.a
        saved = os.path.join(self.work, "images.json")
        if a.reuse_images:
            # Images pushed by an earlier --prepare-images run: the registry's
            # storage is kept, so only the registry starts again.
            with open(saved) as f:
                kept = json.load(f)
            if kept["params"] != [a.images, a.image_mb, a.files, a.seed]:
                sys.exit(f"registry_bench: {saved} holds other images: {kept['params']}")
            self.images = kept["images"]
            self.published_s = kept.get("published_s")
            self.disk = disk_of(self.work)
            t = time.monotonic()
            self.reg = RemoteRegistry(self.work, a.rate, a.delay, a.storage)
            self.setup_s = time.monotonic() - t
            return
        if os.path.exists(self.work):
            unmount_under(self.work)
            shutil.rmtree(self.work)
        os.makedirs(self.work)
        self.disk = disk_of(self.work)
        self.reg = RemoteRegistry(self.work, a.rate, a.delay, a.storage)
        t = time.monotonic()
        bb = os.path.join(self.work, "busybox")
        os.makedirs(bb)
        busybox_tree(bb)
        rng = random.Random(a.seed)
        for k in range(a.images):
            tree = os.path.join(self.work, f"img{k}")
            files = make_image_tree(tree, rng, a.files, a.image_mb << 20)
            repo = f"bench/py{k}"
            push_image(self.work, [bb, tree], repo, "1")
            shutil.rmtree(tree)
            img = {"ref": f"{REG}/{repo}:1", "repo": repo, "files": files,
                   "bytes": sum(s for _, s in files),
                   "manifest": RemoteRegistry.manifest_digest(repo, "1")}
            self.images.append(img)
            log(f"image {img['ref']}: {len(files)} files, {img['bytes'] >> 20} MiB")
        shutil.rmtree(bb)
        self.setup_s = time.monotonic() - t
        with open(saved, "w") as f:
            json.dump({"params": [a.images, a.image_mb, a.files, a.seed],
                       "images": self.images}, f)

    def cold_start(self):
        """Before each measure. A fresh node's store and chunk cache are new
        files, so no page cache of the node's own survives anyway; what
        drop_caches also drops is the registry's. With --cold-registry it
        does (every range request then reads distribution's 4 MiB buffer
        from the host's shared disk); by default the registry's data blobs
        stay warm, as a registry serving a cluster keeps the images in use,
        and its cache is not the node's. They are read again before each
        measure: with many images the mode before (a full pull writing every
        image to the node's store) pushes them out of a small host's memory."""
        if self.a.cold_registry:
            drop_caches()
        else:
            os.sync()
            self.warm_registry()

    def warm_registry(self):
        """Reads each published conversion's data blob once (registry side)."""
        blobs = os.path.join(self.work, "registry-data", "docker", "registry", "v2", "blobs",
                             "sha256")
        t, total = time.monotonic(), 0
        for img in self.images:
            conv = img["manifest"].replace("sha256:", "sha256-") + ".dsec"
            req = urllib.request.Request(
                f"http://{REG}/v2/{img['repo']}/manifests/{conv}",
                headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    m = json.load(r)
            except OSError:
                continue  # not published yet
            for layer in m.get("layers", []):
                hexd = layer["digest"].split(":", 1)[1]
                with open(os.path.join(blobs, hexd[:2], hexd, "data"), "rb") as f:
                    while chunk := f.read(8 << 20):
                        total += len(chunk)
        log(f"registry warmed: {total >> 20} MiB of conversions read in "
            f"{time.monotonic() - t:.1f}s")

    def node(self, name, extra=()):
        state = os.path.join(self.work, name, "state")
        store = os.path.join(self.work, name, "store")
        os.makedirs(store)
        return Node(self.a.dsec_bin, state, store, name, [*self.node_flags, *extra]), store

    def publish(self):
        """A publisher node converts each image once and publishes it."""
        node, _ = self.node("publisher")
        t0 = time.monotonic()
        ids = []
        try:
            for img in self.images:
                sb = Rest(node.rest, 900).call("POST", "/v1/sandboxes", {"image": img["ref"]})
                ids.append(sb["id"])
            return round(time.monotonic() - t0, 3)
        finally:
            node.stop(ids)
            shutil.rmtree(os.path.join(self.work, "publisher"), ignore_errors=True)

    def jobs(self, n, seed, pattern):
        rng = random.Random(seed)
        out = []
        for i in range(n):
            k = i % len(self.images)
            files = self.images[k]["files"]
            if pattern == "shared":
                paths, got = shared_reads(rng, files, random.Random(self.a.seed * 7919 + k))
            else:
                paths, got = pick_reads(rng, files)
            out.append((k, paths, got))
        return out

    def run_mode(self, mode, n, pattern):
        a = self.a
        jobs = self.jobs(n, a.seed * 1000 + n, pattern)
        name = f"{mode}-n{n}-{pattern}"
        load = [round(x, 2) for x in os.getloadavg()]
        self.cold_start()
        rx0 = rx_bytes()
        cpu0, scpu0 = self.reg.cpu_seconds(), self.reg.storage_cpu_seconds()
        rd0, wr0 = disk_sectors(self.disk)
        extra = ["--no-publish"] if mode == "convert" else []
        node, store = self.node(name, extra)
        ids, prep_s = [], 0.0
        try:
            t0 = time.monotonic()
            if mode == "full":
                def pull(img):
                    conv = img["manifest"].replace("sha256:", "sha256-") + ".dsec"
                    out = subprocess.run([a.dsec_bin, "layer", "pull",
                                          f"{REG}/{img['repo']}:{conv}", "--store", store,
                                          "--insecure-registry", REG, "--json"],
                                         stdout=subprocess.PIPE, check=True).stdout
                    return json.loads(out)["ref"]
                with cf.ThreadPoolExecutor(4) as ex:
                    refs = list(ex.map(pull, self.images))
                prep_s = time.monotonic() - t0
                spec = lambda k: {"layers": [refs[k]]}  # noqa: E731
            else:
                spec = lambda k: {"image": self.images[k]["ref"]}  # noqa: E731
            ids, done, fails = burst(node.rest, [(spec(k), p) for k, p, _ in jobs],
                                     a.workers, t0)
            completion = max(done) if done else float("nan")
            written_local = du_bytes(os.path.join(self.work, name))
            lazy = lazy_metrics(node.rest)
            lazy.update(http_requests(os.path.join(self.work, name, "state")))
        finally:
            node.stop(ids)
        os.sync()
        rd1, wr1 = disk_sectors(self.disk)
        fetched = rx_bytes() - rx0
        registry_cpu = self.reg.cpu_seconds() - cpu0
        storage_cpu = self.reg.storage_cpu_seconds() - scpu0
        shutil.rmtree(os.path.join(self.work, name), ignore_errors=True)
        res = {
            "mode": mode, "n": n, "pattern": pattern, "completion_s": round(completion, 3), "loadavg_before": load,
            "prepare_s": round(prep_s, 3), "failures": len(fails), "first_failures": fails[:3],
            "registry_bytes": fetched, "local_bytes_du": written_local,
            "disk_write_bytes": (wr1 - wr0) * 512, "disk_read_bytes": (rd1 - rd0) * 512,
            "bytes_read_by_sandboxes": sum(g for _, _, g in jobs),
            "lazy": lazy, "registry_cpu_s": round(registry_cpu, 2),
            "storage_cpu_s": round(storage_cpu, 2),
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        }
        # Where an on-demand burst's time goes: requests per sandbox, bytes
        # per request, how long a reader waited on each, the registry's CPU
        # per request.
        reqs = lazy.get("range_requests", 0)
        http = lazy.get("http_requests", reqs)
        if reqs:
            res["per_request"] = {
                "requests_per_sandbox": round(reqs / n, 1),
                "http_requests_per_sandbox": round(http / n, 1),
                "kib_per_request": round(lazy.get("bytes_fetched", 0) / reqs / 1024, 1),
                "wait_ms": round(1000 * lazy.get("fetch_seconds", 0) / reqs, 1),
                "registry_cpu_ms": round(1000 * registry_cpu / max(http, 1), 2),
                "storage_cpu_ms": round(1000 * storage_cpu / max(http, 1), 2),
                "past_registry": lazy.get("storage_reads", 0),
            }
        log(json.dumps(res))
        return res

    def cold_first_exec(self):
        """A fresh node: create -> first exec from an image converted elsewhere,
        then one sandbox reading 5 % of the image: bytes fetched."""
        img = self.images[0]
        self.cold_start()
        node, _ = self.node("cold")
        ids = []
        try:
            rx0 = rx_bytes()
            c = Rest(node.rest, 900)
            t0 = time.monotonic()
            sb = c.call("POST", "/v1/sandboxes", {"image": img["ref"]})
            ids.append(sb["id"])
            r = c.call("POST", f"/v1/sandboxes/{sb['id']}/exec", {"cmd": ["/bin/true"]})
            first_exec_s = time.monotonic() - t0
            rx1 = rx_bytes()
            rng = random.Random(self.a.seed)
            files = list(img["files"])
            rng.shuffle(files)
            paths, got = [], 0
            for p, s in files:
                if got >= 0.05 * img["bytes"]:
                    break
                paths.append(p)
                got += s
            r = c.call("POST", f"/v1/sandboxes/{sb['id']}/exec",
                       {"cmd": sh_cat(paths), "timeout_s": 600})
            ok = r.get("exit_code") == 0
            rx2 = rx_bytes()
            lazy = lazy_metrics(node.rest)
        finally:
            node.stop(ids)
            shutil.rmtree(os.path.join(self.work, "cold"), ignore_errors=True)
        return {"create_first_exec_s": round(first_exec_s, 3),
                "bytes_fetched_to_first_exec": rx1 - rx0,
                "read_5pct_ok": ok, "bytes_read": got,
                "bytes_fetched_for_5pct_read": rx2 - rx0,
                "image_bytes": img["bytes"],
                "fetched_fraction": round((rx2 - rx0) / img["bytes"], 4),
                "range_requests": lazy.get("range_requests"),
                "loadavg": [round(x, 2) for x in os.getloadavg()]}


NOTES = [
    "The registry is Debian's docker-registry (CNCF distribution 2.8) in its own network "
    "namespace; both veth ends are shaped with tc (netem where the kernel has it, else tbf: see "
    "shaping), so every "
    "byte a node fetches crosses a 'remote' link. registry_bytes counts what crossed it.",
    "One node per mode, fresh each time (empty store and chunk cache; the registry's data blobs "
    "warm unless params.cold_registry, then the page cache is dropped before each mode): "
    "'each node pulls each image' is this node's share of a cluster-wide burst.",
    "convert: the node pulls the image layers (zstd) and builds its chunked EROFS layer itself, "
    "publishing nothing. full: `dsec layer pull` of the conversion another node published "
    "(metadata image + whole data blob) before the burst. ondemand: the node fetches the "
    "published metadata image and reads data chunks by HTTP range requests through the lazy "
    "blob daemon as sandboxes touch them.",
    "Per on-demand result, per_request: range requests per sandbox (a stretch of chunks is one), "
    "HTTP requests per sandbox (several range requests on one blob that queued behind its "
    "request in flight go out as one multi-range request), KiB per range request, the "
    "readers' wait per range request and the registry's CPU per HTTP request (from /proc); "
    "distribution reads every range through a 4 MiB buffered reader, so a request costs it about "
    "the same for 16 KiB as for 1 MiB (bench/range_latency.py --kb 16,256,1024).",
    "Each sandbox reads a random 4-13 % of its image's bytes (whole files), as in the DSec "
    "report; workers creates+reads are in flight at once. pattern random: its own random "
    "files; pattern shared: the first 4-13 % of one per-image order of the files.",
]


def shared_reads(rng, files, image_rng):
    """The first 4-13 % (by bytes, rng) of the image's one order of its files
    (image_rng, the same for every sandbox of the image)."""
    order = list(range(len(files)))
    image_rng.shuffle(order)
    want = rng.uniform(0.04, 0.13) * sum(s for _, s in files)
    out, got = [], 0
    for i in order:
        if got >= want:
            break
        out.append(files[i][0])
        got += files[i][1]
    return out, got


def summarize(results):
    out = {}
    for n, pattern in sorted({(r["n"], r.get("pattern", "random")) for r in results}):
        by = {r["mode"]: r for r in results
              if r["n"] == n and r.get("pattern", "random") == pattern}
        s = {}
        od = by.get("ondemand")
        for base in ("full", "convert"):
            b = by.get(base)
            if od and b and od["completion_s"] > 0:
                s[f"speedup_ondemand_vs_{base}"] = round(b["completion_s"] / od["completion_s"], 2)
                s[f"fetch_reduction_vs_{base}"] = round(
                    1 - od["registry_bytes"] / max(1, b["registry_bytes"]), 3)
                s[f"write_reduction_vs_{base}_du"] = round(
                    1 - od["local_bytes_du"] / max(1, b["local_bytes_du"]), 3)
        if od:
            s["ondemand_range_requests"] = od["lazy"].get("range_requests")
            s["ondemand_registry_cpu_s"] = od.get("registry_cpu_s")
        out[f"{n}-{pattern}"] = s
    return out


def plot(report, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed (apt-get install python3-matplotlib): no plot")
        return None
    res = report["results"]
    ns = sorted({(r["n"], r.get("pattern", "random")) for r in res})
    modes = [m for m in ("convert", "full", "ondemand") if any(r["mode"] == m for r in res)]
    panels = (("completion_s", "completion time (s)", 1),
              ("registry_bytes", "fetched from registry (MiB)", 2**20),
              ("local_bytes_du", "written locally (MiB)", 2**20))
    fig, axes = plt.subplots(1, len(panels), figsize=(14, 4))
    w = 0.8 / max(1, len(modes))
    for i, m in enumerate(modes):
        xs = [j + i * w for j in range(len(ns))]
        for ax, (key, _, div) in zip(axes, panels):
            vals = [next((r[key] for r in res if (r["n"], r.get("pattern", "random")) == n
                          and r["mode"] == m), 0) / div for n in ns]
            ax.bar(xs, vals, w, label=m)
    for ax, (_, title, _) in zip(axes, panels):
        ax.set_xticks([j + w * (len(modes) - 1) / 2 for j in range(len(ns))])
        ax.set_xticklabels([f"N={n} {pat}" for n, pat in ns])
        ax.set_title(title)
        ax.legend()
    fig.suptitle("images from a shaped registry: on-demand vs full pull vs pull+convert per node")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dsec-bin", default=os.path.join(ROOT, "build/cmd/dsec"))
    p.add_argument("--work", default="/var/tmp/dsec-registry-bench")
    p.add_argument("--n", default="64,256", help="burst sizes, comma-separated")
    p.add_argument("--modes", default="convert,full,ondemand")
    p.add_argument("--images", type=int, default=4)
    p.add_argument("--image-mb", type=int, default=200)
    p.add_argument("--files", type=int, default=3000)
    p.add_argument("--workers", type=int, default=16, help="creates+reads in flight")
    p.add_argument("--rate", default="1gbit", help="tc netem rate of the registry link")
    p.add_argument("--delay", default="1ms", help="tc netem delay, each way")
    p.add_argument("--storage", default="registry", choices=STORAGE_KINDS,
                   help="registry: the registry serves blob bytes itself (filesystem "
                        "storage); redirect: it redirects blob reads to a storage server "
                        "(nginx over its storage), as registries on object storage do")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--patterns", default="random,shared",
                   help="read patterns, comma-separated: random, shared (see above)")
    p.add_argument("--quick", action="store_true",
                   help="2 images of 32 MiB, 400 files, N=16: a smoke run")
    p.add_argument("--cold-registry", action="store_true",
                   help="drop the page cache (the registry's too) before each measure "
                        "(the default keeps the registry's data blobs warm: see cold_start)")
    p.add_argument("--chunk-cache-mb", type=int, default=0,
                   help="the nodes' lazy chunk cache (default: the node's, a tenth of its "
                        "state disk, 2-64 GiB); a burst whose sandboxes fetch more than it "
                        "holds between two sandboxes of one image fetches chunks again")
    p.add_argument("--out", default=None)
    p.add_argument("--prepare-images", action="store_true",
                   help="only make and push the images, keep them in --work, and stop")
    p.add_argument("--reuse-images", action="store_true",
                   help="run on the images a --prepare-images run left in --work (and the "
                        "conversions a --keep run published)")
    p.add_argument("--keep", action="store_true",
                   help="keep the images and published conversions in --work for a "
                        "--reuse-images run")
    a = p.parse_args()
    if a.quick:
        a.images, a.image_mb, a.files, a.n = 2, 32, 400, "16"
    if os.geteuid() != 0:
        sys.exit("registry_bench: needs root (netns, tc, mounts, drop_caches)")
    for tool in ("/usr/bin/docker-registry", shutil.which("skopeo"), shutil.which("tc")):
        if not tool or not os.path.exists(tool):
            sys.exit("registry_bench: needs docker-registry, skopeo and tc (bash scripts/deps.sh)")
    ns = [int(x) for x in a.n.split(",")]
    modes = a.modes.split(",")
    patterns = a.patterns.split(",")
    if not set(patterns) <= {"random", "shared"} or not set(modes) <= {"convert", "full",
                                                                       "ondemand"}:
        sys.exit(f"registry_bench: unknown pattern or mode in {patterns} {modes}")
    if a.reuse_images and "convert" in modes and os.path.exists(
            os.path.join(a.work, "images.json")) and json.load(
            open(os.path.join(a.work, "images.json"))).get("published_s") is not None:
        sys.exit("registry_bench: the kept images were published already; convert must run "
                 "before any conversion is published (make new images)")
    date = datetime.date.today().isoformat()
    out = a.out or os.path.join(ROOT, "bench/results",
                                f"registry-{date}{'-quick' if a.quick else ''}.json")
    b = Bench(a)
    results, cold, publish_s = [], None, None
    t_all = time.monotonic()
    try:
        b.setup()
        log(f"setup (images pushed) {b.setup_s:.1f}s")
        if a.prepare_images:
            b.reg.teardown()
            b.reg = None
            log(f"images kept in {a.work}: run again with --reuse-images")
            return
        # convert first: once a conversion is published, a node takes it
        # instead of converting (that is the point), so convert must run before.
        for n in ns:
            if "convert" in modes:
                for pat in patterns:
                    results.append(b.run_mode("convert", n, pat))
        if "full" in modes or "ondemand" in modes:
            if b.published_s is not None:
                publish_s = b.published_s
                log(f"conversions published by an earlier run ({publish_s}s)")
            else:
                publish_s = b.publish()
                log(f"publish (convert once, push the conversion) {publish_s}s")
                if a.keep:
                    saved = os.path.join(a.work, "images.json")
                    with open(saved) as f:
                        kept = json.load(f)
                    kept["published_s"] = publish_s
                    with open(saved, "w") as f:
                        json.dump(kept, f)
            cold = b.cold_first_exec()
            log(f"cold node: {json.dumps(cold)}")
        for n in ns:
            for pat in patterns:
                for m in modes:
                    if m != "convert":
                        results.append(b.run_mode(m, n, pat))
    finally:
        if b.reg:
            b.reg.teardown()
        if not (a.prepare_images or a.keep):
            unmount_under(a.work)
            shutil.rmtree(a.work, ignore_errors=True)
    report = {
        "bench": "registry_bench", "date": date, "host": os.uname().nodename,
        "cpus": os.cpu_count(), "loadavg_at_end": open("/proc/loadavg").read().split()[:3],
        "dsec_bin": a.dsec_bin, "reused_images": a.reuse_images,
        "params": {"images": a.images, "image_mb": a.image_mb, "files_per_image": a.files,
                   "n": ns, "modes": modes, "patterns": patterns, "workers": a.workers, "rate": a.rate,
                   "delay": a.delay, "read_fraction": [0.04, 0.13], "seed": a.seed,
                   "cold_registry": a.cold_registry, "chunk_cache_mb": a.chunk_cache_mb or "default",
                   "storage": a.storage},
        "image_bytes": [img["bytes"] for img in b.images],
        "setup_s": round(getattr(b, "setup_s", 0), 1), "publish_s": publish_s,
        "shaping": b.reg.shaping if b.reg else None,
        "cold_node": cold, "total_s": round(time.monotonic() - t_all, 1),
        "results": results, "summary": summarize(results), "notes": NOTES,
    }
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    report["plot"] = plot(report, out[:-5] + ".png")
    print(json.dumps({"summary": report["summary"], "cold_node": cold, "out": out,
                      "plot": report["plot"]}, indent=1))


if __name__ == "__main__":
    main()
