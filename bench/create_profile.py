#!/usr/bin/env python3
"""Create rate as a node fills, with a profile of the first and last batch
(issue 28 part 5: a flat create cost on a host that is not fresh).

    /usr/bin/python3 bench/create_profile.py --dsec-bin build/cmd/dsec \
        --store /var/lib/dsec-test/store [--n 3200] [--batch 800] \
        [--concurrency 16] [--perf-seconds 20] [--out F] \
        [--variants "all=DSEC_RECLAIM_SAMPLES=1000000;capped="]

One private node (bench/density.py's Node, reclaim off) fills to --n busybox
sandboxes, each with one idle `sleep` (density.py's make_sandbox), 16 in flight,
in batches of --batch; each batch's creates/s and CPU ms per create (node plus
its sandboxes' cgroups) are recorded, so the last batch's rate over the first's
is the ratio issue 28 asks to keep >= 0.8. With --perf-seconds, `perf record -a
-g` runs for that long (at most the batch) at the start of the first and of the
last batch; the JSON keeps the host's hottest symbols (`profile`) and, for the
tasks a create runs in (node threads, init, the sandbox's process), CPU ms per
create by symbol and their growth from the first batch to the last (`ours`,
`ours_growth`) (perf's raw data stays in /var/tmp, named in the JSON, for
`perf report -g`; delete it when done). The host's history is
recorded too: uptime, memory cgroups alive (with dying ones), and how many
cgroups the memory hierarchy has made since boot (the inode number of a probe
directory), since a host that ran thousands of sandboxes is the case measured.
Each batch also says where the host's CPU went (`host_split`: ours, the
bench's client, other processes, idle) and which other processes took it
(`other_top`): a rate can fall because something else on the host scales
with the sandboxes (a process that scans every /proc entry, say), and
`creates_per_cpu_s` is then the rate of ours alone. With --second-node, a second fresh node then makes one batch while the first
keeps its sandboxes (`second_node`). With --control, every sandbox is then deleted and one more batch is made at N=0
on the same node (`control`): the host's load at the end without the N. With
--variants the node runs once per variant (its environment), one after
the other on the same host. With --peers crun, crun then makes the same fill
(bench/crun_fill.py), batch by batch, on the same host in the same run.
"""

import argparse
import concurrent.futures as cf
import datetime
import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crun_fill  # noqa: E402
import density  # noqa: E402  (Node, make_sandbox, cpu_ns)

PERF_HZ = 299  # samples a second a CPU; odd, so it never locks onto a timer


def host_history():
    """Uptime, live memory cgroups, and memory cgroups made since boot (approx.)."""
    with open("/proc/uptime") as f:
        up = float(f.read().split()[0])
    live = None
    with open("/proc/cgroups") as f:
        for line in f:
            p = line.split()
            if p and p[0] == "memory":
                live = int(p[2])
    made = None
    probe = f"/sys/fs/cgroup/memory/dsec-create-profile-{os.getpid()}"
    try:
        os.mkdir(probe)
        # Each memory cgroup directory takes ~30 kernfs inodes; the counter
        # only grows, so the probe's inode number over 30 estimates the
        # memory cgroups made since boot.
        made = os.stat(probe).st_ino // 30
        os.rmdir(probe)
    except OSError:
        pass
    return {"uptime_h": round(up / 3600, 2), "memory_cgroups_live": live,
            "memory_cgroups_made_since_boot_approx": made,
            "load1": os.getloadavg()[0]}


def perf_top(data, limit=25):
    """The hottest symbols of every task on the host in `data` (other
    tenants' included: the host's own picture)."""
    out = subprocess.run(
        ["perf", "report", "-i", data, "--no-children", "--stdio", "--sort", "comm,sym",
         "--percent-limit", "0.4"],
        capture_output=True, text=True, timeout=600).stdout
    rows = []
    for line in out.splitlines():
        p = line.split()
        if len(p) >= 4 and p[0].endswith("%") and not line.startswith("#"):
            rows.append(" ".join(p))
        if len(rows) >= limit:
            break
    return rows


