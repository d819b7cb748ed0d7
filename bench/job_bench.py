#!/usr/bin/env python3
"""Job-level pause/resume wall time vs job size (POST /v1/sandboxes:pause|:resume).

For each job size N (default 64, 256, 512) the bench makes N busybox sandboxes
labelled job=<name> (each running one `sleep`), then times, over --trials
rounds, one REST call that pauses the whole job and one that resumes it,
on one node and (--nodes 3) on 3 joined local nodes, where the call goes to
the first node and the sandboxes are spread by placement. It also times the
same N pauses done one by one (N REST calls in sequence, what a trainer had
to do before) for the smallest size, side by side in the same run.

    python3 bench/job_bench.py --sizes 64,256,512 --nodes 1,3 \\
        --out bench/results/job-$(date +%F).json

Needs root (real sandboxes) and a store with base/busybox@1.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Rest, free_port, request  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Node:
    def __init__(self, args, name, join=None):
        self.name = name
        self.rest = free_port()
        self.listen = free_port()
        self.state = tempfile.mkdtemp(prefix=f"dsec-jobbench-{name}-", dir="/var/tmp")
        cmd = [args.dsec_bin, "node", "--state-dir", self.state, "--store", args.store,
               "--rest", f"127.0.0.1:{self.rest}", "--listen", f"127.0.0.1:{self.listen}",
               "--node-id", name, "--zram-mb", "0", "--no-reclaim"]
        if join:
            cmd += ["--join", join]
        self.log = open(self.state + ".log", "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"node {name} exited {self.proc.returncode}")
            try:
                if request(self.rest, "GET", "/healthz", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"node {name} not healthy in 30 s")

    def alive_members(self):
        status, out = request(self.rest, "GET", "/v1/nodes", timeout=5)
        return {m["id"] for m in out["nodes"] if m["state"] == "alive"} if status == 200 else set()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.state, ignore_errors=True)
        try:
            os.unlink(self.state + ".log")
        except OSError:
            pass


def start_cluster(args, n):
    tag = uuid.uuid4().hex[:4]
    first = Node(args, f"jb-{tag}-0")
    nodes = [first]
    for i in range(1, n):
        nodes.append(Node(args, f"jb-{tag}-{i}", join=f"127.0.0.1:{first.listen}"))
    want = {x.name for x in nodes}
    deadline = time.monotonic() + 30
    while any(x.alive_members() != want for x in nodes):
        if time.monotonic() > deadline:
            raise RuntimeError("cluster did not converge in 30 s")
        time.sleep(0.2)
    return nodes


def make_job(rest, job, n):
    """n sandboxes of job `job` (batches of 64), each running a sleep."""
    ids = []
    while len(ids) < n:
        k = min(64, n - len(ids))
        out = rest.call("POST", "/v1/sandboxes:batch",
                        {"spec": {"layers": ["base/busybox@1"], "memory_mb": 32, "ttl_s": 3600,
                                  "labels": {"job": job}}, "count": k})
        if out.get("errors"):
            raise RuntimeError(f"batch create: {out['errors'][:2]}")
        ids += [s["id"] for s in out["sandboxes"]]
    for sid in ids:
        rest.call("POST", f"/v1/sandboxes/{sid}/exec?background=1", {"cmd": "sleep 100000"})
    return ids


def timed(f):
    t0 = time.perf_counter()
    out = f()
    return time.perf_counter() - t0, out


def summary(xs):
    return {"p50_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs), "n": len(xs)}


def run_size(args, nodes, n):
    rest = Rest(nodes[0].rest, timeout=600)
    job = f"bench-{uuid.uuid4().hex[:6]}"
    t_create, ids = timed(lambda: make_job(rest, job, n))
    owners = {}
    for sid in ids:
        owners[sid.split(".")[0]] = owners.get(sid.split(".")[0], 0) + 1
    pauses, resumes = [], []
    for _ in range(args.trials):
        dt, out = timed(lambda: rest.call("POST", "/v1/sandboxes:pause", {"labels": {"job": job}}))
        if out["errors"] or out["count"] != n:
            raise RuntimeError(f"pause: {out['count']} of {n}, errors {out['errors'][:2]}")
        pauses.append(dt)
        dt, out = timed(lambda: rest.call("POST", "/v1/sandboxes:resume", {"labels": {"job": job}}))
        if out["errors"] or out["count"] != n:
            raise RuntimeError(f"resume: {out['count']} of {n}, errors {out['errors'][:2]}")
        resumes.append(dt)
    row = {"nodes": len(nodes), "size": n, "per_node": owners, "create_s": t_create,
           "job_pause": summary(pauses), "job_resume": summary(resumes)}
    if n == min(args.size_list):
        # The same pauses one call at a time (before job-level pause existed).
        one_p, one_r = [], []
        for _ in range(args.trials):
            dt, _ = timed(lambda: [rest.call("POST", f"/v1/sandboxes/{sid}/pause") for sid in ids])
            one_p.append(dt)
            dt, _ = timed(lambda: [rest.call("POST", f"/v1/sandboxes/{sid}/resume") for sid in ids])
            one_r.append(dt)
        row["one_by_one_pause"] = summary(one_p)
        row["one_by_one_resume"] = summary(one_r)
        row["speedup_pause_p50"] = row["one_by_one_pause"]["p50_s"] / row["job_pause"]["p50_s"]
    for sid in ids:
        rest.call("DELETE", f"/v1/sandboxes/{sid}")
    print(json.dumps(row), flush=True)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dsec-bin", default=os.path.join(REPO, "build", "src", "dsec"))
    p.add_argument("--store", default=os.environ.get("DSEC_TEST_STORE", "/var/lib/dsec-test/store"))
    p.add_argument("--sizes", default="64,256,512")
    p.add_argument("--nodes", default="1,3")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    args.size_list = [int(x) for x in args.sizes.split(",")]
    rows = []
    t0 = time.time()
    for k in (int(x) for x in args.nodes.split(",")):
        nodes = start_cluster(args, k)
        try:
            for n in args.size_list:
                rows.append(run_size(args, nodes, n))
        finally:
            for x in reversed(nodes):
                x.stop()
    out = {"bench": "job_pause_resume", "started_at": t0, "host_cores": os.cpu_count(),
           "loadavg_at_end": os.getloadavg(), "trials": args.trials, "rows": rows,
           "note": "wall time of one REST call pausing/resuming the whole job; machine shared "
                   "with other builds, compare rows of this run only"}
    text = json.dumps(out, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
