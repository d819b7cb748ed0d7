#!/usr/bin/env python3
# FnCall benchmark: latency (p50/p99) and sustained calls/s of POST /v1/fncall
# for a Python `print(1)` and a bash `echo 1`, against, in the same run:
#   - a plain host `python3 -c 'print(1)'` (subprocess), the cold-start floor;
#   - a container exec of `python3 -c 'print(1)'` in a running python sandbox.
# Python latency is measured twice: paced (--rate calls/s, below the pool's
# capacity, so each call finds a warm process: the latency a caller sees) and
# back to back (one caller saturating the pool: latency includes waiting for
# a worker to finish resetting). Throughput runs also report the CPU the
# worker sandboxes used per call (their cgroup v2 cpu.stat), which does not
# depend on the machine's load.
# The host baseline is Debian's /usr/bin/python3 (a `python3` on PATH may be a
# pyenv shim, a shell script that costs ~1 s by itself). Starts its own node
# (own state dir and ports) and prints + writes JSON to
# bench/results/fncall-<date>.json.
#
#   DSEC_BIN=build/cmd/dsec /usr/bin/python3 bench/fncall_bench.py [--n 500] [--secs 5]

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
import threading
import time
from pathlib import Path

from benchlib import Rest, free_port

REPO = Path(__file__).resolve().parents[1]
NODE_ID = "fncall-bench"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summary(lat_ms, extra=None):
    out = {"n": len(lat_ms), "p50_ms": round(pct(lat_ms, 50), 3),
           "p99_ms": round(pct(lat_ms, 99), 3), "mean_ms": round(statistics.mean(lat_ms), 3)}
    out.update(extra or {})
    return out


def timed(n, fn):
    lat, inner = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        r = fn()
        lat.append((time.perf_counter() - t0) * 1000)
        if isinstance(r, dict):
            inner.append(r.get("duration_ms", 0))
    return lat, inner


def paced(n, rate, fn):
    """`n` calls at `rate` per second (a caller below the pool's capacity:
    each call finds a worker whose next process is already warm)."""
    lat, inner = [], []
    gap = 1.0 / rate
    for _ in range(n):
        t0 = time.perf_counter()
        r = fn()
        lat.append((time.perf_counter() - t0) * 1000)
        inner.append(r.get("duration_ms", 0))
        time.sleep(max(0.0, gap - (time.perf_counter() - t0)))
    return lat, inner


def pool_cpu_ms(node_id):
    """CPU time used so far by the node's fncall worker sandboxes (usage_usec
    of their cgroup v2 dirs): what a call costs the machine, whatever the load."""
    root = Path("/sys/fs/cgroup/unified/dsec") / node_id
    total = 0
    for d in root.glob("*fncall*"):
        try:
            for line in (d / "cpu.stat").read_text().splitlines():
                if line.startswith("usage_usec "):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1e3