# Tasks a create runs in: the node's threads (dsec, dsec-launch, caf.*), init
# before and after its exec (memfd:dsec-init) and the sandbox's idle process.
# By name: other dsec nodes on the host count too, and perf's own `sleep`.
OURS = re.compile(r"^(dsec|dsec-launch|caf\..*|memfd:dsec-init|sleep)$")


def perf_ours(data, creates, freq):
    """CPU ms per create by symbol (inclusive: a function with its callees)
    in the tasks a create runs in, over the `creates` finished while `data`
    was recorded; also their share of all the host's samples. A host-wide
    percentage mixes in other tenants and the window's length; ms per create
    compares the first batch with the last. Compare by task first: perf
    under a paravirtualized kernel (pvm_irq_enable) sometimes loses a call
    chain, and a symbol then reads 0 in one window and not in the other."""
    comm = subprocess.run(
        ["perf", "report", "-i", data, "--no-children", "--stdio", "-g", "none",
         "--sort", "comm", "-n"], capture_output=True, text=True, timeout=600).stdout
    total, mine = 0, {}
    for line in comm.splitlines():
        p = line.split()
        if len(p) >= 3 and p[0].endswith("%") and p[1].isdigit():
            total += int(p[1])
            name = " ".join(p[2:])
            if OURS.match(name):
                mine[name] = int(p[1])
    if not mine or not creates:
        return {"samples": total, "ours_share": 0, "ms_per_create": {}}
    # Sorted by task and symbol, filtered here: perf's --comms does not
    # filter the entries --children accumulates from other tasks' stacks.
    out = subprocess.run(
        ["perf", "report", "-i", data, "--children", "--stdio", "-g", "none",
         "--sort", "comm,sym", "--percent-limit", "0.05"],
        capture_output=True, text=True, timeout=600).stdout
    pct = {}
    for line in out.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+[\d.]+%\s+(.+?)\s+\[.\]\s+(.+?)\s*$", line)
        if m and OURS.match(m.group(2)):
            sym = m.group(3)[:80]
            pct[sym] = pct.get(sym, 0) + float(m.group(1))
    ms = {sym: round(p / 100 * total / freq / creates * 1000, 3) for sym, p in pct.items()
          if p / 100 * total / freq / creates * 1000 >= 0.02}
    by_comm = {c: round(n / freq / creates * 1000, 3) for c, n in mine.items()}
    return {"samples": total, "ours_share": round(sum(mine.values()) / total, 3),
            "ms_per_create_by_task": by_comm, "ms_per_create": ms}


class ThreadStates:
    """Samples the node's threads every 50 ms while a batch runs: how many
    run (R) and how many wait uninterruptibly (D), and in which kernel
    function the D ones wait, so a create held up by a host-wide lock shows
    even when its CPU time does not grow."""

    def __init__(self, pid):
        self.pid, self.stop, self.n = pid, threading.Event(), 0
        self.count = {"R": 0, "D": 0}
        self.wchan = {}
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        base = f"/proc/{self.pid}/task"
        while not self.stop.wait(0.05):
            self.n += 1
            try:
                tids = os.listdir(base)
            except OSError:
                return
            for t in tids:
                try:
                    with open(f"{base}/{t}/stat") as f:
                        state = f.read().rsplit(")", 1)[1].split()[0]
                    if state not in self.count:
                        continue
                    self.count[state] += 1
                    if state == "D":
                        with open(f"{base}/{t}/wchan") as f:
                            w = f.read().strip() or "?"
                        self.wchan[w] = self.wchan.get(w, 0) + 1
                except OSError:
                    pass

    def result(self):
        self.stop.set()
        self.thread.join()
        n = max(self.n, 1)
        top = sorted(self.wchan.items(), key=lambda kv: -kv[1])[:8]
        return {"running_avg": round(self.count["R"] / n, 2),
                "waiting_d_avg": round(self.count["D"] / n, 2),
                "d_wchan": {w: round(c / n, 2) for w, c in top}}


