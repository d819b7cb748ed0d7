#!/usr/bin/env python3
"""E2B onStdout lag: command prints a line -> the SDK's onStdout sees it.

Starts a private node (loopback; root; the store must hold base/python@3.11)
and runs bench/e2b_stdout_lag.mjs --rounds times: the unmodified `e2b` npm SDK
runs a python loop that prints its wall clock (ns) every --gap-ms, --n lines;
onStdout stamps each line on arrival with the same clock. Issue 24's target:
p50 at most 20 ms (a 200 ms poll used to sit in between). The e2b package
comes from $DSEC_NPM_CACHE (default /var/cache/dsec-npm, as the e2e suite
installs it). Prints JSON and writes bench/results/e2b-stdout-lag-<date>.json.

    DSEC_BIN=build/cmd/dsec /usr/bin/python3 bench/e2b_stdout_lag.py [--n 100 --rounds 3]
"""

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
from pathlib import Path

from benchlib import private_node

REPO = Path(__file__).resolve().parents[1]


def pct(xs, p):
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def run_round(module, rest, n, gap_ms):
    url = f"http://{rest}"
    env = dict(os.environ, E2B_MODULE=module, E2B_API_URL=url, E2B_SANDBOX_URL=url,
               E2B_API_KEY="e2b_bench_unused_key", N=str(n), GAP_MS=str(gap_ms))
    p = subprocess.run(["node", str(REPO / "bench" / "e2b_stdout_lag.mjs")], env=env,
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"e2b_stdout_lag.mjs: {p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])["lag_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100, help="lines per round")
    ap.add_argument("--gap-ms", type=int, default=50, help="time between lines")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--store", default=os.environ.get("DSEC_TEST_STORE", "/var/lib/dsec-test/store"))
    ap.add_argument("--out")
    args = ap.parse_args()
    module = Path(os.environ.get("DSEC_NPM_CACHE", "/var/cache/dsec-npm")) / "node_modules/e2b/dist/index.mjs"
    if not module.exists():
        sys.exit(f"e2b_stdout_lag: {module} is missing: run test/e2e/test_e2b.py once "
                 "(it installs e2b@2) or npm install e2b@2 there")
    version = json.loads((module.parents[1] / "package.json").read_text())["version"]
    bin_ = os.environ.get("DSEC_BIN", str(REPO / "build/cmd/dsec"))
    with private_node(bin_, args.store, "e2b-lag") as (rest, listen):
        run_round(str(module), rest, 5, args.gap_ms)  # warm: layer mounts, first create
        lag = []
        for _ in range(args.rounds):
            lag.extend(run_round(str(module), rest, args.n, args.gap_ms))
        report = {
            "bench": "e2b_onstdout_lag",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "e2b_sdk_version": version, "layer": "base/python@3.11",
            "lines_per_round": args.n, "gap_ms": args.gap_ms, "rounds": args.rounds,
            "lag_ms": {"p50": round(pct(lag, 50), 2), "p90": round(pct(lag, 90), 2),
                       "p99": round(pct(lag, 99), 2), "max": round(max(lag), 2),
                       "mean": round(sum(lag) / len(lag), 2), "n": len(lag)},
            "target_p50_ms": 20,
        }
        print(json.dumps(report, indent=2))
        out = args.out or str(REPO / "bench/results" /
                              f"e2b-stdout-lag-{datetime.date.today().isoformat()}.json")
        Path(out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
