#!/usr/bin/env python3
# CPU class benchmark (DESIGN.md §6, issue 14): how much slower a small
# latency-class exec gets when batch work shares the node. The task is a
# shell loop exec'd in a latency sandbox (`i=0; while [ $i -lt N ]; ...`),
# timed from the client (REST round trip) and inside the sandbox
# (duration_ms), p50/p99 over --n repetitions, in four scenarios:
#   a. alone;
#   b. next to --hogs sandboxes each spinning --spinners `while :; do :; done`
#      (background execs), created as latency;
#   c. the same hogs created as batch;
#   d. the hogs created as latency, then demoted to batch by
#      PATCH /v1/sandboxes/{id} {"cpu_class": "batch"}.
# The slowdown of each is its p50 (and p99) over that of the task alone,
# measured right before it in the same round (the machine's other load moves
# by the second), pooled over --rounds rounds. Starts its own node (own
# state dir and ports) and prints + writes JSON to
# bench/results/cpu-class-<date>.json.
#
#   DSEC_BIN=build/src/dsec /usr/bin/python3 bench/cpu_class_bench.py [--n 200]

import argparse
import datetime
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import Rest, free_port

REPO = Path(__file__).resolve().parents[1]
NODE_ID = "cpuclass-bench"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summary(lat_ms, inner_ms):
    return {"n": len(lat_ms), "p50_ms": round(pct(lat_ms, 50), 3),
            "p99_ms": round(pct(lat_ms, 99), 3), "mean_ms": round(statistics.mean(lat_ms), 3),
            "in_sandbox_p50_ms": round(pct(inner_ms, 50), 3),
            "in_sandbox_p99_ms": round(pct(inner_ms, 99), 3)}


def measure(rest, sid, cmd, n, warmup=5):
    """(round-trip ms, in-sandbox ms) of n execs of cmd."""
    for _ in range(warmup):
        rest.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": cmd})
    lat, inner = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        r = rest.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": cmd})
        lat.append((time.perf_counter() - t0) * 1000)
        if r["exit_code"] != 0:
            raise RuntimeError(f"latency task failed: {r}")
        inner.append(r["duration_ms"])
    return lat, inner


def start_hogs(rest, count, spinners, cpu, cpu_class):
    ids = []
    for _ in range(count):
        sb = rest.call("POST", "/v1/sandboxes", {"layers": ["base/busybox@1"], "memory_mb": 64,
                                                 "cpu": cpu, "cpu_class": cpu_class})
        ids.append(sb["id"])
        for _ in range(spinners):
            rest.call("POST", f"/v1/sandboxes/{sb['id']}/exec?background=1",
                      {"cmd": "while :; do :; done"})
    return ids


def stop_hogs(rest, ids):
    for sid in ids:
        rest.call("DELETE", f"/v1/sandboxes/{sid}")


def hog_cpu_s(ids):
    """CPU seconds the hogs used so far (usage_usec of their cgroup v2 dirs'
    cpu.stat), to show they spun."""
    total = 0
    for sid in ids:
        try:
            for line in Path(f"/sys/fs/cgroup/unified/dsec/{NODE_ID}/{sid}/cpu.stat") \
                    .read_text().splitlines():
                if line.startswith("usage_usec "):
                    total += int(line.split()[1]) / 1e6
        except OSError:
            pass
    return round(total, 3)


def with_hogs(rest, sid, cmd, args, cpu_class, demote=False):
    """Latencies next to spinning hogs, plus the cores the hogs got meanwhile."""
    ids = start_hogs(rest, args.hogs, args.spinners, args.hog_cpu, cpu_class)
    try:
        if demote:
            for h in ids:
                out = rest.call("PATCH", f"/v1/sandboxes/{h}", {"cpu_class": "batch"})
                assert out["cpu_class"] == "batch", out
        time.sleep(args.settle_s)
        t0 = time.monotonic()
        cpu0 = hog_cpu_s(ids)
        lat, inner = measure(rest, sid, cmd, args.n)
        took = time.monotonic() - t0
        return lat, inner, (hog_cpu_s(ids) - cpu0) / took if took else 0
    finally:
        stop_hogs(rest, ids)


SCENARIOS = [("b_hogs_latency", "latency", False), ("c_hogs_batch", "batch", False),
             ("d_hogs_demoted_by_patch", "latency", True)]


