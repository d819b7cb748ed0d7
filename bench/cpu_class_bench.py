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
# The slowdown of each is its p50 (and p99) over a's. Starts its own node (own
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
    return summary(lat, inner)


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
    ids = start_hogs(rest, args.hogs, args.spinners, args.hog_cpu, cpu_class)
    try:
        if demote:
            for h in ids:
                out = rest.call("PATCH", f"/v1/sandboxes/{h}", {"cpu_class": "batch"})
                assert out["cpu_class"] == "batch", out
        time.sleep(args.settle_s)
        t0 = time.monotonic()
        cpu0 = hog_cpu_s(ids)
        res = measure(rest, sid, cmd, args.n)
        took = time.monotonic() - t0
        res["hog_cpu_cores_used"] = round((hog_cpu_s(ids) - cpu0) / took, 2) if took else 0
        return res
    finally:
        stop_hogs(rest, ids)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200, help="latency execs per scenario")
    ap.add_argument("--loop", type=int, default=2000, help="iterations of the shell loop")
    ap.add_argument("--hogs", type=int, default=4, help="spinning sandboxes")
    ap.add_argument("--spinners", type=int, default=2, help="busy loops per hog sandbox")
    ap.add_argument("--hog-cpu", type=float, default=1.0, help="cpu (cores) of each hog")
    ap.add_argument("--settle-s", type=float, default=1.0)
    ap.add_argument("--store", default=os.environ.get("DSEC_TEST_STORE", "/var/lib/dsec-test/store"))
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
    cmd = f"i=0; while [ $i -lt {args.loop} ]; do i=$((i+1)); done"
    results = {"bench": "cpu_class", "date": datetime.datetime.utcnow().isoformat() + "Z",
               "host": {"cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()},
               "task": cmd, "hogs": args.hogs, "spinners_per_hog": args.spinners,
               "hog_cpu": args.hog_cpu}
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
        rest = Rest(rest_port)
        sb = rest.call("POST", "/v1/sandboxes", {"layers": ["base/busybox@1"], "memory_mb": 64})
        sid = sb["id"]
        try:
            results["a_alone"] = measure(rest, sid, cmd, args.n)
            results["b_hogs_latency"] = with_hogs(rest, sid, cmd, args, "latency")
            results["c_hogs_batch"] = with_hogs(rest, sid, cmd, args, "batch")
            results["d_hogs_demoted_by_patch"] = with_hogs(rest, sid, cmd, args, "latency",
                                                          demote=True)
            results["a_alone_again"] = measure(rest, sid, cmd, args.n)
        finally:
            rest.call("DELETE", f"/v1/sandboxes/{sid}")
        base = results["a_alone"]
        results["slowdown_vs_alone"] = {
            k: {"p50": round(results[k]["p50_ms"] / base["p50_ms"] - 1, 3),
                "p99": round(results[k]["p99_ms"] / base["p99_ms"] - 1, 3),
                "in_sandbox_p50": round(results[k]["in_sandbox_p50_ms"]
                                        / base["in_sandbox_p50_ms"] - 1, 3)}
            for k in ("b_hogs_latency", "c_hogs_batch", "d_hogs_demoted_by_patch",
                      "a_alone_again")}
        results["host"]["loadavg_at_end"] = os.getloadavg()
    finally:
        node.send_signal(signal.SIGTERM)
        try:
            results["node_exit"] = node.wait(timeout=60)
        except subprocess.TimeoutExpired:
            node.kill()
            results["node_exit"] = None
        log.close()
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
