# A sandbox's init runs in a session and process group of its own, so a
# signal to the node's process group (`kill -9 -PGID`, or Ctrl-\ / Ctrl-C in
# the terminal that started the node) stops only the node; the node started
# again on the same state dir adopts every sandbox (issue 28, fault 3).
#
# The node here is started as the leader of a new session (start_new_session),
# so its group holds exactly the node and whatever it started without setsid;
# the test kills that group only.
import os
import signal
import subprocess
import time

from dsec_harness import Node, _finish_node, procs_in_node_cgroups


class GroupLeaderNode(Node):
    """A node that leads its own process group (as in a terminal)."""

    def start(self):
        real = subprocess.Popen

        def popen(*a, **kw):
            kw["start_new_session"] = True
            return real(*a, **kw)

        subprocess.Popen = popen
        try:
            return super().start()
        finally:
            subprocess.Popen = real


def pgid_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[2])


def test_kill_of_the_node_group_spares_sandboxes_and_restart_adopts_them(dsec_bin, store):
    n = GroupLeaderNode(dsec_bin, store)
    n.start()
    try:
        c = n.client
        ids = [c.create_ok(memory_mb=128, labels={"suite": "pgroup"}) for _ in range(2)]
        for i, sid in enumerate(ids):
            status, out = c.put_file(sid, "/work/f", f"kept-{i}\n".encode())
            assert status in (200, 201), out
        pgid = pgid_of(n.proc.pid)
        assert pgid == n.proc.pid
        inits = [pid for pid, _ in procs_in_node_cgroups(n.node_id)]
        assert inits, "no sandbox process found in the node's cgroups"
        in_group = [pid for pid in inits if pgid_of(pid) == pgid]
        assert not in_group, f"sandbox processes {in_group} are in the node's group {pgid}"

        os.killpg(pgid, signal.SIGKILL)  # only this node's own group
        n.proc.wait(30)
        time.sleep(0.5)
        alive = [pid for pid in inits if os.path.exists(f"/proc/{pid}")]
        assert alive == inits, f"sandbox processes died with the node's group: {inits} -> {alive}"

        n.start()  # same state dir: adopts
        log = n.log_tail()
        assert "ECONNREFUSED" not in log, log
        status, out = c.list({"suite": "pgroup"})
        assert status == 200 and sorted(s["id"] for s in out["sandboxes"]) == sorted(ids), out
        for i, sid in enumerate(ids):
            assert c.sh(sid, "cat /work/f")["stdout"] == f"kept-{i}\n"
        # Adopted inits are not the new node's children: once destroyed they
        # are reaped by the host, a moment later (as in test_restart).
        for sid in ids:
            status, out = c.delete(sid)
            assert status == 200 and out["deleted"] is True, out
        c.created.clear()
        deadline = time.monotonic() + 15
        while any(os.path.exists(f"/proc/{pid}") for pid in inits):
            assert time.monotonic() < deadline, f"adopted inits {inits} still exist"
            time.sleep(0.1)
    finally:
        _finish_node(n)
