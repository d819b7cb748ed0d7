#!/usr/bin/env python3
"""Egress by name with DNS closed (issue 29), side by side in one run:

  - request latency (new TCP connection, GET /, answer) to the mirror with a
    NAMED rule (the "pypi" source: the address its name resolved to, with
    the node's Host check on port 80) against a CIDR rule for the mirror's
    other address (no check), in two sandboxes on one node;
  - DNS answer latency of the node's resolver (the sandbox's nameserver:
    policy check, relay upstream, answer parsed, addresses opened) against
    the same query sent straight to the upstream (dnsmasq, allowed by an
    address rule for this bench only), from the same sandbox; and a refused
    lookup (answered by the node without going upstream);
  - HTTPS download throughput through the SNI check (named rule on 443)
    against the same server reached by a CIDR rule (no check).

  sudo python3 bench/egress_bench.py --dsec build/cmd/dsec \
      [--store /var/lib/dsec-test/store] [--n 300] [--mb 200]

Prints JSON and writes it to bench/results/egress-<date>.json, with the load
average before and after (the machine is shared: compare the ratios).
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchlib import Rest, free_port

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "test" / "pylib"))
from egress_peer import MirrorPeer  # noqa: E402

# Runs inside a sandbox: n TCP connects (connect + close) to ip:port, or n
# A queries of `name` to `server`; prints latency percentiles in ms.
CLIENT = r'''
import json, random, socket, ssl, struct, sys, time
mode, n = sys.argv[1], int(sys.argv[2])
lat = []
if mode == "get":
    host, ip = sys.argv[3], sys.argv[4]
    req = ("GET / HTTP/1.0\r\nHost: " + host + "\r\n\r\n").encode()
    for _ in range(n):
        t = time.perf_counter()
        s = socket.create_connection((ip, 80), timeout=10); s.sendall(req)
        while s.recv(65536): pass
        s.close()
        lat.append(time.perf_counter() - t)
elif mode == "https":
    host, ip, size = sys.argv[3], sys.argv[4], int(sys.argv[5])
    ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
    got = 0
    t = time.perf_counter()
    for _ in range(n):
        s = ctx.wrap_socket(socket.create_connection((ip, 443), timeout=30), server_hostname=host)
        s.sendall(("GET /bytes/%d HTTP/1.0\r\nHost: %s\r\n\r\n" % (size, host)).encode())
        while True:
            d = s.recv(1 << 20)
            if not d: break
            got += len(d)
        s.close()
    dt = time.perf_counter() - t
    print(json.dumps({"n": n, "bytes": got, "seconds": round(dt, 3),
                      "mb_per_s": round(got / dt / 1e6, 1)}))
    sys.exit(0)
else:
    server, name = sys.argv[3], sys.argv[4]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
    def q():
        h = struct.pack(">HHHHHH", random.randint(0, 65535), 0x0100, 1, 0, 0, 0)
        for l in name.split("."): h += bytes([len(l)]) + l.encode()
        return h + b"\0" + struct.pack(">HH", 1, 1)
    rcode = None
    for _ in range(n):
        t = time.perf_counter()
        s.sendto(q(), (server, 53)); a = s.recv(4096)
        lat.append(time.perf_counter() - t)
        rcode = a[3] & 15
lat.sort()
pct = lambda p: round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 3)
print(json.dumps({"n": n, "p50_ms": pct(0.5), "p90_ms": pct(0.9), "p99_ms": pct(0.99),
                  "mean_ms": round(sum(lat) / len(lat) * 1000, 3)}
                 | ({"rcode": rcode} if mode == "dns" else {})))
'''


def run_in(rest, sid, args):
    r = rest.call("POST", f"/v1/sandboxes/{sid}/exec",
                  {"cmd": ["python3", "/tmp/egress_client.py"] + [str(a) for a in args],
                   "timeout_s": 600})
    assert r["exit_code"] == 0, r
    return json.loads(r["stdout"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsec", default=str(ROOT / "build" / "cmd" / "dsec"))
    ap.add_argument("--store", default="/var/lib/dsec-test/store")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--mb", type=int, default=200, help="HTTPS bytes per mode, MB")
    a = ap.parse_args()
    load_before = os.getloadavg()
    peer = MirrorPeer()
    state = tempfile.mkdtemp(prefix="dsec-egress-bench-", dir="/var/tmp")
    rest_addr = f"127.0.0.1:{free_port()}"
    log = open(state + ".log", "wb")
    node = subprocess.Popen(
        [a.dsec, "node", "--state-dir", state, "--store", a.store, "--rest", rest_addr,
         "--listen", f"127.0.0.1:{free_port()}", "--node-id", f"egress-bench-{os.getpid()}",
         "--zram-mb", "0", "--egress-sources", peer.sources(os.path.join(peer.dir, "s.json")),
         "--dns-upstream", peer.upstream], stdout=log, stderr=subprocess.STDOUT)
    made = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://{rest_addr}/healthz", timeout=2).read()
                break
            except Exception:
                if time.monotonic() > deadline or node.poll() is not None:
                    raise RuntimeError("node did not start; see " + state + ".log")
                time.sleep(0.2)
        rest = Rest(rest_addr)
        spec = {"layers": ["base/python@3.11"], "memory_mb": 256}
        named = rest.call("POST", "/v1/sandboxes",
                          dict(spec, network={"allow": ["pypi", f"{peer.pypi}:53"]}))["id"]
        # The mirror's other address, which no named rule reaches: no check.
        cidr = rest.call("POST", "/v1/sandboxes",
                         dict(spec, network={"allow": [f"{peer.npm}/32:80",
                                                       f"{peer.npm}/32:443"]}))["id"]
        made += [named, cidr]
        for sid in (named, cidr):
            urllib.request.urlopen(urllib.request.Request(
                f"http://{rest_addr}/v1/sandboxes/{sid}/files?path=/tmp/egress_client.py",
                data=CLIENT.encode(), method="PUT")).read()
        ns = rest.call("POST", f"/v1/sandboxes/{named}/exec",
                       {"cmd": ["sh", "-c", "awk '/^nameserver/{print $2; exit}' /etc/resolv.conf"]}
                       )["stdout"].strip()
        out = {"bench": "egress", "date": datetime.datetime.utcnow().isoformat() + "Z",
               "loadavg_before": load_before}
        out["get_named_rule_host_checked"] = run_in(rest, named,
                                                    ["get", a.n, "pypi.mirror.test", peer.pypi])
        out["get_cidr_rule"] = run_in(rest, cidr, ["get", a.n, "npm.mirror.test", peer.npm])
        out["dns_node_resolver"] = run_in(rest, named, ["dns", a.n, ns, "pypi.mirror.test"])
        out["dns_direct_upstream"] = run_in(rest, named, ["dns", a.n, peer.pypi,
                                                          "pypi.mirror.test"])
        out["dns_refused_by_node"] = run_in(rest, named, ["dns", a.n, ns, "x.attacker.test"])
        size = 10 * 1000 * 1000
        k = max(1, a.mb * 1000 * 1000 // size)
        out["https_named_rule_sni_checked"] = run_in(rest, named,
                                                     ["https", k, "pypi.mirror.test", peer.pypi,
                                                      size])
        out["https_cidr_rule"] = run_in(rest, cidr, ["https", k, "npm.mirror.test", peer.npm, size])
        g, c = out["get_named_rule_host_checked"]["p50_ms"], out["get_cidr_rule"]["p50_ms"]
        out["get_named_minus_cidr_p50_ms"] = round(g - c, 3)
        r, u = out["dns_node_resolver"]["p50_ms"], out["dns_direct_upstream"]["p50_ms"]
        out["dns_resolver_overhead_p50_ms"] = round(r - u, 3)
        h1 = out["https_named_rule_sni_checked"]["mb_per_s"]
        h0 = out["https_cidr_rule"]["mb_per_s"]
        out["https_sni_check_throughput_ratio"] = round(h1 / h0, 3) if h0 else None
        out["loadavg_after"] = os.getloadavg()
    finally:
        for sid in made:  # a stopped node keeps its sandboxes: delete them first
            try:
                Rest(rest_addr).call("DELETE", f"/v1/sandboxes/{sid}")
            except Exception as e:
                print(f"delete {sid}: {e}", file=sys.stderr)
        node.send_signal(signal.SIGTERM)
        try:
            node.wait(timeout=60)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait()
        log.close()
        peer.close()
        shutil.rmtree(state, ignore_errors=True)
    print(json.dumps(out, indent=2))
    res = ROOT / "bench" / "results"
    res.mkdir(exist_ok=True)
    (res / f"egress-{datetime.date.today().isoformat()}.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
