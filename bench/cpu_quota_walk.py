#!/usr/bin/env python3
"""What one CPU quota write costs as cpu groups pile up on the host
(issue 28 part 5: the one create cost of ours that grows with N).

    /usr/bin/python3 bench/cpu_quota_walk.py [--groups 3200] [--step 800]
        [--writes 200] [--out F]

Every write of a v1 `cpu.cfs_quota_us` makes the kernel check the bandwidth
of every cpu group on the host (tg_set_bandwidth -> walk_tg_tree from the
root), so a sandbox's own CPU limit costs more the more groups exist. This
makes --groups empty groups, each with a quota as a sandbox has, under a
private parent in the v1 cpu hierarchy, and at every --step times --writes
quota writes into one probe group (alternating two values, so each write
changes the quota and walks the tree). The groups hold no task; the walk
visits them all the same. Everything it makes it removes, also on Ctrl-C.
Needs root and the v1 cpu controller at /sys/fs/cgroup/cpu.
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import time

CPU = "/sys/fs/cgroup/cpu"


def write(path, value):
    with open(path, "w") as f:
        f.write(value)


def host_cpu_groups():
    with open("/proc/cgroups") as f:
        for line in f:
            p = line.split()
            if p and p[0] == "cpu":
                return int(p[2])
    return None


def time_writes(probe, n):
    """Microseconds per quota write into `probe`, each a change."""
    knob = probe + "/cpu.cfs_quota_us"
    out = []
    for i in range(n):
        t0 = time.perf_counter_ns()
        write(knob, "100000" if i % 2 else "99000")
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--groups", type=int, default=3200)
    ap.add_argument("--step", type=int, default=800)
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--out")
    args = ap.parse_args()
    if os.geteuid() != 0 or not os.path.exists(CPU + "/cpu.cfs_quota_us"):
        sys.exit("cpu_quota_walk: needs root and the v1 cpu controller at " + CPU)
    top = f"{CPU}/dsec-quota-walk-{os.getpid()}"
    made = []
    rows = []
    try:
        os.mkdir(top)
        made.append(top)
        probe = top + "/probe"
        os.mkdir(probe)
        made.append(probe)
        for n in range(0, args.groups + 1, args.step):
            while len(made) - 2 < n:
                g = f"{top}/g{len(made) - 2}"
                os.mkdir(g)
                made.append(g)
                write(g + "/cpu.cfs_quota_us", "100000")
            us = sorted(time_writes(probe, args.writes))
            rows.append({"groups_made": n, "host_cpu_groups": host_cpu_groups(),
                         "write_us_median": round(statistics.median(us), 1),
                         "write_us_p90": round(us[int(len(us) * 0.9)], 1),
                         "load1": os.getloadavg()[0]})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        for d in reversed(made):
            try:
                os.rmdir(d)
            except OSError as e:
                print(f"cpu_quota_walk: rmdir {d}: {e}", file=sys.stderr)
    report = {"date": datetime.datetime.utcnow().isoformat(timespec="seconds") + "Z",
              "writes_per_point": args.writes, "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
        print(args.out)


if __name__ == "__main__":
    main()
