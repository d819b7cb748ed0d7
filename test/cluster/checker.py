# The checker of a fault run (issue 28): reads the history (workload.History)
# and the cluster's state after the final heal, and returns every violation
# of the invariants, each as one line that says what and which call:
#
#   answered   every sandbox whose create was answered exists, is listed and
#              answers through every node, unless the history deleted it
#   files      the content read back at the end is one the history may have
#              left there (the last write that succeeded, or a later write
#              whose answer was lost)
#   leaks      every sandbox of the run listed anywhere is accounted for by an
#              answered create or a create whose answer was lost, and the
#              list by labels is the same through every node
#   request_id a request_id never has two live sandboxes; creates with the
#              same key answered the same id (while it was not deleted)
#   unreachable calls made across a cut (probes) fail within 2 s with a 503
#              that names the owner, or succeed; no call hangs to its timeout
#   converge   membership converged within 10 s after every heal
#   placement  after the final heal, creates through one node use every node
#   disk       a full node refused creates clearly (not 5xx-internal), kept
#              serving its sandboxes, and created again once freed
#   reset      every sandbox held before a whole-cluster restart is adopted
import time
import urllib.parse

UNREACHABLE_BOUND_S = 2.0
CONVERGE_BOUND_S = 10.0
HANG_S = 25.0  # the workload's calls time out at 30 s: anything near is a hang
CREATE_OPS = ("create", "probe-create-full", "probe-create-freed")


def _q(sid):
    return urllib.parse.quote(sid, safe="")


def _ok(rec):
    return rec["status"] in (200, 201)


def _lost(rec):
    """The answer never came: the call may or may not have happened (a 503
    for a call already sent to a node that became unreachable, or that went
    away while it had the call, says so)."""
    text = str(rec["answer"])
    if rec["status"] == 503 and ("may still complete" in text
                                 or "may have taken effect" in text):
        return True
    return rec["status"] == "error" or rec["status"] == 504


def retrying(fn, bound_s=20.0):
    """fn() -> (status, out), retried while it answers 503 (retryable: a peer
    link still recovering from a heal, e.g. TCP's retransmission backoff)."""
    deadline = time.monotonic() + bound_s
    while True:
        status, out = fn()
        if status != 503 or time.monotonic() > deadline:
            return status, out
        time.sleep(0.5)