def make_sandbox(port, args):
    """density.make_sandbox's busybox sandbox with one idle `sleep`, with
    --cpu in its spec when given (0: no CPU limit, so no quota write)."""
    if args.cpu is None:
        return density.make_sandbox(port, "busybox", args)
    spec = {"layers": ["base/busybox@1"], "memory_mb": 32, "ttl_s": 0, "cpu": args.cpu}
    sid = density.create_with_retry(port, spec, args)
    pid = density.Rest(port, timeout=300).call(
        "POST", f"/v1/sandboxes/{sid}/exec?background=1", {"cmd": ["sleep", "1000000"]})["pid"]
    return sid, pid


def second_node_batch(args, pool):
    """With the filled node and its sandboxes still there: a second node,
    fresh, makes one batch. Slow like the first node's last batch: what
    grows is the host's (kernel state the sandboxes hold); fast like the
    first batch: it is the filled node's own."""
    node = density.Node(args, "second")
    try:
        c0 = density.cpu_ns(node.proc.pid, node.node_id)
        states = ThreadStates(node.proc.pid)
        t0 = time.monotonic()
        list(pool.map(lambda _: make_sandbox(node.port, args), range(args.batch)))
        dt = time.monotonic() - t0
        node_threads = states.result()
        cpu = (density.cpu_ns(node.proc.pid, node.node_id) - c0) / args.batch / 1e6
    finally:
        node.stop()
        try:
            os.unlink(node.state + ".log")
        except OSError:
            pass
    return {"from_n": 0, "to_n": args.batch, "creates_per_s": round(args.batch / dt, 1),
            "cpu_ms_per_create": round(cpu, 2),
            "creates_per_cpu_s": round(1000 / cpu, 1) if cpu else None,
            "host_cpu_share": round(args.batch * cpu / 1000 / dt / os.cpu_count(), 3),
            "load1": os.getloadavg()[0], "node_threads": node_threads}


def control_batch(args, node, pool, ids):
    """After the fill: every sandbox deleted, then one more batch on the same
    node, back at N=0 but minutes later, on the host as it is now. A rate
    that comes back near the first batch's says the last batch was slow
    because of N; one that stays near the last batch's says it was the
    host's load at that time."""
    def delete(sid):
        status, out = density.request(node.port, "DELETE", f"/v1/sandboxes/{sid}", timeout=300)
        if status >= 300:
            raise RuntimeError(f"DELETE /v1/sandboxes/{sid}: {status} {str(out)[:200]}")

    t0 = time.monotonic()
    list(pool.map(delete, ids))
    deleted_s = time.monotonic() - t0
    ids.clear()
    c0 = density.cpu_ns(node.proc.pid, node.node_id)
    states = ThreadStates(node.proc.pid)
    t0 = time.monotonic()
    made = list(pool.map(lambda _: make_sandbox(node.port, args),
                         range(args.batch)))
    dt = time.monotonic() - t0
    node_threads = states.result()
    ids += [sid for sid, _ in made]
    cpu = (density.cpu_ns(node.proc.pid, node.node_id) - c0) / args.batch / 1e6
    return {"from_n": 0, "to_n": args.batch, "delete_all_s": round(deleted_s, 1),
            "creates_per_s": round(args.batch / dt, 1), "cpu_ms_per_create": round(cpu, 2),
            "creates_per_cpu_s": round(1000 / cpu, 1) if cpu else None,
            "host_cpu_share": round(args.batch * cpu / 1000 / dt / os.cpu_count(), 3),
            "load1": os.getloadavg()[0], "node_threads": node_threads}


