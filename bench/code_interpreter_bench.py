#!/usr/bin/env python3
# Code interpreter benchmark (issue 26): latency p50/p99 of `run_code("1+1")`
# in a base/code-interpreter@1 container sandbox (the SDK execs the layer's
# client, which asks the server on port 49999 inside the sandbox), side by
# side in one run with a FnCall of the same expression (`print(1+1)` from the
# node's warm pool) and a plain `exec("true")` in the same sandbox (the exec
# path's own floor). All through the Python SDK against a private node.
# Prints and writes JSON to bench/results/code-interpreter-<date>.json.
#
#   DSEC_BIN=build/cmd/dsec DSEC_TEST_STORE=... /usr/bin/python3 bench/code_interpreter_bench.py [--n 200]

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

from benchlib import private_node

REPO = Path(__file__).resolve().parents[1]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def measure(n, fn, check):
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = fn()
        lat.append((time.perf_counter() - t0) * 1000)
        check(r)
    return {"n": n, "p50_ms": round(pct(lat, 50), 3), "p99_ms": round(pct(lat, 99), 3),
            "mean_ms": round(statistics.mean(lat), 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=200, help="calls per measurement")
    ap.add_argument("--store", default=os.environ.get("DSEC_TEST_STORE",
                                                      "/var/lib/dsec-test/store"))
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = ap.parse_args()
    dsec_bin = os.environ.get("DSEC_BIN", str(REPO / "build" / "cmd" / "dsec"))
    sys.path.insert(0, str(REPO / "build" / "bindings" / "python"))
    import dsec

    results = {"bench": "code_interpreter", "date": datetime.datetime.utcnow().isoformat() + "Z",
               "n": args.n}
    with private_node(dsec_bin, args.store, "interp-bench") as (rest, listen):
        c = dsec.Client(listen)
        sb = c.create(["base/code-interpreter@1"], cpu=1, memory_mb=1024)
        try:
            for _ in range(5):  # warm: the server and its default context start with the sandbox
                sb.run_code("1+1")
                c.fncall("python", "print(1+1)")

            def run_code_ok(ex):
                assert ex.text == "2" and ex.error is None, ex

            def fncall_ok(r):
                assert r.exit_code == 0 and r.stdout == "2\n", r

            def exec_ok(r):
                assert r.exit_code == 0, r
            # Interleaved rounds so load changes hit every series alike.
            series = {"run_code": [], "fncall": [], "exec_true": []}
            rounds = 4
            for _ in range(rounds):
                series["run_code"].append(measure(args.n // rounds,
                                                  lambda: sb.run_code("1+1"), run_code_ok))
                series["fncall"].append(measure(args.n // rounds,
                                                lambda: c.fncall("python", "print(1+1)"),
                                                fncall_ok))
                series["exec_true"].append(measure(args.n // rounds,
                                                   lambda: sb.exec("true"), exec_ok))
            for name, parts in series.items():
                results[name] = {"n": sum(p["n"] for p in parts),
                                 "p50_ms": round(statistics.median(p["p50_ms"] for p in parts), 3),
                                 "p99_ms": round(max(p["p99_ms"] for p in parts), 3),
                                 "rounds": parts}
            results["run_code_over_fncall_p50"] = round(
                results["run_code"]["p50_ms"] / results["fncall"]["p50_ms"], 2)
        finally:
            sb.destroy()
            c.close()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "code-interpreter-%s.json"
                        % datetime.datetime.utcnow().strftime("%Y%m%d-%H%M%S"))
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    print(json.dumps({k: v for k, v in results.items() if k != "rounds"}, indent=2))
    print("written to", path)


if __name__ == "__main__":
    main()
