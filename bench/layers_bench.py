#!/usr/bin/env python3
"""On-demand layer loading benchmark: the DSec 8,192-container experiment scaled
to one 2-core machine.

A burst of N sandboxes over M distinct images (each >= 200 MB: a python-like
tree of thousands of files of mixed sizes, random incompressible bytes), each
sandbox reading a random 4-13 % (by bytes) of its image's files, chosen per
sandbox. A directory on the same disk stands in for the distributed file
system (DFS); the page cache is dropped before every mode so the DFS is read
cold. Modes:

  a   on-demand: the node's --store IS the DFS store; file-backed EROFS reads
      only the blocks sandboxes touch, nothing of the image lands locally.
  a2  blob device (DSec's layout): layers built with `dsec layer build
      --chunked`; the node's local store gets the small metadata images
      (copied, fsynced) and the data blobs stay on the DFS (symlinked); the
      mount cache mounts each image with -o device=<data blob>.
  b   full copy: before the burst the node copies every image fully into its
      local store (cp + fsync, catalog last), then the burst runs locally.
  c   tar extract: every image is a tar on the DFS, extracted to local disk
      (then syncfs) before use; sandboxes read the extracted trees in a plain
      `unshare --mount --pid --fork` + chroot (see "notes" in the JSON).

Modes a, a2 and b create real sandboxes through a real `dsec node` over REST
(POST /v1/sandboxes, then POST .../exec of `sh -c 'cat FILES > /dev/null'`).
Completion time = first create (or the start of copy/extract) to the last
sandbox's reads done. Local bytes written = write-sector delta of the disk in
/sys/block/<dev>/stat around the mode (other processes on the machine write
too: noisy) and `du` of what the mode left on local disk (exact).

    python3 bench/layers_bench.py [--quick] [--n 64,256] [--modes a,a2,b,c]
Needs root, erofs-utils, tar, unshare; writes bench/results/layers-<date>.json
(+ .png if matplotlib is installed) and removes everything it created.
"""

import argparse
import concurrent.futures as cf
import ctypes
import datetime
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

from benchlib import Rest, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_STORE = "/var/lib/dsec-test/store"
libc = ctypes.CDLL(None, use_errno=True)
MNT_DETACH = 2


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))[:200]}: exit {r.returncode}: "
                           f"{r.stdout.decode(errors='replace')[-800:]}")
    return r.stdout.decode(errors="replace")


def mount_erofs(image, target):
    os.makedirs(target, exist_ok=True)
    if libc.mount(image.encode(), target.encode(), b"erofs", 1, None) != 0:
        raise OSError(ctypes.get_errno(), f"mount erofs {image} on {target}")


def unmount_under(prefix):
    """Detaches every mount at or below `prefix` (deepest first)."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            p = line.split()[4]
            if p == prefix or p.startswith(prefix + "/"):
                points.append(p)
    for p in sorted(points, key=len, reverse=True):
        libc.umount2(p.encode(), MNT_DETACH)
    return len(points)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def disk_of(path):
    """The whole-disk name under /sys/block holding `path` (e.g. vda)."""
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    for name in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{name}/dev") as f:
                if f.read().strip() == f"{major}:{minor}":
                    return name
        except OSError:
            pass
        for part in os.listdir(f"/sys/block/{name}"):
            try:
                with open(f"/sys/block/{name}/{part}/dev") as f:
                    if f.read().strip() == f"{major}:{minor}":
                        return name
            except OSError:
                pass
    return None


def disk_sectors(disk):
    """(read sectors, write sectors) of `disk` so far."""
    with open(f"/sys/block/{disk}/stat") as f:
        v = f.read().split()
    return int(v[2]), int(v[6])


def du_bytes(*paths):
    total = 0
    for p in paths:
        if os.path.lexists(p):
            # Allocated bytes, not apparent size: the node's state holds
            # sparse files (quota volumes) whose size is not disk use.
            out = subprocess.run(["du", "-sx", "--block-size=1", p], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL).stdout.split()
            total += int(out[0]) if out else 0
    return total


def fsync_dir(path):
    """fsync of a directory (its entries), not syncfs: other engineers' dirty
    data on the same file system must not be charged to a mode."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- images -------------------------------------------------------------------

def file_sizes(rng, n_files, target_bytes):
    """A python-like size mix: mostly small modules, some medium shared
    objects and data files, a few large libraries; scaled to target_bytes."""
    sizes = []
    for _ in range(n_files):
        r = rng.random()
        if r < 0.70:
            sizes.append(rng.randint(512, 24 << 10))        # .py, .pyc
        elif r < 0.95:
            sizes.append(rng.randint(24 << 10, 400 << 10))  # .so, data
        else:
            sizes.append(rng.randint(1 << 20, 6 << 20))     # big libs
    scale = target_bytes / sum(sizes)
    return [max(64, int(s * scale)) for s in sizes]


