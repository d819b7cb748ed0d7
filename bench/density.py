#!/usr/bin/env python3
"""Density benchmark (issue 14): how a node's costs grow with the number of
resident sandboxes, with and without the reclaim actor, in one run.

    python3 bench/density.py --dsec-bin build/cmd/dsec \
        --store /var/lib/dsec-test/store [--kinds busybox,python] \
        [--steps 0,400,800,1600,3200] [--modes reclaim,off]

For each kind and mode it starts a private node (its own state dir; one node
at a time, so they never share the machine) and grows the number of resident
sandboxes step by step. A sandbox of kind
  busybox  base/busybox@1 with one sleeping process (an idle shell);
  python   base/python@3.11 with one idle python process that holds about
           --agent-mb MiB of ordinary heap objects (lists of dicts of ints and
           strings, as an agent's REPL holds), each sandbox its own data.
With --variants each series runs once per create-path variant (the node's
DSEC_FLAT_OFF environment: which parts of the launch template are off), so
the variants are measured side by side in one run. At each step N it
records:
  create_rate  creates/s of a burst of --burst creates made when N were
               resident (--concurrency callers; create + start of the idle
               process; the burst counts toward the next step);
  cpu_ms_per_create  CPU time of that burst (node process plus the node's
               sandbox cgroups, user + kernel) per create: what a create
               costs, which other load on a shared machine inflates far less
               than it inflates wall time;
  host_mb_per_sandbox  (MemTotal - MemAvailable) minus the figure with the
               node up and no sandbox, over N;
  node_rss_mb  the node process's resident set;
  exec_p50_ms, exec_p99_ms  `true` in a random sample of --sample sandboxes
               (for python after the reclaim actor had --settle-s to act);
  swap_used_mb, zram_orig_mb, zram_used_mb  what sits in swap, and what the
               zram device holds uncompressed and costs in RAM;
  mem_available_min_mb  the lowest MemAvailable seen since the node started
               (sampled every 0.25 s);
  failed  sandboxes not running (with the reasons, e.g. "oom");
  kernel_kib_per_sandbox  growth of unreclaimable slab, kmalloc-1k (where
               every memory cgroup's shrinker table lives: it grows with
               the number of superblocks on the host), page tables, kernel
               stacks and percpu since the node started, over N.
  refused_429  creates the node answered 429 so far, each waited out and
               retried (--retry-429-s, as a trainer does).
A step that cannot be reached (create refused past --retry-429-s,
MemAvailable under --floor-mb) ends that series and is recorded as where
it stopped.
JSON to --out (default bench/results/density-<date>.json) and a PNG with N on
the x axis beside it (bench/plot.py style; skipped without matplotlib).
"""

import argparse
import concurrent.futures as cf
import datetime
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import Rest, free_port, request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The agent: builds its heap, says so on stdout, then sleeps. Each sandbox
# seeds its own data (no two agents hold the same pages).
AGENT = r"""
import os, random, sys, time
mb = float(sys.argv[1]); rnd = random.Random(os.getpid() ^ int(time.time() * 1e6))
words = ["tool", "call", "result", "file", "patch", "test", "error", "ok", "step", "plan"]
state, size = [], 0
while size < mb * 1024 * 1024:
    rows = [{"step": rnd.randrange(1 << 20), "reward": rnd.random(),
             "tool": rnd.choice(words), "text": " ".join(rnd.choice(words) for _ in range(6)),
             "ids": [rnd.randrange(1000) for _ in range(4)]} for _ in range(1000)]
    state.append(rows)
    size += 1000 * 560
print("ready", flush=True)
while True:
    time.sleep(3600)
"""


def meminfo():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            out[k] = int(v.split()[0]) // 1024  # MiB
    return out


def zram_stats():
    """Sum over zram devices in use as swap: (orig MiB, RAM used MiB)."""
    orig = used = 0
    try:
        with open("/proc/swaps") as f:
            devs = [l.split()[0] for l in f.readlines()[1:]]
    except OSError:
        return 0, 0
    for d in devs:
        name = os.path.basename(d)
        try:
            with open(f"/sys/block/{name}/mm_stat") as f:
                v = [int(x) for x in f.read().split()]
            orig += v[0] >> 20
            used += v[2] >> 20
        except (OSError, ValueError, IndexError):
            pass
    return orig, used


def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return None
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


