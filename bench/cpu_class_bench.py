#!/usr/bin/env python3
# CPU class benchmark (DESIGN.md §6, issue 14): how much slower a small
# latency-class exec gets when batch work shares the node. The task is a
# shell loop exec'd in a latency sandbox (`i=0; while [ $i -lt N ]; ...`),
# timed from the client (REST round trip) and inside the sandbox
# (duration_ms), p50/p99 over --n repetitions, in these scenarios:
#   a. alone;
#   b. next to --hogs sandboxes each spinning --spinners `while :; do :; done`
#      (background execs), created as latency;
#   c. the same hogs created as batch (cpu groups under the top-level idle
#      group dsec-batch/<node>/<id>);
#   c0. the hogs created as batch, then their cpu group put back by this
#      bench where it was before dsec-batch existed: dsec/<node>/<id>
#      (cpu.shares 2, cpu.idle 1, tasks SCHED_IDLE), the layout whose idle
#      leaf weighed as much as the whole dsec group against the root cgroup;
#   d. the hogs created as latency, then demoted to batch by
#      PATCH /v1/sandboxes/{id} {"cpu_class": "batch"}.
# Each scenario is measured with this client in two places, side by side
# over the same hogs: in the root cpu cgroup (as a trainer started from a
# shell on the node's machine is) and beside the node (dsec/<node>/_node).
# The slowdown of each is its p50 (and p99) over that of the task alone in
# the same place, where "alone" is measured interleaved with it: blocks of
# --block execs with the hogs frozen (cgroup freezer) and thawed alternate,
# so both sides of a ratio see the same background load (other work on the
# machine moves by the second). Samples are pooled over --rounds rounds;
# the order of scenarios and of places rotates. Starts its own node (own
# state dir and ports) and prints + writes JSON to
# bench/results/cpu-class-<date>.json.
#
#   DSEC_BIN=build/cmd/dsec /usr/bin/python3 bench/cpu_class_bench.py [--n 100] [--rounds 6]

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
    """(round-trip ms, in-sandbox ms) of n execs of cmd."""
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
    return lat, inner


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


CPU_ROOT = "/sys/fs/cgroup/cpu"
CPU_NODE_DIR = f"{CPU_ROOT}/dsec/{NODE_ID}/_node"
PLACES = {"client_in_root_cgroup": CPU_ROOT, "client_beside_node": CPU_NODE_DIR}


def enter(cpu_dir):
    """Moves this client (every thread) into the cpu group `cpu_dir`."""
    with open(cpu_dir + "/cgroup.procs", "w") as f:
        f.write(str(os.getpid()))


def own_cpu_group():
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if "cpu" in ctrls.split(","):
            return CPU_ROOT + ("" if path == "/" else path)
    return CPU_ROOT


def move_procs(src, dst):
    """Every process of cpu group src into dst, until src is empty."""
    for _ in range(64):
        pids = Path(src + "/cgroup.procs").read_text().split()
        if not pids:
            return
        for pid in pids:
            try:
                with open(dst + "/cgroup.procs", "w") as f:
                    f.write(pid)
            except ProcessLookupError:
                pass


def old_layout(ids, back=False):
    """c0: the hogs' cpu groups moved by hand from dsec-batch/<node>/<id> to
    dsec/<node>/<id> (made idle, minimum weight) and, with back, returned."""
    for sid in ids:
        new = f"{CPU_ROOT}/dsec-batch/{NODE_ID}/{sid}"
        old = f"{CPU_ROOT}/dsec/{NODE_ID}/{sid}"
        if back:
            move_procs(old, new)
            os.rmdir(old)
            continue
        os.makedirs(old, exist_ok=True)
        Path(old + "/cpu.shares").write_text("2")
        Path(old + "/cpu.idle").write_text("1")
        move_procs(new, old)


