#!/usr/bin/env python3
"""E2B SDK vs native Python SDK: create -> first command output, in one run.

Starts a private node (loopback; root; the store must hold base/busybox@1) and,
in --rounds alternating rounds, runs --n iterations of each:
  e2b:    the unmodified `e2b` npm SDK (node bench/e2b_bench.mjs):
          Sandbox.create('busybox') then commands.run('echo hi') with onStdout;
  native: dsec.Client.create(layers=['base/busybox@1']) then exec_stream('echo hi').
Both time create alone and create -> first stdout byte; the destroy is not timed.
The e2b package comes from $DSEC_NPM_CACHE (default /var/cache/dsec-npm, as the
e2e suite installs it). Prints JSON and writes bench/results/e2b-<date>.json.

    DSEC_BIN=build/cmd/dsec PYTHONPATH=build/bindings/python \\
        /usr/bin/python3 bench/e2b_bench.py [--n 20 --rounds 3]
"""

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from benchlib import private_node
import dsec

REPO = Path(__file__).resolve().parents[1]


def pct(xs, p):
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def summary(xs):
    return {"p50_ms": round(pct(xs, 50), 2), "p99_ms": round(pct(xs, 99), 2),
            "mean_ms": round(sum(xs) / len(xs), 2), "n": len(xs)}


def native_round(addr, n):
    c = dsec.Client(addr)
    create, first = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        sb = c.create(layers=["base/busybox@1"])
        t1 = time.perf_counter()
        tf = None
        for chunk in sb.exec_stream("echo hi"):
            if tf is None and chunk.stream == "stdout":
                tf = time.perf_counter()
        create.append((t1 - t0) * 1000)
        first.append(((tf or time.perf_counter()) - t0) * 1000)
        sb.destroy()
    return create, first


def e2b_round(module, rest, n):
    url = f"http://{rest}"
    env = dict(os.environ, E2B_MODULE=module, E2B_API_URL=url, E2B_SANDBOX_URL=url,
               E2B_API_KEY="e2b_bench_unused_key", N=str(n))
    p = subprocess.run(["node", str(REPO / "bench" / "e2b_bench.mjs")], env=env,
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"e2b_bench.mjs: {p.stderr[-3000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    return out["create_ms"], out["first_output_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--store", default=os.environ.get("DSEC_TEST_STORE", "/var/lib/dsec-test/store"))
    ap.add_argument("--out")
    args = ap.parse_args()
    module = Path(os.environ.get("DSEC_NPM_CACHE", "/var/cache/dsec-npm")) / "node_modules/e2b/dist/index.mjs"
    if not module.exists():
        sys.exit(f"e2b_bench: {module} is missing: run test/e2e/test_e2b.py once "
                 "(it installs e2b@2) or npm install e2b@2 there")
    version = json.loads((module.parents[1] / "package.json").read_text())["version"]
    bin_ = os.environ.get("DSEC_BIN", str(REPO / "build/cmd/dsec"))
    with private_node(bin_, args.store, "e2b-bench") as (rest, listen):
        res = {"e2b": ([], []), "native": ([], [])}
        e2b_round(module, rest, 2)  # warm: layer mounts, node's first create
        native_round(listen, 2)
        for _ in range(args.rounds):
            for name in ("e2b", "native"):
                c, f = e2b_round(module, rest, args.n) if name == "e2b" else native_round(listen, args.n)
                res[name][0].extend(c)
                res[name][1].extend(f)
        report = {
            "bench": "e2b_vs_native_create_to_first_output",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "e2b_sdk_version": version, "layer": "base/busybox@1",
            "n_per_round": args.n, "rounds": args.rounds,
            "e2b": {"create": summary(res["e2b"][0]), "first_output": summary(res["e2b"][1])},
            "native": {"create": summary(res["native"][0]),
                       "first_output": summary(res["native"][1])},
        }
        report["ratio_first_output_p50"] = round(
            report["e2b"]["first_output"]["p50_ms"] / report["native"]["first_output"]["p50_ms"], 2)
        print(json.dumps(report, indent=2))
        out = args.out or str(REPO / "bench/results" /
                              f"e2b-{datetime.date.today().isoformat()}.json")
        Path(out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
