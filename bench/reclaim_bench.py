#!/usr/bin/env python3
"""Memory reclaim mechanisms compared (issue 14): what each frees from idle
container sandboxes and what it costs.

Starts a private node with its zram swap (root; the store must hold
base/python@3.11):
    python3 bench/reclaim_bench.py --dsec-bin build/cmd/dsec \
        --store /var/lib/dsec-test/store

Workload: --sandboxes idle python sandboxes, each holding --hold-mb MiB of
mixed data: a quarter random bytes (incompressible), the rest text that
compresses well, half of that in the process's heap and half in a /dev/shm
file (tmpfs: no process maps it). For each mechanism, on a fresh set of
sandboxes, applied to each sandbox's memory cgroup the way the node does:
  pageout   process_madvise(MADV_PAGEOUT) over every mapping of every process
            (what reclaim() does to a running, idle sandbox)
  squeeze   memory.limit_in_bytes lowered in steps to 0 and put back (memsw
            stays at memory_mb), the kernel's own LRU reclaim
  force_empty  memory.force_empty (v1: reclaim all the kernel can at once)
  pause     POST /pause (freeze + pageout + squeeze), then /resume before the
            first exec
Reports per mechanism: bytes that left the sandboxes' RAM (memory.usage_in_
bytes before - after), what the zram device took for them (mm_stat
mem_used_total delta) and the net gain for the host, wall time, CPU time
(the reclaim runs in the caller's context: this process's system time, plus
the node's for pause), and the time to the first exec after (`true`, then a
command that reads the whole heap back).
DAMON-driven pageout is left out: it needs a kdamond of our own, and adding
one means writing /sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds, which
tears down and re-creates every kdamond directory, the machine's own
running one included (the kernel refuses it while one runs: EBUSY). The
machine's kdamond is not ours to stop or retune.
--after-read reads each sandbox's /dev/shm file back just before: its pages
are then active and the memcg statistics stale, the case where a squeeze or
a lone force_empty leaves the tmpfs pages in RAM and pause, which refreshes
the statistics first, does not.
Prints one JSON report; --out FILE writes it too (default
bench/results/reclaim-<date>.json).
"""

import argparse
import ctypes
import http.client
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.parse

from benchlib import free_port, request

MIB = 1 << 20

HOLDER = r'''
import hashlib, os, sys, time
total = int(sys.argv[1]) << 20
rnd = os.urandom(total // 4)
blk = b"".join(b"line %08d of compressible text, mostly the same words again\n" % i
               for i in range(2000))
n = (total * 3 // 8) // len(blk)
heap = [blk + b"%d" % i for i in range(n)]
with open("/dev/shm/holder", "wb") as f:
    for i in range(n):
        f.write(blk)
open("/tmp/ready", "w").write("1")
while True:
    time.sleep(1)
'''

READ_BACK = ("python3 -c \"import os; d=open('/dev/shm/holder','rb').read(); "
             "print(len(d))\"")

libc = ctypes.CDLL(None, use_errno=True)


class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def page_out(pid):
    fd = libc.syscall(434, pid, 0)  # pidfd_open
    if fd < 0:
        return
    try:
        rs = []
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                if "[vsyscall]" in line or "[vvar" in line:
                    continue
                a, b = (int(x, 16) for x in line.split()[0].split("-"))
                rs.append(iovec(a, b - a))
        arr = (iovec * len(rs))(*rs)
        i = 0
        while i < len(rs):
            n = min(512, len(rs) - i)
            r = libc.syscall(440, fd, ctypes.byref(arr, i * ctypes.sizeof(iovec)), n, 21, 0)
            i += 1 if r < 0 else n
    finally:
        os.close(fd)