class Sampler(threading.Thread):
    """The lowest MemAvailable since start."""

    def __init__(self):
        super().__init__(daemon=True)
        self.low = meminfo()["MemAvailable"]
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(0.25):
            self.low = min(self.low, meminfo()["MemAvailable"])


def kernel_kib():
    """Kernel memory figures that grow per sandbox (KiB): unreclaimable slab,
    the kmalloc-1k cache (per-memcg shrinker tables live there), page tables,
    kernel stacks, percpu."""
    m = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            m[k] = int(v.split()[0])
    out = {k: m.get(k, 0) for k in ("SUnreclaim", "PageTables", "KernelStack", "Percpu")}
    try:
        with open("/proc/slabinfo") as f:
            for line in f.readlines()[2:]:
                p = line.split()
                if p[0] == "kmalloc-1k":
                    out["kmalloc_1k"] = int(p[1]) * int(p[3]) // 1024
    except OSError:
        pass
    return out


def cpu_ns(pid, node_id):
    """CPU time (ns) of the node process (all threads) plus every sandbox
    of node `node_id` (its v2 group's cpu.stat): the work a create costs, which
    other load on the machine does not inflate as it does wall time."""
    total = 0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) * (10 ** 9 // os.sysconf("SC_CLK_TCK"))
    except OSError:
        pass
    try:  # the node's v2 group counts every sandbox below it
        with open(f"/sys/fs/cgroup/unified/dsec/{node_id}/cpu.stat") as f:
            total += int(f.readline().split()[1]) * 1000
    except (OSError, ValueError, IndexError):
        try:  # a node older than cpu.stat, or a host without v2
            with open(f"/sys/fs/cgroup/cpuacct/dsec/{node_id}/cpuacct.usage") as f:
                total += int(f.read())
        except (OSError, ValueError):
            pass
    return total


class Node:
    def __init__(self, args, mode, variant=None):
        self.state = tempfile.mkdtemp(prefix="dsec-density-", dir="/var/tmp")
        self.port = free_port()
        self.listen = free_port()
        self.node_id = f"density-{mode}"
        extra = args.reclaim_args if mode == "reclaim" else args.off_args
        self.log = open(self.state + ".log", "wb")
        env = dict(os.environ)
        if variant is not None:
            env["DSEC_FLAT_OFF"] = variant
        self.proc = subprocess.Popen(
            [args.dsec_bin, "node", "--state-dir", self.state, "--store", args.store,
             "--rest", f"127.0.0.1:{self.port}", "--listen", f"127.0.0.1:{self.listen}",
             "--node-id", f"density-{mode}", *extra.split()],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.close()
                shutil.rmtree(self.state, ignore_errors=True)  # the log stays, for the reader
                raise SystemExit(f"node exited at start; log {self.state}.log")
            try:
                if request(self.port, "GET", "/healthz", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise SystemExit("node did not answer /healthz within 60 s")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.state, ignore_errors=True)


REFUSALS = {"n": 0}
REFUSALS_LOCK = threading.Lock()


def create_with_retry(port, spec, args):
    """POST /v1/sandboxes as a trainer does: a 429 (the node is reclaiming
    or short of memory) is waited out (1 s, up to --retry-429-s), counted in
    REFUSALS; any other error raises."""
    deadline = time.monotonic() + args.retry_429_s
    while True:
        status, out = request(port, "POST", "/v1/sandboxes", spec, timeout=300)
        if status == 201:
            return out["id"]
        if status != 429 or time.monotonic() > deadline:
            raise RuntimeError(f"POST /v1/sandboxes: {status} {str(out)[:300]}")
        with REFUSALS_LOCK:
            REFUSALS["n"] += 1
        time.sleep(1)


def make_sandbox(port, kind, args):
    """Creates one sandbox and starts its idle process: (id, pid inside)."""
    rest = Rest(port, timeout=300)
    if kind == "busybox":
        spec = {"layers": ["base/busybox@1"], "memory_mb": 32, "ttl_s": 0}
        cmd = ["sleep", "1000000"]
    else:
        spec = {"layers": ["base/python@3.11"], "memory_mb": args.agent_memory_mb, "ttl_s": 0}
        cmd = ["python3", "-c", AGENT, str(args.agent_mb)]
    sid = create_with_retry(port, spec, args)
    pid = rest.call("POST", f"/v1/sandboxes/{sid}/exec?background=1", {"cmd": cmd})["pid"]
    return sid, pid


def wait_agents_ready(port, made, timeout):
    """Until each python agent printed `ready` (its heap is built) or exited;
    returns how many are ready."""
    rest = Rest(port)
    deadline = time.monotonic() + timeout
    pending = list(made)
    while pending and time.monotonic() < deadline:
        still = []
        for sid, pid in pending:
            p = rest.call("GET", f"/v1/sandboxes/{sid}/processes/{pid}")
            if "ready" not in p.get("stdout", "") and p.get("state") == "running":
                still.append((sid, pid))
        pending = still
        if pending:
            time.sleep(1)
    return len(made) - len(pending)


def exec_latencies(port, ids, n):
    rest = Rest(port)
    lat = []
    for sid in random.sample(ids, min(n, len(ids))):
        t0 = time.monotonic()
        rest.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})
        lat.append((time.monotonic() - t0) * 1000)
    return lat


