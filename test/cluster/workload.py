# The workload of a fault run and its history (issue 28): worker threads
# create sandboxes with request_ids, exec, write and read files, pause and
# resume, snapshot and delete, each call through a random node, and record
# every call and its answer. The checker (checker.py) reads the history.
#
# Every sandbox carries the labels {"dsf": RUN, "rid": REQUEST_ID}, so the
# checker can list the run's sandboxes through any node and tell which
# request made each. A create retried with the same request_id through another
# node is part of the mix (the retry a trainer makes after a lost answer).
import http.client
import json
import random
import threading
import time
import urllib.parse

BUSYBOX = "base/busybox@1"
CALL_TIMEOUT_S = 30  # a hung call shows up as a timeout in the history


class History:
    """Every call: op, entry node, sandbox, args, start/end (monotonic s),
    status (HTTP or "error"), answer (json, bytes as text, or the exception),
    and the faults active when it started."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = []
        self.events = []  # nemesis and checks: {"t", "kind", ...}
        self.t0 = time.monotonic()
        self.active = {}  # fault name -> description, while it lasts

    def now(self):
        return time.monotonic() - self.t0

    def event(self, kind, **kw):
        with self.lock:
            self.events.append(dict(t=round(self.now(), 3), kind=kind, **kw))

    def begin_fault(self, name, **kw):
        with self.lock:
            self.active[name] = kw
        self.event("fault", name=name, **kw)

    def end_fault(self, name):
        with self.lock:
            self.active.pop(name, None)
        self.event("heal", name=name)

    def record(self, rec):
        with self.lock:
            self.calls.append(rec)

    def to_json(self):
        with self.lock:
            return {"calls": list(self.calls), "events": list(self.events)}


def call(node, history, op, method, url, body=None, raw=False, sid=None, **extra):
    """One HTTP call through `node`, recorded. Returns (status, answer)."""
    with history.lock:
        faults = sorted(history.active)
    rec = dict(op=op, node=node.node_id, sid=sid, start=round(history.now(), 3), faults=faults,
               **extra)
    conn = http.client.HTTPConnection(node.addr, node.client.port, timeout=CALL_TIMEOUT_S)
    try:
        hdrs = {}
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        elif body is not None:
            hdrs["Content-Type"] = "application/octet-stream"
        conn.request(method, url, body=body, headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        status = r.status
        retry_after = r.getheader("Retry-After")
        if raw and status == 200:
            answer = data.decode(errors="replace")
        else:
            try:
                answer = json.loads(data)
            except ValueError:
                answer = data[:500].decode(errors="replace")
        if retry_after:
            rec["retry_after"] = retry_after
    except (OSError, http.client.HTTPException) as e:
        status, answer = "error", f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    rec.update(end=round(history.now(), 3), status=status, answer=answer)
    history.record(rec)
    return status, answer


def q(sid):
    return urllib.parse.quote(sid, safe="")


class Workload:
    """`workers` threads running random operations until stop()."""

    def __init__(self, cluster, history, run_tag, seed, workers=3, max_live=12):
        self.cluster = cluster
        self.history = history
        self.tag = run_tag
        self.seed = seed
        self.workers = workers
        self.max_live = max_live
        self.stop_flag = threading.Event()
        self.threads = []
        self.lock = threading.Lock()
        self.live = []  # sandbox ids answered and not deleted
        self.next_rid = 0
        self.recent_rids = []  # (rid, first entry node) for retries

    def entry(self, rng):
        up = [n for n in self.cluster.nodes if n.alive() and not n.stopped]
        return rng.choice(up or self.cluster.nodes)

    def start(self):
        for w in range(self.workers):
            t = threading.Thread(target=self._run, args=(w,), daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self):
        self.stop_flag.set()
        for t in self.threads:
            t.join(CALL_TIMEOUT_S + 10)

    def _pick(self, rng):
        with self.lock:
            return rng.choice(self.live) if self.live else None

    def _run(self, w):
        rng = random.Random(self.seed * 1000 + w)
        n = 0
        while not self.stop_flag.is_set():
            n += 1
            ops = ["exec", "write", "read", "write", "read", "pause", "delete", "snapshot"]
            with self.lock:
                few = len(self.live) < self.max_live
            op = "create" if few and rng.random() < 0.5 else rng.choice(ops)
            try:
                getattr(self, "op_" + op)(rng, w, n)
            except Exception as e:  # a bug in the workload, not the cluster
                self.history.event("workload-error", worker=w, op=op, error=repr(e))
            time.sleep(rng.uniform(0.02, 0.15))

    # -- operations ---------------------------------------------------------------

    def op_create(self, rng, w, n):
        with self.lock:
            retry = self.recent_rids and rng.random() < 0.25
            if retry:
                rid = rng.choice(self.recent_rids)
            else:
                self.next_rid += 1
                rid = f"{self.tag}-w{w}-{self.next_rid}"
                self.recent_rids = (self.recent_rids + [rid])[-8:]
        body = {"layers": [BUSYBOX], "memory_mb": 64, "ttl_s": 7200, "request_id": rid,
                "labels": {"dsf": self.tag, "rid": rid}}
        status, out = call(self.entry(rng), self.history, "create", "POST", "/v1/sandboxes",
                           body, rid=rid)
        if status in (200, 201) and isinstance(out, dict) and "id" in out:
            with self.lock:
                if out["id"] not in self.live:
                    self.live.append(out["id"])

    def op_exec(self, rng, w, n):
        sid = self._pick(rng)
        if sid:
            call(self.entry(rng), self.history, "exec", "POST", f"/v1/sandboxes/{q(sid)}/exec",
                 {"cmd": "echo ok-$((20+22))", "timeout_s": 10}, sid=sid)

    def op_write(self, rng, w, n):
        sid = self._pick(rng)
        if sid:
            value = f"{self.tag}:{w}:{n}:{rng.random():.6f}\n"
            call(self.entry(rng), self.history, "write", "PUT",
                 f"/v1/sandboxes/{q(sid)}/files?path=/tmp/dsf.txt", value.encode(), sid=sid,
                 path="/tmp/dsf.txt", value=value)

    def op_read(self, rng, w, n):
        sid = self._pick(rng)
        if sid:
            call(self.entry(rng), self.history, "read", "GET",
                 f"/v1/sandboxes/{q(sid)}/files?path=/tmp/dsf.txt", raw=True, sid=sid,
                 path="/tmp/dsf.txt")

    def op_pause(self, rng, w, n):
        sid = self._pick(rng)
        if sid:
            call(self.entry(rng), self.history, "pause", "POST", f"/v1/sandboxes/{q(sid)}/pause",
                 {}, sid=sid)
            call(self.entry(rng), self.history, "resume", "POST",
                 f"/v1/sandboxes/{q(sid)}/resume", {}, sid=sid)

    def op_snapshot(self, rng, w, n):
        sid = self._pick(rng)
        if sid and rng.random() < 0.3:  # they add layers to the run's store: few
            call(self.entry(rng), self.history, "snapshot", "POST",
                 f"/v1/sandboxes/{q(sid)}/snapshot", {}, sid=sid)

    def op_delete(self, rng, w, n):
        with self.lock:
            if len(self.live) < self.max_live // 2:
                return
            sid = rng.choice(self.live)
            self.live.remove(sid)  # no more calls on it from here
        status, _ = call(self.entry(rng), self.history, "delete", "DELETE",
                         f"/v1/sandboxes/{q(sid)}", sid=sid)
        if status != 200:
            with self.lock:  # not known gone: keep using it
                self.live.append(sid)