class Node:
    def __init__(self, args):
        self.state = tempfile.mkdtemp(prefix="dsec-reclaim-bench-", dir="/var/tmp")
        self.port = free_port()
        self.node_id = "rb-" + os.urandom(3).hex()
        self.log = open(self.state + ".log", "wb")
        self.proc = subprocess.Popen(
            [args.dsec_bin, "node", "--state-dir", self.state, "--store", args.store,
             "--rest", f"127.0.0.1:{self.port}", "--listen", "127.0.0.1:0",
             "--node-id", self.node_id, "--zram-mb", str(args.zram_mb), *args.node_args.split()],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if request(self.port, "GET", "/healthz", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise SystemExit("node did not start: " + open(self.state + ".log").read())

    def ok(self, method, path, body=None, timeout=600):
        status, out = request(self.port, method, path, body, timeout)
        if status not in (200, 201, 204):
            raise SystemExit(f"{method} {path}: {status} {out}")
        return out

    def cg(self, sid):
        return f"/sys/fs/cgroup/memory/dsec/{self.node_id}/{sid}"

    def cpu_s(self):
        f = open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    def zram(self):
        for line in open(self.state + ".log", errors="replace"):
            if "zram: " in line:
                return line.strip()
        return ""

    def stop(self):
        self.proc.terminate()
        rc = self.proc.wait(timeout=120)
        subprocess.run(["rm", "-rf", self.state])
        return rc


def q(sid):
    return urllib.parse.quote(sid, safe="")


def read_int(path):
    with open(path) as f:
        return int(f.read().split()[0])


def zram_used():
    """mem_used_total summed over every zram device in swap."""
    total = 0
    for line in open("/proc/swaps").read().splitlines()[1:]:
        dev = line.split()[0]
        if dev.startswith("/dev/zram"):
            total += int(open(f"/sys/block/{dev[5:]}/mm_stat").read().split()[2])
    return total


def make_holders(node, n, hold_mb):
    sids = []
    for _ in range(n):
        sid = node.ok("POST", "/v1/sandboxes", {"layers": ["base/python@3.11"],
                                                "memory_mb": hold_mb * 3})["id"]
        put_file(node.port, sid, "/tmp/holder.py", HOLDER.encode())
        sids.append(sid)
    for sid in sids:
        node.ok("POST", f"/v1/sandboxes/{q(sid)}/exec?background=1",
                {"cmd": f"python3 /tmp/holder.py {hold_mb}"})
    for sid in sids:
        deadline = time.monotonic() + 300
        while request(node.port, "GET", f"/v1/sandboxes/{q(sid)}/files?path=/tmp/ready")[0] != 200:
            if time.monotonic() > deadline:
                raise SystemExit(f"holder {sid} never got ready")
            time.sleep(0.2)
    time.sleep(2)  # idle
    return sids


def put_file(port, sid, path, data):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("PUT", f"/v1/sandboxes/{q(sid)}/files?path={path}", body=data,
                     headers={"Content-Type": "application/octet-stream"})
        r = conn.getresponse()
        r.read()
        if r.status >= 300:
            raise SystemExit(f"put {path} in {sid}: {r.status}")
    finally:
        conn.close()


def squeeze(cg):
    limit = open(cg + "/memory.limit_in_bytes").read().strip()
    target = read_int(cg + "/memory.usage_in_bytes")
    for step in range(5):
        target = 0 if step == 4 else target // 2
        try:
            with open(cg + "/memory.limit_in_bytes", "w") as f:
                f.write(str(max(target, 4096)))
        except OSError:
            break
    with open(cg + "/memory.limit_in_bytes", "w") as f:
        f.write(limit)


def apply(node, mech, sid):
    cg = node.cg(sid)
    if mech == "pageout":
        for pid in open(cg + "/cgroup.procs").read().split():
            page_out(int(pid))
    elif mech == "squeeze":
        squeeze(cg)
    elif mech == "force_empty":
        with open(cg + "/memory.force_empty", "w") as f:
            f.write("0")
    elif mech == "pause":
        node.ok("POST", f"/v1/sandboxes/{q(sid)}/pause")


def run(node, mech, n, hold_mb, after_read=False):
    sids = make_holders(node, n, hold_mb)
    if after_read:  # the tmpfs pages were just read: active, and the memcg stats stale
        for sid in sids:
            node.ok("POST", f"/v1/sandboxes/{q(sid)}/exec", {"cmd": READ_BACK})
    before = [read_int(node.cg(s) + "/memory.usage_in_bytes") for s in sids]
    z0, avail0 = zram_used(), mem_available()
    r0, ncpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), node.cpu_s(), time.monotonic()
    per = []
    for sid in sids:
        s0 = time.monotonic()
        apply(node, mech, sid)
        per.append(time.monotonic() - s0)
    wall = time.monotonic() - t0
    r1, ncpu1 = resource.getrusage(resource.RUSAGE_SELF), node.cpu_s()
    after = [read_int(node.cg(s) + "/memory.usage_in_bytes") for s in sids]
    z1, avail1 = zram_used(), mem_available()
    firsts, reads = [], []
    for sid in sids:
        s0 = time.monotonic()
        if mech == "pause":
            node.ok("POST", f"/v1/sandboxes/{q(sid)}/resume")
        node.ok("POST", f"/v1/sandboxes/{q(sid)}/exec", {"cmd": ["true"]})
        firsts.append(time.monotonic() - s0)
        s0 = time.monotonic()
        node.ok("POST", f"/v1/sandboxes/{q(sid)}/exec", {"cmd": READ_BACK})
        reads.append(time.monotonic() - s0)
    for sid in sids:
        node.ok("DELETE", f"/v1/sandboxes/{q(sid)}")
    freed = sum(before) - sum(after)
    return {
        "sandboxes": n, "hold_mb_each": hold_mb,
        "charged_before_mb": round(sum(before) / MIB, 1),
        "charged_after_mb": round(sum(after) / MIB, 1),
        "freed_mb": round(freed / MIB, 1),
        "freed_fraction": round(freed / max(1, sum(before)), 3),
        "zram_took_mb": round((z1 - z0) / MIB, 1),
        "host_net_gain_mb": round((freed - (z1 - z0)) / MIB, 1),
        "host_memavailable_delta_mb": round((avail1 - avail0) / MIB, 1),
        "wall_s": round(wall, 3),
        "per_sandbox_s": [round(x, 3) for x in per],
        "cpu_s": round((r1.ru_stime - r0.ru_stime) + (r1.ru_utime - r0.ru_utime)
                       + (ncpu1 - ncpu0), 3),
        "first_exec_after_s": [round(x, 3) for x in firsts],
        "read_back_shm_after_s": [round(x, 3) for x in reads],
    }


def mem_available():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsec-bin", default="build/cmd/dsec")
    ap.add_argument("--store", default="/var/lib/dsec-test/store")
    ap.add_argument("--sandboxes", type=int, default=4)
    ap.add_argument("--hold-mb", type=int, default=64)
    ap.add_argument("--zram-mb", type=int, default=2048)
    ap.add_argument("--node-args", default="--swap-file-mb 0 --zswap-compressor off",
                    help="more node flags; the default keeps zram alone (no swap tier): "
                         "bench/pause_tier_bench.py compares the tier")
    ap.add_argument("--mechanisms", default="pageout,squeeze,force_empty,pause")
    ap.add_argument("--after-read", action="store_true",
                    help="read each sandbox's /dev/shm file back just before reclaiming it")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    node = Node(args)
    results = {"bench": "reclaim", "date": datetime.datetime.utcnow().isoformat() + "Z",
               "kernel": os.uname().release, "cores": os.cpu_count(),
               "loadavg_before": os.getloadavg(), "zram": node.zram(),
               "workload": f"{args.sandboxes} idle python sandboxes x {args.hold_mb} MiB: 1/4 "
                           "random heap, 3/8 text heap, 3/8 text in /dev/shm",
               "after_read": args.after_read,
               "damon": "left out: a kdamond of our own needs a write to nr_kdamonds, which "
                        "re-creates every kdamond (the machine's running one included)",
               "mechanisms": {}}
    try:
        for mech in args.mechanisms.split(","):
            results["mechanisms"][mech] = run(node, mech, args.sandboxes, args.hold_mb,
                                              args.after_read)
            print(mech, json.dumps(results["mechanisms"][mech]), file=sys.stderr)
    finally:
        results["loadavg_after"] = os.getloadavg()
        results["node_exit"] = node.stop()
    text = json.dumps(results, indent=2)
    print(text)
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   f"reclaim-{datetime.date.today().isoformat()}"
                                   + ("-after-read" if args.after_read else "") + ".json")
    with open(out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