def failed(port):
    st, body = request(port, "GET", "/v1/sandboxes", timeout=120)
    items = body.get("sandboxes", body) if isinstance(body, dict) else []
    bad = {}
    for s in items if isinstance(items, list) else []:
        if s.get("state") not in ("running", "paused", "creating"):
            bad[s.get("reason") or s.get("state")] = bad.get(s.get("reason") or s.get("state"), 0) + 1
    return bad


def series(args, kind, mode, variant=None):
    name, flat_off = variant if variant else (None, None)
    node = Node(args, mode, flat_off)
    REFUSALS["n"] = 0
    sampler = Sampler()
    sampler.start()
    time.sleep(1)
    base_used = meminfo()["MemTotal"] - meminfo()["MemAvailable"]
    base_kernel = kernel_kib()
    ids, points, stopped = [], [], None
    pool = cf.ThreadPoolExecutor(args.concurrency)
    try:
        for step in args.steps:
            # Grow to `step`: the first --burst creates at the previous N are timed.
            need = step - len(ids)
            burst_rate = burst_cpu = None
            while need > 0:
                if meminfo()["MemAvailable"] < args.floor_mb:
                    stopped = f"MemAvailable under {args.floor_mb} MiB at N={len(ids)}"
                    break
                batch = min(need, args.burst)
                c0 = cpu_ns(node.proc.pid, node.node_id)
                t0 = time.monotonic()
                futs = [pool.submit(make_sandbox, node.port, kind, args) for _ in range(batch)]
                try:
                    made = [f.result() for f in futs]
                except Exception as e:  # noqa: BLE001 - any refusal ends the series
                    stopped = f"create refused at N~{len(ids)}: {str(e)[:200]}"
                    break
                dt = time.monotonic() - t0
                if burst_rate is None:
                    burst_rate = batch / dt
                    burst_cpu = (cpu_ns(node.proc.pid, node.node_id) - c0) / batch / 1e6
                ids += [sid for sid, _ in made]
                if kind == "python":
                    wait_agents_ready(node.port, made, timeout=600)
                need -= batch
            if points and burst_rate is not None:
                # That burst started at the previous step's N: it is that N's rate.
                points[-1]["create_rate"] = burst_rate
                points[-1]["cpu_ms_per_create"] = burst_cpu
            if stopped:
                break
            time.sleep(args.settle_s if ids else 0)
            mi = meminfo()
            orig, zused = zram_stats()
            lat = exec_latencies(node.port, ids, args.sample) if ids else []
            point = {
                "n": len(ids),
                "create_rate": None,
                "cpu_ms_per_create": None,
                "host_mb_per_sandbox": ((mi["MemTotal"] - mi["MemAvailable"] - base_used)
                                        / len(ids)) if ids else None,
                "mem_available_mb": mi["MemAvailable"],
                "mem_available_min_mb": sampler.low,
                "node_rss_mb": rss_mb(node.proc.pid),
                "exec_p50_ms": pct(lat, 50),
                "exec_p99_ms": pct(lat, 99),
                "swap_used_mb": mi["SwapTotal"] - mi["SwapFree"],
                "zram_orig_mb": orig,
                "zram_used_mb": zused,
                "load1": os.getloadavg()[0],
                "refused_429": REFUSALS["n"],
                "failed": failed(node.port) if ids else {},
            }
            if ids:
                now = kernel_kib()
                point["kernel_kib_per_sandbox"] = {
                    k: round((now.get(k, 0) - base_kernel.get(k, 0)) / len(ids), 1) for k in now}
            points.append(point)
            print(json.dumps({"kind": kind, "mode": mode, "variant": name, **point}), flush=True)
        # The rate at the last N (nothing grows after it).
        if not stopped and ids:
            c0 = cpu_ns(node.proc.pid, node.node_id)
            t0 = time.monotonic()
            futs = [pool.submit(make_sandbox, node.port, kind, args) for _ in range(args.burst)]
            try:
                for f in futs:
                    ids.append(f.result()[0])
                points[-1]["create_rate"] = args.burst / (time.monotonic() - t0)
                points[-1]["cpu_ms_per_create"] = (
                    (cpu_ns(node.proc.pid, node.node_id) - c0) / args.burst / 1e6)
            except Exception as e:  # noqa: BLE001
                stopped = f"create refused at N~{len(ids)}: {str(e)[:200]}"
    finally:
        pool.shutdown(wait=True)
        sampler.stop.set()
        node.stop()
    return {"kind": kind, "mode": mode, "variant": name, "flat_off": flat_off,
            "points": points, "stopped": stopped, "mem_available_min_mb": sampler.low}