def make_image_tree(dst, rng, n_files, target_bytes):
    """Writes the tree; returns [(relative path, size)]."""
    files = []
    for i, size in enumerate(file_sizes(rng, n_files, target_bytes)):
        rel = f"opt/py/lib/python3.11/site-packages/pkg{i % 97:02d}/sub{i % 7}/mod{i}.bin"
        full = os.path.join(dst, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(os.urandom(size))
        files.append(("/" + rel, size))
    return files


def busybox_tree(dst):
    """Copies the test store's base/busybox@1 tree out of its EROFS image."""
    with open(os.path.join(TEST_STORE, "catalog.json")) as f:
        digest = json.load(f)["layers"]["base/busybox@1"]["digest"]
    image = os.path.join(TEST_STORE, "blobs", "sha256-" + digest.split(":", 1)[1] + ".erofs")
    mnt = dst + ".mnt"
    mount_erofs(image, mnt)
    try:
        run(["cp", "-a", mnt + "/.", dst])
    finally:
        libc.umount2(mnt.encode(), MNT_DETACH)
        os.rmdir(mnt)


def pick_reads(rng, files):
    """A random subset of files holding 4-13 % of the image's bytes."""
    total = sum(s for _, s in files)
    want = rng.uniform(0.04, 0.13) * total
    order = list(range(len(files)))
    rng.shuffle(order)
    out, got = [], 0
    for i in order:
        if got >= want:
            break
        out.append(files[i][0])
        got += files[i][1]
    return out, got


# -- node over REST -------------------------------------------------------------

class Node:
    def __init__(self, dsec_bin, state, store, name, extra=()):
        self.state, self.rest = state, f"127.0.0.1:{free_port()}"
        os.makedirs(state, exist_ok=True)
        self.logf = open(state + ".log", "wb")
        self.proc = subprocess.Popen(
            [dsec_bin, "node", "--state-dir", state, "--store", store, "--rest", self.rest,
             "--listen", f"127.0.0.1:{free_port()}", "--node-id", name, *extra],
            stdout=self.logf, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                Rest(self.rest, 5).call("GET", "/healthz")
                return
            except (OSError, RuntimeError, http.client.HTTPException):
                if self.proc.poll() is not None:
                    with open(state + ".log", "rb") as f:
                        tail = f.read()[-1500:].decode(errors="replace")
                    raise RuntimeError(f"dsec node exited ({self.proc.returncode}): {tail}")
                time.sleep(0.2)
        raise RuntimeError(f"dsec node did not answer /healthz: see {state}.log")

    def stop(self, ids):
        with cf.ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda i: _delete(self.rest, i), ids))
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.logf.close()
        unmount_under(self.state)


def _delete(rest, sid):
    try:
        Rest(rest, 60).call("DELETE", f"/v1/sandboxes/{sid}")
    except Exception as e:  # noqa: BLE001 - teardown is best effort, reported
        log(f"delete {sid}: {e}")


def sh_cat(paths):
    return ["/bin/sh", "-c", "cat " + " ".join(paths) + " > /dev/null"]


def burst_node(rest, jobs, workers, t0):
    """jobs: [(layers, paths)]. Creates and reads, `workers` at a time.
    Returns (sandbox ids, done times since t0, failures)."""
    local = {}

    def one(job):
        layers, paths = job
        c = local.setdefault(threading.get_ident(), Rest(rest))
        sb = c.call("POST", "/v1/sandboxes", {"layers": layers, "cpu": 0.5, "memory_mb": 256})
        r = c.call("POST", f"/v1/sandboxes/{sb['id']}/exec",
                   {"cmd": sh_cat(paths), "timeout_s": 600})
        ok = r.get("exit_code") == 0
        return sb["id"], time.monotonic() - t0, None if ok else (r.get("stderr") or "")[:300]

    ids, done, fails = [], [], []
    with cf.ThreadPoolExecutor(workers) as ex:
        for fut in cf.as_completed([ex.submit(one, j) for j in jobs]):
            try:
                sid, t, err = fut.result()
                ids.append(sid)
                done.append(t)
                if err is not None:
                    fails.append(err)
            except Exception as e:  # noqa: BLE001 - counted and reported
                fails.append(str(e)[:300])
    return ids, done, fails


