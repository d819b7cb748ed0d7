#!/usr/bin/env python3
"""Does one part of what a sandbox holds make creates slower as it piles up?
(issue 28 part 5: which of the N=3,200 costs is which), without dsec.

    /usr/bin/python3 bench/sandbox_parts_probe.py --part PART [--k 3200] [--ops 200]

Times an operation like the part of a create it concerns (child CPU ms per
operation and operations a second), before, while --k holders of that part
exist, and after they are gone:

  procs   idle processes (a sandbox has two)        op: spawn+exec /bin/true
  memcg   memory cgroups, each holding a process    op: mkdir + join a new one + exec
  cpucg   cpu groups with a 1-CPU quota, each
          holding a process                         op: spawn+exec /bin/true
  netns   network namespaces                         op: unshare -n true
  mntpid  mount+pid namespaces with their /proc     op: unshare -fpm --mount-proc true
  ns      all of pid, mount, uts, ipc, net + /proc  op: unshare -fpmuin --mount-proc true

A part whose `with` stays near `before` and `after` is not what grows. The
host's other load moves all three; run it when the load is steady and read
the three together. Everything it makes it kills and removes, also on Ctrl-C
(holders are killed, cgroup directories removed). Needs root and cgroup v1
memory and cpu controllers at /sys/fs/cgroup.
"""

import argparse
import json
import os
import resource
import signal
import sys
import time

CG = "/sys/fs/cgroup"


def run_ops(argv_for, n):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    for i in range(n):
        argv = argv_for(i)
        pid = os.posix_spawnp(argv[0], argv, os.environ)
        _, st = os.waitpid(pid, 0)
        if st != 0:
            raise RuntimeError(f"{' '.join(argv)}: wait status {st}")
    dt = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    return {"per_s": round(n / dt, 1), "child_cpu_ms_each": round(cpu / n * 1000, 3),
            "load1": os.getloadavg()[0]}


class Probe:
    def __init__(self, part):
        self.part, self.pids, self.dirs, self.seq = part, [], [], 0
        self.top = None
        if part in ("memcg", "cpucg"):
            ctrl = "memory" if part == "memcg" else "cpu"
            self.top = f"{CG}/{ctrl}/dsec-parts-probe-{os.getpid()}"
            os.mkdir(self.top)
            self.dirs.append(self.top)

    def op(self, i):
        if self.part in ("procs", "cpucg"):
            return ["/bin/true"]
        if self.part == "memcg":
            self.seq += 1
            d = f"{self.top}/op{self.seq}"
            os.mkdir(d)
            self.dirs.append(d)
            return ["/bin/sh", "-c", f"echo $$ > {d}/tasks; exec /bin/true"]
        flags = {"netns": ["-n"], "mntpid": ["-fpm", "--mount-proc"],
                 "ns": ["-fpmuin", "--mount-proc"]}[self.part]
        return ["unshare", *flags, "/bin/true"]

    def hold(self, i):
        if self.part == "procs":
            argv = ["/bin/sleep", "100000"]
        elif self.part in ("memcg", "cpucg"):
            d = f"{self.top}/g{i}"
            os.mkdir(d)
            self.dirs.append(d)
            if self.part == "cpucg":
                with open(d + "/cpu.cfs_quota_us", "w") as f:
                    f.write("100000")
            argv = ["/bin/sh", "-c", f"echo $$ > {d}/tasks; exec /bin/sleep 100000"]
        else:
            flags = {"netns": ["-n"], "mntpid": ["-fpm", "--mount-proc", "--kill-child"],
                     "ns": ["-fpmuin", "--mount-proc", "--kill-child"]}[self.part]
            argv = ["unshare", *flags, "sleep", "100000"]
        self.pids.append(os.posix_spawnp(argv[0], argv, os.environ))

    def release_holders(self):
        for p in self.pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        for p in self.pids:
            try:
                os.waitpid(p, 0)
            except OSError:
                pass
        self.pids.clear()

    def remove_dirs(self):
        for d in reversed(self.dirs):
            for _ in range(100):  # EBUSY while the killed tasks finish exiting
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
            else:
                print(f"sandbox_parts_probe: rmdir {d} failed", file=sys.stderr)
        self.dirs.clear()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", required=True,
                    choices=["procs", "memcg", "cpucg", "netns", "mntpid", "ns"])
    ap.add_argument("--k", type=int, default=3200)
    ap.add_argument("--ops", type=int, default=200)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("sandbox_parts_probe: needs root (cgroups, namespaces)")
    probe = Probe(args.part)
    out = {"part": args.part, "k": args.k}
    try:
        out["before"] = run_ops(probe.op, args.ops)
        for i in range(args.k):
            probe.hold(i)
        time.sleep(3)
        out["with"] = run_ops(probe.op, args.ops)
        probe.release_holders()
        time.sleep(2)
        out["after"] = run_ops(probe.op, args.ops)
    finally:
        probe.release_holders()
        probe.remove_dirs()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