def check(history, cluster, run_tag):
    calls, events = history["calls"], history["events"]
    bad = []
    nodes = [n for n in cluster.nodes if n.alive()]

    # -- what the history says exists --------------------------------------------
    answered, deleted, maybe = {}, set(), set()  # sid -> rid
    lost_rids = set()
    for r in calls:
        if r["op"] in CREATE_OPS:
            if _ok(r) and isinstance(r["answer"], dict):
                answered[r["answer"]["id"]] = r.get("rid")
            elif _lost(r) or r["status"] == 503:
                # A 503 from a forwarded create whose answer was cut off may
                # have created it: the request_id (retried) tells.
                lost_rids.add(r.get("rid"))
        elif r["op"] == "delete":
            # 200 {"deleted": false} says nothing was there to delete: if the
            # sandbox then shows up, that answer was wrong (a leak).
            if _ok(r) and isinstance(r["answer"], dict) and r["answer"].get("deleted"):
                deleted.add(r["sid"])
            elif _lost(r):
                maybe.add(r["sid"])

    # -- the cluster's state through every node -----------------------------------
    listed = {}
    for n in nodes:
        status, out = retrying(lambda: n.client.list({"dsf": run_tag}))
        if status != 200:
            bad.append(f"leaks: list through {n.node_id} answered {status}: {out}")
            continue
        listed[n.node_id] = {s["id"]: s for s in out["sandboxes"]}
    views = list(listed.values())
    for nid, v in listed.items():
        if views and set(v) != set(views[0]):
            bad.append(f"leaks: list by labels through {nid} differs: "
                       f"{sorted(set(v) ^ set(views[0]))}")
    everywhere = set().union(*[set(v) for v in views]) if views else set()
    labels = {}
    for v in views:
        for sid, s in v.items():
            labels[sid] = s.get("labels", {})

    for sid, rid in answered.items():
        if sid in deleted:
            if sid in everywhere:
                bad.append(f"answered: {sid} was deleted (200) but is still listed")
            continue
        if sid in maybe:
            continue
        if sid not in everywhere:
            bad.append(f"answered: {sid} (request_id {rid}) is not listed by any node")
            continue
        for n in nodes:
            status, out = retrying(lambda: n.client.exec(sid, "echo ok", timeout=30))
            if status != 200 or out.get("stdout") != "ok\n":
                bad.append(f"answered: exec on {sid} through {n.node_id}: {status} {out}")

    for sid in everywhere:
        if sid in answered:
            continue
        rid = labels.get(sid, {}).get("rid")
        if rid in lost_rids:
            continue
        bad.append(f"leaks: {sid} (labels {labels.get(sid)}) is listed but no create in the "
                   "history answered it and none with its request_id lost its answer")

    # -- request_id ----------------------------------------------------------------
    by_rid = {}
    for sid in everywhere:
        rid = labels.get(sid, {}).get("rid")
        if rid:
            by_rid.setdefault(rid, []).append(sid)
    for rid, sids in by_rid.items():
        if len(sids) > 1:
            bad.append(f"request_id: {rid} has {len(sids)} live sandboxes: {sorted(sids)}")
    ids_of = {}
    for r in calls:
        if r["op"] == "create" and _ok(r) and r.get("rid"):
            ids_of.setdefault(r["rid"], set()).add(r["answer"]["id"])
    for rid, ids in ids_of.items():
        alive = [i for i in ids if i not in deleted]
        if len(alive) > 1:
            bad.append(f"request_id: creates with {rid} answered {len(alive)} different live "
                       f"ids: {sorted(alive)}")

    # -- files ------------------------------------------------------------------
    writes = {}
    for r in calls:
        if r["op"] == "write":
            writes.setdefault(r["sid"], []).append(r)
    for sid, ws in writes.items():
        if sid in deleted or sid in maybe or sid not in everywhere:
            continue
        done = [w for w in ws if _ok(w)]
        allowed = set()
        if done:
            last_end = max(w["end"] for w in done)
            # Writes not strictly before another finished one may be last.
            allowed |= {w["value"] for w in done
                        if not any(o["start"] > w["end"] for o in done)}
            allowed |= {w["value"] for w in ws if _lost(w) and w["end"] >= last_end}
        else:
            allowed |= {w["value"] for w in ws if _lost(w)}
        if not allowed:
            continue
        n = nodes[0]
        status, data = retrying(lambda: n.client.get_file(sid, "/tmp/dsf.txt"))
        got = data.decode(errors="replace") if status == 200 else None
        if got not in allowed and not (got is None and not done):
            bad.append(f"files: {sid} reads {got!r}; the history allows {sorted(allowed)}")

    # -- calls across a cut, and hangs ----------------------------------------------
    for r in calls:
        took = r["end"] - r["start"]
        if r["op"] == "probe-exec" and not _ok(r):
            msg = r["answer"].get("error", {}).get("message", "") \
                if isinstance(r["answer"], dict) else str(r["answer"])
            if r["status"] != 503:
                bad.append(f"unreachable: {r['op']} on {r['sid']} through {r['node']} during "
                           f"{r['fault']} answered {r['status']} in {took:.2f}s: {msg}")
            elif took > UNREACHABLE_BOUND_S:
                bad.append(f"unreachable: {r['sid']} through {r['node']} during {r['fault']} "
                           f"took {took:.2f}s to fail (bound {UNREACHABLE_BOUND_S}s)")
            elif r["owner"] not in msg:
                bad.append(f"unreachable: the 503 for {r['sid']} does not name node "
                           f"{r['owner']}: {msg}")
            elif "dead" in msg and "unreachable" not in msg:
                bad.append(f"unreachable: the 503 calls live node {r['owner']} dead: {msg}")
        if took >= HANG_S and not any(f in ("sigstop", "kill9", "reset")
                                      for f in r.get("faults", [])):
            bad.append(f"hang: {r['op']} on {r.get('sid')} through {r['node']} took "
                       f"{took:.1f}s under faults {r.get('faults')}")

    for e in events:
        if e["kind"] == "workload-error":
            bad.append(f"workload: worker {e['worker']} {e['op']}: {e['error']}")

    # -- membership ----------------------------------------------------------------
    for e in events:
        if e["kind"] == "not-converged" or (e["kind"] == "converged"
                                             and e["seconds"] > CONVERGE_BOUND_S):
            bad.append(f"converge: after {e['after']} membership took {e['seconds']}s")

    # -- disk -------------------------------------------------------------------------
    for r in calls:
        if r["op"] == "probe-create-full":
            if _ok(r):
                bad.append(f"disk: a create on full node {r['node']} succeeded: {r['answer']}")
            else:
                msg = r["answer"].get("error", {}).get("message", "") \
                    if isinstance(r["answer"], dict) else str(r["answer"])
                if r["status"] not in (429, 503) or "full" not in msg:
                    bad.append(f"disk: a create on full node {r['node']} answered "
                               f"{r['status']} (not a clear, retryable refusal): {msg}")
        if r["op"] == "probe-exec-full" and not _ok(r):
            bad.append(f"disk: {r['sid']} on full node {r['node']} stopped serving: "
                       f"{r['status']} {r['answer']}")
        if r["op"] == "probe-create-freed" and not _ok(r):
            bad.append(f"disk: node {r['node']} did not create again once freed: "
                       f"{r['status']} {r['answer']}")

    # -- whole-cluster restart ------------------------------------------------------
    for e in events:
        if e["kind"] == "reset-held":
            for sid in e["sandboxes"]:
                if sid not in deleted and sid not in maybe and sid not in everywhere:
                    bad.append(f"reset: {sid} held before the whole-cluster restart is gone")
    return bad


def placement_uses_every_node(cluster, run_tag, per_node=4):
    """After the heal: creates (no request_id) through one node land on every
    node. Returns (violations, ids made) - the caller deletes them."""
    entry = cluster.nodes[0]
    ids = []
    for _ in range(per_node * len(cluster.nodes)):
        status, out = entry.client.create(memory_mb=64, labels={"dsf": run_tag + "-place"})
        if status == 201:
            ids.append(out["id"])
    owners = {sid.split(".")[0] for sid in ids}
    missing = {n.node_id for n in cluster.nodes} - owners
    bad = [f"placement: after the heal, {len(ids)} creates through {entry.node_id} never "
           f"used {sorted(missing)}"] if missing else []
    return bad, ids
