#!/usr/bin/env python3
"""Chooses the lazy blob daemon's chunk size: for each candidate, the time to
first read and the bytes and requests fetched from a real registry when a
reader reads ~5% of the files of a ~100 MB python-like tree.

As root: builds the tree as a chunked layer, pushes its data blob to a local
docker-registry (plain HTTP on loopback), then per chunk size a fresh store
that holds only the metadata image and a lazy source for the blob, a
`dsec lazyfs` daemon, and an EROFS mount with device=<the blob in the FUSE
mount>. Prints JSON. Loopback has no latency: the JSON also gives a modelled
time for a 1 Gbit/s, 1 ms link (requests x RTT + bytes / bandwidth).

  sudo python3 bench/chunk_size_bench.py --dsec build/cmd/dsec [--tree DIR ...]
"""
import argparse
import ctypes
import json
import os
import random
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

CHUNK_SIZES = [64 << 10, 128 << 10, 256 << 10, 1 << 20]
libc = ctypes.CDLL("libc.so.6", use_errno=True)
MS_RDONLY = 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def start_registry(work):
    port = free_port()
    cfg = os.path.join(work, "registry.yml")
    with open(cfg, "w") as f:
        f.write(f"version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: "
                f"{{rootdirectory: {work}/registry}}}}\nhttp: {{addr: 127.0.0.1:{port}}}\n")
    proc = subprocess.Popen(["docker-registry", "serve", cfg], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)

    def up():
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1).status == 200
        except OSError:
            return False
    wait_for(up, 10, "the registry")
    return proc, port


def push_blob(port, repo, path, digest):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/{repo}/blobs/uploads/",
                                 method="POST")
    loc = urllib.request.urlopen(req).headers["Location"]
    if loc.startswith("/"):
        loc = f"http://127.0.0.1:{port}{loc}"
    sep = "&" if "?" in loc else "?"
    with open(path, "rb") as f:
        data = f.read()
    req = urllib.request.Request(f"{loc}{sep}digest={digest}", data=data, method="PUT",
                                 headers={"Content-Type": "application/octet-stream"})
    assert urllib.request.urlopen(req).status == 201


def mount_erofs(image, target, device, extra):
    os.makedirs(target, exist_ok=True)
    opts = f"device={device}" + (f",{extra}" if extra else "")
    if libc.mount(image.encode(), target.encode(), b"erofs", MS_RDONLY, opts.encode()) != 0:
        raise OSError(ctypes.get_errno(), f"mount {image} on {target}")


