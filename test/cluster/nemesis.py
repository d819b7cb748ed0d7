# The nemesis of a fault run (issue 28): a seeded schedule of faults, each
# held for a while, then healed, with probes measured while it lasts. Every
# fault and heal goes into the history (workload.History) with its targets,
# so the checker knows which calls ran under which fault.
#
# Kinds (each once per schedule in a seeded order, or drawn at random):
#   partition   majority/minority halves
#   isolate     one node cut off from all others
#   bridge      two halves that both reach one middle node
#   one_way     one node hears nothing from another
#   loss        one node drops 20% of what peers send it (nftables numgen)
#   kill9       kill -9 of a node's process group, restart on its state dir
#   sigstop     SIGSTOP for a few seconds, then SIGCONT
#   disk_full   the node's state volume filled, later freed
#   reset       whole-cluster kill -9 and start (DSec's reset)
# `delay` is not a kind: the kernel has no sch_netem (netns_cluster.delay).
import random
import time

import workload as wl

KINDS = ["partition", "isolate", "bridge", "one_way", "loss", "kill9", "sigstop",
         "disk_full", "reset"]
CONVERGE_BOUND_S = 10  # issue 28: membership converges within 10 s of a heal


class Nemesis:
    def __init__(self, cluster, history, seed, hold_s=8.0, quiet_s=4.0):
        self.c = cluster
        self.h = history
        self.rng = random.Random(seed)
        self.hold_s = hold_s
        self.quiet_s = quiet_s
        self.probes = []  # what each fault measured (also in the history)

    def schedule(self, kinds=None):
        order = list(kinds or KINDS)
        self.rng.shuffle(order)
        return order

    def run(self, order, live_ids):
        """Applies each fault of `order` in turn; `live_ids()` gives the
        sandboxes the workload holds (for probes)."""
        for kind in order:
            getattr(self, "f_" + kind)(live_ids)
            self.converge(kind)
            time.sleep(self.quiet_s)

    def converge(self, after):
        t0 = time.monotonic()
        ok = False
        while time.monotonic() - t0 < 30:
            if self.c.converged():
                ok = True
                break
            time.sleep(0.2)
        took = round(time.monotonic() - t0, 2)
        self.h.event("converged" if ok else "not-converged", after=after, seconds=took)

    # -- probes -------------------------------------------------------------------

    def probe_unreachable(self, kind, sides, live_ids):
        """Through a node of each side, one exec on a sandbox owned across
        the cut; the checker wants 503 naming the owner within 2 s."""
        where = {n.node_id: i for i, side in enumerate(sides) for n in side}
        for sid in list(live_ids())[:6]:
            owner = sid.split(".")[0]
            if owner not in where:
                continue
            for side in sides:
                if where[owner] == where[side[0].node_id]:
                    continue
                entry = self.rng.choice(side)
                wl.call(entry, self.h, "probe-exec", "POST",
                        f"/v1/sandboxes/{wl.q(sid)}/exec", {"cmd": "true", "timeout_s": 5},
                        sid=sid, owner=owner, fault=kind)

    def probe_request_id(self, kind, sides):
        """The same request_id through both sides: at most one sandbox."""
        rid = f"{self.h_tag()}-split-{kind}"
        for side in sides:
            body = {"layers": [wl.BUSYBOX], "memory_mb": 64, "ttl_s": 7200,
                    "request_id": rid, "labels": {"dsf": self.h_tag(), "rid": rid}}
            wl.call(side[0], self.h, "create", "POST", "/v1/sandboxes", body, rid=rid,
                    fault=kind)

    def h_tag(self):
        return getattr(self.h, "tag", "dsf")

    # -- faults -------------------------------------------------------------------

    def _hold_partition(self, kind, sides, live_ids, apply):
        self.h.begin_fault(kind, sides=[[n.node_id for n in s] for s in sides])
        apply()
        time.sleep(2.0)  # let gossip notice: probes then measure steady state
        self.probe_unreachable(kind, sides, live_ids)
        self.probe_request_id(kind, sides)
        time.sleep(max(0.0, self.hold_s - 2.0))
        self.c.heal()
        self.h.end_fault(kind)

    def f_partition(self, live_ids):
        nodes = list(self.c.nodes)
        self.rng.shuffle(nodes)
        minority = nodes[: len(nodes) // 2]
        majority = nodes[len(nodes) // 2:]
        self._hold_partition("partition", [majority, minority], live_ids,
                             lambda: self.c.partition([majority, minority]))

    def f_isolate(self, live_ids):
        one = self.rng.choice(self.c.nodes)
        rest = [n for n in self.c.nodes if n is not one]
        self._hold_partition("isolate", [rest, [one]], live_ids,
                             lambda: self.c.partition([rest, [one]]))

    def f_bridge(self, live_ids):
        middle = self.rng.choice(self.c.nodes)
        rest = [n for n in self.c.nodes if n is not middle]
        a, b = rest[: len(rest) // 2], rest[len(rest) // 2:]
        # Only a and b are cut from each other; probes compare those two.
        self._hold_partition("bridge", [a, b], live_ids,
                             lambda: self.c.bridge_partition(middle))

    def f_one_way(self, live_ids):
        src, dst = self.rng.sample(self.c.nodes, 2)
        self._hold_partition("one_way", [[src], [dst]], live_ids,
                             lambda: self.c.one_way(src, dst))

    def f_loss(self, live_ids):
        n = self.rng.choice(self.c.nodes)
        self.h.begin_fault("loss", node=n.node_id, percent=20)
        self.c.loss(n, 20)
        time.sleep(self.hold_s)
        self.c.heal()
        self.h.end_fault("loss")

    def f_kill9(self, live_ids):
        n = self.rng.choice(self.c.nodes)
        self.h.begin_fault("kill9", node=n.node_id)
        n.kill9()
        time.sleep(self.hold_s / 2)
        n.start()
        self.h.end_fault("kill9")

    def f_sigstop(self, live_ids):
        n = self.rng.choice(self.c.nodes)
        self.h.begin_fault("sigstop", node=n.node_id)
        n.sigstop()
        time.sleep(self.hold_s / 2)
        n.cont()
        self.h.end_fault("sigstop")

    def f_disk_full(self, live_ids):
        n = self.rng.choice(self.c.nodes)
        self.h.begin_fault("disk_full", node=n.node_id)
        n.fill_disk()
        time.sleep(1.0)
        # A create pinned to it must be refused clearly; its sandboxes still run.
        body = {"layers": [wl.BUSYBOX], "memory_mb": 64, "node": n.node_id,
                "labels": {"dsf": self.h_tag(), "rid": "disk-full-probe"}}
        wl.call(n, self.h, "probe-create-full", "POST", "/v1/sandboxes", body, fault="disk_full")
        for sid in [s for s in live_ids() if s.split(".")[0] == n.node_id][:3]:
            wl.call(n, self.h, "probe-exec-full", "POST", f"/v1/sandboxes/{wl.q(sid)}/exec",
                    {"cmd": "echo still", "timeout_s": 10}, sid=sid, fault="disk_full")
        time.sleep(max(0.0, self.hold_s - 1.0))
        n.free_disk()
        self.h.end_fault("disk_full")
        time.sleep(1.0)
        body["labels"] = {"dsf": self.h_tag(), "rid": "disk-freed-probe"}
        wl.call(n, self.h, "probe-create-freed", "POST", "/v1/sandboxes", body,
                fault="disk_full")

    def f_reset(self, live_ids):
        self.h.begin_fault("reset")
        before = sorted(live_ids())
        self.c.stop_all()
        time.sleep(1.0)
        self.c.start_all()
        self.h.end_fault("reset")
        self.h.event("reset-held", sandboxes=before)