def growth(first, last, limit=25):
    """Symbols whose CPU ms per create grew most from the first profiled
    batch to the last."""
    a, b = first.get("ms_per_create", {}), last.get("ms_per_create", {})
    rows = sorted(((b.get(k, 0) - a.get(k, 0), k) for k in set(a) | set(b)), reverse=True)
    return [f"{k}: {a.get(k, 0):.2f} -> {b.get(k, 0):.2f} ms" for d, k in rows[:limit] if d > 0]


def host_ticks():
    """(busy, idle) clock ticks of the whole host (/proc/stat's cpu line;
    iowait counts as idle), and this process's CPU seconds (the client)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return sum(v[:8]) - idle, idle, ru.ru_utime + ru.ru_stime


def process_ticks():
    """CPU ticks of every process on the host by pid: {pid: (comm, ticks)}."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
        except OSError:
            continue
        comm = text[text.find("(") + 1:text.rfind(")")]
        fields = text[text.rfind(")") + 2:].split()
        out[pid] = (comm, int(fields[11]) + int(fields[12]))
    return out


def other_top(before, after, seconds, limit=5):
    """The processes outside ours that took the most of the host's CPU
    between two process_ticks() (share of all CPUs; kworkers summed): what
    `other` in host_split is made of, for those alive at both ends."""
    shares = {}
    for pid, (comm, ticks) in after.items():
        if (pid not in before or before[pid][0] != comm or OURS.match(comm)
                or pid == str(os.getpid())):
            continue
        name = "kworker" if comm.startswith("kworker/") else comm
        shares[name] = shares.get(name, 0) + ticks - before[pid][1]
    scale = os.sysconf("SC_CLK_TCK") * seconds * os.cpu_count()
    rows = sorted(shares.items(), key=lambda kv: -kv[1])[:limit]
    return {k: round(v / scale, 3) for k, v in rows if v > 0}


def host_split(before, after, ours_share):
    """Where the host's CPU went during a batch, as shares of all of it: the
    node and its sandboxes (ours), the bench's client, anything else on the
    host, and idle. A rate that falls while `ours` falls too went to one of
    the others."""
    busy, idle = after[0] - before[0], after[1] - before[1]
    total = busy + idle
    if total <= 0:
        return {}
    client = (after[2] - before[2]) * os.sysconf("SC_CLK_TCK") / total
    return {"ours": round(ours_share, 3), "client": round(client, 3),
            "other": round(max(0.0, busy / total - ours_share - client), 3),
            "idle": round(idle / total, 3)}


