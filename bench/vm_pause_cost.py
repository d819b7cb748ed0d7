#!/usr/bin/env python3
"""What a paused microVM costs (issue 14): QEMU RSS while running, the files left
while paused (state file, upper disk), pause and resume->first exec time, with
VM templates off and on. Root; uses the test harness's Node helper. Prints JSON."""
import sys, time, os, json, subprocess
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "pylib"))
from dsec_harness import Node, BUSYBOX, wait_for
def qemu_pids():
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.readlink(f"/proc/{p}/exe").endswith("qemu-system-x86_64"): out.append(int(p))
            except OSError: pass
    return out
def rss(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1]) * 1024
res = {}
for templates in ("0", "1"):
    n = Node(os.environ.get("DSEC_BIN", "build/cmd/dsec"), os.environ.get("DSEC_TEST_STORE", "/var/lib/dsec-test/store"), env={"DSEC_GUEST_DIR": "/var/lib/dsec/guest", "DSEC_VM_TEMPLATES": templates, "DSEC_VM_SPARES": "0"}).start()
    c = n.client
    try:
        before = set(qemu_pids())
        sid = c.create_ok([BUSYBOX], backend="microvm", memory_mb=128)
        c.sh(sid, "dd if=/dev/urandom of=/tmp/r bs=1M count=16 2>/dev/null; echo ok")
        mine = [p for p in qemu_pids() if p not in before]
        r = {"qemu_rss_mb_running": round(sum(rss(p) for p in mine) / 2**20, 1)}
        t0 = time.monotonic(); st, _ = c.call("POST", f"/v1/sandboxes/{sid}/pause"); r["pause_s"] = round(time.monotonic() - t0, 3)
        d = os.path.join(n.state_dir, "sandboxes", sid)
        r["qemu_left_after_pause"] = [p for p in qemu_pids() if p in mine]
        files = {}
        for f in os.listdir(d):
            p = os.path.join(d, f)
            if os.path.isfile(p):
                s = os.stat(p); files[f] = {"size_mb": round(s.st_size / 2**20, 1), "on_disk_mb": round(s.st_blocks * 512 / 2**20, 1)}
        r["sandbox_dir_files_while_paused"] = files
        t0 = time.monotonic(); c.call("POST", f"/v1/sandboxes/{sid}/resume"); c.sh(sid, "true"); r["resume_to_first_exec_s"] = round(time.monotonic() - t0, 3)
        res["templates_" + templates] = r
        c.delete(sid)
    finally:
        c.cleanup(); n.stop(); n.remove_state()
print(json.dumps(res, indent=1))
