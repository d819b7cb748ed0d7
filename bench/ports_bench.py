#!/usr/bin/env python3
"""Ports (issue 26 part 3): requests per second and latency of a small HTTP
server inside a container sandbox, reached through the node's port proxy
(/v1/sandboxes/ID/ports/PORT/ from the host) against the same server
reached directly from inside the sandbox (the same load client run there on
127.0.0.1), side by side in one run. The server is
test/e2e/ports/port_server.py (python's ThreadingHTTPServer); the client is
the stdlib load loop below, run once per mode with the same request count.

  sudo python3 bench/ports_bench.py --dsec build/cmd/dsec \
      [--store /var/lib/dsec-test/store] [--requests 2000] [--conns 1,8] \
      [--baseline OLD_DSEC]

Prints JSON and writes it to bench/results/ports-<date>.json. Target: proxy
overhead (proxied p50 - direct p50) <= 1 ms. Also measured, for where the
time goes: one REST round trip that asks the sandbox's actor through the
node's front (GET /v1/sandboxes/ID, what every proxied request cost before
routes were remembered), and, with --baseline, the proxied runs against an
older dsec binary on a node of its own in the same run. The machine's load
average before and after is recorded: on a shared machine compare ratios.
"""
import argparse
import datetime
import json
import os
import sys
import time
import urllib.parse
from pathlib import Path

from benchlib import Rest, private_node

ROOT = Path(__file__).resolve().parents[1]
SERVER = (ROOT / "test" / "e2e" / "ports" / "port_server.py").read_bytes()

# The load client, run on the host (through the proxy) and inside the sandbox
# (directly): `conns` threads, each on one keep-alive connection (or a new
# connection per request with fresh=1), `n` GETs in all; prints JSON.
CLIENT = r'''
import http.client, json, sys, threading, time
host, port, path, n, conns, fresh = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1"
lat, lock = [], threading.Lock()
def worker(k):
    c = None
    mine = []
    for _ in range(k):
        if c is None or fresh:
            c = http.client.HTTPConnection(host, port, timeout=30)
        t = time.perf_counter()
        c.request("GET", path)
        r = c.getresponse(); r.read()
        mine.append(time.perf_counter() - t)
        assert r.status == 200, r.status
        if fresh:
            c.close()
    with lock:
        lat.extend(mine)
per = [n // conns] * conns
for _ in range(10):  # warm-up
    c = http.client.HTTPConnection(host, port, timeout=30); c.request("GET", path); c.getresponse().read(); c.close()
t0 = time.perf_counter()
ts = [threading.Thread(target=worker, args=(k,)) for k in per]
[t.start() for t in ts]; [t.join() for t in ts]
wall = time.perf_counter() - t0
lat.sort()
print(json.dumps({"requests": len(lat), "rps": round(len(lat) / wall, 1),
                  "p50_ms": round(lat[len(lat) // 2] * 1e3, 3),
                  "p99_ms": round(lat[int(len(lat) * 0.99)] * 1e3, 3)}))
'''


def run_inside(rest, sid, args):
    r = rest.call("POST", f"/v1/sandboxes/{urllib.parse.quote(sid, safe='')}/exec",
                  {"cmd": ["python3", "/tmp/load.py", *map(str, args)], "timeout_s": 600})
    if r["exit_code"] != 0:
        raise RuntimeError(r["stderr"][-2000:])
    return json.loads(r["stdout"])


def run_host(args):
    import subprocess
    p = subprocess.run([sys.executable, "-c", CLIENT, *map(str, args)], capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    return json.loads(p.stdout)


def measure(dsec, store, node_id, conns, requests, baseline_only=False):
    """One node: a sandbox running the port server; the runs per connection count."""
    runs, lookup = [], None
    with private_node(dsec, store, node_id) as (rest_addr, _):
        rest = Rest(rest_addr)
        sid = rest.call("POST", "/v1/sandboxes", {"layers": ["base/python@3.11"], "cpu": 2,
                                                   "memory_mb": 512})["id"]
        q = urllib.parse.quote(sid, safe="")
        for path, data in (("/tmp/port_server.py", SERVER), ("/tmp/load.py", CLIENT.encode())):
            st, body = rest_put(rest_addr, f"/v1/sandboxes/{q}/files?path={path}", data)
            assert st == 200, body
        rest.call("POST", f"/v1/sandboxes/{q}/exec?background=1",
                  {"cmd": ["python3", "/tmp/port_server.py", "8000"]})
        host, port = rest_addr.rsplit(":", 1)
        proxied = f"/v1/sandboxes/{q}/ports/8000/"
        for _ in range(100):
            try:
                run_host([host, port, proxied, 1, 1, 0])
                break
            except RuntimeError:
                time.sleep(0.2)
        if not baseline_only:
            lookup = run_host([host, port, f"/v1/sandboxes/{q}", requests, 1, 0])
        for c in conns:
            via = run_host([host, port, proxied, requests, c, 0])
            if baseline_only:
                runs.append({"conns": c, "proxied": via})
                continue
            direct = run_inside(rest, sid, ["127.0.0.1", 8000, "/", requests, c, 0])
            direct_fresh = run_inside(rest, sid, ["127.0.0.1", 8000, "/", requests, c, 1])
            runs.append({
                "conns": c, "direct_keepalive": direct, "direct_new_conn_each": direct_fresh,
                "proxied": via,
                "overhead_p50_ms_vs_keepalive": round(via["p50_ms"] - direct["p50_ms"], 3),
                "overhead_p50_ms_vs_new_conn": round(via["p50_ms"] - direct_fresh["p50_ms"], 3),
                "rps_ratio_proxied_to_direct": round(via["rps"] / direct["rps"], 3)})
        rest.call("DELETE", f"/v1/sandboxes/{q}")
    return runs, lookup


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsec", default=str(ROOT / "build" / "cmd" / "dsec"))
    ap.add_argument("--store", default="/var/lib/dsec-test/store")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--conns", default="1,8")
    ap.add_argument("--out", default=None)
    ap.add_argument("--baseline", default=None,
                    help="an older dsec binary whose proxied runs are measured too")
    a = ap.parse_args()
    conns = [int(x) for x in a.conns.split(",")]
    out = {"bench": "ports", "date": datetime.datetime.utcnow().isoformat(timespec="seconds") + "Z",
           "requests_per_run": a.requests, "server": "python3 ThreadingHTTPServer in the sandbox",
           "cpus": os.cpu_count(), "runs": []}
    out["loadavg_before"] = [round(x, 2) for x in os.getloadavg()]
    out["runs"], out["rest_lookup_through_front"] = measure(a.dsec, a.store, "portbench", conns,
                                                           a.requests)
    if a.baseline:
        base, _ = measure(a.baseline, a.store, "portbase", conns, a.requests, True)
        out["baseline"] = {"dsec": a.baseline, "runs": base}
    out["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    out["target"] = "proxied p50 - direct p50 <= 1 ms"
    text = json.dumps(out, indent=2)
    print(text)
    dest = Path(a.out) if a.out else ROOT / "bench" / "results" / (
        f"ports-{datetime.date.today().isoformat()}.json")
    dest.write_text(text + "\n")


def rest_put(where, path, data):
    import http.client
    host, port = where.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=60)
    c.request("PUT", path, body=data, headers={"Content-Type": "application/octet-stream"})
    r = c.getresponse()
    return r.status, r.read()


if __name__ == "__main__":
    main()
