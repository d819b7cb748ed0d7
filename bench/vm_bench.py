#!/usr/bin/env python3
"""VM backend benchmark (issue 7): microVM and q35 VM against a container.

Starts a private node (root; the store must hold base/busybox@1; the guest
kernel must be in --guest-dir, see scripts/guest_kernel.sh):
    python3 bench/vm_bench.py --dsec-bin build/cmd/dsec \
        --store /var/lib/dsec-test/store --guest-dir /var/lib/dsec/guest

Measures, through REST, on three nodes run one after the other in the same
run (VM templates off, DSEC_VM_TEMPLATES=0; templates without spares,
DSEC_VM_SPARES=0; templates with spares, the default):
  0. the accelerator the node chose (DSEC_VM_ACCEL=--accel, default auto: its
     KVM probe decides), why, how long the probe took, and node start time;
  1. create -> first exec (`true`): --samples booted microVMs, --vm-samples q35 VMs
     (templates off); --samples template restores at create (no spares); the
     first microVM create with spares on (boots the template, then restores
     from it), --samples creates that take a ready spare (the bench waits
     until the next spare is up), --samples creates back to back (each right
     after the previous one's delete: it waits for the spare being made), and
     --samples containers (each one destroyed before the next);
  2. pause (stop + save the machine to disk + end QEMU) and resume (new QEMU
     restoring it) -> first exec, --samples times on one template clone;
  3. host memory per idle microVM (guest memory --mem-mb) after one exec:
     QEMU's RSS and PSS, and from /proc/<qemu>/smaps the guest RAM mapping
     (the memory backend, exactly mem-mb MiB) apart from every other mapping
     (QEMU's own overhead, by kind: TCG code buffer, heap, binary, libraries);
     for one booted microVM alone, for 1 and for --idle template clones
     running at once (their template pages and QEMU's binary and libraries
     are shared, so PSS divides them), and the spare; CPU time an idle clone
     and the idle spare use in 10 s; against one idle container (PSS of its
     processes, its memory cgroup's usage).
Prints one JSON report; --out FILE writes it too (default
bench/results/vm-<date>-templates.json). Under TCG each boot burns several CPU-seconds,
so numbers depend heavily on the load of the machine: the report records the
load average before and after.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import free_port, request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Rest:
    def __init__(self, port):
        self.port = port

    def call(self, method, path, body=None, timeout=600):
        return request(self.port, method, path, body, timeout)

    def ok(self, method, path, body=None, want=(200, 201, 204)):
        status, out = self.call(method, path, body)
        if status not in want:
            raise SystemExit(f"{method} {path}: {status} {out}")
        return out


def create_first_exec(rest, backend, mem_mb):
    t0 = time.monotonic()
    sid = rest.ok("POST", "/v1/sandboxes",
                  {"layers": ["base/busybox@1"], "backend": backend, "memory_mb": mem_mb})["id"]
    t1 = time.monotonic()
    rest.ok("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})
    return sid, t1 - t0, time.monotonic() - t0


def spare_pid(state_dir):
    """The idle spare clone: QEMU on <state>/vm/spares files, in no sandbox."""
    spares, sb = os.path.join(state_dir, "vm", "spares"), os.path.join(state_dir, "sandboxes")
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if spares.encode() not in open(f"/proc/{pid}/cmdline", "rb").read():
                    continue
                fds = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            except OSError:
                continue
            if not any(f.startswith(sb + "/") for f in fds):
                return int(pid)
    return None


def wait_spare(state_dir, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = spare_pid(state_dir)
        if pid:
            # Offered once restored and warmed: then it idles (< 20% CPU
            # twice in a row).
            idle = 0
            while time.monotonic() < deadline and idle < 2:
                c0 = cpu_s(pid)
                time.sleep(0.1)
                idle = idle + 1 if cpu_s(pid) - c0 < 0.02 else 0
            return pid
        time.sleep(0.05)
    raise SystemExit("no spare clone came up")


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def summary(xs):
    xs = sorted(xs)
    return {"n": len(xs), "min_s": round(xs[0], 3), "median_s": round(statistics.median(xs), 3),
            "max_s": round(xs[-1], 3)}


def qemu_pid(state_dir, sid):
    """The sandbox's QEMU: the one with <sandbox dir>/console.log open (a
    spare clone's command line names the spare's files, not the sandbox)."""
    want = os.path.join(state_dir, "sandboxes", sid, "console.log")
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if not os.readlink(f"/proc/{pid}/exe").endswith("qemu-system-x86_64"):
                    continue
                fds = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            except OSError:
                continue
            if want in fds:
                return int(pid)
    return None


def rollup(pid):
    out = {}
    for line in open(f"/proc/{pid}/smaps_rollup"):
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "kB":
            out[parts[0].rstrip(":")] = int(parts[1])
    return out


def smaps_breakdown(pid, mem_mb):
    """PSS and RSS (KiB) of guest RAM vs everything else, from smaps."""
    size_kb = mem_mb * 1024
    kinds, cur = {}, None
    guest = {"rss_kib": 0, "pss_kib": 0}
    total = {"rss_kib": 0, "pss_kib": 0}
    for line in open(f"/proc/{pid}/smaps"):
        parts = line.split()
        if "-" in parts[0] and not parts[0].endswith(":"):
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            name = parts[5] if len(parts) > 5 else ""
            if (hi - lo) // 1024 == size_kb:
                cur = "guest_ram"
            elif not name and "x" in parts[1]:
                cur = "tcg_code_buffer"
            elif name == "[heap]":
                cur = "heap"
            elif name.endswith("qemu-system-x86_64"):
                cur = "qemu_binary"
            elif name.endswith(".so") or ".so." in name:
                cur = "shared_libraries"
            else:
                cur = "other"
        elif parts[0] in ("Rss:", "Pss:") and cur:
            key = "rss_kib" if parts[0] == "Rss:" else "pss_kib"
            total[key] += int(parts[1])
            if cur == "guest_ram":
                guest[key] += int(parts[1])
            elif key == "pss_kib":
                kinds[cur] = kinds.get(cur, 0) + int(parts[1])
    return {"qemu_rss_kib": total["rss_kib"], "qemu_pss_kib": total["pss_kib"],
            "guest_ram_rss_kib": guest["rss_kib"], "guest_ram_pss_kib": guest["pss_kib"],
            "overhead_rss_kib": total["rss_kib"] - guest["rss_kib"],
            "overhead_pss_kib": total["pss_kib"] - guest["pss_kib"],
            "overhead_pss_by_kind_kib": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
            "threads": len(os.listdir(f"/proc/{pid}/task"))}


def container_memory(node_id, sid):
    procs = set()
    base = f"/sys/fs/cgroup/memory/dsec/{node_id}/{sid}"
    for line in open(base + "/cgroup.procs"):
        procs.add(int(line))
    pss = sum(rollup(p).get("Pss", 0) for p in procs)
    usage = int(open(base + "/memory.usage_in_bytes").read())
    return {"processes": len(procs), "pss_kib": pss, "cgroup_usage_kib": usage // 1024}


class BenchNode:
    def __init__(self, a, **env):
        self.state = tempfile.mkdtemp(prefix="dsec-vmbench-", dir="/var/tmp")
        self.node_id = "vmbench-" + os.urandom(3).hex()
        port = free_port()
        env = dict(os.environ, DSEC_GUEST_DIR=a.guest_dir, DSEC_VM_BOOT_TIMEOUT_S="120",
                   DSEC_VM_ACCEL=a.accel, **env)
        t0 = time.monotonic()
        self.log = open(self.state + ".log", "wb")
        self.proc = subprocess.Popen([a.dsec_bin, "node", "--state-dir", self.state, "--store",
                                      a.store, "--rest", f"127.0.0.1:{port}", "--listen",
                                      f"127.0.0.1:{free_port()}", "--node-id", self.node_id],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.rest = Rest(port)
        for _ in range(200):
            try:
                if self.rest.call("GET", "/healthz", timeout=2)[0] == 200:
                    self.start_s = time.monotonic() - t0
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit("node did not come up")

    def accel(self, timeout=60):
        """The accelerator the node chose (healthz, once its probe decided),
        and the time it took (its log line)."""
        deadline = time.monotonic() + timeout
        while True:
            b = self.rest.call("GET", "/healthz")[1]["backends"]["microvm"]
            if b.get("accel") != "probing" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        out = {"accel": b.get("accel"), "accel_reason": b.get("accel_reason", b.get("reason")),
               "node_start_s": round(self.start_s, 3)}
        with open(self.state + ".log", errors="replace") as f:
            for line in f:
                if "vm accelerator" in line and "(decided in " in line:
                    out["probe_s"] = float(line.rsplit("(decided in ", 1)[1].split()[0])
        return out

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=120)
        self.log.close()
        shutil.rmtree(self.state, ignore_errors=True)
        os.unlink(self.state + ".log")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dsec-bin", default=os.path.join(REPO, "build", "src", "dsec"))
    ap.add_argument("--store", default="/var/lib/dsec-test/store")
    ap.add_argument("--guest-dir", default=os.environ.get("DSEC_GUEST_DIR", "/var/lib/dsec/guest"))
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--vm-samples", type=int, default=3, help="booted q35 VMs")
    ap.add_argument("--accel", default="auto", choices=["auto", "kvm", "tcg"],
                    help="DSEC_VM_ACCEL for the nodes (default auto: the node's probe decides)")
    ap.add_argument("--mem-mb", type=int, default=128)
    ap.add_argument("--idle", type=int, default=3, help="idle template clones measured at once")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if not shutil.which("qemu-system-x86_64"):
        raise SystemExit("qemu-system-x86_64 is not installed")
    report = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
              "host": platform.node(), "cores": os.cpu_count(),
              "dev_kvm": os.access("/dev/kvm", os.W_OK), "loadavg_before": os.getloadavg(),
              "mem_mb": a.mem_mb}
    boots = {"container": [], "microvm_boot": [], "vm_boot": [],
             "microvm_template_restore_no_spare": [],
             "microvm_first_with_template_build": [], "microvm_template_spare": [],
             "microvm_template_back_to_back": []}
    # Templates off: every microVM boots. Its KVM probe really runs (not
    # from the machine's cache), so the report has its time.
    n = BenchNode(a, DSEC_VM_TEMPLATES="0", DSEC_VM_KVM_PROBE_CACHE="off")
    try:
        report.update(n.accel())
        for backend, key, k in (("microvm", "microvm_boot", a.samples),
                                ("vm", "vm_boot", a.vm_samples)):
            for _ in range(k):
                sid, _, first = create_first_exec(n.rest, backend, a.mem_mb)
                boots[key].append(first)
                n.rest.ok("DELETE", f"/v1/sandboxes/{sid}")
        sid, _, _ = create_first_exec(n.rest, "microvm", a.mem_mb)
        time.sleep(2)  # idle
        booted_mem = smaps_breakdown(qemu_pid(n.state, sid), a.mem_mb)
        n.rest.ok("DELETE", f"/v1/sandboxes/{sid}")
    finally:
        n.stop()
    # Templates without spares: each create restores the template.
    n = BenchNode(a, DSEC_VM_SPARES="0")
    try:
        sid, _, _ = create_first_exec(n.rest, "microvm", a.mem_mb)
        n.rest.ok("DELETE", f"/v1/sandboxes/{sid}")
        for _ in range(a.samples):
            sid, _, first = create_first_exec(n.rest, "microvm", a.mem_mb)
            boots["microvm_template_restore_no_spare"].append(first)
            n.rest.ok("DELETE", f"/v1/sandboxes/{sid}")
    finally:
        n.stop()
    # Templates with spares (the default).
    n = BenchNode(a)
    rest, state = n.rest, n.state
    try:
        sid, _, first = create_first_exec(rest, "microvm", a.mem_mb)
        boots["microvm_first_with_template_build"].append(first)
        rest.ok("DELETE", f"/v1/sandboxes/{sid}")
        for _ in range(a.samples):
            sid, _, first = create_first_exec(rest, "container", a.mem_mb)
            boots["container"].append(first)
            rest.ok("DELETE", f"/v1/sandboxes/{sid}")
        for _ in range(a.samples):
            wait_spare(state)
            sid, _, first = create_first_exec(rest, "microvm", a.mem_mb)
            boots["microvm_template_spare"].append(first)
            rest.ok("DELETE", f"/v1/sandboxes/{sid}")
        wait_spare(state)
        for _ in range(a.samples):
            sid, _, first = create_first_exec(rest, "microvm", a.mem_mb)
            boots["microvm_template_back_to_back"].append(first)
            rest.ok("DELETE", f"/v1/sandboxes/{sid}")
        report["create_to_first_exec"] = {k: summary(v) for k, v in boots.items() if v}

        def clone_memory(sids):
            each = [smaps_breakdown(qemu_pid(state, c), a.mem_mb) for c in sids]
            return {"count": len(sids),
                    "median_overhead_pss_kib": statistics.median(m["overhead_pss_kib"]
                                                                 for m in each),
                    "median_qemu_pss_kib": statistics.median(m["qemu_pss_kib"] for m in each),
                    "each": each}

        clones = []
        idle_clones = {}
        for k in sorted({1, a.idle}):
            while len(clones) < k:
                wait_spare(state)
                clones.append(create_first_exec(rest, "microvm", a.mem_mb)[0])
            wait_spare(state)
            time.sleep(2)  # idle
            idle_clones[str(k)] = clone_memory(clones)
        spare = spare_pid(state)
        spare_mem = smaps_breakdown(spare, a.mem_mb)
        c0, s0 = cpu_s(qemu_pid(state, clones[0])), cpu_s(spare)
        time.sleep(10)
        idle_cpu = {"clone_cpu_s_per_10s": round(cpu_s(qemu_pid(state, clones[0])) - c0, 2),
                    "spare_cpu_s_per_10s": round(cpu_s(spare) - s0, 2)}
        csid, _, _ = create_first_exec(rest, "container", a.mem_mb)
        time.sleep(2)  # idle
        tdir = f"/dev/shm/dsec-{n.node_id}"
        template_kib = sum(os.stat(os.path.join(r, f)).st_blocks // 2
                           for r, _, fs in os.walk(tdir) for f in fs)
        report["idle_memory"] = {
            "microvm_booted_alone": booted_mem,
            "microvm_template_clones": idle_clones,
            "template_files_kib": template_kib,
            "spare": spare_mem,
            "idle_cpu": idle_cpu,
            "container": container_memory(n.node_id, csid)}
        rest.ok("DELETE", f"/v1/sandboxes/{csid}")
        for c in clones[1:]:
            rest.ok("DELETE", f"/v1/sandboxes/{c}")

        sid = clones[0]
        pauses, resumes = [], []
        for i in range(a.samples):
            rest.ok("POST", f"/v1/sandboxes/{sid}/exec",
                    {"cmd": ["sh", "-c", f"echo {i} > /root/n"]})
            t0 = time.monotonic()
            rest.ok("POST", f"/v1/sandboxes/{sid}/pause")
            pauses.append(time.monotonic() - t0)
            size = os.path.getsize(os.path.join(state, "sandboxes", sid, "state"))
            t0 = time.monotonic()
            rest.ok("POST", f"/v1/sandboxes/{sid}/resume")
            out = rest.ok("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["cat", "/root/n"]})
            resumes.append(time.monotonic() - t0)
            assert out["stdout"].strip() == str(i), out
        report["pause_template_clone"] = summary(pauses)
        report["resume_to_first_exec_template_clone"] = summary(resumes)
        report["state_file_bytes"] = size
        rest.ok("DELETE", f"/v1/sandboxes/{sid}")
        report["loadavg_after"] = os.getloadavg()
    finally:
        n.stop()
    text = json.dumps(report, indent=2)
    print(text)
    out = a.out or os.path.join(REPO, "bench", "results",
                                f"vm-{datetime.date.today().isoformat()}-templates.json")
    with open(out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
