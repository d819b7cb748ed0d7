#!/usr/bin/env python3
"""What a host agent's CPU grows with, without dsec (issue 28 part 5).

    /usr/bin/python3 bench/host_agent_probe.py [--pid 1] [--count 2000] \
        [--seconds 30] [--rounds 2] [--out F]

In create_profile.py's fills, this machine's PID 1 agent took ~1.5 % of the
host at N=0 and 18-34 % at N=3,200, and the process is out of reach of perf
and its tracepoints here. This probe holds --count idle `sleep`s of one
kind at a time and reads the agent's CPU (utime + stime of --pid) over
--seconds, for each kind in turn, --rounds times:

  plain       sleeps in the host's namespaces
  own-mnt     each in a mount namespace of its own
  own-pid     each the init of a pid namespace of its own
  own-net     each in a network namespace of its own (loopback down)
  own-net-lo  the same with loopback up, as in a sandbox
  net-no-proc the same number of network namespaces held by a bind mount,
              with no process in them
  none        nothing held: the agent's baseline

Everything is removed after each kind (the pid-namespace inits are killed
with SIGKILL, the only signal such an init takes from outside).
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

KINDS = {
    "plain": ["sleep", "1000000"],
    "own-mnt": ["unshare", "-m", "sleep", "1000000"],
    "own-pid": ["unshare", "-p", "--fork", "--kill-child", "sleep", "1000000"],
    "own-net": ["unshare", "-n", "sleep", "1000000"],
    "own-net-lo": ["unshare", "-n", "sh", "-c", "ip link set lo up && exec sleep 1000000"],
}


def ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def hold(kind, count, workdir):
    """Starts `count` holders of `kind`; returns a function that removes them."""
    if kind == "none":
        return lambda: None
    if kind == "net-no-proc":
        paths = []
        for i in range(count):
            p = os.path.join(workdir, f"ns{i}")
            open(p, "w").close()
            subprocess.run(["unshare", f"--net={p}", "true"], check=True)
            paths.append(p)

        def undo():
            for p in paths:
                subprocess.run(["umount", p], check=False)
                os.unlink(p)
        return undo
    procs = [subprocess.Popen(KINDS[kind], stdin=subprocess.DEVNULL) for _ in range(count)]

    def undo():
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait()
    return undo


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pid", type=int, default=1, help="the agent's pid (default 1)")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kinds", default="none,plain,own-mnt,own-pid,own-net,own-net-lo,net-no-proc")
    ap.add_argument("--out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("host_agent_probe: needs root (namespaces)")
    for tool in ("unshare", "ip"):
        if not shutil.which(tool):
            raise SystemExit(f"host_agent_probe: {tool} is not installed")
    kinds = args.kinds.split(",")
    for k in kinds:
        if k not in KINDS and k not in ("none", "net-no-proc"):
            raise SystemExit(f"--kinds: unknown kind {k!r}")
    with open(f"/proc/{args.pid}/comm") as f:
        agent = f.read().strip()
    tck = os.sysconf("SC_CLK_TCK")
    workdir = tempfile.mkdtemp(prefix="dsec-agent-probe-", dir="/run")
    # Namespace files must sit on a private mount.
    subprocess.run(["mount", "--bind", workdir, workdir], check=True)
    subprocess.run(["mount", "--make-private", workdir], check=True)
    rows = []
    try:
        for r in range(args.rounds):
            for kind in kinds:
                undo = hold(kind, args.count, workdir)
                try:
                    time.sleep(5)  # let the holders settle
                    t0 = ticks(args.pid)
                    time.sleep(args.seconds)
                    used = (ticks(args.pid) - t0) / tck
                finally:
                    undo()
                row = {"round": r, "kind": kind, "count": args.count if kind != "none" else 0,
                       "agent_cpu_share": round(used / args.seconds, 3)}
                rows.append(row)
                print(json.dumps(row), flush=True)
                time.sleep(3)
    finally:
        subprocess.run(["umount", workdir], check=False)
        shutil.rmtree(workdir, ignore_errors=True)
    summary = {}
    for kind in kinds:
        xs = sorted(r["agent_cpu_share"] for r in rows if r["kind"] == kind)
        summary[kind] = xs[len(xs) // 2]
    report = {"date": datetime.datetime.utcnow().isoformat(timespec="seconds") + "Z",
              "agent": {"pid": args.pid, "comm": agent}, "count": args.count,
              "seconds": args.seconds, "rows": rows,
              "median_agent_cpu_share_of_one_cpu": summary}
    out = args.out or f"bench/results/host-agent-probe-{datetime.date.today().isoformat()}.json"
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(summary))
    print(out)


if __name__ == "__main__":
    main()
