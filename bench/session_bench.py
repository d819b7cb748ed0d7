#!/usr/bin/env python3
# Shell session benchmark (issue 26 part 2): `session.run("true")` against a
# plain exec of `true`, side by side in one run, through the Python SDK on
# one sandbox. The two series are interleaved call by call so load on the
# machine hits both alike. Reports p50/p99/mean of the client round trip and
# of the node's own time (node_ms), and the ratio of the p50s (target: a
# session run within 1.5x of a plain exec). Starts its own node (own state
# dir and ports), prints JSON and writes bench/results/session-<date>.json.
#
#   DSEC_BIN=build/cmd/dsec PYTHONPATH=build/bindings/python \
#     /usr/bin/python3 bench/session_bench.py [--n 300] [--backend container|microvm]

import argparse
import datetime
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import free_port

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "build" / "bindings" / "python"))
import dsec  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summary(lat_ms, node_ms):
    return {"n": len(lat_ms), "p50_ms": round(pct(lat_ms, 50), 3),
            "p99_ms": round(pct(lat_ms, 99), 3), "mean_ms": round(statistics.mean(lat_ms), 3),
            "node_p50_ms": round(pct(node_ms, 50), 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300, help="calls per series")
    ap.add_argument("--backend", default="container")
    ap.add_argument("--layers", default="base/busybox@1,base/python@3.11")
    ap.add_argument("--shell", default="/bin/bash")
    ap.add_argument("--store", default=os.environ.get("DSEC_TEST_STORE", "/var/lib/dsec-test/store"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dsec_bin = os.environ.get("DSEC_BIN", str(REPO / "build" / "cmd" / "dsec"))

    state = tempfile.mkdtemp(prefix="dsec-session-bench-", dir="/var/tmp")
    rest_port, listen_port = free_port(), free_port()
    log = open(state + ".log", "wb")
    node = subprocess.Popen([dsec_bin, "node", "--state-dir", state, "--store", args.store,
                             "--rest", f"127.0.0.1:{rest_port}",
                             "--listen", f"127.0.0.1:{listen_port}", "--zram-mb", "0",
                             "--node-id", "session-bench"], stdout=log, stderr=subprocess.STDOUT)
    results = {"bench": "session", "date": datetime.datetime.utcnow().isoformat() + "Z",
               "backend": args.backend, "shell": args.shell,
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
        client = dsec.Client(f"127.0.0.1:{listen_port}")
        sb = client.create(layers=args.layers.split(","), backend=args.backend, memory_mb=512)
        try:
            s = sb.session(shell=args.shell)
            for _ in range(20):  # warm both paths
                s.run("true")
                sb.exec("true")
            lat = {"session": [], "exec": []}
            inner = {"session": [], "exec": []}
            for _ in range(args.n):
                for kind in ("session", "exec"):
                    t0 = time.perf_counter()
                    r = s.run("true") if kind == "session" else sb.exec("true")
                    lat[kind].append((time.perf_counter() - t0) * 1000)
                    inner[kind].append(r.node_ms)
                    assert r.exit_code == 0, r
            results["session_run_true"] = summary(lat["session"], inner["session"])
            results["exec_true"] = summary(lat["exec"], inner["exec"])
            results["ratio_p50"] = round(results["session_run_true"]["p50_ms"]
                                         / results["exec_true"]["p50_ms"], 3)
            results["ratio_mean"] = round(results["session_run_true"]["mean_ms"]
                                          / results["exec_true"]["mean_ms"], 3)
            results["target"] = "session run p50 within 1.5x of a plain exec's"
            results["target_met"] = results["ratio_p50"] <= 1.5
            s.close()
        finally:
            sb.destroy()
            client.close()
        results["host"]["loadavg_at_end"] = os.getloadavg()
    finally:
        node.terminate()
        try:
            node.wait(timeout=60)
        except subprocess.TimeoutExpired:
            node.kill()
        log.close()
        shutil.rmtree(state, ignore_errors=True)
    text = json.dumps(results, indent=2)
    print(text)
    out = args.out or str(REPO / "bench" / "results" /
                          f"session-{datetime.date.today().isoformat()}.json")
    with open(out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