def measure(args, work, store0, image_name, data_name, port, chunk, files):
    store = os.path.join(work, f"store-{chunk >> 10}k")
    cache = os.path.join(work, f"cache-{chunk >> 10}k")
    shutil.copytree(store0, store, ignore=shutil.ignore_patterns("*.blob"))
    digest = "sha256:" + data_name[len("sha256-"):-len(".blob")]
    size = os.path.getsize(os.path.join(store0, "blobs", data_name))
    os.makedirs(os.path.join(store, "lazy", "sources"), exist_ok=True)
    os.makedirs(os.path.join(store, "lazy", "mnt"), exist_ok=True)
    with open(os.path.join(store, "lazy", "sources", data_name[:-5] + ".json"), "w") as f:
        json.dump({"registry": f"127.0.0.1:{port}", "repository": "measure/lazy",
                   "digest": digest, "size": size, "chunk_size": chunk}, f)
    os.symlink("../lazy/mnt/" + data_name, os.path.join(store, "blobs", data_name))
    daemon = subprocess.Popen([args.dsec, "lazyfs", "--store", store, "--cache", cache,
                               "--insecure-registry", f"127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    mnt = os.path.join(work, f"mnt-{chunk >> 10}k")
    try:
        wait_for(lambda: os.path.exists(os.path.join(store, "lazy", "mnt", data_name)), 10,
                 "the daemon")
        mount_erofs(os.path.join(store, "blobs", image_name), mnt,
                    os.path.join(store, "blobs", data_name), args.erofs_opts)
        t0 = time.monotonic()
        first = None
        read = 0
        lock = threading.Lock()

        def reader(part):
            nonlocal first, read
            for rel in part:
                with open(os.path.join(mnt, rel), "rb") as f:
                    n = len(f.read())
                with lock:
                    read += n
                    if first is None:
                        first = time.monotonic() - t0
        threads = [threading.Thread(target=reader, args=(files[i::args.readers],))
                   for i in range(args.readers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        total = time.monotonic() - t0
        time.sleep(1.2)  # the daemon writes stats.json once a second
        with open(os.path.join(cache, "stats.json")) as f:
            stats = json.load(f)
    finally:
        libc.umount2(mnt.encode(), 2)
        libc.umount2(os.path.join(store, "lazy", "mnt").encode(), 2)
        daemon.wait(timeout=10)
    fetched = stats["bytes_fetched"]
    requests = stats.get("range_requests", stats["chunks_fetched"])
    return {"chunk_size": chunk, "blob_bytes": size, "files_read": len(files),
            "bytes_read": read, "first_read_ms": round(first * 1000, 2),
            "all_reads_ms": round(total * 1000, 1), "bytes_fetched": fetched,
            "fetched_per_read": round(fetched / max(read, 1), 2),
            "fetched_share_of_blob": round(fetched / size, 4), "requests": requests,
            "readers": args.readers,
            "ms_per_request": round(stats.get("fetch_us", 0) / 1000 / max(requests, 1), 2),
            # Readers spend their time waiting on requests: wall time x readers / requests.
            "reader_ms_per_request": round(total * 1000 * args.readers / max(requests, 1), 2),
            "modelled_1gbit_1ms_ms": round(requests * 1.0 + fetched / 125e6 * 1000, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsec", required=True)
    ap.add_argument("--tree", action="append",
                    default=None, help="directories copied into the layer (default python's)")
    ap.add_argument("--share", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--chunk-kb", default=",".join(str(c >> 10) for c in CHUNK_SIZES),
                    help="candidate chunk sizes in KiB, comma-separated")
    ap.add_argument("--readers", type=int, default=1,
                    help="threads reading the picked files at once (per-request latency "
                         "under concurrency)")
    ap.add_argument("--erofs-opts", default="", help="extra EROFS mount options")
    args = ap.parse_args()
    args.dsec = os.path.abspath(args.dsec)
    trees = args.tree or ["/usr/lib/python3.11", "/usr/lib/python3"]
    work = tempfile.mkdtemp(prefix="dsec-chunk-measure-")
    reg = None
    try:
        src = os.path.join(work, "src")
        for t in trees:
            shutil.copytree(t, os.path.join(src, "usr", t.strip("/").replace("/", "_")),
                            symlinks=True, ignore_dangling_symlinks=True)
        store0 = os.path.join(work, "store0")
        subprocess.run([args.dsec, "layer", "build", src, "--name", "measure/py", "--version",
                        "1", "--kind", "workspace", "--chunked", "--store", store0], check=True,
                       stdout=subprocess.DEVNULL)
        blobs = os.listdir(os.path.join(store0, "blobs"))
        data_name = next(b for b in blobs if b.endswith(".blob"))
        image_name = next(b for b in blobs if b.endswith(".erofs"))
        reg, port = start_registry(work)
        push_blob(port, "measure/lazy", os.path.join(store0, "blobs", data_name),
                  "sha256:" + data_name[7:-5])
        files = sorted(os.path.relpath(os.path.join(d, f), src)
                       for d, _, fs in os.walk(src) for f in fs
                       if os.path.isfile(os.path.join(d, f))
                       and not os.path.islink(os.path.join(d, f)))
        pick = random.Random(args.seed).sample(files, max(1, int(len(files) * args.share)))
        results = [measure(args, work, store0, image_name, data_name, port, c, pick)
                   for c in (int(k) << 10 for k in args.chunk_kb.split(","))]
        print(json.dumps({"files": len(files), "share": args.share, "load": os.getloadavg(),
                          "results": results},
                         indent=1))
    finally:
        if reg:
            reg.terminate()
            reg.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
