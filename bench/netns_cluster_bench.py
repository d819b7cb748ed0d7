#!/usr/bin/env python3
# A real cluster on this machine against one node, side by side in one run
# (issue 28 part 4): N nodes (default 8), each in its own network namespace on
# a bridge (test/cluster/netns_cluster.py), then a 1-node "cluster" the same
# way, and for each:
#   - create throughput: `--creates` busybox creates, `--inflight` at a time,
#     through random nodes (creates/s, p50/p99 latency, failures);
#   - exec latency: `--execs` `true` execs, p50/p99, through the owner;
#   - forward overhead (cluster only): the same execs through a node that is
#     not the owner (one hop over CAF), p50/p99, minus the owner's.
# JSON to --out (default bench/results/netns-cluster-<time>.json), with the
# host's load average before and after: every node shares this machine's
# cores, so the cluster's numbers are a floor for real hosts, not a forecast.
#
#   sudo /usr/bin/python3 bench/netns_cluster_bench.py --nodes 8 --creates 200
import argparse
import concurrent.futures as cf
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test" / "cluster"))
sys.path.insert(0, str(REPO / "test" / "pylib"))

import netns_cluster  # noqa: E402


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(len(xs) * p / 100))] * 1000, 2)


def measure(cluster, creates, inflight, execs, seed):
    rng = random.Random(seed)
    nodes = cluster.nodes
    tag = f"nb{seed}"
    lat, ids, failed = [], [], 0

    def one(_):
        n = rng.choice(nodes)
        t = time.monotonic()
        status, out = n.client.create(memory_mb=64, labels={"bench": tag})
        return time.monotonic() - t, status, out

    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(inflight) as ex:
        for took, status, out in ex.map(one, range(creates)):
            if status == 201:
                lat.append(took)
                ids.append(out["id"])
            else:
                failed += 1
    wall = time.monotonic() - t0
    by_id = {n.node_id: n for n in nodes}
    owner_lat, fwd_lat = [], []
    for i in range(execs):
        sid = ids[i % len(ids)]
        owner = by_id[sid.split(".")[0]]
        t = time.monotonic()
        owner.client.exec(sid, "true")
        owner_lat.append(time.monotonic() - t)
        others = [n for n in nodes if n is not owner]
        if others:
            n = rng.choice(others)
            t = time.monotonic()
            n.client.exec(sid, "true")
            fwd_lat.append(time.monotonic() - t)
    for sid in ids:
        by_id[sid.split(".")[0]].client.delete(sid)
    out = {"nodes": len(nodes), "creates": creates, "inflight": inflight,
           "create_per_s": round(len(ids) / wall, 1), "create_failed": failed,
           "create_p50_ms": pct(lat, 50), "create_p99_ms": pct(lat, 99),
           "exec_owner_p50_ms": pct(owner_lat, 50), "exec_owner_p99_ms": pct(owner_lat, 99),
           "placed_on": sorted({s.split(".")[0] for s in ids})}
    # How evenly the creates spread (the placement ring, issue 28 part 3).
    per = {n.node_id: 0 for n in nodes}
    for sid in ids:
        per[sid.split(".")[0]] += 1
    out["placed_per_node"] = per
    if ids:
        out["placed_max_over_mean"] = round(max(per.values()) / (len(ids) / len(nodes)), 3)
    if fwd_lat:
        out.update(exec_forwarded_p50_ms=pct(fwd_lat, 50), exec_forwarded_p99_ms=pct(fwd_lat, 99),
                   forward_overhead_p50_ms=round(pct(fwd_lat, 50) - pct(owner_lat, 50), 2))
    return out


def run(dsec, store, n, a):
    with netns_cluster.NetnsCluster(dsec, store, n=n) as c:
        t0 = time.monotonic()
        while not c.converged():
            if time.monotonic() - t0 > 90:
                raise RuntimeError(f"{n} nodes did not join within 90 s")
            time.sleep(0.2)
        return measure(c, a.creates, a.inflight, a.execs, a.seed)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--creates", type=int, default=200)
    ap.add_argument("--inflight", type=int, default=16)
    ap.add_argument("--execs", type=int, default=200)
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--dsec", default=os.environ.get("DSEC_BIN", str(REPO / "build/cmd/dsec")))
    ap.add_argument("--store", default=os.environ.get("DSEC_TEST_STORE",
                                                      "/var/lib/dsec-test/store"))
    ap.add_argument("--out", default=str(REPO / "bench/results" /
                                         f"netns-cluster-{time.strftime('%Y%m%d-%H%M%S')}.json"))
    a = ap.parse_args()
    load0 = os.getloadavg()
    try:
        cluster = run(a.dsec, a.store, a.nodes, a)
        single = run(a.dsec, a.store, 1, a)
    except netns_cluster.Refused as e:
        print(f"netns_cluster_bench: refused: {e}", file=sys.stderr)
        return 2
    res = {"cluster": cluster, "one_node": single, "loadavg_before": load0,
           "loadavg_after": os.getloadavg(), "cpus": os.cpu_count()}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
