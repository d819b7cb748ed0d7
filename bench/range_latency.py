#!/usr/bin/env python3
"""Per-request cost of a lazy read's HTTP Range request to a loopback
docker-registry: the same 16 KiB ranges of one pushed blob, asked over one
kept-alive connection per client thread against a new TCP connection per
request, with 1 and with 16 client threads. Tells how much of a lazy
fetch's time is the connection and how many range requests per second the
registry itself can answer on this host. With several --kb sizes it also
tells the registry's CPU time per request by range size (from /proc): CNCF
distribution reads each range through a fresh 4 MiB buffered reader, so a
16 KiB range costs it about what a 1 MiB one does. Prints JSON.

  python3 bench/range_latency.py [--requests 2000] [--threads 1,16] [--kb 16[,256,1024]]
"""
import argparse
import hashlib
import http.client
import json
import os
import random
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

from chunk_size_bench import push_blob, start_registry  # noqa: E402  (same directory)


def ranges(n, size, kb, seed):
    rng = random.Random(seed)
    step = kb << 10
    return [rng.randrange(0, size // step) * step for _ in range(n)]


def cpu_seconds(pid):
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(port, path, offsets, kb, threads, keep_alive, pid):
    lat = []
    cpu0 = cpu_seconds(pid)
    lock = threading.Lock()
    parts = [offsets[i::threads] for i in range(threads)]

    def worker(offs):
        conn = None
        mine = []
        for off in offs:
            if conn is None or not keep_alive:
                if conn:
                    conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                conn.connect()
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t = time.perf_counter()
            conn.request("GET", path, headers={"Range": f"bytes={off}-{off + (kb << 10) - 1}"})
            r = conn.getresponse()
            body = r.read()
            mine.append(time.perf_counter() - t)
            assert r.status == 206 and len(body) == kb << 10, (r.status, len(body))
        if conn:
            conn.close()
        with lock:
            lat.extend(mine)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(p,)) for p in parts]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    lat.sort()
    return {"range_kb": kb, "threads": threads, "keep_alive": keep_alive, "requests": len(lat),
            "registry_cpu_ms_per_request": round(cpu * 1000 / len(lat), 3),
            "p50_ms": round(lat[len(lat) // 2] * 1000, 3),
            "p90_ms": round(lat[int(len(lat) * 0.9)] * 1000, 3),
            "requests_per_s": round(len(lat) / wall, 1)}


def run_multi(port, path, size, per_request, requests, threads, pid):
    """`requests` requests of `per_request` random 16 KiB ranges each, on
    kept-alive connections: the registry's CPU per request and per range."""
    rng = random.Random(per_request)
    reqs = []
    for _ in range(requests):
        offs = sorted({rng.randrange(0, size // 16384) * 16384 for _ in range(per_request)})
        reqs.append(",".join(f"{o}-{o + 16383}" for o in offs))
    parts = [reqs[i::threads] for i in range(threads)]

    def worker(mine):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for spec in mine:
            conn.request("GET", path, headers={"Range": "bytes=" + spec})
            r = conn.getresponse()
            r.read()
            assert r.status == 206, r.status
        conn.close()

    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    ts = [threading.Thread(target=worker, args=(p,)) for p in parts]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    ranges = sum(s.count(",") + 1 for s in reqs)
    return {"ranges_per_request": per_request, "threads": threads, "requests": requests,
            "registry_cpu_ms_per_request": round(cpu * 1000 / requests, 3),
            "registry_cpu_ms_per_range": round(cpu * 1000 / ranges, 3),
            "requests_per_s": round(requests / wall, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--threads", default="1,16")
    ap.add_argument("--kb", default="16", help="range sizes in KiB, comma-separated")
    ap.add_argument("--blob-mb", type=int, default=64)
    ap.add_argument("--multi", default="", help="ranges per request, comma-separated (16 KiB "
                    "each, one multipart/byteranges request); with it only that is measured")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="dsec-range-latency-")
    reg = None
    try:
        reg, port = start_registry(work)
        data = os.urandom(args.blob_mb << 20)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blob = os.path.join(work, "blob")
        with open(blob, "wb") as f:
            f.write(data)
        push_blob(port, "measure/latency", blob, digest)
        path = f"/v2/measure/latency/blobs/{digest}"
        out = []
        if args.multi:
            for n in (int(k) for k in args.multi.split(",")):
                out.append(run_multi(port, path, len(data), n, args.requests,
                                     int(args.threads.split(",")[-1]), reg.pid))
            print(json.dumps({"load": os.getloadavg(), "results": out}, indent=1))
            return
        for kb in (int(k) for k in args.kb.split(",")):
            offsets = ranges(args.requests, len(data), kb, 7)
            for threads in (int(t) for t in args.threads.split(",")):
                for keep in (True, False):
                    out.append(run(port, path, offsets, kb, threads, keep, reg.pid))
        print(json.dumps({"load": os.getloadavg(), "results": out}, indent=1))
    finally:
        if reg:
            reg.terminate()
            reg.wait()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