def freeze(ids, frozen, wait_s=1.0):
    """Freezes (thaws) the hogs with their freezer cgroups; True once every
    one is FROZEN (a batch task starved by the host's other load may take a
    while to stop: it barely runs meanwhile either way)."""
    state = "FROZEN" if frozen else "THAWED"
    files = [Path(f"/sys/fs/cgroup/freezer/dsec/{NODE_ID}/{sid}/freezer.state") for sid in ids]
    for f in files:
        f.write_text(state)
    deadline = time.monotonic() + (wait_s if frozen else 0)
    while frozen:
        if all(f.read_text().strip() == "FROZEN" for f in files):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def with_hogs(rest, sid, cmd, args, cpu_class, places, demote=False, old=False):
    """{place: (alone lat, alone inner, lat, inner)} next to spinning hogs, in
    blocks of --block execs: hogs frozen (alone) then thawed, in each place,
    so both sides of every ratio are measured within the same seconds; plus
    the cores the hogs got while thawed and how often freezing took > 1 s."""
    ids = start_hogs(rest, args.hogs, args.spinners, args.hog_cpu, cpu_class)
    out = {pl: ([], [], [], []) for pl in places}
    slow_freezes, thawed_s, cpu_s = 0, 0.0, 0.0
    try:
        if demote:
            for h in ids:
                r = rest.call("PATCH", f"/v1/sandboxes/{h}", {"cpu_class": "batch"})
                assert r["cpu_class"] == "batch", r
        if old:
            old_layout(ids)
        time.sleep(args.settle_s)
        for b in range(max(1, args.n // args.block)):
            order = places if b % 2 == 0 else places[::-1]
            slow_freezes += not freeze(ids, True)
            for place in order:
                enter(PLACES[place])
                lat, inner = measure(rest, sid, cmd, args.block, warmup=1)
                out[place][0].extend(lat)
                out[place][1].extend(inner)
            freeze(ids, False)
            time.sleep(args.settle_block_s)
            t0, c0 = time.monotonic(), hog_cpu_s(ids)
            for place in order:
                enter(PLACES[place])
                lat, inner = measure(rest, sid, cmd, args.block, warmup=1)
                out[place][2].extend(lat)
                out[place][3].extend(inner)
            thawed_s += time.monotonic() - t0
            cpu_s += hog_cpu_s(ids) - c0
        if old:
            old_layout(ids, back=True)
        return out, (cpu_s / thawed_s if thawed_s else 0), slow_freezes
    finally:
        enter(CPU_ROOT)
        freeze(ids, False)
        stop_hogs(rest, ids)


SCENARIOS = [("b_hogs_latency", "latency", False, False),
             ("c_hogs_batch", "batch", False, False),
             ("c0_hogs_batch_old_layout_in_dsec", "batch", False, True),
             ("d_hogs_demoted_by_patch", "latency", True, False)]


def run_rounds(rest, sid, cmd, args):
    """Each round runs every scenario once (the order rotates per round);
    the samples of each scenario and place are pooled over the rounds."""
    names = [x[0] for x in SCENARIOS]
    pooled = {pl: {n: ([], [], [], []) for n in names} for pl in PLACES}
    cores = {n: [] for n in names}
    slow = {n: 0 for n in names}
    for r in range(args.rounds):
        order = SCENARIOS[r % len(SCENARIOS):] + SCENARIOS[:r % len(SCENARIOS)]
        places = list(PLACES) if r % 2 == 0 else list(PLACES)[::-1]
        for name, cls, demote, old in order:
            got, used, slow_freezes = with_hogs(rest, sid, cmd, args, cls, places, demote, old)
            cores[name].append(round(used, 2))
            slow[name] += slow_freezes
            for place, lists in got.items():
                for dst, src in zip(pooled[place][name], lists):
                    dst.extend(src)
    out, ratios = {}, {}
    for place in PLACES:
        out[place], ratios[place] = {}, {}
        for name in names:
            alone_lat, alone_inner, lat, inner = pooled[place][name]
            s = summary(lat, inner)
            a = summary(alone_lat, alone_inner)
            s["hog_cpu_cores_used_per_round"] = cores[name]
            s["freezes_over_1s"] = slow[name]
            out[place][name] = s
            out[place][name + "_interleaved_alone"] = a
            ratios[place][name] = {"p50": round(s["p50_ms"] / a["p50_ms"] - 1, 3),
                                   "p99": round(s["p99_ms"] / a["p99_ms"] - 1, 3),
                                   "in_sandbox_p50": round(s["in_sandbox_p50_ms"]
                                                           / a["in_sandbox_p50_ms"] - 1, 3)}
    return out, ratios


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100,
                    help="latency execs per scenario, place and side (alone / with hogs) a round")
    ap.add_argument("--loop", type=int, default=2000, help="iterations of the shell loop")
    ap.add_argument("--hogs", type=int, default=4, help="spinning sandboxes")
    ap.add_argument("--spinners", type=int, default=2, help="busy loops per hog sandbox")
    ap.add_argument("--hog-cpu", type=float, default=1.0, help="cpu (cores) of each hog")
    ap.add_argument("--settle-s", type=float, default=1.0, help="after the hogs start")
    ap.add_argument("--block", type=int, default=10, help="execs per frozen/thawed block")
    ap.add_argument("--settle-block-s", type=float, default=0.2, help="after each thaw")
    ap.add_argument("--rounds", type=int, default=6, help="rounds over the scenarios")
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
    started_in = own_cpu_group()
    cmd = f"i=0; while [ $i -lt {args.loop} ]; do i=$((i+1)); done"
    results = {"bench": "cpu_class", "date": datetime.datetime.utcnow().isoformat() + "Z",
               "host": {"cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()},
               "task": cmd, "hogs": args.hogs, "spinners_per_hog": args.spinners,
               "hog_cpu": args.hog_cpu, "n_per_run": args.n, "block": args.block,
               "rounds": args.rounds}
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
        if not os.path.isdir(CPU_NODE_DIR):
            raise SystemExit(f"the node has no cpu group {CPU_NODE_DIR}; see {state}.log")
        enter(CPU_ROOT)
        rest = Rest(rest_port)
        sb = rest.call("POST", "/v1/sandboxes", {"layers": ["base/busybox@1"], "memory_mb": 64})
        sid = sb["id"]
        try:
            lat, inner = measure(rest, sid, cmd, args.n)
            results["a_alone"] = summary(lat, inner)
            scen, ratios = run_rounds(rest, sid, cmd, args)
            results.update(scen)
        finally:
            rest.call("DELETE", f"/v1/sandboxes/{sid}")
        # Slowdown = p50 (p99) next to the hogs over p50 (p99) of the alone
        # runs measured right before them in the same place (0.173 = 17.3% slower).
        results["slowdown_vs_alone"] = ratios
        results["host"]["loadavg_at_end"] = os.getloadavg()
    finally:
        enter(started_in if os.path.isdir(started_in) else CPU_ROOT)
        node.send_signal(signal.SIGTERM)
        try:
            results["node_exit"] = node.wait(timeout=60)
        except subprocess.TimeoutExpired:
            node.kill()
            results["node_exit"] = None
        log.close()
    results["client_places"] = PLACES
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
