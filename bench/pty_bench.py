"""Keystroke-to-echo latency through a sandbox terminal (issue 26 part 1).

One byte is typed at a shell on a pty (canonical mode, echo on) and the clock
stops when the terminal echoes it back: over the Python SDK (pty_write, the
echo pushed back through the follow stream) and over the REST WebSocket
(a binary message each way). p50 and p99 per path, as JSON under
bench/results/. Target: p50 <= 5 ms.

    python3 bench/pty_bench.py --start          # a private node for the run
    python3 bench/pty_bench.py --addr 127.0.0.1:7700 --rest 127.0.0.1:7070
"""

import argparse
import json
import os
import statistics
import sys
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "pylib"))

import benchlib  # noqa: E402
from ws_client import WebSocket  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summary(ms):
    return {"samples": len(ms), "p50_ms": round(pct(ms, 50), 3), "p99_ms": round(pct(ms, 99), 3),
            "mean_ms": round(statistics.mean(ms), 3), "max_ms": round(max(ms), 3)}


def keys(n):
    # Printable bytes that a shell's line editor echoes as themselves.
    alphabet = b"abcdefghijklmnopqrstuvwxyz"
    return [alphabet[i % len(alphabet):i % len(alphabet) + 1] for i in range(n)]


def sdk_latency(sb, samples, warmup):
    t = sb.pty(["/bin/sh"], cols=200, rows=50)
    t.write("stty -icanon; PS1=''\n")  # byte-at-a-time, no prompt redraws
    t.read_until("PS1=''", 10)
    t.read(timeout=0.5)
    out = []
    for i, k in enumerate(keys(samples + warmup)):
        if i and i % 150 == 0:  # keep the line short: erase it
            t.write(b"\x15")
            t.read(timeout=0.2)
        t0 = time.perf_counter()
        t.write(k)
        got = b""
        while k not in got:
            got += t.read(timeout=5)
        if i >= warmup:
            out.append((time.perf_counter() - t0) * 1000)
    t.kill()
    return out


def ws_latency(rest, sid, samples, warmup):
    host, port = rest.rsplit(":", 1)
    ws = WebSocket(host, int(port), f"/v1/sandboxes/{urllib.parse.quote(sid, safe='')}/pty"
                                    "?cmd=exec%20/bin/sh&cols=200&rows=50")
    ws.recv(timeout=10)  # started
    ws.send_binary(b"stty -icanon; PS1=''\n")
    time.sleep(1)
    while True:
        try:
            ws.recv(timeout=0.3)
        except OSError:
            break
    out = []
    for i, k in enumerate(keys(samples + warmup)):
        if i and i % 150 == 0:
            ws.send_binary(b"\x15")
            time.sleep(0.05)
            while True:
                try:
                    ws.recv(timeout=0.1)
                except OSError:
                    break
        t0 = time.perf_counter()
        ws.send_binary(k)
        got = b""
        while k not in got:
            is_text, data = ws.recv(timeout=5)
            if is_text is False:
                got += data
        if i >= warmup:
            out.append((time.perf_counter() - t0) * 1000)
    ws.send_text({"type": "kill"})
    ws.close()
    return out


def run(addr, rest, samples, warmup, layers):
    sys.path.insert(0, os.path.join(HERE, "..", "build", "bindings", "python"))
    import dsec
    c = dsec.Client(addr)
    sb = c.create(layers, cpu=1, memory_mb=256)
    try:
        sdk = sdk_latency(sb, samples, warmup)
        ws = ws_latency(rest, sb.id, samples, warmup)
    finally:
        sb.destroy()
        c.close()
    return {"bench": "pty_echo", "unit": "ms", "target_p50_ms": 5.0, "layers": layers,
            "sdk": summary(sdk), "websocket": summary(ws),
            "cores": os.cpu_count(), "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--addr", default=os.environ.get("DSEC_ADDR", "127.0.0.1:7700"),
                    help="node native address (--listen)")
    ap.add_argument("--rest", default="127.0.0.1:7070", help="node REST address")
    ap.add_argument("--start", action="store_true", help="start a private node for the run")
    ap.add_argument("--dsec-bin", default="build/cmd/dsec")
    ap.add_argument("--store", default="/var/lib/dsec-test/store")
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--layers", default="base/busybox@1")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "pty_bench.json"))
    a = ap.parse_args()
    layers = a.layers.split(",")
    if a.start:
        with benchlib.private_node(a.dsec_bin, a.store, "pty-bench") as (rest, listen):
            res = run(listen, rest, a.samples, a.warmup, layers)
    else:
        res = run(a.addr, a.rest, a.samples, a.warmup, layers)
    res["target_met"] = res["sdk"]["p50_ms"] <= 5.0 and res["websocket"]["p50_ms"] <= 5.0
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