def throughput(port, body, threads, secs, node_id=None):
    count = [0] * threads
    errors = [0] * threads
    stop = time.monotonic() + secs

    def run(i):
        rest = Rest(port)
        while time.monotonic() < stop:
            try:
                r = rest.call("POST", "/v1/fncall", body)
                if r["exit_code"] == 0:
                    count[i] += 1
                else:
                    errors[i] += 1
            except Exception:
                errors[i] += 1
                rest = Rest(port)

    t0 = time.monotonic()
    cpu0 = pool_cpu_ms(node_id) if node_id else 0
    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    took = time.monotonic() - t0
    out = {"threads": threads, "secs": round(took, 2), "calls": sum(count),
           "errors": sum(errors), "calls_per_s": round(sum(count) / took, 1)}
    if node_id and sum(count):
        # Retired workers take their cgroups along: a lower bound.
        out["sandbox_cpu_ms_per_call"] = round((pool_cpu_ms(node_id) - cpu0) / sum(count), 2)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500, help="sequential calls per latency series")
    ap.add_argument("--baseline-n", type=int, default=100)
    ap.add_argument("--secs", type=float, default=5, help="seconds per throughput run")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rate", type=float, default=20,
                    help="calls per second of the paced latency series")
    ap.add_argument("--store", default=os.environ.get("DSEC_TEST_STORE", "/var/lib/dsec-test/store"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dsec = os.environ.get("DSEC_BIN", str(REPO / "build" / "src" / "dsec"))

    state = tempfile.mkdtemp(prefix="dsec-fncall-bench-", dir="/var/tmp")
    rest_port = free_port()
    env = dict(os.environ, DSEC_FNCALL_PREWARM="1")
    log = open(state + ".log", "wb")
    node = subprocess.Popen([dsec, "node", "--state-dir", state, "--store", args.store,
                             "--rest", f"127.0.0.1:{rest_port}", "--listen", "127.0.0.1:0",
                             "--node-id", NODE_ID], stdout=log, stderr=subprocess.STDOUT,
                            env=env)
    results = {"bench": "fncall", "date": datetime.datetime.utcnow().isoformat() + "Z",
               "host": {"cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()}}
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
        py = {"language": "python", "code": "print(1)"}
        sh = {"language": "bash", "code": "echo 1"}
        # Warm: the pool starts at node start; the first calls wait for it.
        for _ in range(30):
            rest.call("POST", "/v1/fncall", py)
            rest.call("POST", "/v1/fncall", sh)

        lat, inner = paced(args.n, args.rate, lambda: rest.call("POST", "/v1/fncall", py))
        results["fncall_python_print"] = summary(lat, {"server_p50_ms": round(pct(inner, 50), 3),
                                                       "rate_per_s": args.rate})
        lat, inner = timed(args.n, lambda: rest.call("POST", "/v1/fncall", py))
        results["fncall_python_print_back_to_back"] = summary(
            lat, {"server_p50_ms": round(pct(inner, 50), 3)})
        lat, inner = timed(args.n, lambda: rest.call("POST", "/v1/fncall", sh))
        results["fncall_bash_echo"] = summary(lat, {"server_p50_ms": round(pct(inner, 50), 3)})
        # The first run under load also grows the pool (each new worker
        # starts Python and preloads); the second runs on the grown pool.
        results["fncall_python_throughput_growing"] = throughput(rest_port, py, args.threads,
                                                                 args.secs)
        results["fncall_python_throughput"] = throughput(rest_port, py, args.threads, args.secs,
                                                         NODE_ID)
        results["fncall_bash_throughput"] = throughput(rest_port, sh, args.threads, args.secs,
                                                       NODE_ID)

        lat, _ = timed(args.baseline_n, lambda: subprocess.run(
            ["/usr/bin/python3", "-c", "print(1)"], stdout=subprocess.DEVNULL, check=True))
        results["host_python3_c"] = summary(lat)

        sb = rest.call("POST", "/v1/sandboxes", {"layers": ["base/python@3.11"], "memory_mb": 512})
        sid = sb["id"]
        try:
            ex = {"cmd": ["python3", "-c", "print(1)"]}
            for _ in range(5):
                rest.call("POST", f"/v1/sandboxes/{sid}/exec", ex)
            lat, inner = timed(args.baseline_n, lambda: rest.call("POST", f"/v1/sandboxes/{sid}/exec", ex))
            results["container_exec_python3_c"] = summary(
                lat, {"in_sandbox_p50_ms": round(pct(inner, 50), 3)})
            ex = {"cmd": ["/bin/true"]}
            lat, _ = timed(args.baseline_n, lambda: rest.call("POST", f"/v1/sandboxes/{sid}/exec", ex))
            results["container_exec_true"] = summary(lat)
        finally:
            c = http.client.HTTPConnection("127.0.0.1", rest_port, timeout=60)
            c.request("DELETE", f"/v1/sandboxes/{sid}")
            c.getresponse().read()
        f = results["fncall_python_print"]["p50_ms"]
        results["ratios"] = {
            "host_python3_c_over_fncall_p50": round(results["host_python3_c"]["p50_ms"] / f, 2),
            "container_exec_over_fncall_p50": round(
                results["container_exec_python3_c"]["p50_ms"] / f, 2),
        }
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
                          / f"fncall-{datetime.date.today().isoformat()}.json")
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
