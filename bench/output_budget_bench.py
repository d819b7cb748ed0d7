# The node-wide output budget (issue 29 part 4), measured: a node with a given
# --output-budget-mb, N background `yes` spread over sandboxes (each sends
# init's 16 MiB and then is drained and dropped), and the node's RSS before,
# once all output arrived, and after the sandboxes are destroyed. One JSON
# line per budget, side by side in one run:
#
#   DSEC_BIN=build/cmd/dsec DSEC_TEST_STORE=/var/lib/dsec-test/store \
#     /usr/bin/python3 bench/output_budget_bench.py --budgets 0,32,256 --floods 6
import argparse
import json
import re
import sys
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test" / "pylib"))
from dsec_harness import PYTHON, Node, _finish_node, wait_for  # noqa: E402

CAP = 16 << 20


def metric(node, name):
    _, _, body = node.client.raw("GET", "/metrics")
    m = re.search(rf'^{name}{{node="[^"]*"}} (\d+)$', body.decode(), re.M)
    return int(m.group(1))


def rss_mb(node):
    with open(f"/proc/{node.proc.pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024


def run(dsec_bin, store, budget_mb, floods):
    node = Node(dsec_bin, store, extra_args=["--output-budget-mb", str(budget_mb)]).start()
    try:
        c = node.client
        sids = [c.create_ok([PYTHON], memory_mb=256) for _ in range(2)]
        c.sh(sids[0], "true")
        time.sleep(1)
        rss0 = rss_mb(node)
        t0 = time.monotonic()
        for i in range(floods):
            sid = urllib.parse.quote(sids[i % 2], safe="")
            status, out = c.call("POST", f"/v1/sandboxes/{sid}/exec?background=1", {"cmd": "yes"})
            assert status == 201, out
        wait_for(lambda: metric(node, "dsec_output_kept_bytes")
                 + metric(node, "dsec_output_dropped_bytes_total") >= floods * CAP, 600,
                 interval=0.5, what="all output")
        arrived_s = time.monotonic() - t0
        rss_during = rss_mb(node)
        kept = metric(node, "dsec_output_kept_bytes")
        for sid in sids:
            c.delete(sid)
        wait_for(lambda: metric(node, "dsec_output_kept_bytes") == 0, 60, what="given back")
        time.sleep(2)
        return {"budget_mb": budget_mb, "floods": floods, "output_mb": floods * CAP >> 20,
                "kept_mb": round(kept / (1 << 20), 1),
                "peak_kept_mb": round(metric(node, "dsec_output_kept_peak_bytes") / (1 << 20), 1),
                "dropped_mb": round(metric(node, "dsec_output_dropped_bytes_total") / (1 << 20), 1),
                "rss_before_mb": round(rss0, 1), "rss_during_mb": round(rss_during, 1),
                "rss_after_mb": round(rss_mb(node), 1), "arrived_s": round(arrived_s, 1)}
    finally:
        _finish_node(node)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budgets", default="0,32,256")
    ap.add_argument("--floods", type=int, default=6)
    a = ap.parse_args()
    import os
    for b in a.budgets.split(","):
        print(json.dumps(run(os.environ["DSEC_BIN"], os.environ["DSEC_TEST_STORE"], int(b),
                             a.floods)), flush=True)


if __name__ == "__main__":
    main()
