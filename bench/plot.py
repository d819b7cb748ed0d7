#!/usr/bin/env python3
"""Plot a `dsec bench burst` JSON report as one PNG: one panel per metric, one
bar per system (dsec, crun, bwrap) side by side, the value printed on each bar
and "n/a" where a system cannot do the operation (bwrap has no exec).

usage: python3 bench/plot.py REPORT.json [OUT.png]   (default OUT: REPORT.png)
needs: python3-matplotlib (apt-get install python3-matplotlib)
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # no display on the bench machines
import matplotlib.pyplot as plt  # noqa: E402

# (metric key, panel title, lower_is_better)
METRICS = [
    ("create_first_output_p50_ms", "create + first output p50 (ms)", True),
    ("create_first_output_p99_ms", "create + first output p99 (ms)", True),
    ("exec_true_p50_ms", "exec true p50 (ms)", True),
    ("exec_true_p99_ms", "exec true p99 (ms)", True),
    ("burst_create_per_s", "burst create (sandboxes/s)", False),
    ("burst_destroy_per_s", "burst destroy (sandboxes/s)", False),
    ("idle_mb_per_sandbox", "memory per idle sandbox (MB)", True),
]
COLORS = {"dsec": "#1f77b4", "crun": "#ff7f0e", "bwrap": "#2ca02c"}


def systems_with_metrics(report):
    """Systems that produced metrics: dsec, crun, bwrap, then any other."""
    systems = report.get("systems", {})
    order = ["dsec", "crun", "bwrap"]
    names = sorted(systems, key=lambda n: (order.index(n) if n in order else len(order), n))
    return [(n, systems[n]["metrics"]) for n in names if "metrics" in systems[n]]


def draw_panel(ax, title, lower_is_better, values):
    """One metric: a bar per system, labelled with its value or n/a."""
    names = [n for n, _ in values]
    heights = [v if isinstance(v, (int, float)) else 0 for _, v in values]
    bars = ax.bar(names, heights, color=[COLORS.get(n, "#7f7f7f") for n in names])
    top = max(heights) if any(heights) else 1
    for bar, (_, v) in zip(bars, values):
        label = "n/a" if v is None else f"{v:g}"
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height() + top * 0.02, label,
                ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, top * 1.2)
    ax.set_title(title + (" ↓" if lower_is_better else " ↑"), fontsize=9)
    ax.tick_params(labelsize=8)


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        report = json.load(f)
    out = argv[2] if len(argv) > 2 else argv[1].rsplit(".", 1)[0] + ".png"
    systems = systems_with_metrics(report)
    if not systems:
        print(f"plot: {argv[1]} has no system with metrics", file=sys.stderr)
        return 1
    cols = 4
    rows = (len(METRICS) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows))
    for ax, (key, title, lower) in zip(axes.flat, METRICS):
        draw_panel(ax, title, lower, [(n, m.get(key)) for n, m in systems])
    for ax in list(axes.flat)[len(METRICS):]:
        ax.axis("off")
    m = report.get("machine", {})
    fig.suptitle(f"dsec bench burst — kernel {m.get('kernel', '?')}, {m.get('cores', '?')} cores, "
                 f"load {m.get('loadavg_1m_start', '?')}→{m.get('loadavg_1m_end', '?')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