def burst_chroot(jobs, workers, t0):
    """jobs: [(root dir, paths)]: each in a new mount+pid namespace, chrooted."""
    def one(job):
        root, paths = job
        r = subprocess.run(["unshare", "--mount", "--pid", "--fork", "--kill-child",
                            "chroot", root] + sh_cat(paths),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return time.monotonic() - t0, None if r.returncode == 0 else r.stderr[:300].decode()

    done, fails = [], []
    with cf.ThreadPoolExecutor(workers) as ex:
        for t, err in ex.map(one, jobs):
            done.append(t)
            if err is not None:
                fails.append(err)
    return done, fails


# -- the benchmark ----------------------------------------------------------------

def copy_file_fsync(src, dst):
    shutil.copyfile(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def store_blobs(store):
    with open(os.path.join(store, "catalog.json")) as f:
        return json.load(f)


class Bench:
    def __init__(self, a):
        self.a = a
        self.dfs = a.dfs
        self.local = a.local
        self.images = []    # [{"name", "files", "bytes"}]
        self.disk = None

    def setup(self):
        a = self.a
        for d in (self.dfs, self.local):
            if os.path.exists(d):
                unmount_under(d)
                shutil.rmtree(d)
        os.makedirs(self.dfs)
        os.makedirs(self.local)
        self.disk = disk_of(self.local)
        src = os.path.join(self.dfs, "src")
        bb = os.path.join(src, "busybox")
        os.makedirs(bb)
        busybox_tree(bb)
        t = time.monotonic()
        rng = random.Random(a.seed)
        stores = [("store", [])] + ([("store-chunked", ["--chunked"])]
                                    if "a2" in a.modes.split(",") else [])
        for store, extra in stores:
            run([a.dsec_bin, "layer", "build", bb, "--name", "base/busybox", "--version", "1",
                 "--store", os.path.join(self.dfs, store)] + extra)
        os.makedirs(os.path.join(self.dfs, "tars"))
        run(["tar", "-cf", os.path.join(self.dfs, "tars", "busybox.tar"), "-C", bb, "."])
        for k in range(a.images):
            name = f"bench/img{k}"
            tree = os.path.join(src, f"img{k}")
            files = make_image_tree(tree, rng, a.files, a.image_mb << 20)
            for store, extra in stores:
                run([a.dsec_bin, "layer", "build", tree, "--name", name, "--version", "1",
                     "--kind", "workspace", "--store", os.path.join(self.dfs, store)] + extra)
            run(["tar", "-cf", os.path.join(self.dfs, "tars", f"img{k}.tar"), "-C", tree, "."])
            shutil.rmtree(tree)
            self.images.append({"name": name, "files": files,
                                "bytes": sum(s for _, s in files)})
            log(f"image {name}: {len(files)} files, {self.images[-1]['bytes'] >> 20} MiB")
        shutil.rmtree(src)
        self.setup_s = time.monotonic() - t

    def jobs(self, n, seed):
        rng = random.Random(seed)
        out = []
        for i in range(n):
            k = i % len(self.images)
            paths, got = pick_reads(rng, self.images[k]["files"])
            out.append((k, paths, got))
        return out

    def run_mode(self, mode, n):
        a = self.a
        jobs = self.jobs(n, a.seed * 1000 + n)
        work = os.path.join(self.local, f"{mode}-n{n}")
        os.makedirs(work)
        drop_caches()
        rd0, wr0 = disk_sectors(self.disk)
        node, ids, prep_s = None, [], 0.0
        try:
            if mode == "c":
                t0 = time.monotonic()
                roots = []
                for k in range(len(self.images)):
                    root = os.path.join(work, f"img{k}")
                    os.makedirs(root)
                    run(["tar", "-xf", os.path.join(self.dfs, "tars", "busybox.tar"), "-C", root])
                    run(["tar", "-xf", os.path.join(self.dfs, "tars", f"img{k}.tar"), "-C", root])
                    roots.append(root)
                prep_s = time.monotonic() - t0
                done, fails = burst_chroot([(roots[k], p) for k, p, _ in jobs], a.workers, t0)
                local_paths = [work]
            else:
                store = {"a": os.path.join(self.dfs, "store")}.get(mode, os.path.join(work, "store"))
                node = Node(a.dsec_bin, os.path.join(work, "state"), store, f"h3-ondemand-{mode}")
                t0 = time.monotonic()
                if mode in ("b", "a2"):
                    src = os.path.join(self.dfs, "store" if mode == "b" else "store-chunked")
                    self.fill_local_store(src, store, link_data=(mode == "a2"))
                    prep_s = time.monotonic() - t0
                layers = lambda k: ["base/busybox@1", self.images[k]["name"] + "@1"]  # noqa: E731
                ids, done, fails = burst_node(node.rest, [(layers(k), p) for k, p, _ in jobs],
                                              a.workers, t0)
                local_paths = [os.path.join(work, "state")] + ([store] if mode != "a" else [])
            completion = max(done) if done else float("nan")
            written_local = du_bytes(*local_paths)
        finally:
            if node:
                node.stop(ids)
        os.sync()
        rd1, wr1 = disk_sectors(self.disk)
        shutil.rmtree(work, ignore_errors=True)
        union = {}
        for k, p, _ in jobs:
            union.setdefault(k, set()).update(p)
        sizes = [dict(img["files"]) for img in self.images]
        union_bytes = sum(sizes[k][p] for k, ps in union.items() for p in ps)
        res = {
            "mode": mode, "n": n, "completion_s": round(completion, 3),
            "prepare_s": round(prep_s, 3), "burst_s": round(completion - prep_s, 3),
            "failures": len(fails), "first_failures": fails[:3],
            "local_bytes_du": written_local,
            "disk_write_bytes": (wr1 - wr0) * 512, "disk_read_bytes": (rd1 - rd0) * 512,
            "bytes_read_by_sandboxes": sum(g for _, _, g in jobs),
            "distinct_bytes_touched": union_bytes,
        }
        log(json.dumps(res))
        return res


def fill_local_store(src, dst, link_data):
    """Copies src's blobs into dst (fsync each), the catalog last (atomic).
    link_data: data blobs (*.blob) are symlinked to src, not copied."""
    bl = os.path.join(dst, "blobs")
    os.makedirs(bl, exist_ok=True)
    for name in sorted(os.listdir(os.path.join(src, "blobs"))):
        s, d = os.path.join(src, "blobs", name), os.path.join(bl, name)
        if link_data and name.endswith(".blob"):
            os.symlink(s, d)
        else:
            copy_file_fsync(s, d)
    copy_file_fsync(os.path.join(src, "catalog.json"), os.path.join(dst, "catalog.tmp"))
    os.rename(os.path.join(dst, "catalog.tmp"), os.path.join(dst, "catalog.json"))
    fsync_dir(bl)
    fsync_dir(dst)


Bench.fill_local_store = staticmethod(fill_local_store)


NOTES = [
    "The DFS is a directory on the same virtual disk as local storage; the page cache is "
    "dropped (sync; echo 3 > drop_caches) before each mode so every DFS read is a cold disk "
    "read. A real DFS adds network latency and bandwidth limits, which favour on-demand more.",
    "One node: 'each node copies each image' is this node's share. Sandboxes are created and "
    "read `workers` at a time through REST against a real dsec node (modes a, a2, b).",
    "Mode c does NOT go through dsec: the node only takes layer refs, and building EROFS from "
    "the extracted trees would add a whole mkfs pass against c. Instead each sandbox is "
    "`unshare --mount --pid --fork chroot <extracted tree> sh -c 'cat ...'`: no cgroups, no "
    "overlay, no dsec create path, which favours c (a dsec create costs a few ms more). The "
    "extract is plain GNU tar without fsync (as Docker's overlay2 extracts; in c's favour: "
    "b fsyncs its copies); its writes reach the disk in the background and are counted by "
    "the sync after the mode.",
    "Mode a2 is DSec's layout: metadata images copied into the node's local store and fsynced "
    "(tiny), data blobs left on the DFS (symlinked into the local store); the node mounts each "
    "layer with -o device=<data blob>.",
    "disk_write_bytes is the write-sector delta of the whole disk including other processes "
    "on this shared machine and the mode's own teardown; local_bytes_du is exact for what the "
    "mode left on local disk (state dirs, local store or extracted trees) before teardown.",
    "Each sandbox reads a random 4-13 % of its image's bytes (whole files); distinct_bytes_"
    "touched is the union over all sandboxes, i.e. what on-demand must fetch at least once.",
]


def summarize(results):
    out = {}
    for n in sorted({r["n"] for r in results}):
        by = {r["mode"]: r for r in results if r["n"] == n}
        s = {}
        if "a" in by and "b" in by:
            s["speedup_ondemand_vs_copy"] = round(by["b"]["completion_s"] / by["a"]["completion_s"], 2)
            s["write_reduction_ondemand_vs_copy_du"] = round(
                1 - by["a"]["local_bytes_du"] / max(1, by["b"]["local_bytes_du"]), 3)
            s["write_reduction_ondemand_vs_copy_disk"] = round(
                1 - by["a"]["disk_write_bytes"] / max(1, by["b"]["disk_write_bytes"]), 3)
        if "a" in by and "c" in by:
            s["speedup_ondemand_vs_tar"] = round(by["c"]["completion_s"] / by["a"]["completion_s"], 2)
        if "a2" in by and "b" in by:
            s["speedup_blobdev_vs_copy"] = round(by["b"]["completion_s"] / by["a2"]["completion_s"], 2)
        if "a2" in by and "c" in by:
            s["speedup_blobdev_vs_tar"] = round(by["c"]["completion_s"] / by["a2"]["completion_s"], 2)
        out[str(n)] = s
    return out


def plot(report, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: no plot")
        return None
    res = report["results"]
    ns = sorted({r["n"] for r in res})
    modes = [m for m in ("a", "a2", "b", "c") if any(r["mode"] == m for r in res)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    w = 0.8 / len(modes)
    for i, m in enumerate(modes):
        xs = [j + i * w for j in range(len(ns))]
        get = lambda n, key: next((r[key] for r in res if r["n"] == n and r["mode"] == m), 0)  # noqa: E731
        axes[0].bar(xs, [get(n, "completion_s") for n in ns], w, label=m)
        axes[1].bar(xs, [get(n, "local_bytes_du") / 2**20 for n in ns], w, label=m)
    for ax, t in zip(axes, ("completion time (s)", "bytes landed on local disk (MiB)")):
        ax.set_xticks([j + w * (len(modes) - 1) / 2 for j in range(len(ns))])
        ax.set_xticklabels([f"N={n}" for n in ns])
        ax.set_title(t)
        ax.legend()
    fig.suptitle("a=on-demand EROFS, a2=meta local + data blob on DFS, b=full copy, c=tar extract")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dsec-bin", default=os.path.join(ROOT, "build-bench/cmd/dsec"))
    p.add_argument("--dfs", default="/var/tmp/dsec-bench-dfs")
    p.add_argument("--local", default="/var/tmp/h3-ondemand-local")
    p.add_argument("--n", default="64,256", help="burst sizes, comma-separated")
    p.add_argument("--modes", default="a,a2,b,c")
    p.add_argument("--images", type=int, default=4)
    p.add_argument("--image-mb", type=int, default=200)
    p.add_argument("--files", type=int, default=3000)
    p.add_argument("--workers", type=int, default=16, help="creates+reads in flight")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--quick", action="store_true",
                   help="2 images of 24 MiB, 400 files, N=16: a smoke run")
    p.add_argument("--keep", action="store_true", help="keep the DFS dir (images) at the end")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    if a.quick:
        a.images, a.image_mb, a.files, a.n = 2, 24, 400, "16"
    if os.geteuid() != 0:
        sys.exit("layers_bench: needs root (mounts, namespaces, drop_caches)")
    ns = [int(x) for x in a.n.split(",")]
    modes = a.modes.split(",")
    date = datetime.date.today().isoformat()
    out = a.out or os.path.join(ROOT, "bench/results", f"layers-{date}{'-quick' if a.quick else ''}.json")
    b = Bench(a)
    results = []
    t_all = time.monotonic()
    try:
        b.setup()
        log(f"setup (images, EROFS plain + chunked, tars) {b.setup_s:.1f}s")
        for n in ns:
            for m in modes:
                results.append(b.run_mode(m, n))
    finally:
        unmount_under(a.local)
        shutil.rmtree(a.local, ignore_errors=True)
        if not a.keep:
            unmount_under(a.dfs)
            shutil.rmtree(a.dfs, ignore_errors=True)
    report = {
        "bench": "layers_bench", "date": date, "host": os.uname().nodename,
        "cpus": os.cpu_count(), "loadavg_at_end": open("/proc/loadavg").read().split()[:3],
        "params": {"images": a.images, "image_mb": a.image_mb, "files_per_image": a.files,
                   "n": ns, "modes": modes, "workers": a.workers, "read_fraction": [0.04, 0.13],
                   "seed": a.seed, "disk": b.disk},
        "image_bytes": [img["bytes"] for img in b.images],
        "setup_s": round(getattr(b, "setup_s", 0), 1),
        "total_s": round(time.monotonic() - t_all, 1),
        "results": results, "summary": summarize(results), "notes": NOTES,
    }
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    png = plot(report, out[:-5] + ".png")
    report["plot"] = png
    print(json.dumps({"summary": report["summary"], "out": out, "plot": png}, indent=1))


if __name__ == "__main__":
    main()
