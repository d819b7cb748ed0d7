#!/usr/bin/env python3
"""VM backend benchmark (issue 7): microVM and q35 VM against a container.

Starts a private node (root; the store must hold base/busybox@1; the guest
kernel must be in --guest-dir, see scripts/guest_kernel.sh):
    python3 bench/vm_bench.py --dsec-bin build/src/dsec \
        --store /var/lib/dsec-test/store --guest-dir /var/lib/dsec/guest

Measures, through REST:
  1. create -> first exec (`true`) for --samples microVMs, one q35 VM and
     --samples containers (each one destroyed before the next);
  2. pause (stop + save the machine to disk + end QEMU) and resume (new QEMU
     restoring it) -> first exec, --samples times on one microVM;
  3. host memory of one idle microVM (guest memory --mem-mb) after it booted
     and ran one exec: QEMU's RSS and PSS (smaps_rollup), the part of the RSS
     that is guest RAM (the mapping of exactly mem-mb MiB) and the rest
     (QEMU's own overhead); against one idle container (PSS of its processes,
     its memory cgroup's usage).
Template restore is not implemented, so it is not measured.
Prints one JSON report; --out FILE writes it too (default
bench/results/vm-<date>.json). Under TCG each boot burns several CPU-seconds,
so numbers depend heavily on the load of the machine: the report records the
load average before and after.
"""

import argparse
import datetime
import http.client
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Rest:
    def __init__(self, port):
        self.port = port

    def call(self, method, path, body=None, timeout=600):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            c.request(method, path, body=data,
                      headers={"Content-Type": "application/json"} if data else {})
            r = c.getresponse()
            out = r.read()
            try:
                return r.status, json.loads(out)
            except ValueError:
                return r.status, out
        finally:
            c.close()

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


def summary(xs):
    xs = sorted(xs)
    return {"n": len(xs), "min_s": round(xs[0], 3), "median_s": round(statistics.median(xs), 3),
            "max_s": round(xs[-1], 3)}


def qemu_pid(state_dir, sid):
    needle = os.path.join(state_dir, "sandboxes", sid).encode()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if args[0].endswith(b"qemu-system-x86_64") and any(needle in a for a in args):
                return int(pid)
    return None


def rollup(pid):
    out = {}
    for line in open(f"/proc/{pid}/smaps_rollup"):
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "kB":
            out[parts[0].rstrip(":")] = int(parts[1])
    return out


def guest_ram_rss_kb(pid, mem_mb):
    """Rss of the anonymous mapping that is the guest's RAM (exactly mem_mb)."""
    size_kb = mem_mb * 1024
    best = 0
    cur_size = None
    for line in open(f"/proc/{pid}/smaps"):
        parts = line.split()
        if "-" in parts[0] and len(parts) >= 5:
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            cur_size = (hi - lo) // 1024
        elif parts[0] == "Rss:" and cur_size is not None and cur_size >= size_kb \
                and cur_size <= size_kb + 4096:
            best = max(best, int(parts[1]))
    return best


def container_memory(node_id, sid):
    procs = set()
    base = f"/sys/fs/cgroup/memory/dsec/{node_id}/{sid}"
    for line in open(base + "/cgroup.procs"):
        procs.add(int(line))
    pss = sum(rollup(p).get("Pss", 0) for p in procs)
    usage = int(open(base + "/memory.usage_in_bytes").read())
    return {"processes": len(procs), "pss_kib": pss, "cgroup_usage_kib": usage // 1024}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dsec-bin", default=os.path.join(REPO, "build", "src", "dsec"))
    ap.add_argument("--store", default="/var/lib/dsec-test/store")
    ap.add_argument("--guest-dir", default=os.environ.get("DSEC_GUEST_DIR", "/var/lib/dsec/guest"))
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--mem-mb", type=int, default=128)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if not shutil.which("qemu-system-x86_64"):
        raise SystemExit("qemu-system-x86_64 is not installed")
    state = tempfile.mkdtemp(prefix="dsec-vmbench-", dir="/var/tmp")
    node_id = "vmbench-" + os.urandom(3).hex()
    port = free_port()
    env = dict(os.environ, DSEC_GUEST_DIR=a.guest_dir, DSEC_VM_BOOT_TIMEOUT_S="120")
    log = open(state + ".log", "wb")
    node = subprocess.Popen([a.dsec_bin, "node", "--state-dir", state, "--store", a.store,
                             "--rest", f"127.0.0.1:{port}", "--listen",
                             f"127.0.0.1:{free_port()}", "--node-id", node_id],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    rest = Rest(port)
    report = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
              "host": platform.node(), "cores": os.cpu_count(),
              "kvm": os.access("/dev/kvm", os.W_OK), "loadavg_before": os.getloadavg(),
              "mem_mb": a.mem_mb}
    try:
        for _ in range(200):
            try:
                if rest.call("GET", "/healthz", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        boots = {"container": [], "microvm": [], "vm": []}
        for backend, n in (("container", a.samples), ("microvm", a.samples), ("vm", 1)):
            for _ in range(n):
                sid, _, first = create_first_exec(rest, backend, a.mem_mb)
                boots[backend].append(first)
                rest.ok("DELETE", f"/v1/sandboxes/{sid}")
        report["create_to_first_exec"] = {k: summary(v) for k, v in boots.items()}

        sid, _, _ = create_first_exec(rest, "microvm", a.mem_mb)
        time.sleep(2)  # idle
        pid = qemu_pid(state, sid)
        r = rollup(pid)
        ram = guest_ram_rss_kb(pid, a.mem_mb)
        csid, _, _ = create_first_exec(rest, "container", a.mem_mb)
        time.sleep(1)
        report["idle_memory"] = {
            "microvm": {"qemu_rss_kib": r.get("Rss"), "qemu_pss_kib": r.get("Pss"),
                        "guest_ram_rss_kib": ram,
                        "overhead_beyond_guest_ram_kib": r.get("Rss", 0) - ram},
            "container": container_memory(node_id, csid)}
        rest.ok("DELETE", f"/v1/sandboxes/{csid}")

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
        report["pause"] = summary(pauses)
        report["resume_to_first_exec"] = summary(resumes)
        report["state_file_bytes"] = size
        rest.ok("DELETE", f"/v1/sandboxes/{sid}")
        report["template_restore_to_first_exec"] = "not implemented"
        report["loadavg_after"] = os.getloadavg()
    finally:
        node.terminate()
        node.wait(timeout=120)
        log.close()
        shutil.rmtree(state, ignore_errors=True)
        os.unlink(state + ".log")
    text = json.dumps(report, indent=2)
    print(text)
    out = a.out or os.path.join(REPO, "bench", "results",
                                f"vm-{datetime.date.today().isoformat()}.json")
    with open(out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
