#!/usr/bin/env python3
"""Pause with zram alone against the swap tier (issue 14 part 3), side by side
in one run: what a paused container holding 200 MiB (64 MiB random, 136 MiB
compressible text, half heap, half /dev/shm) gives back to the host, how long
pause and resume take, and that its heap and files are intact after resume.

Root; the store must hold base/python@3.11. Each configuration runs on a node
of its own, one after the other (swap and zswap are host-wide):
  zram        --zram-mb 1024 --swap-file-mb 0 --zswap-compressor off
  zswap+zram  --zram-mb 1024 --swap-file-mb 0 --zswap-compressor deflate
              (zswap in front of zram; measured when pause still went through
              zswap, which keeps random pages whole; it now goes past it)
  tier        --zram-mb 0 --swap-file-mb 2048 --zswap-compressor deflate (a
              disk file; pause writes past zswap to the file)
  tier+zram   --zram-mb 1024 --swap-file-mb 2048 (the default layout)
    python3 bench/pause_tier_bench.py --dsec-bin build/cmd/dsec \\
        --store /var/lib/dsec-test/store [--holders 3] [--configs zram,tier]

Per holder: charged before/after (memory.usage_in_bytes), what the swap keeps
in RAM for it (zram mm_stat mem_used_total + zswap pool, deltas), host net
gain = freed - kept, MemAvailable delta (noisy on a shared host), pause and
resume wall time, first exec after resume, the time for the holder to hash its
heap again (every page back) and whether heap and /dev/shm hashes match.
Writes bench/results/pause-tier-<date>.json (or --out).
"""

import argparse
import datetime
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_port, request  # noqa: E402

MIB = 1 << 20
HOLDER_MB = 200

HOLDER = r'''
import hashlib, os, time
rnd = os.urandom(64 << 20)
blk = b"".join(b"line %08d of compressible text, mostly the same words again\n" % i
               for i in range(2000))
n = (68 << 20) // len(blk)
heap = [blk + b"%d" % i for i in range(n)]
with open("/dev/shm/holder", "wb") as f:
    for i in range(n):
        f.write(blk)
def digest():
    h = hashlib.sha256(rnd)
    for b in heap:
        h.update(b)
    return h.hexdigest()
with open("/tmp/ready.tmp", "w") as f:
    f.write(digest())
os.rename("/tmp/ready.tmp", "/tmp/ready")
while True:
    time.sleep(0.05)
    if os.path.exists("/tmp/check"):
        os.unlink("/tmp/check")
        with open("/tmp/after.tmp", "w") as f:
            f.write(digest())
        os.rename("/tmp/after.tmp", "/tmp/after")
'''
SHM_HASH = ("python3 -c \"import hashlib;print(hashlib.sha256("
            "open('/dev/shm/holder','rb').read()).hexdigest())\"")

CONFIGS = {
    "zram": ["--zram-mb", "1024", "--swap-file-mb", "0", "--zswap-compressor", "off"],
    "zswap+zram": ["--zram-mb", "1024", "--swap-file-mb", "0", "--zswap-compressor", "deflate"],
    "tier": ["--zram-mb", "0", "--swap-file-mb", "2048", "--zswap-compressor", "deflate"],
    "tier+zram": ["--zram-mb", "1024", "--swap-file-mb", "2048", "--zswap-compressor", "deflate"],
}


def q(sid):
    return urllib.parse.quote(sid, safe="")


def meminfo():
    out = {}
    for line in open("/proc/meminfo"):
        k, v = line.split(":")
        out[k] = int(v.split()[0]) * 1024
    return out


def zram_used():
    total = 0
    for line in open("/proc/swaps").read().splitlines()[1:]:
        dev = line.split()[0]
        if dev.startswith("/dev/zram"):
            total += int(open(f"/sys/block/{dev[5:]}/mm_stat").read().split()[2])
    return total


def kept_in_ram():
    """RAM swap takes for what it holds: zram devices + zswap's pool."""
    return zram_used() + meminfo().get("Zswap", 0)


