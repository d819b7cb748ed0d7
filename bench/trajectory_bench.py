#!/usr/bin/env python3
"""Trajectory log bench: what logging costs an exec, side by side in one run.

    PYTHONPATH=build/bindings/python python3 bench/trajectory_bench.py \
        --dsec-bin build/cmd/dsec --store /var/lib/dsec-test/store

Starts three private nodes (root; the store must hold base/busybox@1) that
differ only in their log: `--no-trajectory` (off), the default (on: one
write(2) per record before the answer, no fsync), and `--trajectory-fsync`
(on + fdatasync per record). Through the Python SDK it then runs, round-robin
across the three so machine noise hits each alike:
  1. `--samples` execs of `true` (no step) per node: p50/p99 of the round
     trip and of the node's own time (ExecResult.node_ms);
  2. the same with a fresh `step` key each (the step is checked against the
     log before the exec runs);
  3. `--samples` replayed steps on the default node (the answer comes from
     the log, nothing runs);
  4. execs whose 64 KiB output goes to a blob, per node;
  5. `--creates` sequential creates per node (the log's spec record is
     written before a create answers).
Prints one JSON report; --out FILE writes it too (default
bench/results/trajectory-<date>.json). Percentiles are nearest-rank.
"""

import argparse
import datetime
import http.client
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Rest, free_port  # noqa: E402
import dsec  # noqa: E402

LAYER = "base/busybox@1"
VARIANTS = {"off": ["--no-trajectory"], "on": [], "on_fsync": ["--trajectory-fsync"]}


def pct(xs, p):
    xs = sorted(xs)
    return xs[max(0, math.ceil(p / 100 * len(xs)) - 1)]


def summary(xs):
    return {"p50_ms": round(pct(xs, 50), 4), "p99_ms": round(pct(xs, 99), 4), "n": len(xs)}


def start_node(dsec_bin, store, name, extra):
    state = tempfile.mkdtemp(prefix=f"dsec-trajbench-{name}-", dir="/var/tmp")
    rest, listen = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    log = open(state + ".log", "wb")
    proc = subprocess.Popen([dsec_bin, "node", "--state-dir", state, "--store", store,
                             "--rest", rest, "--listen", listen, "--zram-mb", "0",
                             "--node-id", f"trajbench-{name.replace('_', '-')}", *extra],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            Rest(rest).call("GET", "/healthz")
            return proc, state, listen
        except (OSError, RuntimeError, http.client.HTTPException):
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"node {name} did not start; see {state}.log")


def timed(sb, cmd, **kw):
    t0 = time.perf_counter()
    r = sb.exec(cmd, **kw)
    return (time.perf_counter() - t0) * 1000, r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dsec-bin", default="build/cmd/dsec")
    ap.add_argument("--store", default="/var/lib/dsec-test/store")
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--creates", type=int, default=40)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    nodes = {}
    try:
        for name, extra in VARIANTS.items():
            nodes[name] = start_node(args.dsec_bin, args.store, name, extra)
        clients = {n: dsec.Client(v[2]) for n, v in nodes.items()}
        sbs = {n: c.create([LAYER], cpu=1, memory_mb=128) for n, c in clients.items()}
        for sb in sbs.values():
            for _ in range(args.warmup):
                sb.exec("true")
        plain = {n: ([], []) for n in sbs}
        stepped = {n: ([], []) for n in sbs}
        blob = {n: ([], []) for n in sbs}
        for i in range(args.samples):
            for n, sb in sbs.items():
                rt, r = timed(sb, "true")
                plain[n][0].append(rt)
                plain[n][1].append(r.node_ms)
                rt, r = timed(sb, "true", step=f"s{i}")
                stepped[n][0].append(rt)
                stepped[n][1].append(r.node_ms)
                if i % 5 == 0:
                    rt, r = timed(sb, "head -c 65536 /dev/zero")
                    blob[n][0].append(rt)
                    blob[n][1].append(r.node_ms)
        creates = {n: [] for n in clients}
        for _ in range(args.creates):
            for n, c in clients.items():
                t0 = time.perf_counter()
                extra = c.create([LAYER], cpu=1, memory_mb=128)
                creates[n].append((time.perf_counter() - t0) * 1000)
                extra.destroy()
        replayed = ([], [])
        for i in range(args.samples):
            rt, r = timed(sbs["on"], "true", step=f"s{i}")
            assert r.replayed
            replayed[0].append(rt)
            replayed[1].append(r.node_ms)

        def block(d):
            return {n: {"round_trip": summary(v[0]), "node": summary(v[1])} for n, v in d.items()}

        report = {
            "bench": "trajectory",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "cpus": os.cpu_count(), "samples": args.samples,
            "variants": {n: " ".join(["dsec node", *e]) for n, e in VARIANTS.items()},
            "exec_true": block(plain),
            "exec_true_new_step": block(stepped),
            "exec_64k_output": block(blob),
            "create": {n: summary(v) for n, v in creates.items()},
            "replayed_step_on": {"round_trip": summary(replayed[0]), "node": summary(replayed[1])},
        }
        on, off = report["exec_true"]["on"]["node"], report["exec_true"]["off"]["node"]
        report["log_cost_node_p50_ms"] = round(on["p50_ms"] - off["p50_ms"], 4)
        fs = report["exec_true"]["on_fsync"]["node"]
        report["fsync_cost_node_p50_ms"] = round(fs["p50_ms"] - off["p50_ms"], 4)
        for sb in sbs.values():
            sb.destroy()
        for c in clients.values():
            c.close()
    finally:
        for proc, state, _ in nodes.values():
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
            shutil.rmtree(state, ignore_errors=True)
            try:
                os.unlink(state + ".log")
            except OSError:
                pass
    text = json.dumps(report, indent=2)
    print(text)
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   f"trajectory-{datetime.date.today().isoformat()}.json")
    with open(out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
