#!/usr/bin/env python3
"""Plots a dsec-gossip-sim report: convergence and failure detection times, and
per-node traffic, against cluster size N (log scale).

    python3 bench/gossip/plot.py bench/results/gossip-sim-<date>.json [out.png]

A scale-unit report (dsec-gossip-sim --scale-unit) gets its own figure: how
evenly the burst and the churn spread (max/mean per node, against placing at
random), with detection, false deaths and gossip bytes in the title; a second
report (an earlier configuration) is drawn dashed beside it:

    python3 bench/gossip/plot.py scale-unit.json [out.png] [--before=old.json]
"""
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_scale(src, out, before):
    """Evenness over time of a scale-unit run (and of an earlier one, dashed)."""
    runs = [("now", json.load(open(src)), "-")]
    if before:
        runs.append(("before", json.load(open(before)), "--"))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, phase in zip(axes, ["burst", "churn"]):
        for name, r, style in runs:
            s = [w for w in r[phase]["series"] if w["window_s"] == 1]  # whole windows
            t = [w["t_s"] - s[0]["t_s"] + w["window_s"] for w in s]
            ax.plot(t, [w["resident_max_over_mean"] for w in s], style, color="#1f77b4",
                    label=f"{name}: sandboxes per node")
            ax.plot(t, [w["window_admits_max_over_mean"] for w in s], style, color="#ff7f0e",
                    label=f"{name}: creates admitted per node in 1 s")
        s = [w for w in runs[0][1][phase]["series"] if w["window_s"] == 1]
        t = [w["t_s"] - s[0]["t_s"] + w["window_s"] for w in s]
        ax.plot(t, [w["random_resident_max_over_mean"] for w in s], ":", color="gray",
                label="sandboxes per node, placed at random")
        ax.axhline(1.2, color="red", lw=0.8, alpha=0.5)
        ax.set_ylim(0.9, 4)
        ax.set_xlabel("seconds into the phase")
        ax.set_ylabel("max / mean over nodes")
        ax.set_title(f"{phase}: {runs[0][1]['rate_per_s']:.0f} creates/s"
                     + (" + as many deletes, a kill at 5 s, joins at 10 s" if phase == "churn"
                        else f" up to {runs[0][1]['per_node'] * runs[0][1]['nodes']:,} sandboxes"),
                     fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)

    def summary(name, r):
        # Reports before the ring (issue 28 part 3) have no "spread": best-of-k.
        spread = r.get("spread", "sample")
        how = "ring" if spread == "ring" else f"best-of-{r['k']}"
        fwd = r["burst"]["forwards_histogram"]
        once = fwd.get("1", 0) / max(1, sum(fwd.values()))
        return (f"{name}: {how} (forwarded once {once:.0%}), kill dead everywhere {r['churn']['kill_all_mark_dead_s']} s "
                f"({r['lossy']['kill_all_mark_dead_s']} s at {r['lossy']['loss']:.0%} loss), "
                f"false deaths {r['lossy']['false_deaths']}, "
                f"forwarded >2x {r['burst']['creates_forwarded_more_than_twice']}, "
                f"gossip {r['burst']['gossip_bytes_per_node_s'] / 1000:.1f} kB/node/s")
    fig.suptitle(f"dsec scale unit, {runs[0][1]['nodes']} simulated nodes\n"
                 + "\n".join(summary(n, r) for n, r, _ in runs), fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--before=")]
    before = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--before=")), None)
    src = args[0]
    if "burst" in json.load(open(src)):
        out = args[1] if len(args) > 1 else src.rsplit(".", 1)[0] + ".png"
        return plot_scale(src, out, before)
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