class Node:
    def __init__(self, args, name, extra):
        self.state = tempfile.mkdtemp(prefix="dsec-pause-tier-", dir="/var/tmp")
        self.swap_dir = self.state + "-swap"
        self.port = free_port()
        self.node_id = "pt-" + os.urandom(3).hex()
        self.log_path = self.state + ".log"
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [args.dsec_bin, "node", "--state-dir", self.state, "--store", args.store,
             "--rest", f"127.0.0.1:{self.port}", "--listen", "127.0.0.1:0",
             "--node-id", self.node_id, "--no-reclaim", "--swap-dir", self.swap_dir, *extra],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if request(self.port, "GET", "/healthz", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise SystemExit(f"node {name} did not start: " + open(self.log_path).read())

    def swap_lines(self):
        return [l.split(": ", 1)[1].strip() for l in open(self.log_path, errors="replace")
                if "zram: " in l or "swap tier: " in l]

    def ok(self, method, path, body=None, timeout=600):
        status, out = request(self.port, method, path, body, timeout)
        if status not in (200, 201, 204):
            raise SystemExit(f"{method} {path}: {status} {out}")
        return out

    def file(self, sid, path):
        return request(self.port, "GET", f"/v1/sandboxes/{q(sid)}/files?path={path}")

    def put(self, sid, path, data):
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("PUT", f"/v1/sandboxes/{q(sid)}/files?path={path}", body=data,
                     headers={"Content-Type": "application/octet-stream"})
        r = conn.getresponse()
        r.read()
        conn.close()
        if r.status >= 300:
            raise SystemExit(f"put {path}: {r.status}")

    def charged(self, sid):
        with open(f"/sys/fs/cgroup/memory/dsec/{self.node_id}/{sid}/memory.usage_in_bytes") as f:
            return int(f.read())

    def stop(self):
        self.proc.terminate()
        rc = self.proc.wait(timeout=300)
        subprocess.run(["rm", "-rf", self.state, self.swap_dir, self.log_path])
        return rc


def wait_file(node, sid, path, timeout=300):
    deadline = time.monotonic() + timeout
    while True:
        status, body = node.file(sid, path)
        if status == 200:
            return body.decode() if isinstance(body, bytes) else json.dumps(body)
        if time.monotonic() > deadline:
            raise SystemExit(f"{sid}: {path} never appeared")
        time.sleep(0.05)


def one_holder(node):
    sid = node.ok("POST", "/v1/sandboxes", {"layers": ["base/python@3.11"],
                                            "memory_mb": 512})["id"]
    node.put(sid, "/tmp/holder.py", HOLDER.encode())
    node.ok("POST", f"/v1/sandboxes/{q(sid)}/exec?background=1", {"cmd": "python3 /tmp/holder.py"})
    ready = wait_file(node, sid, "/tmp/ready")
    shm0 = node.ok("POST", f"/v1/sandboxes/{q(sid)}/exec", {"cmd": SHM_HASH})["stdout"]
    time.sleep(1)
    before = node.charged(sid)
    kept0, avail0 = kept_in_ram(), meminfo()["MemAvailable"]
    t0 = time.monotonic()
    node.ok("POST", f"/v1/sandboxes/{q(sid)}/pause")
    pause_s = time.monotonic() - t0
    time.sleep(0.5)  # writeback settles
    after = node.charged(sid)
    kept1, avail1 = kept_in_ram(), meminfo()["MemAvailable"]
    t0 = time.monotonic()
    node.ok("POST", f"/v1/sandboxes/{q(sid)}/resume")
    resume_s = time.monotonic() - t0
    t0 = time.monotonic()
    node.ok("POST", f"/v1/sandboxes/{q(sid)}/exec", {"cmd": ["true"]})
    first_exec_s = time.monotonic() - t0
    t0 = time.monotonic()
    node.put(sid, "/tmp/check", b"")
    again = wait_file(node, sid, "/tmp/after")
    rehash_s = time.monotonic() - t0
    shm1 = node.ok("POST", f"/v1/sandboxes/{q(sid)}/exec", {"cmd": SHM_HASH})["stdout"]
    node.ok("DELETE", f"/v1/sandboxes/{q(sid)}")
    freed, kept = before - after, kept1 - kept0
    return {
        "charged_before_mb": round(before / MIB, 1), "charged_after_mb": round(after / MIB, 1),
        "freed_mb": round(freed / MIB, 1), "swap_kept_in_ram_mb": round(kept / MIB, 1),
        "host_net_gain_mb": round((freed - kept) / MIB, 1),
        "host_net_gain_of_holder": round((freed - kept) / (HOLDER_MB * MIB), 3),
        "memavailable_delta_mb": round((avail1 - avail0) / MIB, 1),
        "pause_s": round(pause_s, 3), "resume_s": round(resume_s, 3),
        "first_exec_after_resume_s": round(first_exec_s, 3),
        "rehash_whole_heap_s": round(rehash_s, 3),
        "heap_intact": again == ready, "shm_intact": shm1 == shm0,
    }


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsec-bin", default="build/cmd/dsec")
    ap.add_argument("--store", default="/var/lib/dsec-test/store")
    ap.add_argument("--holders", type=int, default=3)
    ap.add_argument("--configs", default="zram,zswap+zram,tier,tier+zram")
    ap.add_argument("--out")
    args = ap.parse_args()
    res = {"bench": "pause-tier", "date": datetime.datetime.utcnow().isoformat() + "Z",
           "kernel": os.uname().release, "cores": os.cpu_count(),
           "loadavg_before": os.getloadavg(),
           "workload": "one paused python sandbox at a time holding 200 MiB: 64 MiB random "
                       "heap, 68 MiB text heap, 68 MiB text in /dev/shm",
           "configs": {}}
    for name in args.configs.split(","):
        node = Node(args, name, CONFIGS[name])
        runs = []
        try:
            for _ in range(args.holders):
                runs.append(one_holder(node))
                print(name, json.dumps(runs[-1]), file=sys.stderr)
        finally:
            lines = node.swap_lines()
            rc = node.stop()
        keys = ("host_net_gain_of_holder", "host_net_gain_mb", "pause_s", "resume_s",
                "first_exec_after_resume_s", "rehash_whole_heap_s")
        res["configs"][name] = {
            "node_args": CONFIGS[name], "swap": lines, "node_exit": rc, "runs": runs,
            "median": {k: median([r[k] for r in runs]) for k in keys},
            "all_intact": all(r["heap_intact"] and r["shm_intact"] for r in runs)}
    res["loadavg_after"] = os.getloadavg()
    text = json.dumps(res, indent=2)
    print(text)
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   f"pause-tier-{datetime.date.today().isoformat()}.json")
    with open(out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
