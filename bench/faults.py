#!/usr/bin/env python3
# Long fault runs (issue 28): the harness of test/cluster (N real nodes in
# network namespaces, the nemesis, the workload and the checker) for as many
# rounds of the fault schedule as asked, then a JSON summary: the seed, the
# faults in order, calls per operation (ok, 503, other, slowest), the
# convergence time after each heal, and every violation the checker found.
# The full history (every call and answer) goes beside it.
#
#   sudo /usr/bin/python3 bench/faults.py --nodes 5 --rounds 3 --seed 7 \
#        --out bench/results/faults-$(date +%Y%m%d).json
#
# Needs root and network namespaces (it refuses, saying which, without them).
# Exit code: 0 with no violation, 1 with any, 2 when the harness refused.
import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test" / "cluster"))
sys.path.insert(0, str(REPO / "test" / "pylib"))

import fault_run  # noqa: E402
import nemesis  # noqa: E402
import netns_cluster  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description="Long seeded fault runs with a JSON summary.")
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2, help="passes over every fault kind")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--hold-s", type=float, default=8.0, help="how long each fault lasts")
    ap.add_argument("--quiet-s", type=float, default=4.0, help="calm between faults")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--kinds", default=",".join(nemesis.KINDS))
    ap.add_argument("--dsec", default=os.environ.get("DSEC_BIN", str(REPO / "build/cmd/dsec")))
    ap.add_argument("--store", default=os.environ.get("DSEC_TEST_STORE",
                                                      "/var/lib/dsec-test/store"))
    ap.add_argument("--out", default=str(REPO / "bench/results" /
                                         f"faults-{time.strftime('%Y%m%d-%H%M%S')}.json"))
    a = ap.parse_args()
    kinds = [k for k in a.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in nemesis.KINDS]
    if unknown:
        ap.error(f"--kinds: unknown {unknown}; known: {nemesis.KINDS} "
                 "(delay is not available: the kernel has no sch_netem)")
    try:
        cluster = netns_cluster.NetnsCluster(a.dsec, a.store, n=a.nodes)
    except netns_cluster.Refused as e:
        print(f"faults: refused: {e}", file=sys.stderr)
        return 2
    history = a.out.replace(".json", "") + "-history.json"
    try:
        cluster.setup()
        t0 = time.monotonic()
        while not cluster.converged():
            if time.monotonic() - t0 > 60:
                raise RuntimeError("the nodes did not join within 60 s")
            time.sleep(0.2)
        summary, violations = fault_run.run(cluster, a.seed, kinds=kinds, rounds=a.rounds,
                                            hold_s=a.hold_s, quiet_s=a.quiet_s,
                                            workers=a.workers, history_path=history)
    finally:
        errors = cluster.close()
    summary.update(nodes=a.nodes, rounds=a.rounds, hold_s=a.hold_s, history=history,
                   teardown_errors=errors, loadavg=os.getloadavg())
    with open(a.out, "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: summary[k] for k in ("seed", "faults", "calls", "converge_s")},
                     indent=1))
    print(f"{len(violations)} violations; summary {a.out}, history {history}")
    for v in violations[:40]:
        print("  " + v)
    return 1 if violations or errors else 0


if __name__ == "__main__":
    sys.exit(main())
