#!/usr/bin/env python3
"""Plots a dsec-gossip-sim report: convergence and failure detection times, and
per-node traffic, against cluster size N (log scale).

    python3 bench/gossip/plot.py bench/results/gossip-sim-<date>.json [out.png]
"""
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    src = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else src.rsplit(".", 1)[0] + ".png"
    runs = sorted(json.load(open(src))["runs"], key=lambda r: r["n"])
    n = [r["n"] for r in runs]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot(n, [r["converge_s"] for r in runs], "o-", label="join: all converge")
    a.plot(n, [r["detect_all_dead_s"] for r in runs], "s-", label="kill: all mark dead")
    a.set_xscale("log")
    a.set_xlabel("nodes (N)")
    a.set_ylabel("simulated seconds")
    a.set_title("convergence and detection")
    a.grid(True, which="both", alpha=0.3)
    a.legend()
    b.plot(n, [r["packets_per_node_s"] for r in runs], "o-", label="packets / node / s")
    b.plot(n, [(r["packet_bytes_per_node_s"] + r["stream_bytes_per_node_s"]) / 1000 for r in runs],
           "s-", label="kB / node / s")
    b.set_xscale("log")
    b.set_xlabel("nodes (N)")
    b.set_title("per-node load")
    b.grid(True, which="both", alpha=0.3)
    b.legend()
    fig.suptitle("dsec gossip (SWIM + suspicion), in-memory simulation; "
                 "false deaths at 1%/5% loss: "
                 + ", ".join(f"N={r['n']}: {sum(l['false_deaths'] for l in r['lossy'])}"
                             for r in runs), fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
