# One seeded fault run (issue 28): the workload runs while the nemesis applies
# its schedule; then a final heal, convergence, and the checker. Used by the
# CI test (test_faults.py, every kind once) and by bench/faults.py (longer
# runs, a JSON history summary).
import json
import os
import shutil
import time

import checker
import nemesis as nem
import workload as wl


def run(cluster, seed, kinds=None, rounds=1, hold_s=8.0, quiet_s=4.0, workers=3,
        history_path=None):
    """Returns (summary dict, violations list). Leaves the run's sandboxes
    deleted (the checker runs first)."""
    tag = f"dsf{seed}x{int(time.time()) % 100000}"
    h = wl.History()
    h.tag = tag
    load = wl.Workload(cluster, h, tag, seed, workers=workers)
    nemesis = nem.Nemesis(cluster, h, seed, hold_s=hold_s, quiet_s=quiet_s)
    order = []
    for _ in range(rounds):
        order += nemesis.schedule(kinds)
    h.event("schedule", seed=seed, order=order,
            not_available={"delay": "no sch_netem in this kernel (CONFIG_NET_SCH_NETEM "
                                    "is not set)"})
    t0 = time.monotonic()
    load.start()
    try:
        time.sleep(quiet_s)
        nemesis.run(order, lambda: list(load.live))
    finally:
        load.stop()
        cluster.heal()
    nemesis.converge("final heal")
    history = h.to_json()
    violations = checker.check(history, cluster, tag)
    place_bad, place_ids = checker.placement_uses_every_node(cluster, tag)
    violations += place_bad
    summary = summarize(history, violations, seed, order, time.monotonic() - t0)
    if history_path:
        with open(history_path, "w") as f:
            json.dump({"summary": summary, **history}, f, indent=1, default=str)
        if violations:  # the nodes' logs go with the history
            logs = history_path + ".logs"
            os.makedirs(logs, exist_ok=True)
            for n in cluster.nodes:
                if os.path.exists(n.log_path):
                    shutil.copy(n.log_path, os.path.join(logs, n.node_id + ".log"))
    cleanup(cluster, tag, place_ids)
    return summary, violations


def summarize(history, violations, seed, order, seconds):
    calls = history["calls"]
    by_op = {}
    for r in calls:
        s = by_op.setdefault(r["op"], {"calls": 0, "ok": 0, "503": 0, "other": 0,
                                       "max_s": 0.0})
        s["calls"] += 1
        took = r["end"] - r["start"]
        s["max_s"] = round(max(s["max_s"], took), 3)
        if r["status"] in (200, 201):
            s["ok"] += 1
        elif r["status"] == 503:
            s["503"] += 1
        else:
            s["other"] += 1
    converge = [e for e in history["events"] if e["kind"] in ("converged", "not-converged")]
    return {"seed": seed, "faults": order, "seconds": round(seconds, 1), "calls": len(calls),
            "by_op": by_op,
            "converge_s": {e["after"]: e.get("seconds") for e in converge},
            "violations": violations}


def cleanup(cluster, tag, extra_ids=()):
    """Deletes the run's sandboxes through a live node."""
    n = next(n for n in cluster.nodes if n.alive())
    for labels in ({"dsf": tag}, {"dsf": tag + "-place"}):
        status, out = n.client.list(labels)
        if status == 200:
            for s in out["sandboxes"]:
                n.client.delete(s["id"])
    for sid in extra_ids:
        n.client.delete(sid)