def plot(report, png):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no PNG", file=sys.stderr)
        return
    keys = [("create_rate", "creates/s"), ("cpu_ms_per_create", "CPU ms per create"),
            ("host_mb_per_sandbox", "host MiB per sandbox"),
            ("node_rss_mb", "node RSS MiB"), ("exec_p99_ms", "exec p99 ms"),
            ("mem_available_min_mb", "MemAvailable min MiB")]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for ax, (k, title) in zip(axes.flat, keys):
        for s in report["series"]:
            xs = [p["n"] for p in s["points"] if p.get(k) is not None]
            ys = [p[k] for p in s["points"] if p.get(k) is not None]
            name = f"{s['kind']} / {s['mode']}" + (f" / {s['variant']}" if s.get("variant") else "")
            ax.plot(xs, ys, marker="o", label=name)
        ax.set_xlabel("resident sandboxes N")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=90)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dsec-bin", default=os.path.join(REPO, "build/cmd/dsec"))
    ap.add_argument("--store", default="/var/lib/dsec-test/store")
    ap.add_argument("--kinds", default="busybox,python")
    ap.add_argument("--modes", default="reclaim,off")
    ap.add_argument("--steps", default="0,400,800,1600,3200")
    ap.add_argument("--burst", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--retry-429-s", type=float, default=0,
                    help="wait out 429s for this long per create, as a trainer does (0: a "
                         "refusal ends the series)")
    ap.add_argument("--sample", type=int, default=60)
    ap.add_argument("--settle-s", type=float, default=5.0,
                    help="wait at each step before measuring (lets reclaim act)")
    ap.add_argument("--agent-mb", type=float, default=20.0)
    ap.add_argument("--agent-memory-mb", type=int, default=96)
    ap.add_argument("--floor-mb", type=int, default=1536,
                    help="stop growing when MemAvailable falls under this")
    ap.add_argument("--reclaim-args", default="--reclaim-idle-s 3",
                    help="node flags of the reclaim series")
    ap.add_argument("--off-args", default="--no-reclaim", help="node flags of the other series")
    ap.add_argument("--variants", default="",
                    help="busybox create-path variants side by side, name=DSEC_FLAT_OFF "
                         "value, ';'-separated, e.g. 'flat=;no-template=template;"
                         "no-sysfs=sysfs;before=template,sysfs' (runs in that order for "
                         "every mode; empty: the node's defaults only)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat the variants this many times, interleaved")
    ap.add_argument("--out")
    args = ap.parse_args()
    args.steps = [int(x) for x in args.steps.split(",")]
    date = datetime.date.today().isoformat()
    out = args.out or os.path.join(REPO, "bench", "results", f"density-{date}.json")
    report = {"bench": "density", "date": date, "host": os.uname().nodename,
              "cpus": os.cpu_count(), "mem_total_mb": meminfo()["MemTotal"],
              "args": {k: v for k, v in vars(args).items() if k not in ("dsec_bin", "out")},
              "series": []}
    variants = [tuple(v.split("=", 1)) for v in args.variants.split(";") if v] or [None]
    for _ in range(args.rounds):
        for kind in args.kinds.split(","):
            for mode in args.modes.split(","):
                for v in variants:
                    report["series"].append(series(args, kind, mode, v))
                    with open(out, "w") as f:
                        json.dump(report, f, indent=1)
    plot(report, out[:-5] + ".png" if out.endswith(".json") else out + ".png")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