def run_rounds(rest, sid, cmd, args):
    """Each round: for each scenario, the task alone, then next to the hogs.
    Other load on the machine (builds, other nodes) changes by the second, so
    every scenario is compared with the alone runs measured right before it,
    pooled over the rounds; the order of scenarios rotates per round."""
    pooled = {name: {"lat": [], "inner": [], "alone_lat": [], "alone_inner": [], "cores": []}
              for name, _, _ in SCENARIOS}
    for r in range(args.rounds):
        order = SCENARIOS[r % len(SCENARIOS):] + SCENARIOS[:r % len(SCENARIOS)]
        for name, cls, demote in order:
            p = pooled[name]
            lat, inner = measure(rest, sid, cmd, args.n)
            p["alone_lat"] += lat
            p["alone_inner"] += inner
            lat, inner, cores = with_hogs(rest, sid, cmd, args, cls, demote)
            p["lat"] += lat
            p["inner"] += inner
            p["cores"].append(round(cores, 2))
    out, ratios = {}, {}
    for name, _, _ in SCENARIOS:
        p = pooled[name]
        s = summary(p["lat"], p["inner"])
        s["hog_cpu_cores_used_per_round"] = p["cores"]
        a = summary(p["alone_lat"], p["alone_inner"])
        out[name] = s
        out[name + "_adjacent_alone"] = a
        ratios[name] = {"p50": round(s["p50_ms"] / a["p50_ms"] - 1, 3),
                        "p99": round(s["p99_ms"] / a["p99_ms"] - 1, 3),
                        "in_sandbox_p50": round(s["in_sandbox_p50_ms"]
                                                / a["in_sandbox_p50_ms"] - 1, 3)}
    return out, ratios


CPU_NODE_DIR = f"/sys/fs/cgroup/cpu/dsec/{NODE_ID}/_node"


def enter_node_cgroup():
    """--client-beside: moves this client into the node's own cpu group
    (dsec/<node>/_node, beside its sandboxes, made by the node): a client on
    the same machine in the root group competes with the whole dsec group
    there, where batch groups are not idle (an idle group is idle only among
    its siblings). A trainer on another machine does not."""
    with open(CPU_NODE_DIR + "/cgroup.procs", "w") as f:
        f.write(str(os.getpid()))
    return CPU_NODE_DIR


def leave_node_cgroup():
    with open("/sys/fs/cgroup/cpu/cgroup.procs", "w") as f:
        f.write(str(os.getpid()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200, help="latency execs per scenario")
    ap.add_argument("--loop", type=int, default=2000, help="iterations of the shell loop")
    ap.add_argument("--hogs", type=int, default=4, help="spinning sandboxes")
    ap.add_argument("--spinners", type=int, default=2, help="busy loops per hog sandbox")
    ap.add_argument("--hog-cpu", type=float, default=1.0, help="cpu (cores) of each hog")
    ap.add_argument("--settle-s", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3, help="rounds over the scenarios")
    ap.add_argument("--store", default=os.environ.get("DSEC_TEST_STORE", "/var/lib/dsec-test/store"))
    ap.add_argument("--client-beside", action="store_true",
                    help="run this client in the node's cpu group dsec/<node>/_node")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dsec = os.environ.get("DSEC_BIN", str(REPO / "build" / "src" / "dsec"))

    state = tempfile.mkdtemp(prefix="dsec-cpuclass-bench-", dir="/var/tmp")
    rest_port = free_port()
    log = open(state + ".log", "wb")
    node = subprocess.Popen([dsec, "node", "--state-dir", state, "--store", args.store,
                             "--rest", f"127.0.0.1:{rest_port}", "--listen", "127.0.0.1:0",
                             "--node-id", NODE_ID],
                            stdout=log, stderr=subprocess.STDOUT)
    node_cg = None
    cmd = f"i=0; while [ $i -lt {args.loop} ]; do i=$((i+1)); done"
    results = {"bench": "cpu_class", "date": datetime.datetime.utcnow().isoformat() + "Z",
               "host": {"cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()},
               "task": cmd, "hogs": args.hogs, "spinners_per_hog": args.spinners,
               "hog_cpu": args.hog_cpu, "n_per_run": args.n, "rounds": args.rounds}
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", rest_port, timeout=2)
                c.request("GET", "/healthz")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or node.poll() is not None:
                raise SystemExit("node did not start; see " + state + ".log")
            time.sleep(0.1)
        if args.client_beside:
            node_cg = enter_node_cgroup()
        rest = Rest(rest_port)
        sb = rest.call("POST", "/v1/sandboxes", {"layers": ["base/busybox@1"], "memory_mb": 64})
        sid = sb["id"]
        try:
            lat, inner = measure(rest, sid, cmd, args.n)
            results["a_alone"] = summary(lat, inner)
            scen, ratios = run_rounds(rest, sid, cmd, args)
            results.update(scen)
        finally:
            rest.call("DELETE", f"/v1/sandboxes/{sid}")
        # Slowdown = p50 (p99) next to the hogs over p50 (p99) of the alone
        # runs measured right before them (0.173 = 17.3% slower).
        results["slowdown_vs_alone"] = ratios
        results["host"]["loadavg_at_end"] = os.getloadavg()
    finally:
        if node_cg:
            leave_node_cgroup()
        node.send_signal(signal.SIGTERM)
        try:
            results["node_exit"] = node.wait(timeout=60)
        except subprocess.TimeoutExpired:
            node.kill()
            results["node_exit"] = None
        log.close()
    results["client_in_cpu_cgroup"] = node_cg
    print(json.dumps(results, indent=1))
    out = args.out or str(REPO / "bench" / "results"
                          / f"cpu-class-{datetime.date.today().isoformat()}.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")
    if results.get("node_exit") == 0:
        shutil.rmtree(state, ignore_errors=True)
        os.unlink(state + ".log")
    else:
        print("node state left in", state, file=sys.stderr)


if __name__ == "__main__":
    main()
