#!/usr/bin/env python3
"""Does the kernel's memcg shrinker table make a fill slower? (issue 28 part 5),
without dsec.

    unshare -m --propagation private /usr/bin/python3 bench/shrinker_table_probe.py \
        [--mode both|memcg|mounts] [--n 3200] [--superblocks 6] [--out FILE]

Every superblock registers a memcg-aware shrinker with an id, and every memory
cgroup keeps a table (shrinker_info) sized by the highest id the host ever had.
When a new superblock takes an id past that maximum, the kernel grows the table
of EVERY memory cgroup (expand_shrinker_info walks them all). A sandbox makes one
memory cgroup and six superblocks (overlay, its scratch tmpfs, devpts, proc,
sysfs, mqueue), so a host filling up for the first time since boot grows every
table every ~10 sandboxes, at a cost that follows the number of cgroups.

Each step here does what a sandbox does to that table: mkdir of a memory
cgroup (memcg, both) and `--superblocks` detached-namespace tmpfs mounts
(mounts, both); the steps' time is reported in eighths of --n (ms per step).
Run it twice in a row: the first `both` run on a host that never had that many
superblocks grows with N; the second, with the maximum already reached (it never
shrinks before a reboot), stays flat. Run inside a private mount namespace (as
above) so the host's mount table and systemd never see the mounts. Removes all
it makes, also on error. Needs root and the v1 memory controller.
"""

import argparse
import ctypes
import json
import os
import shutil
import sys
import time

CG = "/sys/fs/cgroup/memory/dsec-shrinker-probe"
MNT = "/tmp/dsec-shrinker-probe"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=("both", "memcg", "mounts"), default="both")
    ap.add_argument("--n", type=int, default=3200)
    ap.add_argument("--superblocks", type=int, default=6)
    ap.add_argument("--out", help="also write the JSON result here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("shrinker_table_probe: needs root (memory cgroups and mounts)")
    libc = ctypes.CDLL(None, use_errno=True)
    os.makedirs(CG, exist_ok=True)
    os.makedirs(MNT, exist_ok=True)
    times, made, mounted = [], [], []
    try:
        for i in range(a.n):
            t = time.perf_counter()
            if a.mode in ("both", "memcg"):
                os.mkdir(f"{CG}/g{i}")
                made.append(f"{CG}/g{i}")
            if a.mode in ("both", "mounts"):
                for k in range(a.superblocks):
                    p = f"{MNT}/{i}_{k}"
                    os.mkdir(p)
                    if libc.mount(b"tmpfs", p.encode(), b"tmpfs", 0, b"size=64k") != 0:
                        raise OSError(ctypes.get_errno(), "mount tmpfs " + p)
                    mounted.append(p)
            times.append(time.perf_counter() - t)
        step = max(1, a.n // 8)
        per = [round(1000 * sum(times[j:j + step]) / len(times[j:j + step]), 3)
               for j in range(0, a.n, step)]
        out = {"mode": a.mode, "n": a.n, "superblocks": a.superblocks,
               "ms_per_step_by_eighth": per, "last_over_first": round(per[-1] / per[0], 2),
               "loadavg": os.getloadavg()[0], "uptime_s": float(open("/proc/uptime").read().split()[0])}
        print(json.dumps(out))
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(out) + "\n")
    finally:
        for p in reversed(mounted):
            libc.umount2(p.encode(), 2)
        for p in reversed(made):
            try:
                os.rmdir(p)
            except OSError:
                pass
        shutil.rmtree(MNT, ignore_errors=True)
        try:
            os.rmdir(CG)
        except OSError:
            pass


if __name__ == "__main__":
    main()