def run_variant(args, name, env_extra, node_args):
    for k, v in env_extra.items():
        os.environ[k] = v
    args.off_args = "--no-reclaim " + node_args
    node = density.Node(args, "off")
    for k in env_extra:
        os.environ.pop(k, None)
    pool = cf.ThreadPoolExecutor(args.concurrency)
    batches, ids, control, second = [], [], None, None
    try:
        nb = args.n // args.batch
        for b in range(nb):
            perf = None
            data = f"/var/tmp/dsec-create-profile-{name}-{b}.data"
            done = []  # when each create of this batch finished
            if args.perf_seconds and b in (0, nb - 1):
                perf = subprocess.Popen(
                    ["perf", "record", "-a", "-g", "-F", str(PERF_HZ), "-o", data, "--",
                     "sleep", str(args.perf_seconds)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1)  # perf -a -g takes a moment to start recording
            c0 = density.cpu_ns(node.proc.pid, node.node_id)
            p0 = process_ticks()
            h0 = host_ticks()
            states = ThreadStates(node.proc.pid)
            t0 = time.monotonic()
            futs = [pool.submit(make_sandbox, node.port, args)
                    for _ in range(args.batch)]
            for f in futs:
                f.add_done_callback(lambda _f: done.append(time.monotonic()))
            made = [f.result() for f in futs]
            dt = time.monotonic() - t0
            h1 = host_ticks()
            p1 = process_ticks()
            node_threads = states.result()
            cpu = (density.cpu_ns(node.proc.pid, node.node_id) - c0) / args.batch / 1e6
            ids += [sid for sid, _ in made]
            # The node's and its sandboxes' share of the host's CPU: with the
            # CPU per create, what sets the rate on a shared host.
            share = args.batch * cpu / 1000 / dt / os.cpu_count()
            row = {"from_n": len(ids) - args.batch, "to_n": len(ids),
                   "creates_per_s": round(args.batch / dt, 1),
                   "cpu_ms_per_create": round(cpu, 2),
                   "creates_per_cpu_s": round(1000 / cpu, 1) if cpu else None,
                   "host_cpu_share": round(share, 3),
                   "host_split": host_split(h0, h1, share),
                   "other_top": other_top(p0, p1, dt), "load1": os.getloadavg()[0],
                   "node_threads": node_threads}
            if perf:
                # The window ends with the batch (or after --perf-seconds), so
                # every create counted ran inside it.
                if perf.poll() is None:
                    perf.send_signal(signal.SIGINT)
                perf.wait()
                in_window = sum(1 for t in done if t - t0 <= args.perf_seconds)
                row["profile"] = perf_top(data)
                row["ours"] = perf_ours(data, in_window, PERF_HZ)
                row["ours"]["creates_in_window"] = in_window
                row["perf_data"] = data  # kept for `perf report -i` (delete when done)
            batches.append(row)
            print(json.dumps({"variant": name, **{k: v for k, v in row.items()
                                                   if k not in ("profile", "ours")}}), flush=True)
        if args.second_node:
            second = second_node_batch(args, pool)
            print(json.dumps({"variant": name, "second_node": {
                k: v for k, v in second.items() if k != "node_threads"}}), flush=True)
        if args.control:
            control = control_batch(args, node, pool, ids)
            print(json.dumps({"variant": name, "control": {
                k: v for k, v in control.items() if k != "node_threads"}}), flush=True)
    finally:
        pool.shutdown(wait=True)
        node.stop()
        try:  # density.Node leaves its log beside the state dir
            os.unlink(node.state + ".log")
        except OSError:
            pass
    first, last = batches[0]["creates_per_s"], batches[-1]["creates_per_s"]
    per_cpu = [b["creates_per_cpu_s"] for b in batches]
    profiled = [b["ours"] for b in batches if "ours" in b]
    return {"variant": name, "env": env_extra, "node_args": node_args, "batches": batches,
            "last_over_first": round(last / first, 3) if first else None,
            # The same ratio with the host's share taken out: creates per
            # CPU-second of the node and its sandboxes.
            "per_cpu_last_over_first": (round(per_cpu[-1] / per_cpu[0], 3)
                                        if per_cpu[0] and per_cpu[-1] else None),
            "ours_growth": growth(profiled[0], profiled[-1]) if len(profiled) > 1 else [],
            "second_node": second, "control": control}


def run_crun(args):
    """The same fill by crun (bench/crun_fill.py), batch by batch: its rate,
    its CPU per create (crun's commands and the containers' setup, with the
    kernel threads' work for them left out) and where the host's CPU went."""
    fill = crun_fill.CrunFill(memory_mb=32, cpu=1.0 if args.cpu is None else args.cpu)
    pool = cf.ThreadPoolExecutor(args.concurrency)
    batches, n = [], 0
    try:
        for _ in range(args.n // args.batch):
            p0, h0 = process_ticks(), host_ticks()
            t0 = time.monotonic()
            list(pool.map(fill.create, range(args.batch)))
            dt = time.monotonic() - t0
            h1, p1 = host_ticks(), process_ticks()
            n += args.batch
            # A container's setup runs in crun's child, which becomes the
            # container and is not reaped until the end: crun's CPU is the
            # host's busy time less the client's and less what every process
            # that was there before the batch took (kernel threads included).
            tck = os.sysconf("SC_CLK_TCK")
            before = sum(t - p0[pid][1] for pid, (comm, t) in p1.items()
                         if pid in p0 and p0[pid][0] == comm and pid != str(os.getpid()))
            busy_s = (h1[0] - h0[0]) / tck
            cpu = max(0.0, busy_s - (h1[2] - h0[2]) - before / tck) / args.batch * 1000
            share = args.batch * cpu / 1000 / dt / os.cpu_count()
            row = {"from_n": n - args.batch, "to_n": n,
                   "creates_per_s": round(args.batch / dt, 1),
                   "cpu_ms_per_create": round(cpu, 2),
                   "creates_per_cpu_s": round(1000 / cpu, 1) if cpu else None,
                   "host_cpu_share": round(share, 3),
                   "host_split": host_split(h0, h1, share),
                   "other_top": other_top(p0, p1, dt), "load1": os.getloadavg()[0]}
            batches.append(row)
            print(json.dumps({"peer": "crun", **row}), flush=True)
    finally:
        pool.shutdown(wait=True)
        fill.close()
    first, last = batches[0], batches[-1]
    return {"peer": "crun", "batches": batches,
            "last_over_first": round(last["creates_per_s"] / first["creates_per_s"], 3),
            "per_cpu_last_over_first": (round(last["creates_per_cpu_s"]
                                              / first["creates_per_cpu_s"], 3)
                                        if first["creates_per_cpu_s"]
                                        and last["creates_per_cpu_s"] else None)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dsec-bin", default=os.path.join(density.REPO, "build/cmd/dsec"))
    ap.add_argument("--store", default="/var/lib/dsec-test/store")
    ap.add_argument("--n", type=int, default=3200)
    ap.add_argument("--batch", type=int, default=800)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--perf-seconds", type=float, default=0)
    ap.add_argument("--cpu", type=float,
                    help="each sandbox's cpu (default: the node's default, 1); 0 means no "
                         "CPU limit, which shows what the quota writes cost")
    ap.add_argument("--second-node", action="store_true",
                    help="after the fill, time one batch on a second, fresh node while the "
                         "first keeps its sandboxes (the host's growth against the node's)")
    ap.add_argument("--control", action="store_true",
                    help="after the fill, delete every sandbox and time one more batch "
                         "at N=0 (load at the end against N)")
    ap.add_argument("--variants", default="now=",
                    help="name=ENV=VAL,ENV=VAL[@node flags];name2=... (each a node run, "
                         "in order)")
    ap.add_argument("--peers", default="",
                    help="crun: after the variants, the same fill by crun (bench/crun_fill.py)")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.peers not in ("", "crun"):
        ap.error(f"--peers {args.peers}: the only peer is crun")
    # density.Node reads these.
    args.reclaim_args, args.off_args, args.retry_429_s = "", "--no-reclaim", 0
    variants = []
    for v in filter(None, args.variants.split(";")):
        name, _, rest = v.partition("=")
        envs, _, flags = rest.partition("@")
        env = dict(e.split("=", 1) for e in envs.split(",") if e)
        variants.append((name, env, flags))
    report = {"date": datetime.datetime.utcnow().isoformat(timespec="seconds") + "Z",
              "n": args.n, "batch": args.batch, "concurrency": args.concurrency,
              "host_before": host_history(), "runs": []}
    for name, env, flags in variants:
        report["runs"].append(run_variant(args, name, env, flags))
        report["runs"][-1]["host_after"] = host_history()
    if args.peers == "crun":
        report["peers"] = {"crun": run_crun(args)}
        report["peers"]["crun"]["host_after"] = host_history()
    out = args.out or os.path.join(
        density.REPO, "bench/results",
        f"create-profile-{datetime.date.today().isoformat()}.json")
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    print(out)


if __name__ == "__main__":
    main()
